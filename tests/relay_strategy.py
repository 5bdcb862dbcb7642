"""Test-only strategies registered from outside the package (MPI_JOIN_STRATEGIES=relay_strategy):
`relay-ring` and `relay-chain` pass every batch along a ring or a one-way chain of workers.

Each worker owns the join keys whose hash falls in its share (hash % workers) and joins those
rows of a batch when the batch reaches it; it forwards the whole batch on. On the ring, the head
joins its share only when a batch comes back to it after a full round, so the tail -> head link
carries state that a checkpoint must capture (Chandy-Lamport channel state). The results equal
the oracle's only if batches, markers and end-of-stream travel exactly once in order on every
link, and a checkpoint cut is consistent."""
import time
from dataclasses import dataclass

import numpy as np

from mpi_join.runtime.headers import Header
from mpi_join.partitioning import Partitioner
from mpi_join.slaves.hash_join import CoreModule
from mpi_join.runtime.operator import Operator, Output
from mpi_join.strategies import Param, StrategyInfo, register, REGISTRY
from mpi_join.runtime.graph import chain


@dataclass(frozen=True)
class Hop(Header):
    """How many links the batch has travelled."""
    hop: int


class RelayRouter(Operator):
    """The driver sends each epoch, whole, to the first worker of the path."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.part = Partitioner(job, 1)

    def annotate(self, batch, stream):
        batch["_h"] = self.part.hashes(self.part.keys(batch, stream))

    def on_data(self, src, header, batches):
        return Output.sending((self.to(1),), batches, header.bounds, Hop(0))


def share(batches, n, k):
    """The rows of each batch whose key hash falls in share k of n."""
    return [b[(b["_h"] % np.uint64(n)).astype(np.int64) == k] for b in batches]


class RelayModule(CoreModule):
    """A worker past the first: joins its share when the batch reaches it (hop = its share),
    after the test's hop delay."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.n = len(graph.workers)
        self.share = rank - 1
        self.last = self.n                   # no batch travels more links than there are workers
        self.turn = self._turn()
        self.eos = 0
        self.delay = self._delay(job.strategy.params["hop_delay"])

    def _turn(self):
        return self.share

    def _delay(self, hop_delay):
        return hop_delay

    def on_data(self, src, header, batches):
        hop = header.body.hop
        if self.delay:
            time.sleep(self.delay)
        out = Output()
        if hop == self.turn:
            sa, sb, tin = self.core.on_epoch(np.asarray(header.bounds, np.int64), share(batches, self.n, self.share))
            out.emit((sa, sb), tin)
        if hop < self.last:
            for e in self.graph.out_edges(self.rank):
                out.send(e, batches, header.bounds, Hop(hop + 1))
        return out

    def on_eos(self, src):
        self.eos += 1

    def stats(self):
        return dict(super().stats(), eos_seen=self.eos)


class RelayFirst(RelayModule):
    """The first worker (role `left` or `solo`): it does not sleep."""

    def _delay(self, hop_delay):
        return 0.0


class RingHead(RelayFirst):
    """The head of a ring of several workers: joins its share when the batch comes back."""

    def _turn(self):
        return self.last


def one_way(size, params):
    return chain(size, bidirectional=False)


def _info(name, graph, roles):
    return StrategyInfo(testing=True,
        name=name, summary=f"test relay along a {name.split('-')[1]}", predicates=frozenset({"equi", "band", "theta"}),
        requires=frozenset({"equi"}), streams=(2, 2), min_ranks=2,
        params={"hop_delay": Param(0.0, lambda v: None, "seconds every worker but the first sleeps per batch, "
                                   "so batches are in flight on every link when a marker passes", testing=True)},
        graph=graph, router="relay_strategy:RelayRouter", module="relay_strategy:RelayModule",
        roles={r: f"relay_strategy:{c}" for r, c in roles.items()})


# they check the runtime's links, not a join (testing=True)

for _name, _graph, _roles in (("relay-ring", "mpi_join.runtime.graph:ring", {"head": "RingHead", "solo": "RelayFirst"}),
                              ("relay-chain", "relay_strategy:one_way",
                              {"left": "RelayFirst", "solo": "RelayFirst"})):
    if _name not in REGISTRY:
        register(_info(_name, _graph, _roles))
