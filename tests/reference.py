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
    return {tuple(int(x) for x in r) for r in rows}


def assert_equals_oracle(job, arrays):
    """A run's written results (job.output) are the oracle's, none twice; returns them in the
    order written."""
    from mpi_join.join.oracle import run_oracle
    from mpi_join.storage.results import read_results
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    assert len(expect) > 0
    assert len(got) == len(as_set(got)), "a result was written twice"
    assert as_set(got) == as_set(expect)
    return got
