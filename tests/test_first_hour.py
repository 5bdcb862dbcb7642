"""A new user's first hour (fast tier, no Spark; one test runs mpiexec): empty answers are warned about,
interval joins are written as people write them, and refusals come before any JVM."""
import os
import tomllib

import numpy as np
import pytest

from mpi_join.config import parse_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.staged import write_staged
from conftest import cli, job_toml, run_cli, run_cli_no_spark, stream_toml
from reference import as_set

def trades_job(wt=None, wq=None, interval=""):
    """The trades/quotes job; wt and wq are the windows (TOML values), or None with an interval."""
    return job_toml(stream_toml("trades", 'sym = "int32", px = "float64"', wt)
                    + stream_toml("quotes", 'sym = "int32", bid = "float64"', wq),
                    f'equi = [["trades.sym", "quotes.sym"]]\n{interval}', name="tq")


def trades_quotes(rng, n=3000, t0=1_700_000_000_000):
    sid = rng.integers(0, 2, n)
    ts = t0 + np.sort(rng.integers(0, 60_000, n))
    T = np.zeros(int((sid == 0).sum()), [("seq", "i8"), ("ts", "i8"), ("sym", "i4"), ("px", "f8")])
    Q = np.zeros(int((sid == 1).sum()), [("seq", "i8"), ("ts", "i8"), ("sym", "i4"), ("bid", "f8")])
    T["seq"], Q["seq"] = np.nonzero(sid == 0)[0], np.nonzero(sid == 1)[0]
    T["ts"], Q["ts"] = ts[sid == 0], ts[sid == 1]
    T["sym"], Q["sym"] = rng.integers(0, 20, len(T)), rng.integers(0, 20, len(Q))
    return [T, Q]


def _an_hour_apart(arrays):
    """Quotes an hour later than every trade (seq renumbered in the new time order)."""
    arrays[1]["ts"] += 3_600_000
    order = np.argsort(np.concatenate([arrays[0]["ts"], arrays[1]["ts"]]), kind="stable")
    seq = np.empty(len(order), np.int64)
    seq[order] = np.arange(len(order))
    arrays[0]["seq"], arrays[1]["seq"] = seq[:len(arrays[0])], seq[len(arrays[0]):]


def _job(tmp, name, text, arrays):
    d = tmp / name
    d.mkdir()
    (d / "job.toml").write_text(text)
    from mpi_join.config import load_job
    job = load_job(str(d / "job.toml"))
    write_staged(job.staged, job.streams, arrays, job.ts_unit)
    return str(d / "job.toml"), job


@pytest.mark.parametrize("closed,lower,upper", [("both", "-5s", "0s"), ("left", "-5s", "1s"), ("neither", "-5s", "1s"),
                                                ("right", "-250ms", "2s"), ("both", "1s", "5s"), ("neither", "-10s", "-5s"),
                                                ("left", "0s", "2s"), ("right", "-2s", "0s"), ("both", "3s", "3s")])
def test_interval_equals_windows_and_duckdb(tmp_path, closed, lower, upper):
    """An interval join equals a DuckDB query of the staged Parquet with the same bounds; one that
    includes 0 also equals the same join written with windows, and a shifted one keeps each
    side only as long as its bounds need (the windows explain prints)."""
    duckdb = pytest.importorskip("duckdb")
    arrays = trades_quotes(np.random.default_rng(3))
    iv = f'interval = {{ left = "trades", right = "quotes", lower = "{lower}", upper = "{upper}", closed = "{closed}" }}'
    p1, j1 = _job(tmp_path, "interval", trades_job(interval=iv), arrays)
    lo = int(float(lower[:-2]) if lower.endswith("ms") else float(lower[:-1]) * 1000)
    up = int(float(upper[:-2]) if upper.endswith("ms") else float(upper[:-1]) * 1000)
    lo_c, up_c = (lo if closed in ("both", "left") else lo + 1), (up if closed in ("both", "right") else up - 1)
    a = as_set(run_oracle(j1, arrays))
    con = duckdb.connect()
    sql = (f"SELECT t.seq, q.seq FROM read_parquet('{j1.staged}/trades/*.parquet') t JOIN "
           f"read_parquet('{j1.staged}/quotes/*.parquet') q ON t.sym = q.sym AND q.ts - t.ts >= {lo_c} "
           f"AND q.ts - t.ts <= {up_c}")
    want = {(int(x), int(y)) for x, y in con.execute(sql).fetchall()}
    assert want and a == want
    # each side is kept as long as a partner can come: trades up to up_c after, quotes -lo_c
    assert [s.window.size for s in j1.streams] == [max(up_c, 0) + 1, max(-lo_c, 0) + 1]
    if lo_c <= 0 <= up_c:   # windows: quotes.ts - trades.ts in [lo_c, up_c] <=> W_trades = up_c + 1, W_quotes = 1 - lo_c
        p2, j2 = _job(tmp_path, "windows", trades_job(f'"{up_c + 1}ms"', f'"{1 - lo_c}ms"'), arrays)
        assert as_set(run_oracle(j2, arrays)) == a
        assert not j1.predicate.interval
    out = cli("explain", p1, "-n", "3")
    assert out.returncode == 0, out.stderr

    def off(v):
        return "" if v == 0 else f" {'-' if v < 0 else '+'} " + (f"{abs(v) // 1000} s" if v % 1000 == 0 else f"{abs(v)} ms")
    if lo_c <= 0 <= up_c:   # the windows' bounds: open (W) or closed (W - 1), whichever reads shorter
        lo_t, lb = (off(lo_c), "[") if len(off(lo_c)) <= len(off(lo_c - 1)) else (off(lo_c - 1), "(")
        up_t, ub = (off(up_c), "]") if len(off(up_c)) <= len(off(up_c + 1)) else (off(up_c + 1), ")")
        assert f"quotes.ts in {lb}trades.ts{lo_t}, trades.ts{up_t}{ub}" in out.stdout, out.stdout
    else:                   # a shifted interval's own bounds, closed in whole ms
        assert f"quotes.ts in [trades.ts{off(lo_c)}, trades.ts{off(up_c)}]" in out.stdout, out.stdout
    assert "kept: each trades tuple" in out.stdout


@pytest.mark.parametrize("iv,fragment", [
    ('{ left = "trades", right = "quotes", lower = "5s", upper = "1s" }', "lower must be below upper"),
    ('{ left = "trades", right = "quotes", lower = "1s", upper = "1s", closed = "left" }', "holds no ms value"),
    ('{ left = "trades", right = "nope", lower = "-1s", upper = "0s" }', "predicate.interval.right"),
    ('{ left = "trades", right = "quotes", lower = "-1s", upper = "0s", closed = "sometimes" }', "closed"),
    ('{ left = "trades", right = "quotes", lower = "-1.5ms", upper = "0s" }', "not a whole number"),
    ('{ left = "trades", right = "quotes", lower = "soon", upper = "0s" }', "predicate.interval.lower"),
])
def test_bad_intervals_name_the_field(tmp_path, iv, fragment):
    from mpi_join.errors import ConfigError
    with pytest.raises(ConfigError, match=fragment):
        parse_job(tomllib.loads(trades_job(interval=f"interval = {iv}")), "t.toml")


def test_interval_and_windows_together_are_refused():
    from mpi_join.errors import ConfigError
    iv = 'interval = { left = "trades", right = "quotes", lower = "-1s", upper = "0s" }'
    with pytest.raises(ConfigError, match="given by predicate.interval; give one or the other"):
        parse_job(tomllib.loads(trades_job('"1s"', None, iv)), "t.toml")


def test_explain_prints_the_time_condition_of_windows(tmp_path):
    arrays = trades_quotes(np.random.default_rng(1), 400)
    p, job = _job(tmp_path, "w", trades_job('"1ms"', '"5001ms"'), arrays)
    out = cli("explain", p, "-n", "3")
    assert "quotes.ts in [trades.ts - 5 s, trades.ts]" in out.stdout, out.stdout
    from mpi_join.storage.input_warnings import duration
    assert duration(29_999_999_000, exact=True) == "29999999 us", "exact, never 3e+07 us"
    p, job = _job(tmp_path, "w30", trades_job('"30s"', '"30s"'), arrays)
    out = cli("explain", p, "-n", "3")      # not [trades.ts - 3e+07 us, ...]: exact, and open where open
    assert ("quotes.ts in (trades.ts - 30 s, trades.ts + 30 s); kept: each trades tuple less than 30 s past its "
            "event time") in out.stdout, out.stdout


def test_float_seconds_read_as_ms_are_warned_about(tmp_path):
    """Event times around 1.7e9 in "ms" are January 1970: check, explain and verify say so."""
    arrays = trades_quotes(np.random.default_rng(2), 2000, t0=1_700_000_000)
    p, job = _job(tmp_path, "w", trades_job('"5s"', '"5s"'), arrays)
    for cmd in (["check", p, "-n", "3"], ["explain", p, "-n", "3"]):
        out = cli(*cmd)
        warn = [l for l in out.stderr.splitlines() if l.startswith("mpi-join: warning:")]
        assert out.returncode == 0 and warn and "1970-01-20" in warn[0] and "another unit" in warn[0], out.stderr


def test_disjoint_time_ranges_are_warned_about(tmp_path):
    arrays = trades_quotes(np.random.default_rng(4), 2000)
    _an_hour_apart(arrays)
    p, job = _job(tmp_path, "w", trades_job('"5s"', '"5s"'), arrays)
    out = cli("check", p, "-n", "3")
    warn = [l for l in out.stderr.splitlines() if l.startswith("mpi-join: warning:")]
    assert out.returncode == 0 and len(warn) == 1, out.stderr
    assert "streams trades (2023-11-14" in warn[0] and "never come within their windows" in warn[0]
    v = cli("verify", str(tmp_path / "w" / "nowhere"), "--job", p)
    assert v.returncode == 2


def test_a_run_with_0_results_on_a_warning_exits_3_unless_allowed(tmp_path):
    """Streams an hour apart with 5 s windows: the run is complete (its _SUCCESS is written) but
    its 0 results are not the answer the user wanted, so it exits 3 and says the warning again
    at the end; --allow-empty takes the empty answer with exit 0. A run of the same job whose
    streams meet exits 0 with its results and no warning."""
    from conftest import run_mpi
    arrays = trades_quotes(np.random.default_rng(4), 600)
    p_ok, _ = _job(tmp_path, "ok", trades_job('"5s"', '"5s"'), [a.copy() for a in arrays])
    _an_hour_apart(arrays)
    p, job = _job(tmp_path, "w", trades_job('"5s"', '"5s"'), arrays)
    r = run_mpi(3, "run", p)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mpi-join: ")]
    warn = [ln for ln in lines if "never come within their windows" in ln]
    assert r.returncode == 3 and len(warn) == 2, r.stderr[-3000:]
    assert lines[-1].startswith("mpi-join: error: 0 results") and "--allow-empty" in lines[-1], lines
    assert os.path.exists(os.path.join(job.output, "_SUCCESS"))
    r = run_mpi(3, "run", p, "--allow-empty", "--overwrite")
    assert r.returncode == 0 and "mpi-join: error" not in r.stderr, r.stderr[-3000:]
    r = run_mpi(3, "run", p_ok)
    assert r.returncode == 0 and "mpi-join: warning" not in r.stderr, r.stderr[-3000:]


def test_verify_says_what_it_compared_and_warns_on_zero_results(tmp_path):
    arrays = trades_quotes(np.random.default_rng(5), 500)
    arrays[1]["sym"] += 1000                   # no symbol in common
    p, job = _job(tmp_path, "w", trades_job('"5s"', '"5s"'), arrays)
    os.makedirs(os.path.join(job.output, "results"))
    out = cli("verify", job.output, "--job", p)
    assert out.returncode == 0
    assert "staged input as given" in out.stdout and "cannot catch a wrong time unit" in out.stdout
    assert "mpi-join: warning: the oracle finds 0 results" in out.stderr


@pytest.mark.parametrize("case", ["missing raw", "missing column", "overlap", "missing run", "header only",
                                  "ISO text in ms", "ISO text in ms (json)", "interrupted run",
                                  "interrupted run with checkpoints"])
def test_refusals_come_before_any_jvm(tmp_path, case):
    """Each is refused with exit 2 and one line, without importing Spark (so before any JVM
    could start). Issue: this asserted a wall-clock time, which failed on a busy machine."""
    from test_spark import JOB
    (tmp_path / "job.toml").write_text(JOB.format(fmt="csv", unit="ms"))
    os.makedirs(tmp_path / "raw/R")
    os.makedirs(tmp_path / "raw/S")
    (tmp_path / "raw/R/a.csv").write_text("event_time,k,v,name\n1,1,0.5,a\n")
    (tmp_path / "raw/S/a.csv").write_text("event_time,k,v,name\n1,1,0.5,a\n")
    args = ["stage", str(tmp_path / "job.toml")]
    if case == "missing raw":
        os.remove(tmp_path / "raw/S/a.csv")
        frag = "raw/S: no input files for stream 'S'"
    elif case == "missing column":
        (tmp_path / "raw/S/a.csv").write_text("event_time,k,name\n1,1,a\n")
        frag = "column 'v' of stream 'S' is missing"
    elif case == "overlap":
        args += ["--out", str(tmp_path / "raw")]
        frag = "overlaps"
    elif case == "header only":
        (tmp_path / "raw/S/a.csv").write_text("event_time,k,v,name\n")
        frag = "stream 'S': nothing to stage, its raw files hold no rows (a header only); pass --allow-empty"
    elif case == "ISO text in ms":
        (tmp_path / "raw/S/a.csv").write_text("event_time,k,v,name\n2026-01-05 09:30:00.125,1,0.5,a\n"
                                              "2026-01-05T09:30:01Z,1,0.5,a\n")
        frag = "column 'event_time' of stream 'S' holds dates as text ('2026-01-05 09:30:00.125'), " \
               "but streams.S.raw.time_unit is 'ms'"
    elif case == "ISO text in ms (json)":
        (tmp_path / "job.toml").write_text(JOB.format(fmt="json", unit="ms"))
        for n in "RS":
            os.remove(tmp_path / f"raw/{n}/a.csv")
            (tmp_path / f"raw/{n}/a.json").write_text('{"event_time": "2026-01-05T09:30:00", "k": 1, "v": 0.5, "name": "a"}\n')
        frag = "column 'event_time' of stream 'R' holds dates as text ('2026-01-05T09:30:00')"
    elif case.startswith("interrupted run"):
        if case.endswith("checkpoints"):
            with open(tmp_path / "job.toml", "a") as f:
                f.write('[checkpoint]\ndir = "ckpt"\nevery_tuples = 1000\n')
        os.makedirs(tmp_path / "out/results")                   # what a run stopped before its end leaves
        args = ["collect", str(tmp_path / "out"), "--job", str(tmp_path / "job.toml"), "--out", str(tmp_path / "c")]
        frag = ("cannot be resumed" if case == "interrupted run" else
                f"resume it with `mpi-join run {tmp_path / 'job.toml'} --resume {tmp_path / 'ckpt'}`")
    else:
        args = ["collect", str(tmp_path / "nope"), "--job", str(tmp_path / "job.toml"), "--out", str(tmp_path / "c")]
        frag = "no such run output directory"
    p, spark_modules = run_cli_no_spark(tmp_path, *args)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 2 and len(lines) == 1 and frag in lines[0], p.stderr
    assert case != "interrupted run" or "--resume" not in lines[0], lines[0]   # it has no checkpoint to resume
    assert spark_modules == [], f"refused after importing Spark (so after a JVM could start): {spark_modules[:3]}"


def test_paths_on_the_command_line_are_relative_to_where_the_user_is(tmp_path, monkeypatch):
    """Issue: `mpi-join run job/job.toml --output myout` wrote to job/myout. Checks a command-line
    path resolves against the current directory, a job-file path against the job file."""
    from mpi_join.config import load_job
    from test_spark import JOB
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.toml").write_text(JOB.format(fmt="csv", unit="ms"))
    monkeypatch.chdir(tmp_path)
    job = load_job("job/job.toml", {"output": "myout", "staged": "st"})
    assert job.output == str(tmp_path / "myout") and job.staged == str(tmp_path / "st")
    job = load_job("job/job.toml")
    assert job.output == str(tmp_path / "job" / "out") and job.staged == str(tmp_path / "job" / "staged")


def test_bench_suite_refuses_a_users_non_empty_out(tmp_path):
    """Issue: bench-suite --out into an existing directory overwrote the user's results.json
    without a word. Checks: exit 2, one line, the file unchanged, before any probe runs."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "results.json").write_text('{"thesis": 1}')
    p = run_cli("bench-suite", "--out", "mine", "--strategy", "hash", "--workload", "equi", "-n", "1",
                "--no-spark", cwd=str(tmp_path))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "not written by mpi-join bench-suite" in lines[0], p.stderr
    assert str(tmp_path / "mine") in lines[0] and "--overwrite" in lines[0]
    assert (tmp_path / "mine" / "results.json").read_text() == '{"thesis": 1}'


@pytest.mark.parametrize("outer,extra", [('["trades"]', set()), ('["trades", "quotes"]', {(-1, 2)})])
def test_the_readmes_worked_outer_join_example(tmp_path, outer, extra):
    """README "Exact semantics": trades t1 09:30:00, t2 09:30:20; quotes q1 09:29:58, q2
    09:30:01; quotes of the 5 s before each trade, outer on trades: (t1, q1) and (t2, null);
    FULL adds (null, q2)."""
    t0 = 1_772_357_400_000                                  # 2026-03-01 09:30:00 UTC, in ms
    T = np.zeros(2, [("seq", "i8"), ("ts", "i8"), ("sym", "i4"), ("px", "f8")])
    Q = np.zeros(2, [("seq", "i8"), ("ts", "i8"), ("sym", "i4"), ("bid", "f8")])
    Q["seq"], Q["ts"] = [0, 2], [t0 - 2000, t0 + 1000]      # q1, q2
    T["seq"], T["ts"] = [1, 3], [t0, t0 + 20_000]            # t1, t2
    iv = 'interval = { left = "trades", right = "quotes", lower = "-5s", upper = "0s" }\n' + f"outer = {outer}"
    _, job = _job(tmp_path, "ex", trades_job(interval=iv), [T, Q])
    got = {(int(a), int(b)) for a, b in run_oracle(job, [T, Q])}
    assert got == {(1, 0), (3, -1)} | extra
