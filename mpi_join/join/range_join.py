"""Range probes: the join step the oracle and the ring's sliced joins share.

A probe row sees a contiguous row range [lo, hi) of another stream's rows (window.index_ranges:
rows sorted by seq, so a window, a slice of one, and "older than the probe" are each a range).
`probe_ranges` finds the pairs in those ranges that satisfy every condition between the two
streams (an exact-code index for equi keys, a range scan for bands, the UDF for theta);
`extend` adds one stream to a set of partial M-way combinations with it. Neither knows which
strategy calls it: the oracle probes whole streams, a ring operator its slice.
"""
import numpy as np

from . import kernels as K
from .predicate import Band, Equi, Interval
from ..schema import TS
from .predicate import band_matrix, binary_parts, key_matrix, key_widths, load_udf, no_null


def extend(pred, bound, j, B, lo, hi):
    """Join stream j's rows B to partial combinations: `bound[m] = (array, idx)` binds row
    array[idx[c]] of stream m to combination c (idx None: array[c]); combination c may use B's
    rows [lo[c], hi[c]). Probes through one bound stream with a condition on j (one with an equi
    key when there is one) and filters by every other bound stream's conditions. Returns
    (combination index, row of B)."""
    linked = [m for m in bound if pred.between(m, j)]
    if not linked:
        raise ValueError(f"stream {j} has no condition with the bound streams {sorted(bound)}")
    k = next((m for m in linked if binary_parts(pred, m, j)[0]), linked[0])
    A, idx = bound[k]
    ic, ij = probe_ranges(pred, k, j, A, B, lo, hi, rows=idx)
    keep = np.ones(len(ic), bool)
    for m in linked:
        if m != k:
            Am, im = bound[m]
            keep &= pair_mask(pred, m, j, Am, B, ic if im is None else im[ic], ij)
    return ic[keep], ij[keep]


def probe_ranges(pred, i, j, A, B, lo, hi, rows=None):
    """Pairs (probe row, row of B) with B's row in [lo, hi) that satisfy every condition i~j.
    Probe row c is A[c], or A[rows[c]] when `rows` is given (A itself is never copied: its rows
    may be large, an image)."""
    eq_a, eq_b, bands, thetas = binary_parts(pred, i, j)
    at = (lambda x: x) if rows is None else (lambda x: x[rows])
    guess = 4 * len(lo) + 1024
    if eq_a:
        w = key_widths(A.dtype, eq_a, B.dtype, eq_b)
        ca, cb = exact_codes(key_matrix(A, eq_a, w), key_matrix(B, eq_b, w))
        order = np.lexsort((np.arange(len(B)), cb))
        ia, ib = K.collect(K.range_equi, at(ca), lo, hi, cb[order], order.astype(np.int64), guess=guess)
        if bands:
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


def _band_args(A, B, bands):
    Ab = band_matrix(A, [b.left[1] for b in bands])
    Bb = band_matrix(B, [b.right[1] for b in bands])
    eps = np.array([b.eps for b in bands], np.float64)
    closed = np.array([b.closed for b in bands], np.bool_)
    return Ab, Bb, eps, closed


def _band_mask(A, B, ia, ib, bands):
    Ab, Bb, eps, closed = _band_args(A, B, bands)
    return K.band_mask(ia, ib, Ab, Bb, eps, closed)


def _oriented(theta, i, A, B):
    return (A, B) if theta.streams[0] == i else (B, A)


def _theta_mask(theta, i, A, B, ia, ib):
    udf = load_udf(theta.udf)
    if theta.streams[0] == i:
        return K.theta_mask(udf, A, B, ia, ib)
    return K.theta_mask(udf, B, A, ib, ia)
