"""Load-driven adaptation of the PSP ring: new slice weights from each operator's measured load.

The driver asks every operator for its load (the share of wall time its CPU was busy since the
last request) every `adapt_every` epochs and calls `rebalance`. Three moves, in this order:
- add an operator: every operator holding state is busier than `grow_above` and an operator
  without state exists: it gets the mean weight (and the next operators' slices shift);
- remove an operator: more than one holds state, the windows are full and all are idler than
  `shrink_below`: the last one's weight goes to 0 (its state moves on to the tail side);
- smooth: otherwise, when the busiest operator is busier than the idlest by more than
  `imbalance`, each weight is scaled by mean load / its load (between 1/2 and 2), so busy
  operators get narrower slices.
The slicer applies new weights passively or aggressively (slicing.py).
"""


def rebalance(weights, busy, grow_above=0.85, shrink_below=0.15, imbalance=0.25, windows_full=True):
    """New weights, or None to keep them. `busy[k]` is operator k+1's load in [0, 1]."""
    w = [float(x) for x in weights]
    active = [k for k, x in enumerate(w) if x > 0]
    idle = [k for k, x in enumerate(w) if x == 0]
    loads = [busy[k] for k in active]
    if not active:
        return None
    mean_w = sum(w[k] for k in active) / len(active)
    if idle and min(loads) > grow_above:
        out = list(w)
        out[idle[0]] = mean_w
        return out
    if len(active) > 1 and windows_full and max(loads) < shrink_below:
        out = list(w)
        out[active[-1]] = 0.0
        return out
    if len(active) > 1 and max(loads) - min(loads) > imbalance:
        mean_l = sum(loads) / len(loads)
        out = list(w)
        for k in active:
            out[k] = w[k] * min(2.0, max(0.5, mean_l / max(busy[k], 1e-3)))
        total = sum(out)
        return [x * len(active) / total * mean_w for x in out]
    return None
