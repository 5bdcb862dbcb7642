"""The shared driver lifecycle (rank 0): replay, credits, checkpoints, end of stream and finish.

The driver owns everything a strategy's routing does not: it waits until every worker is READY,
replays the input through the source an epoch at a time and hands each batch to the operator of
rank 0's vertex (operator.Operator, fed by the source: `on_data(SOURCE, ...)`), which decides
where tuples go and returns them in an Output; the outlet sends it (outlet.py: at most
`max_inflight` unacknowledged DATA messages per entry link; while waiting, the driver keeps
handling what workers send). At epoch ends it cuts checkpoints (markers on every entry link; the
workers forward them along the graph) and lets the router adapt. At the end of the input it
sends end-of-stream, detects termination with probes (the four-counter method: two waves with the
same counts, DATA sent equal to DATA handled) and tells every worker to finish.
"""
import sys
import time
from dataclasses import dataclass

import numpy as np

from ..runtime.headers import Ack, Ready
from ..runtime.protocol import (CutSent, DataHeader, Eos, Go, LoadReport, MarkerDone, Moved,
                                ProbeReply, Tag, decode_control)
from ..join.jit import Compiles, GcPauses, freeze_heap
from ..runtime.operator import SOURCE
from ..storage.staged import staged_manifest
from ..runtime.wire import unpack_obj
from .checkpointer import Checkpointer, restore_lone, resume_driver
from .calls import OperatorCalls
from .coordinator import Coordinator
from .moves import Moves
from .outlet import Outlet
from .pace import Pace
from .parts import Parts
from .source import Source
from .termination import end_run, recv_or_stall
from ..join.window import runtime_dtype


@dataclass(frozen=True)
class RunReport:
    """What a finished replay tells ranks.py: the workers' final metrics, the replay's wall time
    (all ranks ready to the last report) and start, where a resumed run began, the checkpoints
    completed, and the router's notes for the summary."""
    workers: list
    wall_s: float
    t_replay: float
    resumed_from: dict | None
    checkpoints: list
    notes: list


def await_ready(tx, workers):
    """The replay clock starts when every worker is ready; say what they compiled before it."""
    compiled = list(Compiles.mine())
    for _ in workers:
        _, _, buf = tx.recv(tag=Tag.READY)
        ready = Ready.read(buf.view(np.int64))
        compiled = [compiled[0] + ready.compiled, max(compiled[1], ready.compile_us / 1e6)]
    if compiled[0]:
        sys.stderr.write(f"mpi-join: compiled {compiled[0]} numba kernels for this job before the replay "
                         f"({compiled[1]:.1f} s; not in the compile cache yet, or UDFs, which are compiled "
                         f"every run)\n")


class Driver:
    decides = True                     # rank 0 decides cuts and changes; an extra source (feeder.py) does not

    def __init__(self, job, tx, graph, router_cls, metrics, progress, resume=None, follow=False, arrays=None):
        """`router_cls`: the operator of rank 0's vertex; `arrays`: replay these in-memory streams
        instead of the staged input (the simulation)."""
        self.job, self.tx, self.graph, self.metrics, self.progress = job, tx, graph, metrics, progress
        self.workers = graph.others        # the ranks rank 0 runs the job with (extra sources too)
        self.entries, self.sources = graph.entries(), graph.sources
        self.router = router_cls(job, 0, graph, [runtime_dtype(s.dtype, len(job.streams)) for s in job.streams])
        man = self.manifest = staged_manifest(job) if arrays is None else None
        counts = [man["streams"][s.name]["count"] for s in job.streams] if man else None
        self.source = Source(job, annotate=self.router.annotate, slots=self.router.slots, counts=counts, man=man,
                             follow=follow, arrays=arrays, share=(self.sources.index(tx.rank), len(self.sources)))
        self.calls = OperatorCalls(self.router, lambda out: self.out.apply(out))    # one call at a time (calls.py)
        self.moves = Moves(graph, self.source, self.calls, self.router.unit_of, lambda dest, msg: self.out.control(dest, msg),
                           self.wait, lambda: bool(self.ckpt.pending))      # state moving between workers (moves.py)
        # several sources: credit for a whole part on each link, so every source sends its next
        # part while the entries take another's (they buffer at most k - 1 parts)
        per_part = -(-self.source.part_rows // self.source.batch_size) if self.source.k > 1 else 0
        self.out = Outlet(tx, self.entries, max(job.run.max_inflight, per_part), self.moves, self.source, metrics,
                          lambda: self._handle(*self._recv()))
        self.control = self.out.control    # the lifecycle's records (parts, moves, termination)
        self.pace = Pace(job.run)          # overload at a set rate (pace.py)
        self.results = {w: 0 for w in self.workers}
        self.epoch, self.done, self.probes = 0, {}, {}     # epochs ended; DONE by rank; wave -> ProbeReply by rank
        self.ckpt = Checkpointer(job, tx, self.entries, graph.workers, tx.size, sources=self.sources,
                                 part_rows=self.source.part_rows, decides=self.decides)
        self.parts = Parts(self.source, self.sources, tx.rank, self.entries, self.moves, self.calls, self.control,
                           self.wait, self._marked, lambda at: self.ckpt.cut(    # several sources (parts.py)
                               self.epoch - 1, at, {}, {"tuples_out": self.metrics.tuples_out},
                               sum(self.results.values())), job.checkpoint.dir if job.checkpoint else None)
        # what rank 0's operator may ask of the job (a feeder's decides nothing: feeder.py)
        self.coordinator = Coordinator(self.source, self.moves, self.parts, self.control, self.out.apply, self.out.pump,
                                       decides=self.decides)
        self.router.connect(self.coordinator)
        self.sources_sent, self.resumed_from = {}, None     # a resumed run's: each extra source's DATA count at the cut
        from ..storage.lone_rows import LoneRows, finality
        rule = finality(job)
        if self.decides and rule is not None and arrays is None:    # its places cannot tell a lone tuple: rank 0 counts
            self.ckpt.count_lone_rows(LoneRows(job, by_time=rule == "time"))
        if resume:
            r = resume_driver(self.router, self.source, graph, tx.size, *resume)
            self.sources_sent, self.epoch, self.resumed_from = r.sources_sent, r.epoch, r.resumed_from
            self.ckpt.resumed(resume[1], resume[0])
            if self.ckpt.lone is not None:
                restore_lone(self.ckpt.lone, resume[0], resume[1])
            self.out.resumed(r.sent)
            self.parts.start_at(r.lease)
            self.metrics.record(tuples_out=r.tuples_out)
        self.ckpt.start_clock(self.source.released)

    def wait(self, ready):
        """Handle incoming messages until `ready()` holds (a stall stops the job: recv_or_stall)."""
        while not ready():
            self._handle(*self._recv())

    def _recv(self):
        return recv_or_stall(self.tx, self.workers, self.job.run.liveness_timeout_s or None)

    def _idle(self):
        """While a followed log has nothing new: handle messages, finish moves, show progress,
        and commit what was joined since the last cut once a commit is due."""
        self.drain()
        self.moves.finish()
        if self.ckpt.commit_due(self.source.released, sum(self.results.values())) and not self.moves.on:
            self._cut()
        self.progress.expect(self.source.total)
        self.progress.update(self.source.released, sum(self.results.values()))

    def drain(self):
        while (msg := self.tx.poll()) is not None:
            self._handle(*msg)

    # -- the lifecycle ----------------------------------------------------------------------
    def warm_up(self):
        for k, dt in enumerate(self.source.dtypes):     # compile what annotating runs
            self.router.annotate(np.zeros(2, dt), k)
        self.router.warm_up()

    def run(self, freeze=True):
        self.warm_up()
        await_ready(self.tx, self.workers)
        for r in self.sources[1:]:
            self.control(r, Go(self.source.origin, self.sources_sent.get(str(r), 0), self.parts.lease))
        self.compiled_at_start = Compiles.mine()[0]
        if freeze:                        # not in a process that runs many ranks (the simulation)
            freeze_heap()
        self.progress.restart(self.source.released)
        self.t_replay = time.perf_counter()
        self.metrics.start_clock(self.tx)
        released_at = self.replay()
        self._settle()
        end_run(self)
        self.wall_s = time.perf_counter() - self.t_replay
        self.progress.update(self.source.released, sum(self.results.values()), force=True)
        self.progress.close()
        return run_report(self, released_at)

    def replay(self):
        """Release the input an epoch at a time through rank 0's operator until it ends; returns
        (tuples released, s) samples for the summary."""
        slots, slot = self.router.slots, 0
        # (tuples released, s): 20 samples; a followed log's length is not known in advance
        released_at = [(self.source.released, 0.0)]
        step = max(1, self.source.total // 20) if self.source.tail is None else 1 << 16
        while not self.source.done:
            if not self.source.wait_for_input(self._idle):
                continue
            if self.source.at_part_start:
                self.parts.start(self.source.part)
                if self.source.done:
                    break
            self.progress.expect(self.source.total)
            batches = self.source.next_epoch()
            self.pace.check(self.source, self.t_replay)
            self.metrics.count(tuples_in=sum(len(b) for b in batches))
            if self.source.released >= len(released_at) * step:
                released_at.append((self.source.released, round(time.perf_counter() - self.t_replay, 4)))
            header = DataHeader(self.source.batch_no, tuple(self.source.bounds()), None, slot % slots, self.moves.epoch)
            self.calls("on_data", SOURCE, header, batches)
            slot += 1
            if slot % slots == 0:
                self.epoch += 1
                if self.ckpt.due(cut_offset(self), sum(self.results.values())) and not self.source.done:
                    self._cut()
                if self.coordinator.decides:
                    self.calls("end_of_epoch", self.epoch)
                    self.parts.place()
            if self.source.part_done():
                self.parts.end()
            self.drain()
            self.moves.finish()
            self.progress.update(self.source.released, sum(self.results.values()))
        return released_at

    def _marked(self, cid):
        """Rank 0's marker is out: its router's state and DATA count at the cut go with it."""
        arrays, attrs = self.router.snapshot()
        p = self.ckpt.pending[cid]
        p["arrays"] = {f"router/{k}": v for k, v in arrays.items()}
        p["attrs"]["router"] = attrs
        self.ckpt.marked(cid, 0, self.out.sent)

    def finish_input(self):
        """The input is all sent: end of stream on every entry link; with several sources, what
        was placed past this source's last part goes out before it (and the others may go to
        the end)."""
        if len(self.sources) > 1:
            self.parts.at(None)
            if self.tx.rank == self.sources[0]:
                self.parts.grant(1 << 62)
        for e in self.entries:
            self.control(e, Eos())

    def _cut(self):
        """A consistent cut after this epoch: everything routed so far is sent, nothing is moving.
        With several sources, at the first part no source has started (the lease): each puts the
        marker out there (Parts.cut), rank 0 too."""
        if self.source.tail is not None:      # a followed log: the part files read so far hold the cut's offset
            self.ckpt.record_input(self.source.tail.records)
        if len(self.sources) > 1:
            self.parts.cut()
            return
        self._settle()
        arrays, attrs = self.router.snapshot()
        self.ckpt.cut(self.epoch - 1, self.source.released, {f"router/{k}": v for k, v in arrays.items()},
                      {"router": attrs, "tuples_out": self.metrics.tuples_out, "sent": self.out.sent},
                      sum(self.results.values()))

    def _settle(self):
        """Send everything the router holds and wait until nothing it started (a migration) is
        moving; the second flush sends what the router released while it settled. With several
        sources each part's end flushed it (Parts.end): nothing may follow the last PartEnd."""
        if self.source.k > 1:
            return
        self.calls("flush")
        self.wait(lambda: self.moves.finish() or (not self.moves.on and self.router.quiet()))
        self.calls("flush")

    # -- messages from workers --------------------------------------------------------------
    def _handle(self, src, tag, buf):
        if tag == Tag.ACK:
            self.out.credits.acked(src)
            self.results[src] = Ack.read(buf.view(np.int64)).results
        elif tag == Tag.CTRL:
            msg = decode_control(buf)
            if isinstance(msg, MarkerDone):
                self.ckpt.on_ack(src, msg)
            elif isinstance(msg, Moved):
                self.moves.acked(msg)
            elif isinstance(msg, ProbeReply):
                self.probes.setdefault(msg.wave, {})[src] = msg
            elif isinstance(msg, CutSent):
                self.ckpt.marked(msg.id, src, msg.sent)
            elif isinstance(msg, LoadReport):
                self.coordinator.on_load(src, msg)
            elif not self.coordinator.on_answer(src, msg):     # an answer it waits for, or an event
                self.calls.post("on_control", src, msg)
        elif tag == Tag.DONE:
            self.done[src] = unpack_obj(buf)
            self.tx.unwatch(src)
            self.results[src] = self.done[src]["results"]
        else:
            raise RuntimeError(f"driver: unexpected {tag.name} message from rank {src}")


def run_report(d, released_at):
    """The run's report (RunReport) from driver `d` at its end, rank 0's figures in its metrics."""
    d.metrics.record(epochs=d.epoch)
    d.metrics.extra.update(compiled_during_replay=Compiles.mine()[0] - d.compiled_at_start, **GcPauses.stats(),
                           peak_inflight=max(d.out.credits.peak.values(), default=0), topology=d.graph.name,
                           released_at=released_at, overloaded=d.pace.overloaded,
                           max_lag_s=round(d.pace.max_lag, 4), released_own=d.source.own, **d.router.stats())
    joiners = [d.done[w] for w in d.graph.workers]        # the extra sources join nothing
    return RunReport(workers=[d.done[w] for w in d.workers], wall_s=d.wall_s, t_replay=d.t_replay,
                     resumed_from=d.resumed_from, checkpoints=d.ckpt.completed, notes=d.router.report(joiners))


def cut_offset(d):
    """Where a cut driver `d` made now would be: the input released so far, or with several
    sources the first part none has started (Parts.cut), so that cuts are spaced by
    checkpoint.every_tuples where they are placed, not where rank 0 decided them."""
    if len(d.sources) > 1:
        return min(d.parts.lease * d.source.part_rows, d.source.total)
    return d.source.released
