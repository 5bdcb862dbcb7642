"""The old run's workers carried to rest: what a restore at another rank count starts from when a
strategy's state is in flight at a cut (a chain's forwarded batches and acknowledgements).

A checkpoint is a consistent cut: each worker's state, plus the messages on their way to it
(channel state). `drained` rebuilds the old graph's workers in this process from their files
and hands each the messages of its channel state, and every message those make in turn, each
link first in, first out, until none is left, with no more input: the state the old run would
have reached had the input paused at the cut. Every worker of the new run computes the same
(the schedule is fixed), so each can take its part of it; the results the drain makes are the
old run's results after the cut, which one worker writes (and an aggregate's snapshots, which
the worker that takes the old snapshots writes)."""
from collections import deque

from ..runtime.graph import DRIVER
from ..runtime.operator import Output, carried, old_graph
from ..strategies import get as strategy


class _Header:
    """What an operator reads of a DATA message's header."""
    __slots__ = ("bounds", "body", "order", "msg_no")

    def __init__(self, bounds, body, order):
        self.bounds, self.body, self.order, self.msg_no = tuple(bounds), body, order, -1


def reader(mods):
    """A `read` (Operator.restore_rescaled's) of drained operators: each one's state as its
    snapshot gives it, with no channel state left."""
    def read(r, keep, channel=None, state=None):
        arrays, attrs = mods[r].snapshot()
        arrays = {k: v for k, v in arrays.items() if keep(k)}
        return (arrays, attrs) if channel is None else (arrays, attrs, [])
    return read


def drained(op, read, old, sources=1):
    """(the old graph, {old rank: its operator, drained}, Output of the results the drain
    made). `op`: the new run's operator (job and dtypes); `read`: as Operator.restore_rescaled's;
    each old file is read with its own role's dtypes and links'; the input of several
    sources goes in as the driver's, in the order it was recorded (the part order the inbox
    merged it in)."""
    graph = old_graph(op, old, sources)
    info = strategy(op.job.strategy.name)
    mods, links = {}, {}
    for r in old:
        m = info.load_role(graph.vertex(r).role)(op.job, r, graph, op.dtypes)
        arrays, attrs, pending = read(r, lambda n: True, state=m.state_dtype, channel=lambda src, m=m, r=r: carried(
            op.job, m, graph.carries(DRIVER if src in graph.sources else src, r)))
        m.restore(arrays, attrs)
        mods[r] = m
        for src, header, batches in pending:
            src = DRIVER if src in graph.sources else src
            links.setdefault((src, r), deque()).append((_Header(header.bounds, header.body, header.order), batches))
    out = Output()
    while any(links.values()):
        # each link first in, first out; among links, the message of the lowest order first (a
        # merged edge's receiver takes its links in order, and a message makes none of lower order)
        _, src, dst = min((q[0][0].order, s, d) for (s, d), q in links.items() if q)
        header, batches = links[(src, dst)].popleft()
        made = mods[dst].on_data(src, header, batches)
        mods[dst].after_data(header)
        if made is None:
            continue
        if made.control:
            raise RuntimeError(f"rank {dst}: a drained operator made control records")
        out.results += made.results
        out.snapshots += made.snapshots
        for dests, bats, bounds, body, order in made.forward:
            for d in dests:
                if d == DRIVER or d not in mods:
                    raise RuntimeError(f"rank {dst}: a drained operator sent to rank {d}, not an old worker")
                links.setdefault((dst, d), deque()).append((_Header(bounds, body, order), bats))
    return graph, mods, out
