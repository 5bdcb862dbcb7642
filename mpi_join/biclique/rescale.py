"""The join-biclique resumed from a checkpoint at another rank count (`run --resume` with
another -n; slaves/cuts.restore_rescaled calls the roles' `restore_rescaled`).

- Units: every stored tuple goes to the unit of its side that the routing table of a start
  stores it at (`start_members`: ContRand picks the subgroup by the key's hash and the unit by
  the seq, routing.py), so the resumed run's dispatchers send each new tuple of the other side
  to the units that may hold its partners. Stored tuples met before the cut and do not meet
  again (a unit joins what arrives with what it holds).
- A unit cut before the last batches of another dispatcher (several dispatchers) holds them as
  channel state: batches of the input before the cut that it had not joined yet. Each new unit
  of that side joins them as the old unit would have, against the rows it takes from that old
  unit (stored, or stored by an earlier such batch; the chained index keeps the pairs whose
  probe is the newer by seq), so every pair of them is found once; it writes those results as it
  restores. It takes the new run's first batch as the next in order (a run of another
  run.sources numbers its batches otherwise).
- The merger's view takes the old merger's, the views in its channel state and the units'
  views not sent yet: the aggregate of every result up to the cut.
- The shuffler routes by the table of a start (2PS begins again from it)."""
import numpy as np

from ..join import aggregate
from ..runtime.operator import Output, keeps_rows, old_graph, stored_rows
from . import routing
from .graph import SIDES, merger_of


def start_members(graph, params):
    """The routing table a run starts with: with 2PS scaling, all but `spare_units` of each
    side active; without, every unit (the dispatchers' own table then)."""
    n = tuple(len(graph.ranks(g)) for g in SIDES)
    groups = (int(params["r_groups"]), int(params["s_groups"]))
    if not params["scaling"]:
        return routing.Membership(n, groups)
    return routing.Membership(n, groups, tuple(max(1, k - int(params["spare_units"])) for k in n))


def restore_unit(unit, read, old):
    """A new unit's rows out of every old unit of its side, and the results of their channel
    state (the module docstring). Returns the Output of those results."""
    side = unit.side
    table = start_members(unit.graph, unit.job.strategy.params)
    me = unit.graph.ranks(SIDES[side]).index(unit.rank)
    out, kept = Output(), []

    def mine(rows):
        return rows[table.store_units(rows, side) == me] if len(rows) else rows
    for r in old_graph(unit, old).ranks(SIDES[side]):
        arrays, attrs, pending = read(r, keeps_rows(unit, side), channel=list(unit.dtypes))
        held = unit.join.emptied()
        stored = stored_rows(unit, arrays, side)
        if len(stored):
            held.append(mine(stored))
        for _, header, batches in sorted(pending, key=lambda p: p[1].order):
            held.append(mine(batches[side]))
            res, values = held.probe(batches[1 - side], unit.views.columns)
            out.emit(res[:2], res[2])
            unit.views.absorb(values, len(res[0]))
        kept.append(held.snapshot("w")[f"w/{side}"])
    rows = np.concatenate(kept)
    unit.join.restore({f"w/{side}": rows[np.argsort(rows["seq"], kind="stable")]}, "w")
    return out


def restore_merger(merger, read, old):
    """The new merger: the old one's counts restored, and returns its view: the old one's with the
    views on their way to it at the cut (its channel state) and every old unit's views not sent
    yet merged in."""
    graph = old_graph(merger, old)
    arrays, attrs, pending = read(merger_of(graph), lambda n: True, channel=[merger.dtype])
    merger.restore(arrays, attrs)
    views = [merger.view] + [b[0] for _, _, b in pending]
    for r in graph.ranks(SIDES[0]) + graph.ranks(SIDES[1]):
        a, at, _ = read(r, lambda n: n == "views/data", channel=list(merger.dtypes),
                        state=lambda n: merger.dtype if n == "views/data" else None)
        shape = at["views"]["shape"]
        if shape is not None:
            views.append(a["views/data"].reshape(shape))
    return aggregate.merge(merger.spec, *views)
