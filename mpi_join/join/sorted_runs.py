"""A window's index kept across batches: (key, row) pairs sorted by key, in two runs.

A large sorted run and a small one that new entries are merged into; when the small run passes
sqrt(2 x batch x large) entries (at most a quarter of the large one) the two are merged (linear,
numba) and the entries of rows that left the window dropped. One key's entries are contiguous
in each run, so a probe is two binary searches and a short scan. Rows keep their absolute
numbers (window.Window), so entries stay valid as the window's buffer moves. The binary joins'
index (slaves/local_join.py) and the range probes' key index (range_join.KeyIndex) are both.
"""
import math

import numpy as np

from .index_kernels import MAX_SPAN, merge_runs

_EU = np.zeros(0, np.uint32)
_EI = np.zeros(0, np.int64)


class SortedRuns:
    """(key, row) pairs sorted by key in two runs (the module docstring). A run is (keys,
    offsets, base, values): row = base + offset, the offsets uint32 (12 bytes an entry, not 16);
    a merge re-bases on the oldest live row, so an offset spans at most the rows a window holds.
    `carry`: each entry also keeps an int64 value of its row (`values`; else empty), read in run
    order by a probe: the rows' seqs, which a result would otherwise read at a random window row
    (a cache miss a result)."""

    def __init__(self, key_dtype, carry=False):
        self.kd = key_dtype
        self.carry = carry
        self.big = self.small = (np.zeros(0, key_dtype), _EU, 0, _EI)

    @classmethod
    def of(cls, keys, order=None, values=None):
        """The index of rows 0, 1, ... with these keys (`order`: their stable sort, when the
        caller has it; `values`: the rows' values to carry)."""
        r = cls(keys.dtype, values is not None)
        order = np.argsort(keys, kind="stable") if order is None else order
        r.big = (keys[order], order.astype(np.uint32), 0, _EI if values is None else values[order].astype(np.int64, copy=False))
        return r

    def runs(self):
        return (self.big, self.small)

    @property
    def nbytes(self):
        return sum(_held(k) + _held(p) + _held(v) for k, p, _, v in (self.big, self.small))

    def settle(self, live_from, live):
        """Rows below `live_from` have left the window, `live` remain: when the entries of rows
        gone outnumber the live ones (by 4,096), both runs merge without them, so a window that
        empties (a chain's end segment) does not keep its index until its next rows come."""
        if len(self.big[0]) + len(self.small[0]) > 2 * live + 4096:
            self._merge_small(live_from)

    def _merge_small(self, live_from):
        """The small run into the big one, entries below live_from dropped."""
        self.big = merge(*self.big, *self.small, live_from)
        self.small = (np.zeros(0, self.kd), _EU, 0, _EI)

    def add(self, keys, first, live_from, order=None, values=None):
        """Entries for rows first, first+1, ... with these keys (`order`: their stable sort, when
        the caller has it; `values`: the rows' values, when it carries them); entries below
        `live_from` are dropped when runs merge."""
        if not len(keys):
            return
        keys = np.asarray(keys, self.kd)
        order = np.argsort(keys, kind="stable") if order is None else order
        new = (keys[order], order.astype(np.uint32), first, values[order].astype(np.int64, copy=False) if self.carry else _EI)
        self.small = merge(*self.small, *new, live_from)
        # each add re-merges the small run, and each big merge moves the big one: a small run of
        # sqrt(2 x batch x big) entries balances the two (about 40 entry moves a row on a window
        # of 460,000 rows in batches of 575, against 104 when the small run went to big / 4:
        # 208-226 ns an entry added against 459-576, one process, alternating runs)
        if len(self.small[0]) > min(len(self.big[0]) // 4, math.isqrt(2 * len(keys) * len(self.big[0]))) + 1024:
            self._merge_small(live_from)


def merge(k1, p1, b1, v1, k2, p2, b2, v2, live_from):
    n = len(k1) + len(k2)
    carry = len(v1) + len(v2) > 0
    ko = np.empty(n, k1.dtype if len(k1) else k2.dtype)
    po = np.empty(n, np.uint32)
    vo = np.empty(n if carry else 0, np.int64)
    m = merge_runs(k1, p1, b1, v1, k2, p2, b2, v2, live_from, ko, po, vo)
    if m < 0:
        raise RuntimeError(f"a window index spans more than {MAX_SPAN} rows (from row {live_from}); "
                           f"a rank holding that many rows needs more ranks")
    if m < n - n // 8:        # many entries were of rows gone: keep only the live ones' memory
        return ko[:m].copy(), po[:m].copy(), live_from, vo[:m].copy() if carry else _EI
    return ko[:m], po[:m], live_from, vo[:m] if carry else _EI


def _held(a):
    """Bytes an array keeps allocated (a slice keeps its whole buffer)."""
    return (a.base if isinstance(a.base, np.ndarray) else a).nbytes
