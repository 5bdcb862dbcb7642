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


def write_csv(job, arrays, directory):
    """Each stream's staged rows as a CSV file for Flink: seq, ts_ms, then the payload columns.
    Returns the case's "tables" entry of the spec. Flink's event time is TIMESTAMP(3): a job
    whose ts_unit is not ms is refused rather than rounded (README: the differences on purpose)."""
    if job.ts_unit != "ms":
        raise JobError(f"{job.path}: Flink's event time is in milliseconds; compare jobs with ts_unit = \"ms\" "
                       f"(this one has {job.ts_unit!r})")
    os.makedirs(directory, exist_ok=True)
    tables = []
    for s, a in zip(job.streams, arrays):
        path = os.path.join(directory, f"{s.name}.csv")
        names = list(s.schema)
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            cols = [a["seq"].tolist(), a["ts"].tolist()] + [
                [v.decode() for v in a[c]] if a.dtype[c].kind == "S" else a[c].tolist() for c in names]
            w.writerows(zip(*cols))
        tables.append({"name": s.name, "csv": path, "time": "ts",
                       "columns": [["seq", "BIGINT"], ["ts_ms", "BIGINT"]]
                       + [[c, _TYPES[a.dtype[c].kind]] for c in names]})
    return tables


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
    path = os.path.join(work, "flink-spec.json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flink_sql.py")
    try:
        p = subprocess.run([flink_python(), script, path], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise JobError(f"Flink did not finish {len(cases)} case(s) within {timeout} s") from None
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-15:])
        raise JobError(f"Flink failed (exit {p.returncode}):\n{tail}")
    out = {}
    for case, (cid, job, _) in zip(spec["cases"], cases):
        with open(case["out"]) as f:
            rows = [[int(v) if v != "" else -1 for v in r] for r in csv.reader(f)]
        out[cid] = np.array(rows, np.int64).reshape(-1, len(job.streams))
    return out
