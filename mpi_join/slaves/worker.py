"""The shared worker lifecycle: everything a worker rank does that is not its strategy's join.

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
A failing worker raises; runtime.py aborts the whole job with its rank and reason.
"""
import os
import time
from collections import deque

import numpy as np
from numpy.lib.format import descr_to_dtype, dtype_to_descr

from .. import checkpoint as ck
from ..kernels import Compiles, GcPauses, freeze_heap
from ..headers import Ack, Ready, UnitState
from ..protocol import (DataHeader, Eos, Fin, Install, LoadReport, LoadRequest, Marker, MarkerDone, Moved, MoveOut,
                        Probe, ProbeReply, Tag, decode_control)
from ..results import result_dtype
from ..graph import DRIVER, INPUT, RESULTS
from ..transport import Credits, pack, pack_obj, unpack, unpack_obj


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


class Cut:
    """A checkpoint in progress on this rank: the open rank file and the links still recording."""

    def __init__(self, marker, waiting):
        self.marker = marker
        self.waiting = set(waiting)
        self.channel = []                  # (src, header ints, batches) recorded after the cut
        self.arrays, self.attrs = {}, {}


class Worker:
    def __init__(self, job, tx, graph, module, metrics, writer, resume=None):
        self.job, self.tx, self.graph, self.module = job, tx, graph, module
        self.metrics, self.writer = metrics, writer
        self.rank = tx.rank
        self.dtypes = module.dtypes
        self.up = graph.upstream(self.rank)
        self.link_dtypes = {src: self._carried(graph.carries(src, self.rank)) for src in self.up}
        self.merged = graph.merged(self.rank)
        self.watermark = {src: -(1 << 62) for src in self.merged}   # last order each merged link brought
        self.down = graph.downstream(self.rank)
        self.inbox = {}                             # src -> deque of items
        self.outbox = {d: deque() for d in self.down}
        self.credits = Credits(self.down, job.run.max_inflight)
        self.msg_no = 0                             # DATA messages this rank made (a fan-out is one)
        self.sent = 0                               # DATA to other workers (termination counts)
        self.received = 0                           # DATA handled, from anyone
        self.buffered = 0                           # driver tuples waiting in the inbox
        self.capacity = module.buffer_capacity or max(
            1, job.run.max_inflight * job.run.batch_size // max(1, len(graph.workers)))
        self.occupancy = []
        self.load_mark = (time.perf_counter(), time.process_time(), 0)
        self.eos_from = set()
        self.eos_expected = {a for a, b in graph.eos_links() if b == self.rank}
        self.cut = None
        self.arrived = {}                           # unit -> moved state here, its Install not yet handled
        self.moved_out = {}                         # unit -> routing epoch it left this rank at
        self.fin = False
        self.fault = injected_fault(self.rank)
        self.series = {k: [] for k in ("t", "src", "tuples", "results", "delay_ms", "cpu_s", "idle_s", "comm_s",
                                       "window_tuples", "occupancy")}
        self._last = (time.process_time(), tx.idle_s, tx.comm_s)
        self.memory = StateMemory(module)
        if resume:
            self._restore(*resume)

    # -- the loop ---------------------------------------------------------------------------
    def run(self):
        self.module.warm_up()
        compiled = Compiles.count
        freeze_heap()
        self.tx.send(DRIVER, Tag.READY, Ready(compiled, int(Compiles.seconds * 1e6)).encode())
        first = self.tx.recv()                # the replay starts once every rank is ready
        self.metrics.start_clock(self.tx)
        self.load_mark = (time.perf_counter(), time.process_time(), self.metrics.tuples_in)
        self._last = (time.process_time(), self.tx.idle_s, self.tx.comm_s)
        self._absorb(*first)
        while not (self.fin and self.eos_expected <= self.eos_from):
            self._pump()
            item = self._next()
            if item is None:
                self._absorb(*self.tx.recv())
                continue
            self._handle(*item)
        self._pump_out(final=True)
        while any(self.credits.out.values()):     # acknowledgements of the last DATA may still be
            self._absorb_acks()                    # on their way; MPI_Finalize must not find them
        files = self.writer.close()
        self.metrics.extra.update(result_files=len(files), result_parts=self.writer.file_records(),
                                  snapshot_parts=self.writer.snapshot_records(), compiled_during_replay=Compiles.count - compiled,
                                  **GcPauses.stats(),
                                  series=self.series, role=self.graph.role(self.rank), **self.module.stats(),
                                  **self.memory.summary())
        self.metrics.role = self.graph.role(self.rank)
        self.tx.send(DRIVER, Tag.DONE, pack_obj(self.metrics.to_dict(self.tx)))
        self.tx.flush()

    # -- moving a unit of state (driver.move) ------------------------------------------------
    def _move_out(self, msg):
        """The unit's holder, on MoveOut: take it out of the module, with the rows of it that
        wait in the driver's queue, and send both to the new holder in one STATE message."""
        arrays, attrs = self.module.take(msg.unit)
        names = sorted(arrays)
        queued = self._take_queued(msg.unit)
        meta = {"names": names, "dtypes": [dtype_to_descr(arrays[n].dtype) for n in names], "attrs": attrs}
        parts = [pack_obj(meta)] + [np.ascontiguousarray(arrays[n]) for n in names] + queued
        self.tx.send(msg.to, Tag.STATE, pack(UnitState(msg.unit, msg.epoch).encode(), parts))
        self.moved_out[msg.unit] = msg.epoch
        self.tx.send(DRIVER, Tag.CTRL, Moved(msg.unit, "out").encode())

    def _take_queued(self, unit):
        """Remove the rows of `unit` from the driver's queued (not yet handled) DATA; one array
        per stream, in seq order."""
        taken = [[] for _ in self.dtypes]
        q = self.inbox.get(DRIVER, ())
        for k, item in enumerate(q):
            if item[0] != "data":
                continue
            _, header, batches, ack = item
            keep = []
            for s, b in enumerate(batches):
                mine = self.module.unit_of(b) == unit if len(b) else np.zeros(0, bool)
                taken[s].append(b[mine])
                keep.append(b[~mine])
                self.buffered -= int(mine.sum())
            q[k] = ("data", header, keep, ack)
        return [np.concatenate(t) if t else np.zeros(0, dt) for t, dt in zip(taken, self.dtypes)]

    def _state_in(self, buf):
        """A STATE message: keep it until its Install is next in the driver's queue."""
        h = UnitState.read(unpack(buf, [])[0])
        meta = unpack_obj(unpack(buf, [np.uint8])[1][0])
        dts = [descr_to_dtype(d) for d in meta["dtypes"]]
        parts = unpack(buf, [np.uint8] + dts + list(self.dtypes))[1]
        arrays = dict(zip(meta["names"], parts[1:1 + len(dts)]))
        self.arrived[h.unit] = (arrays, meta["attrs"], parts[1 + len(dts):])

    def _install(self, msg):
        """The new holder, in order on the driver's link once the state is here: put it into
        the module, join the rows that were queued at the old holder, tell the driver."""
        arrays, attrs, queued = self.arrived.pop(msg.unit)
        self.module.put(msg.unit, arrays, attrs)
        self.moved_out.pop(msg.unit, None)
        n = sum(len(b) for b in queued)
        self.metrics.tuples_in += n
        self._apply(self.module.on_data(DRIVER, DataHeader(-1, msg.bounds, None, -1, msg.epoch), queued))
        self.tx.send(DRIVER, Tag.CTRL, Moved(msg.unit, "in").encode())

    def _carried(self, kind):
        """dtypes of the arrays a DATA message on a link of this kind holds (graph.carries)."""
        if kind == INPUT:
            return self.dtypes
        if kind == RESULTS:
            return [result_dtype(self.job.stream_names)]
        return self.module.link_dtypes(kind)

    def _pump(self):
        while (msg := self.tx.poll()) is not None:
            self._absorb(*msg)
        self._pump_out()

    def _next(self):
        """The next item to handle: other workers' first (never blocked; merged links through
        the ordered merge), the driver's only while no outbox waits for credit and, for DATA,
        while the module accepts input."""
        for src, q in self.inbox.items():
            if q and src != DRIVER and src not in self.merged:
                return src, q.popleft()
        if self.merged:
            item = self._merged_next()
            if item is not None:
                return item
        q = self.inbox.get(DRIVER)
        if q and not any(self.outbox.values()) and (q[0][0] != "data" or self.module.accepts_input()):
            if q[0][0] == "ctrl" and isinstance(q[0][1], Install) and q[0][1].unit not in self.arrived:
                return None                  # the driver's DATA behind it waits for the unit's state
            return DRIVER, q.popleft()
        return None

    def _merged_next(self):
        """The ordered merge of the module's merged links (graph.Edge.merge)."""
        heads = {}
        for src in self.merged:
            q = self.inbox.get(src)
            if q:
                if q[0][0] != "data":
                    return src, q.popleft()
                heads[src] = q[0][1].order
        if not heads:
            return None
        src = min(heads, key=lambda s: (heads[s], s))
        if heads[src] == self.module.next_order():
            return src, self.inbox[src].popleft()     # dense orders: nothing can come before it
        for other in self.merged:
            if other not in heads and other not in self.eos_from and self.watermark[other] < heads[src]:
                return None                 # `other` may still bring a batch that comes first
        return src, self.inbox[src].popleft()

    def _absorb(self, src, tag, buf):
        if tag == Tag.DATA:
            h, batches = unpack(buf, self.link_dtypes[src])
            header = DataHeader.decode(h)
            if src in self.merged:
                if header.order < self.watermark[src]:
                    raise RuntimeError(f"worker {self.rank}: link from rank {src} went back in order "
                                       f"({header.order} after {self.watermark[src]}); a merged link's "
                                       f"order must not decrease")
                self.watermark[src] = header.order
            n = sum(len(b) for b in batches)
            if src == DRIVER:
                self.buffered += n
            self.inbox.setdefault(src, deque()).append(("data", header, batches, True))
        elif tag == Tag.ACK:
            self.credits.acked(src)
        elif tag == Tag.CTRL:
            msg = decode_control(buf)
            if isinstance(msg, (Probe, LoadRequest)) or ((isinstance(msg, MoveOut) or msg.op in self.module.urgent_ops)
                                                         and not self._marker_queued(src)):
                self._urgent(src, msg)
            else:
                self.inbox.setdefault(src, deque()).append(("ctrl", msg))
        elif tag == Tag.STATE:
            self._state_in(buf)
        else:
            raise RuntimeError(f"worker {self.rank}: unexpected {tag.name} message from rank {src}")

    def _marker_queued(self, src):
        """Is a checkpoint marker from `src` still queued? A module's urgent operation (moving
        state away) must not overtake it: the state would leave before the cut records it and
        arrive after the receiver's cut, in neither snapshot. Behind a marker it waits its turn."""
        return any(item[0] == "ctrl" and isinstance(item[1], Marker) for item in self.inbox.get(src, ()))

    def _urgent(self, src, msg):
        if isinstance(msg, Probe):
            self.tx.send(DRIVER, Tag.CTRL, ProbeReply(msg.wave, self.sent, self.received).encode())
        elif isinstance(msg, MoveOut):
            self._move_out(msg)
        elif isinstance(msg, LoadRequest):
            self.tx.send(DRIVER, Tag.CTRL, self._load_report().encode())
        else:
            self._apply(self.module.on_control(src, msg, self))

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
            self._move_out(msg)                  # it waited behind a marker
        elif isinstance(msg, Install):
            self._install(msg)
        elif isinstance(msg, Fin):
            self.fin = True
            self.tx.unwatch(DRIVER)           # no heartbeat after DONE: the driver leaves then
        else:
            self._apply(self.module.on_control(src, msg, self))

    # -- data -------------------------------------------------------------------------------
    def _data(self, src, header, batches, ack):
        m = self.metrics
        n = sum(len(b) for b in batches)
        if m.epochs == self.fault:
            raise RuntimeError(f"fault injected at batch {m.epochs} (MPI_JOIN_FAULT)")
        if self.cut is not None and src in self.cut.waiting:
            self.cut.channel.append((src, header.encode(), [b.copy() for b in batches]))
        if self.moved_out and src == DRIVER:
            self._check_moved(header, batches)
        m.tuples_in += n
        m.epochs += 1
        self.received += 1
        first = self.graph.first(self.rank, src)
        if first:                                # on its way before the join (graph.Edge.first)
            self._send_data(first, DataHeader(self.msg_no, header.bounds, header.body, header.order), batches)
            self.msg_no += 1
            self._pump_out()
        out = self.module.on_data(src, header, batches)
        nres, delay = self._apply(out)
        if src == DRIVER:
            self.buffered -= n
            self._pump()                         # occupancy at the end of the batch: what still waits
            self.occupancy.append(min(1.0, self.buffered / self.capacity))
        if ack:
            self.tx.send(src, Tag.ACK, Ack(header.msg_no, m.results, m.tuples_in).encode())
        self._record(src, n, nres, delay)

    def _check_moved(self, header, batches):
        """A unit moved away at routing epoch e gets no rows routed at e or later (the driver
        holds them): a protocol error if it does, not a silent double."""
        gone = np.array(sorted(u for u, e in self.moved_out.items() if header.epoch >= e), np.int64)
        for b in batches:
            if len(b) and len(gone):
                units = self.module.unit_of(b)
                stray = np.isin(units, gone)
                if stray.any():
                    u = int(units[stray][0])
                    raise RuntimeError(f"worker {self.rank}: rows of unit {u} routed at epoch {header.epoch}, "
                                       f"after it moved away at epoch {self.moved_out[u]}")

    def _apply(self, out):
        """Carry out a module's Output; returns (results, mean production delay in ms)."""
        if out is None:
            return 0, None
        nres, lat_sum = 0, 0.0
        if out.results:
            now = time.time_ns()
            for seqs, tin in out.results:
                lat = now - tin
                self.writer.add(list(seqs), np.full(len(tin), now, np.int64), lat)
                self.metrics.latency.add(lat)
                nres += len(tin)
                lat_sum += float(lat.sum())
            self.metrics.results += nres
        for dests, batches, bounds, body, order in out.forward:
            self._send_data(dests, DataHeader(self.msg_no, bounds, body, order), batches)
            self.msg_no += 1
        for snap in out.snapshots:
            self.writer.write_snapshot(*snap)
        for dest, msg in out.control:
            if dest in self.outbox:
                self.outbox[dest].append(("ctrl", msg))
            else:
                self.tx.send(dest, Tag.CTRL, msg.encode())
        self._pump_out()
        return nres, (lat_sum / nres / 1e6 if nres else None)

    def _send_data(self, dests, header, batches):
        """Queue one DATA message for each of `dests`, packed once: every copy is the same buffer."""
        for dest in dests:
            if dest not in self.outbox:
                raise RuntimeError(f"worker {self.rank}: rank {dest} is not downstream of it in the "
                                   f"{self.graph.name} graph (downstream: {self.down})")
        buf, n = pack(header.encode(), batches), sum(len(b) for b in batches)
        for dest in dests:
            self.outbox[dest].append(("data", buf))
            self.sent += 1
            self.metrics.tuples_out += n

    def _pump_out(self, final=False):
        """Send what the outboxes hold, in order, as far as credits allow."""
        for dest, q in self.outbox.items():
            while q:
                kind, *rest = q[0]
                if kind == "data":
                    if self.credits.full(dest):
                        if not final:
                            break
                        while self.credits.full(dest):
                            self._absorb_acks()
                    self.tx.send(dest, Tag.DATA, rest[0])
                    self.credits.sent(dest)
                else:
                    self.tx.send(dest, Tag.CTRL, rest[0].encode())
                q.popleft()

    def _absorb_acks(self):
        src, tag, buf = self.tx.recv()
        self._absorb(src, tag, buf)

    # -- end of stream ----------------------------------------------------------------------
    def _eos(self, src):
        self.eos_from.add(src)
        self._apply(self.module.on_eos(src))
        for d in self.graph.ends(self.rank, src, self.eos_from):
            self.outbox[d].append(("ctrl", Eos()))
        self._pump_out()

    # -- checkpoints ------------------------------------------------------------------------
    def _marker(self, src, m):
        if self.cut is None or self.cut.marker.id != m.id:
            if self.cut is not None:
                raise RuntimeError(f"worker {self.rank}: checkpoint {m.id} began before {self.cut.marker.id} ended")
            self.writer.flush(wait=True)     # results up to the cut are in committed files, on disk
            arrays, attrs = self.module.snapshot()
            cut = Cut(m, [u for u in self.up if u != src])
            cut.arrays = {f"module/{k}": np.array(v, copy=True) for k, v in arrays.items()}
            cut.attrs = {"module": attrs, "epoch": m.epoch, "results": self.metrics.results,
                         "tuples_in": self.metrics.tuples_in, "sent": self.sent, "received": self.received,
                         "file_records": self.writer.file_records(),
                         "snapshot_records": self.writer.snapshot_records()}
            self.cut = cut
            for d in self.down:
                self.outbox[d].append(("ctrl", m))
            self._pump_out()
        else:
            self.cut.waiting.discard(src)
        if not self.cut.waiting:
            self._finish_cut()

    def _finish_cut(self):
        c, self.cut = self.cut, None
        arrays = dict(c.arrays)
        chan = []
        for k, (src, header, batches) in enumerate(c.channel):
            arrays[f"channel/{k}/header"] = np.asarray(header, np.int64)
            for s, b in enumerate(batches):
                arrays[f"channel/{k}/{s}"] = b
            chan.append(src)
        digest = ck.write_rank(c.marker.dir, c.marker.id, self.rank, arrays, dict(c.attrs, channel=chan), c.marker.cut)
        self.tx.send(DRIVER, Tag.CTRL, MarkerDone(c.marker.id, tuple(c.attrs["file_records"]), digest,
                                                          tuple(c.attrs["snapshot_records"])).encode())

    def _state_dtype(self, name, attrs):
        parts = name.split("/")
        if parts[0] == "module":
            return self.module.state_dtype("/".join(parts[1:]))
        if parts[0] == "channel" and len(parts) == 3:
            if parts[2] == "header":
                return np.dtype(np.int64)
            dts = self.link_dtypes.get(attrs["channel"][int(parts[1])], ())
            return dts[int(parts[2])] if int(parts[2]) < len(dts) else None
        return None

    def _restore(self, root, cid):
        arrays, attrs = ck.read_rank(root, cid, self.rank, self._state_dtype, manifest="auto")
        self.module.restore({k[7:]: v for k, v in arrays.items() if k.startswith("module/")}, attrs["module"])
        m = self.metrics
        m.results, m.tuples_in = attrs["results"], attrs["tuples_in"]
        self.sent, self.received = attrs["sent"], attrs["received"]
        self.writer.resume(attrs["file_records"], attrs["snapshot_records"])
        for k, src in enumerate(attrs.get("channel", [])):   # replay the recorded channel state, unacknowledged
            header = DataHeader.decode(arrays[f"channel/{k}/header"])
            batches = [arrays.get(f"channel/{k}/{s}", np.zeros(0, dt)) for s, dt in enumerate(self.link_dtypes[src])]
            self.inbox.setdefault(src, deque()).append(("data", header, batches, False))

    # -- load and metrics -------------------------------------------------------------------
    def _load_report(self):
        wall0, cpu0, n0 = self.load_mark
        wall, cpu = time.perf_counter(), time.process_time()
        busy = (cpu - cpu0) / max(wall - wall0, 1e-9)
        occ = float(np.mean(self.occupancy)) if self.occupancy else min(1.0, self.buffered / self.capacity)
        self.occupancy = []
        self.load_mark = (wall, cpu, self.metrics.tuples_in)
        return LoadReport(occ, min(1.0, busy), self.metrics.tuples_in - n0,
                          state_bytes=int(self.module.stats().get("state_bytes", 0)))

    def _record(self, src, n, results, delay):
        cpu, idle, comm = time.process_time(), self.tx.idle_s, self.tx.comm_s
        c0, i0, k0 = self._last
        self._last = (cpu, idle, comm)
        occ = self.occupancy[-1] if src == DRIVER and self.occupancy else None
        for k, v in (("t", round(self.metrics.wall_s(), 4)), ("src", src), ("tuples", n), ("results", results),
                     ("delay_ms", delay),
                     ("cpu_s", cpu - c0), ("idle_s", idle - i0), ("comm_s", comm - k0),
                     ("window_tuples", self.module.stats()["window_tuples"]), ("occupancy", occ)):
            self.series[k].append(v)
        self.memory.sample()


class StateMemory:
    """The module's window state in bytes (spare capacity and indexes included) when the raw
    bytes of the tuples it held were at their peak (the windows at their fullest): the ratio of
    the two is the memory overhead the benchmarks report. Sampled at most every `every_s` (a
    footprint walks every bucket)."""

    def __init__(self, module, every_s=0.02):
        self.module, self.every_s = module, every_s
        self.t = 0.0
        self.peak = (0, 0)

    def sample(self):
        now = time.perf_counter()
        if now - self.t < self.every_s:
            return
        self.t = now
        held, raw = self.module.footprint()
        if raw > self.peak[1]:
            self.peak = (int(held), int(raw))

    def summary(self):
        self.t = 0.0
        self.sample()
        held, raw = self.peak
        return {"peak_state_bytes": held, "raw_bytes_at_peak": raw}
