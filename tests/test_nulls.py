"""Nulls as SQL has them (README "Nulls"), checked against DuckDB on the same raw CSV files: a
null in a payload column keeps its row and is null again after `collect --with-payload`; a
null in a key or band column the stream declares `nullable` keeps the row, which matches
nothing (a lone row of an outer join); a null in a compared column not declared nullable, or in
the event time, is quarantined by itself. Inner and LEFT outer, equi keys and bands, several
strategies and rank counts."""
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import cli, run_local, run_mpi
from mpi_join.config import load_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.staged import read_staged

SLOW = True

JOB = """
[job]
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.R]
schema = {{ id = "int64", ad = "int32", user = "int64", x = "float64", country = "char4" }}
{r_nullable}
raw = {{ path = "raw/R", format = "csv", time = "t", time_unit = "ms" }}
[streams.S]
schema = {{ id = "int64", ad = "int32", user = "int64", y = "float64", device = "char6" }}
{s_nullable}
raw = {{ path = "raw/S", format = "csv", time = "t", time_unit = "ms" }}
[predicate]
{predicate}
interval = {{ left = "R", right = "S", lower = "0s", upper = "3s" }}
{outer}
[strategy]
name = "{strategy}"
"""

EQUI = 'equi = [["R.ad", "S.ad"], ["R.user", "S.user"]]'
BAND = 'band = [{ left = "R.x", right = "S.y", eps = 1.5, closed = true }]'


def _field(v):
    return "" if v is None else str(v)


def _raw(root, rng, n=400, files=3):
    """Random landing files: R (impressions) and S (clicks) with nulls in every column but id, t."""
    for s, other in (("R", "country"), ("S", "device")):
        d = root / "raw" / s
        os.makedirs(d, exist_ok=True)
        cols = ["id", "ad", "user", "t", "x" if s == "R" else "y", other]
        ids = np.arange(n) + (0 if s == "R" else 10_000)
        t = np.sort(rng.integers(0, 60_000, n))
        rows = []
        for i in range(n):
            null = rng.random(5) < 0.15
            rows.append([int(ids[i]), None if null[0] else int(rng.integers(0, 4)),
                         None if null[1] else int(rng.integers(0, 3)), int(t[i]),
                         None if null[2] else round(float(rng.uniform(0, 10)), 2),
                         None if null[3] else ["us", "in", "de"][rng.integers(0, 3)]])
        for k in range(files):
            with open(d / f"part-{k}.csv", "w") as f:
                f.write(",".join(cols) + "\n")
                for r in rows[k::files]:
                    f.write(",".join(_field(v) for v in r) + "\n")


def _job(root, predicate, strategy="hash", outer=False, nullable=True):
    decl = 'nullable = ["ad", "user", "x"]', 'nullable = ["ad", "user", "y"]'
    (root / "job.toml").write_text(JOB.format(
        predicate=predicate, strategy=strategy, outer='outer = ["R"]' if outer else "",
        r_nullable=decl[0] if nullable else "", s_nullable=decl[1] if nullable else ""))
    return str(root / "job.toml")


def _duckdb(root, on, outer):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    for s, other, v in (("R", "country", "x"), ("S", "device", "y")):
        con.execute(f"create table {s} as select * from read_csv('{root}/raw/{s}/*.csv', header = true, columns = "
                    f"{{'id': 'BIGINT', 'ad': 'INTEGER', 'user': 'BIGINT', 't': 'BIGINT', '{v}': 'DOUBLE', "
                    f"'{other}': 'VARCHAR'}})")
    join = "left join" if outer else "join"
    q = (f"select R.id, R.country, S.id, S.device from R {join} S on {on} and S.t - R.t between 0 and 3000")
    return sorted(tuple(r) for r in con.execute(q).fetchall())


def _collected(spark, job, root):
    from mpi_join.storage.spark.collect import collect
    out = f"file://{root}/collected"
    collect(spark, job, job.output, out, with_payload=True, progress=lambda m: None)
    t = pq.read_table(str(root / "collected"))
    dec = (lambda v: None if v is None else (v.rstrip(b"\0").decode() if isinstance(v, bytes) else v))
    return sorted((r["R_id"], dec(r["R_country"]), r["S_id"], dec(r["S_device"])) for r in t.to_pylist())


@pytest.mark.parametrize("strategy,n,outer", [("hash", 3, True), ("hash", 4, False), ("psp", 3, False),
                                              ("handshake", 3, False), ("llhj", 4, False), ("splitjoin", 4, False),
                                              ("biclique", 5, False), ("matrix", 5, False), ("mpiexec", 3, True)])
def test_null_keys_match_nothing_and_null_payloads_come_back_as_nulls(spark, tmp_path, strategy, n, outer):
    """`mpiexec`: hash through real MPI ranks."""
    rng = np.random.default_rng(7 + n)
    _raw(tmp_path, rng)
    path = _job(tmp_path, EQUI, "hash" if strategy == "mpiexec" else strategy, outer)
    st = cli("stage", path)
    assert st.returncode == 0 and "engine local" in st.stderr, st.stderr
    job = load_job(path)
    arrays = read_staged(job)
    assert all(a["_null"].any() for a in arrays)       # null keys were staged, flagged
    r = (run_mpi if strategy == "mpiexec" else run_local)(n, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    v = cli("verify", job.output, "--job", path)
    assert v.returncode == 0, v.stdout + v.stderr
    got = _collected(spark, job, tmp_path)
    want = _duckdb(tmp_path, "R.ad = S.ad and R.user = S.user", outer)
    assert got == want
    assert any(r[1] is None for r in want) and any(r[3] is None for r in want if r[2] is not None)
    if outer:
        assert any(r[2] is None for r in want)
    if strategy == "mpiexec":       # tail --with-payload gives the same rows, a staged null as null
        import json
        t = cli("tail", job.output, "--no-follow", "--with-payload", "--job", path, "--format", "jsonl")
        assert t.returncode == 0, t.stderr
        rows = [json.loads(line) for line in t.stdout.splitlines() if line.strip()]
        assert sorted((r["R_id"], r["R_country"], r["S_id"], r["S_device"]) for r in rows) == want


@pytest.mark.parametrize("outer", [False, True])
def test_a_null_band_column_is_within_no_band(tmp_path, outer):
    """The oracle and `hash`'s ranks on a band over nullable columns (NaN in the ranks)."""
    rng = np.random.default_rng(11)
    _raw(tmp_path, rng, n=200)
    path = _job(tmp_path, 'equi = [["R.ad", "S.ad"]]\n' + BAND, "hash", outer)
    assert cli("stage", path).returncode == 0
    job = load_job(path)
    arrays = read_staged(job)
    duck = _duckdb(tmp_path, "R.ad = S.ad and abs(R.x - S.y) <= 1.5", outer)
    ids = [dict(zip(a["seq"].tolist(), a["id"].tolist())) for a in arrays]
    oracle = sorted((ids[0][int(a)], ids[1].get(int(b))) for a, b in run_oracle(job, arrays))
    assert oracle == sorted((r[0], r[2]) for r in duck)
    r = run_local(3, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    v = cli("verify", job.output, "--job", path)
    assert v.returncode == 0, v.stdout + v.stderr


def test_a_null_in_a_compared_column_not_declared_nullable_is_quarantined(tmp_path):
    """Without `nullable`, a null key is refused by itself, with its reason; payload nulls are kept."""
    rng = np.random.default_rng(3)
    _raw(tmp_path, rng, n=200)
    path = _job(tmp_path, EQUI, nullable=False)
    st = cli("stage", path)
    assert st.returncode == 0, st.stderr
    q = pq.read_table(str(tmp_path / "staged" / "_quarantine" / "R")).to_pylist()
    assert q and all(("ad: missing (null)" in r["reason"]) == (r["ad"] is None) for r in q)
    assert all(r["ad"] is None or r["user"] is None for r in q)
    staged = pq.read_table(str(tmp_path / "staged" / "R"))
    assert staged.column("country").null_count > 0 and staged.column("user").null_count == 0
    bad = cli("check", str(tmp_path / "job.toml").replace("job.toml", "nope.toml"))
    assert bad.returncode == 2
    # a declared nullable column that is not in the schema is refused in one line
    (tmp_path / "job.toml").write_text((tmp_path / "job.toml").read_text().replace(
        "[streams.S]", '[streams.S]\nnullable = ["nope"]', 1))
    c = cli("check", path)
    assert c.returncode == 2 and "streams.S.nullable: 'nope' is not a column of the schema" in c.stderr, c.stderr


THETA_JOB = """
[job]
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.R]
schema = { id = "int64", x = "float64", y = "float64" }
nullable = ["x"]
raw = { path = "raw/R", format = "csv", time = "t", time_unit = "ms" }
[streams.S]
schema = { id = "int64", a = "float64", b = "float64" }
nullable = ["a", "b"]
raw = { path = "raw/S", format = "csv", time = "t", time_unit = "ms" }
[predicate]
theta = [{ udf = "mpi_join.udfs:band10", streams = ["R", "S"] }]
interval = { left = "R", right = "S", lower = "0s", upper = "2s" }
[strategy]
name = "handshake"
"""


def test_a_udf_is_not_asked_about_a_row_with_a_null(tmp_path):
    """A UDF reads whole records: a row with a null in a nullable column of its streams matches
    nothing (the UDF would see 0), as DuckDB's `abs(NULL - b) < 10` is not true."""
    duckdb = pytest.importorskip("duckdb")
    rng = np.random.default_rng(13)
    for s, (c1, c2) in (("R", ("x", "y")), ("S", ("a", "b"))):
        os.makedirs(tmp_path / "raw" / s)
        t = np.sort(rng.integers(0, 20_000, 300))
        with open(tmp_path / "raw" / s / "a.csv", "w") as f:
            f.write(f"id,t,{c1},{c2}\n")
            for i in range(300):
                v1 = "" if rng.random() < 0.2 else f"{rng.uniform(0, 30):.2f}"
                v2 = "" if s == "S" and rng.random() < 0.2 else f"{rng.uniform(0, 30):.2f}"
                f.write(f"{i + (0 if s == 'R' else 1000)},{t[i]},{v1},{v2}\n")
    (tmp_path / "job.toml").write_text(THETA_JOB)
    path = str(tmp_path / "job.toml")
    assert cli("stage", path).returncode == 0
    job = load_job(path)
    arrays = read_staged(job)
    assert arrays[0]["_null"].any() and arrays[1]["_null"].any()
    ids = [dict(zip(a["seq"].tolist(), a["id"].tolist())) for a in arrays]
    got = sorted((ids[0][int(a)], ids[1][int(b)]) for a, b in run_oracle(job, arrays))
    con = duckdb.connect()
    for s in "RS":
        con.execute(f"create table {s} as select * from read_csv('{tmp_path}/raw/{s}/a.csv', header = true)")
    want = sorted(con.execute("select R.id, S.id from R join S on abs(R.x - S.a) < 10 and abs(R.y - S.b) < 10 "
                              "and S.t - R.t between 0 and 2000").fetchall())
    assert got == want and len(want) > 0
    r = run_local(3, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    v = cli("verify", job.output, "--job", path)
    assert v.returncode == 0, v.stdout + v.stderr
