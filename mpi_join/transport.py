"""The one transport: numpy buffers over mpi4py's uppercase calls, tagged by message kind.

Waiting never spins a core: receives poll with Iprobe and back off (sleeping up to 2 ms), so
ranks can outnumber cores. Sends are nonblocking and their buffers are kept until complete.
Tags and message kinds are in protocol.py. A message is one contiguous uint8 buffer made by `pack`: a small int64 header followed by the
raw bytes of any number of structured arrays (each padded to 8 bytes), read back zero-copy.
"""
import json
import time

import numpy as np
from mpi4py import MPI

from .protocol import Tag


_MAX_SLEEP = 0.002
_MIN_SLEEP = 0.00002


def pack(header, arrays=()):
    """One uint8 buffer: [n_header, n_arrays, nbytes_0..] [header] [array bytes, 8-aligned]."""
    header = np.asarray(header, np.int64)
    sizes = [a.nbytes for a in arrays]
    pads = [(-s) % 8 for s in sizes]
    meta = np.array([len(header), len(arrays)] + sizes, np.int64)
    total = meta.nbytes + header.nbytes + sum(sizes) + sum(pads)
    buf = np.empty(total, np.uint8)
    o = 0
    for part in (meta, header):
        buf[o:o + part.nbytes] = part.view(np.uint8)
        o += part.nbytes
    for a, s, p in zip(arrays, sizes, pads):
        if s:
            buf[o:o + s] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
        o += s + p
    return buf


def unpack(buf, dtypes):
    """Inverse of pack: (header int64 array, [arrays of the given dtypes]) as views of buf."""
    nh, na = buf[:16].view(np.int64)
    sizes = buf[16:16 + 8 * na].view(np.int64)
    o = 16 + 8 * na
    header = buf[o:o + 8 * nh].view(np.int64)
    o += 8 * nh
    out = []
    for s, dt in zip(sizes, dtypes):
        out.append(buf[o:o + s].view(dt))
        o += int(s) + (-int(s)) % 8
    return header, out


def pack_obj(obj):
    """Small control payloads (metrics, errors) as JSON bytes; never used for tuples."""
    return np.frombuffer(json.dumps(obj).encode(), np.uint8).copy()


def unpack_obj(buf):
    return json.loads(bytes(buf).decode())


class Transport:
    """Point-to-point messaging for one rank, with idle and communication time accounted."""

    def __init__(self, comm=None):
        self.comm = comm or MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._pending = []          # (request, buffer) of unfinished sends
        self.idle_s = 0.0           # waiting with nothing to receive
        self.comm_s = 0.0           # inside send/receive calls that move data
        self.bytes_out = 0
        self.bytes_in = 0
        self._status = MPI.Status()

    def send(self, dest, tag, buf):
        t = time.perf_counter()
        req = self.comm.Isend([buf, MPI.BYTE], dest=dest, tag=int(tag))
        self._pending.append((req, buf))
        self.bytes_out += buf.nbytes
        if len(self._pending) > 64:
            self._reap()
        self.comm_s += time.perf_counter() - t

    def _reap(self):
        self._pending = [(r, b) for r, b in self._pending if not r.Test()]

    def poll(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):
        """A waiting message as (source, tag, buffer), or None at once."""
        if self._pending:
            self._reap()
        if not self.comm.Iprobe(source=source, tag=tag, status=self._status):
            return None
        t = time.perf_counter()
        src, tg, n = self._status.Get_source(), self._status.Get_tag(), self._status.Get_count(MPI.BYTE)
        buf = np.empty(n, np.uint8)
        self.comm.Recv([buf, MPI.BYTE], source=src, tag=tg)
        self.bytes_in += n
        self.comm_s += time.perf_counter() - t
        return src, Tag(tg), buf

    def recv(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):
        """Wait for a message without spinning a core (poll, then sleep with backoff)."""
        msg = self.poll(source, tag)
        if msg is not None:
            return msg
        t0 = time.perf_counter()
        sleep = _MIN_SLEEP
        while True:
            time.sleep(sleep)
            msg = self.poll(source, tag)
            if msg is not None:
                self.idle_s += time.perf_counter() - t0
                return msg
            sleep = min(sleep * 2, _MAX_SLEEP)

    def flush(self):
        """Wait until every send has completed (before exiting or reusing buffers)."""
        t0 = time.perf_counter()
        sleep = _MIN_SLEEP
        while self._pending:
            self._reap()
            if self._pending:
                time.sleep(sleep)
                sleep = min(sleep * 2, _MAX_SLEEP)
        self.idle_s += time.perf_counter() - t0


class Credits:
    """Bounded in-flight messages per peer: beyond `limit` unacknowledged messages to a peer,
    the sender must wait for an acknowledgement (backpressure instead of unbounded buffers)."""

    def __init__(self, peers, limit):
        self.limit = int(limit)
        self.out = {p: 0 for p in peers}
        self.peak = {p: 0 for p in peers}

    def full(self, peer):
        return self.out[peer] >= self.limit

    def sent(self, peer):
        self.out[peer] += 1
        self.peak[peer] = max(self.peak[peer], self.out[peer])

    def acked(self, peer):
        if self.out[peer] <= 0:
            raise RuntimeError(f"acknowledgement from rank {peer} without a message in flight")
        self.out[peer] -= 1
