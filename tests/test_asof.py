"""ASOF joins (join/asof.py, README "ASOF joins"): the oracle against DuckDB's ASOF JOIN on random
inputs (ties, tolerance edges, keys without a right row), `nearest` against a brute force; the
SQL forms and what is refused; `hash` equal to the oracle in process and under mpiexec, through
a SIGKILL, a --resume and a rescale, and live; a query as DuckDB writes it, staged from raw CSV,
equal to DuckDB's answer."""
import itertools
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import cli, equi_job_text, random_streams, run_local, run_mpi, write_job
from mpi_join.config import parse_job
from mpi_join.errors import ConfigError
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from reference import assert_same_rows

CASES = [("backward", None, True), ("backward", "20ms", False), ("backward", "0ms", True), ("forward", "30ms", True),
         ("forward", "9ms", False), ("nearest", "15ms", True), ("nearest", "7ms", False)]


def _pred(direction, tol, closed, keep, left="R"):
    right = "S" if left == "R" else "R"
    return ('equi = [["R.k", "S.k"]]\nasof = { left = "%s", right = "%s", direction = "%s"%s, closed = %s }%s'
            % (left, right, direction, "" if tol is None else f', tolerance = "{tol}"', str(closed).lower(),
               f'\nouter = ["{left}"]' if keep else ""))


def _job(tmp_path, pred, n=3000, seed=3, run="batch_size = 97\nmax_inflight = 2", extra=""):
    arrays = random_streams(np.random.default_rng(seed), n, key_range=30, ts_step=3)
    arrays[1]["k"][arrays[1]["k"] == 7] = 8                  # key 7: left rows with no right row at all
    path, job = write_job(str(tmp_path), equi_job_text(None, predicate=pred, run=run) + extra, arrays)
    return path, job, arrays


def _times(job, arrays, rows):
    """(left seq, the matched right row's ts or None): what DuckDB's answer can be compared on (of
    right rows at the same time it takes any one)."""
    a = job.predicate.asof
    rts = dict(zip(arrays[a.right]["seq"].tolist(), arrays[a.right]["ts"].tolist()))
    return sorted((int(r[a.left]), None if r[a.right] < 0 else rts[int(r[a.right])]) for r in rows)


@pytest.mark.parametrize("direction,tol,closed,keep", [c + (k,) for c in CASES for k in (False, True)])
def test_the_oracle_equals_duckdbs_asof_join(tmp_path, direction, tol, closed, keep):
    duckdb = pytest.importorskip("duckdb")
    path, job, arrays = _job(tmp_path, _pred(direction, tol, closed, keep))
    got = run_oracle(job, arrays)
    R, S = arrays
    lts = dict(zip(R["seq"].tolist(), R["ts"].tolist()))
    t = None if tol is None else int(tol[:-2])
    if direction == "nearest":       # DuckDB has no nearest: every qualifying right row, the nearest kept
        want = []
        for r in R:
            d = S["ts"].astype(np.int64) - int(r["ts"])
            ok = (S["k"] == r["k"]) & (np.abs(d) <= t) & ((d != 0) | closed)
            if ok.any():
                cand = min(zip(np.abs(d[ok]).tolist(), (d[ok] > 0).tolist(), S["ts"][ok].tolist()))
                want.append((int(r["seq"]), cand[2]))
            elif keep:
                want.append((int(r["seq"]), None))
    else:
        con = duckdb.connect()
        con.register("r", pa.table({"seq": R["seq"], "ts": R["ts"], "k": R["k"]}))
        con.register("s", pa.table({"seq": S["seq"], "ts": S["ts"], "k": S["k"]}))
        op = {"backward": ">=", "forward": "<="}[direction] + ("" if closed else "")
        op = op if closed else op[0]
        rows = con.execute(f"select r.seq, s.ts from r asof {'left ' if keep else ''}join s "
                           f"on r.k = s.k and r.ts {op} s.ts").fetchall()
        want = []            # DuckDB has no tolerance: a match beyond it is none (then no row or, LEFT, alone)
        for a, st in rows:
            if st is not None and t is not None and abs(lts[a] - st) > t:
                st = None
            if st is not None or keep:
                want.append((a, st))
    assert _times(job, arrays, got) == sorted(want)
    assert len(want) > 10 and (not keep or any(w[1] is None for w in want))
    if keep:
        assert sorted(int(x) for x in got[:, 0]) == sorted(R["seq"].tolist())   # every left row, once


def test_equal_times_take_the_last_right_row_to_arrive():
    text = equi_job_text(None, predicate=_pred("backward", None, True, False))
    job = parse_job(__import__("tomllib").loads(text))
    R = np.zeros(2, [("seq", "i8"), ("ts", "i8"), ("k", "i4"), ("k2", "i2"), ("v", "f4")])
    S = np.zeros(3, [("seq", "i8"), ("ts", "i8"), ("k", "i8"), ("k2", "i2"), ("w", "f8")])
    R["seq"], R["ts"] = [3, 4], [10, 10]
    S["seq"], S["ts"] = [0, 1, 2], [10, 10, 9]
    assert run_oracle(job, [R, S]).tolist() == [[3, 1], [4, 1]]


SQL = [
    ("SELECT * FROM R r ASOF JOIN S s ON r.k = s.k AND r.ts >= s.ts",
     {"left": "R", "right": "S", "direction": "backward", "closed": True}, ()),
    ("SELECT * FROM R r ASOF LEFT JOIN S s ON r.k = s.k AND s.ts < r.ts AND s.ts >= r.ts - INTERVAL '20' MILLISECOND",
     {"left": "R", "right": "S", "direction": "backward", "closed": False, "tolerance": "20ms"}, (0,)),
    ("SELECT * FROM S s ASOF JOIN R r ON s.k = r.k AND s.ts <= r.ts AND r.ts <= s.ts + INTERVAL '30' MILLISECOND",
     {"left": "S", "right": "R", "direction": "forward", "closed": True, "tolerance": "30ms"}, ()),
]


@pytest.mark.parametrize("sql,table,outer", SQL)
def test_an_asof_join_in_sql_is_the_job_its_toml_form_is(tmp_path, sql, table, outer):
    from mpi_join.join.sql import predicate_table
    t = predicate_table(sql, ["R", "S"], "ms")
    assert t["asof"] == table and t["equi"]
    job = parse_job(__import__("tomllib").loads(equi_job_text(None, predicate=f"sql = '''{sql}'''")))
    a = job.predicate.asof
    assert (a.direction, a.closed, a.keep) == (table["direction"], table["closed"], bool(outer))
    assert job.predicate.outer == ()


REFUSED = [
    ('equi = [["R.k", "S.k"]]\nasof = { left = "R", right = "S", direction = "forward" }',
     "predicate.asof.tolerance: required with direction = \"forward\""),
    ('band = [{ left = "R.v", right = "S.w", eps = 1 }]\nasof = { left = "R", right = "S" }', "no band or theta"),
    ('equi = [["R.k", "S.k"]]\nasof = { left = "R", right = "S" }\nouter = ["S"]', "ASOF LEFT JOIN"),
    ('equi = [["R.k", "S.k"]]\nasof = { left = "R", right = "S", direction = "sideways" }', "direction: expected one of"),
    ('equi = [["R.k", "S.k"]]\nasof = { left = "R", right = "S", tolerance = "1.5ms" }', "not a whole number of ms"),
    ('equi = [["R.k", "S.k"]]\nasof = { left = "R", right = "S" }\n'
     'interval = { left = "R", right = "S", lower = "0s", upper = "1s" }', "an ASOF join or an interval"),
    ("sql = '''SELECT * FROM R r ASOF JOIN S s ON r.k = s.k AND r.ts >= s.ts + 5'''", "its time condition reads"),
    ("sql = '''SELECT * FROM R r ASOF RIGHT JOIN S s ON r.k = s.k AND r.ts >= s.ts'''", "inner or LEFT"),
]


@pytest.mark.parametrize("pred,says", REFUSED)
def test_what_an_asof_join_cannot_be_is_refused_in_one_line(pred, says):
    with pytest.raises(ConfigError) as e:
        parse_job(__import__("tomllib").loads(equi_job_text(None, predicate=pred)))
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_strategies_that_do_not_run_asof_joins_refuse_them_in_one_line(tmp_path):
    path, _, _ = _job(tmp_path, _pred("backward", "20ms", True, False))
    text = (tmp_path / "job.toml").read_text()
    (tmp_path / "job.toml").write_text(text.replace('name = "hash"', 'name = "splitjoin"'))
    c = cli("check", path, "-n", "4")
    assert c.returncode == 2 and "asof" in c.stderr and "strategies that support it: hash, matrix" in c.stderr, c.stderr
    # matrix chooses its grid for it: a grid given otherwise is refused
    (tmp_path / "job.toml").write_text(text.replace('name = "hash"', 'name = "matrix"\nrows = 2'))
    c = cli("check", path, "-n", "5")
    assert c.returncode == 2 and "strategy.rows: an ASOF join puts each left row in one cell" in c.stderr, c.stderr


def test_a_keyless_asof_join_and_its_filters_equal_duckdbs(tmp_path):
    """Without keys every right row is a candidate; a row its filter drops matches nothing (a left
    row is then alone), as DuckDB's ASOF LEFT JOIN with the left condition in ON and the right
    stream filtered."""
    duckdb = pytest.importorskip("duckdb")
    pred = ('asof = { left = "R", right = "S", direction = "backward" }\nouter = ["R"]\n'
            'filter = { R = "v > 5", S = "w < 15" }')
    path, job, arrays = _job(tmp_path, pred)
    from mpi_join.storage.staged import read_staged
    got = run_oracle(job, read_staged(job))
    R, S = arrays
    con = duckdb.connect()
    con.register("r", pa.table({"seq": R["seq"], "ts": R["ts"], "v": R["v"]}))
    con.register("s", pa.table({"seq": S["seq"], "ts": S["ts"], "w": S["w"]}))
    want = con.execute("select r.seq, f.ts from r asof left join (select * from s where w < 15) f "
                       "on r.ts >= f.ts and r.v > 5").fetchall()
    assert _times(job, arrays, got) == sorted(want, key=lambda w: (w[0], -1 if w[1] is None else w[1]))
    assert any(w[1] is None for w in want) and len(want) == len(R)


MATRIX = [("nearest", "9ms", False, False, "S", True), ("forward", "15ms", True, True, "S", False),
          ("backward", None, False, False, "R", False)]


@pytest.mark.parametrize("direction,tol,closed,keep,left,keyed", MATRIX)
def test_matrix_runs_an_asof_join_with_keys_or_without_equal_to_the_oracle(tmp_path, direction, tol, closed, keep,
                                                                         left, keyed):
    """A grid of one column (left R) or one row (left S): each left row in one cell, with every
    right row."""
    pred = _pred(direction, tol, closed, keep, left)
    path, job, arrays = _job(tmp_path, pred if keyed else pred.replace('equi = [["R.k", "S.k"]]\n', ""))
    (tmp_path / "job.toml").write_text((tmp_path / "job.toml").read_text().replace('name = "hash"', 'name = "matrix"'))
    r = run_local(4, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_rows(read_results(job.output, job.stream_names), run_oracle(job, arrays))


RUNS = [c + (k, left) for (c, k, left) in zip(CASES, itertools.cycle((False, True)), itertools.cycle(("R", "S", "S")))
        if c[0] != "backward" or c[1] != "20ms"][:5]


@pytest.mark.parametrize("direction,tol,closed,keep,left", RUNS)
def test_hash_runs_an_asof_join_equal_to_the_oracle(tmp_path, direction, tol, closed, keep, left):
    path, job, arrays = _job(tmp_path, _pred(direction, tol, closed, keep, left), seed=len(direction) + closed)
    r = run_local(3, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    expect = run_oracle(job, arrays)
    assert len(expect) > 10
    assert_same_rows(read_results(job.output, job.stream_names), expect)


@pytest.mark.parametrize("strategy", ["hash", "matrix"])
def test_an_asof_join_under_mpiexec(tmp_path, strategy):
    """hash with keys; matrix without (a grid of one column)."""
    pred = _pred("nearest", "12ms", True, True)
    path, job, arrays = _job(tmp_path, pred if strategy == "hash" else pred.replace('equi = [["R.k", "S.k"]]\n', ""),
                             n=5000)
    (tmp_path / "job.toml").write_text((tmp_path / "job.toml").read_text().replace('name = "hash"',
                                                                                  f'name = "{strategy}"'))
    r = run_mpi(4, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_rows(read_results(job.output, job.stream_names), run_oracle(job, arrays))


@pytest.mark.parametrize("strategy,again", [("hash", 5), ("matrix", 5)])
def test_an_asof_join_through_a_sigkill_a_resume_and_a_rescale(tmp_path, strategy, again):
    """Left rows waiting in their window at the cut are matched after the resume, once."""
    from test_checkpoint import kill_local_after_checkpoints, unpaced
    run = 'batch_size = 40\nmax_inflight = 2\nrate = 2500\nflush_interval = "10ms"'
    path, job, arrays = _job(tmp_path, _pred("backward", "25ms", True, True), n=12000, run=run,
                             extra='\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 1500\nkeep = 3\n')
    (tmp_path / "job.toml").write_text((tmp_path / "job.toml").read_text().replace('name = "hash"',
                                                                                  f'name = "{strategy}"'))
    p = kill_local_after_checkpoints(path, job.checkpoint.dir, 4, 2, 12000)
    assert p.returncode != 0 and not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    r = run_local(again, "run", unpaced(path), "--resume", job.checkpoint.dir)
    assert r.returncode == 0 and "resuming from checkpoint" in r.stderr, r.stderr[-2000:]
    assert_same_rows(read_results(job.output, job.stream_names), run_oracle(job, arrays))


@pytest.mark.parametrize("strategy", ["hash", "matrix"])
def test_an_asof_join_followed_live_matches_each_left_row_once(tmp_path, strategy):
    """A growing staged log, followed under mpiexec: every left row's match is committed once
    (before the log ends for the rows whose wait is over), equal to the oracle's on the log."""
    import json
    import subprocess
    import time
    from conftest import MPIEXEC, mpi_join_cmd
    from mpi_join.config import load_job
    from mpi_join.storage.staged_log import LogWriter, waiting_dtype
    text = equi_job_text(None, strategy=strategy, predicate=_pred("backward", "30ms", True, True),
                         run='batch_size = 50\nflush_interval = "5ms"')
    (tmp_path / "job.toml").write_text(text.replace('dir = "out"', 'dir = "out"\ncommit_every = "100ms"'))
    job = load_job(str(tmp_path / "job.toml"))
    w = LogWriter(job, job.staged, 0, {"test": 1})
    rng = np.random.default_rng(5)

    def rows(k, t0, n):
        a = np.zeros(n, waiting_dtype(job.streams[k]))
        a["ts"] = t0 + np.sort(rng.integers(0, 400, n))
        a["k"] = rng.integers(0, 8, n)
        a["_rec"] = np.arange(1, n + 1)
        return a
    w.commit(0, [rows(0, 0, 200), rows(1, 0, 200)], ["a.csv"])
    run = subprocess.Popen([MPIEXEC, "-n", "3", *mpi_join_cmd("run", "--follow", str(tmp_path / "job.toml"))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for b in range(1, 5):
        time.sleep(0.4)
        w.commit(b, [rows(0, b * 400, 150), rows(1, b * 400, 150)], ["a.csv"])
    w.end("test")
    try:
        out, err = run.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        run.kill()
        raise
    assert run.returncode == 0, err[-3000:]
    v = cli("verify", str(tmp_path / "out"), "--job", str(tmp_path / "job.toml"))
    assert v.returncode == 0 and "OK: results equal the oracle" in v.stdout, v.stdout + v.stderr
    committed = json.loads((tmp_path / "out" / "_COMMITTED").read_text())
    assert committed["final"] and committed["commits"] >= 2
    early = [json.loads((tmp_path / "out" / "commits" / f"commit-{c:06d}.json").read_text())
             for c in range(committed["commits"] - 1)]
    assert any(r["rows"] for e in early for r in e["files"].values()), "no match was committed before the log ended"


JOB = """
[job]
name = "taq"
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.trades]
schema = {{ id = "int64", sym = "string", px = "float64" }}
raw = {{ path = "raw/trades", format = "csv", time = "t", time_unit = "ms" }}
[streams.quotes]
schema = {{ id = "int64", sym = "string", bid = "float64" }}
raw = {{ path = "raw/quotes", format = "csv", time = "t", time_unit = "ms" }}
[predicate]
sql = '''{sql}'''
[strategy]
name = "hash"
"""

TAQ = ("SELECT t.id AS trade, q.bid, q.t AS quote_time FROM trades t ASOF LEFT JOIN quotes q\n"
       "  ON t.sym = q.sym AND t.t >= q.t")


def test_a_duckdb_asof_query_staged_from_raw_csv_equals_duckdbs_answer(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    rng = np.random.default_rng(11)
    for s, n in (("trades", 400), ("quotes", 900)):
        os.makedirs(tmp_path / "raw" / s)
        t = np.sort(rng.integers(0, 30_000, n))
        with open(tmp_path / "raw" / s / "a.csv", "w") as f:
            f.write("id,sym,t,px\n" if s == "trades" else "id,sym,t,bid\n")
            for i in range(n):
                f.write(f"{i},{['AAPL', 'MSFT', 'IBM', 'NVDA'][rng.integers(0, 4)]},{t[i]},{rng.uniform(1, 9):.2f}\n")
    path = str(tmp_path / "job.toml")
    (tmp_path / "job.toml").write_text(JOB.format(sql=TAQ))
    assert cli("stage", path).returncode == 0
    r = run_local(3, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    c = cli("collect", str(tmp_path / "out"), "--job", path, "--out", str(tmp_path / "c"), "--with-payload",
            "--engine", "local")
    assert c.returncode == 0, c.stderr
    got = pq.read_table(str(tmp_path / "c"))
    assert got.column_names == ["trade", "bid", "quote_time"]
    con = duckdb.connect()
    for s, col in (("trades", "px"), ("quotes", "bid")):
        con.execute(f"create table {s} as select * from read_csv('{tmp_path}/raw/{s}/a.csv', header = true, "
                    f"columns = {{'id': 'BIGINT', 'sym': 'VARCHAR', 't': 'BIGINT', '{col}': 'DOUBLE'}})")
    want = sorted(con.execute(TAQ.replace("q.bid, ", "")).fetchall(), key=repr)   # (of equal times any one bid)
    mine = sorted(((r["trade"], None if r["quote_time"] is None else round(r["quote_time"].timestamp() * 1000))
                   for r in got.to_pylist()), key=repr)
    assert mine == want and any(w[1] is None for w in want) and len(want) == 400


@pytest.mark.parametrize("params", ['reorganize_every = 1\nforce = "migrate"', 'local_join = "bnl"'])
def test_an_asof_join_moves_with_its_groups_and_runs_on_a_nested_loop(tmp_path, params):
    """Groups migrate at every reorganisation (their waiting left rows and right rows together),
    and `local_join = "bnl"` finds the candidates by its own loop: the same matches."""
    arrays = random_streams(np.random.default_rng(9), 4000, key_range=30, ts_step=3)
    text = equi_job_text(None, predicate=_pred("nearest", "9ms", False, True), extra_strategy=params,
                         run="batch_size = 97\nmax_inflight = 2")
    path, job = write_job(str(tmp_path), text, arrays)
    r = run_local(4, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_rows(read_results(job.output, job.stream_names), run_oracle(job, arrays))
