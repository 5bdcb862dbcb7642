"""How selective each pair of streams' conditions are, from sampled rows: the join orderings of
psp's router (psp_router.auto_orderings, on its first batch of three or more streams) and
`mpi-join plan` (planner.py). It evaluates pairs with the join kernels, so it imports numba:
a router imports it only when it measures."""
import time

import numpy as np

from ..join.range_join import pair_mask


def _joined_pairs(pred, rows):
    """The pairs of streams m < j with a condition between them and rows on both sides."""
    for m in range(len(rows)):
        for j in range(m + 1, len(rows)):
            if pred.between(m, j) and len(rows[m]) and len(rows[j]):
                yield m, j


def measure_selectivity(pred, batches, sample=32, seed=0):
    """Fraction of sampled pairs of streams m, j that satisfy every condition between them (1.0
    where there is no condition or no sample)."""
    M = len(batches)
    rng = np.random.default_rng(seed)
    picks = [b[np.sort(rng.choice(len(b), min(sample, len(b)), replace=False))] if len(b) else b for b in batches]
    sel = [[1.0] * M for _ in range(M)]
    for m, j in _joined_pairs(pred, picks):
        A, B = picks[m], picks[j]
        ia, ib = np.repeat(np.arange(len(A)), len(B)), np.tile(np.arange(len(B)), len(A))
        sel[m][j] = sel[j][m] = float(pair_mask(pred, m, j, A, B, ia, ib).mean())
    return sel


def estimate_selectivity(pred, batches, budget_s=0.5, enough=100, max_pairs=1 << 22, seed=0):
    """(selectivity, pairs tried) for every pair of streams m, j with a condition between them:
    the fraction of random pairs of their rows in `batches` that satisfy every condition. Pairs
    are drawn in doubling rounds until `enough` of them match, `max_pairs` are tried or the
    budget is spent: a fixed sample of a few thousand pairs reads 0 for any join rarer than
    that (a narrow band, many keys), and a 0 from `tried` pairs says only "below 1/tried"."""
    M = len(batches)
    rng = np.random.default_rng(seed)
    sel = [[1.0] * M for _ in range(M)]
    tried = [[0] * M for _ in range(M)]
    for m, j in _joined_pairs(pred, batches):
        A, B = batches[m], batches[j]
        hits = n = 0
        chunk, t0 = 1024, time.perf_counter()
        while hits < enough and n < max_pairs and (n == 0 or time.perf_counter() - t0 < budget_s):
            ia, ib = rng.integers(0, len(A), chunk), rng.integers(0, len(B), chunk)
            hits += int(pair_mask(pred, m, j, A, B, ia, ib).sum())
            n += chunk
            chunk = min(2 * chunk, max_pairs - n)
        sel[m][j] = sel[j][m] = hits / n
        tried[m][j] = tried[j][m] = n
    return sel, tried
