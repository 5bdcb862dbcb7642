"""Where a row lives, by the partitioner of rank 0's edge into a vertex (graph.Edge.partitioner):
the one rule that routes a row (routing.EdgeRouter) and deals it again when a checkpoint resumes
at another rank count (Operator.restore_rescaled, by `home`)."""
import numpy as np

from ..errors import ConfigError
from .graph import DRIVER


# partitioners that do not say where a row lives (every row may be anywhere, or everywhere)
PLACELESS = ("forward", "broadcast", "round-robin", "own")


def labeller(job, partitioner, n):
    """`function(batch, stream, n)` -> each row's edge 0..n-1 among the `n` edges of rank 0 with
    `partitioner` (hash or a strategy's "module:function")."""
    if partitioner == "hash":
        from ..partitioning.hashing import Partitioner
        if not job.predicate.equi:
            raise ConfigError(f"strategy {job.strategy.name!r}: its edges from rank 0 route by the hash of "
                              f"the equi key, and the job's predicate has no equi condition")
        part = Partitioner(job, n)
        return lambda batch, s, n: part.partitions(part.hashes(part.keys(batch, s)))
    from ..strategies import _load
    return _load(partitioner)


def home(job, graph, rank):
    """`home(rows, stream, index, count)` -> which rows live at the `index`-th of `count` vertices
    that rank 0's edges of the partitioner into `rank` feed, with (index, count) for `rank` in
    `graph`; or None where that edge does not place rows (PLACELESS, or no edge from rank 0)."""
    into = [e for e in graph.out_edges(DRIVER) if e.dst == rank]
    if not into or into[0].partitioner in PLACELESS:
        return None
    p = into[0].partitioner
    dsts = [e.dst for e in graph.out_edges(DRIVER) if e.partitioner == p]
    label = labeller(job, p, len(dsts))

    def where(rows, stream, index, count):
        return np.asarray(label(rows, stream, count), np.int64) == index
    return where, dsts.index(rank), len(dsts)
