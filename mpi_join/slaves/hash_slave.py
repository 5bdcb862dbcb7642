"""The `hash` strategy's slave: a join module plus a state mover behind one MPI loop.

Messages from the master are taken off the network as soon as they arrive and kept in the
slave's stream buffer (a queue of epochs). Its occupancy at the end of each epoch is the number
of tuples still waiting divided by the buffer's capacity (the same on every slave, by default
its share of what the master may have in flight: max_inflight x batch_size / slaves);
averaged over a reorganisation epoch, it is the load the master balances (a slave that keeps
up sees 0, one that falls behind approaches 1). Epochs and in-order
markers (checkpoint, install) are processed one at a time. Control that must not wait behind
the buffer is handled on arrival: load reports, and moving a partition group out (the state
mover takes the group's windows, its split information and its still-buffered tuples and sends
them straight to the consumer).
"""
import os
import time
from collections import deque

import numpy as np

from .. import checkpoint as ck
from ..partitioning import Partitioner
from ..transport import Tag, pack, pack_obj, unpack, unpack_obj
from ..window import runtime_dtype
from .hash_join import HashJoinModule
from .local_join import warm_up


def injected_fault(rank):
    """MPI_JOIN_FAULT="rank:epoch" makes that rank fail at its epoch-th epoch, counting from 0
    (to test that a failing rank aborts the job)."""
    spec = os.environ.get("MPI_JOIN_FAULT", "")
    r, _, e = spec.partition(":")
    return int(e) if r.strip() == str(rank) and e.strip().isdigit() else -1


def run_slave(job, tx, metrics, writer, resume=None):
    HashSlave(job, tx, metrics, writer, resume).run()


class HashSlave:
    def __init__(self, job, tx, metrics, writer, resume):
        self.job, self.tx, self.metrics, self.writer = job, tx, metrics, writer
        prm = job.strategy.params
        self.dtypes = [runtime_dtype(s.dtype) for s in job.streams]
        self.part = Partitioner(job, prm["partitions"])
        self.module = HashJoinModule(self.part, self.dtypes, prm["local_join"], prm["theta"], prm["block_size"])
        self.queue = deque()
        self.buffered = 0                  # tuples waiting in the buffer
        self.capacity = prm["buffer_capacity"] or max(1, job.run.max_inflight * job.run.batch_size // (tx.size - 1))
        self.occupancy = []
        self.states = {}
        self.slow = prm["slow_delay"] if prm["slow_rank"] == tx.rank else 0.0
        self.fault = injected_fault(tx.rank)
        self.series = {k: [] for k in ("msg", "tuples", "results", "delay_ms", "cpu_s", "idle_s", "comm_s",
                                       "window_tuples", "buckets", "occupancy")}
        self._last = (time.process_time(), tx.idle_s, tx.comm_s)
        if resume:
            arrays, state = ck.read_rank(resume["dir"], resume["id"], tx.rank, self.module.state_dtype)
            self.module.restore(arrays, state)
            metrics.results, metrics.tuples_in = state["results"], state["tuples_in"]
            writer.resume(state["files"])

    def run(self):
        warm_up(self.dtypes, len(self.part.key_cols[0]), self.job.strategy.params["local_join"])
        self.tx.send(0, Tag.READY, np.zeros(1, np.int64))
        while True:
            self._drain()
            if not self.queue:
                self._absorb(*self.tx.recv())
                continue
            item = self.queue.popleft()
            if item[0] == "eos":
                break
            if item[0] == "data":
                self._epoch(*item[1:])
                self._drain()            # occupancy at the end of the epoch: epochs still waiting
                self.occupancy.append(self._occupancy())
            else:
                self._in_order(item[1])
        self.writer.close()
        self.metrics.extra.update(window_tuples=self.module.window_tuples(), buckets=self.module.buckets(),
                                  series=self.series)
        self.tx.send(0, Tag.DONE, pack_obj(self.metrics.to_dict(self.tx)))
        self.tx.flush()

    # -- taking messages off the network -------------------------------------------------
    def _drain(self):
        while (msg := self.tx.poll()) is not None:
            self._absorb(*msg)

    def _absorb(self, src, tag, buf):
        if tag == Tag.DATA:
            header, batches = unpack(buf, self.dtypes)
            n = sum(len(b) for b in batches)
            self.queue.append(("data", int(header[0]), header[1:3].copy(), batches, n))
            self.buffered += n
        elif tag == Tag.CTRL:
            msg = unpack_obj(buf)
            if msg["kind"] == "report":
                occ = float(np.mean(self.occupancy)) if self.occupancy else self._occupancy()
                self.occupancy = []
                self.tx.send(0, Tag.CTRL, pack_obj({"kind": "report", "occupancy": occ}))
            elif msg["kind"] == "migrate_out":
                self._migrate_out(msg)
            else:
                self.queue.append(("ctrl", msg))
        elif tag == Tag.STATE:
            p, state = _unpack_state(buf, self.dtypes)
            self.states[p] = state
        elif tag == Tag.EOS:
            self.queue.append(("eos",))
        else:
            raise RuntimeError(f"slave: unexpected message {tag.name} from rank {src}")

    # -- processing, in order ------------------------------------------------------------
    def _epoch(self, msg_no, bounds, batches, n):
        m = self.metrics
        m.tuples_in += n
        if m.epochs == self.fault:
            raise RuntimeError(f"fault injected at epoch {m.epochs} (MPI_JOIN_FAULT)")
        if self.slow:                     # a slower node: extra seconds per 1000 tuples
            time.sleep(self.slow * n / 1000)
        nres, delay = self._join(bounds, batches)
        self.buffered -= n
        m.epochs += 1
        w0, w1 = self.module.window_tuples()
        self._record(msg_no, n, nres, delay, w0 + w1)
        self.tx.send(0, Tag.ACK, np.array([msg_no, m.results, m.tuples_in, w0, w1], np.int64))

    def _join(self, bounds, batches):
        """Join a batch, write its results; returns (results, mean production delay in ms)."""
        sa, sb, tin = self.module.on_epoch(bounds, batches)
        if not len(sa):
            return 0, None
        now = time.time_ns()
        lat = now - tin
        self.writer.add([sa, sb], np.full(len(sa), now, np.int64), lat)
        self.metrics.latency.add(lat)
        self.metrics.results += len(sa)
        return len(sa), float(lat.mean() / 1e6)

    def _occupancy(self):
        return min(1.0, self.buffered / self.capacity)

    def _record(self, msg_no, n, results, delay, window):
        cpu, idle, comm = time.process_time(), self.tx.idle_s, self.tx.comm_s
        c0, i0, k0 = self._last
        self._last = (cpu, idle, comm)
        for k, v in (("msg", msg_no), ("tuples", n), ("results", results), ("delay_ms", delay),
                     ("cpu_s", cpu - c0), ("idle_s", idle - i0), ("comm_s", comm - k0),
                     ("window_tuples", window), ("buckets", self.module.buckets()),
                     ("occupancy", self._occupancy())):
            self.series[k].append(v)

    def _in_order(self, msg):
        if msg["kind"] == "checkpoint":
            self._checkpoint(msg)
        elif msg["kind"] == "install":
            self._install(msg)
        else:
            raise RuntimeError(f"slave: unknown control message {msg['kind']!r}")

    def _checkpoint(self, msg):
        self.writer.flush()                        # results up to the cut are in committed files
        files = [os.path.basename(f) for f in self.writer.files]
        arrays, state = self.module.snapshot()
        m = self.metrics
        ck.write_rank(msg["dir"], msg["id"], self.tx.rank, arrays,
                      dict(state, epoch=msg["epoch"], results=m.results, tuples_in=m.tuples_in, files=files))
        self.tx.send(0, Tag.CTRL, pack_obj({"kind": "checkpoint_done", "id": msg["id"], "files": files,
                                            "results": m.results}))

    # -- state migration -----------------------------------------------------------------
    def _migrate_out(self, msg):
        """Supplier: send group p's windows, split information and buffered tuples to the consumer."""
        p = msg["p"]
        arrays, info = self.module.take_group(p)
        held = [[], []]
        for k in range(len(self.queue)):
            item = self.queue[k]
            if item[0] != "data":
                continue
            _, msg_no, bounds, batches, n = item
            keep = []
            for s, b in enumerate(batches):
                mine = self.part.partitions(b["_h"]) == p
                held[s].append(b[mine])
                keep.append(b[~mine])
            moved = n - sum(len(b) for b in keep)
            self.buffered -= moved
            self.queue[k] = ("data", msg_no, bounds, keep, n - moved)
        buffered = [np.concatenate(h) if h else np.zeros(0, dt) for h, dt in zip(held, self.dtypes)]
        self.tx.send(msg["to"], Tag.STATE, _pack_state(p, arrays, info, buffered, self.dtypes))
        self.tx.send(0, Tag.CTRL, pack_obj({"kind": "migrated", "p": p, "role": "supplier"}))

    def _install(self, msg):
        """Consumer: wait for the supplier's state, install it, join its buffered tuples."""
        p = msg["p"]
        while p not in self.states:
            self._drain()
            if p not in self.states:
                self._absorb(*self.tx.recv())
        arrays, info, buffered = self.states.pop(p)
        self.module.put_group(p, arrays, info)
        self._join(np.array(msg["bounds"], np.int64), buffered)
        self.tx.send(0, Tag.CTRL, pack_obj({"kind": "migrated", "p": p, "role": "consumer"}))


def _pack_state(p, arrays, info, buffered, dtypes):
    """One STATE message: header [p, global depth, buckets, depths..., directory...], then each
    bucket's two windows, then the buffered tuples of both streams."""
    nb = len(info["depths"])
    header = [p, info["global_depth"], nb] + list(info["depths"]) + list(info["directory"])
    wins = [arrays.get(f"{b}/{s}", np.zeros(0, dtypes[s])) for b in range(nb) for s in (0, 1)]
    return pack(header, wins + buffered)


def _unpack_state(buf, dtypes):
    header, _ = unpack(buf, [])
    p, gd, nb = int(header[0]), int(header[1]), int(header[2])
    depths = header[3:3 + nb].tolist()
    directory = header[3 + nb:].tolist()
    _, arrs = unpack(buf, [dtypes[s] for _ in range(nb) for s in (0, 1)] + list(dtypes))
    arrays = {f"{b}/{s}": arrs[2 * b + s] for b in range(nb) for s in (0, 1)}
    return p, (arrays, {"global_depth": gd, "directory": directory, "depths": depths}, arrs[2 * nb:])
