"""The `hash` strategy's master: per-partition mini-buffers drained to slaves every epoch.

Each distribution epoch, the tuples released by the source are hashed on their equi keys into
partitions; every slave receives, in one message, the tuples of the partitions it owns from
both streams (stream identity kept: one array per stream) and the windows' expiry bounds.
At most `max_inflight` epochs per slave are unacknowledged: a slow slave slows the master.
"""
import time

import numpy as np

from ..partitioning import PartitionMap, Partitioner
from ..transport import Credits, Tag, pack, unpack_obj
from .source import Source


class HashMaster:
    def __init__(self, job, transport, arrays, metrics, progress):
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
                self._handle(*self.tx.recv(tag=Tag.ACK))
            parts = per_slave[s]
            self.tx.send(s, Tag.DATA, pack(header, parts))
            self.metrics.tuples_out += sum(len(p) for p in parts)
            self.credits.sent(s)
        self.epoch += 1
        self.metrics.epochs = self.epoch
        while (msg := self.tx.poll(tag=Tag.ACK)) is not None:
            self._handle(*msg)

    def _handle(self, src, tag, buf):
        if tag == Tag.ACK:
            ack = buf.view(np.int64)
            self.credits.acked(src)
            self.results[src] = int(ack[1])
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
