"""Edges that route at every vertex, not only at rank 0 (runtime/routing.py: Routes, the
`distributor` role, a worker's `first` edges), and the placement they compose (placement.home:
a row lives where every partitioned edge on its path sends it). `hash-tree`
(tests/broadcast_strategy.py) splits rows twice: by the key's hash at rank 0, by the key modulo
at each distributor."""
import os
import shutil

import numpy as np
import pytest

from conftest import equi_job_text, random_streams, run_local, write_job
from reference import assert_equals_oracle
from sim import sim_job, simulate_strategy
from mpi_join import strategies
from mpi_join.runtime.graph import DRIVER, INPUT, RESULTS, Edge, Graph, vertices
from mpi_join.runtime.operator import Output
from mpi_join.runtime.placement import home
from mpi_join.runtime.protocol import DataHeader
from mpi_join.runtime.routing import FirstEdges, Routes
from mpi_join.storage import checkpoint as ck

BAND = 'band = [{left = "R.v", right = "S.w", eps = 0.3}]'


@pytest.mark.parametrize("workers", [3, 4, 5, 6, 7])
@pytest.mark.parametrize("kind", ["time", "count"])
def test_rows_split_by_two_workers_edges_equal_the_oracle(workers, kind):
    """One distributor (fewer than 5 workers) or two, each with one core or more."""
    job = sim_job("hash-tree", "equi", kind)
    arrays = random_streams(np.random.default_rng(workers), 900, key_range=9)
    held = []

    def check(epoch, mods, router):          # every stored row where both splits send it
        for rank, op in mods.items():
            where = home(op.job, router.graph, rank)
            if op.graph.role(rank) != "core":         # a distributor has a home and stores nothing
                continue
            for s, rows in enumerate(op.join.snapshot("w").values()):
                assert np.asarray(where(rows, s), bool).all(), (rank, s)
                held.append(len(rows))
    simulate_strategy("hash-tree", job, arrays, workers, seed=workers, on_epoch=check)
    assert sum(held) > 0


def test_a_cores_home_is_both_splits():
    """At 7 ranks: distributors 1 and 2 (hash of k, 2 ways), cores 3 and 5 under 1 (k mod 2), 4
    under 2 (alone): each core's home is the rows of its distributor's share and its own."""
    from mpi_join.partitioning.hashing import Partitioner
    job = strategies.check_strategy(sim_job("hash-tree", "equi", "time"))
    graph = strategies.get("hash-tree").build_graph(7, job.strategy.params)
    assert [graph.role(r) for r in range(7)] == ["driver", "distributor", "distributor", "core", "core", "core", "sink"]
    rows = random_streams(np.random.default_rng(1), 400, key_range=50)[0]
    part = Partitioner(job, 2)
    first = part.partitions(part.hashes(part.keys(rows, 0)))
    k = rows["k"].astype(np.int64)
    want = {3: (first == 0) & (k % 2 == 0), 5: (first == 0) & (k % 2 == 1), 4: first == 1}
    for rank, mask in want.items():
        assert mask.any() and (np.asarray(home(job, graph, rank)(rows, 0), bool) == mask).all(), rank
    assert sum(want.values()).max() == 1 and sum(want.values()).min() == 1     # each row lives at one core


def test_a_workers_first_edges_route_by_their_partitioners():
    """A worker passes a batch on before it joins along its `first` edges, each as its
    partitioner says: the key modulo splits it, a broadcast edge takes it whole, the strategy's
    header and order go with every part."""
    job = strategies.check_strategy(sim_job("hash-tree", "equi", "time"))
    g = Graph("t", vertices(6, lambda r: "core"), [Edge(DRIVER, 1)] + [
        Edge(1, d, partitioner="broadcast_strategy:by_key_mod", first=True) for d in (2, 3)] + [
        Edge(1, 4, first=True, partitioner="broadcast"), Edge(1, 5, RESULTS)])
    R, S = random_streams(np.random.default_rng(2), 200, key_range=7)
    header = DataHeader(msg_no=3, bounds=(1, 2), order=7, body=None)
    out = FirstEdges(job, g, 1).route(DRIVER, header, [R, S])
    sent = {dests: (batches, order) for dests, batches, _, body, order in out.forward}
    assert set(sent) == {(4,), (2,), (3,)}
    assert all(order == 7 for _, order in sent.values())
    for i, d in enumerate((2, 3)):
        for b, whole in zip(sent[(d,)][0], (R, S)):
            assert (b == whole[whole["k"].astype(np.int64) % 2 == i]).all()
    assert all((b == whole).all() for b, whole in zip(sent[(4,)][0], (R, S)))
    assert FirstEdges(job, g, 2).route(1, header, [R, S]) is None


def _placed_and_rescaled():
    """The registry's strategies whose edges place rows (a home for some core) and that rescale."""
    out = []
    for name in strategies.names():
        info = strategies.get(name)
        if not info.rescale or info.streams[0] > 2:
            continue
        pred = BAND if "band" in info.requires or "equi" not in info.predicates else None
        job = strategies.check_strategy(sim_job(name, "band" if pred else "equi", "time"))
        if any(home(job, info.build_graph(7, job.strategy.params), r) is not None for r in range(1, 7)):
            out.append(pytest.param(name, pred, id=name))
    return out


def _routed(job, graph, batches):
    """{rank: the rows of `batches` (one array per stream) that reach it}, by executing the graph's
    edges from rank 0 through its distributors (routing.Routes): the routing, not placement.home."""
    got, todo = {DRIVER: batches}, [DRIVER]
    while todo:
        r = todo.pop()
        edges = [e for e in graph.out_edges(r) if e.carries == INPUT]
        if edges and (r == DRIVER or graph.role(r) == "distributor"):
            for dests, bs, *_ in Routes(job, edges).route(Output(), got[r], (0, 0)).forward:
                for d in dests:
                    got[d] = bs
                    todo.append(d)
    return got


@pytest.mark.parametrize("strategy,predicate", _placed_and_rescaled())
def test_a_rescaled_restore_deals_each_row_only_where_the_routing_sends_it(tmp_path, strategy, predicate):
    """A run at P ranks resumed at P + 2 from its second checkpoint, windows long enough that
    what it restored is still held at the resumed run's first cut: every row a rank holds there
    is one the new graph's edges route to it. A home wider than the routing (a row dealt to a
    vertex no probe of its key reaches) would not show in the results, only in the memory: it
    fails here; one narrower loses rows, which the oracle's comparison finds."""
    p = strategies.get(strategy).min_ranks + 1
    text = equi_job_text(('"20s"', '"20s"'), strategy=strategy, run="batch_size = 25", predicate=predicate) + \
        '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 400\nkeep = 50\n'
    arrays = random_streams(np.random.default_rng(4), 3000, key_range=40)
    path, job = write_job(str(tmp_path), text, arrays)
    assert run_local(p, "run", path).returncode == 0
    root = job.checkpoint.dir
    done = [c for c, m in ck.list_checkpoints(root) if m]
    for c in done[2:]:
        shutil.rmtree(ck.ckpt_path(root, c))
    r = run_local(p + 2, "run", path, "--resume", root)
    assert r.returncode == 0 and "resuming from checkpoint" in r.stderr, r.stderr
    assert_equals_oracle(job, arrays)
    cid = next(c for c, m in ck.list_checkpoints(root) if m and m["ranks"] == p + 2)
    graph = strategies.get(strategy).build_graph(p + 2, strategies.check_strategy(job).strategy.params)
    held = 0
    for rank in range(1, p + 2):
        arrays_r, _ = ck.read_rank(root, cid, rank)
        for part in {n[:-len("/w/0")] for n in arrays_r if n.endswith("/w/0")}:     # each declared Rows part
            rows = [arrays_r[f"{part}/w/{s}"] for s in (0, 1)]
            got = _routed(job, graph, rows)[rank]
            for s in (0, 1):
                assert len(got[s]) == len(rows[s]), (rank, part, s, len(got[s]), len(rows[s]))
                held += len(rows[s])
    assert held > 0
    assert os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_a_send_goes_along_edges_of_one_vertex():
    """Output.send names the edge it goes along (Operator.to(rank)); a rank, or edges of two
    vertices in one message, are refused in one line."""
    R, S = random_streams(np.random.default_rng(2), 20)
    out = Output()
    out.send(Edge(1, 3), [R, S], (0, 0))
    out.send_many([Edge(1, 2), Edge(1, 4)], [R, S], (0, 0))
    out.send_results(Edge(1, 5, "results"), R[:0])
    assert [dests for dests, *_ in out.forward] == [(3,), (2, 4), (5,)]
    with pytest.raises(TypeError, match=r"Output: a send goes along an edge of the graph .*not int 4"):
        out.send_many([Edge(1, 2), 4], [R, S], (0, 0))
    with pytest.raises(TypeError, match="not int 3"):
        Output.sending((3,), [R, S], (0, 0))
    with pytest.raises(ValueError, match=r"edges of one vertex, not of ranks \[1, 2\]"):
        out.send_many([Edge(1, 3), Edge(2, 3)], [R, S], (0, 0))
    assert len(out.forward) == 3


def test_an_operator_names_its_edge_to_a_rank_and_none_that_the_graph_lacks():
    from mpi_join.runtime.graph import chain
    from mpi_join.runtime.operator import Operator
    g = chain(4)
    op = Operator(None, 2, g, [])
    assert op.to(3) == g.edge(2, 3) and op.to(1) == g.edge(2, 1)
    with pytest.raises(RuntimeError, match=r"rank 2: no edge of the .* graph leads from it to rank 0"):
        op.to(0)


def test_a_send_along_no_edge_is_refused_naming_the_rank():
    """A worker's (slaves/outbox.py) and rank 0's (master/outlet.py): one line, not a KeyError."""
    from mpi_join.master.outlet import Outlet
    from mpi_join.slaves.outbox import Outbox
    R, S = random_streams(np.random.default_rng(2), 20)
    with pytest.raises(RuntimeError, match=r"worker 2: rank 5 is not downstream of it in the g graph \(downstream: \[3\]\)"):
        Outbox(None, 2, "g", [3], 2, None).data((5,), (0, 0), None, -1, [R, S])
    with pytest.raises(RuntimeError, match=r"rank 0: no edge of the graph leads to rank 7 \(rank 0's edges lead to \[1, 2\]\)"):
        Outlet(None, [1, 2], 2, None, None, None, None).send_many([7], [R, S], None, (0, 0))
