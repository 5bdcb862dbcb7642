"""The join-biclique without MPI: ContRand routing's promises (each tuple stored at exactly one
unit of its subgroup, sent to join at every unit of the opposite subgroup its key hashes to), and
the whole graph (shuffler, dispatchers, units) driven by sim.simulate_strategy with random
delivery across links: equal to the oracle with random and ContRand routing, one and two
dispatchers, time and count windows and every predicate kind; and, with the units' ordered merge
switched off, several dispatchers miss or duplicate results (what the order-consistent protocol
prevents)."""
import re

import numpy as np
import pytest

from mpi_join.join import aggregate
from mpi_join.biclique import routing
from mpi_join.biclique.graph import biclique
from mpi_join.errors import ConfigError
from mpi_join.join.oracle import run_oracle
from conftest import random_streams
from reference import as_set
from pairwise import all_pairs
from sim import sim_job, simulate_strategy

STRATEGY = "biclique"   # whose time budget these tests count against (conftest.py)


def _batch(rng, n):
    b = np.zeros(n, [("seq", np.int64), ("_h", np.uint64)])
    b["seq"] = np.arange(n)
    b["_h"] = rng.integers(0, 1 << 62, n).astype(np.uint64) % np.uint64(17)      # 17 distinct keys
    return b


@pytest.mark.parametrize("units,groups", [(1, 1), (4, 1), (4, 2), (5, 3), (6, 6)])
def test_contrand_stores_once_in_the_key_subgroup_and_joins_at_the_opposite_one(units, groups):
    rng = np.random.default_rng(units * 10 + groups)
    b = _batch(rng, 4000)
    m = routing.Membership((units, 1), (groups, 1))
    at = m.store_units(b, 0)
    spans = routing.subgroups(units, groups)
    g = routing.group_of(b, groups)
    assert ((at >= np.array([spans[x][0] for x in g])) & (at < np.array([spans[x][1] for x in g]))).all()
    for lo, hi in spans:                 # random within a subgroup: every unit of it gets a share
        inside = (at >= lo) & (at < hi)
        if inside.any():
            assert set(at[inside]) == set(range(lo, hi))
    assert np.array_equal(m.store_units(b, 0), at)          # a replay routes the same
    joins = np.stack([m.joined_at(b, 0) == m.group(0, u) for u in range(units)])
    for x in range(len(b)):              # joined at exactly the units of the subgroup its key hashes to
        lo, hi = spans[g[x]]
        assert np.flatnonzero(joins[:, x]).tolist() == list(range(lo, hi))


def test_layout_and_roles():
    t = biclique(8, dispatchers=2, r_units=2)
    assert t.ranks("dispatcher") == [1, 2] and t.ranks("R-units") == [3, 4] and t.ranks("S-units") == [5, 6, 7]
    assert [t.role(r) for r in range(8)] == ["driver", "dispatcher", "dispatcher"] + ["unit"] * 5
    assert [(t.vertex(r).index, t.vertex(r).count) for r in (4, 5, 7)] == [(1, 2), (0, 3), (2, 3)]
    assert t.upstream(5) == [1, 2] and t.downstream(1) == [3, 4, 5, 6, 7] and t.merged(5) == (1, 2)
    assert biclique(8, dispatchers=2, ordered=False).merged(5) == ()
    assert biclique(7).ranks("R-units") == [2, 3] and biclique(7).ranks("S-units") == [4, 5, 6]   # half, rounded down, store R
    agg = biclique(8, merger=True)
    assert agg.ranks("merger") == [7] and agg.upstream(7) == [2, 3, 4, 5, 6] and agg.carries(2, 7) == "views"


CONFIGS = [(3, {}), (5, {"dispatchers": 2}), (6, {"r_units": 2, "local_join": "scan"}),
           (7, {"dispatchers": 2, "r_groups": 2, "s_groups": 3}), (5, {"r_groups": 2, "s_groups": 2})]
CASES = [(pred, kind, w, p) for pred in ("equi", "band", "theta") for kind in ("time", "count") for w, p in CONFIGS
         if pred == "equi" or not ("r_groups" in p or "s_groups" in p)]     # subgroups route by the equi key


@pytest.mark.parametrize("pred,kind,workers,params", CASES,
                         ids=[f"{pr}-{k}-{w}-{'-'.join(f'{a}{v}' for a, v in p.items())}" for pr, k, w, p in CASES])
def test_biclique_equals_oracle(pred, kind, workers, params):
    job = sim_job("biclique", pred, kind)
    arrays = random_streams(np.random.default_rng(workers), 200, key_range=8)
    expect = run_oracle(job, arrays)
    for seed, batch in ((1, 1), (2, 6)):
        got, mods, _ = simulate_strategy("biclique", job, arrays, workers, seed=seed, batch_size=batch, **params)
        assert len(expect) and len(got) == len(as_set(got)) and as_set(got) == as_set(expect)
        units = [m for m in mods.values() if type(m).__name__ == "Unit"]
        assert sum(m.join.indexed for m in units) == sum(len(a) for a in arrays)   # each stored once, in one unit
        chains = [m.join.stats() for m in units]
        # the chained index discards whole subindexes and joins those inside the window unchecked
        assert sum(c["subindexes_discarded"] for c in chains) > 0
        assert sum(c["subindex_probes_unchecked"] for c in chains) > 0


def test_without_the_order_consistent_protocol_two_dispatchers_go_wrong():
    """Units that take each dispatcher's batches as they come (no merge by stamp) process tuples
    in different orders: a pair whose tuples reach their units in opposite orders is missed or
    found twice. With the protocol every seed is exact."""
    job = sim_job("biclique", "equi", "time")
    arrays = random_streams(np.random.default_rng(4), 400, key_range=4)
    expect = as_set(run_oracle(job, arrays))
    wrong = 0
    for seed in range(4):
        got, _, _ = simulate_strategy("biclique", job, arrays, 5, seed=seed, batch_size=3, dispatchers=2,
                                      ordered=False)
        wrong += len(got) != len(as_set(got)) or as_set(got) != expect
        got, _, _ = simulate_strategy("biclique", job, arrays, 5, seed=seed, batch_size=3, dispatchers=2)
        assert len(got) == len(as_set(got)) and as_set(got) == expect
    assert wrong > 0


# -- the join-matrix baseline -------------------------------------------------------------------
def test_matrix_grid_is_the_divisor_nearest_the_square_root():
    from mpi_join.biclique.matrix import grid
    assert [grid(w) for w in (1, 4, 5, 6, 8, 9, 12)] == [(1, 1), (2, 2), (1, 5), (2, 3), (2, 4), (3, 3), (3, 4)]
    assert grid(6, rows=3) == (3, 2)


@pytest.mark.parametrize("strategy", ["matrix"])          # counts against matrix's budget
@pytest.mark.parametrize("pred", ["equi", "band", "theta"])
@pytest.mark.parametrize("kind", ["time", "count"])
@pytest.mark.parametrize("workers,rows", [(1, 0), (4, 0), (6, 3), (5, 0)])
def test_matrix_equals_oracle_and_stores_each_tuple_along_a_row_or_column(strategy, pred, kind, workers, rows):
    from mpi_join.biclique.matrix import grid
    job = sim_job(strategy, pred, kind)
    arrays = random_streams(np.random.default_rng(workers), 200, key_range=8)
    expect = run_oracle(job, arrays)
    got, mods, _ = simulate_strategy(strategy, job, arrays, workers, seed=workers, batch_size=4, rows=rows)
    assert len(expect) and len(got) == len(as_set(got)) and as_set(got) == as_set(expect)
    r, c = grid(workers, rows)
    held = [sum(len(m.join.windows[s]) + m.join.windows[s].base for m in mods.values()) for s in (0, 1)]
    assert held == [c * len(arrays[0]), r * len(arrays[1])]      # R held once per column, S once per row


AGGREGATES = ["sum(S.w), count(*), avg(R.v), min(S.w), max(R.k2) by R.k",
              "count(*), sum(R.k) by S.k, R.k2",
              "max(R.v), min(R.k), avg(S.w)"]


AGG_LAYOUTS = [("equi", "time", 5, {}), ("band", "count", 6, {"dispatchers": 2}),
               ("equi", "count", 7, {"r_groups": 2, "s_groups": 2})]


@pytest.mark.parametrize("spec,layout,update_ms", all_pairs(AGGREGATES, range(len(AGG_LAYOUTS)), [0, 1e9]))
def test_online_aggregation_final_snapshot_equals_the_oracles_aggregate(spec, layout, update_ms):
    """Units pre-aggregate the pairs they find, the merger merges their views: the snapshots are
    numbered in order, only the last is final, and it equals the aggregate of the oracle's
    result set. A snapshot per view that arrives (update_ms 0), or only the final one. All pairs
    of aggregate, layout and update interval (pairwise.py)."""
    pred, kind, workers, params = AGG_LAYOUTS[layout]
    job = sim_job("biclique", pred, kind)
    arrays = random_streams(np.random.default_rng(workers), 300, key_range=5)
    agg = aggregate.parse(spec, job.streams)
    expect = aggregate.of_pairs(agg, arrays, run_oracle(job, arrays))
    assert len(expect)
    snaps = []
    got, mods, _ = simulate_strategy("biclique", job, arrays, workers, seed=workers, batch_size=4,
                                     snapshots=snaps, aggregate=spec, update_ms=update_ms, **params)
    assert [n for n, _, _, _ in snaps] == list(range(len(snaps)))
    assert [final for _, final, _, _ in snaps] == [False] * (len(snaps) - 1) + [True]
    assert (len(snaps) > 3) == (update_ms == 0)
    final = snaps[-1][2]
    assert aggregate.compare(agg, expect, final) is None, aggregate.compare(agg, expect, final)
    assert snaps[-1][3]["pairs"] == len(got)


def test_aggregate_specs_are_checked_with_one_line_errors():
    job = sim_job("biclique", "equi", "time")
    for spec, words in (("sum(S.nope) by R.k", "stream S has no column 'nope'"), ("median(S.v)", "is not one of"),
                        ("sum(*)", "only count takes *"), ("sum(v)", "STREAM.COLUMN"), ("", "no aggregate")):
        with pytest.raises(ConfigError, match=re.escape(words)):
            aggregate.parse(spec, job.streams)
    # the final aggregate and a changed one: compare names the group and the value
    agg = aggregate.parse("sum(S.w), count(*) by R.k", job.streams)
    arrays = random_streams(np.random.default_rng(1), 200, key_range=4)
    a = aggregate.of_pairs(agg, arrays, run_oracle(job, arrays))
    b = a.copy()
    b["count(*)"][1] += 1
    assert "count(*) of group (R.k=" in aggregate.compare(agg, a, b)


def test_a_column_or_aggregate_named_twice_is_refused():
    """Issue: "sum(S.w) by R.k, R.k" and "count(*), count(*)" passed `check`, then `run` failed
    with a traceback."""
    job = sim_job("biclique", "equi", "time")
    for spec, words in (("sum(S.w) by R.k, R.k", "by R.k: the column is named twice"),
                        ("count(*), count(*)", "count(*) is asked for twice"),
                        ("count(S.w), count(*) by R.k", "count(*) is asked for twice (count of a column"),
                        ("min(S.w), min(S.w)", "min(S.w) is asked for twice")):
        with pytest.raises(ConfigError, match=re.escape(words)):
            aggregate.parse(spec, job.streams)


def test_nan_follows_the_sql_rule_in_units_merger_and_oracle_alike():
    """Issue: min over a column holding NaN gave NaN (SQL engines give the smallest number);
    grouping by a float column put each NaN row in a group of its own, in an order that depended
    on batching, and verify compared snapshots by row position. Checks, against values worked
    out by hand as DuckDB and PostgreSQL give them: NaN is one group, sorted last; min skips
    NaN unless all are NaN; max is NaN when any is; views merged in any split and order give
    the same rows; compare matches groups by key, not position."""
    job = sim_job("biclique", "equi", "time")
    spec = aggregate.parse("min(S.w), max(S.w), count(*) by R.v", job.streams)
    dts = [np.dtype([("seq", "i8"), ("ts", "i8"), ("k", "i4"), ("k2", "i2"), ("v", "f4")]),
           np.dtype([("seq", "i8"), ("ts", "i8"), ("k", "i8"), ("k2", "i2"), ("w", "f8")])]
    vd = aggregate.view_dtype(spec, dts)
    nan = np.nan
    key = np.array([1, nan, 2, nan, 1, nan, nan], np.float32)
    w = np.array([5, nan, 3, 4, nan, 7, nan], np.float64)
    values = {(0, "v"): key, (1, "w"): w}
    whole = aggregate.finish(spec, aggregate.view(spec, vd, values, len(key)), dts)
    assert whole["R.v"][:2].tolist() == [1, 2] and np.isnan(whole["R.v"][2]) and len(whole) == 3
    assert whole["count(*)"].tolist() == [2, 1, 4]
    assert whole["min(S.w)"].tolist() == [5, 3, 4]                  # NaN skipped
    assert np.isnan(whole["max(S.w)"][0]) and whole["max(S.w)"][1] == 3 and np.isnan(whole["max(S.w)"][2])
    rng = np.random.default_rng(0)
    for _ in range(20):                 # any split into views, merged in any order: the same rows
        order = rng.permutation(len(key))
        parts = np.array_split(order, rng.integers(1, 5))
        views = [aggregate.view(spec, vd, {k: v[p] for k, v in values.items()}, len(p)) for p in parts if len(p)]
        got = aggregate.finish(spec, aggregate.merge(spec, *[views[i] for i in rng.permutation(len(views))]), dts)
        assert got.tobytes() == whole.tobytes()
    assert aggregate.compare(spec, whole, whole[::-1].copy()) is None  # by group key
    all_nan = aggregate.view(spec, vd, {(0, "v"): np.array([3], np.float32), (1, "w"): np.array([nan])}, 1)
    assert np.isnan(aggregate.finish(spec, all_nan, dts)["min(S.w)"][0])


@pytest.mark.parametrize("kind", ["time", "count"])
@pytest.mark.parametrize("workers,params", [(7, {}), (8, {"dispatchers": 2}),
                                            (9, {"r_groups": 2, "s_groups": 2, "r_units": 4})])
def test_units_join_and_leave_subgroups_mid_run_without_losing_or_duplicating_a_result(kind, workers, params):
    """2PS's scaling phase driven by hand: every few batches a spare unit joins a subgroup, or an
    active one leaves it (it drains: joins, stores nothing, until nothing it holds can be seen,
    then is spare again). Every result is found once."""
    job = sim_job("biclique", "equi", kind)
    arrays = random_streams(np.random.default_rng(workers), 700, key_range=6)
    expect = as_set(run_oracle(job, arrays))
    done, spare_at_start = [], []

    steps = [("out", 0), ("out", 1), ("down", 0), ("down", 1)]

    def on_epoch(epoch, mods, router):
        m = router.members
        if epoch == 1:
            spare_at_start.extend(router.graph.ranks(("R-units", "S-units")[s])[u] for s in (0, 1) for u in m.spare(s))
        # 2PS's own decisions run too, at every epoch (scale_every_ms=0: as a loaded machine made
        # them by wall time); a hand step waits, as they do, while one is placed and not applied
        if epoch % 5 == 0 and not router.coordinator.changing:
            d, side = steps[(epoch // 5) % 4]
            g = (epoch // 20) % m.groups[side]
            if d == "out" and m.spare(side):
                router.apply("out", side, g, m.spare(side)[:1])
                done.append("out")
            elif d == "down" and len(m.active(side, g)) > 1:
                router.apply("down", side, g, m.active(side, g)[:1])
                done.append("down")
        router.release_drained()

    got, mods, router = simulate_strategy("biclique", job, arrays, workers, seed=workers, batch_size=3,
                                          on_epoch=on_epoch, scaling=True, spare_units=1, scale_every_ms=0, **params)
    assert len(got) == len(as_set(got)) and as_set(got) == expect
    assert done.count("out") >= 3 and done.count("down") >= 3, done
    assert router.version >= 8       # the table changed: joins, drains and releases
    stored = [m.join.indexed for m in mods.values() if type(m).__name__ == "Unit"]
    assert sum(stored) == sum(len(a) for a in arrays)                # each stored once
    assert any(mods[r].join.indexed for r in spare_at_start)          # a unit spare at the start stored some


def test_2ps_decides_on_confirmed_loads_and_sizes_by_equation_7():
    from mpi_join.biclique.scaling import Policy, Scaler, units_to_change
    assert units_to_change(0.9, 0.6, 4) == pytest.approx(2.0) and units_to_change(0.15, 0.6, 4) == pytest.approx(-3.0)
    mb = 1e6
    sc = Scaler(Policy(capacity=10 * mb, t_high=0.8, t_low=0.3, psi=0.6, confirmations=3))
    m = routing.Membership((6, 3), (1, 1), (2, 3))      # R: units 0, 1 active, 2..5 spare; S: all 3 active
    hot = {(0, 0): 9 * mb, (0, 1): 9.5 * mb, (1, 0): 5 * mb, (1, 1): 5 * mb, (1, 2): 5 * mb}
    spare = [m.spare(0), m.spare(1)]
    for _ in range(2):                                  # overloaded twice: not confirmed yet
        assert sc.decide(m, hot, spare)[0] == []
    calm = hot | {(0, 0): 5 * mb, (0, 1): 5 * mb}
    assert sc.decide(m, calm, spare)[0] == []           # a calm round resets the count
    for _ in range(2):
        assert sc.decide(m, hot, spare)[0] == []
    actions, seen = sc.decide(m, hot, spare)
    # tau = 18.5 / 20 = 0.925 on R: Delta = (0.925 / 0.6 - 1) 2 = 1.08 -> 2 spare units join
    assert actions == [("out", 0, 0, [2, 3])]
    assert seen[0]["tau"] == pytest.approx(0.925) and seen[0]["streak"] == 3
    m.add(0, 0, [2, 3])
    cold = {(0, u): 0.5 * mb for u in range(4)} | {(1, u): 5 * mb for u in range(3)}
    cold[(0, 2)] = 0.1 * mb
    for _ in range(2):
        sc.decide(m, cold, [m.spare(0), m.spare(1)])
    actions, _ = sc.decide(m, cold, [m.spare(0), m.spare(1)])
    # tau = 1.6 / 40 = 0.04: Delta = (0.04 / 0.6 - 1) 4 = -3.7 -> 3 leave (the least loaded first), one stays
    assert actions == [("down", 0, 0, [2, 0, 1])]
