"""The `hash` strategy's join module: per-partition windows of both streams on one slave.

A pure state machine (no MPI): `on_epoch(bounds, batches)` takes one distribution epoch and
returns its results, so it is tested directly. Within an epoch, all new tuples come after
every tuple in the windows (epochs are consecutive seq ranges), so the epoch's results are
new R x window S, window R x new S and new R x new S, each pair kept when its newer tuple
sees the older one (window.py). Then the new tuples join the windows and expired ones leave.
"""
import numpy as np

from ..window import Window
from .local_join import equi_join

_NONE = np.zeros(0, np.int64)


class HashJoinModule:
    def __init__(self, partitioner, dtypes, local_join="index"):
        self.part = partitioner
        self.dtypes = dtypes
        self.local_join = local_join
        self.windows = ({}, {})        # per stream: partition -> Window

    def _window(self, stream, p):
        w = self.windows[stream].get(p)
        if w is None:
            w = self.windows[stream][p] = Window(self.dtypes[stream])
        return w

    def on_epoch(self, bounds, batches):
        """Join one epoch. Returns (seq of stream 0, seq of stream 1, _tin of the newer tuple),
        three aligned int64 arrays with one entry per result."""
        groups = []
        for s in (0, 1):
            b = batches[s]
            parts = self.part.partitions(b["_h"])
            order = np.argsort(parts, kind="stable")
            b, parts = b[order], parts[order]
            uniq, starts = np.unique(parts, return_index=True)
            ends = np.append(starts[1:], len(b))
            groups.append({int(p): b[s0:e0] for p, s0, e0 in zip(uniq, starts, ends)})
        out = []
        for p in sorted(set(groups[0]) | set(groups[1])):
            nA = groups[0].get(p, batches[0][:0])
            nB = groups[1].get(p, batches[1][:0])
            wA, wB = self._window(0, p), self._window(1, p)
            kA, kB = self.part.keys(nA, 0), self.part.keys(nB, 1)
            oA, oB = wA.view(), wB.view()
            for A, ka, B, kb in ((nA, kA, oB, None), (oA, None, nB, kB), (nA, kA, nB, kB)):
                if len(A) == 0 or len(B) == 0:
                    continue
                ka = self.part.keys(A, 0) if ka is None else ka
                kb = self.part.keys(B, 1) if kb is None else kb
                ia, ib = equi_join(A, B, ka, kb, self.local_join)
                if len(ia):
                    sa, sb = A["seq"][ia], B["seq"][ib]
                    out.append((sa, sb, np.where(sa > sb, A["_tin"][ia], B["_tin"][ib])))
            wA.append(nA)
            wB.append(nB)
        self.expire(bounds)
        if not out:
            return _NONE, _NONE, _NONE
        return tuple(np.concatenate([o[k] for o in out]) for k in range(3))

    def expire(self, bounds):
        for s in (0, 1):
            for w in self.windows[s].values():
                w.expire(bounds[s])

    def window_tuples(self):
        return [sum(len(w) for w in ws.values()) for ws in self.windows]

    # checkpoint state (see checkpoint.py): every non-empty window, by stream and partition
    def snapshot(self):
        return {f"window/{s}/{p}": w.view() for s in (0, 1) for p, w in sorted(self.windows[s].items()) if len(w)}

    def restore(self, arrays):
        for name, a in arrays.items():
            _, s, p = name.split("/")
            self._window(int(s), int(p)).append(a)

    def state_dtypes(self):
        return {"window/0/": self.dtypes[0], "window/1/": self.dtypes[1]}
