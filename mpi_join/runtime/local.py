"""The transport of a run in one process (`mpi-join run JOB --local`): every rank is a thread,
and a message is handed from one thread's send to another's receive through memory (the
interface of transport_api.Transport, as the MPI transport).

It keeps what the ranks' code relies on from MPI: messages on one link (sender, receiver) are
received in the order sent; a receive takes the earliest waiting message that matches its
source and tag; a send never blocks (the senders' credits bound what is in flight). The buffer
is copied at the send, as MPI copies it, so a sender may reuse its buffer at once. A waiting
receive sleeps on a condition, spinning no core. There is no liveness: a rank that fails says
so (`Hub.fail`), and every other rank's next receive raises `PeerFailed`, as under MPI.
"""
import socket
import threading
import time
from collections import deque

from .memory import InProcess
from .protocol import Tag
from .wire import PeerFailed


class Hub:
    """The messages in flight between the `size` ranks of one process."""

    def __init__(self, size):
        self.size = size
        self.cond = threading.Condition()
        self.queues = [deque() for _ in range(size)]       # per receiver: (source, tag, buf)
        self.failed = None                                  # (rank, why, code)

    def transport(self, rank):
        return LocalTransport(self, rank)

    def fail(self, rank, why, code):
        """Rank `rank` failed: every other rank's receive raises PeerFailed from now on."""
        with self.cond:
            if self.failed is None:
                self.failed = (rank, why, code)
            self.cond.notify_all()


class LocalTransport(InProcess):
    """The calls of transport.Transport, for one rank (a thread) of a Hub."""
    live = None

    def __init__(self, hub, rank):
        self.hub, self.rank, self.size = hub, rank, hub.size
        self.hosts = [socket.gethostname()] * hub.size
        self.start_times()
        self.bytes_in = self.bytes_out = 0

    cpu = staticmethod(time.thread_time)        # a rank's CPU is its thread's

    def send(self, dest, tag, buf):
        buf = buf.copy()
        with self.hub.cond:
            self.hub.queues[dest].append((self.rank, int(tag), buf))
            self.hub.cond.notify_all()
        self.bytes_out += buf.nbytes

    def _take(self, source, tag):
        """The earliest waiting message from `source` with `tag` (None or negative: any); call
        with the hub's condition held."""
        f = self.hub.failed
        if f is not None and f[0] != self.rank:
            raise PeerFailed(f[0], f[1], f[2])
        q = self.hub.queues[self.rank]
        for i, (src, tg, buf) in enumerate(q):
            if (source is None or source < 0 or src == source) and (tag is None or tag < 0 or tg == int(tag)):
                del q[i]
                self.bytes_in += buf.nbytes
                return src, Tag(tg), buf
        return None

    def poll(self, source=None, tag=None):
        with self.hub.cond:
            return self._take(source, tag)

    def recv(self, source=None, tag=None, timeout=None):
        t0 = time.perf_counter()
        end = None if timeout is None else t0 + timeout
        with self.hub.cond:
            while (msg := self._take(source, tag)) is None:
                left = None if end is None else end - time.perf_counter()
                if left is not None and left <= 0:
                    break
                self.hub.cond.wait(left)
        self.idle_s += time.perf_counter() - t0
        return msg

    def host(self, rank):
        return self.hosts[rank]

    def pause(self, seconds):
        time.sleep(seconds)
