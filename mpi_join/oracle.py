"""The reference: the exact join result of README "Exact semantics", in one process.

It follows the three-step procedure over the merged stream: each arriving tuple (in seq order)
probes the current window of every other stream, is inserted into its own window, and tuples
that no future tuple can see are expired. Because ts is non-decreasing in seq, the window a
tuple sees is a contiguous row range [lo, hi) of each stream (window.index_ranges), so the
probe is a numba loop over that range and each result is found once, by its newest tuple.
"""
import numpy as np

from . import kernels as K
from .config import Band, Equi, Theta
from .predicate import band_matrix, binary_parts, key_matrix, key_widths, load_udf
from .schema import SEQ
from .window import index_ranges


def run_oracle(job, arrays):
    """All results of `job` over `arrays` (one structured array per stream, sorted by seq).

    Returns an (n, M) int64 array of seqs, one column per stream, in job stream order."""
    if len(arrays) == 2:
        parts = [_binary(job, arrays, 0, 1), _binary(job, arrays, 1, 0)[:, ::-1]]
        return np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
    return _multiway(job, arrays)


def _binary(job, arrays, i, j):
    """Results found when a tuple of stream i arrives and probes stream j; columns (i, j)."""
    A, B = arrays[i], arrays[j]
    lo, hi = index_ranges(job.streams[j].window, A, B)
    ia, ib = probe_ranges(job.predicate, i, j, A, B, lo, hi)
    return np.stack([A[SEQ][ia], B[SEQ][ib]], axis=1)


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
        ia, ib = K.collect(K.range_band, lo, hi, at(Ab), Bb, eps, closed, guess=guess)
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
    for t in thetas:
        keep = _theta_mask(t, i, A, B, ra, ib)
        ia, ib, ra = ia[keep], ib[keep], ra[keep]
    return ia, ib


def pair_mask(pred, i, j, A, B, ia, ib):
    """Which candidate pairs (A[ia], B[ib]) satisfy every condition between streams i and j."""
    keep = np.ones(len(ia), bool)
    for c in pred.between(i, j):
        if isinstance(c, Equi):
            a, b = A[c.left[1]][ia], B[c.right[1]][ib]
            keep &= (a == b) if a.dtype.kind == "S" else (a.astype(np.int64) == b.astype(np.int64))
        elif isinstance(c, Band):
            keep &= _band_mask(A, B, ia, ib, [c])
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


def _multiway(job, arrays):
    """M-way join, each result found by its newest tuple t: for every stream i, all of its tuples
    bind at once; each other stream j is then joined to the growing combinations, its rows taken
    from t's window range of j (window.index_ranges) through the same range kernels as the
    binary case (an index for equi conditions), with one bound stream k that has a condition on
    j, and every condition with the other bound streams filtering the pairs. Vectorised over all
    combinations, so its cost is the candidates', not a Python loop per tuple."""
    M = len(arrays)
    pred = job.predicate
    out = []
    for i in range(M):
        A = arrays[i]
        rows = {i: np.arange(len(A), dtype=np.int64)}
        for j in _bind_order(pred, i, M):
            if not len(rows[i]):
                break
            lo_all, hi_all = index_ranges(job.streams[j].window, A, arrays[j])
            lo, hi = lo_all[rows[i]], hi_all[rows[i]]
            # jobs link every stream by some condition (config.py), so _bind_order finds one here
            bound = [k for k in rows if pred.between(k, j)]
            k = next((k for k in bound if binary_parts(pred, k, j)[0]), bound[0])   # an index when it can
            ic, ij = probe_ranges(pred, k, j, arrays[k], arrays[j], lo, hi, rows=rows[k])
            keep = np.ones(len(ic), bool)
            for m in bound:
                if m != k:
                    keep &= pair_mask(pred, m, j, arrays[m], arrays[j], rows[m][ic], ij)
            ic, ij = ic[keep], ij[keep]
            rows = {m: v[ic] for m, v in rows.items()}
            rows[j] = ij
        if len(rows) == M and len(rows[i]):
            out.append(np.stack([arrays[m][SEQ][rows[m]] for m in range(M)], axis=1))
    return np.concatenate(out) if out else np.zeros((0, M), np.int64)


def _bind_order(pred, first, M):
    """Order to bind streams so each new one has a condition with a bound one (when possible)."""
    bound, order = {first}, []
    while len(bound) < M:
        nxt = next((j for j in range(M) if j not in bound and any(pred.between(k, j) for k in bound)),
                   next(j for j in range(M) if j not in bound))
        order.append(nxt)
        bound.add(nxt)
    return order
