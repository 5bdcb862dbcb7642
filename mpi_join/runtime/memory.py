"""Ranks of one process over in-memory links, stepped by whoever owns the network (no threads):
each link (sender, receiver) first in, first out, as MPI's; which link delivers next is a seeded
random choice (`seed`: tests/sim.py runs whole strategies so, every interleaving a seed away), or
with no seed always the first link in (sender, receiver) order, a fixed schedule (drain.py runs a
checkpoint's old graph to rest so: every worker of the new run computes the same). A delivery is
`Worker.deliver`, the step a rank takes per message under MPI, so the inbox, ordered merge and
credits are the production code. MemTransport implements transport_api.Transport."""
import time
from collections import deque

import numpy as np

from .protocol import Tag


class Network:
    def __init__(self, size, seed=None):
        self.size = size
        self.rng = None if seed is None else np.random.default_rng(seed)
        self.links = {}                  # (src, dst) -> deque of (tag, buf)
        self.workers = {}                # rank -> Worker: those the network delivers to

    def send(self, src, dst, tag, buf):
        self.links.setdefault((src, dst), deque()).append((tag, buf))       # senders never reuse a buffer

    def _pick(self, ready):
        return ready[self.rng.integers(len(ready))] if self.rng is not None else min(ready)

    def for_rank0(self, tag=None):
        ready = [k for k, q in self.links.items() if k[1] == 0 and q and (tag is None or q[0][0] == tag)]
        if not ready:
            return None
        src = self._pick(ready)[0]
        t, buf = self.links[(src, 0)].popleft()
        return src, t, buf

    def step(self):
        """Deliver one message to a worker; False if none is waiting."""
        ready = [k for k, q in self.links.items() if k[1] in self.workers and q]
        if not ready:
            return False
        src, dst = self._pick(ready)
        tag, buf = self.links[(src, dst)].popleft()
        self.workers[dst].deliver(src, Tag(tag), buf)
        return True


class InProcess:
    """What a transport of ranks in one process does not do: liveness (a failing rank says so
    itself) and sends to complete (a send is done when it returns)."""

    def idle_for(self, peers):
        return None

    def flush(self):
        pass

    def close(self):
        pass

    def enable_liveness(self, timeout_s):
        pass

    watch = unwatch = stop_beating = lambda self, peer: None

    def start_times(self):
        self.idle_s = self.comm_s = 0.0


class MemWriter:
    """A worker's writer in memory: each result's seqs and the arrival time it carried (its
    emission time less its delay), and the aggregate snapshots (into the list `snapshots`)."""

    def __init__(self, snapshots=None):
        self.results, self.snapshots = [], [] if snapshots is None else snapshots

    def add(self, seqs, t_ns, lat):
        if len(seqs[0]):
            self.results.append((tuple(seqs), np.asarray(t_ns, np.int64) - np.asarray(lat, np.int64)))

    def write_snapshot(self, *snap):
        self.snapshots.append(snap)

    def flush(self, wait=False):
        pass

    def close(self):
        return []

    next_number = 0

    def file_records(self):
        return []

    new_records = snapshot_records = file_records


class MemTransport(InProcess):
    """The transport calls the runtime makes, in memory (no liveness: one process). Rank 0 takes
    its messages itself (recv steps the others meanwhile); workers are handed theirs."""
    idle_s = comm_s = 0.0
    bytes_in = bytes_out = 0
    hosts = ["memory"]
    cpu = staticmethod(time.thread_time)

    def __init__(self, net, rank):
        self.net, self.rank, self.size = net, rank, net.size

    def send(self, dest, tag, buf):
        self.net.send(self.rank, dest, int(tag), buf)

    def poll(self, source=None, tag=None):
        return self.net.for_rank0() if self.rank == 0 else None

    def recv(self, source=None, tag=None, timeout=None):
        assert self.rank == 0, "workers are handed their messages (Worker.deliver)"
        while (msg := self.net.for_rank0(None if tag is None else int(tag))) is None:
            if not self.net.step():
                raise RuntimeError("in-memory network: rank 0 waits for a message and nothing is in flight")
        return msg[0], Tag(msg[1]), msg[2]

    def pause(self, seconds):
        """The others move on while rank 0 waits: every message in flight among the workers is
        delivered, instead of a sleep that would change nothing."""
        while self.net.step():
            pass

    def host(self, rank):
        return "memory"
