"""`collect` in this process (storage/local_collect.py, `--engine local`, the default's choice for a
local run) writes what Spark's collect writes: the same columns and types, the same rows (an
outer join's lone rows with null payloads, payload nulls kept, char text unpadded), the same
summary counts; and it is refused in one line where it cannot collect."""
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import cli, run_local
from mpi_join.config import load_job
from test_nulls import EQUI, _job, _raw

SLOW = True


def _rows(d):
    t = pq.read_table(str(d))
    key = [c for c in t.column_names if c.endswith("_seq")] + ["emit_ns"]
    return t.schema, sorted(t.to_pylist(), key=lambda r: tuple(-1 if r[k] is None else r[k] for k in key))


@pytest.mark.parametrize("unit", ["ms", "us"])
def test_local_and_spark_collect_the_same_dataset(spark, tmp_path, unit):
    _raw(tmp_path, np.random.default_rng(5))
    path = _job(tmp_path, EQUI, "hash", outer=True)
    if unit == "us":
        (tmp_path / "job.toml").write_text((tmp_path / "job.toml").read_text().replace('ts_unit = "ms"', 'ts_unit = "us"'))
    assert cli("stage", path).returncode == 0
    assert run_local(3, "run", path).returncode == 0
    a = cli("collect", str(tmp_path / "out"), "--job", path, "--out", str(tmp_path / "a"), "--with-payload")
    b = cli("collect", str(tmp_path / "out"), "--job", path, "--out", str(tmp_path / "b"), "--with-payload",
            "--engine", "spark")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stderr.startswith("collect: engine local") and "collect: engine spark: --engine spark" in b.stderr
    sa, ra = _rows(tmp_path / "a")
    sb, rb = _rows(tmp_path / "b")
    assert sa.names == sb.names and [f.type for f in sa] == [f.type for f in sb], (sa, sb)
    assert ra == rb and any(r["S_seq"] is None for r in ra) and any(r["R_country"] is None for r in ra)
    ja, jb = (json.loads((tmp_path / d / "_summary.json").read_text()) for d in "ab")
    assert ja["results"] == jb["results"] == len(ra)
    assert {k: v.get("results") for k, v in ja["per_rank"].items()} == {k: v.get("results") for k, v in jb["per_rank"].items()}
    # a second collect into the same OUT replaces it; a run without _SUCCESS is refused in one line
    assert cli("collect", str(tmp_path / "out"), "--job", path, "--out", str(tmp_path / "a")).returncode == 0
    assert "R_country" not in pq.read_table(str(tmp_path / "a")).column_names
    (tmp_path / "out" / "_SUCCESS").unlink()
    r = cli("collect", str(tmp_path / "out"), "--job", path, "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "_SUCCESS" in r.stderr, r.stderr


def test_engine_local_refuses_what_needs_spark(tmp_path):
    _raw(tmp_path, np.random.default_rng(5), n=50)
    path = _job(tmp_path, EQUI, "hash")
    r = cli("collect", str(tmp_path / "out"), "--job", path, "--out", "hdfs://nn/x", "--engine", "local")
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "--out is not local" in lines[0], r.stderr
    load_job(path)


def test_input_beyond_a_quarter_of_the_memory_goes_to_spark_under_auto_and_is_refused_under_local(tmp_path,
                                                                                                monkeypatch):
    """MPI_JOIN_MEMORY_BYTES (or MemAvailable) bounds what stage and collect take in process."""
    _raw(tmp_path, np.random.default_rng(5), n=50)
    path = _job(tmp_path, EQUI, "hash")
    monkeypatch.setenv("MPI_JOIN_MEMORY_BYTES", "1000")
    r = cli("stage", "--engine", "local", path)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "more than a quarter of this machine's available memory" in \
        lines[0], r.stderr
    monkeypatch.delenv("MPI_JOIN_MEMORY_BYTES")
    assert cli("stage", path).returncode == 0
    assert run_local(2, "run", path).returncode == 0
    monkeypatch.setenv("MPI_JOIN_MEMORY_BYTES", "1000")
    c = cli("collect", str(tmp_path / "out"), "--job", path, "--out", str(tmp_path / "c"), "--engine", "local")
    assert c.returncode == 2 and "results of" in c.stderr and "use --engine spark" in c.stderr, c.stderr


def test_a_select_list_gives_the_same_columns_through_spark_local_collect_and_tail(spark, tmp_path):
    from test_filters import FLINK, JOB, _raw as raw_clicks
    raw_clicks(tmp_path, np.random.default_rng(9))
    path = str(tmp_path / "job.toml")
    (tmp_path / "job.toml").write_text(JOB.format(sql=FLINK, strategy="hash"))
    assert cli("stage", path).returncode == 0
    assert run_local(3, "run", path).returncode == 0
    runs = [cli("collect", str(tmp_path / "out"), "--job", path, "--out", str(tmp_path / d), "--with-payload",
                "--engine", e) for d, e in (("a", "local"), ("b", "spark"))]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    ta, tb = (pq.read_table(str(tmp_path / d)) for d in "ab")
    names = ["click_id", "impression_id", "device", "country", "click_time"]
    assert ta.column_names == tb.column_names == names and ta.schema == tb.schema, (ta.schema, tb.schema)
    ra, rb = (sorted(t.to_pylist(), key=repr) for t in (ta, tb))
    assert ra == rb and len(ra) > 10
    t = cli("tail", str(tmp_path / "out"), "--no-follow", "--with-payload", "--job", path, "--format", "jsonl")
    assert t.returncode == 0, t.stderr
    lines = [json.loads(x) for x in t.stdout.splitlines()]
    assert all(list(x) == names for x in lines) and len(lines) == len(ra)
    assert sorted((x["click_id"], x["impression_id"], x["device"], x["country"]) for x in lines) == \
        sorted((r["click_id"], r["impression_id"], r["device"], r["country"]) for r in ra)
    assert any(r["country"] is None for r in ra)       # a staged null comes back as null, here too
