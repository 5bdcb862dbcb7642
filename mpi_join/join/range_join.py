"""Range probes: the join step the oracle and the ring's sliced joins share.

A probe row sees a contiguous row range [lo, hi) of another stream's rows (window.index_ranges:
rows sorted by seq, so a window, a slice of one, and "older than the probe" are each a range).
`probe_ranges` finds the pairs in those ranges that satisfy every condition between the two
streams (an exact-code index for equi keys, a range scan for bands, the UDF for theta);
`extend` adds one stream to a set of partial M-way combinations with it. Neither knows which
strategy calls it: the oracle probes whole streams once, a ring operator its slice per batch,
through the row index kept with the slice (row_index: KeyIndex, CellIndex), so a batch's probe
costs what it finds, not a sort of the slice.
"""
import numpy as np

from . import kernels as K
from .predicate import Band, Equi, Interval
from ..schema import TS
from .index_kernels import range_run
from .predicate import band_matrix, binary_parts, key_hash, key_matrix, key_widths, load_udf, no_null
from .sorted_runs import SortedRuns

_E = np.zeros(0, np.int64)


def extend(pred, bound, j, B, lo, hi, index=None):
    """Join stream j's rows B to partial combinations: `bound[m] = (array, idx)` binds row
    array[idx[c]] of stream m to combination c (idx None: array[c]); combination c may use B's
    rows [lo[c], hi[c]). Probes through one bound stream with a condition on j (one with an equi
    key when there is one) and filters by every other bound stream's conditions. `index(k)`: the
    row_index of B's rows for probes from stream k (or None). Returns (combination index, row of B)."""
    linked = [m for m in bound if pred.between(m, j)]
    if not linked:
        raise ValueError(f"stream {j} has no condition with the bound streams {sorted(bound)}")
    k = next((m for m in linked if binary_parts(pred, m, j)[0]), linked[0])
    A, idx = bound[k]
    ic, ij = probe_ranges(pred, k, j, A, B, lo, hi, rows=idx, index=index(k) if index else None)
    keep = np.ones(len(ic), bool)
    for m in linked:
        if m != k:
            Am, im = bound[m]
            keep &= pair_mask(pred, m, j, Am, B, ic if im is None else im[ic], ij)
    return ic[keep], ij[keep]


def probe_ranges(pred, i, j, A, B, lo, hi, rows=None, index=None):
    """Pairs (probe row, row of B) with B's row in [lo, hi) that satisfy every condition i~j.
    Probe row c is A[c], or A[rows[c]] when `rows` is given (A itself is never copied: its rows
    may be large, an image). `index`: B's row_index (B its window's view); without one, B's
    keys are coded and sorted here, or its band column gridded (band_grid) or scanned."""
    eq_a, eq_b, bands, thetas = binary_parts(pred, i, j)
    at = (lambda x: x) if rows is None else (lambda x: x[rows])
    guess = 4 * len(lo) + 1024
    if eq_a:
        w = key_widths(A.dtype, eq_a, B.dtype, eq_b)
        if index is not None:
            ia, ib = index.probe(key_matrix(A, eq_a, w), w, rows, lo, hi, guess)
        else:
            ca, cb = exact_codes(key_matrix(A, eq_a, w), key_matrix(B, eq_b, w))
            order = np.lexsort((np.arange(len(B)), cb))
            ia, ib = K.collect(K.range_equi, at(ca), lo, hi, cb[order], order.astype(np.int64), guess=guess)
        if bands:
            keep = _band_mask(A, B, ia if rows is None else rows[ia], ib, bands)
            ia, ib = ia[keep], ib[keep]
    elif bands and (found := index and index.probe(band_matrix(A, [bands[0].left[1]], rows)[:, 0], lo, hi,
                                                     guess)) is not None:
        ia, ib = found
        keep = _band_mask(A, B, ia if rows is None else rows[ia], ib, bands)
        ia, ib = ia[keep], ib[keep]
    elif bands:
        Ab, Bb, eps, closed = _band_args(A, B, bands)
        grid = band_grid(Ab[:, 0] if rows is None else Ab[rows, 0], Bb[:, 0], eps[0], lo, hi)
        if grid is None:
            ia, ib = K.collect(K.range_band, lo, hi, at(Ab), Bb, eps, closed, guess=guess)
        else:
            ia, ib = K.collect(K.range_band_grid, lo, hi, at(Ab), Bb, eps, closed, *grid, guess=guess)
    else:
        udf = load_udf(thetas[0].udf)
        RA, RB = _oriented(thetas[0], i, A, B)
        rk = K.theta_kernels(udf)[1]
        if thetas[0].streams == (i, j) and rows is None:
            ia, ib = K.collect(rk, RA, RB, lo, hi, guess=guess)
            thetas = thetas[1:]
        else:  # enumerate the range; the UDF is asked below, in its own argument order
            ia, ib = K.collect(K.range_all, lo, hi, guess=guess)
    ra = ia if rows is None else rows[ia]
    keep = no_null(A, B, ra, ib)        # a UDF's pairs (keys and bands exclude such rows themselves)
    if keep is not None:
        ia, ib, ra = ia[keep], ib[keep], ra[keep]
    for t in thetas:
        keep = _theta_mask(t, i, A, B, ra, ib)
        ia, ib, ra = ia[keep], ib[keep], ra[keep]
    for c in pred.between(i, j) if pred.interval else ():      # a shifted interval's time condition
        if isinstance(c, Interval):
            keep = interval_mask(c, A, B, ra, ib)
            ia, ib, ra = ia[keep], ib[keep], ra[keep]
    return ia, ib


def row_index(pred, i, j, probe_dtype, window):
    """The index range probes from stream i use on a window of stream j's rows, kept by its
    owner across batches: a KeyIndex for an equi key, a CellIndex for a band (None for a theta
    alone: a UDF is asked of every pair in range)."""
    eq, _, bands, _ = binary_parts(pred, i, j)
    if eq:
        return KeyIndex(pred, i, j, probe_dtype, window)
    return CellIndex(bands[0], window) if bands else None


class _RowIndex:
    """A window's rows (window.Window) by a uint64 code each (`codes`), in sorted runs kept
    across batches: its owner adds the rows it appends and settles after an expiry, so a probe
    costs a binary search a run and the entries it reads, not the window's sort (a slice of
    psp's ring held 1/N of a window and was sorted for every batch)."""

    def __init__(self, window):
        self.window = window
        self.runs = SortedRuns(np.uint64)
        self.add(window.view(), window.base)

    def add(self, rows, first):
        """Index rows numbered first, first + 1, ... (just appended to the window)."""
        self.runs.add(self.codes(rows), first, self.window.base)

    def settle(self):
        """After the window expired rows: drop their entries when they outnumber the live ones."""
        self.runs.settle(self.window.base, len(self.window))

    def find(self, codes, lo, hi, guess):
        """(p, row of the window's view) for each row with code codes[p] in [lo[p], hi[p])."""
        res = [K.collect(range_run, codes, lo, hi, rh, rp, rb - self.window.base, guess=guess)
               for rh, rp, rb, _ in self.runs.runs() if len(rh)]
        if not res:
            return _E, _E
        return res[0] if len(res) == 1 else (np.concatenate([r[0] for r in res]), np.concatenate([r[1] for r in res]))


class KeyIndex(_RowIndex):
    """Stream j's rows by the hash of their equi key with stream i. Keys are compared exactly:
    a one-word key's hash is a bijection (predicate.mix64), a longer key's candidate pairs are
    compared word by word."""

    def __init__(self, pred, i, j, probe_dtype, window):
        eq_a, self.cols = binary_parts(pred, i, j)[:2]
        self.widths = key_widths(probe_dtype, eq_a, window.dtype, self.cols)
        super().__init__(window)

    def codes(self, rows):
        return key_hash(key_matrix(rows, self.cols, self.widths))

    def probe(self, keys, widths, rows, lo, hi, guess):
        """(probe, row of the window's view) for probe c's key keys[c] (keys[rows[c]] when rows
        is given; `widths`: its words per column, key_widths) among the view's rows [lo[c], hi[c])."""
        if list(widths) != list(self.widths):       # another layout hashes other words: no pair would be found
            raise ValueError(f"a key of words {widths} probes an index of {self.widths}")
        k = keys if rows is None else keys[rows]
        ia, ib = self.find(key_hash(k), lo, hi, guess)
        if k.shape[1] > 1 and len(ia):
            same = (k[ia] == key_matrix(self.window.view()[ib], self.cols, self.widths)).all(axis=1)
            ia, ib = ia[same], ib[same]
        return ia, ib


class CellIndex(_RowIndex):
    """Stream j's rows by their cell of a band's width on its first band column (band_grid's
    grid, kept): a probe reads the rows of five cells (rounding) and the caller tests every band
    on them. NaN and infinities are in no cell (code 0, never asked for); a finite value whose
    cell does not fit in an int64 exactly, or a width that is not positive, makes the index
    unusable and the probe falls back to band_grid or the scan."""
    FIT = 2.0 ** 52

    def __init__(self, band, window):
        self.col, self.eps = band.right[1], float(band.eps)
        self.usable = self.eps > 0 and np.isfinite(self.eps)
        super().__init__(window)

    def _cells(self, v):
        """(cells of values v, which are finite); None where one does not fit."""
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            f = np.floor(v / self.eps) if self.usable else np.zeros(len(v))
        ok = np.isfinite(f)
        if np.abs(f[ok]).max(initial=0) > self.FIT:
            return None, ok
        return np.where(ok, f, 0).astype(np.int64), ok

    def codes(self, rows):
        cells, ok = self._cells(band_matrix(rows, [self.col])[:, 0])
        if cells is None:
            self.usable = False
            return np.zeros(len(rows), np.uint64)
        return np.where(ok, cells.view(np.uint64) ^ np.uint64(1 << 63), np.uint64(0))

    def probe(self, v, lo, hi, guess):
        """Candidate pairs (probe, row of the window's view) for probe values v (NaN: none) among
        the view's rows [lo[c], hi[c]), or None when the index cannot say (unusable)."""
        cells, ok = self._cells(v) if self.usable else (None, None)
        if cells is None:
            return None
        p = np.flatnonzero(ok & (lo < hi))
        codes = ((cells[p, None] + np.arange(-2, 3)).view(np.uint64) ^ np.uint64(1 << 63)).ravel()
        ia, ib = self.find(codes, np.repeat(lo[p], 5), np.repeat(hi[p], 5), guess)
        return p[ia // 5], ib


GRID_MIN_SCAN = 8     # build the grid when the scan would test 8 pairs per row of B or more
_NO_CELL = np.int64(-(1 << 63))


def band_grid(a, b, eps, lo, hi):
    """The grid kernels.range_band_grid probes through, or None where scanning is as cheap.

    A probe value a meets b within the band only if |a - b| <= eps, so b lies in cell
    floor(a / eps) - 1, + 0 or + 1 of a grid of width eps: a probe tests the rows of five cells
    (rounding), not its whole range. Built (a sort of B) when the ranges to scan hold at least
    GRID_MIN_SCAN pairs per row of B, the width is positive and every cell fits in an int64
    exactly. NaN and infinite values are within no band: their cells are never found.
    Returns (cells of a, cells of b sorted, b's rows in that order)."""
    if not len(b) or not eps > 0 or int(np.sum(hi - lo)) < GRID_MIN_SCAN * len(b):
        return None
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        fa, fb = np.floor(a / eps), np.floor(b / eps)
    ok_a, ok_b = np.isfinite(a), np.isfinite(b)       # a value's cell, not its quotient: 1e300 / 1e-10
    if not (np.abs(fa[ok_a]).max(initial=0) <= 2.0**52 and np.abs(fb[ok_b]).max(initial=0) <= 2.0**52):
        return None
    ca = np.where(ok_a, fa, 0).astype(np.int64)
    ca[~ok_a] = _NO_CELL
    cb = np.where(ok_b, fb, 0).astype(np.int64)
    rows = np.flatnonzero(ok_b)
    order = rows[np.argsort(cb[rows], kind="stable")]
    return ca, cb[order], order.astype(np.int64)


def interval_mask(c, A, B, ia, ib):
    """Which pairs have B.ts - A.ts in [c.lo, c.up] (c oriented A -> B), in int64."""
    d = B[TS][ib].astype(np.int64) - A[TS][ia].astype(np.int64)
    return (d >= c.lo) & (d <= c.up)


def pair_mask(pred, i, j, A, B, ia, ib):
    """Which candidate pairs (A[ia], B[ib]) satisfy every condition between streams i and j (a
    row with its NULL flag set satisfies none)."""
    keep = no_null(A, B, ia, ib)
    keep = np.ones(len(ia), bool) if keep is None else keep
    for c in pred.between(i, j):
        if isinstance(c, Equi):
            a, b = A[c.left[1]][ia], B[c.right[1]][ib]
            keep &= (a == b) if a.dtype.kind == "S" else (a.astype(np.int64) == b.astype(np.int64))
        elif isinstance(c, Band):
            keep &= _band_mask(A, B, ia, ib, [c])
        elif isinstance(c, Interval):
            keep &= interval_mask(c, A, B, ia, ib)
        else:
            keep &= _theta_mask(c, i, A, B, ia, ib)
    return keep


def exact_codes(ka, kb):
    """Dense integer codes for key rows, equal iff the rows are equal (exact, no hashing)."""
    both = np.concatenate([ka, kb])
    if both.shape[1] == 1:
        _, inv = np.unique(both[:, 0], return_inverse=True)
    else:
        _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    return inv[:len(ka)], inv[len(ka):]


def _band_args(A, B, bands, ia=None, ib=None):
    """Band columns of A and B (at rows ia and ib when given), the widths and closedness."""
    Ab = band_matrix(A, [b.left[1] for b in bands], ia)
    Bb = band_matrix(B, [b.right[1] for b in bands], ib)
    eps = np.array([b.eps for b in bands], np.float64)
    closed = np.array([b.closed for b in bands], np.bool_)
    return Ab, Bb, eps, closed


def _band_mask(A, B, ia, ib, bands):
    """Which pairs (A[ia], B[ib]) are within every band. A side's band columns are read at its
    pairs' rows when they are fewer than its rows: a batch's candidates against a window must
    not cost a copy of the window's columns."""
    ga, gb = len(ia) < len(A), len(ib) < len(B)
    Ab, Bb, eps, closed = _band_args(A, B, bands, ia if ga else None, ib if gb else None)
    n = np.arange(len(ia))
    return K.band_mask(n if ga else ia, n if gb else ib, Ab, Bb, eps, closed)


def _oriented(theta, i, A, B):
    return (A, B) if theta.streams[0] == i else (B, A)


def _theta_mask(theta, i, A, B, ia, ib):
    udf = load_udf(theta.udf)
    if theta.streams[0] == i:
        return K.theta_mask(udf, A, B, ia, ib)
    return K.theta_mask(udf, B, A, ib, ia)
