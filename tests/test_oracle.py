"""The oracle against an independent brute-force statement of the semantics, and DuckDB."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpi_join.config import parse_job
from mpi_join.join.oracle import _multiway, run_oracle
from reference import as_set, brute_force
from conftest import equi_job_text, random_streams

WINDOWS = ['"4ms"', '"1ms"', "3", "1", '"unbounded"']


def _job(windows, predicate):
    import tomllib
    return parse_job(tomllib.loads(equi_job_text(windows, predicate=predicate)), "t.toml")


PREDICATES = {
    "equi1": ('equi = [["R.k", "S.k"]]', lambda r, s: r["k"] == s["k"]),
    "equi2": ('equi = [["R.k", "S.k"], ["R.k2", "S.k2"]]', lambda r, s: r["k"] == s["k"] and r["k2"] == s["k2"]),
    "band_open": ('band = [{left = "R.v", right = "S.w", eps = 2.5}]',
                  lambda r, s: abs(float(r["v"]) - float(s["w"])) < 2.5),
    "band_closed_int": ('band = [{left = "R.k", right = "S.k", eps = 1, closed = true}]',
                        lambda r, s: abs(int(r["k"]) - int(s["k"])) <= 1),
    "equi_band": ('equi = [["R.k2", "S.k2"]]\nband = [{left = "R.v", right = "S.w", eps = 4}]',
                  lambda r, s: r["k2"] == s["k2"] and abs(float(r["v"]) - float(s["w"])) < 4),
    "theta": ('theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]',
              lambda r, s: abs(float(r["v"]) - float(s["w"])) < 3.0),
    "theta_flipped_and_equi": (
        'equi = [["R.k", "S.k"]]\ntheta = [{udf = "udf_fixtures:sum_small", streams = ["R", "S"]}]',
        lambda r, s: r["k"] == s["k"] and float(r["v"]) + float(s["w"]) < 15.0),
}


@pytest.mark.parametrize("pname", sorted(PREDICATES))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(0, 40), wr=st.sampled_from(WINDOWS), ws=st.sampled_from(WINDOWS))
def test_binary_oracle_equals_brute_force(pname, seed, n, wr, ws):
    text, cond = PREDICATES[pname]
    job = _job((wr, ws), text)
    arrays = random_streams(np.random.default_rng(seed), n)
    got = run_oracle(job, arrays)
    assert len(got) == len(as_set(got)), "the oracle produced a result twice"
    assert as_set(got) == as_set(brute_force(job, arrays, cond))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(0, 60), wr=st.sampled_from(WINDOWS), ws=st.sampled_from(WINDOWS))
def test_multiway_path_equals_binary_path(seed, n, wr, ws):
    job = _job((wr, ws), 'equi = [["R.k", "S.k"]]\nband = [{left = "R.v", right = "S.w", eps = 5}]')
    arrays = random_streams(np.random.default_rng(seed), n)
    assert as_set(_multiway(job, arrays)) == as_set(run_oracle(job, arrays))


def _three_way_job(windows):
    import tomllib
    text = f"""
[input]
staged = "s"
[output]
dir = "o"
[streams.A]
schema = {{ k = "int32", v = "float32" }}
window = {windows[0]}
[streams.B]
schema = {{ k = "int32", v = "float32" }}
window = {windows[1]}
[streams.C]
schema = {{ k = "int32", v = "float32" }}
window = {windows[2]}
[predicate]
equi = [["A.k", "B.k"]]
band = [{{left = "B.v", right = "C.v", eps = 6}}]
[strategy]
name = "hash"
"""
    return parse_job(tomllib.loads(text), "t3.toml")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(0, 30), w=st.tuples(*[st.sampled_from(WINDOWS)] * 3))
def test_three_way_oracle_equals_brute_force(seed, n, w):
    job = _three_way_job(w)
    rng = np.random.default_rng(seed)
    sid = rng.integers(0, 3, n)
    ts = np.cumsum(rng.integers(0, 3, n))
    arrays = []
    for s in range(3):
        a = np.zeros(int((sid == s).sum()), job.streams[s].dtype)
        a["seq"], a["ts"] = np.nonzero(sid == s)[0], ts[sid == s]
        a["k"], a["v"] = rng.integers(0, 3, len(a)), rng.uniform(0, 20, len(a))
        arrays.append(a)
    expect = brute_force(job, arrays, lambda a, b, c: a["k"] == b["k"] and abs(float(b["v"]) - float(c["v"])) < 6)
    got = run_oracle(job, arrays)
    assert len(got) == len(as_set(got))
    assert as_set(got) == as_set(expect)


def _duckdb_pairs(arrays, wr, ws, where):
    duckdb = pytest.importorskip("duckdb")
    import pyarrow as pa
    con = duckdb.connect()
    for name, a in zip(("r", "s"), arrays):
        con.register(name, pa.table({c: a[c] for c in a.dtype.names}))
    q = (f"select r.seq, s.seq from r join s on {where} "
         f"and r.ts - s.ts > -{wr} and r.ts - s.ts < {ws}")
    return con.execute(q).fetchall()


@pytest.mark.parametrize("where,pred", [
    ("r.k = s.k", 'equi = [["R.k", "S.k"]]'),
    ("r.k = s.k and r.k2 = s.k2", 'equi = [["R.k", "S.k"], ["R.k2", "S.k2"]]'),
    ("abs(r.v::double - s.w) < 1.5", 'band = [{left = "R.v", right = "S.w", eps = 1.5}]'),
])
@pytest.mark.parametrize("wr,ws", [(5, 5), (1, 40), (30, 2)])
def test_oracle_equals_duckdb_for_time_windows(where, pred, wr, ws):
    job = _job((f'"{wr}ms"', f'"{ws}ms"'), pred)
    arrays = random_streams(np.random.default_rng(wr * 100 + ws), 3000, key_range=40, ts_step=2)
    expect = {tuple(r) for r in _duckdb_pairs(arrays, wr, ws, where)}
    got = run_oracle(job, arrays)
    assert len(expect) > 0
    assert as_set(got) == expect


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(0, 24), w=st.tuples(*[st.sampled_from(WINDOWS)] * 4))
def test_four_way_oracle_with_equi_udf_and_band(seed, n, w):
    """A~B equi, B~C theta UDF in (C, B) order, D~A and D~C bands (two bound streams to filter)."""
    import tomllib
    from mpi_join.config import parse_job
    streams = "".join(f'[streams.{s}]\nschema = {{ k = "int32", v = "float32", w = "float32" }}\nwindow = {x}\n'
                      for s, x in zip("ABCD", w))
    job = parse_job(tomllib.loads(f'[input]\nstaged = "s"\n[output]\ndir = "o"\n{streams}[predicate]\n'
                                  'equi = [["A.k", "B.k"]]\n'
                                  'theta = [{ udf = "udf_fixtures:close_values", streams = ["C", "B"] }]\n'
                                  'band = [{ left = "D.v", right = "A.v", eps = 4 }, { left = "D.w", right = "C.w", eps = 5 }]\n'
                                  '[strategy]\nname = "hash"\n'), "t4.toml")
    rng = np.random.default_rng(seed)
    sid, ts = rng.integers(0, 4, n), np.cumsum(rng.integers(0, 3, n))
    arrays = []
    for s in range(4):
        a = np.zeros(int((sid == s).sum()), job.streams[s].dtype)
        a["seq"], a["ts"] = np.nonzero(sid == s)[0], ts[sid == s]
        a["k"], a["v"], a["w"] = rng.integers(0, 3, len(a)), rng.uniform(0, 10, len(a)), rng.uniform(0, 10, len(a))
        arrays.append(a)
    expect = brute_force(job, arrays, lambda a, b, c, d: (a["k"] == b["k"] and abs(float(c["v"]) - float(b["w"])) < 3.0
                         and abs(float(d["v"]) - float(a["v"])) < 4 and abs(float(d["w"]) - float(c["w"])) < 5))
    got = run_oracle(job, arrays)
    assert len(got) == len(as_set(got))
    assert as_set(got) == as_set(expect)
