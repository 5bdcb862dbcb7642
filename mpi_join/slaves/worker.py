"""The shared worker lifecycle: everything a worker rank does that is not its strategy's join.
Its parts, each in a module of its own: inbox.py (per-link queues, the ordered merge), outbox.py
(credits, send to many), cuts.py (markers, channel state, restore), mover.py (unit moves),
recorder.py (results, metrics series, load reports). The Worker reads the graph and runs the loop.

A worker warms its module up, reports READY, then takes messages off the network as soon as
they arrive into one FIFO inbox per sending rank, and handles them one at a time:
- DATA goes to `module.on_data`; what it returns is applied: results are written (with their
  production delay), forwarded batches go to an outbox per downstream link, sent as credits
  allow. Each DATA message is acknowledged to its sender after it has been handled (a credit).
  While any outbox is waiting for credit, the worker takes nothing new from the driver (so
  backpressure reaches the source), but it keeps handling what other workers send (so a ring or
  a chain cannot deadlock on credits).
- Checkpoint markers (Chandy-Lamport, no pause): the first copy cuts the state (results flushed
  into committed files, `module.snapshot()`), and the marker goes out on every downstream link;
  DATA that arrives on a link before that link's own copy is saved as channel state. When every
  upstream link has delivered its copy, the rank file is complete and the driver is told.
- End of stream travels the input's path (`graph.ends`: a link ends once all that feeds it has); the driver ends the job with
  termination probes (sent and received DATA counts, four-counter method) and FIN. A worker
  leaves once it has FIN and every end-of-stream copy meant for it (graph.eos_links): one
  still in flight would be unmatched at MPI_Finalize.
A failing worker raises; ranks.py aborts the whole job with its rank and reason.
"""
import os

from ..runtime.graph import DRIVER
from ..runtime.headers import Ack, Ready
from ..join.jit import Compiles, freeze_heap
from ..runtime.protocol import (DataHeader, Eos, Fin, Install, LoadRequest, Marker, MoveOut, Probe, ProbeReply, Tag, decode_control)
from ..runtime.wire import pack_obj, unpack
from ..runtime.operator import carried
from ..runtime.routing import FirstEdges
from .cuts import Cuts, restore_worker, worker_state
from .inbox import Inbox
from .mover import Mover
from .outbox import Outbox
from .recorder import Recorder


def fault_spec(nranks=None):
    """MPI_JOIN_FAULT="rank:batch" makes that worker rank fail at its batch-th DATA message,
    counting from 0 (to see that a failing rank aborts the job). Returns (rank, batch) or None;
    a value that is set but not understood is refused, not ignored."""
    from ..errors import ConfigError
    spec = os.environ.get("MPI_JOIN_FAULT", "")
    if not spec:
        return None
    r, sep, e = spec.partition(":")
    if not (sep and r.strip().isdigit() and e.strip().isdigit()) or len(spec) > 40:
        raise ConfigError(f"MPI_JOIN_FAULT: expected RANK:BATCH (a worker rank and a batch number), got {spec[:40]!r}")
    rank, batch = int(r), int(e)
    if rank < 1 or (nranks is not None and rank >= nranks):
        hi = "" if nranks is None else f"..{nranks - 1}"
        raise ConfigError(f"MPI_JOIN_FAULT: rank {rank} is not a worker rank (workers are 1{hi}); got {spec!r}")
    return rank, batch


def injected_fault(rank):
    """The batch at which this rank fails on purpose (MPI_JOIN_FAULT), or -1."""
    f = fault_spec()
    return f[1] if f and f[0] == rank else -1


class Worker:
    def __init__(self, job, tx, graph, module, metrics, writer, resume=None):
        self.job, self.tx, self.graph, self.module, self.metrics = job, tx, graph, module, metrics
        self.rank, self.dtypes, self.writer = tx.rank, module.dtypes, writer
        self.up = graph.upstream(self.rank)
        self.link_dtypes = {src: carried(job, module, graph.carries(src, self.rank)) for src in self.up}
        self.sources = graph.sources if DRIVER in self.up else [DRIVER]
        self.inbox = Inbox(self.rank, graph.merged(self.rank), self.sources)
        for src in self.sources[1:]:
            self.link_dtypes[src] = self.link_dtypes[DRIVER]
        self.outbox = Outbox(tx, self.rank, graph.name, graph.downstream(self.rank), job.run.max_inflight, metrics)
        self.cuts = Cuts(self.rank, self.up, self.link_dtypes, module)
        self.mover = Mover(tx, self.rank, module, self.inbox)
        self.recorder = Recorder(tx, module, metrics, writer, module.buffer_capacity or max(
            1, job.run.max_inflight * job.run.batch_size // max(1, len(graph.workers))))
        self.received, self.eos_from = 0, set()     # DATA handled (termination counts); ended links
        self.eos_expected = {a for a, b in graph.eos_links() if b == self.rank}
        self.fin, self.fault = False, injected_fault(self.rank)
        self.first = FirstEdges(job, graph, self.rank)
        if resume:
            self.received, made = restore_worker(self, *resume)
            self._apply(made)

    # -- the loop ---------------------------------------------------------------------------
    def run(self):
        self.begin()
        msg = self.tx.recv()                  # the replay starts once every rank is ready
        self.start()
        while not self.deliver(*msg):
            msg = self.tx.recv()

    def begin(self, freeze=True):
        """Compile, freeze the heap (jit.freeze_heap; not where one process runs many ranks), READY."""
        self.module.warm_up()
        self.compiled, seconds = Compiles.mine()
        if freeze:
            freeze_heap()
        self.tx.send(DRIVER, Tag.READY, Ready(self.compiled, int(seconds * 1e6)).encode())

    def start(self):
        self.metrics.start_clock(self.tx), self.recorder.start()

    @property
    def finished(self):
        """FIN is in, and every end-of-stream copy meant for this rank (graph.eos_links)."""
        return self.fin and self.eos_expected <= self.eos_from

    def deliver(self, src, tag, buf):
        """One message in, and everything handled that can be now (`run` calls it for each message
        it receives; the in-process simulation, which owns the network, too). Returns True once
        the rank has ended: its DONE sent."""
        self._absorb(src, tag, buf)
        return self.work()

    def work(self):
        """Handle everything that can be handled now (what `deliver` does after taking its
        message in; the drain calls it after replaying channel state into the inbox)."""
        while not self.finished:
            self._pump()
            item = self.inbox.next(self._take_driver, self.module.next_order, self.eos_from)
            if item is None:
                return False
            self._handle(*item)
        self.outbox.pump()
        if self.outbox.waiting or self.outbox.in_flight():
            return False                      # acknowledgements still to come
        self.end()
        return True

    def end(self):
        """All sent and acknowledged (none in flight at MPI_Finalize): the final metrics to rank 0."""
        self.recorder.final(self.graph.role(self.rank), self.compiled)
        self.tx.send(DRIVER, Tag.DONE, pack_obj(self.metrics.to_dict(self.tx)))
        self.tx.flush()

    def _take_driver(self, item):
        """The driver's next item goes only while no outbox waits for credit (backpressure reaches
        the source), DATA only while the module accepts input, a checkpoint marker only while it is
        quiet, an Install only once its state is in."""
        if self.outbox.waiting or self.mover.blocks(item):
            return False
        if item[0] == "ctrl" and isinstance(item[1], Marker):
            return self.module.quiet()
        return item[0] != "data" or self.module.accepts_input()

    def _pump(self):
        while (msg := self.tx.poll()) is not None:
            self._absorb(*msg)
        self.outbox.pump()

    def _absorb(self, src, tag, buf):
        if tag == Tag.DATA:
            h, batches = unpack(buf, self.link_dtypes[src])
            self.inbox.data(src, DataHeader.decode(h), batches)
        elif tag == Tag.ACK:
            self.outbox.acked(src)
        elif tag == Tag.CTRL:
            msg = decode_control(buf)
            if isinstance(msg, (Probe, LoadRequest)) or (((isinstance(msg, MoveOut) and msg.part < 0)
                                                          or msg.op in self.module.urgent_ops)
                                                         and not self.inbox.marker_queued(src)):
                self._urgent(src, msg)
            else:
                self.inbox.ctrl(src, msg)
        elif tag == Tag.STATE:
            self.mover.state_in(buf)
        else:
            raise RuntimeError(f"worker {self.rank}: unexpected {tag.name} message from rank {src}")

    def _urgent(self, src, msg):
        if isinstance(msg, Probe):
            self.tx.send(DRIVER, Tag.CTRL, ProbeReply(msg.wave, self.outbox.sent, self.received).encode())
        elif isinstance(msg, MoveOut):
            self.mover.move_out(msg)
        elif isinstance(msg, LoadRequest):
            self.tx.send(DRIVER, Tag.CTRL, self.recorder.load_report(self.inbox.buffered).encode())
        else:
            self._apply(self.module.on_control(src, msg))

    def _handle(self, src, item):
        if item[0] == "data":
            self._data(src, *item[1:])
            return
        msg = item[1]
        if isinstance(msg, Marker):
            self._marker(src, msg)
        elif isinstance(msg, Eos):
            self._eos(src)
        elif isinstance(msg, MoveOut):
            self.mover.move_out(msg)             # it waited behind a marker
        elif isinstance(msg, Install):
            queued, header = self.mover.install(msg)
            self.metrics.count(tuples_in=sum(len(b) for b in queued))
            self._apply(self.module.on_data(DRIVER, header, queued))
            self.module.after_data(header)
            self.mover.installed(msg)
        elif isinstance(msg, Fin):
            self.fin = True
            self.tx.unwatch(DRIVER)           # no heartbeat after DONE: the driver leaves then
        else:
            self._apply(self.module.on_control(src, msg))

    # -- data -------------------------------------------------------------------------------
    def _data(self, sender, header, batches, ack):
        """A batch from `sender`; the input's, from whichever source, is the driver's to the module."""
        src = DRIVER if sender in self.sources else sender
        m = self.metrics
        n = sum(len(b) for b in batches)
        if m.epochs == self.fault:
            raise RuntimeError(f"fault injected at batch {m.epochs} (MPI_JOIN_FAULT)")
        self.cuts.record(src, header, batches)
        if src == DRIVER:
            self.mover.check(header, batches)
        m.count(tuples_in=n, epochs=1)
        self.received += 1
        self._apply(self.first.route(src, header, batches))    # on its way before the join (Edge.first)
        nres, delay = self._apply(self.module.on_data(src, header, batches))
        self.module.after_data(header)
        self.inbox.handled(sender, n)
        if src == DRIVER:
            self._pump()                         # occupancy at the end of the batch: what still waits
            self.recorder.occupied(self.inbox.buffered)
        if ack:
            self.tx.send(sender, Tag.ACK, Ack(header.msg_no, m.results, m.tuples_in).encode())
        self.recorder.handled(src, n, nres, delay)

    def _apply(self, out):
        """Carry out a module's Output; returns (results, mean production delay in ms)."""
        if out is None:
            return 0, None
        nres, delay = self.recorder.results(out.results)
        for dests, batches, bounds, body, order in out.forward:
            self.outbox.data(dests, bounds, body, order, batches)
        for snap in out.snapshots:
            self.writer.write_snapshot(*snap)
        for dest, msg in out.control:
            self.outbox.ctrl(dest, msg)
        self.outbox.pump()
        return nres, delay

    # -- end of stream ----------------------------------------------------------------------
    def _eos(self, src):
        self.eos_from.add(src)
        self._apply(self.module.on_eos(src))
        for d in self.graph.ends(self.rank, src, self.eos_from):
            self.outbox.ctrl(d, Eos())
        self.outbox.pump()

    # -- checkpoints ------------------------------------------------------------------------
    def _marker(self, src, m):
        began, done = self.cuts.marker(src, m, lambda: worker_state(self), self.inbox.part if src == DRIVER else None)
        if began:
            self.outbox.everywhere(m)
            self.outbox.pump()
        if done is not None:
            self.tx.send(DRIVER, Tag.CTRL, done.encode())
