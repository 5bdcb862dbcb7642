"""numba kernels for the inner loops of every join.

Kernels emit pairs of row indices into preallocated output arrays and return how many pairs
they found; `collect` grows the outputs and reruns when a kernel overflows, so no Python runs
per tuple. Each kernel writes its n-th pair only while n is below the outputs' size and counts
on (four lines inline in every loop: a shared inlined helper made the equi loops 1.2 to 1.4x
slower). A pair (a, b) passes the window test when the later of the two (by seq) sees the
other inside its window: `coord[older] >= lo[newer]` (see window.py for coord and lo).
"""
import functools
import warnings

import numpy as np
from numba import njit

from .jit import Compiles

# A window's rows carry the runtime's columns (_tin, ...) after the stream's own, so numba passes
# them to a theta UDF compiled for the stream's record as a subtype of it, and warns at every
# compile that this is experimental; it is what is meant (tests/test_oracle.py checks the UDF
# joins exactly), so the warning is not printed
try:
    from numba.core.errors import NumbaExperimentalFeatureWarning
    warnings.filterwarnings("ignore", category=NumbaExperimentalFeatureWarning,
                            message=r"Record\(.*has been considered a subtype of Record")
except ImportError:          # pragma: no cover - another numba
    pass

Compiles.install()      # every process that imports numba through here counts its compiles

_EMPTY = np.zeros(0, np.int64)


@njit(cache=True)
def _first(x):
    return x


def search(a, v, side="left"):
    """np.searchsorted(a, v, side) for a sorted column `a` read where it lies (an int for a
    scalar `v`): a column of a window's structured rows is strided, and numpy copies it whole
    before searching it, a cost per batch that grew with the window (hash's probe of a
    2,048-row batch against 4 M window rows: 14 ms, against 0.1 M: 1.7 ms; 2.7 ms and 1.4 ms
    searched in place)."""
    one = np.ndim(v) == 0
    out = _search(a, np.asarray(v).reshape(-1), side == "right")
    return int(out[0]) if one else out


@njit(cache=True)
def _search(a, v, right):
    out = np.empty(len(v), np.int64)
    n = len(a)
    for i in range(len(v)):
        x, lo, hi = v[i], 0, n
        while lo < hi:
            mid = (lo + hi) >> 1
            if a[mid] < x or (right and a[mid] == x):
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out


def set_up():
    """numba's first call in a process sets up its compiler and code loader (about 0.1 s of CPU,
    then 2 ms a cached kernel): a rank held at the gate (gate.py) pays it before its input is ready."""
    _first(0)


def collect(kernel, *args, guess=1024, outs=2):
    """Run a pair-emitting kernel, growing the output until it fits; returns (ia, ib) (and a
    third array when `outs` is 3: a value the kernel read for each pair, index_kernels.equi_run).

    Every pair-emitting kernel here and in index_kernels.py records a pair with the same three
    lines (store it if it fits, count it), written out in each on purpose: as a helper function,
    even one numba inlines, it made the band probes 3.5 to 24 times slower (band_run, scan_band;
    measured on 2,000 probes against 200,000 window rows). So is band_run's and scan_band's pair
    test: wrapped in one inline helper (band and visibility), scan_band took 4.2 s where it takes
    80 ms (200 probes against 200,000 rows)."""
    cap = max(int(guess), 16)
    while True:
        o = [np.empty(cap, np.int64) for _ in range(outs)]
        n = kernel(*args, *o)
        if n <= cap:
            return tuple(a[:n] for a in o)
        cap = int(n)


@njit(cache=True, inline="always")
def _visible(a_seq, a_coord, a_lo, b_seq, b_coord, b_lo):
    if a_seq > b_seq:
        return b_coord >= a_lo
    return a_coord >= b_lo


@njit(cache=True, inline="always")
def _keys_equal(a_keys, i, b_keys, j, first):
    """Key columns from `first` on are equal."""
    for c in range(first, a_keys.shape[1]):
        if a_keys[i, c] != b_keys[j, c]:
            return False
    return True


@njit(cache=True, inline="always")
def _match(a_keys, i, b_keys, j, first, a_seq, a_coord, a_lo, b_seq, b_coord, b_lo, a_dlo, b_dlo):
    """Keys equal (columns from `first` on) and the newer tuple sees the older one."""
    return _keys_equal(a_keys, i, b_keys, j, first) and _visible(a_seq[i], a_coord[i], a_lo[i] + a_dlo, b_seq[j],
                                                                  b_coord[j], b_lo[j] + b_dlo)


@njit(cache=True)
def equi_bnl(a_keys, a_seq, a_coord, a_lo, a_dlo, b_keys, b_seq, b_coord, b_lo, b_dlo, out_a, out_b):
    """Block nested loop equi-join of batch a with batch b (the paper's local join)."""
    n = 0
    nb = b_keys.shape[0]
    for i in range(a_keys.shape[0]):
        k0 = a_keys[i, 0]
        for j in range(nb):
            if b_keys[j, 0] != k0:       # the tight loop compares the first key column only
                continue
            if _match(a_keys, i, b_keys, j, 1, a_seq, a_coord, a_lo, b_seq, b_coord, b_lo, a_dlo, b_dlo):
                if n < out_a.shape[0]:
                    out_a[n], out_b[n] = i, j
                n += 1
    return n


@njit(cache=True)
def range_equi(a_code, a_lo_idx, a_hi_idx, b_code_sorted, b_idx_sorted, out_a, out_b):
    """For each a, the b rows with the same exact key code whose index lies in [lo, hi).

    b is sorted by (code, index), so each key's rows form one block ordered by arrival."""
    n = 0
    for i in range(a_code.shape[0]):
        c = a_code[i]
        s = np.searchsorted(b_code_sorted, c)
        e = np.searchsorted(b_code_sorted, c, side="right")
        if s == e:
            continue
        blk = b_idx_sorted[s:e]
        lo = s + np.searchsorted(blk, a_lo_idx[i])
        hi = s + np.searchsorted(blk, a_hi_idx[i])
        for p in range(lo, hi):
            if n < out_a.shape[0]:
                out_a[n], out_b[n] = i, b_idx_sorted[p]
            n += 1
    return n


@njit(cache=True, inline="always")
def _band_ok(A, i, B, j, eps, closed):
    """Every band |A - B| < eps (<= when closed), in float64. Written as `not (d < eps)` so that
    NaN (a NaN value, or inf - inf) is never within a band, as in IEEE and SQL."""
    for c in range(A.shape[1]):
        d = abs(A[i, c] - B[j, c])
        if closed[c]:
            if not d <= eps[c]:
                return False
        elif not d < eps[c]:
            return False
    return True


@njit(cache=True)
def range_band(a_lo_idx, a_hi_idx, A, B, eps, closed, out_a, out_b):
    """For each a, the b rows in [lo, hi) within every band |A - B| < eps (<= when closed)."""
    n = 0
    for i in range(A.shape[0]):
        for j in range(a_lo_idx[i], a_hi_idx[i]):
            if _band_ok(A, i, B, j, eps, closed):
                if n < out_a.shape[0]:
                    out_a[n], out_b[n] = i, j
                n += 1
    return n


@njit(cache=True)
def range_band_grid(a_lo_idx, a_hi_idx, A, B, eps, closed, a_cell, b_cell_sorted, b_idx_sorted, out_a, out_b):
    """range_band through a grid on the first band column (band_grid): b rows sorted by (cell,
    index), so each cell's rows form one block ordered by arrival; a probe visits the cells
    a_cell - 2 .. a_cell + 2 (one cell of float rounding on either side of the three its band
    spans), its row range in each by binary search, and tests every band on those rows only.
    a_cell < -2**62: a probe value that is NaN or infinite, within no band."""
    n = 0
    for i in range(A.shape[0]):
        k = a_cell[i]
        if k < -(1 << 62):
            continue
        p = np.searchsorted(b_cell_sorted, k - 2)
        e = np.searchsorted(b_cell_sorted, k + 2, side="right")
        while p < e:
            q = np.searchsorted(b_cell_sorted, b_cell_sorted[p], side="right")    # the cell's end
            blk = b_idx_sorted[p:q]
            lo = p + np.searchsorted(blk, a_lo_idx[i])
            hi = p + np.searchsorted(blk, a_hi_idx[i])
            for r in range(lo, hi):
                j = b_idx_sorted[r]
                if _band_ok(A, i, B, j, eps, closed):
                    if n < out_a.shape[0]:
                        out_a[n], out_b[n] = i, j
                    n += 1
            p = q
    return n


@njit(cache=True)
def band_mask(ia, ib, A, B, eps, closed):
    out = np.empty(ia.shape[0], np.bool_)
    for p in range(ia.shape[0]):
        out[p] = _band_ok(A, ia[p], B, ib[p], eps, closed)
    return out


@njit(cache=True)
def range_all(a_lo_idx, a_hi_idx, out_a, out_b):
    """Every (a, b) with b in a's index range: candidates for a theta-only predicate."""
    n = 0
    for i in range(a_lo_idx.shape[0]):
        for j in range(a_lo_idx[i], a_hi_idx[i]):
            if n < out_a.shape[0]:
                out_a[n], out_b[n] = i, j
            n += 1
    return n


@functools.lru_cache(maxsize=None)
def theta_kernels(udf):
    """Kernels specialised for one UDF f(rec_a, rec_b) -> bool (numba inlines the call)."""

    @njit
    def mask(RA, RB, ia, ib):
        out = np.empty(ia.shape[0], np.bool_)
        for p in range(ia.shape[0]):
            out[p] = udf(RA[ia[p]], RB[ib[p]])
        return out

    @njit
    def ranged(RA, RB, a_lo_idx, a_hi_idx, out_a, out_b):
        n = 0
        for i in range(RA.shape[0]):
            for j in range(a_lo_idx[i], a_hi_idx[i]):
                if udf(RA[i], RB[j]):
                    if n < out_a.shape[0]:
                        out_a[n], out_b[n] = i, j
                    n += 1
        return n

    return mask, ranged


def theta_mask(udf, RA, RB, ia, ib):
    if len(ia) == 0:
        return np.zeros(0, np.bool_)
    return theta_kernels(udf)[0](RA, RB, ia, ib)


__all__ = ["collect", "equi_bnl", "range_equi", "range_band", "range_band_grid", "band_mask",
           "range_all", "theta_kernels", "theta_mask"]
