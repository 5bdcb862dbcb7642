"""`broadcast-store`, a test strategy of its own shape: every batch goes to every core; core i of k
stores the tuples whose count is i mod k and joins each new tuple with what it stores; results go
on a result edge to the sink (the last rank). No graph class, no lifecycle code."""
import numpy as np

from mpi_join.runtime.graph import DRIVER, RESULTS, Edge, Graph, vertices
from mpi_join.storage.results import result_rows
from mpi_join.slaves.local_join import BinaryJoin
from mpi_join.runtime.operator import Fields, Operator, Output, Rows
from mpi_join.strategies import REGISTRY, StrategyInfo, register


def build(size, params):
    cores, sink = range(1, size - 1), size - 1
    return Graph("broadcast-store", vertices(size, lambda r: "sink" if r == sink else "core"),
                 [Edge(DRIVER, c, partitioner="broadcast") for c in cores] + [Edge(c, sink, RESULTS) for c in cores])


class Broadcast(Operator):
    def on_data(self, src, header, batches):
        return Output.sending(self.graph.entries(), batches, header.bounds)


class Core(Operator):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        v = graph.vertex(rank)
        self.i, self.k, (self.sink,) = v.index, v.count, graph.downstream(rank)
        self.join, self.seen = BinaryJoin(job.predicate, dtypes), [0, 0]
        self.declare(join=Rows(self), counts=Fields(self, "seen"))     # checkpointed and restored

    def on_data(self, src, header, batches):
        for s, b in enumerate(batches):
            mine = b[(self.seen[s] + np.arange(len(b))) % self.k == self.i]
            self.join.append(self.join.derive(mine, s), s)
            self.seen[s] += len(b)
        out = Output()
        for s, b in enumerate(batches):
            a, c, tin = self.join.probe_newer(b, s)
            out.send_results(self.sink, result_rows(self.job.stream_names, (a, c), tin))
        self.join.expire(header.bounds)         # what no tuple still to come can see (DataHeader)
        return out


if "broadcast-store" not in REGISTRY:
    register(StrategyInfo(
        name="broadcast-store", summary="test: broadcast to every core, each stores 1/k, results to a sink",
        predicates=frozenset({"equi", "band", "theta"}), streams=(2, 2), min_ranks=3, params={}, testing=True,
        graph="broadcast_strategy:build", roles={"driver": "broadcast_strategy:Broadcast", "core": "broadcast_strategy:Core",
                                                  "sink": "mpi_join.slaves.sink:ResultSink"}))
