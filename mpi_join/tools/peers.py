"""The tools a user would otherwise reach for, run on the same staged data as the benchmark.

DuckDB computes a two-stream equi or band window join at rest from the staged Parquet, as one
SQL query whose WHERE clause is the exact semantics of window.py: a pair is in the result when
its conditions hold and the newer tuple (by seq) sees the older, that is, for time windows,
newer.ts - older.ts < W of the older tuple's stream. It is the offline reference: its result set
is compared with the oracle's, and its time is reported beside the strategies'.

Spark Structured Streaming runs the equi workload as a stream-stream join: the staged streams
are cut into `chunks` Parquet files each, in event-time order, and read one file per stream per
micro-batch; the join is the equality key plus the range condition |r.ts - s.ts| < W with a
watermark on each stream, so Spark can drop state. With equal windows and event times that never
go backwards along seq (the staged contract), that range is exactly window.py's rule: the newer
tuple sees the older when newer.ts - older.ts < W. Its result set is compared with the oracle's."""
import os
import time

import numpy as np

from ..errors import JobError


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
        elif c.kind == "interval":              # a shifted interval (config.Interval), oriented r -> s
            conds.append(f"s.ts - r.ts BETWEEN {c.lo} AND {c.up}")
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
    con.execute("SET enable_progress_bar = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    sql = window_join_sql(job)
    t0 = time.perf_counter()
    got = con.execute(sql).fetchnumpy()
    el = time.perf_counter() - t0
    con.close()
    return np.stack([np.asarray(got["a"], np.int64), np.asarray(got["b"], np.int64)], axis=1), el


def stream_join_condition(job):
    """(equi column pairs, W) of a job Spark's stream-stream join reproduces exactly, or JobError."""
    if len(job.streams) != 2 or job.predicate.theta or job.predicate.band or job.predicate.interval:
        raise JobError(f"{job.path}: the Spark streaming peer runs two-stream equi joins with equal windows only")
    r, s = job.streams
    if r.window.kind != "time" or s.window.kind != "time" or r.window.size != s.window.size:
        raise JobError(f"{job.path}: the Spark streaming peer needs equal time windows on both streams "
                       f"(its range condition is symmetric)")
    if job.ts_unit not in ("s", "ms", "us"):
        raise JobError(f"{job.path}: the Spark streaming peer needs ts_unit s, ms or us (Spark timestamps "
                       f"stop at microseconds), not {job.ts_unit!r}")
    return [(c.left[1], c.right[1]) for c in job.predicate.between(0, 1)], int(r.window.size)


def spark_stream_join(job, work, chunks=20, master="local[2]"):
    """The equi job as a Spark Structured Streaming stream-stream join over the staged input.
    Returns (pairs as an (n, 2) seq array, {"seconds", "tuples_per_s", "batches", "batch_ms_p50",
    "batch_ms_p99"}): seconds from the query's start to its last micro-batch; a micro-batch's time
    is the least delay a tuple in it sees before its results are out."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ..storage.spark.collect import _event_time
    from ..storage.spark.session import spark_session
    from ..storage.staged import read_staged
    keys, W = stream_join_condition(job)
    unit_us = {"s": 1_000_000, "ms": 1000, "us": 1}[job.ts_unit]
    per_s = 1_000_000 // unit_us
    arrays = read_staged(job)
    shift = 86_400 * per_s - min((int(a["ts"][0]) for a in arrays if len(a)), default=0)
    bounds = np.quantile(np.concatenate([a["ts"] for a in arrays]), np.linspace(0, 1, chunks + 1)[1:-1])
    srcs, t_files = [], time.time() - chunks - 60
    for side, (st, a) in enumerate(zip(job.streams, arrays)):   # chunk k of both streams: the same event time
        d = os.path.join(work, "input", st.name)
        os.makedirs(d, exist_ok=True)
        cut = np.searchsorted(a["ts"], bounds, side="right")
        for k, part in enumerate(np.split(np.arange(len(a)), cut)):
            cols = {"seq": a["seq"][part], "ts": a["ts"][part]}
            for x in keys:
                c = x[side]
                cols[c] = a[c][part]
            f = os.path.join(d, f"chunk-{k:05d}.parquet")
            pq.write_table(pa.table(cols), f)
            # Spark's file source takes files in modification-time order, and files written in
            # the same instant come in any order: a later chunk first would move the watermark
            # past an earlier one, whose rows Spark then drops as late
            os.utime(f, (t_files + k, t_files + k))
        srcs.append(d)
    spark = spark_session(master, app="mpi-join-peer", conf=("spark.sql.shuffle.partitions=2",
                                                              "spark.sql.streaming.noDataMicroBatches.enabled=false"))
    from pyspark.sql import functions as F
    sides = []
    for st, d, tag in zip(job.streams, srcs, ("r", "s")):
        schema = spark.read.parquet(d).schema
        # the earliest tuple a day after the epoch: Spark's watermark starts at the epoch and a row
        # at or before it is late, so a tuple at ts 0 was dropped from the join state (the join
        # reads differences of time only)
        df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(d)
              .withColumn("et", _event_time(F, F.col("ts") + shift, job.ts_unit)))
        df = df.select(*[F.col(c).alias(f"{tag}_{c}") for c in df.columns]).withWatermark(f"{tag}_et", "0 seconds")
        sides.append(df)
    r, s = sides
    w = F.expr(f"INTERVAL {W * unit_us} MICROSECONDS")
    cond = [r[f"r_{a}"] == s[f"s_{b}"] for a, b in keys]
    cond += [s["s_et"] > r["r_et"] - w, s["s_et"] < r["r_et"] + w]
    out = os.path.join(work, "pairs")
    q = (r.join(s, cond).select(F.col("r_seq").alias("a"), F.col("s_seq").alias("b"))
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", os.path.join(work, "ckpt"))
         .outputMode("append").trigger(availableNow=True))
    t0 = time.perf_counter()
    query = q.start()
    query.awaitTermination()
    el = time.perf_counter() - t0
    if query.exception() is not None:
        raise JobError(f"Spark streaming peer failed: {query.exception()}")
    batches = [p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress if p.get("numInputRows")]
    import glob
    parts = sorted(glob.glob(os.path.join(out, "part-*.parquet")))
    got = pa.concat_tables([pq.read_table(f) for f in parts]) if parts else None
    pairs = (np.stack([got["a"].to_numpy().astype(np.int64), got["b"].to_numpy().astype(np.int64)], axis=1)
             if got is not None else np.zeros((0, 2), np.int64))
    n = sum(len(a) for a in arrays)
    ms = np.asarray(batches or [0], float)
    return pairs, {"seconds": round(el, 3), "tuples_per_s": round(n / max(el, 1e-9)), "batches": len(batches),
                   "batch_ms_p50": float(np.percentile(ms, 50)), "batch_ms_p99": float(np.percentile(ms, 99))}
