"""Durations are read exactly (units.py): a window, an interval bound, a lateness or `--until`
is the number written, never a float's neighbour of it. End to end: a nanosecond job whose
bounds sit one ns from a float's rounding, run in process and checked against DuckDB's answer
to the same join written with integer bounds."""
import numpy as np
import pytest

from conftest import run_local, write_job
from mpi_join.errors import ConfigError, JobError
from mpi_join.storage.results import read_results
from mpi_join.units import ns_to_ts, parse_duration, parse_duration_ns
from reference import as_set


def _job_text(windows="", interval=""):
    return ('[job]\nname = "t"\nts_unit = "ns"\n[input]\nstaged = "staged"\n[output]\ndir = "out"\n'
            f'[streams.R]\nschema = {{ k = "int32" }}\n{windows and "window = " + windows[0]}\n'
            f'[streams.S]\nschema = {{ k = "int64" }}\n{windows and "window = " + windows[1]}\n'
            f'[predicate]\nequi = [["R.k", "S.k"]]\n{interval}\n[strategy]\nname = "hash"\n'
            '[run]\nbatch_size = 13\n')


def _streams(rng, n, steps):
    """Two streams whose times step by the given gaps, so differences land on a bound and beside it."""
    sid = rng.integers(0, 2, n)
    ts = np.cumsum(rng.choice(np.asarray(steps, np.int64), n))
    out = []
    for s, kt in ((0, "i4"), (1, "i8")):
        a = np.zeros(int((sid == s).sum()), [("seq", "i8"), ("ts", "i8"), ("k", kt)])
        a["seq"], a["ts"], a["k"] = np.nonzero(sid == s)[0], ts[sid == s], rng.integers(0, 3, len(a))
        out.append(a)
    return out


def _duckdb(arrays, where):
    duckdb = pytest.importorskip("duckdb")
    import pyarrow as pa
    con = duckdb.connect()
    for name, a in zip(("r", "s"), arrays):
        con.register(name, pa.table({c: a[c] for c in a.dtype.names}))
    return {tuple(r) for r in con.execute(f"select r.seq, s.seq from r join s on r.k = s.k and {where}").fetchall()}


@pytest.mark.parametrize("windows,steps,where", [
    # 1,000,000,000.1 ns: a difference of exactly 1e9 ns is inside (a float read it as 1e9, outside)
    (('"1.0000000001s"', '"1.0000000001s"'), (0, 1, 999_999_999, 10**9, 10**9 + 1),
     "(r.ts - s.ts) * 10 > -10000000001 and (r.ts - s.ts) * 10 < 10000000001"),
    # 2^53 + 1 ns, which a float reads as 2^53
    (('"9007199254740993ns"', '"3ns"'), (0, 1, 2, 9007199254740992 // 4, 9007199254740992 // 2),
     "r.ts - s.ts > -9007199254740993 and r.ts - s.ts < 3"),
], ids=["fraction-of-a-ns", "above-2^53"])
def test_a_window_one_ns_past_a_floats_rounding_joins_what_duckdb_joins(tmp_path, windows, steps, where):
    arrays = _streams(np.random.default_rng(7), 160, steps)
    path, job = write_job(str(tmp_path), _job_text(windows), arrays)
    p = run_local(3, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    expect = _duckdb(arrays, where)
    got = read_results(job.output, job.stream_names)
    assert len(expect) > 0 and len(got) == len(as_set(got))
    assert as_set(got) == expect


def test_an_interval_at_2_to_the_53_joins_what_duckdb_joins(tmp_path):
    arrays = _streams(np.random.default_rng(8), 160, (0, 1, 9007199254740992 // 2))
    iv = 'interval = { left = "R", right = "S", lower = "-9007199254740993ns", upper = "0ns" }'
    path, job = write_job(str(tmp_path), _job_text(interval=iv), arrays)
    p = run_local(2, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    expect = _duckdb(arrays, "s.ts - r.ts between -9007199254740993 and 0")
    assert len(expect) > 0 and as_set(read_results(job.output, job.stream_names)) == expect


@pytest.mark.parametrize("lower,upper,unit", [("-1.5ns", "1.5ns", "ns"), ("-1.0000000001s", "0s", "ns"),
                                              ("0s", "0.5ms", "ms")])
def test_an_interval_bound_that_is_not_a_whole_number_of_the_unit_is_refused(tmp_path, lower, upper, unit):
    iv = f'interval = {{ left = "R", right = "S", lower = "{lower}", upper = "{upper}" }}'
    with pytest.raises(ConfigError, match=rf"predicate\.interval\.(lower|upper): .* is not a whole number of {unit}"):
        write_job(str(tmp_path), _job_text(interval=iv).replace('ts_unit = "ns"', f'ts_unit = "{unit}"'))


def test_durations_are_exact_fractions():
    assert parse_duration("1.0000000001s", "f") * 10 == 10_000_000_001
    assert parse_duration_ns("9007199254740993ns", "f") == 9007199254740993
    assert ns_to_ts(parse_duration("1.0000000001s", "f"), "ns") == 1_000_000_001      # a window rounds up
    assert ns_to_ts(parse_duration("1.5ms", "f"), "ms") == 2
    with pytest.raises(ConfigError, match="^run.flush_interval: '1.5ns' is not a whole number of nanoseconds"):
        parse_duration_ns("1.5ns", "run.flush_interval")


def test_until_reads_iso_fractions_to_the_nanosecond():
    from mpi_join.storage.staged_log import until_ts

    class Job:
        ts_unit = "ns"
    base = 1767225600 * 10**9
    assert until_ts("2026-01-01T00:00:00.123456789Z", Job) == base + 123456789
    assert until_ts("2026-01-01T00:00:00.1234567+00:00", Job) == base + 123456700
    assert until_ts("2026-01-01T01:00:00.5+01:00", Job) == base + 500_000_000
    assert until_ts("9007199254740993", Job) == 9007199254740993
    with pytest.raises(JobError, match="finer than a nanosecond"):
        until_ts("2026-01-01T00:00:00.1234567891Z", Job)
