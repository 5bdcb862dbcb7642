"""Window semantics in one place, and the window store every strategy shares.

Every window kind reduces to one integer test. Each tuple u of stream j has a coordinate
`coord` (its ts for a time window, its position in stream j for a count window). A newer tuple t
(by seq) of another stream sees u iff `coord(u) >= lo_j(t)`, where
  time:      lo_j(t) = t.ts - W_j + 1              (t.ts - u.ts < W_j)
  count:     lo_j(t) = cnt_j(t) - W_j              (u is among the last W_j tuples of j before t)
  unbounded: lo_j(t) = -inf
cnt_j(t) is the number of j tuples that arrived before t. lo is non-decreasing along each stream,
so a window can drop every u with coord(u) < the smallest lo a future tuple can have.
"""
import ctypes

import numpy as np

from ..schema import SEQ, TS

NEG_INF = np.iinfo(np.int64).min
POS_INF = np.iinfo(np.int64).max
INTERNAL = [("_coord", np.int64), ("_lo", np.int64), ("_tin", np.int64), ("_h", np.uint64)]


def coords(window, arr, first=0):
    """Coordinate of each tuple of a stream (arr sorted by seq) in its own window; `first`: the
    stream's tuples before arr (a replay releases a stream in pieces)."""
    if window.kind == "time":
        return arr[TS].astype(np.int64, copy=False)
    if window.kind == "count":
        return np.arange(first, first + len(arr), dtype=np.int64)
    return np.zeros(len(arr), np.int64)


def lows(window_j, arr_i, arr_j, first_j=0):
    """lo_j(t) for every tuple t of stream i over stream j's window; arr_j holds stream j's
    tuples from its `first_j`-th on, up to (at least) the last t."""
    n = len(arr_i)
    if window_j.kind == "time":
        return arr_i[TS].astype(np.int64) - (window_j.size - 1)
    if window_j.kind == "count":
        return first_j + np.searchsorted(arr_j[SEQ], arr_i[SEQ]).astype(np.int64) - window_j.size
    return np.full(n, NEG_INF, np.int64)


def index_ranges(window_j, arr_i, arr_j):
    """Rows [lo, hi) of stream j (sorted by seq) inside the window each tuple of stream i sees."""
    hi = np.searchsorted(arr_j[SEQ], arr_i[SEQ]).astype(np.int64)
    if window_j.kind == "time":
        lo = np.searchsorted(arr_j[TS], arr_i[TS] - (window_j.size - 1)).astype(np.int64)
    elif window_j.kind == "count":
        lo = hi - window_j.size
    else:
        lo = np.zeros_like(hi)
    return np.clip(lo, 0, hi), hi


def raw_itemsize(dtype):
    """Bytes of a row's staged columns: what the tuple is worth before the runtime adds its
    internal and derived columns (their names begin with "_")."""
    return sum(dtype.fields[n][0].itemsize for n in dtype.names if not n.startswith("_"))


def footprint(*parts):
    """(bytes held, raw bytes) summed over windows and stores that have a `footprint()`."""
    held = raw = 0
    for p in parts:
        h, r = p.footprint()
        held, raw = held + h, raw + r
    return held, raw


def runtime_dtype(stream_dtype, M=2):
    """Staged columns plus internal ones: _coord, _lo (over the opposite stream of a binary join),
    _tin (release time, ns, for production delay) and _h (a strategy's routing hash, e.g. of the
    equi key; 0 when unused). With M > 2 streams, `_los[j]` is lo over stream j."""
    extra = [("_los", np.int64, (M,))] if M > 2 else []
    return np.dtype(stream_dtype.descr + INTERNAL + extra)


def _capacity(rows):
    """A buffer for `rows` rows and room to grow: 1.125x (a full window holds 1.07-1.125x its rows)."""
    return max(256, rows + rows // 8)


def _too_big(cap, rows):
    """A large buffer less than a quarter full: it shrinks."""
    return cap > 4096 and rows < cap // 4


class Window:
    """A growable window of tuples in arrival order; expires a prefix at a time.

    Appends are amortised O(1) per tuple: when the rows no longer fit, they move to the front
    (compaction) if they fill at most 15/16 of the buffer, else to a new buffer of 1.125 times
    their number. A sliding window thus holds 1.07 to 1.125 times its rows (memory is the scarcer
    resource: a row is copied 8 to 15 times in its life, a memmove of a few dozen bytes, against 2
    at 1.5x). A large
    buffer that expiry or a drop leaves less than a quarter full shrinks the same way at once, not
    at the next append (a chain's end segment empties when its stream moves on and may get no
    more rows). `view()` is a zero-copy slice kernels read directly; a view taken before an
    append, an expiry or a drop keeps the rows it showed.
    `coord`: the column expiry compares (`ts` where a join derives the coordinate from it)."""

    def __init__(self, dtype, capacity=256, coord="_coord", raw=None):
        """`raw`: the staged dtype of the tuples held, when the rows hold less than its columns
        (the memory figures compare with the staged bytes)."""
        self._coord = coord
        self._buf = np.empty(capacity, dtype)
        self._start = 0
        self._end = 0
        self.base = 0          # absolute number of view()[0]: rows keep their absolute numbers
        self._raw = raw_itemsize(self._buf.dtype if raw is None else raw)

    @property
    def dtype(self):
        return self._buf.dtype

    def __len__(self):
        return self._end - self._start

    def view(self):
        return self._buf[self._start:self._end]

    def append(self, batch):
        n = len(batch)
        if n == 0:
            return
        if self._end + n > len(self._buf):
            live = len(self)
            need, cap = live + n, len(self._buf)
            if need > cap - cap // 16 or _too_big(cap, need):
                cap = _capacity(need)
            if cap != len(self._buf):
                self._move_to(cap)
            elif live:          # to the front in place: one memmove (numpy would copy an overlap twice)
                size = self._buf.dtype.itemsize
                ctypes.memmove(self._buf.ctypes.data, self._buf.ctypes.data + self._start * size, live * size)
            self._start, self._end = 0, live
        self._buf[self._end:self._end + n] = batch
        self._end += n

    def expire(self, bound):
        """Drop the tuples whose _coord is below `bound` (they sit at the front)."""
        if len(self) == 0:
            return 0
        c = self._buf[self._coord][self._start:self._end]
        k = int(np.searchsorted(c, bound))
        return self.drop(k)

    def trim(self):
        """Drop spare capacity (a window that is done growing: an archived subindex)."""
        self._buf = self.view().copy()
        self._start, self._end = 0, len(self._buf)

    def number_from(self, base):
        """Its first row's absolute number (a restored window: stored rows keep their numbers)."""
        self.base = int(base)

    def drop(self, k):
        """Drop the oldest k tuples (a chain's acknowledged forwards)."""
        k = min(int(k), len(self))
        self._start += k
        self.base += k
        if k and _too_big(len(self._buf), len(self)):
            self._move_to(_capacity(len(self)))
        return k

    def _move_to(self, cap):
        """The rows to the front of a new buffer of `cap` rows."""
        live = len(self)
        new = np.empty(cap, self._buf.dtype)
        new[:live] = self._buf[self._start:self._end]
        self._buf = new
        self._start, self._end = 0, live

    def take(self):
        """Remove and return every tuple (used to move state)."""
        out = self.view().copy()
        self.base += len(out)
        self._start = self._end = 0
        return out

    @property
    def nbytes(self):
        return len(self) * self._buf.dtype.itemsize

    def footprint(self):
        """(bytes allocated, spare capacity included; raw bytes of the tuples held): the memory
        target compares the two."""
        return self._buf.nbytes, len(self) * self._raw
