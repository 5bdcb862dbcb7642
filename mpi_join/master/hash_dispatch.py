"""The `hash` strategy's master: per-partition mini-buffers drained to slaves every epoch.

Each distribution epoch, the tuples released by the source are hashed on their equi keys into
partitions; every slave receives, in one message, the tuples of the partitions it owns from
both streams (stream identity kept: one array per stream) and the windows' expiry bounds.
At most `max_inflight` epochs per slave are unacknowledged: a slow slave slows the master.
"""
import time

import numpy as np

from .. import checkpoint as ck
from ..errors import InputError
from ..partitioning import PartitionMap, Partitioner
from .checkpointer import Checkpointer
from ..transport import Credits, Tag, pack, unpack_obj
from .source import Source


class HashMaster:
    def __init__(self, job, transport, arrays, metrics, progress, resume=None):
        self.job, self.tx, self.metrics, self.progress = job, transport, metrics, progress
        self.part = Partitioner(job, job.strategy.params["partitions"])
        self.source = Source(job, arrays, hasher=lambda a, i: self.part.hashes(self.part.keys(a, i)))
        self.slaves = list(range(1, transport.size))
        self.map = PartitionMap(self.part.n_partitions, self.slaves)
        self.credits = Credits(self.slaves, job.run.max_inflight)
        self.results = {s: 0 for s in self.slaves}
        self.done = {}
        self.epoch = 0
        self.peak_buffer = 0
        self.ckpt = Checkpointer(job, transport, self.slaves, transport.size)
        self.resumed_from = None
        if resume:
            self._restore(resume)
        self.ckpt.start_clock(self.source.released)

    def _restore(self, resume):
        """Continue from checkpoint `resume` (dir, id, manifest): input offset, epoch, partition map."""
        arrays, state = ck.read_rank(resume["dir"], resume["id"], 0, {"partition_owner": np.dtype(np.int64)})
        if len(arrays["partition_owner"]) != self.part.n_partitions:
            raise InputError(f"{ck.rank_file(resume['dir'], resume['id'], 0)}: partition map has "
                             f"{len(arrays['partition_owner'])} partitions, the job has {self.part.n_partitions}")
        self.map.owner = arrays["partition_owner"].astype(np.int64)
        self.source.seek(state["input_offset"])
        self.epoch = state["epoch"] + 1
        self.ckpt.next_id = resume["id"] + 1
        self.resumed_from = {"checkpoint": resume["id"], "input_offset": state["input_offset"]}

    def run(self):
        for _ in self.slaves:            # the replay clock starts when every slave is ready
            self.tx.recv(tag=Tag.READY)
        self.progress.restart()
        self.t_replay = time.perf_counter()
        while not self.source.done:
            batches = self.source.next_epoch()
            self.metrics.tuples_in += sum(len(b) for b in batches)
            self.peak_buffer = max(self.peak_buffer, sum(b.nbytes for b in batches))
            self.distribute(batches, self.source.bounds())
            if self.ckpt.due(self.source.released) and not self.source.done:
                self.ckpt.cut(self.epoch - 1, self.source.released, {"partition_owner": self.map.owner},
                              {"tuples_out": self.metrics.tuples_out})
            self.progress.update(self.source.released, sum(self.results.values()))
        for s in self.slaves:
            self.tx.send(s, Tag.EOS, pack([self.epoch]))
        while len(self.done) < len(self.slaves):
            self._handle(*self.tx.recv())
        self.tx.flush()
        self.wall_s = time.perf_counter() - self.t_replay
        self.progress.update(self.source.released, sum(self.results.values()), force=True)
        self.progress.close()
        self.metrics.extra["peak_buffer_bytes"] = self.peak_buffer
        self.metrics.extra["peak_inflight"] = max(self.credits.peak.values())
        return [self.done[s] for s in self.slaves]

    def distribute(self, batches, bounds):
        per_slave = route(batches, self.part, self.map)
        header = [self.epoch] + list(bounds)
        for s in self.slaves:
            while self.credits.full(s):
                self._handle(*self.tx.recv())
            parts = per_slave[s]
            self.tx.send(s, Tag.DATA, pack(header, parts))
            self.metrics.tuples_out += sum(len(p) for p in parts)
            self.credits.sent(s)
        self.epoch += 1
        self.metrics.epochs = self.epoch
        while (msg := self.tx.poll()) is not None:
            self._handle(*msg)

    def _handle(self, src, tag, buf):
        if tag == Tag.ACK:
            ack = buf.view(np.int64)
            self.credits.acked(src)
            self.results[src] = int(ack[1])
        elif tag == Tag.CTRL:
            msg = unpack_obj(buf)
            if msg.get("kind") != "checkpoint_done":
                raise RuntimeError(f"master: unknown control message from rank {src}: {msg.get('kind')!r}")
            self.ckpt.on_ack(src, msg)
        elif tag == Tag.DONE:
            self.done[src] = unpack_obj(buf)
            self.results[src] = self.done[src]["results"]
        else:
            raise RuntimeError(f"master: unexpected message {tag.name} from rank {src}")


def route(batches, part, pmap):
    """Split one epoch's batches by owning slave: {slave: [batch of stream 0, batch of stream 1]},
    each batch still in seq order (the per-partition mini-buffers, merged per slave)."""
    out = {s: [] for s in pmap.slaves}
    for b in batches:
        owner = pmap.owner[part.partitions(b["_h"])]
        order = np.argsort(owner, kind="stable")
        b, owner = b[order], owner[order]
        cuts = np.searchsorted(owner, pmap.slaves + [pmap.slaves[-1] + 1])
        for k, s in enumerate(pmap.slaves):
            out[s].append(b[cuts[k]:cuts[k + 1]])
    return out
