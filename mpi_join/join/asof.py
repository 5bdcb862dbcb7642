"""ASOF joins (predicate.AsOf): each left row's one match, as README "ASOF joins" says.

Two implementations that must agree: `oracle` (all rows at once: the right rows sorted by key
code, event time and seq, each left row's match found by binary search in its key's rows) and
`best`, which `hash`'s join (slaves/local_join.py) applies when a left row leaves its window:
from the candidate pairs its key index gives (every right row of the row's key still in the
right window), the best by the same rule. The rule: a right row qualifies when it is on the
direction's side (equal times when `closed`) and at most `tolerance` away; the best is the
nearest in time (nearest: the earlier side on a tie), and of right rows at that time the last
to arrive (the largest seq)."""
import numpy as np
from numba import njit

from ..schema import NULL, SEQ, TS
from .predicate import key_matrix, key_widths
from .range_join import exact_codes

DIRECTIONS = {"backward": 0, "forward": 1, "nearest": 2}


def oracle(job, arrays):
    """The ASOF join of `arrays` (both streams, sorted by seq) as an (n, 2) array of seqs in
    stream order, -1 for a kept left row's missing match."""
    a = job.predicate.asof
    L, R = arrays[a.left], arrays[a.right]
    if NULL in R.dtype.names:            # a right row with a null key, or one its filter drops, is no one's match
        R = R[R[NULL] == 0]
    cl = [c.left[1] if c.left[0] == a.left else c.right[1] for c in job.predicate.equi]
    cr = [c.right[1] if c.right[0] == a.right else c.left[1] for c in job.predicate.equi]
    widths = key_widths(L.dtype, cl, R.dtype, cr)
    lc, rc = exact_codes(key_matrix(L, cl, widths), key_matrix(R, cr, widths))
    order = np.lexsort((R[SEQ], R[TS], rc))
    rcode, rts, rseq = rc[order], R[TS][order].astype(np.int64), R[SEQ][order].astype(np.int64)
    n = int(max(lc.max(initial=-1), rc.max(initial=-1))) + 1
    starts = np.searchsorted(rcode, np.arange(n), "left")
    ends = np.searchsorted(rcode, np.arange(n), "right")
    got = _match(lc, L[TS].astype(np.int64), rts, starts, ends, DIRECTIONS[a.direction],
                 -1 if a.tolerance is None else int(a.tolerance), a.closed)
    if NULL in L.dtype.names:            # ... nor has one
        got[L[NULL] != 0] = -1
    hit = got >= 0
    keep = np.ones(len(L), bool) if a.keep else hit
    out = np.full((int(keep.sum()), 2), -1, np.int64)
    out[:, a.left] = L[SEQ][keep]
    out[hit[keep], a.right] = rseq[got[hit]]
    return out


@njit(cache=True)
def _last_at_most(x, ts, lo, hi):
    """The last index in [lo, hi) of sorted `ts` with ts <= x, or lo - 1."""
    while lo < hi:
        m = (lo + hi) // 2
        if ts[m] <= x:
            lo = m + 1
        else:
            hi = m
    return lo - 1


@njit(cache=True)
def _match(lcode, lts, rts, starts, ends, direction, tol, closed):
    out = np.full(len(lcode), -1, np.int64)
    for i in range(len(lcode)):
        c = lcode[i]
        if c >= len(starts):
            continue
        s, e, t = starts[c], ends[c], lts[i]
        back = -1
        if direction != 1:              # the last right row at or before t (before, when open)
            j = _last_at_most(t if closed else t - 1, rts, s, e)
            if j >= s and (tol < 0 or t - rts[j] <= tol):
                back = j
        fwd = -1
        if direction != 0:              # the first time at or after t (after, when open); its last row
            j = _last_at_most(t - 1 if closed else t, rts, s, e) + 1
            if j < e and (tol < 0 or rts[j] - t <= tol):
                fwd = _last_at_most(rts[j], rts, j, e)
        if back >= 0 and (fwd < 0 or t - rts[back] <= rts[fwd] - t):
            out[i] = back
        elif fwd >= 0:
            out[i] = fwd
    return out


def best(asof, lts, rts, rseq, il, ir):
    """Of candidate pairs (left row il[k], right row ir[k]: equal keys; `lts`, `rts`, `rseq`
    the rows' times and seqs), each left row's best by the rule above: (left rows, right rows),
    at most one pair per left row."""
    t, r = lts[il].astype(np.int64), rts[ir].astype(np.int64)
    d = t - r                                    # >= 0: the right row is at or before the left
    tol = np.iinfo(np.int64).max if asof.tolerance is None else asof.tolerance
    ok = {"backward": d >= 0 if asof.closed else d > 0, "forward": d <= 0 if asof.closed else d < 0,
          "nearest": (d != 0) | asof.closed}[asof.direction] & (np.abs(d) <= tol)
    il, ir, d, r = il[ok], ir[ok], d[ok], r[ok]
    if not len(il):
        return il, ir
    seq = rseq[ir].astype(np.int64)
    first = {"backward": (d,), "forward": (-d,), "nearest": (np.abs(d), d < 0)}[asof.direction]
    order = np.lexsort((-seq, *reversed(first), il))    # by left row, then the rule's keys, then the newest
    il, ir = il[order], ir[order]
    head = np.ones(len(il), bool)
    head[1:] = il[1:] != il[:-1]
    return il[head], ir[head]
