"""Staging and collection on real Spark (local mode)."""
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpi_join.config import load_job
from mpi_join.errors import InputError
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.staged import read_staged
from mpi_join.tools.workloads import make
SLOW = True

from conftest import cli, run_cli, run_local
from reference import as_set


@pytest.mark.parametrize("fmt,workload,small", [("csv", "equi", True), ("csv", "equi", False),
                                                ("json", "equi", True), ("parquet", "band", False)])
def test_stage_equals_direct_staging(spark, tmp_path, fmt, workload, small):
    """Both ways of ordering: in one partition (small input) and range-partitioned by Spark."""
    from mpi_join.storage.spark.stage import stage
    raw_job = load_job(make(workload, str(tmp_path / "raw"), tuples=3000, seed=4, raw=fmt))
    direct = load_job(make(workload, str(tmp_path / "direct"), tuples=3000, seed=4))
    said = []
    man = stage(spark, raw_job, progress=said.append, small_bytes=1 << 40 if small else 0)
    assert man["total"] == 3000 and sum(man["quarantined"].values()) == 0
    assert any("small input" in m for m in said) == small
    if not small:   # the partitioned path really ran on several partitions
        assert len([f for f in os.listdir(os.path.join(raw_job.staged, "R")) if f.endswith(".parquet")]) > 1
    got, want = read_staged(raw_job), read_staged(direct)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        for c in w.dtype.names:
            assert np.array_equal(g[c], w[c]), c


def _write_csv(path, rows, header="event_time,k,v,name"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(header + "\n" + "\n".join(rows) + "\n")


JOB = """
[job]
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.R]
schema = {{ k = "int32", v = "float64", name = "char4" }}
window = "1s"
raw = {{ path = "raw/R", format = "{fmt}", time = "event_time", time_unit = "{unit}" }}
[streams.S]
schema = {{ k = "int32", v = "float64", name = "char4" }}
window = "1s"
raw = {{ path = "raw/S", format = "{fmt}", time = "event_time", time_unit = "{unit}" }}
[predicate]
equi = [["R.k", "S.k"]]
[strategy]
name = "hash"
"""


def test_stage_quarantines_bad_rows_and_counts_them(spark, tmp_path):
    from mpi_join.storage.spark.stage import stage
    (tmp_path / "job.toml").write_text(JOB.format(fmt="csv", unit="s"))
    _write_csv(str(tmp_path / "raw/R/a.csv"), ["1.5,1,0.5,ab", "abc,2,0.1,x", "2,,1.0,y", "2.25,3,1.0,toolong", "3,x7,2,z"])
    _write_csv(str(tmp_path / "raw/S/a.csv"), ["1.5,1,0.25,q", ",4,0.0,w", "0.5,1,9,e"])
    job = load_job(str(tmp_path / "job.toml"))
    man = stage(spark, job, progress=lambda m: None)
    assert man["streams"]["R"]["count"] == 1 and man["streams"]["S"]["count"] == 2
    assert man["quarantined"] == {"R": 4, "S": 1}
    q = sorted(pq.read_table(str(tmp_path / "staged/_quarantine/R")).to_pylist(), key=lambda r: r["record"])
    assert [r["record"] for r in q] == [2, 3, 4, 5]                 # rows of a.csv, header excluded
    assert all(r["file"].endswith("raw/R/a.csv") for r in q)
    assert [r["reason"] for r in q] == ["event time event_time: expected a number of s, got 'abc'",
                                        "k: missing (null)",
                                        "name: expected text of at most 4 bytes (UTF-8), got 'toolong'",
                                        "k: expected an integer that fits int32, got 'x7'"]
    R, S = read_staged(job)
    # seconds -> ms; ordered by (ts, stream): S@500, R@1500, S@1500
    assert S["ts"].tolist() == [500, 1500] and R["ts"].tolist() == [1500]
    assert S["seq"].tolist() == [0, 2] and R["seq"].tolist() == [1]


def test_stage_refuses_files_that_disagree(spark, tmp_path):
    from mpi_join.storage.spark.stage import stage
    (tmp_path / "job.toml").write_text(JOB.format(fmt="parquet", unit="ms"))
    os.makedirs(tmp_path / "raw/R")
    os.makedirs(tmp_path / "raw/S")
    good = {"event_time": pa.array([1, 2], pa.int64()), "k": pa.array([1, 2], pa.int32()),
            "v": pa.array([0.0, 1.0]), "name": pa.array(["a", "b"])}
    pq.write_table(pa.table(good), str(tmp_path / "raw/R/p0.parquet"))
    pq.write_table(pa.table(dict(good, k=pa.array(["1", "2"]))), str(tmp_path / "raw/R/p1.parquet"))
    pq.write_table(pa.table(good), str(tmp_path / "raw/S/p0.parquet"))
    job = load_job(str(tmp_path / "job.toml"))
    with pytest.raises(InputError, match=r"p1.parquet: column 'k' has type string, but .*p0.parquet has int"):
        stage(spark, job, progress=lambda m: None)
    pq.write_table(pa.table({k: v for k, v in good.items() if k != "v"}), str(tmp_path / "raw/R/p1.parquet"))
    with pytest.raises(InputError, match=r"p1.parquet: column 'v' of stream 'R' is missing"):
        stage(spark, job, progress=lambda m: None)


def test_stage_missing_input(spark, tmp_path):
    from mpi_join.storage.spark.stage import stage
    (tmp_path / "job.toml").write_text(JOB.format(fmt="csv", unit="ms"))
    with pytest.raises(InputError, match=r"raw/R: no input files for stream 'R'"):
        stage(spark, load_job(str(tmp_path / "job.toml")), progress=lambda m: None)


def test_collect_merges_results_with_payload(spark, tmp_path):
    from mpi_join.storage.spark.collect import collect
    path = make("equi", str(tmp_path), tuples=4000, window="2s", domain_bits=8)
    job = load_job(path)
    p = run_local(3, "run", path)
    assert p.returncode == 0, p.stderr
    s = collect(spark, job, job.output, f"file://{tmp_path}/collected", with_payload=True, progress=lambda m: None)
    expect = run_oracle(job, read_staged(job))
    assert s["results"] == len(expect) > 0
    t = pq.read_table(str(tmp_path / "collected"))
    assert as_set(np.stack([t.column("R_seq").to_numpy(), t.column("S_seq").to_numpy()], axis=1)) == as_set(expect)
    assert np.array_equal(t.column("R_key").to_numpy(), t.column("S_key").to_numpy())   # joined payloads
    assert t.column_names[:4] == ["R_seq", "S_seq", "emit_ns", "latency_ns"]      # one documented order
    assert t.column_names[4:] == ["R_ts", "R_key", "R_key2", "R_pad", "S_ts", "S_key", "S_key2", "S_pad"]
    assert t.schema.field("R_ts").type.unit == job.ts_unit == "us"                   # event time, job's unit
    assert pa.types.is_timestamp(t.schema.field("S_ts").type)
    assert pa.types.is_string(t.schema.field("S_pad").type)                           # text, not bytes
    S = read_staged(job)[1]
    pads = dict(zip(S["seq"].tolist(), (p.decode() for p in S["pad"])))
    assert all(pads[q] == p for q, p in zip(t.column("S_seq").to_pylist()[:200], t.column("S_pad").to_pylist()[:200]))
    summary = json.loads((tmp_path / "collected" / "_summary.json").read_text())
    assert summary["results"] == len(expect)
    assert set(summary["per_rank"]) == {"0", "1", "2"}
    assert summary["per_rank"]["1"]["results"] + summary["per_rank"]["2"]["results"] == len(expect)
    assert summary["latency_ms"]["p50"] > 0


def test_collect_gives_an_outer_joins_lone_rows_null_payloads(spark, tmp_path):
    """A left outer join's rows without a partner: null S seq in the run's part files, and null
    S payload columns (with the R payload) after collect --with-payload; verify equals the oracle."""
    from mpi_join.storage.spark.collect import collect
    path = make("equi", str(tmp_path), tuples=3000, window="2s", domain_bits=10)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("[predicate]\n", '[predicate]\nouter = ["R"]\n', 1))
    job = load_job(path)
    assert job.predicate.outer == (0,)
    p = run_local(3, "run", path)
    assert p.returncode == 0, p.stderr
    v = cli("verify", job.output, "--job", path)
    assert v.returncode == 0, v.stdout + v.stderr
    expect = run_oracle(job, read_staged(job))
    lone = expect[expect[:, 1] < 0]
    assert len(lone) > 0 and len(lone) < len(expect)
    collect(spark, job, job.output, f"file://{tmp_path}/collected", with_payload=True, progress=lambda m: None)
    t = pq.read_table(str(tmp_path / "collected"))
    null = np.asarray(t.column("S_seq").is_null())
    assert int(null.sum()) == len(lone)
    assert set(np.asarray(t.column("R_seq"))[null].tolist()) == set(lone[:, 0].tolist())
    for c in ("S_ts", "S_key", "S_pad"):
        assert t.column(c).null_count == len(lone)
    assert t.column("R_key").null_count == 0 and t.column("R_pad").null_count == 0


def test_spark_submit_runs_the_collect_job(tmp_path):
    """The other way to launch a collect: `spark-submit jobs/collect.py` (`mpi-join stage` and
    `collect` as commands: tests/test_readme.py, as the README gives them)."""
    import subprocess
    import sys
    from conftest import BIN
    path = make("equi", str(tmp_path), tuples=2000, window="1s")
    r = run_local(2, "run", path)
    assert r.returncode == 0, r.stderr
    jobs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jobs")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    # spark-submit starts the JVM before collect.py runs: the short-lived JVM's flags are the
    # user's to give there (session.SHORT_LIVED; half the CPU of the default on 2,000 tuples)
    from mpi_join.storage.spark.session import SHORT_LIVED
    c = subprocess.run([os.path.join(BIN, "spark-submit"), "--master", "local[2]", "--driver-java-options",
                        SHORT_LIVED, os.path.join(jobs, "collect.py"),
                        str(tmp_path / "out"), "--job", path, "--out", str(tmp_path / "coll")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert c.returncode == 0, c.stderr[-2000:]
    job = load_job(path)
    n = len(run_oracle(job, read_staged(job)))
    assert f"collected {n:,} results" in c.stdout
    bad = cli("stage", str(tmp_path / "nope.toml"))
    assert bad.returncode == 2 and bad.stderr.strip().endswith("nope.toml: job file not found")


def test_collect_refuses_partial_runs_and_overlaps_and_keeps_users_files(spark, tmp_path):
    """A run without _SUCCESS is refused unless --partial (then marked partial); OUT may not
    overlap the run or staged directories; a non-empty OUT that collect did not write survives."""
    from mpi_join.storage.spark.collect import collect
    path = make("equi", str(tmp_path), tuples=2000, window="1s", domain_bits=8)
    job = load_job(path)
    p = run_local(2, "run", path)
    assert p.returncode == 0, p.stderr
    quiet = dict(progress=lambda m: None)
    for bad in (job.output, os.path.join(job.output, "results", "x"), str(tmp_path)):
        with pytest.raises(InputError, match="overlaps"):
            collect(spark, job, job.output, bad, **quiet)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("four years")
    with pytest.raises(InputError, match="not written by mpi-join collect"):
        collect(spark, job, job.output, str(mine), **quiet)
    assert (mine / "thesis.txt").read_text() == "four years"
    os.remove(os.path.join(job.output, "_SUCCESS"))          # as after Ctrl-C
    with pytest.raises(InputError, match="no _SUCCESS"):
        collect(spark, job, job.output, str(tmp_path / "c1"), **quiet)
    s = collect(spark, job, job.output, str(tmp_path / "c1"), partial=True, **quiet)
    assert s["partial"] is True and s["complete_through_input_offset"] is None
    assert json.loads((tmp_path / "c1" / "_summary.json").read_text())["partial"] is True
    s = collect(spark, job, job.output, str(tmp_path / "c1"), partial=True, **quiet)    # its own: replaced
    assert s["results"] == len(run_oracle(job, read_staged(job)))


def test_stage_keeps_users_files(spark, tmp_path):
    """Staging into a non-empty directory that is not a staged one, or over the raw input, is
    refused; restaging a staged directory keeps a user's file beside the stream folders."""
    from mpi_join.storage.spark.stage import stage
    job = load_job(make("equi", str(tmp_path), tuples=1000, raw="csv"))
    quiet = dict(progress=lambda m: None)
    os.makedirs(job.staged)
    (tmp_path / "staged" / "thesis.txt").write_text("four years")
    with pytest.raises(InputError, match="is not a staged directory"):
        stage(spark, job, **quiet)
    with pytest.raises(InputError, match="overlaps the raw input"):
        stage(spark, job, out=job.streams[0].raw.path, **quiet)
    for _ in range(2):
        assert stage(spark, job, overwrite=True, **quiet)["total"] == 1000
        assert (tmp_path / "staged" / "thesis.txt").read_text() == "four years"


TQ_JOB = """
[job]
name = "tq"
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.trades]
schema = {{ symbol = "{sym}", price = "float64", qty = "int32" }}
window = "5s"
raw = {{ path = "raw/trades", format = "csv", time = "time", time_unit = "timestamp" }}
[streams.quotes]
schema = {{ symbol = "{sym}", bid = "float64", ask = "float64" }}
window = "5s"
raw = {{ path = "raw/quotes", format = "csv", time = "time", time_unit = "timestamp" }}
[predicate]
equi = [["trades.symbol", "quotes.symbol"]]
{band}
[strategy]
name = "hash"
"""


def _trades_and_quotes(root, rng, n=1500):
    import datetime as dt
    t0 = dt.datetime(2026, 1, 5, 9, 30)
    syms = ["GOOG", "AAPL", "MSFT", "BRK.B", "A"]
    for name, cols in (("trades", "symbol,price,qty"), ("quotes", "symbol,bid,ask")):
        os.makedirs(root / "raw" / name)
        ms = np.sort(rng.integers(0, 60_000, n))
        lines = ["time," + cols]
        for m in ms:
            when = (t0 + dt.timedelta(milliseconds=int(m))).isoformat(sep=" ", timespec="milliseconds")
            p = 100 + int(rng.integers(0, 40)) / 100
            extra = f"{p:.2f},{int(rng.integers(1, 500))}" if name == "trades" else f"{p:.2f},{p + 0.01:.2f}"
            lines.append(f"{when},{syms[int(rng.integers(0, len(syms)))]},{extra}")
        (root / "raw" / name / "part-0.csv").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("band,sym", [("", "char8"), ('band = [{left = "trades.price", right = "quotes.bid", eps = 0.05}]', "char8"),
                                      ("", "string")])
def test_trades_and_quotes_on_a_text_symbol_from_raw_csv(spark, tmp_path, band, sym):
    """A user's own job: ISO timestamps, a text symbol key (charN, or `string`: staged as UTF-8
    text, as wide as its longest value), 5 s windows (and a price band), staged by Spark, run on
    3 ranks, collected with payloads: equal to the oracle and to DuckDB."""
    import collections
    import datetime as dt
    import duckdb
    from mpi_join.storage.spark.collect import collect
    from mpi_join.storage.spark.stage import stage
    _trades_and_quotes(tmp_path, np.random.default_rng(8))
    (tmp_path / "job.toml").write_text(TQ_JOB.format(band=band, sym=sym))
    job = load_job(str(tmp_path / "job.toml"))
    man = stage(spark, job, progress=lambda m: None)
    if sym == "string":
        assert man["streams"]["trades"]["string_bytes"] == {"symbol": 5}                    # BRK.B
        got = duckdb.sql(f"SELECT DISTINCT symbol FROM '{tmp_path}/staged/trades/*.parquet' ORDER BY 1")
        assert got.types == ["VARCHAR"] and got.fetchall() == [(x,) for x in sorted(["GOOG", "AAPL", "MSFT", "BRK.B", "A"])]
        job = load_job(str(tmp_path / "job.toml"))
        assert job.streams[0].dtype["symbol"].itemsize == 5
    utc = int(dt.datetime(2026, 1, 5, 9, 30, tzinfo=dt.timezone.utc).timestamp() * 1000)
    ts = read_staged(job)[0]["ts"]                  # text with no time zone is read as UTC (README)
    assert utc <= ts.min() and ts.max() < utc + 60_000
    p = run_local(3, "run", str(tmp_path / "job.toml"))
    assert p.returncode == 0, p.stderr
    s = collect(spark, job, job.output, str(tmp_path / "collected"), with_payload=True, progress=lambda m: None)
    expect = run_oracle(job, read_staged(job))
    assert s["results"] == len(expect) > 0
    t = pq.read_table(str(tmp_path / "collected"))
    assert pa.types.is_string(t.schema.field("trades_symbol").type)
    assert t.schema.field("trades_ts").type == pa.timestamp("ms", tz="UTC")
    got = collections.Counter(zip(
        (int(v) for v in t.column("trades_ts").cast(pa.int64()).to_numpy()),          # epoch ms
        t.column("trades_symbol").to_pylist(), t.column("trades_price").to_pylist(),
        (int(v) for v in t.column("quotes_ts").cast(pa.int64()).to_numpy()),
        t.column("quotes_symbol").to_pylist(), t.column("quotes_bid").to_pylist()))
    where = " AND abs(t.price - q.bid) < 0.05" if band else ""
    rows = duckdb.sql(f"""
        SELECT epoch_ms(t.time), t.symbol, t.price, epoch_ms(q.time), q.symbol, q.bid
        FROM read_csv('{tmp_path}/raw/trades/*.csv', timestampformat = '%Y-%m-%d %H:%M:%S.%g') t
        JOIN read_csv('{tmp_path}/raw/quotes/*.csv', timestampformat = '%Y-%m-%d %H:%M:%S.%g') q
          ON t.symbol = q.symbol AND abs(epoch_ms(t.time) - epoch_ms(q.time)) < 5000{where}""").fetchall()
    assert got == collections.Counter(rows)


def test_a_time_unit_coarser_than_the_data_says_so(spark, tmp_path):
    """ISO timestamps with milliseconds staged with ts_unit = "s": the milliseconds are dropped
    (tuples within a second tie), which changed a join's answer silently (544,706 results
    instead of 409,055, and verify said OK). Stage counts the event times it rounds and every
    command that reads the input warns in one line; staged in ms, nothing is said."""
    from mpi_join.storage.input_warnings import warnings
    from mpi_join.storage.spark.stage import stage
    _trades_and_quotes(tmp_path, np.random.default_rng(8), n=300)
    text = TQ_JOB.format(band="", sym="char8")
    (tmp_path / "job.toml").write_text(text.replace('ts_unit = "ms"', 'ts_unit = "s"'))
    job = load_job(str(tmp_path / "job.toml"))
    man = stage(spark, job, progress=lambda m: None)
    finer = {k: v["ts_finer"] for k, v in man["streams"].items()}
    assert 0 < finer["trades"] <= 300 and 0 < finer["quotes"] <= 300, finer
    said = [w for w in warnings(job, man) if "finer than ts_unit" in w]
    assert len(said) == 2 and f"stream trades: {finer['trades']:,} of its event times" in said[0], said
    r = cli("check", str(tmp_path / "job.toml"), "-n", "3")
    assert r.returncode == 0 and "finer than ts_unit = \"s\"" in r.stderr, r.stderr
    (tmp_path / "job.toml").write_text(text)
    man = stage(spark, load_job(str(tmp_path / "job.toml")), progress=lambda m: None, force=True)
    assert all(v["ts_finer"] == 0 for v in man["streams"].values())


def test_stage_skips_up_to_date_input_and_force_redoes_it(spark, tmp_path):
    from mpi_join.storage.spark.stage import stage
    job = load_job(make("equi", str(tmp_path), tuples=800, raw="csv"))
    lines = []
    first = stage(spark, job, progress=lines.append)
    assert not first.get("up_to_date") and any("wrote 800 tuples" in l and " s in all)" in l for l in lines)
    again = stage(spark, job, progress=lines.append)
    assert again.get("up_to_date") and "is up to date" in lines[-1]
    assert stage(spark, job, progress=lambda m: None, force=True).get("up_to_date") is None
    raw = sorted((tmp_path / "raw" / "R").iterdir())[0]
    os.utime(raw, (raw.stat().st_atime, raw.stat().st_mtime + 5))         # the raw input changed
    assert stage(spark, job, progress=lambda m: None).get("up_to_date") is None
    assert [len(a) for a in read_staged(job)] == [400, 400]


def test_collect_reports_each_phase(spark, tmp_path):
    from mpi_join.storage.spark.collect import collect
    path = make("equi", str(tmp_path), tuples=1000, window="1s", domain_bits=6)
    job = load_job(path)
    assert run_local(2, "run", path).returncode == 0
    lines = []
    s = collect(spark, job, job.output, str(tmp_path / "c"), with_payload=True, progress=lines.append)
    assert lines[0].startswith("collect: reading ") and "results counted" in lines[1]
    assert lines[-1].startswith(f"collect: {s['results']:,} results with payloads -> ") and " s in all)" in lines[-1]


def test_collect_starts_a_short_lived_jvm_only_for_small_local_results(tmp_path, monkeypatch):
    """collect.small_collect: result files on local disk up to SMALL_RESULT_BYTES (and, with
    payloads, a small local staged input) get the short-lived JVM; large or remote ones do not."""
    from mpi_join.storage.spark import collect, stage
    job = load_job(make("equi", str(tmp_path), tuples=2000, window="1s"))      # staged directly
    part, big = tmp_path / "part.parquet", tmp_path / "big.parquet"
    part.write_bytes(b"x" * 1000)
    with open(big, "wb") as f:
        f.truncate(collect.SMALL_RESULT_BYTES)                                  # sparse
    assert collect.small_collect(job, [str(part)], with_payload=True)
    assert not collect.small_collect(job, [str(part), str(big)], with_payload=False)
    assert not collect.small_collect(job, None, with_payload=False)            # results on another filesystem
    monkeypatch.setattr(stage, "SMALL_INPUT_BYTES", 100)                        # the staged input is larger
    assert collect.small_collect(job, [str(part)], with_payload=False)
    assert not collect.small_collect(job, [str(part)], with_payload=True)


def test_pipeline_stages_runs_collects_and_verifies_with_one_spark_session(tmp_path):
    """`mpi-join pipeline` = stage + run + collect (+ verify) with one JVM."""
    path = make("equi", str(tmp_path), tuples=2000, window="1s", domain_bits=8, raw="csv")
    p = run_cli("pipeline", path, "-n", "3", "--with-payload", "--verify", "--master", "local[2]", timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]
    job = load_job(path)
    n = len(run_oracle(job, read_staged(job)))
    assert n > 0 and f"{n:,} results with payloads" in p.stderr and "OK: results equal the oracle" in p.stderr
    assert p.stderr.count("Spark session started") == 1              # one Spark session for both steps
    assert "Setting default log level" not in p.stderr and " WARN " not in p.stderr     # Spark is quiet
    got = pq.read_table(str(tmp_path / "out-collected"))
    assert got.num_rows == n and "R_pad" in got.column_names
    # a second pipeline, which finds the staged input up to date: tests/test_readme.py


def test_csv_as_rfc_4180_says(spark, tmp_path):
    """Doubled quotes are one quote, a quoted field may span lines, a row with too many or too few
    fields is quarantined with that reason, a quoted empty field is an empty string and an
    unquoted empty field a null (kept)."""
    from mpi_join.storage.spark.stage import stage
    (tmp_path / "job.toml").write_text(JOB.format(fmt="csv", unit="ms").replace('"char4"', '"char16"'))
    os.makedirs(tmp_path / "raw/R")
    (tmp_path / "raw/R/a.csv").write_text(
        'event_time,k,v,name\n1,1,0.5,"say ""hi"""\n2,2,0.5,"two\nlines"\n3,3,0.5,a,extra\n4,4,0.5\n'
        '5,5,0.5,""\n6,6,0.5,\n')
    _write_csv(str(tmp_path / "raw/S/a.csv"), ["1,1,0.25,q"])
    job = load_job(str(tmp_path / "job.toml"))
    man = stage(spark, job, progress=lambda m: None)
    R, S = read_staged(job)
    assert R["name"].tolist() == [b'say "hi"', b"two\nlines", b"", b""]
    assert R["k"].tolist() == [1, 2, 5, 6]
    assert man["quarantined"] == {"R": 2, "S": 0}
    # the unquoted empty field is a null, kept: the ranks do not read `name` (README "Nulls")
    assert pq.read_table(str(tmp_path / "staged/R")).sort_by("seq").column("name").is_null().to_pylist() == \
        [False, False, False, True]
    q = sorted(pq.read_table(str(tmp_path / "staged/_quarantine/R")).to_pylist(), key=lambda r: r["event_time"])
    assert [r["event_time"] for r in q] == ["3", "4"]
    assert "more or fewer fields than the header" in q[0]["reason"]
    assert "more or fewer fields than the header" in q[1]["reason"]
    assert [r["record"] for r in q] == [3, 4]              # the two-line record counts once


def test_a_wholly_quarantined_stream_stops_stage(spark, tmp_path):
    """ISO timestamps declared as "ms": every row of the stream is quarantined; stage refuses with
    one line naming the stream and the reason, unless --allow-empty; the reasons are counted."""
    from mpi_join.storage.spark.stage import stage
    (tmp_path / "job.toml").write_text(JOB.format(fmt="csv", unit="ms"))
    _write_csv(str(tmp_path / "raw/R/a.csv"), ["2024-01-01T10:00:00,1,0.5,ab", "2024-01-01T10:00:01,2,0.5,x"])
    _write_csv(str(tmp_path / "raw/S/a.csv"), ["5,1,0.25,q"])
    job = load_job(str(tmp_path / "job.toml"))
    lines = []
    with pytest.raises(InputError, match=r"stream 'R': nothing staged, all 2 of its rows are unparseable .*"
                                         r"2 unparsed: event time event_time.*--allow-empty"):
        stage(spark, job, progress=lines.append)
    assert not os.path.exists(tmp_path / "staged" / "R")
    assert not os.path.exists(tmp_path / "staged" / "_quarantine"), "a refused stage wrote its quarantine"
    man = stage(spark, job, progress=lambda m: None, allow_empty=True)
    assert man["streams"]["R"]["count"] == 0 and man["streams"]["S"]["count"] == 1


def test_up_to_date_stage_needs_no_jvm(spark, tmp_path):
    """The second stage of unchanged input does not import Spark (no wall-clock assert)."""
    from conftest import run_cli_no_spark
    path = make("equi", str(tmp_path), tuples=800, raw="csv")
    p = cli("stage", path)                  # in this process, on the module's Spark session
    assert p.returncode == 0, p.stderr
    p, spark_modules = run_cli_no_spark(tmp_path, "stage", path)
    assert p.returncode == 0 and "is up to date" in p.stderr, p.stderr
    assert spark_modules == [] and "WARN" not in p.stderr, (spark_modules[:3], p.stderr)


def test_stage_warns_of_a_time_unit_that_looks_wrong_when_it_ends(spark, tmp_path):
    """Event times in seconds declared "ms" stage without error (every value is a valid number),
    but land in January 1970: stage says so when it ends, as check and run do, and again when
    the staged input is up to date (no JVM then). The first stage runs in this process, on the
    module's Spark session."""
    from conftest import run_cli_no_spark
    (tmp_path / "job.toml").write_text(JOB.format(fmt="csv", unit="ms"))
    for n in "RS":
        _write_csv(str(tmp_path / f"raw/{n}/a.csv"), [f"{1_700_000_000 + i},{i % 3},0.5,ab" for i in range(50)])
    for first in (True, False):
        if first:
            p = cli("stage", str(tmp_path / "job.toml"))
        else:
            p, spark_modules = run_cli_no_spark(tmp_path, "stage", str(tmp_path / "job.toml"))
            assert spark_modules == [] and "is up to date" in p.stderr, p.stderr
        warn = [ln for ln in p.stderr.splitlines() if ln.startswith("mpi-join: warning:")]
        assert p.returncode == 0 and len(warn) == 2, p.stderr[-2000:]
        assert all("1970-01-20" in w and "another unit than its time_unit says" in w for w in warn), warn


def test_a_string_holding_a_nul_is_quarantined(spark, tmp_path):
    """A `string` value is kept whole: one holding a NUL (which the fixed-width column would
    take for padding) is quarantined with its reason, the rest staged as UTF-8 text."""
    from mpi_join.storage.spark.stage import stage
    (tmp_path / "job.toml").write_text(JOB.format(fmt="json", unit="ms").replace('name = "char4"', 'name = "string"'))
    for side in "RS":
        os.makedirs(tmp_path / "raw" / side)
        rows = [{"event_time": 1, "k": 1, "v": 0.5, "name": "ok ünïcode"},
                {"event_time": 2, "k": 2, "v": 0.5, "name": "bad\u0000"}]
        (tmp_path / "raw" / side / "a.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    job = load_job(str(tmp_path / "job.toml"))
    man = stage(spark, job, progress=lambda m: None)
    assert man["quarantined"] == {"R": 1, "S": 1}
    assert man["streams"]["R"]["string_bytes"] == {"name": len("ok ünïcode".encode())}
    q = pq.read_table(str(tmp_path / "staged/_quarantine/R")).to_pylist()
    assert len(q) == 1 and "name" in q[0]["reason"] and "NUL" in q[0]["reason"], q
    assert read_staged(load_job(str(tmp_path / "job.toml")))[0]["name"].tolist() == ["ok ünïcode".encode()]


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_invalid_utf8_is_quarantined_with_its_byte_offset(spark, tmp_path, fmt):
    """Issue: raw CSV keys b"x\\xff" (in R) and b"x\\xfe" (in S) were both staged as "x\\ufffd"
    with exit 0 and nothing quarantined, so two different keys joined. Checks, on CSV and JSON
    lines: each such row is quarantined with "not valid UTF-8" and the byte offset; valid UTF-8
    (an é, a genuine U+FFFD) is staged unchanged; nothing joins through the bad rows."""
    from mpi_join.storage.spark.stage import stage
    text = JOB.format(fmt=fmt, unit="ms").replace('name = "char4"', 'name = "char8"')
    (tmp_path / "job.toml").write_text(text)
    for side, bad in (("R", b"x\xff"), ("S", b"x\xfe")):
        os.makedirs(tmp_path / "raw" / side)
        good = ["ok\u00e9".encode(), "\ufffd".encode()]
        if fmt == "csv":
            body = b"event_time,k,v,name\n" + b"".join(b"%d,7,0.5,%s\n" % (i + 1, n) for i, n in enumerate(good + [bad]))
        else:
            body = b"".join(b'{"event_time": %d, "k": 7, "v": 0.5, "name": "%s"}\n' % (i + 1, n)
                            for i, n in enumerate(good + [bad]))
        (tmp_path / "raw" / side / f"a.{fmt}").write_bytes(body)
    job = load_job(str(tmp_path / "job.toml"))
    man = stage(spark, job, progress=lambda m: None)
    assert man["quarantined"] == {"R": 1, "S": 1}
    for side in "RS":
        q = pq.read_table(str(tmp_path / "staged/_quarantine" / side)).to_pylist()
        assert len(q) == 1 and q[0]["record"] == 3 and q[0]["file"].endswith(f"a.{fmt}"), q
        assert "not valid UTF-8" in q[0]["reason"], q
        assert ("name: not valid UTF-8 (byte 1 of the value, 0x" in q[0]["reason"]) if fmt == "csv" else \
            ("the record is not valid UTF-8 (at byte " in q[0]["reason"]), q
    R, S = read_staged(job)
    assert R["name"].tolist() == S["name"].tolist() == ["ok\u00e9".encode(), "\ufffd".encode()]


def test_a_stage_refused_for_a_long_value_leaves_the_disk_as_it_was(spark, tmp_path):
    """Issue: a stage refused for a text value over 1 MB left staged/_quarantine/R/ behind, so
    the next stage was refused unless --overwrite. Checks: one error naming the column; no
    staged directory afterwards; a second stage, the value fixed, succeeds without --overwrite."""
    from mpi_join.storage.spark.stage import stage
    (tmp_path / "job.toml").write_text(JOB.format(fmt="json", unit="ms").replace('name = "char4"', 'name = "string"'))
    for side in "RS":
        os.makedirs(tmp_path / "raw" / side)
        rows = [{"event_time": 1, "k": 1, "v": 0.5, "name": "a" * (2 << 20) if side == "R" else "b"},
                {"event_time": 2, "k": 1, "v": 0.5, "name": "bad\u0000"}]         # one quarantined row each
        (tmp_path / "raw" / side / "a.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    job = load_job(str(tmp_path / "job.toml"))
    with pytest.raises(InputError, match=r"column 'name': a value of 2,097,152 bytes; text columns hold at most"):
        stage(spark, job, progress=lambda m: None)
    assert not (tmp_path / "staged").exists() or os.listdir(tmp_path / "staged") == [], \
        sorted(os.listdir(tmp_path / "staged"))
    (tmp_path / "raw" / "R" / "a.json").write_text(json.dumps({"event_time": 1, "k": 1, "v": 0.5, "name": "a"}) + "\n")
    man = stage(spark, job, progress=lambda m: None)
    assert man["streams"]["R"]["count"] == 1 and man["quarantined"] == {"R": 0, "S": 1}


def test_spark_java_opts_from_the_environment_reach_the_driver_jvm(tmp_path):
    """MPI_JOIN_SPARK_JAVA_OPTS is added to the driver JVM's options (after mpi-join's own)."""
    import subprocess
    import sys
    code = ("from mpi_join.storage.spark.session import spark_session\n"
            "s = spark_session('local[1]', 'opts', small=True)\n"
            "print('probe=' + str(s.sparkContext._jvm.java.lang.System.getProperty('mpijoin.probe')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=dict(os.environ, MPI_JOIN_SPARK_JAVA_OPTS="-Dmpijoin.probe=yes -XX:+UseSerialGC"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "probe=yes" in p.stdout


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_stage_at_rest_reads_a_symbolic_link_and_says_a_subdirectory_is_not_read(spark, tmp_path, engine):
    """As live staging does (tests/test_landing_files.py): a link to a file is read, a
    subdirectory of a raw directory is not, said once naming it."""
    (tmp_path / "job.toml").write_text(JOB.format(fmt="csv", unit="s"))
    for n in "RS":
        _write_csv(str(tmp_path / f"raw/{n}/a.csv"), [f"{1_700_000_000 + i},{i % 3},0.5,ab" for i in range(20)])
    _write_csv(str(tmp_path / "ext/x.csv"), [f"{1_700_000_100 + i},{i % 3},0.5,ab" for i in range(7)])
    os.symlink(tmp_path / "ext" / "x.csv", tmp_path / "raw" / "R" / "link.csv")
    _write_csv(str(tmp_path / "raw/R/sub/y.csv"), [f"{1_700_000_200 + i},1,0.5,ab" for i in range(5)])
    p = cli("stage", "--engine", engine, str(tmp_path / "job.toml"))
    assert p.returncode == 0, p.stderr[-2000:]
    said = [ln for ln in (p.stdout + p.stderr).splitlines() if "a subdirectory" in ln]
    assert len(said) == 1 and "raw/R/sub" in said[0] and "not read" in said[0], p.stdout + p.stderr
    man = json.load(open(tmp_path / "staged" / "_manifest.json"))
    assert man["streams"]["R"]["count"] == 27 and man["streams"]["S"]["count"] == 20, man["streams"]


def test_pipeline_stages_in_process_by_default_and_on_spark_when_asked(tmp_path):
    """`pipeline` stages local CSV input with the in-process engine (auto) and with Spark under
    --engine spark; both runs verify against the oracle, and the staged rows are equal."""
    import subprocess
    import sys
    rows = {}
    for engine in ("auto", "spark"):
        d = tmp_path / engine
        path = make("equi", str(d), tuples=3000, raw="csv")
        p = subprocess.run([sys.executable, "-m", "mpi_join", "pipeline", path, "-n", "3", "--verify",
                            "--engine", engine], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, MPI_JOIN_QUIET="1"))
        assert p.returncode == 0 and "OK: results equal the oracle" in p.stderr + p.stdout, p.stderr[-3000:]
        said = "stage in this process (engine local)" if engine == "auto" else "stage with Spark"
        assert said in p.stderr, p.stderr[-3000:]
        rows[engine] = [a.tobytes() for a in read_staged(load_job(path))]
    assert rows["auto"] == rows["spark"]
