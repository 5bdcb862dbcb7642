"""What a message is, apart from how it travels: one contiguous uint8 buffer made by `pack` (a
small int64 header followed by the raw bytes of any number of structured arrays, each padded to
8 bytes, read back zero-copy), small JSON control payloads, the per-link credits that bound
what is in flight, and the failure a rank learns of another. Both transports carry these: MPI
(transport.py) and the one process's (local.py)."""
import json

import numpy as np


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


class PeerFailed(Exception):
    """Another rank failed and is aborting the job (Tag.FAILED): rank 0 releases the run's locks
    and aborts the job with that rank's exit code. The failing rank has said why."""

    def __init__(self, rank, why, code):
        super().__init__(f"rank {rank} failed: {why}")
        self.code = int(code)


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
