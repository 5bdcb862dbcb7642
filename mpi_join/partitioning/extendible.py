"""Fine tuning of one partition group with extendible hashing (Fagin et al.), as in Section IV-D.

A group's windows (both streams) are split into buckets ("mini partition groups"). A directory
of 2**global_depth entries maps the low global_depth bits of a tuple's bucket hash to a bucket;
a bucket of local depth l is pointed to by the 2**(global_depth - l) entries that share its low
l bits. A bucket above theta blocks splits (doubling the directory first when its local depth
equals the global depth); a bucket below theta/2 merges with its buddy when both have the same
local depth and together stay under theta. Equal keys always share a bucket, so each bucket
joins on its own, and a smaller bucket means a shorter block nested loop.
"""
import numpy as np

from ..join.predicate import mix64
from .hashing import group_rows
from ..join.window import Window, footprint

_SALT = np.uint64(0x5851F42D4C957F2D)


def bucket_hash(h):
    """Bits for the directory, independent of the bits that chose the partition."""
    return mix64(np.asarray(h, np.uint64) ^ _SALT)


class Bucket:
    """A bucket's store: anything with `windows` (two window.Window), `load(rows0, rows1)`
    (append without joining), `expire(bounds)`, `snapshot(prefix)` and `restore(arrays, prefix)` -- the local
    join's windows and index (local_join.BinaryJoin), or bare windows."""
    __slots__ = ("depth", "store", "windows")

    def __init__(self, depth, make_store):
        self.depth = depth
        self.store = make_store()
        self.windows = self.store.windows

    def __len__(self):
        return sum(len(w) for w in self.windows)


class _Windows:
    """A bucket store of bare windows (no index)."""

    def __init__(self, dtypes):
        self.windows = [Window(dt) for dt in dtypes]

    def footprint(self):
        return footprint(*self.windows)

    def hashes(self, rows, s):
        return rows["_h"]

    def load(self, *rows):
        for w, r in zip(self.windows, rows):
            w.append(r)

    def expire(self, bounds):
        for w, bound in zip(self.windows, bounds):
            w.expire(bound)

    def snapshot(self, prefix):
        return {f"{prefix}/{s}": w.view() for s, w in enumerate(self.windows)}

    def restore(self, arrays, prefix):
        self.load(*[arrays.get(f"{prefix}/{s}", np.zeros(0, w.dtype)) for s, w in enumerate(self.windows)])


class ExtendibleGroup:
    """A partition group's windows, split into buckets by extendible hashing.

    theta: bucket size limit in blocks (0 disables fine tuning: one bucket, never split);
    block_bytes: block size; max_depth bounds the directory (2**max_depth entries)."""

    def __init__(self, dtypes, theta=0, block_bytes=4096, max_depth=12, make_store=None):
        self.dtypes = dtypes
        self.make_store = make_store or (lambda: _Windows(dtypes))
        self.theta = theta
        self.per_block = [max(1, block_bytes // dt.itemsize) for dt in dtypes]
        self.max_depth = max_depth
        self.global_depth = 0
        self.directory = [Bucket(0, self.make_store)]

    # -- structure ---------------------------------------------------------------------
    def buckets(self):
        """Distinct buckets, each once, in order of their first directory entry."""
        seen, out = set(), []
        for b in self.directory:
            if id(b) not in seen:
                seen.add(id(b))
                out.append(b)
        return out

    def blocks(self, b):
        return sum(-(-len(w) // pb) for w, pb in zip(b.windows, self.per_block))

    def __len__(self):
        return sum(len(b) for b in self.buckets())

    def hashes(self, rows, s):
        """Stream s's key hash of each row (a store of an index join derives it: BinaryJoin.hashes)."""
        return self.directory[0].store.hashes(rows, s)

    def route(self, batch, s=0):
        """Split a batch of stream s (in seq order) by bucket: [(bucket, rows)], rows keep seq order."""
        if len(self.directory) == 1:
            return [(self.directory[0], batch)]
        bs = self.buckets()
        number = {id(b): k for k, b in enumerate(bs)}
        entry_bucket = np.array([number[id(b)] for b in self.directory], np.int64)
        idx = (bucket_hash(self.hashes(batch, s)) & np.uint64(len(self.directory) - 1)).astype(np.int64)
        return [(bs[k], rows) for k, rows in group_rows(batch, entry_bucket[idx])]

    # -- tuning ------------------------------------------------------------------------
    def tune(self):
        """Split buckets above theta, then merge buckets below theta/2 with their buddies."""
        if not self.theta:
            return
        changed = True
        while changed:
            changed = False
            for b in self.buckets():
                if self.blocks(b) > self.theta and b.depth < self.max_depth:
                    self.split(b)
                    changed = True
                    break
        changed = True
        while changed:
            changed = False
            for b in self.buckets():
                if self.blocks(b) < self.theta / 2 and self.merge(b):
                    changed = True
                    break
        self._shrink()

    def split(self, b):
        if b.depth == self.global_depth:
            self.directory = self.directory + self.directory
            self.global_depth += 1
        d = b.depth
        lo, hi = Bucket(d + 1, self.make_store), Bucket(d + 1, self.make_store)
        for i, x in enumerate(self.directory):
            if x is b:
                self.directory[i] = hi if (i >> d) & 1 else lo
        parts = {False: [], True: []}
        for s, w in enumerate(b.windows):
            rows = w.view()
            bit = ((bucket_hash(self.hashes(rows, s)) >> np.uint64(d)) & np.uint64(1)).astype(bool)
            parts[False].append(rows[~bit])
            parts[True].append(rows[bit])
        lo.store.load(*parts[False])
        hi.store.load(*parts[True])

    def buddy_of(self, b):
        if b.depth == 0:
            return None
        first = self.directory.index(b)
        return self.directory[(first & ((1 << b.depth) - 1)) ^ (1 << (b.depth - 1))]

    def merge(self, b):
        """Merge b with its buddy when the buddy has the same depth and the sum is under theta."""
        other = self.buddy_of(b)
        if other is None or other is b or other.depth != b.depth or self.blocks(b) + self.blocks(other) >= self.theta:
            return False
        m = Bucket(b.depth - 1, self.make_store)
        rows = []
        for s in range(len(self.dtypes)):
            both = np.concatenate([b.windows[s].view(), other.windows[s].view()])
            rows.append(both[np.argsort(both["seq"], kind="stable")])
        m.store.load(*rows)
        for i, x in enumerate(self.directory):
            if x is b or x is other:
                self.directory[i] = m
        return True

    def _shrink(self):
        while self.global_depth > 0 and all(b.depth < self.global_depth for b in self.directory):
            self.directory = self.directory[: len(self.directory) // 2]
            self.global_depth -= 1

    def expire(self, bounds):
        for b in self.buckets():
            b.store.expire(bounds)          # a local join may keep what expires (outer joins)

    # -- state -------------------------------------------------------------------------
    def state(self):
        """(arrays {"<bucket>/<stream>": rows}, split information) to move or checkpoint."""
        bs = self.buckets()
        ids = {id(b): k for k, b in enumerate(bs)}
        arrays = {}
        for k, b in enumerate(bs):
            arrays.update(b.store.snapshot(str(k)))
        info = {"global_depth": self.global_depth, "directory": [ids[id(b)] for b in self.directory],
                "depths": [b.depth for b in bs]}
        return arrays, info

    def install(self, arrays, info):
        """Rebuild from state(): buckets, their windows, and the directory."""
        bs = [Bucket(d, self.make_store) for d in info["depths"]]
        for k, b in enumerate(bs):
            b.store.restore(arrays, str(k))
        self.global_depth = int(info["global_depth"])
        self.directory = [bs[k] for k in info["directory"]]
        if len(self.directory) != 1 << self.global_depth:
            raise ValueError(f"directory has {len(self.directory)} entries, global depth {self.global_depth}")

    def check(self):
        """The invariants (used by tests): directory size, depths, entries per bucket, routing."""
        assert len(self.directory) == 1 << self.global_depth
        for b in self.buckets():
            assert b.depth <= self.global_depth
            entries = [i for i, x in enumerate(self.directory) if x is b]
            assert len(entries) == 1 << (self.global_depth - b.depth)
            low = {i & ((1 << b.depth) - 1) for i in entries}
            assert len(low) == 1
            for s, w in enumerate(b.windows):
                rows = w.view()
                if len(rows):
                    idx = (bucket_hash(self.hashes(rows, s)) & np.uint64(len(self.directory) - 1)).astype(np.int64)
                    assert all(self.directory[i] is b for i in np.unique(idx))
                    assert np.all(np.diff(rows["seq"]) > 0)
