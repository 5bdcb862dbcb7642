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
from ..runtime.graph import DRIVER
from ..runtime.operator import Output, carried, old_graph
from ..strategies import get as strategy


def reader(mods):
    """A `read` (Operator.restore_rescaled's) of drained operators: each one's state as its
    snapshot gives it, with no channel state left."""
    def read(r, keep, channel=None, state=None):
        arrays, attrs = mods[r].snapshot()
        arrays = {k: v for k, v in arrays.items() if keep(k)}
        return (arrays, attrs) if channel is None else (arrays, attrs, [])
    return read


def drained(op, read, old, worker, sources=1):
    """(the old graph, {old rank: its operator, drained}, Output of the results the drain
    made). `op`: the new run's operator (job and dtypes); `read`: as Operator.restore_rescaled's;
    each old file is read with its own role's dtypes and links'. The old workers are real
    Workers (`worker`, slaves/worker.Worker, given: it imports the restore that calls this; its
    inboxes, ordered merges and credits) over the in-memory
    network with its fixed schedule (memory.py), each one's channel state replayed into its
    inbox as a restore replays it (the input of several sources as the driver's, in the order
    it was recorded), then stepped until no message is left; a merge that holds batches for a
    link that may bring a lesser order then lets them go in order (nothing more comes), and the
    network is stepped again, until nothing is held."""
    from ..runtime.memory import MemTransport, MemWriter, Network
    from ..runtime.metrics import RankMetrics
    graph = old_graph(op, old, sources)
    info = strategy(op.job.strategy.name)
    net, made = Network(graph.size), MemWriter()
    for r in old:
        m = info.load_role(graph.vertex(r).role)(op.job, r, graph, op.dtypes)
        arrays, attrs, pending = read(r, lambda n: True, state=m.state_dtype, channel=lambda src, m=m, r=r: carried(
            op.job, m, graph.carries(DRIVER if src in graph.sources else src, r)))
        m.restore(arrays, attrs)
        w = worker(op.job, MemTransport(net, r), graph, m, RankMetrics(r, graph.role(r)), made)
        for src, header, batches in pending:       # unacknowledged: the senders counted them already
            w.inbox.data(DRIVER if src in graph.sources else src, header, batches, ack=False)
        net.workers[r] = w
    for w in net.workers.values():
        w.work()
    while True:
        while net.step():
            pass
        held = [w for w in net.workers.values() if w.inbox.holds_merged()]
        if not held:
            break
        for w in held:          # the network at rest: no link brings a lesser order, the merges go on
            w.inbox.at_rest(w.work)
    if any(q for (_, dst), q in net.links.items() if dst not in net.workers):
        raise RuntimeError(f"rank {op.rank}: a drained worker sent to rank 0 or to a rank that is not an old worker")
    return graph, {r: w.module for r, w in net.workers.items()}, Output(results=made.results, snapshots=made.snapshots)
