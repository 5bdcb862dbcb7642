"""Test-only strategies on an explicit graph of roles (MPI_JOIN_STRATEGIES includes this module).

`fan-tree`: a distribution tree (graph.tree, fanout b) rooted at the driver; every node passes
each batch on to its children (before its own join with `forward_first`: graph.Edge.first; after it without), then
joins the keys whose hash falls in its share and writes its results. Its `depth` bench case
measures what a hop of the tree adds to a leaf's production delay.

`dispatch`: the driver hands batch i to dispatcher i mod d, which sends it on to every unit; a
unit takes its dispatchers' links as one flow through the runtime's ordered merge (by the
batch's number, DataHeader.order) and joins its hash share of every batch, refusing one that
comes out of order. Without the merge the units would see batches out of order.

`grow`: units (hash partition groups, `hash`'s join module) all start on worker 1; at epoch
`grow_at` half of them move to worker 2, and at twice that epoch a quarter move to worker 3,
through the runtime's state move (coordinator.move): workers 2 and 3 held nothing before.

`merge-tree`: the driver sends every batch to every join core; each core joins the keys whose
hash falls in its share and sends its results on a result edge to its merger; the mergers send
them on to the sink, which writes them. Only the sink writes a result part file, so the results
equal the oracle's only if result rows travel exactly once, in checkpoints too (results in flight
on result edges are channel state)."""
import time
from dataclasses import dataclass

import numpy as np

from mpi_join.runtime.headers import Header
from mpi_join.partitioning import Partitioner
from mpi_join.storage.results import result_rows
from mpi_join.slaves.hash_join import CoreModule
from mpi_join.runtime.operator import Array, Fields, Operator, Output
from relay_strategy import RelayRouter, share
from mpi_join.strategies import Param, StrategyInfo, register, REGISTRY
from mpi_join.runtime.graph import DRIVER, RESULTS, Edge, Graph, tree, vertices


def merge_tree(size, params):
    """Rank 1 is the sink, ranks 2..m+1 the mergers, the rest the cores; core c reports to merger
    c mod m. The driver feeds every core (input rows); every other link carries result rows."""
    m = max(1, min(int(params["mergers"]), (size - 2) // 2))       # every merger has a core
    cores = range(2 + m, size)
    edges = [Edge(DRIVER, c, partitioner="broadcast") for c in cores]
    edges += [Edge(c, 2 + (c - 2 - m) % m, RESULTS) for c in cores] + [Edge(g, 1, RESULTS) for g in range(2, 2 + m)]
    return Graph("merge-tree", vertices(size, lambda r: "sink" if r == 1 else "merger" if r < 2 + m else "core"), edges)


@dataclass(frozen=True)
class Stamp(Header):
    """Which core made these results (a merger passes it on)."""
    core: int


class FanOutRouter(RelayRouter):
    def on_data(self, src, header, batches):
        return Output.sending(self.graph.out_edges(DRIVER), batches, header.bounds)


class Core(CoreModule):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        v = graph.vertex(rank)
        self.n, self.share = v.count, v.index
        self.merger, = graph.downstream(rank)


    def on_data(self, src, header, batches):
        sa, sb, tin = self.core.on_epoch(np.asarray(header.bounds, np.int64), share(batches, self.n, self.share))
        out = Output()
        if len(tin):
            out.send_results(self.to(self.merger), result_rows(self.job.stream_names, (sa, sb), tin), Stamp(self.rank))
        return out


class Merger(Operator):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.delay = job.strategy.params["merge_delay"]
        self.passed = 0

    def on_data(self, src, header, batches):
        assert isinstance(header.body, Stamp) and header.body.core == src, header.body
        if self.delay:
            time.sleep(self.delay)
        self.passed += len(batches[0])
        out = Output()
        out.send_results(self.to(1), batches[0], header.body)
        return out

    def stats(self):
        return {"window_tuples": 0, "passed": self.passed}


class TreeNode(CoreModule):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        p = job.strategy.params
        self.n, self.share = len(graph.workers), rank - 1
        self.children = graph.downstream(rank)
        self.first, self.delay = bool(p["forward_first"]), float(p["join_delay"])


    def on_data(self, src, header, batches):
        if self.delay:
            time.sleep(self.delay)            # stands for a costly join at every node
        sa, sb, tin = self.core.on_epoch(np.asarray(header.bounds, np.int64), share(batches, self.n, self.share))
        out = Output()
        out.emit((sa, sb), tin)
        if not self.first and self.children:
            out.send_many([self.to(c) for c in self.children], batches, header.bounds)
        return out


def fan_tree(size, params):
    return tree(size, fanout=params["fanout"], first=bool(params["forward_first"]))


class RootRouter(FanOutRouter):
    def on_data(self, src, header, batches):
        return Output.sending(self.graph.out_edges(DRIVER), batches, header.bounds)


def bench_depth(nprocs, workdir, tuples=6000, rate=300.0, delay=0.02):
    """A leaf's production delay at depth 2 (driver -> 1 -> 2, fanout 1) against a depth-1 worker
    (driver -> 1), each node sleeping `delay` per batch for its join: with forward_first the hop
    adds the transfer only; forwarding after the join adds the inner node's join time."""
    import os
    import tempfile
    from mpi_join.tools.bench import run_mpi, print_table
    from mpi_join.tools.workloads import make
    root = workdir or tempfile.mkdtemp(prefix="mpi-join-depth-")
    path = make("equi", os.path.join(root, "data"), tuples=tuples, rate=rate, strategy="fan-tree")
    text = open(path).read()
    rows, p50 = [], {}
    for name, ranks, first in (("depth 1", 2, True), ("depth 2, forward first", 3, True),
                               ("depth 2, forward after the join", 3, False)):
        job = os.path.join(os.path.dirname(path), f"job-{ranks}-{int(first)}.toml")
        with open(job, "w") as f:
            f.write(text.replace('[strategy]\nname = "fan-tree"', f'[strategy]\nname = "fan-tree"\nfanout = 1\n'
                                 f'forward_first = {str(first).lower()}\njoin_delay = {delay}')
                    .replace('rate = "max"\nbatch_size = 8192', f'rate = {rate}\nbatch_size = 20\n'
                             f'flush_interval = "20ms"'))
        s = run_mpi(ranks, job, os.path.join(root, f"out-{ranks}-{int(first)}"))
        leaf = max(r["rank"] for r in s["ranks"])
        lat = next(r for r in s["ranks"] if r["rank"] == leaf)["latency_ms"]
        p50[name] = lat["p50"]
        rows.append((name, leaf, f"{lat['p50']:.1f}", f"{lat['p99']:.1f}"))
    print(f"fan-tree, {tuples:,} tuples at {rate:g}/s per stream, {delay * 1e3:g} ms join per batch and node "
          f"(3 ranks on this machine's cores)")
    print_table(("tree", "leaf rank", "p50 ms", "p99 ms"), rows)
    base = p50["depth 1"]
    for name in list(p50)[1:]:
        print(f"{name}: leaf p50 = {p50[name] / base:.2f} x the depth-1 worker's")


def dispatch(size, params):
    """Ranks 1..d dispatch (the driver feeds them), the rest are units fed by every dispatcher."""
    d = max(1, min(int(params["dispatchers"]), size - 2))
    edges = [Edge(DRIVER, x, partitioner="round-robin") for x in range(1, d + 1)]
    edges += [Edge(x, u, partitioner="broadcast", merge=True) for u in range(d + 1, size) for x in range(1, d + 1)]
    return Graph("dispatch", vertices(size, lambda r: "dispatcher" if r <= d else "unit"), edges)


class DispatchRouter(FanOutRouter):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.next = 0
        self.declare(order=Fields(self, "next"))

    def on_data(self, src, header, batches):
        d = self.graph.entries()
        self.next += 1
        return Output.sending((self.to(d[(self.next - 1) % len(d)]),), batches, header.bounds, order=self.next - 1)


class Dispatcher(Operator):
    def on_data(self, src, header, batches):
        out = Output()
        out.send_many(self.graph.out_edges(self.rank), batches, header.bounds, order=header.order)
        return out


class Unit(Core):
    def __init__(self, job, rank, graph, dtypes):
        CoreModule.__init__(self, job, rank, graph, dtypes)
        v = graph.vertex(rank)
        self.n, self.share = v.count, v.index
        self.last = -1
        self.declare(order=Fields(self, "last"))

    def on_data(self, src, header, batches):
        if header.order != self.last + 1:
            raise RuntimeError(f"unit {self.rank}: batch {header.order} after {self.last}")
        self.last = header.order
        sa, sb, tin = self.core.on_epoch(np.asarray(header.bounds, np.int64), share(batches, self.n, self.share))
        out = Output()
        out.emit((sa, sb), tin)
        return out


class GrowRouter(FanOutRouter):
    def __init__(self, job, rank, graph, dtypes):
        Operator.__init__(self, job, rank, graph, dtypes)
        self.part = Partitioner(job, job.strategy.params["partitions"])
        self.owner = np.ones(self.part.n_partitions, np.int64)
        self.at = int(job.strategy.params["grow_at"])
        self.moved = 0
        self.declare(owner=Array(self, "owner", np.int64), counts=Fields(self, "moved"))

    def unit_of(self, batch):
        return self.part.partitions(batch["_h"])

    def on_data(self, src, header, batches):
        out = Output()
        for w in self.graph.workers:
            mine = [b[self.owner[self.unit_of(b)] == w] for b in batches]
            if any(len(b) for b in mine):
                out.send(self.to(w), mine, header.bounds)
        return out

    def end_of_epoch(self, epoch):
        n = self.part.n_partitions
        for dst, when, units in ((2, self.at, range(n // 2, n)), (3, 2 * self.at, range(n // 4))):
            if epoch == when and dst in self.graph.workers:
                for u in units:
                    self.coordinator.move(u, int(self.owner[u]), dst)
                    self.moved += 1

    def on_moved(self, unit, src, dst, held):
        self.owner[unit] = dst
        if any(len(h) for h in held):
            return Output.sending((self.to(dst),), held, self.coordinator.bounds())

    def stats(self):
        return {"units_moved": self.moved}


# what this module registers (testing=True) checks the runtime's graph, not a join (theirs is hash's core)

if "grow" not in REGISTRY:
    register(StrategyInfo(testing=True,
        name="grow", summary="test: units move to workers that held nothing, mid-run",
        predicates=frozenset({"equi", "band", "theta"}), requires=frozenset({"equi"}), streams=(2, 2), min_ranks=3,
        params={**REGISTRY["hash"].params,
                "grow_at": Param(3, lambda v: None, "epoch at which half the units move to worker 2", testing=True)},
        graph="mpi_join.runtime.graph:star",
        roles={"driver": "graph_strategies:GrowRouter", "worker": "mpi_join.slaves.hash_join:HashJoinModule"}))

if "dispatch" not in REGISTRY:
    register(StrategyInfo(testing=True,
        name="dispatch", summary="test: two dispatchers feed every unit through the ordered merge",
        predicates=frozenset({"equi", "band", "theta"}), requires=frozenset({"equi"}), streams=(2, 2), min_ranks=4,
        params={"dispatchers": Param(2, lambda v: None, "dispatcher ranks", testing=True)},
        graph="graph_strategies:dispatch",
        roles={"driver": "graph_strategies:DispatchRouter", "dispatcher": "graph_strategies:Dispatcher",
               "unit": "graph_strategies:Unit"}))

if "fan-tree" not in REGISTRY:
    register(StrategyInfo(testing=True,
        name="fan-tree", summary="test: a distribution tree whose nodes forward before they join",
        predicates=frozenset({"equi", "band", "theta"}), requires=frozenset({"equi"}), streams=(2, 2), min_ranks=2,
        params={"fanout": Param(2, lambda v: None, "children per node", testing=True),
                "forward_first": Param(True, lambda v: None, "pass a batch on before joining it", testing=True),
                "join_delay": Param(0.0, lambda v: None, "seconds every node sleeps per batch", testing=True)},
        graph="graph_strategies:fan_tree",
        roles={"driver": "graph_strategies:RootRouter", "worker": "graph_strategies:TreeNode"},
        cases={"depth": ("graph_strategies:bench_depth", "a leaf's delay at depth 2 against depth 1")}))

if "merge-tree" not in REGISTRY:
    register(StrategyInfo(testing=True,
        name="merge-tree", summary="test: cores send results through mergers to a sink",
        predicates=frozenset({"equi", "band", "theta"}), requires=frozenset({"equi"}), streams=(2, 2), min_ranks=4,
        params={"mergers": Param(2, lambda v: None, "merger ranks", testing=True),
                "merge_delay": Param(0.0, lambda v: None, "seconds a merger sleeps per batch, so results are in "
                                     "flight on result edges when a marker passes", testing=True)},
        graph="graph_strategies:merge_tree",
        roles={"driver": "graph_strategies:FanOutRouter", "core": "graph_strategies:Core",
               "merger": "graph_strategies:Merger", "sink": "mpi_join.slaves.sink:ResultSink"}))
