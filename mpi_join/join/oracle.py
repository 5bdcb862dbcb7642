"""The reference: the exact join result of README "Exact semantics", in one process.

It follows the three-step procedure over the merged stream: each arriving tuple (in seq order)
probes the current window of every other stream, is inserted into its own window, and tuples
that no future tuple can see are expired. Because ts is non-decreasing in seq, the window a
tuple sees is a contiguous row range [lo, hi) of each stream (window.index_ranges), so the
probe is a numba loop over that range and each result is found once, by its newest tuple.
"""
import numpy as np

from .range_join import extend, probe_ranges
from ..schema import SEQ
from .window import index_ranges


def run_oracle(job, arrays):
    """All results of `job` over `arrays` (one structured array per stream, sorted by seq).

    Returns an (n, M) int64 array of seqs, one column per stream, in job stream order."""
    if job.predicate.asof is not None:
        from .asof import oracle
        return oracle(job, arrays)
    if len(arrays) == 2:
        pairs = np.concatenate([_binary(job, arrays, 0, 1), _binary(job, arrays, 1, 0)[:, ::-1]])
        return np.concatenate([pairs] + [unmatched(arrays[k][SEQ], pairs[:, k], k) for k in job.predicate.outer])
    return _multiway(job, arrays)


def unmatched(seqs, matched, k):
    """Outer join rows: each seq of stream k that no pair holds, with -1 (null) for the other stream."""
    lone = seqs[~np.isin(seqs, matched)].astype(np.int64)
    out = np.full((len(lone), 2), -1, np.int64)
    out[:, k] = lone
    return out


def _binary(job, arrays, i, j):
    """Results found when a tuple of stream i arrives and probes stream j; columns (i, j)."""
    A, B = arrays[i], arrays[j]
    lo, hi = index_ranges(job.streams[j].window, A, B)
    ia, ib = probe_ranges(job.predicate, i, j, A, B, lo, hi)
    return np.stack([A[SEQ][ia], B[SEQ][ib]], axis=1)


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
            ic, ij = extend(pred, {m: (arrays[m], v) for m, v in rows.items()}, j, arrays[j], lo, hi)
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
