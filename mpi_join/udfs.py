"""Theta predicates shipped with mpi-join (numba-compilable, f(rec_a, rec_b) -> bool).

A UDF of your own is any function `f(a, b) -> bool` over two tuples (numba records; read
fields as `a.x` or `a["x"]`), named in the job as `udf = "module:function"`. Modules next to
the job file are importable.
"""
import numpy as np
from numba import njit

# image similarity: mean absolute per-channel difference below this many intensity levels
SIMILARITY_MAX_MEAN_DIFF = 12.0


@njit(cache=True)
def image_similar(a, b):
    """PSP's per-pixel similarity: two RGB images match when their mean abs difference is small."""
    pa, pb = a.pix, b.pix
    tot = 0.0
    n = pa.shape[0]
    limit = SIMILARITY_MAX_MEAN_DIFF * n * 3
    for p in range(n):
        for c in range(3):
            d = float(pa[p, c]) - float(pb[p, c])
            tot += d if d >= 0 else -d
        if tot >= limit:
            return False
    return tot < limit


@njit(cache=True, inline="always")
def _mix(x):
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def make_coin(selectivity):
    """A probabilistic predicate: true for a pseudo-random fraction `selectivity` of (a.id, b.id)
    pairs, deterministic so that every strategy and the oracle agree."""
    threshold = np.uint64(min(int(selectivity * 2.0 ** 64), 2 ** 64 - 1))

    @njit
    def coin(a, b):
        x = _mix(np.uint64(a.id) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(b.id))
        return x < threshold

    return coin


def make_costly_coin(selectivity):
    """The probabilistic predicate at the cost of the similarity UDF: it compares every pixel of
    the two images (no early exit), then answers as make_coin does. Join selectivity is set,
    work per pair is an image comparison's (PSP's experiments with expensive predicates)."""
    threshold = np.uint64(min(int(selectivity * 2.0 ** 64), 2 ** 64 - 1))

    @njit
    def costly_coin(a, b):
        pa, pb = a.pix, b.pix
        tot = 0.0
        for p in range(pa.shape[0]):
            for c in range(3):
                tot += abs(float(pa[p, c]) - float(pb[p, c]))
        x = _mix(np.uint64(a.id) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(b.id))
        return x < threshold and tot >= 0.0

    return costly_coin


@njit(cache=True)
def band10(a, b):
    """The band-join benchmark's predicate as a UDF: |x - a| < 10 and |y - b| < 10."""
    return abs(float(a.x) - float(b.a)) < 10.0 and abs(float(a.y) - float(b.b)) < 10.0
