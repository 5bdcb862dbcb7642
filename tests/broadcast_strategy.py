"""`broadcast-store`, a test strategy of its own shape: every batch to every core, core i of k
stores the tuples whose count is i mod k and joins each new tuple with what it stores, results
to a sink. Rank 0 routes by its edges and the sink is the runtime's: no rank-0 operator."""
import numpy as np

from mpi_join.runtime.graph import DRIVER, RESULTS, Edge, Graph, vertices
from mpi_join.runtime.operator import Fields, Operator, Output, Rows
from mpi_join.runtime.routing import EdgeRouter
from mpi_join.slaves.local_join import BinaryJoin
from mpi_join.storage.results import result_rows
from mpi_join.strategies import REGISTRY, StrategyInfo, register


def build(size, params, partitioner="broadcast"):
    cores, sink = range(1, size - 1), size - 1
    return Graph("store", vertices(size, lambda r: "sink" if r == sink else "core"),
                 [Edge(DRIVER, c, partitioner=partitioner) for c in cores] + [Edge(c, sink, RESULTS) for c in cores])


class Store(Operator):
    """A core that stores the rows `mine` picks of what it gets and joins each new tuple with what
    it stores, its results to the sink."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        v = graph.vertex(rank)
        self.i, self.k, (self.sink,) = v.index, v.count, graph.downstream(rank)
        self.join = BinaryJoin(job.predicate, dtypes)
        self.declare(join=Rows(self, expire=True))        # checkpointed, warmed up, expired

    def mine(self, b, s):
        return b

    def on_data(self, src, header, batches):
        out = Output()
        for s, b in enumerate(batches):
            self.join.append(self.join.derive(self.mine(b, s), s), s)
        for s, b in enumerate(batches):
            a, c, tin = self.join.probe_newer(b, s)
            out.send_results(self.to(self.sink), result_rows(self.job.stream_names, (a, c), tin))
        return out


class Core(Store):
    """broadcast-store's core: the tuples whose count in their stream is i mod k."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.seen = [0, 0]
        self.declare(counts=Fields(self, "seen"))

    def mine(self, b, s):
        kept = b[(self.seen[s] + np.arange(len(b))) % self.k == self.i]
        self.seen[s] += len(b)
        return kept


if "broadcast-store" not in REGISTRY:
    register(StrategyInfo(name="broadcast-store", summary="test: broadcast to every core, each stores 1/k, results "
                          "to a sink", min_ranks=3, testing=True, graph="broadcast_strategy:build",
                          roles={"core": "broadcast_strategy:Core"}))


# The other partitioners of rank 0's edges (runtime/routing.py), on the same shape: each core gets
# a share of the rows by key and stores all it gets (Store). They resume at another rank count
# with no restore code: the partitioner says where each stored row lives (routing.home), and the
# sink's results in flight at the cut are written by the new sink.
def by_key_mod(batch, stream, n):
    """A strategy's own partitioner: equi key k modulo the edges."""
    return batch["k"].astype("int64") % n


for _name, _part in (("hash-store", "hash"), ("mod-store", "broadcast_strategy:by_key_mod")):
    if _name not in REGISTRY:
        register(StrategyInfo(name=_name, summary=f"test: rank 0's edges route by {_part}, each core stores what it "
                              "gets", predicates=frozenset({"equi"}), requires=frozenset({"equi"}), min_ranks=3,
                              testing=True, graph=f"broadcast_strategy:build_{_name.split('-')[0]}", rescale=True,
                              roles={"core": "broadcast_strategy:Store"}))


def build_hash(size, params):
    return build(size, params, "hash")


def build_mod(size, params):
    return build(size, params, "broadcast_strategy:by_key_mod")


# `hash-tree`: rows split twice on their way, by two workers' edges. Rank 0's edges go to one or
# two distributors (the runtime's `distributor` role: no code here) by the key's hash; each
# distributor's edges go to its cores by the key modulo its cores; a core stores what it gets.
# A core's home is both splits (placement.home), which deals its rows again at another rank count.
def build_tree(size, params):
    sink = size - 1
    d = 1 if size < 6 else 2
    cores = range(d + 1, sink)
    return Graph("tree", vertices(size, lambda r: "sink" if r == sink else "distributor" if r <= d else "core"),
                 [Edge(DRIVER, r, partitioner="hash") for r in range(1, d + 1)]
                 + [Edge(1 + (c - d - 1) % d, c, partitioner="broadcast_strategy:by_key_mod") for c in cores]
                 + [Edge(c, sink, RESULTS) for c in cores])


if "hash-tree" not in REGISTRY:
    register(StrategyInfo(name="hash-tree", summary="test: rows split by rank 0's edges, then by a distributor's",
                          predicates=frozenset({"equi"}), requires=frozenset({"equi"}), min_ranks=4, testing=True,
                          graph="broadcast_strategy:build_tree", rescale=True, roles={"core": "broadcast_strategy:Store"}))


# `fan-in`: every core fed by two distributors. Rank 0 deals its batches round-robin between
# the two (numbering them), each distributor routes its rows to the cores by the key's hash, and
# each core takes the two flows in rank 0's order (merge=True). A core's home is the hash
# (placement._fan_in); rows in flight to a core at a cut (the flow whose marker copy came
# second) are carried to rest by the drain before the state is dealt at another rank count.
def build_fan_in(size, params):
    sink, d = size - 1, 2
    cores = range(d + 1, sink)
    return Graph("fan-in", vertices(size, lambda r: "sink" if r == sink else "distributor" if r <= d else "core"),
                 [Edge(DRIVER, r, partitioner="round-robin") for r in range(1, d + 1)]
                 + [Edge(r, c, partitioner="hash", merge=True) for c in cores for r in range(1, d + 1)]
                 + [Edge(c, sink, RESULTS) for c in cores])


class Numbered(EdgeRouter):
    """Rank 0 numbers the batches it deals, the order the cores merge the two flows by."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.next = 0
        self.declare(order=Fields(self, "next"))

    def on_data(self, src, header, batches):
        self.next = self.number(header, self.next) + 1
        return self.routes.route(Output(), batches, header.bounds, order=self.next - 1)


if "fan-in" not in REGISTRY:
    register(StrategyInfo(name="fan-in", summary="test: two distributors feed every core through the ordered merge",
                          predicates=frozenset({"equi"}), requires=frozenset({"equi"}), min_ranks=5, testing=True,
                          graph="broadcast_strategy:build_fan_in", rescale=True,
                          roles={"driver": "broadcast_strategy:Numbered", "core": "broadcast_strategy:Store"}))
