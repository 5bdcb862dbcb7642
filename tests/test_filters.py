"""SQL that filters and projects (join/filters.py, join/sql.py): a condition on one stream is
applied to its rows before the join, with SQL's nulls, and a SELECT list names the columns
`collect --with-payload` writes; both checked against DuckDB on the same raw CSV files, the
user's Flink query unchanged, in process for every strategy and under mpiexec, and through a
SIGKILL, a resume and a rescale."""
import datetime
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import cli, run_local, run_mpi
from mpi_join.config import load_job
from mpi_join.storage.staged import read_staged

CONDITIONS = [
    "device <> 'bot'", "device = 'web' OR x > 5", "NOT device IN ('bot', 'app')", "device IN ('web', NULL)",
    "device LIKE 'w%'", "device NOT LIKE '%o%'", "device ILIKE 'B%'", "x * 2 - 1 > 7", "x / 4 >= 1.5",
    "x BETWEEN 2 AND 6", "x IS NULL OR device IS NOT NULL", "NOT (x > 3 AND device = 'app')",
    "UPPER(device) = 'WEB'", "LENGTH(device) = 3 AND ABS(x - 5) < 2", "-x < -4", "ts % 2 = 0",
    "x NOT BETWEEN 2 AND 6", "device NOT ILIKE 'b%'", "x IN (1, 2.0, -3) AND ts >= 100",
]


def _table(rng, n=400):
    dev = np.array(["web", "bot", "app", "Bot", "tv"], object)[rng.integers(0, 5, n)]
    x = rng.integers(0, 10, n).astype(float)
    return pa.table({"device": pa.array(dev.tolist(), mask=rng.random(n) < 0.2),
                     "x": pa.array(x, mask=rng.random(n) < 0.2), "ts": pa.array(np.arange(n))})


@pytest.mark.parametrize("cond", CONDITIONS)
def test_a_filter_keeps_the_rows_duckdbs_where_keeps(cond):
    duckdb = pytest.importorskip("duckdb")
    from mpi_join.join import filters
    t = _table(np.random.default_rng(len(cond)))
    if "%" in cond and "LIKE" not in cond:
        with pytest.raises(filters.Refused, match="not a condition mpi-join evaluates"):
            filters.compiled(cond)(t)
        return
    con = duckdb.connect()
    con.register("t", t)
    want = np.array([r[0] for r in con.execute(f"select coalesce({cond}, false) from t").fetchall()])
    got = filters.compiled(cond)(t)
    assert got.tolist() == want.tolist() and 0 < got.sum() < len(got)


JOB = """
[job]
name = "clicks"
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.impressions]
schema = {{ id = "int64", ad = "int32", country = "string", x = "float64" }}
raw = {{ path = "raw/impressions", format = "csv", time = "t", time_unit = "ms" }}
[streams.clicks]
schema = {{ id = "int64", ad = "int32", device = "string", y = "float64" }}
raw = {{ path = "raw/clicks", format = "csv", time = "t", time_unit = "ms" }}
[predicate]
sql = '''{sql}'''
[strategy]
name = "{strategy}"
"""

# the user's Flink SQL, unchanged: a column list, and a WHERE on one stream
FLINK = ("SELECT c.id AS click_id, i.id AS impression_id, c.device, i.country, c.t AS click_time\n"
         "FROM impressions i JOIN clicks c\n"
         "  ON i.ad = c.ad AND c.t BETWEEN i.t AND i.t + INTERVAL '3' SECOND\n"
         "WHERE c.device <> 'bot' AND (i.country IN ('us', 'de') OR i.x > 8)")
BAND = ("SELECT i.id, c.id AS cid, i.x FROM impressions i, clicks c\n"
        "WHERE ABS(i.x - c.y) <= 0.5 AND c.t BETWEEN i.t AND i.t + INTERVAL '3' SECOND\n"
        "  AND c.device LIKE '%b%' AND i.x * 2 > 3")
LEFT = ("SELECT i.id, c.id AS cid, c.device FROM impressions i LEFT JOIN clicks c\n"
        "  ON i.ad = c.ad AND c.t BETWEEN i.t AND i.t + INTERVAL '3' SECOND AND c.device <> 'bot' "
        "AND i.country IS NOT NULL")


def _raw(root, rng, n=300):
    for s, text, num, vals in (("impressions", "country", "x", ["us", "in", "de"]),
                               ("clicks", "device", "y", ["web", "bot", "app"])):
        d = root / "raw" / s
        os.makedirs(d, exist_ok=True)
        t = np.sort(rng.integers(0, 40_000, n))
        with open(d / "a.csv", "w") as f:
            f.write(f"id,ad,t,{text},{num}\n")
            for i in range(n):
                v = "" if rng.random() < 0.15 else vals[rng.integers(0, 3)]
                f.write(f"{i + (0 if s == 'impressions' else 10_000)},{rng.integers(0, 4)},{t[i]},{v},"
                        f"{rng.uniform(0, 10):.2f}\n")


def _duckdb(root, sql):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    for s, text, num in (("impressions", "country", "x"), ("clicks", "device", "y")):
        con.execute(f"create table {s} as select * from read_csv('{root}/raw/{s}/a.csv', header = true, columns = "
                    f"{{'id': 'BIGINT', 'ad': 'INTEGER', 't': 'BIGINT', '{text}': 'VARCHAR', '{num}': 'DOUBLE'}})")
    # the same text, its interval in the raw time's unit (ms numbers in DuckDB)
    cur = con.execute(sql.replace("INTERVAL '3' SECOND", "3000"))
    return [d[0] for d in cur.description], sorted(cur.fetchall(), key=repr)


def _collected(root, path):
    out = root / "collected"
    c = cli("collect", str(root / "out"), "--job", path, "--out", str(out), "--with-payload", "--engine", "local")
    assert c.returncode == 0, c.stderr
    t = pq.read_table(str(out))
    rows = [tuple(round(v.timestamp() * 1000) if isinstance(v, datetime.datetime) else v  # (UTC, ms)
                  for v in r.values()) for r in t.to_pylist()]
    return t.column_names, sorted(rows, key=repr)


@pytest.mark.parametrize("sql,strategy,n", [
    (FLINK, "hash", 3), (FLINK, "mpiexec", 3), (BAND, "matrix", 4), (LEFT, "hash", 3), (LEFT, "matrix", 4),
    (LEFT, "biclique", 5), (LEFT, "handshake", 3), (LEFT, "llhj", 4), (LEFT, "splitjoin", 3), (LEFT, "psp", 3),
    (LEFT, "mpiexec", 3)])
def test_a_query_with_a_column_list_and_filters_equals_duckdbs_answer(tmp_path, sql, strategy, n):
    """`mpiexec`: hash through real MPI ranks; the others in process (run --local)."""
    rng = np.random.default_rng(n + len(sql) + len(strategy))
    _raw(tmp_path, rng)
    path = str(tmp_path / "job.toml")
    (tmp_path / "job.toml").write_text(JOB.format(sql=sql, strategy="hash" if strategy == "mpiexec" else strategy))
    st = cli("stage", path)
    assert st.returncode == 0, st.stderr
    job = load_job(path)
    assert any(s.filter for s in job.streams) and job.select
    flagged = [a["_null"].mean() for a, s in zip(read_staged(job), job.streams) if s.filter]
    assert all(0.1 < f < 0.9 for f in flagged), flagged        # the filters drop some rows, not all
    r = (run_mpi(n, "run", path) if strategy == "mpiexec" else run_local(n, "run", path))
    assert r.returncode == 0, r.stderr[-2000:]
    v = cli("verify", job.output, "--job", path)
    assert v.returncode == 0, v.stdout + v.stderr
    names, got = _collected(tmp_path, path)
    want_names, want = _duckdb(tmp_path, sql)
    assert names == want_names and got == want and len(want) > 10
    if sql is LEFT:
        assert any(r[1] is None for r in want)


def test_explain_prints_each_streams_filter_and_the_result_columns(tmp_path):
    (tmp_path / "job.toml").write_text(JOB.format(sql=FLINK, strategy="hash"))
    e = cli("explain", str(tmp_path / "job.toml"))
    assert e.returncode == 0, e.stderr
    assert "filter clicks: device <> 'bot'" in e.stdout, e.stdout
    assert "filter impressions: country IN ('us', 'de') OR x > 8" in e.stdout
    assert "result columns: click_id (clicks.id), impression_id (impressions.id), device (clicks.device), " \
           "country (impressions.country), click_time (clicks.ts)" in e.stdout


@pytest.mark.parametrize("strategy,ranks,again", [("matrix", 4, 5), ("handshake", 3, 3)])
def test_filters_and_an_outer_join_through_a_sigkill_a_resume_and_a_rescale(tmp_path, strategy, ranks, again):
    """The LEFT query (a filter on each stream in ON) crashes after two checkpoints and resumes,
    at another rank count where `again` differs: a filter is applied again to the rows a resume
    reads, and the answer is DuckDB's."""
    from test_checkpoint import kill_local_after_checkpoints, unpaced
    rng = np.random.default_rng(ranks + len(strategy))
    _raw(tmp_path, rng)
    path = str(tmp_path / "job.toml")
    (tmp_path / "job.toml").write_text(
        JOB.format(sql=LEFT, strategy=strategy) + '[run]\nbatch_size = 20\nmax_inflight = 2\nrate = 150\n'
        'flush_interval = "10ms"\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 100\nkeep = 3\n')
    assert cli("stage", path).returncode == 0
    job = load_job(path)
    p = kill_local_after_checkpoints(path, job.checkpoint.dir, ranks, 2, 600)
    assert p.returncode != 0 and not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    r = run_local(again, "run", unpaced(path), "--resume", job.checkpoint.dir)
    assert r.returncode == 0 and "resuming from checkpoint" in r.stderr, r.stderr[-2000:]
    names, got = _collected(tmp_path, path)
    want_names, want = _duckdb(tmp_path, LEFT)
    assert names == want_names and got == want and any(w[1] is None for w in want)
