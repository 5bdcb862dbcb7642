"""The tools a user would otherwise reach for, run on the same staged data as the benchmark.

DuckDB computes a two-stream equi or band window join at rest from the staged Parquet, as one
SQL query whose WHERE clause is the exact semantics of window.py: a pair is in the result when
its conditions hold and the newer tuple (by seq) sees the older, that is, for time windows,
newer.ts - older.ts < W of the older tuple's stream. It is the offline reference: its result set
is compared with the oracle's, and its time is reported beside the strategies'."""
import os
import time

import numpy as np

from .errors import JobError


def window_join_sql(job):
    """The SQL of a two-stream job with time windows and equi/band conditions only."""
    if len(job.streams) != 2 or job.predicate.theta:
        raise JobError(f"{job.path}: DuckDB runs two-stream equi and band joins only")
    if any(s.window.kind != "time" for s in job.streams):
        raise JobError(f"{job.path}: DuckDB runs time windows only here")
    r, s = job.streams
    conds = []
    for c in job.predicate.between(0, 1):
        a, b = f"r.{c.left[1]}", f"s.{c.right[1]}"
        if c.kind == "equi":
            conds.append(f"{a} = {b}")
        else:                                   # |a - b| < eps as two inequalities (DuckDB's IEJoin)
            op = "<=" if c.closed else "<"
            conds.append(f"{a} - {b} {op} {c.eps!r} AND {b} - {a} {op} {c.eps!r}")
    # the newer of the two sees the older: newer.ts - older.ts < W(older's stream)
    conds.append(f"((s.seq > r.seq AND s.ts - r.ts < {r.window.size}) OR "
                 f"(r.seq > s.seq AND r.ts - s.ts < {s.window.size}))")
    src = [os.path.join(job.staged, st.name, "*.parquet").replace("'", "''") for st in job.streams]
    return (f"SELECT r.seq AS a, s.seq AS b FROM read_parquet('{src[0]}') r, read_parquet('{src[1]}') s "
            f"WHERE {' AND '.join(conds)}")


def duckdb_join(job, threads=None):
    """(pairs as an (n, 2) seq array, seconds) from DuckDB over the staged input."""
    import duckdb
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    sql = window_join_sql(job)
    t0 = time.perf_counter()
    got = con.execute(sql).fetchnumpy()
    el = time.perf_counter() - t0
    con.close()
    return np.stack([np.asarray(got["a"], np.int64), np.asarray(got["b"], np.int64)], axis=1), el
