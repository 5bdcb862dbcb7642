"""The `hash` strategy's master: hash-partitioned mini-buffers drained to slaves every epoch,
reorganised by load (IV-B, IV-C, V).

Each distribution epoch, the tuples released by the source are hashed on their equi keys into
partitions (each partition is a partition group, the unit that moves); every slave receives,
in one message, the tuples of the groups it owns from both streams (one array per stream) and
the windows' expiry bounds. With sub-groups, the epoch is cut into `subgroups` slots and each
slot serves one sub-group of slaves, so the master holds about half as much at its peak. At
most `max_inflight` messages per slave are unacknowledged: a slow slave slows the master.

Every `reorganize_every` epochs the controller reads each slave's average buffer occupancy,
moves one group from each supplier to a consumer (state migration: the supplier's state mover
sends the group's windows, its buffered tuples and split information straight to the
consumer; the master holds the group's new tuples until both have acknowledged) and adjusts
the degree of declustering.
"""
import time

import numpy as np

from .. import checkpoint as ck
from ..errors import InputError
from ..partitioning import PartitionMap, Partitioner, group_rows
from ..transport import Credits, Tag, pack, pack_obj, unpack_obj
from . import controller
from .checkpointer import Checkpointer
from .source import Source


class HashMaster:
    def __init__(self, job, transport, arrays, metrics, progress, resume=None):
        self.job, self.tx, self.metrics, self.progress = job, transport, metrics, progress
        self.params = prm = job.strategy.params
        self.part = Partitioner(job, prm["partitions"])
        self.g = max(1, min(prm["subgroups"], transport.size - 1))
        self.source = Source(job, arrays, hasher=lambda a, i: self.part.hashes(self.part.keys(a, i)),
                             slots=self.g)
        self.slaves = list(range(1, transport.size))
        self.map = PartitionMap(self.part.n_partitions, self.slaves)
        self.active = list(self.slaves)
        self.credits = Credits(self.slaves, job.run.max_inflight)
        self.results = {s: 0 for s in self.slaves}
        self.acc = {s: ([], []) for s in self.slaves}      # routed, not yet sent (per slave)
        self.moving = {}                                   # partition -> migration in flight
        self.done = {}
        self.msg_no = 0
        self.epoch = 0
        self.slot = 0
        self.peak_buffer = 0
        self.rng = np.random.default_rng(prm["seed"])
        self.reorgs = 0
        self._reports = {}
        self._complete = []
        self.log = {"migrations": [], "deactivated": [], "activated": [], "occupancy": []}
        self.ckpt = Checkpointer(job, transport, self.slaves, transport.size)
        self.resumed_from = None
        if resume:
            self._restore(resume)
        self.ckpt.start_clock(self.source.released)

    def _restore(self, resume):
        """Continue from checkpoint `resume` (dir, id): input offset, epoch, map, active slaves."""
        arrays, state = ck.read_rank(resume["dir"], resume["id"], 0,
                                     lambda n: np.dtype(np.int64) if n == "partition_owner" else None)
        if len(arrays["partition_owner"]) != self.part.n_partitions:
            raise InputError(f"{ck.rank_file(resume['dir'], resume['id'], 0)}: partition map has "
                             f"{len(arrays['partition_owner'])} partitions, the job has {self.part.n_partitions}")
        self.map.owner = arrays["partition_owner"].astype(np.int64)
        self.active = state.get("active", self.active)
        self.source.seek(state["input_offset"])
        self.epoch = state["epoch"] + 1
        self.ckpt.next_id = resume["id"] + 1
        self.resumed_from = {"checkpoint": resume["id"], "input_offset": state["input_offset"]}

    # -- the main loop -------------------------------------------------------------------
    def run(self):
        for _ in self.slaves:            # the replay clock starts when every slave is ready
            self.tx.recv(tag=Tag.READY)
        self.progress.restart()
        self.t_replay = time.perf_counter()
        while not self.source.done:
            self._route(self.source.next_epoch())
            self.peak_buffer = max(self.peak_buffer, self._buffered_bytes())
            self._flush(self.active[self.slot % self.g::self.g])     # this slot's sub-group
            self.slot += 1
            if self.slot % self.g == 0:
                self._end_of_epoch()
            self._drain()
            self._finish_migrations()
            self.progress.update(self.source.released, sum(self.results.values()))
        self._flush(self.slaves)
        while self.moving:
            self._handle(*self.tx.recv())
            self._finish_migrations()
        for s in self.slaves:
            self.tx.send(s, Tag.EOS, pack([self.msg_no]))
        while len(self.done) < len(self.slaves):
            self._handle(*self.tx.recv())
        self.tx.flush()
        self.wall_s = time.perf_counter() - self.t_replay
        self.progress.update(self.source.released, sum(self.results.values()), force=True)
        self.progress.close()
        self.metrics.epochs = self.epoch
        self.metrics.extra.update(peak_buffer_bytes=self.peak_buffer, peak_inflight=max(self.credits.peak.values()),
                                  subgroups=self.g, reorganisations=self.reorgs, active_slaves=self.active,
                                  final_partitions={str(s): int((self.map.owner == s).sum()) for s in self.slaves},
                                  **self.log)
        return [self.done[s] for s in self.slaves]

    def _end_of_epoch(self):
        self.epoch += 1
        every = self.params["reorganize_every"]
        if every and self.epoch % every == 0 and not self.moving and not self.source.done:
            self._flush(self.slaves)
            self._reorganise()
        if self.ckpt.due(self.source.released) and not self.moving and not self.source.done:
            self._flush(self.slaves)
            self.ckpt.cut(self.epoch - 1, self.source.released, {"partition_owner": self.map.owner},
                          {"tuples_out": self.metrics.tuples_out, "active": self.active})

    # -- distribution --------------------------------------------------------------------
    def _route(self, batches):
        """Append each released tuple to its owner's mini-buffer (or the held tuples of a group
        that is moving)."""
        self.metrics.tuples_in += sum(len(b) for b in batches)
        for s_idx, b in enumerate(batches):
            parts = self.part.partitions(b["_h"])
            owner = self.map.owner[parts].copy()
            for p in self.moving:
                owner[parts == p] = -1 - p
            for o, rows in group_rows(b, owner):
                dest = self.acc[o] if o >= 0 else self.moving[-1 - o]["held"]
                dest[s_idx].append(rows)

    def _buffered_bytes(self):
        n = sum(x.nbytes for a in self.acc.values() for side in a for x in side)
        return n + sum(x.nbytes for m in self.moving.values() for side in m["held"] for x in side)

    def _flush(self, slaves):
        bounds = self.source.bounds()
        for s in slaves:
            parts = [_cat(side, dt) for side, dt in zip(self.acc[s], self._dtypes())]
            self.acc[s] = ([], [])
            self._send_data(s, parts, bounds)

    def _send_data(self, s, parts, bounds):
        # a consumer must keep what the held tuples of a group moving to it will need: its
        # bounds stay where they were when the move began until the held tuples reach it
        for m in self.moving.values():
            if m["to"] == s:
                bounds = np.minimum(bounds, m["bounds"])
        while self.credits.full(s):
            self._handle(*self.tx.recv())
        self.tx.send(s, Tag.DATA, pack([self.msg_no] + [int(b) for b in bounds], parts))
        self.msg_no += 1
        self.metrics.tuples_out += sum(len(p) for p in parts)
        self.credits.sent(s)

    def _dtypes(self):
        return [rt.dtype for rt in self.source.streams]

    def _drain(self):
        while (msg := self.tx.poll()) is not None:
            self._handle(*msg)

    # -- reorganisation ------------------------------------------------------------------
    def _reorganise(self):
        self.reorgs += 1
        for s in self.active:
            self.tx.send(s, Tag.CTRL, pack_obj({"kind": "report"}))
        self._reports = {}
        while len(self._reports) < len(self.active):
            self._handle(*self.tx.recv())
        occ = self._reports
        self.log["occupancy"].append({"epoch": self.epoch, **{str(s): round(o, 4) for s, o in occ.items()}})
        groups_of = {s: [int(p) for p in self.map.partitions_of(s)] for s in self.active}
        inactive = [s for s in self.slaves if s not in self.active]
        prm = self.params
        if prm["force"]:
            pl = controller.forced_plan(groups_of, self.active, inactive, self.rng, prm["force"], self.reorgs)
        else:
            pl = controller.plan(occ, groups_of, self.active, inactive, self.rng, prm["supply_threshold"],
                                 prm["consumer_threshold"], prm["rho"], prm["declustering"])
        for s in pl.activate:
            self.active.append(s)
            self.active.sort()
            self.log["activated"].append({"epoch": self.epoch, "slave": s})
        for p, src, dst in pl.moves:
            self._migrate(p, src, dst)
        for s in pl.deactivate:
            self.active.remove(s)
            self.log["deactivated"].append({"epoch": self.epoch, "slave": s})

    def _migrate(self, p, src, dst):
        """Start moving partition group p: the supplier sends its state to the consumer; the
        group's new tuples are held here until both acknowledge."""
        bounds = [int(x) for x in self.source.bounds()]
        self.moving[p] = {"from": src, "to": dst, "acks": set(), "held": ([], []), "epoch": self.epoch,
                          "bounds": np.array(bounds, np.int64)}
        self.tx.send(src, Tag.CTRL, pack_obj({"kind": "migrate_out", "p": p, "to": dst}))
        self.tx.send(dst, Tag.CTRL, pack_obj({"kind": "install", "p": p, "from": src, "bounds": bounds}))
        self.log["migrations"].append({"epoch": self.epoch, "group": p, "from": src, "to": dst})

    def _migrated(self, src, msg):
        m = self.moving[msg["p"]]
        m["acks"].add(msg["role"])
        if m["acks"] == {"supplier", "consumer"}:
            self._complete.append(msg["p"])

    def _finish_migrations(self):
        """Release the held tuples of groups whose move has been acknowledged. Called only
        between sends: a message to the consumer that is still being sent (waiting for credit)
        must not be overtaken by one whose bounds assume it has arrived."""
        while self._complete:
            p = self._complete.pop(0)
            m = self.moving.pop(p)
            self.map.owner[p] = m["to"]
            # the held tuples go out together with everything else routed to the consumer, so
            # the bounds in the message hold for all the tuples it has not seen yet
            to = m["to"]
            parts = [_cat(a + h, dt) for a, h, dt in zip(self.acc[to], m["held"], self._dtypes())]
            self.acc[to] = ([], [])
            self._send_data(to, parts, self.source.bounds())

    # -- messages from slaves ------------------------------------------------------------
    def _handle(self, src, tag, buf):
        if tag == Tag.ACK:
            self.credits.acked(src)
            self.results[src] = int(buf.view(np.int64)[1])
        elif tag == Tag.CTRL:
            msg = unpack_obj(buf)
            kind = msg.get("kind")
            if kind == "checkpoint_done":
                self.ckpt.on_ack(src, msg)
            elif kind == "report":
                self._reports[src] = msg["occupancy"]
            elif kind == "migrated":
                self._migrated(src, msg)
            else:
                raise RuntimeError(f"master: unknown control message from rank {src}: {kind!r}")
        elif tag == Tag.DONE:
            self.done[src] = unpack_obj(buf)
            self.results[src] = self.done[src]["results"]
        else:
            raise RuntimeError(f"master: unexpected message {tag.name} from rank {src}")


def _cat(chunks, dtype):
    if not chunks:
        return np.zeros(0, dtype)
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def route(batches, part, pmap):
    """Split one epoch's batches by owning slave: {slave: [batch of stream 0, batch of stream 1]},
    each batch still in seq order (the per-partition mini-buffers, merged per slave)."""
    out = {s: [b[:0] for b in batches] for s in pmap.slaves}
    for k, b in enumerate(batches):
        for s, rows in group_rows(b, pmap.owner[part.partitions(b["_h"])]):
            out[s][k] = rows
    return out
