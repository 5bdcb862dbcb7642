"""The chained in-memory index (BiStream, Section 3.3): one stream's stored window as a chain of
subindexes, each covering one archive period P of coordinates (window.py: a tuple's ts for a
time window, its position in its stream for a count window), each a BinaryJoin holding that
part of the window with its own incremental index.

- Indexing: a tuple goes into the active subindex (the last), which records the smallest and
  largest coordinate it holds; the tuple that takes largest - smallest past P closes it
  (archived: spare capacity dropped), and the next tuple opens a new one. The rule is per tuple,
  so the chain a checkpoint restores is the chain that was saved, however the rows are batched.
- Discarding: a whole subindex is dropped once its largest coordinate is below the window's bound
  less D (Theorem 1: no tuple to come can see any of it; D is the arrival slack, 0 when arrivals
  are ordered, as the units' ordered merge makes them). Never tuple by tuple: a partly expired
  subindex stays until all of it has.
- Joining: a subindex whose smallest coordinate is inside the window of every probing tuple of a
  batch is joined without the per-pair window test; a partly expired one tests every pair.
"""
from collections import deque

import numpy as np

from .local_join import BinaryJoin, probe_results
from ..join.window import footprint

_E = np.zeros(0, np.int64)


class _Sub:
    __slots__ = ("join", "lo", "hi", "closed")

    def __init__(self, join, lo):
        self.join, self.lo, self.hi, self.closed = join, lo, lo, False

    def reach(self, hi, period):
        """Its rows now reach coordinate `hi`; past `period` from its first it takes no more."""
        self.hi, self.closed = hi, hi - self.lo > period
        return self.closed


class ChainedIndex:
    """Side `side`'s stored tuples as a chain of subindexes; probed by the other side's tuples."""

    def __init__(self, pred, dtypes, method, side, period, delay=0, keep=()):
        """`keep`: (stream, column) the caller reads of the pairs (probe's `columns`)."""
        if period < 1:
            raise ValueError(f"archive period must be at least 1, got {period}")
        self.pred, self.dtypes, self.method = pred, dtypes, method
        self.side, self.period, self.delay, self.keep = side, int(period), int(delay), tuple(keep)
        # a probe keeps only pairs whose probe is the newer: a stored row's arrival time is never read
        self.proto = BinaryJoin(pred, dtypes, method, keep=keep, older=True)        # derives rows; holds nothing
        self.subs = deque()
        self.indexed = 0                                    # tuples, over the run
        self.opened = self.discarded = 0                    # subindexes, over the run
        self.unchecked = self.checked = 0                   # subindex probes without / with the window test

    def emptied(self):
        """A new empty chain like this one (its state taken away), keeping the run's counts."""
        c = ChainedIndex(self.pred, self.dtypes, self.method, self.side, self.period, self.delay, self.keep)
        c.indexed, c.opened, c.discarded = self.indexed, self.opened, self.discarded
        c.unchecked, c.checked = self.unchecked, self.checked
        return c

    def derive(self, rows, s):
        return self.proto.derive(rows, s)

    def append(self, rows):
        """Index this side's new rows (derived, coordinates non-decreasing as along any stream)."""
        rows = self.derive(rows, self.side)
        self.indexed += len(rows)
        c = self.proto.coord(rows, self.side)
        keys = self.proto.index_keys(rows, self.side)       # once, not once per subindex
        i = 0
        while i < len(rows):
            if not self.subs or self.subs[-1].closed:
                self.subs.append(_Sub(self.proto.empty_like(), int(c[i])))
                self.opened += 1
            sub = self.subs[-1]
            # rows up to and including the first whose coordinate passes lo + P belong here
            end = min(len(rows), int(np.searchsorted(c, sub.lo + self.period, side="right")) + 1)
            end = max(end, i + 1)
            sub.join.append(rows[i:end], self.side, None if keys is None else keys[i:end])
            if sub.reach(int(c[end - 1]), self.period):
                sub.join.windows[self.side].trim()
            i = end

    def probe(self, new, columns=()):
        """Join the other side's new rows with every subindex, keeping the pairs whose probing
        tuple is the newer. Returns ((seq 0, seq 1, tin of the newer tuple), {(stream, column):
        that column of each pair} for the `columns` asked for)."""
        o = 1 - self.side
        tin = new["_tin"]
        new = self.derive(new, o)
        if self.proto.method == "equi" and len(new) > 1:    # in hash order: each subindex's probe
            h = self.proto.hashes(new, o)                     # reads its index about in order
            order = np.argsort(h, kind="stable")
            new, tin = new[order], tin[order]
            self.proto._remember(new, o, h[order])
        elif self.proto.method == "band" and len(new) > 1:    # in order of the first band value:
            order = np.argsort(new["_band"][:, 0], kind="stable")    # likewise, sorted once here
            new, tin = new[order], tin[order]
        parts = []
        if len(new):
            reach = int(self.proto.lo(new, o).max())                   # the narrowest window of the batch
            for sub in self.subs:
                check = sub.lo < reach
                self.checked += check
                self.unchecked += not check
                pairs = sub.join.probe_pairs(new, o, check=check, seqs=True)
                if len(pairs[1]):
                    parts.append(pairs)
        res = [probe_results(p, o, tin) for p in parts]
        seqs = tuple(np.concatenate([r[k] for r in res]) if res else _E for k in range(3))
        values = {(s, c): np.concatenate([p[2 * s][c][p[2 * s + 1]] for p in parts]) if parts
                  else np.zeros(0, self.dtypes[s][c]) for s, c in columns}
        return seqs, values

    def expire(self, bounds):
        """Drop every subindex no tuple to come can see (its largest coordinate below this side's
        bound less D)."""
        bound = int(bounds[self.side])
        while self.subs and self.subs[0].hi < bound - self.delay:
            self.subs.popleft()
            self.discarded += 1

    def __len__(self):
        return sum(len(s.join) for s in self.subs)

    @property
    def nbytes(self):
        return sum(s.join.nbytes for s in self.subs)

    def footprint(self):
        return footprint(*(s.join for s in self.subs))

    # -- state: the stored rows in order; the chain is rebuilt from them -----------------------
    def snapshot(self, prefix="window"):
        dt = self.proto.state_dtypes
        rows = [self.proto.runtime_rows(s.join.windows[self.side].view(), self.side) for s in self.subs]
        mine = np.concatenate(rows) if rows else np.zeros(0, dt[self.side])
        return {f"{prefix}/{self.side}": mine, f"{prefix}/{1 - self.side}": np.zeros(0, dt[1 - self.side])}

    def restore(self, arrays, prefix="window"):
        rows = arrays.get(f"{prefix}/{self.side}")
        if rows is not None and len(rows):
            self.append(rows)

    def state_dtype(self, name, prefix="window"):
        return self.proto.state_dtype(name, prefix)

    def stats(self):
        return {"subindexes": len(self.subs), "subindexes_opened": self.opened,
                "subindexes_discarded": self.discarded, "subindex_probes_unchecked": self.unchecked,
                "subindex_probes_checked": self.checked}
