"""Edges that route (runtime/routing.py): rank 0's operator for a strategy that names none sends
each batch along its edges as each partitioner says, keeps its round-robin turn across a
checkpoint, and refuses what it cannot route."""
import numpy as np
import pytest

from mpi_join.errors import ConfigError
from mpi_join.runtime.graph import DRIVER, Edge, Graph, vertices
from mpi_join.runtime.protocol import DataHeader
from mpi_join.runtime.operator import SOURCE
from mpi_join.runtime.routing import EdgeRouter
from mpi_join.strategies import ROLE_DEFAULTS, get
from sim import sim_job, simulate_strategy
from conftest import random_streams
from mpi_join.join.oracle import run_oracle
from reference import as_set


def _router(edges, pred="equi"):
    job = sim_job("hash", pred, "time")
    size = 1 + max(e.dst for e in edges)
    graph = Graph("t", vertices(size, lambda r: "core"), edges)
    arrays = random_streams(np.random.default_rng(1), 60, key_range=7)
    return EdgeRouter(job, 0, graph, [a.dtype for a in arrays]), arrays


def _header(bounds=(5, 6)):
    return DataHeader(msg_no=-1, bounds=bounds, order=0)


def test_each_partitioner_sends_what_it_says():
    edges = [Edge(DRIVER, 1, partitioner="broadcast"), Edge(DRIVER, 2, partitioner="forward"),
             Edge(DRIVER, 3, partitioner="round-robin"), Edge(DRIVER, 4, partitioner="round-robin"),
             Edge(DRIVER, 5, partitioner="hash"), Edge(DRIVER, 6, partitioner="hash"),
             Edge(DRIVER, 7, partitioner="broadcast_strategy:by_key_mod"),
             Edge(DRIVER, 8, partitioner="broadcast_strategy:by_key_mod")]
    op, arrays = _router(edges)
    sent = {}
    for i in range(3):
        for dests, batches, bounds, _, _ in op.on_data(SOURCE, _header(), arrays).forward:
            assert bounds == (5, 6)
            for d in dests:
                sent.setdefault(d, []).append(batches)
    assert len(sent[1]) == len(sent[2]) == 3 and sent[1][0] is sent[2][0]      # packed once for both
    assert (len(sent[3]), len(sent[4])) == (2, 1)                             # turns 0, 1, 0
    for pair, key in (((5, 6), None), ((7, 8), lambda b: b["k"] % 2)):
        for s in (0, 1):
            got = [np.concatenate([m[s] for m in sent[d]]) for d in pair]
            assert sum(len(g) for g in got) == 3 * len(arrays[s])             # each row to one edge
            assert all((np.diff(m[s]["seq"]) > 0).all() for d in pair for m in sent[d])  # each in seq order
            if key is not None:
                assert all((key(g) == i).all() for i, g in enumerate(got))
    keys = [set(np.concatenate([m[s]["k"] for m in sent[d] for s in (0, 1)]).tolist()) for d in (5, 6)]
    assert not keys[0] & keys[1], "equal keys meet on one rank"


def test_the_round_robin_turn_is_state():
    edges = [Edge(DRIVER, 1, partitioner="round-robin"), Edge(DRIVER, 2, partitioner="round-robin")]
    op, arrays = _router(edges)
    op.on_data(SOURCE, _header(), arrays)
    arrays_, attrs = op.snapshot()
    fresh, _ = _router(edges)
    fresh.restore(arrays_, attrs)
    assert fresh.on_data(SOURCE, _header(), arrays).forward[0][0] == (2,)


def test_what_it_cannot_route_is_refused_at_load():
    with pytest.raises(ConfigError, match="partitioner 'own'"):
        _router([Edge(DRIVER, 1, partitioner="own")])
    with pytest.raises(ConfigError, match="no equi condition"):
        _router([Edge(DRIVER, 1, partitioner="hash")], pred="band")
    with pytest.raises(ConfigError, match="unknown partitioner"):
        Graph("t", vertices(2, lambda r: "core"), [Edge(DRIVER, 1, partitioner="sideways")]).check(lambda r: True)


@pytest.mark.parametrize("strategy", ["broadcast-store", "hash-store", "mod-store"])
def test_a_strategy_without_a_rank0_operator_equals_the_oracle(strategy):
    info = get(strategy)
    assert "driver" not in info.roles and not info.router and info.role_code("driver") == ROLE_DEFAULTS["driver"]
    job = sim_job(strategy, "equi", "time")
    arrays = random_streams(np.random.default_rng(9), 400, key_range=6)
    held = []           # rows the cores' declared joins hold after each epoch (stats(), by default)
    rows, mods, router = simulate_strategy(strategy, job, arrays, 4, on_epoch=lambda e, mods, r: held.append(
        sum(m.stats()["window_tuples"] for m in mods.values() if hasattr(m, "sink"))))
    assert isinstance(router, EdgeRouter)
    assert len(rows) == len(as_set(rows)) and as_set(rows) == as_set(run_oracle(job, arrays))
    # the cores store 800 rows between them; Rows(expire=True) expires them by the batches' bounds
    assert 0 < max(held) < sum(len(a) for a in arrays) // 4, held


def test_fields_say_how_they_are_dealt_at_another_rank_count():
    """A Fields part at a restore at another rank count: `first` takes the first old vertex's
    values, `sum` adds them (lists item by item), `fresh` keeps the new vertex's own, and a part
    that says nothing cannot be dealt (the restore refuses it in one line)."""
    from mpi_join.runtime.operator import Fields

    class Op:
        n, seen = 7, [0, 0]
    files = [({}, {"n": 2, "seen": [1, 2]}), ({}, {"n": 3, "seen": [3, 4]})]
    for policy, want in (("sum", (5, [4, 6])), ("first", (2, [1, 2])), ("fresh", (7, [0, 0]))):
        op = Op()
        assert Fields(op, "n", "seen", rescale=policy).restore_homed(files, None)
        assert (op.n, op.seen) == want, policy
    assert not Fields(Op(), "n").restore_homed(files, None)
    with pytest.raises(TypeError, match="'first'"):
        Fields(Op(), "n", rescale="max")
