"""Where each stored tuple lives on the PSP ring: cut points in window coordinates, per batch.

Operator k (1 = head .. N = tail) holds stream j's tuples whose coord (window.py) lies in
[cut[j][k-1], cut[j][k-2]), with cut[j][-1] = +inf: the head holds the newest, the tail the
oldest, and the ranges abut, so every tuple lives on exactly one operator. cut[j][N-1] is the
window's edge: the tail drops what falls below it.

The driver computes the cuts of each batch P from P's own tuples and sends them with P; every
operator purges and probes by them. Two rules make the ring exact whatever the batch size:
- cuts are taken from P's oldest probe: lo_min[j] = min lo_j(t) over P's tuples t of other streams
  (window.py), so no tuple of P loses a partner to a purge P itself causes;
- cuts never decrease from batch to batch, so a tuple only ever moves towards the tail, one
  neighbour at a time, and each batch meets each stored tuple at exactly one operator.

Slices are set by shares of the window (time slicing: operator k holds ages [e_{k-1}, e_k),
e = cumulative shares x W) or, for workload smoothing, by counts (every operator but the tail
holds at most its count of tuples; the tail keeps the window's time bound; "balanced" gives every
operator an equal share of the tuples each window holds, recomputed each batch, so the slices
follow the arrival rate). Changing shares is a
relocation: `aggressive` moves the cuts at once (the purge that follows migrates the state to the
next neighbours), `passive` lets each cut advance at most twice as fast as the window slides, so
slices shrink step by step without bulk moves. A share of 0 takes an operator out of the ring's
state (it only forwards); a positive share brings it back.
"""
import numpy as np

from ..schema import TS
from ..join.window import NEG_INF


def batch_lows(batches, M):
    """lo_min[j]: the smallest lo_j(t) over the tuples t of other streams in these batches
    (None where no such tuple: the batch probes nothing of j)."""
    out = []
    for j in range(M):
        lows = []
        for i, b in enumerate(batches):
            if i == j or not len(b):
                continue
            lows.append(int(b["_lo"].min()) if M == 2 else int(b["_los"][:, j].min()))
        out.append(min(lows) if lows else None)
    return out


def shares_from(weights, n):
    """Normalised cumulative shares (e_1 .. e_n as fractions of the window) from `n` weights."""
    w = np.asarray(weights, np.float64)
    if len(w) != n or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"expected {n} non-negative slice weights with a positive sum, got {list(weights)}")
    e = np.cumsum(w / w.sum())
    e[-1] = 1.0
    return e


def _counts(counts):
    """Per-operator tuple bounds, "balanced" (each operator an equal share of the tuples each
    window holds now, recomputed every batch), or None (time slicing)."""
    if counts is None or counts == "balanced":
        return counts
    return [int(c) for c in counts]


class Slicer:
    """Cut points for M streams over N operators (see the module docstring)."""

    def __init__(self, windows, n, weights=None, counts=None, mode="passive", lengths=None):
        """`windows`: job.streams[j].window; `weights`: one per operator (default equal); `counts`:
        per-operator tuple bounds for count-bounded slices (the tail's is ignored: it keeps time),
        or "balanced": equal shares of each window's current tuples (balance by tuple count);
        `lengths[j]`: stream j's state spans only the first lengths[j] operators (streams of
        different rates and windows get different ring lengths; the later operators pass it on)."""
        self.M, self.n = len(windows), n
        self.sizes = [w.size if w.kind in ("time", "count") else None for w in windows]
        self.mode = mode
        self.lengths = [n] * self.M if lengths is None else [max(1, min(n, int(x))) for x in lengths]
        self.cuts = np.full((self.M, n), NEG_INF, np.int64)
        self.lo_prev = [None] * self.M
        self.set_shares(weights if weights is not None else [1.0] * n)
        self.counts = _counts(counts)
        self.recent = [np.zeros(0, np.int64) for _ in range(self.M)]   # coords at or above the edge
        self.kinds = [w.kind for w in windows]
        self.floor = [0 if k == "count" else NEG_INF for k in self.kinds]   # the smallest coord a later
        # tuple of each stream can have

    def set_shares(self, weights, mode=None):
        """New slice sizes (a relocation when the ring is running). A stream whose ring is shorter
        keeps the weights of its first operators (all of them equal if those are all 0)."""
        ends = []
        for L in self.lengths:
            w = [float(x) if k < L else 0.0 for k, x in enumerate(weights)]
            if sum(w) <= 0:
                w = [1.0 if k < L else 0.0 for k in range(self.n)]
            ends.append(shares_from(w, self.n))
        self.ends = np.array(ends)
        if mode:
            self.mode = mode

    def set_counts(self, counts, mode=None):
        self.counts = _counts(counts)
        if mode:
            self.mode = mode

    @property
    def active(self):
        """Operators with a slice (weight > 0) in the current shares."""
        e = np.concatenate([np.zeros((self.M, 1)), self.ends], axis=1)
        return [k + 1 for k in range(self.n) if (e[:, k + 1] > e[:, k]).any()]

    def next(self, batches):
        """Cuts for the next batch (an (M, N) int64 array); updates the running state."""
        lows = batch_lows(batches, self.M)
        newest = max((int(b[TS][-1]) for b in batches if len(b)), default=None)
        for j in range(self.M):
            if self.kinds[j] == "count" and len(batches[j]):
                self.floor[j] = int(batches[j]["_coord"][-1]) + 1
            elif self.kinds[j] == "time" and newest is not None:
                self.floor[j] = newest
            if self.counts is not None and len(batches[j]):
                self.recent[j] = np.concatenate([self.recent[j], batches[j]["_coord"].astype(np.int64)])
            lo = lows[j]
            if lo is None or self.sizes[j] is None:
                continue               # nothing probes j (cuts stay), or j is unbounded (all at the head)
            self.cuts[j] = self._stream(j, lo)
            self.lo_prev[j] = lo
            if self.counts is not None:
                r = self.recent[j]
                self.recent[j] = r[np.searchsorted(r, self.cuts[j][-1]):]
        return self.cuts.copy()

    def _stream(self, j, lo):
        W, prev, n = self.sizes[j], self.cuts[j], self.n
        edge = max(int(prev[-1]), lo)
        if self.counts is not None:
            target = self._count_targets(j, edge)
        else:
            target = [lo + W - int(round(e * W)) for e in self.ends[j]]
        out = np.empty(n, np.int64)
        out[-1] = edge
        step = None if self.lo_prev[j] is None else 2 * max(0, lo - self.lo_prev[j])
        # the head's cut stays at or below every coord still to come: a tuple is inserted at the
        # head, and must not arrive below a cut that has already passed it
        upper = self.floor[j]
        for k in range(n - 1):
            b = max(int(prev[k]), int(target[k]))
            if self.mode == "passive" and step is not None and prev[k] != NEG_INF:
                b = min(b, max(int(prev[k]), int(prev[k]) + step))
            b = max(min(b, upper), edge)
            out[k] = b
            upper = b
        return out

    def _count_targets(self, j, edge):
        """Every operator but the tail holds at most its count of the newest tuples."""
        r = self.recent[j]
        r = r[np.searchsorted(r, edge):]
        counts = [-(-len(r) // self.n)] * self.n if self.counts == "balanced" else self.counts
        out, held = [], 0
        for k in range(self.n - 1):
            held += counts[k]
            out.append(int(r[len(r) - held]) if held < len(r) else NEG_INF)
        return out + [edge]

    # -- state (a part of the PSP router's, operator.declare) --------------------------------------
    def snapshot(self):
        arrays = {"cuts": self.cuts.ravel().copy(), "ends": self.ends.ravel().copy()}
        for j, r in enumerate(self.recent):
            arrays[f"recent/{j}"] = r.copy()
        attrs = {"lo_prev": [None if v is None else int(v) for v in self.lo_prev], "mode": self.mode,
                 "counts": self.counts, "floor": [int(f) for f in self.floor]}
        return arrays, attrs

    def restore(self, arrays, attrs):
        """The slicer at a checkpoint; of a ring of another length (a restore at another rank
        count, ring/psp_rescale.py), what belongs to the streams: the window's edge (the tail's
        cut, which never goes back), the floors, the last lows and the recent coordinates; the
        other cuts start over (every stored tuple is at the head then, and the first batch's
        purges carry each to its slice) with this ring's shares and counts."""
        cuts = np.asarray(arrays["cuts"], np.int64)
        self.recent = [np.asarray(arrays.get(f"recent/{j}", np.zeros(0, np.int64)), np.int64)
                       for j in range(self.M)]
        self.lo_prev, self.floor = attrs["lo_prev"], list(attrs["floor"])
        if cuts.size != self.M * self.n:
            self.cuts[:, -1] = cuts.reshape(self.M, -1)[:, -1]
            return
        self.cuts = cuts.reshape(self.M, self.n).copy()
        self.ends = np.asarray(arrays["ends"], np.float64).reshape(self.M, self.n).copy()
        self.mode, self.counts = attrs["mode"], attrs["counts"]

    def state_dtype(self, name):
        return np.dtype(np.float64) if name == "ends" else np.dtype(np.int64)
