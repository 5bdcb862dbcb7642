"""TPC-H workloads (tpch.py) from real tpchgen-cli output: each query's selections hold on the
rows it writes, with the counts DuckDB finds on the same tables; q5 staged by Spark and joined
by biclique under mpiexec equals the oracle, its final aggregate snapshot too."""
import os

import duckdb
import numpy as np
import pytest

from mpi_join.tools import tpch
from mpi_join.config import load_job
from mpi_join.storage.staged import read_staged
from conftest import cli, run_cli, run_local

SLOW = True


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return tpch.generate_tables(0.01, str(tmp_path_factory.mktemp("tpch")))


COUNTS = {
    "q5": ["SELECT count(*) FROM 'T/orders.parquet' WHERE o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'",
           "SELECT count(*) FROM 'T/lineitem.parquet'"],
    "q7": ["SELECT count(*) FROM 'T/lineitem.parquet' WHERE l_shipdate BETWEEN DATE '1995-01-01' AND DATE '1996-12-31'",
           "SELECT count(*) FROM 'T/supplier.parquet'"],
    "band": ["SELECT count(*) FROM 'T/lineitem.parquet' WHERE l_shipmode = 'TRUCK' AND l_quantity > 48",
             "SELECT count(*) FROM 'T/lineitem.parquet' WHERE l_shipinstruct = 'NONE'"],
}


@pytest.mark.parametrize("query", ["q5", "q7", "band"])
def test_each_query_writes_its_selection_with_duckdbs_counts(tmp_path, tables, query):
    path, rows = tpch.make(query, str(tmp_path / query), tables=tables, raw=False)
    job = load_job(path)
    arrays = read_staged(job)
    con = duckdb.connect()
    want = [con.execute(q.replace("T/", tables + "/")).fetchall()[0][0] for q in COUNTS[query]]
    assert [len(a) for a in arrays] == want == list(rows.values())
    if query == "band":
        assert (arrays[0]["quantity"] > 48).all() and set(arrays[0]["mode"]) == {b"TRUCK"}
    ts = np.concatenate([a["ts"] for a in arrays])[np.argsort(np.concatenate([a["seq"] for a in arrays]))]
    assert (np.diff(ts) >= 0).all()              # one merged order by event time


def test_q5_staged_by_spark_and_joined_by_biclique_equals_the_oracle_and_its_aggregate(tmp_path, tables):
    out = str(tmp_path / "q5")
    p = run_cli("tpch", "q5", "--out", out, "--tables", tables, "--limit", "6000")
    assert p.returncode == 0, p.stderr
    path = os.path.join(out, "job.toml")
    p = run_cli("stage", path, timeout=600)
    assert p.returncode == 0, p.stderr
    p = run_local(5, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    p = cli("verify", os.path.join(out, "out"), "--job", path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK: results equal the oracle" in p.stdout
    assert "the final one equals the oracle's aggregate" in p.stdout, p.stdout


def test_a_missing_tpchgen_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    import shutil
    import sys
    if os.path.exists(os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")):
        monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert shutil.which("tpchgen-cli") is None
    from mpi_join.errors import JobError
    with pytest.raises(JobError, match="tpchgen-cli not found: install it"):
        tpch.generate_tables(0.01, str(tmp_path))
