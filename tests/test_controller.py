"""The hash master's controller: classification, one-scan pairing, degree of declustering."""
import numpy as np

from mpi_join.master.controller import classify, forced_plan, plan


def test_classify_by_thresholds():
    sup, con = classify({1: 0.9, 2: 0.3, 3: 0.005, 4: 0.6}, 0.5, 0.01)
    assert sup == [1, 4] and con == [3]


def test_each_consumer_gets_one_group_from_a_distinct_supplier():
    rng = np.random.default_rng(0)
    occ = {1: 0.9, 2: 0.8, 3: 0.0, 4: 0.001, 5: 0.2}
    groups = {1: [0, 5, 9], 2: [1, 6], 3: [2], 4: [3], 5: [4]}
    p = plan(occ, groups, [1, 2, 3, 4, 5], [], rng)
    assert len(p.moves) == 2
    assert {m[1] for m in p.moves} == {1, 2} and {m[2] for m in p.moves} == {3, 4}
    for g, s, c in p.moves:
        assert g in groups[s]
    assert not p.activate and not p.deactivate


def test_no_supplier_takes_the_least_loaded_slave_out():
    rng = np.random.default_rng(0)
    occ = {1: 0.2, 2: 0.0, 3: 0.1}
    p = plan(occ, {1: [0, 3], 2: [1, 4, 7], 3: [2]}, [1, 2, 3], [], rng)
    assert p.deactivate == [2]
    assert sorted(g for g, s, c in p.moves) == [1, 4, 7]
    assert all(s == 2 and c in (1, 3) for g, s, c in p.moves)
    assert not plan(occ, {1: [0]}, [1], [], rng).deactivate          # the last slave stays
    busy = plan({1: 0.3, 2: 0.4}, {1: [0], 2: [1]}, [1, 2], [], rng)
    assert not busy.deactivate and not busy.moves                     # busy but not overloaded: keep all


def test_many_suppliers_bring_a_slave_back():
    rng = np.random.default_rng(0)
    occ = {1: 0.9, 2: 0.8, 3: 0.7}
    p = plan(occ, {1: [0, 3], 2: [1, 4], 3: [2, 5]}, [1, 2, 3], [4], rng, rho=2.0)
    assert p.activate == [4]
    assert [c for g, s, c in p.moves] == [4]
    p = plan({1: 0.9, 2: 0.0}, {1: [0, 2], 2: [1]}, [1, 2], [4], rng, rho=2.0)
    assert not p.activate                                            # 1 supplier <= 2 x 1 consumer


def test_forced_plans():
    rng = np.random.default_rng(1)
    p = forced_plan({1: [0, 1], 2: [2], 3: [3], 4: []}, [1, 2, 3, 4], [], rng, "migrate", 1)
    assert len(p.moves) >= 1 and all(s != c for g, s, c in p.moves)
    p = forced_plan({1: [0], 2: [1, 2]}, [1, 2], [], rng, "decluster", 0)
    assert p.deactivate == [2] and sorted(g for g, s, c in p.moves) == [1, 2]
    p = forced_plan({1: [0, 1, 2]}, [1], [2], rng, "decluster", 1)
    assert p.activate == [2]
