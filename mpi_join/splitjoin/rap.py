"""Relaxed adjustable punctuation (RAP): how join cores punctuate their results, and how the
mergers and the combiner merge punctuated flows without any coordination. Pure numpy, no MPI.

A *flow* is (rows, stars): result rows (results.result_dtype) in the order a core made them, and
stars (STAR) that cut them into groups: star i closes the group of rows[stars[i-1].end :
stars[i].end] and names it by (key, sub). Rows after the last star belong to a group still open
(it closes in a later message). Keys grow along a flow, so groups with equal (key, sub) in several
flows are the same group: the results of the same trigger tuple (and, with comparison stars, the
same block of stored tuples).

- Tuple stars (`punctuation = "tuples"`, interval n): a star after every n-th tuple of the
  trigger stream, key = the tuple's count in its stream // n. n = 1 is strict outer order.
- Comparison stars (`"comparisons"`, interval c): for every trigger tuple, a star after each c
  stored tuples it is compared with, key = the trigger's count, sub = the block of c stored
  tuples (a core's m-th stored tuple is in block m // c; cores store round-robin, so block i of
  every core holds stream counts [i c k, (i+1) c k)). c = 1 is strict inner order.
- `"none"`: no stars; a flow is one open group.

`merge(flows)` is the paper's Merger (Algorithm 5): it reads input 0 until its star, then input 1
until its star with the same group, ..., then emits one star for the full set, group after group.
A group an input has no star for is empty on that input (a core whose sub-window held nothing
of that block). Rows of open groups come last, input by input.

`combine(r_flow, s_flow)` is the Combiner: the groups of the R-punctuated flow (results of R
tuples probing S) and the S-punctuated flow, interleaved by the seq of the tuple that closed
each group, each star flagged with its stream; with strict outer order this is the arrival order
of the trigger tuples."""
import numpy as np

STAR = np.dtype([("end", np.int64), ("key", np.int64), ("sub", np.int64), ("seq", np.int64)])
OPEN = np.iinfo(np.int64).max          # the key of rows after a flow's last star
MODES = ("tuples", "comparisons", "none")


def no_stars():
    return np.zeros(0, STAR)


def stars(keys, subs, seqs, row_keys, row_subs):
    """Stars closing groups (keys[i], subs[i]) (sorted), each after the rows whose (key, sub) is
    not greater (row keys sorted too)."""
    out = np.empty(len(keys), STAR)
    out["key"], out["sub"], out["seq"] = keys, subs, seqs
    out["end"] = _count_le(row_keys, row_subs, keys, subs)
    return out


def _count_le(row_keys, row_subs, keys, subs):
    """For each (keys[i], subs[i]): how many rows have (key, sub) <= it."""
    n = len(row_keys)
    order = np.lexsort((np.r_[np.zeros(n, np.int8), np.ones(len(keys), np.int8)],
                        np.r_[row_subs, subs], np.r_[row_keys, keys]))
    at = np.flatnonzero(order >= n)               # where each star sorts, rows of its group first
    out = np.empty(len(keys), np.int64)
    out[order[at] - n] = at - np.arange(len(at))
    return out


def group_of(flow):
    """(key, sub, seq) of the group each row of a flow is in; OPEN for rows after the last star."""
    rows, st = flow
    g = np.searchsorted(st["end"], np.arange(len(rows)), "right")
    open_ = g >= len(st)
    g = np.minimum(g, max(len(st) - 1, 0))
    key = np.where(open_, OPEN, st["key"][g] if len(st) else OPEN)
    sub = np.where(open_, OPEN, st["sub"][g] if len(st) else OPEN)
    seq = np.where(open_, OPEN, st["seq"][g] if len(st) else OPEN)
    return key, sub, seq


def merge(flows):
    """One flow from several (see the module docstring): group by group, input by input."""
    if len(flows) == 1:
        return flows[0]
    parts = [group_of(f) + (np.full(len(f[0]), j, np.int64),) for j, f in enumerate(flows)]
    key, sub, _, src = (np.concatenate(c) for c in zip(*parts))
    rows = np.concatenate([f[0] for f in flows])
    order = np.lexsort((src, sub, key))          # stable: each input keeps its own order
    rows, key, sub = rows[order], key[order], sub[order]
    st = np.concatenate([f[1] for f in flows])
    if len(st):
        st = st[np.lexsort((st["sub"], st["key"]))]
        first = np.ones(len(st), bool)
        first[1:] = (st["key"][1:] != st["key"][:-1]) | (st["sub"][1:] != st["sub"][:-1])
        st = st[first].copy()                       # one star for each full set
        st["end"] = _count_le(key, sub, st["key"], st["sub"])
    return rows, st


def combine(r_flow, s_flow):
    """The R- and S-punctuated flows as one: (rows, stars, flags) where flags[i] is 0 (R) or 1
    (S) for star i; groups in the order of the seq of the tuple that closed them (open groups
    last, R before S)."""
    seq = np.concatenate([group_of(f)[2] for f in (r_flow, s_flow)])
    side = np.repeat(np.array([0, 1], np.int8), [len(r_flow[0]), len(s_flow[0])])
    order = np.lexsort((side, seq))
    rows = np.concatenate([r_flow[0], s_flow[0]])[order]
    st = np.concatenate([r_flow[1], s_flow[1]])
    flags = np.repeat(np.array([0, 1], np.int8), [len(r_flow[1]), len(s_flow[1])])
    o = np.lexsort((flags, st["seq"]))
    st, flags = st[o].copy(), flags[o]
    st["end"] = _count_le(seq[order], side[order], st["seq"], flags)
    return rows, st, flags


def punctuate(mode, interval, trig_count, trig_seq, row_trig_count, row_block, blocks):
    """The stars of one flow made by a core for one batch.

    trig_count/trig_seq: count in its stream and seq of every tuple of the trigger stream in the
    batch (in order); row_trig_count/row_block: of every result row (sorted by them); blocks:
    for comparison stars, (first, last) block each trigger tuple was compared with (last < first:
    none)."""
    if mode == "none":
        return no_stars()
    if mode == "tuples":
        n = interval
        at = np.flatnonzero((trig_count + 1) % n == 0)
        keys = trig_count[at] // n
        return stars(keys, np.zeros(len(at), np.int64), trig_seq[at], row_trig_count // n,
                     np.zeros(len(row_trig_count), np.int64))
    first, last = blocks
    per = np.maximum(last - first + 1, 0)
    idx = np.repeat(np.arange(len(per)), per)
    sub = np.arange(len(idx)) - np.repeat(np.cumsum(per) - per, per) + np.repeat(first, per)
    return stars(trig_count[idx], sub, trig_seq[idx], row_trig_count, row_block)
