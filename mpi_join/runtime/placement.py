"""Where a row lives, by the partitioner of rank 0's edge into a vertex (graph.Edge.partitioner):
the one rule that routes a row (routing.EdgeRouter) and deals it again when a checkpoint resumes
at another rank count (Operator.restore_rescaled, by `home`).

A partitioner is `hash` (the equi key's hash), a strategy's "module:function" (`function(batch,
stream, n)` -> each row's edge 0..n-1: one edge a row), or a strategy's "module:Class" whose
instance for the job (`Class(job)`) declares
    home(rows, stream, index, count) -> bool mask: the rows stored at the index-th of count
    reach(rows, stream, index, count) -> bool mask: the rows sent there (to be stored or to probe;
                                         a row goes to every edge it reaches; default: home)
so that a row may be copied along several edges (a band's key stripes, a grid's row and column)."""
import numpy as np

from ..errors import ConfigError
from .graph import DRIVER


# partitioners that do not say where a row lives (every row may be anywhere, or everywhere)
PLACELESS = ("forward", "broadcast", "round-robin", "own")


def labeller(job, partitioner, n):
    """`function(batch, stream, n)` -> each row's edge 0..n-1 among the `n` edges of rank 0 with
    `partitioner` (hash or a strategy's "module:function"), or the object a strategy's
    "module:object" names, which has `home` (and `reach`)."""
    if partitioner == "hash":
        from ..partitioning.hashing import Partitioner
        if not job.predicate.equi:
            raise ConfigError(f"strategy {job.strategy.name!r}: its edges from rank 0 route by the hash of "
                              f"the equi key, and the job's predicate has no equi condition")
        part = Partitioner(job, n)
        return lambda batch, s, n: part.partitions(part.hashes(part.keys(batch, s)))
    from ..strategies import _load
    label = _load(partitioner)
    return label(job) if isinstance(label, type) else label       # a placement class: one for the job


def declared(label):
    """Does a partitioner's object declare its placement (home, reach) instead of labelling rows?"""
    return hasattr(label, "home")


def reach(label, rows, stream, index, count):
    """The rows a partitioner sends along the index-th of its count edges."""
    return np.asarray((getattr(label, "reach", None) or label.home)(rows, stream, index, count), bool)


def home(job, graph, rank):
    """(`home(rows, stream, index, count)` -> which rows live at the `index`-th of `count`
    vertices that rank 0's edges of the partitioner into `rank` feed; (index, count) of `rank`
    in `graph`), or None where that edge does not place rows (PLACELESS, or no edge from rank 0)."""
    into = [e for e in graph.out_edges(DRIVER) if e.dst == rank]
    if not into or into[0].partitioner in PLACELESS:
        return None
    p = into[0].partitioner
    dsts = [e.dst for e in graph.out_edges(DRIVER) if e.partitioner == p]
    label = labeller(job, p, len(dsts))
    if declared(label):
        return label.home, dsts.index(rank), len(dsts)

    def where(rows, stream, index, count):
        return np.asarray(label(rows, stream, count), np.int64) == index
    return where, dsts.index(rank), len(dsts)
