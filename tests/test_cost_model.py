"""The PSP ring's cost model (mpi_join/ring/cost_model.py) against hand-computed values."""

import numpy as np
import pytest

from mpi_join.ring import cost_model as cm


def test_equation_1_centralised_and_ring_work():
    # 3-way: probing steps with lam W S = 50*10*0.1 = 50, then 50*10*0.1 = 50
    lam, W, S = [50, 50], [10, 10], [0.1, 0.1]
    Lc = cm.l_c(lam, W, S, Tj=1e-4, Ti=1e-6, Tp=2e-6)
    assert Lc == pytest.approx(3e-6 + 1e-4 * (50 + 50 * 50))
    # the ring adds Ts N (1 + intermediate results of steps 2..M-1) = Ts N (1 + 50)
    assert cm.l_psp(lam, W, S, 1e-4, Ts=1e-5, N=4, Ti=1e-6, Tp=2e-6) == pytest.approx(Lc + 1e-5 * 4 * 51)
    assert cm.service_rate(0.5) == 2.0


def test_equation_2_matches_equation_1_when_terms_are_equal_and_join_work_dominates():
    lam, W, S, Tj, Ts = 50, 10, 1 / 500, 1e-4, 1e-5          # lam W S = 1
    exact = cm.l_psp([lam, lam], [W, W], [S, S], Tj, Ts, N=5)
    Lc = cm.l_c([lam, lam], [W, W], [S, S], Tj)
    approx = cm.l_psp_uniform(Lc, lam, W, Tj, Ts, 5)
    assert approx == pytest.approx(Lc * (1 + Ts * 5 / (lam * W * Tj)))
    assert exact > Lc and approx > Lc


def test_equation_4_output_rate_grows_with_the_ring_towards_its_bound():
    rates = [cm.output_rate(100.0, 50, 10, 1e-4, 1e-5, n) for n in range(1, 40)]
    assert all(b > a for a, b in zip(rates, rates[1:]))
    assert rates[-1] < 100.0 * 50 * 10 * 1e-4 / 1e-5


def test_equation_5_latency_and_the_best_ring_length():
    Lc, lam, W, Tj, Ts, Tn, M = 0.2, 50, 10, 1e-4, 1e-5, 1e-3, 3
    assert cm.latency(Lc, lam, W, Tj, Ts, Tn, 1, M) == pytest.approx(max(Lc + Ts * Lc / (lam * W * Tj), 3 * Tn))
    lat = {n: cm.latency(Lc, lam, W, Tj, Ts, Tn, n, M) for n in range(1, 60)}
    best = cm.best_length(Lc, lam, W, Tj, Ts, Tn, M, 59)
    assert lat[best] == min(lat.values()) and 1 < best < 59       # an interior optimum
    n1, n2 = cm.closed_form_lengths(Lc, lam, W, Tj, Ts, Tn, M)
    c = Ts * Lc / (lam * W * Tj)
    assert Lc / n1 + c == pytest.approx(M * n1 * Tn)
    assert (n2 - 1) / 2 * Tn == pytest.approx(Lc / n2)
    assert abs(best - min(n1, n2)) <= 1                           # the closed form lands next to it


def test_equation_6_bandwidth():
    # 1 KB tuples, a slice of 50*10/4 = 125 tuples at 1e-4 s a pair: 1000 / 0.0125 bytes/s
    assert cm.bandwidth_bound(1000, 1e-4, [50, 80], [10, 10], 4) == pytest.approx(1000 / (1e-4 * 125))


def test_initial_lengths_visit_streams_by_rate_window_selectivity_each_at_its_own_best_length():
    got = cm.initial_lengths([("A", 50, 10, 0.1), ("B", 5, 10, 0.1), ("C", 50, 100, 0.1)],
                             Lc=0.2, Tj=1e-4, Ts=1e-4, Tn=1e-3, M=3, n_max=64)
    assert list(got) == ["B", "A", "C"]
    for name, lam, W in (("A", 50, 10), ("B", 5, 10), ("C", 50, 100)):
        assert got[name] == cm.best_length(0.2, lam, W, 1e-4, 1e-4, 1e-3, 3, 64)
    assert len(set(got.values())) > 1                 # rates and windows do change the length


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_balanced_bounds_abut_and_hold_equal_counts(n):
    rng = np.random.default_rng(n)
    ages = np.concatenate([rng.uniform(0, 1, 900), rng.uniform(1, 10, 100)])   # skewed: most are young
    b = cm.balanced_bounds(ages, 10.0, n)
    assert b[0] == 0.0 and b[-1] == 10.0 and len(b) == n + 1
    assert all(x <= y for x, y in zip(b, b[1:]))
    counts = [int(((ages >= lo) & (ages < hi)).sum()) for lo, hi in zip(b, b[1:])]
    assert sum(counts) == len(ages)
    assert max(counts) - min(counts) <= 1
    assert cm.balanced_bounds([], 10.0, 4) == [0.0, 2.5, 5.0, 7.5, 10.0]
    with pytest.raises(ValueError):
        cm.balanced_bounds(ages, 10.0, 0)
