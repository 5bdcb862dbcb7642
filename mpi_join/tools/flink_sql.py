"""Run interval joins in Apache Flink SQL (a local mini-cluster): the reference the Flink tier
compares mpi-join with (tools/flink_peer.py writes the spec and reads the answers).

This file is run by the Python of the Flink environment (`make flink`: .venv-flink, where
`apache-flink` lives apart from mpi-join's own packages, whose versions it pins otherwise), as
a script: it imports only pyflink and the standard library, never mpi_join.

    python flink_sql.py SPEC.json

SPEC: {"parallelism": p, "watermark_delay_ms": d, "cases": [{"id", "sql", "out", "final", "tables":
[{"name", "csv", "columns": [[name, Flink SQL type], ...], "time": "ts"}]}]}. Each table is a
CSV file whose second column, `<time>_ms`, is the event time in ms; the table gets the rowtime
attribute `<time> AS TO_TIMESTAMP_LTZ(<time>_ms, 3)` with the watermark `<time> - d ms` (its
rows are in event-time order; the delay only keeps rows of equal time from being late), so the
join is Flink's interval join and its outer rows are emitted as the watermark passes. Each
case's SELECT gives the seqs of its pairs, written to `out` as CSV lines ("" for null). A
`final` case is an aggregate over the join (the benchmark's count and checksums, computed inside
Flink): its changelog is read to the end and only the last row is written, as JSON with the
seconds from submitting the query to that row.
"""
import csv
import json
import sys
import time


def main(spec_path):
    from pyflink.table import EnvironmentSettings, TableEnvironment
    with open(spec_path) as f:
        spec = json.load(f)
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", str(int(spec.get("parallelism", 1))))
    delay = int(spec.get("watermark_delay_ms", 1000))
    for case in spec["cases"]:
        t0 = time.perf_counter()
        env.get_config().set("parallelism.default", str(int(case.get("parallelism", spec.get("parallelism", 1)))))
        for t in case["tables"]:
            cols = ", ".join(f"`{n}` {ty}" for n, ty in t["columns"])
            env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS `{t['name']}`")
            env.execute_sql(
                f"CREATE TEMPORARY TABLE `{t['name']}` ({cols}, "
                f"`{t['time']}` AS TO_TIMESTAMP_LTZ(`{t['time']}_ms`, 3), "
                f"WATERMARK FOR `{t['time']}` AS `{t['time']}` - INTERVAL '{delay / 1000:.3f}' SECOND) "
                f"WITH ('connector' = 'filesystem', 'path' = 'file://{t['csv']}', 'format' = 'csv')")
        if case.get("final"):
            env.get_config().set("table.exec.mini-batch.enabled", "true")   # one update per batch of rows
            env.get_config().set("table.exec.mini-batch.allow-latency", "1 s")
            env.get_config().set("table.exec.mini-batch.size", "100000")
            t1, last = time.perf_counter(), None
            with env.execute_sql(case["sql"]).collect() as rows:
                for r in rows:
                    if r.get_row_kind().name in ("INSERT", "UPDATE_AFTER"):
                        last = [None if v is None else int(v) for v in r]
            with open(case["out"], "w") as f:
                json.dump({"row": last, "seconds": time.perf_counter() - t1}, f)
            print(f"flink: {case['id']}: {last} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
            continue
        # the rows come back as Arrow batches (to_pandas), not one py4j round trip per row and
        # field (collect(): the eight Flink-tier cases took 120 s that way, 21 s this way); an
        # interval join's changelog is insert-only, outer rows included
        df = env.sql_query(case["sql"]).to_pandas()
        n = len(df)
        with open(case["out"], "w", newline="") as f:
            w = csv.writer(f)
            for r in df.itertuples(index=False):
                w.writerow([_seq(v) for v in r])
        print(f"flink: {case['id']}: {n} rows in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def _seq(v):
    """A seq as written: a null side (None, NaN or pandas' NA in a column with nulls, whose
    seqs pandas holds as float64: exact below 2^53) is ""."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return ""


if __name__ == "__main__":
    main(sys.argv[1])
