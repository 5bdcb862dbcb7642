"""A brute-force statement of README "Exact semantics", pair by pair, independent of the oracle's
range arithmetic: used only to test the oracle on small inputs."""
import itertools

import numpy as np


def visible(window, older, newer_ts, newer_seq, stream_arr):
    """Is `older` (a row of stream_arr) inside stream_arr's window when a tuple (ts, seq) arrives?"""
    if older["seq"] >= newer_seq:
        return False
    if window.kind == "time":
        return newer_ts - older["ts"] < window.size
    if window.kind == "count":
        later = np.sum((stream_arr["seq"] > older["seq"]) & (stream_arr["seq"] < newer_seq))
        return later < window.size
    return True


def brute_force(job, arrays, cond):
    """All combinations (one row per stream) for which cond(rows) holds and every older tuple is
    in its stream's window when the newest arrives."""
    out = []
    for combo in itertools.product(*[range(len(a)) for a in arrays]):
        rows = [arrays[k][i] for k, i in enumerate(combo)]
        newest = max(range(len(rows)), key=lambda k: rows[k]["seq"])
        t = rows[newest]
        if all(k == newest or visible(job.streams[k].window, rows[k], t["ts"], t["seq"], arrays[k])
               for k in range(len(rows))) and cond(*rows):
            out.append([r["seq"] for r in rows])
    return np.array(out, np.int64).reshape(-1, len(arrays))


def as_set(rows):
    """The rows as a set of tuples of ints (an (n, M) array through tolist: C-speed, about 2.5x
    the per-element loop on a million rows)."""
    if isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.dtype.kind in "iu":
        return set(map(tuple, rows.tolist()))
    return {tuple(int(x) for x in r) for r in rows}


def _sorted_rows(rows, m):
    a = np.asarray(rows, np.int64).reshape(-1, m)
    return a[np.lexsort(a.T[::-1])] if len(a) else a


def assert_same_rows(got, expect, what=""):
    """`got` holds each row once and the same rows as `expect` (both (n, M) int arrays of seqs),
    compared sorted in numpy: the big results (full-history windows, millions of pairs) cost a
    sort, not a Python set of tuples. The message names the first row that differs."""
    m = np.asarray(expect).reshape(len(expect), -1).shape[1] if len(expect) else np.asarray(got).shape[-1]
    g, e = _sorted_rows(got, m), _sorted_rows(expect, m)
    twice = np.nonzero((g[1:] == g[:-1]).all(axis=1))[0] if len(g) > 1 else []
    assert len(twice) == 0, f"{what}a result was written twice: {g[twice[0]].tolist()}"
    if len(g) != len(e) or not np.array_equal(g, e):
        gs, es = as_set(g), as_set(e)
        extra, missing = sorted(gs - es)[:3], sorted(es - gs)[:3]
        raise AssertionError(f"{what}{len(g)} results, the oracle has {len(e)}; not in the oracle's: {extra}; "
                             f"missing: {missing}")


def assert_equals_oracle(job, arrays):
    """A run's written results (job.output) are the oracle's, none twice; returns them in the
    order written."""
    from mpi_join.join.oracle import run_oracle
    from mpi_join.storage.results import read_results
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    assert len(expect) > 0
    assert_same_rows(got, expect)
    return got
