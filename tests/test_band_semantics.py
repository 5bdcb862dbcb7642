"""Band conditions mean the same on every path (README "Exact semantics"): evaluated in float64,
never narrowed by rounding (values on a decimal grid, closed and open bounds), and NaN or an
infinity is within no band. Every local join method and the oracle against a plain numpy
statement of the condition."""
import tomllib

import numpy as np
import pytest

from mpi_join.config import parse_job
from mpi_join.join.oracle import run_oracle
from conftest import job_toml, stream_toml
from reference import as_set
from test_local_join import _drive

def job_text(eps, closed, rt, st):
    return job_toml(stream_toml("R", f'v = "{rt}"', '"unbounded"') + stream_toml("S", f'w = "{st}"', '"unbounded"'),
                    f'band = [ {{ left = "R.v", right = "S.w", eps = {eps}, closed = {str(closed).lower()} }} ]',
                    'name = "psp"', name="band")


def streams(rv, sw, rt="float64", st="float64"):
    n = len(rv) + len(sw)
    sid = np.array([0] * len(rv) + [1] * len(sw))
    np.random.default_rng(len(rv)).shuffle(sid)
    R = np.zeros(len(rv), [("seq", "i8"), ("ts", "i8"), ("v", rt)])
    S = np.zeros(len(sw), [("seq", "i8"), ("ts", "i8"), ("w", st)])
    R["seq"], S["seq"] = np.nonzero(sid == 0)[0], np.nonzero(sid == 1)[0]
    R["ts"], S["ts"] = R["seq"], S["seq"]
    R["v"], S["w"] = rv, sw
    assert len(R) + len(S) == n
    return [R, S]


def expected(arrays, eps, closed):
    """The definition, pair by pair in numpy float64 (NaN compares false)."""
    R, S = arrays
    d = np.abs(R["v"].astype(np.float64)[:, None] - S["w"].astype(np.float64)[None, :])
    with np.errstate(invalid="ignore"):
        ok = d <= eps if closed else d < eps
    i, j = np.nonzero(ok)
    return {(int(R["seq"][a]), int(S["seq"][b])) for a, b in zip(i, j)}


def run_methods(arrays, eps, closed, rt="float64", st="float64", batch=37):
    job = parse_job(tomllib.loads(job_text(eps, closed, rt, st)), "t.toml")
    out = {"oracle": as_set(run_oracle(job, arrays))}
    for method in ("index", "scan"):
        got, _ = _drive(job, arrays, method, batch)
        assert len(got) == len(as_set(got)), f"{method}: a result twice"
        out[method] = as_set(got)
    return out


def test_the_four_tuple_case():
    """R 0.2 and S 0.9 with eps 0.7, closed: |0.2 - 0.9| == 0.7 in float64, but 0.2 + 0.7 rounds
    to 0.8999999999999999 < 0.9, so an index searching [v - eps, v + eps] misses the pair."""
    arrays = streams(np.array([0.2, 5.0]), np.array([0.9, 9.0]))
    want = expected(arrays, 0.7, True)
    assert len(want) == 1
    for name, got in run_methods(arrays, 0.7, True).items():
        assert got == want, name


@pytest.mark.parametrize("closed", [True, False])
@pytest.mark.parametrize("eps", [2.3, 0.7, 0.1, 1.0])
def test_decimal_grid_every_method_equals_the_definition(eps, closed):
    rng = np.random.default_rng(int(eps * 10) + closed)
    rv = rng.integers(-300, 300, 400) * 0.1
    sw = rng.integers(-300, 300, 400) * 0.1
    arrays = streams(rv, sw)
    want = expected(arrays, eps, closed)
    assert want
    for name, got in run_methods(arrays, eps, closed).items():
        assert got == want, (name, len(got), len(want), sorted(want - got)[:3], sorted(got - want)[:3])


@pytest.mark.parametrize("closed", [True, False])
def test_nan_and_infinities_are_within_no_band(closed):
    rng = np.random.default_rng(7)
    rv = rng.uniform(0, 50, 500)
    sw = rng.uniform(0, 50, 500)
    rv[rng.random(500) < 0.05] = np.nan
    sw[rng.random(500) < 0.05] = np.nan
    rv[:3] = [np.inf, -np.inf, np.inf]
    sw[:3] = [np.inf, -np.inf, 1.0]
    arrays = streams(rv, sw)
    want = expected(arrays, 2.0, closed)
    assert want and not any(np.isnan(rv[arrays[0]["seq"] == a]).any() for a, _ in want)
    for name, got in run_methods(arrays, 2.0, closed).items():
        assert got == want, (name, len(got), len(want))


def test_float32_columns_are_compared_in_float64():
    rv = (np.arange(200) * 0.1).astype(np.float32)
    sw = (np.arange(200) * 0.1 + 0.05).astype(np.float32)
    arrays = streams(rv, sw, "float32", "float32")
    want = expected(arrays, 0.25, True)
    for name, got in run_methods(arrays, 0.25, True, "float32", "float32").items():
        assert got == want, name


@pytest.mark.parametrize("seed", range(6))
def test_the_grid_probe_finds_exactly_the_scans_pairs(seed):
    """range_join.band_grid (the oracle's and llhj's band index) against the plain range scan:
    values on a decimal grid with eps on it (boundaries that rounding could move across a cell),
    negatives, NaN, infinities, closed and open bands, a second band, row ranges of every size."""
    from mpi_join.join import kernels as K
    from mpi_join.join.range_join import band_grid
    rng = np.random.default_rng(seed)
    n, m = 300, 400
    eps = np.array([[0.1, 0.3, 2.5, 7.0, 1e-3, 40.0][seed], 5.0])
    closed = np.array([seed % 2 == 0, seed % 3 == 0])
    A = np.round(rng.uniform(-30, 30, (n, 2)), 1)
    B = np.round(rng.uniform(-30, 30, (m, 2)), 1)
    for X in (A, B):
        X[rng.integers(0, len(X), 8), 0] = rng.choice([np.nan, np.inf, -np.inf], 8)
    lo = rng.integers(0, m, n)
    hi = np.minimum(m, lo + rng.integers(0, m, n))
    grid = band_grid(A[:, 0], B[:, 0], eps[0], lo, hi)
    assert grid is not None
    want = K.collect(K.range_band, lo, hi, A, B, eps, closed)
    got = K.collect(K.range_band_grid, lo, hi, A, B, eps, closed, *grid)
    assert len(want[0]) > 0
    assert sorted(zip(*map(list, got))) == sorted(zip(*map(list, want)))


def test_the_grid_is_skipped_where_it_cannot_be_exact_or_cheaper():
    from mpi_join.join.range_join import band_grid
    a, b = np.array([1.0, 2.0]), np.arange(100.0)
    full_lo, full_hi = np.zeros(2, np.int64), np.full(2, 100)
    assert band_grid(np.arange(1000.0), b, 1.0, np.zeros(1000, np.int64), np.full(1000, 100)) is not None
    assert band_grid(a, b, 1.0, full_lo, full_hi) is None            # 200 pairs to scan: cheaper than a sort
    assert band_grid(a, b, 0.0, full_lo, full_hi) is None            # no cell width
    assert band_grid(np.full(1000, 1e300), b, 1e-300, np.zeros(1000, np.int64), np.full(1000, 100)) is None
    big = np.full(1000, 1e300)                    # finite values whose cells overflow: no grid, not "never"
    assert band_grid(big, np.full(100, 1e300), 1e-10, np.zeros(1000, np.int64), np.full(1000, 100)) is None
