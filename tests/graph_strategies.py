"""Test-only strategies on an explicit graph of roles (MPI_JOIN_STRATEGIES includes this module).

`merge-tree`: the driver sends every batch to every join core; each core joins the keys whose
hash falls in its share and sends its results on a result edge to its merger; the mergers send
them on to the sink, which writes them. Only the sink writes a result part file, so the results
equal the oracle's only if result rows travel exactly once, in checkpoints too (results in flight
on result edges are channel state)."""
import time
from dataclasses import dataclass

import numpy as np

from mpi_join.headers import Header
from mpi_join.master.driver import Router
from mpi_join.partitioning import Partitioner
from mpi_join.results import result_rows
from mpi_join.slaves.hash_join import HashJoinCore
from mpi_join.slaves.local_join import warm_up
from mpi_join.slaves.module import JoinModule, Output
from mpi_join.strategies import Param, StrategyInfo, register, REGISTRY
from mpi_join.topology import DRIVER, INPUT, RESULTS, Topology


class MergeTree(Topology):
    """Rank 1 is the sink, ranks 2..m+1 the mergers, the rest the cores; core c reports to merger
    c mod m. The driver feeds every core (input rows); every other link carries result rows."""
    name = "merge-tree"

    def __init__(self, size, mergers=2):
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "m", max(1, min(int(mergers), size - 3)))

    @property
    def cores(self):
        return list(range(2 + self.m, self.size))

    def merger_of(self, core):
        return 2 + (core - 2 - self.m) % self.m

    def role(self, rank):
        return "driver" if rank == DRIVER else "sink" if rank == 1 else "merger" if rank < 2 + self.m else "core"

    def upstream(self, rank):
        role = self.role(rank)
        if role == "core":
            return [DRIVER]
        if role == "merger":
            return [c for c in self.cores if self.merger_of(c) == rank]
        return list(range(2, 2 + self.m)) if role == "sink" else []

    def downstream(self, rank):
        role = self.role(rank)
        return {"driver": self.cores, "core": [self.merger_of(rank)] if role == "core" else [],
                "merger": [1], "sink": []}[role]

    def carries(self, sender, receiver):
        return INPUT if sender == DRIVER else RESULTS


@dataclass(frozen=True)
class Stamp(Header):
    """Which core made these results (a merger passes it on)."""
    core: int


class FanOutRouter(Router):
    def __init__(self, job, topology, driver):
        super().__init__(job, topology, driver)
        self.part = Partitioner(job, 1)

    def annotate(self, batch, stream):
        batch["_h"] = self.part.hashes(self.part.keys(batch, stream))

    def route(self, batches, slot):
        for c in self.topology.cores:
            self.driver.send(c, batches)


class Core(JoinModule):
    def __init__(self, job, rank, topology, dtypes):
        super().__init__(job, rank, topology, dtypes)
        self.n, self.share = len(topology.cores), topology.cores.index(rank)
        self.core = HashJoinCore(Partitioner(job, 1), dtypes, "index")
        self.merger = topology.merger_of(rank)

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, "index")

    def on_data(self, src, header, batches):
        mine = [b[(b["_h"] % np.uint64(self.n)).astype(np.int64) == self.share] for b in batches]
        sa, sb, tin = self.core.on_epoch(np.asarray(header.bounds, np.int64), mine)
        out = Output()
        if len(tin):
            out.send_results(self.merger, result_rows(self.job.stream_names, (sa, sb), tin), Stamp(self.rank))
        return out

    def snapshot(self):
        return self.core.snapshot()

    def restore(self, arrays, attrs):
        self.core.restore(arrays, attrs)

    def state_dtype(self, name):
        return self.core.state_dtype(name)

    def stats(self):
        w0, w1 = self.core.window_tuples()
        return {"window_tuples": w0 + w1}


class Merger(JoinModule):
    def __init__(self, job, rank, topology, dtypes):
        super().__init__(job, rank, topology, dtypes)
        self.delay = job.strategy.params["merge_delay"]
        self.passed = 0

    def on_data(self, src, header, batches):
        assert isinstance(header.body, Stamp) and header.body.core == src, header.body
        if self.delay:
            time.sleep(self.delay)
        self.passed += len(batches[0])
        out = Output()
        out.send_results(1, batches[0], header.body)
        return out

    def stats(self):
        return {"window_tuples": 0, "passed": self.passed}


if "merge-tree" not in REGISTRY:
    register(StrategyInfo(
        name="merge-tree", summary="test: cores send results through mergers to a sink",
        predicates=frozenset({"equi", "band", "theta"}), requires=frozenset({"equi"}), streams=(2, 2), min_ranks=4,
        params={"mergers": Param(2, lambda v: None, "merger ranks", testing=True),
                "merge_delay": Param(0.0, lambda v: None, "seconds a merger sleeps per batch, so results are in "
                                     "flight on result edges when a marker passes", testing=True)},
        topology=lambda n, p: MergeTree(n, p["mergers"]),
        roles={"driver": "graph_strategies:FanOutRouter", "core": "graph_strategies:Core",
               "merger": "graph_strategies:Merger", "sink": "mpi_join.slaves.sink:ResultSink"}))
