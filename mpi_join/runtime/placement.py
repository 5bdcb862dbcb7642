"""Where a row lives, by the partitioners of the edges on a vertex's path from rank 0
(graph.Edge.partitioner): the one rule that routes a row (routing.Routes, at rank 0 and at any
worker that passes rows on) and deals it again when a checkpoint resumes at another rank count
(Operator.restore_rescaled, by `home`).

A partitioner is `hash` (the equi key's hash), a strategy's "module:function" (`function(batch,
stream, n)` -> each row's edge 0..n-1: one edge a row), or a strategy's "module:Class" whose
instance for the job (`Class(job)`) declares
    home(rows, stream, index, count) -> bool mask: the rows stored at the index-th of count
    reach(rows, stream, index, count) -> bool mask: the rows sent there (to be stored or to probe;
                                         a row goes to every edge it reaches; default: home)
so that a row may be copied along several edges (a band's key stripes, a grid's row and column)."""
import numpy as np

from ..errors import ConfigError
from .graph import INPUT


# partitioners that do not say where a row lives: an edge that passes every row on, and one that
# picks rows by no rule a row carries (round-robin, a strategy's own routing)
WHOLE, UNRULED = ("forward", "broadcast"), ("round-robin", "own")


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
    """`mask(rows, stream)` -> which rows live at `rank`, by the partitioned edges on its path from
    rank 0 (each vertex on it fed by one input edge, or by senders that route alike: _fan_in): a
    row lives where every such edge sends it, so a vertex below a distributor that splits again
    is placed by both. None where the path does not place rows: no partitioned edge on it (every
    row may be anywhere, or everywhere), or an edge that picks rows by no rule a row carries
    (round-robin, a strategy's own routing)."""
    mask = _path(job, graph, rank)
    return None if mask is _ALL else mask


_ALL = object()        # every row of the input reaches this vertex


def _path(job, graph, rank):
    if rank in graph.sources:
        return _ALL
    into = [e for e in graph.in_edges(rank) if e.carries == INPUT]
    if len(into) > 1:
        return _fan_in(job, graph, rank, into)
    if len(into) != 1 or into[0].partitioner in UNRULED:
        return None
    e = into[0]
    above = _path(job, graph, e.src)
    if above is None or e.partitioner in WHOLE:
        return above
    return _split(job, graph, rank, e.src, e.partitioner, above)


def _fan_in(job, graph, rank, into):
    """A vertex fed by several senders, all splitting by one partitioner over the same vertices,
    each sender fed by a round-robin of one vertex that reaches exactly them (rows dealt among
    senders that route alike): a row lives where the partitioner sends it below that vertex's
    own placement. Any other fan-in places no row."""
    p, srcs = into[0].partitioner, {e.src for e in into}
    if p in WHOLE + UNRULED or any(e.partitioner != p for e in into):
        return None
    if len({tuple(d.dst for d in graph.out_edges(s) if d.partitioner == p and d.carries == INPUT) for s in srcs}) != 1:
        return None
    feeds = {tuple((f.src, f.partitioner) for f in graph.in_edges(s) if f.carries == INPUT) for s in srcs}
    if len(feeds) != 1 or len(next(iter(feeds))) != 1:
        return None
    (q, how), = next(iter(feeds))
    if how != "round-robin" or {d.dst for d in graph.out_edges(q) if d.partitioner == how} != srcs:
        return None
    above = _path(job, graph, q)
    return None if above is None else _split(job, graph, rank, into[0].src, p, above)


def _split(job, graph, rank, src, partitioner, above):
    """The rows of `above` that `src`'s edges of `partitioner` send to `rank`."""
    dsts = [d.dst for d in graph.out_edges(src) if d.partitioner == partitioner and d.carries == INPUT]
    label, i, n = labeller(job, partitioner, len(dsts)), dsts.index(rank), len(dsts)

    def mine(rows, stream):
        here = (np.asarray(label.home(rows, stream, i, n), bool) if declared(label) else
                np.asarray(label(rows, stream, n), np.int64) == i)
        return here if above is _ALL else here & np.asarray(above(rows, stream), bool)
    return mine
