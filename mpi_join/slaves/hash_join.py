"""The `hash` strategy's join module: the windows of the partition groups one slave owns.

A pure state machine (no MPI): `on_epoch(bounds, batches)` takes one distribution epoch and
returns its results, so it is tested directly. Within an epoch, all new tuples come after
every tuple in the windows (epochs are consecutive seq ranges), so the epoch's results are
new R x window S, window R x new S and new R x new S, each pair kept when its newer tuple sees
the older one (window.py). This is the paper's head-block rule at batch granularity: the new
tuples are the "fresh" tuples of the head blocks; joining them with the opposite window but
not with the opposite fresh tuples twice, and fresh-with-fresh exactly once, is what keeps
every result exactly once. Then the new tuples join the windows and expired ones leave.

Each partition group is an ExtendibleGroup: with fine tuning on (theta > 0) its windows are
split into buckets kept between theta/2 and theta blocks, and each bucket joins on its own.
"""
import numpy as np

from ..partitioning import group_rows
from ..partitioning.extendible import ExtendibleGroup
from .local_join import equi_join

_NONE = np.zeros(0, np.int64)


class HashJoinModule:
    def __init__(self, partitioner, dtypes, local_join="index", theta=0, block_bytes=4096):
        self.part = partitioner
        self.dtypes = dtypes
        self.local_join = local_join
        self.theta, self.block_bytes = theta, block_bytes
        self.groups = {}                 # partition -> ExtendibleGroup

    def _group(self, p):
        g = self.groups.get(p)
        if g is None:
            g = self.groups[p] = ExtendibleGroup(self.dtypes, self.theta, self.block_bytes)
        return g

    def on_epoch(self, bounds, batches):
        """Join one epoch. Returns (seq of stream 0, seq of stream 1, _tin of the newer tuple),
        three aligned int64 arrays with one entry per result."""
        by_part = [dict(group_rows(b, self.part.partitions(b["_h"]))) for b in batches]
        out = []
        for p in sorted(set(by_part[0]) | set(by_part[1])):
            g = self._group(p)
            new = {}
            for s in (0, 1):
                if p in by_part[s]:
                    for bucket, rows in g.route(by_part[s][p]):
                        new.setdefault(id(bucket), [bucket, batches[0][:0], batches[1][:0]])[1 + s] = rows
            for bucket, nA, nB in new.values():
                oA, oB = bucket.windows[0].view(), bucket.windows[1].view()
                for A, B in ((nA, oB), (oA, nB), (nA, nB)):
                    if len(A) and len(B):
                        self._join(A, B, out)
                bucket.windows[0].append(nA)
                bucket.windows[1].append(nB)
            g.tune()
        self.expire(bounds)
        if not out:
            return _NONE, _NONE, _NONE
        return tuple(np.concatenate([o[k] for o in out]) for k in range(3))

    def _join(self, A, B, out):
        ia, ib = equi_join(A, B, self.part.keys(A, 0), self.part.keys(B, 1), self.local_join)
        if len(ia):
            sa, sb = A["seq"][ia], B["seq"][ib]
            out.append((sa, sb, np.where(sa > sb, A["_tin"][ia], B["_tin"][ib])))

    def expire(self, bounds):
        for g in self.groups.values():
            g.expire(bounds)

    def window_tuples(self):
        n = [0, 0]
        for g in self.groups.values():
            for b in g.buckets():
                n[0] += len(b.windows[0])
                n[1] += len(b.windows[1])
        return n

    def buckets(self):
        return sum(len(g.buckets()) for g in self.groups.values())

    # -- moving a partition group (state migration) ------------------------------------
    def take_group(self, p):
        """Remove partition group p: (arrays, split information), empty if it holds nothing."""
        g = self.groups.pop(p, None)
        if g is None:
            return {}, {"global_depth": 0, "directory": [0], "depths": [0]}
        return g.state()

    def put_group(self, p, arrays, info):
        g = ExtendibleGroup(self.dtypes, self.theta, self.block_bytes)
        g.install(arrays, info)
        self.groups[p] = g

    # -- checkpoint state (see checkpoint.py) ------------------------------------------
    def snapshot(self):
        arrays, infos = {}, {}
        for p, g in sorted(self.groups.items()):
            a, info = g.state()
            arrays.update({f"group/{p}/{k}": v for k, v in a.items() if len(v)})
            infos[str(p)] = info
        return arrays, {"groups": infos}

    def restore(self, arrays, state):
        per = {}
        for name, a in arrays.items():
            _, p, b, s = name.split("/")
            per.setdefault(int(p), {})[f"{b}/{s}"] = a
        for p, info in state["groups"].items():
            self.put_group(int(p), per.get(int(p), {}), info)

    def state_dtype(self, name):
        """dtype a checkpointed array must have: group/<p>/<bucket>/<stream>."""
        parts = name.split("/")
        if len(parts) == 4 and parts[0] == "group" and parts[3] in ("0", "1"):
            return self.dtypes[int(parts[3])]
        return None
