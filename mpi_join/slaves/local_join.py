"""Local equi-join of two batches of runtime tuples (block nested loop or hash index)."""
import numpy as np

from .. import kernels as K


def equi_join(A, B, ka, kb, method):
    """Row pairs (ia, ib) of A x B with equal keys where the newer tuple sees the older one.

    A, B: runtime arrays (fields seq, _coord, _lo, _h); ka, kb: (n, k) int64 key matrices."""
    if len(A) == 0 or len(B) == 0:
        return K._EMPTY, K._EMPTY
    args_a = (A["seq"], A["_coord"], A["_lo"])
    args_b = (B["seq"], B["_coord"], B["_lo"])
    guess = 2 * (len(A) + len(B))
    if method == "bnl":
        return K.collect(K.equi_bnl, ka, *args_a, kb, *args_b, guess=guess)
    # index the smaller side (sorted by key hash: one key's entries are contiguous) and probe it
    if len(A) < len(B):
        ib, ia = _index_join(B, kb, args_b, A, ka, args_a, guess)
        return ia, ib
    return _index_join(A, ka, args_a, B, kb, args_b, guess)


def _index_join(P, kp, args_p, X, kx, args_x, guess):
    hx = X["_h"]
    order = np.argsort(hx, kind="stable").astype(np.int64)
    return K.collect(K.equi_index, kp, P["_h"], *args_p, kx, hx[order], order, *args_x, guess=guess)


def warm_up(dtypes, n_keys, method):
    """Compile (or load from numba's cache) the kernels for these tuple types before data
    arrives, so the first epoch's production delay is not a compiler's."""
    a = np.zeros(2, dtypes[0])
    b = np.zeros(3, dtypes[1])
    keys = np.zeros((2, n_keys), np.int64), np.zeros((3, n_keys), np.int64)
    equi_join(a, b, keys[0], keys[1], method)
    equi_join(b, a, keys[1], keys[0], method)
