"""Apache Flink as the reference implementation of interval joins: a job's join, written as SQL
(`[predicate] sql`, the form Flink users write), runs unchanged in Flink SQL over the job's
staged input as CSV (tools/flink_sql.py, in the Flink environment), and its pairs come back as
seq rows to compare with mpi-join's result set (README "Checked against Apache Flink").

Flink's Python package pins pyarrow, pandas, numpy and py4j to versions mpi-join's own
packages (pyspark, pyarrow) do not take, so it lives in an environment of its own: `make flink`
builds `.venv-flink` from the `flink` extra of pyproject.toml; MPI_JOIN_FLINK_PYTHON names
another Python that has it.
"""
import csv
import json
import os
import subprocess

import numpy as np

from ..errors import JobError

FLINK_PYTHON = "MPI_JOIN_FLINK_PYTHON"
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TYPES = {"i": "BIGINT", "u": "BIGINT", "f": "DOUBLE", "b": "BOOLEAN", "S": "STRING"}


def flink_python():
    """The Python of the Flink environment, or JobError saying how to make one."""
    p = os.environ.get(FLINK_PYTHON) or os.path.join(_ROOT, ".venv-flink", "bin", "python")
    if not os.path.isfile(p):
        raise JobError(f"Apache Flink's Python is not at {p}: run `make flink` (it builds .venv-flink with the "
                       f"`flink` extra of pyproject.toml, Java 17 needed) or set {FLINK_PYTHON}")
    return p


def flink_select(job, sql):
    """`sql` (a job's [predicate] sql) with its SELECT list replaced by each stream's seq in job
    order: what Flink runs to give the pairs mpi-join identifies results by."""
    import sqlglot
    from sqlglot import exp
    q = sqlglot.parse_one(sql)
    alias = {t.name: t.alias_or_name for t in q.find_all(exp.Table)}
    q.set("expressions", [exp.column("seq", table=alias[s.name]).as_(f"{s.name}_seq") for s in job.streams])
    return q.sql()


def write_csv(job, arrays, directory, columns=None, unit_as_ms=False):
    """Each stream's staged rows as a CSV file for Flink: seq, ts_ms, then the payload columns
    (`columns`: {stream: names} to write only those). Returns the case's "tables" entry of the
    spec. Flink's event time is TIMESTAMP(3): a job whose ts_unit is not ms is refused rather
    than rounded (README: the differences on purpose), unless `unit_as_ms`: the benchmark's
    jobs, whose joins use only differences of event time, are written one unit as one ms."""
    if job.ts_unit != "ms" and not unit_as_ms:
        raise JobError(f"{job.path}: Flink's event time is in milliseconds; compare jobs with ts_unit = \"ms\" "
                       f"(this one has {job.ts_unit!r})")
    os.makedirs(directory, exist_ok=True)
    tables = []
    for s, a in zip(job.streams, arrays):
        path = os.path.join(directory, f"{s.name}.csv")
        names = list(s.schema) if columns is None else list(columns[s.name])
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            cols = [a["seq"].tolist(), a["ts"].tolist()] + [
                [v.decode() for v in a[c]] if a.dtype[c].kind == "S" else a[c].tolist() for c in names]
            w.writerows(zip(*cols))
        tables.append({"name": s.name, "csv": path, "time": "ts",
                       "columns": [["seq", "BIGINT"], ["ts_ms", "BIGINT"]]
                       + [[c, _TYPES[a.dtype[c].kind]] for c in names]})
    return tables


def _interval(units):
    """A duration of `units` ms as Flink's exact INTERVAL literal."""
    sec, ms = divmod(int(units), 1000)
    mins, sec = divmod(sec, 60)
    hours, mins = divmod(mins, 60)
    days, hours = divmod(hours, 24)
    return f"INTERVAL '{days} {hours:02d}:{mins:02d}:{sec:02d}.{ms:03d}' DAY TO SECOND(3)"


def window_join_sql(job):
    """A two-stream equi or band job with time windows as the Flink SQL interval join that gives
    its result set: the newer tuple sees the older when newer.ts - older.ts < W(older's stream),
    and ts never goes back along seq, so S pairs with R exactly when S.ts lies in
    [R.ts - (W_S - 1), R.ts + (W_R - 1)]; bands compare in DOUBLE, as mpi-join does in float64.
    Returns (SQL giving R.seq AS a, S.seq AS b, {stream: columns it reads})."""
    from .peers import window_join_sql as _check     # the same jobs DuckDB's peer runs, refused alike
    _check(job)
    r, s = job.streams
    conds, cols = [], {r.name: set(), s.name: set()}
    for c in job.predicate.between(0, 1):
        a, b = c.left[1], c.right[1]
        cols[r.name].add(a)
        cols[s.name].add(b)
        if c.kind == "equi":
            conds.append(f"r.`{a}` = s.`{b}`")
        elif c.kind == "band":
            conds.append(f"ABS(CAST(r.`{a}` AS DOUBLE) - CAST(s.`{b}` AS DOUBLE)) {'<=' if c.closed else '<'} "
                         f"{float(c.eps)!r}")
        else:
            raise JobError(f"{job.path}: the Flink peer runs equi and band conditions only, not {c.kind}")
    conds.append(f"s.ts BETWEEN r.ts - {_interval(s.window.size - 1)} AND r.ts + {_interval(r.window.size - 1)}")
    sql = f"SELECT r.seq AS a, s.seq AS b FROM `{r.name}` r, `{s.name}` s WHERE {' AND '.join(conds)}"
    return sql, {k: sorted(v) for k, v in cols.items()}


CHECKSUMS = ("SELECT COUNT(*), SUM(a), SUM(b), SUM(CAST(MOD(a * 1000003 + b, 2147483647) AS BIGINT)) FROM ({}) AS j")


def checksums(pairs):
    """What CHECKSUMS computes, for an (n, 2) seq array: [count, sum a, sum b, sum of a mix]."""
    a, b = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
    return [int(len(pairs)), int(a.sum()), int(b.sum()), int(((a * 1000003 + b) % 2147483647).sum())]


def time_flink(cases, work, timeout=1800):
    """The benchmark's Flink runs: `cases` [(id, job, arrays, parallelism)], two-stream window
    joins run in Flink SQL with their count and checksums computed inside Flink (the pairs never
    leave the JVM). Returns {id: {"checksums": [...], "seconds": s}}, seconds from submitting
    the query to its final row (the JVM's start, once for all cases, not included)."""
    spec = {"watermark_delay_ms": 1000, "cases": []}
    if cases:      # the JVM's first query also loads and compiles Flink's classes: warm it, untimed
        _, job, arrays, parallelism = cases[0]
        cases = [("warm-up", job, [a[:2000] for a in arrays], parallelism)] + list(cases)
    for cid, job, arrays, parallelism in cases:
        sql, cols = window_join_sql(job)
        d = os.path.join(work, cid)
        spec["cases"].append({"id": cid, "sql": CHECKSUMS.format(sql), "final": True, "parallelism": parallelism,
                              "out": os.path.join(d, "checksums.json"),
                              "tables": write_csv(job, arrays, d, cols, unit_as_ms=True)})
    _run_script(spec, work, timeout, len(cases))
    out = {}
    for case in spec["cases"][1:]:
        with open(case["out"]) as f:
            got = json.load(f)
        out[case["id"]] = {"checksums": [0 if v is None else v for v in (got["row"] or [0, 0, 0, 0])],
                           "seconds": got["seconds"]}
    return out


def _run_script(spec, work, timeout, n):
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "flink-spec.json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flink_sql.py")
    try:
        p = subprocess.run([flink_python(), script, path], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise JobError(f"Flink did not finish {n} case(s) within {timeout} s") from None
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-15:])
        raise JobError(f"Flink failed (exit {p.returncode}):\n{tail}")


def run_flink(cases, work, parallelism=2, timeout=900):
    """Run `cases` [(id, job, arrays)] in one Flink mini-cluster (one JVM start for all), each
    job's [predicate] sql over its arrays. Returns {id: (n, M) int64 seq rows, -1 for null}."""
    spec = {"parallelism": parallelism, "watermark_delay_ms": 1000, "cases": []}
    for cid, job, arrays in cases:
        sql = job.raw.get("predicate", {}).get("sql")
        if not sql:
            raise JobError(f"{job.path}: give the join as [predicate] sql to run it in Flink")
        d = os.path.join(work, cid)
        spec["cases"].append({"id": cid, "sql": flink_select(job, sql), "out": os.path.join(d, "pairs.csv"),
                              "tables": write_csv(job, arrays, d)})
    _run_script(spec, work, timeout, len(cases))
    out = {}
    for case, (cid, job, _) in zip(spec["cases"], cases):
        with open(case["out"]) as f:
            rows = [[int(v) if v != "" else -1 for v in r] for r in csv.reader(f)]
        out[cid] = np.array(rows, np.int64).reshape(-1, len(job.streams))
    return out
