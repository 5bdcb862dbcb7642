"""The numba kernels of the local join's indexes (slaves/local_join.py): merging two sorted
runs, probing a run by equi key or band (or by key within row ranges: range_join.KeyIndex),
scanning a band or a window, and writing result rows.
The pair-emitting ones (equi_run, range_run, band_run, scan_band, visible_pairs) record a pair with the
same three lines as join/kernels.py's, written out in each on purpose: as a helper, even one
numba inlines, the band probes ran 3.5 to 24 times slower (kernels.collect has the figures)."""
import numpy as np
from numba import njit

from . import kernels as K

MAX_SPAN = (1 << 32) - 1           # the largest uint32 offset from a run's base


@njit(cache=True)
def merge_runs(k1, p1, b1, v1, k2, p2, b2, v2, live_from, ko, po, vo):
    """Merge two runs sorted by key (then row), dropping rows below live_from; the offsets out
    are from live_from; each entry's carried value too when `vo` has room for them (the runs
    carry values: sorted_runs.SortedRuns). -1 if an offset does not fit in 32 bits."""
    a = b = m = 0
    carry = vo.shape[0] > 0
    while a < k1.shape[0] or b < k2.shape[0]:
        if b >= k2.shape[0] or (a < k1.shape[0] and (k1[a] < k2[b] or (k1[a] == k2[b] and
                                                                        p1[a] + b1 <= p2[b] + b2))):
            k, p = k1[a], p1[a] + b1
            v = v1[a] if carry else 0
            a += 1
        else:
            k, p = k2[b], p2[b] + b2
            v = v2[b] if carry else 0
            b += 1
        if p >= live_from:
            if p - live_from > MAX_SPAN:
                return -1
            ko[m] = k
            po[m] = p - live_from
            if carry:
                vo[m] = v
            m += 1
    return m


@njit(cache=True)
def result_rows(a_seq, a_tin, b_seq, b_tin, ia, ib, out_sa, out_sb, out_tin, off, side):
    """Write pairs (ia, ib), whose seqs are a_seq and b_seq (one per pair: find_pairs `seqs`),
    as results from `off` on: both seqs, and the arrival of the newer tuple (what its production
    delay is measured from), a_tin[ia] or b_tin[ib]. One pass instead of several gathers.
    `side` -1: the newer by seq; 0 or 1: a's or b's (an `older` window's rows hold no tin: the
    probe's is the newer; the other argument is then a stand-in of the same type, never read)."""
    for k in range(ia.shape[0]):
        sa = a_seq[k]
        sb = b_seq[k]
        out_sa[off + k] = sa
        out_sb[off + k] = sb
        out_tin[off + k] = a_tin[ia[k]] if (sa > sb if side < 0 else side == 0) else b_tin[ib[k]]


@njit(cache=True, inline="always")
def _gallop(run, q0, v):
    """The first position q >= q0 with run[q] >= v, where every entry before q0 is below v:
    doubling steps from q0, then a binary search of the last step. Probes in ascending order
    read a run about in order this way, not from its middle each (a few cache misses a probe)."""
    m = run.shape[0]
    if q0 >= m or run[q0] >= v:
        return q0
    lo, step, hi = q0, 1, q0 + 1
    while hi < m and run[hi] < v:
        lo = hi
        step *= 2
        hi = q0 + step
    if hi > m:
        hi = m
    lo += 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if run[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def equi_run(p_keys, p_h, p_seq, p_coord, p_lo, p_dlo, run_h, run_pos, run_v, xbase, x_keys, x_seq, x_coord, x_lo,
             x_dlo, check, newer, first, split, one_word, order, out_a, out_b, out_v):
    """Probe one run of an equi index: rows of X whose key equals the probe's and whose visibility
    holds (not tested when `check` is false: every row is known to be visible). Entries of expired
    rows (pos < xbase) are skipped. `*_dlo`: added to each side's lo (BinaryJoin.coord_lo).
    `newer`: only rows older than the probe (by seq), tested here while the row is at hand.
    `split`: the rows of X before it are older than every probe, so probe i sees exactly those
    from first[i] on (from 0 when `first` is empty) and they are not read; `one_word`: equal
    hashes are equal keys.
    `order` (when not empty): the probes to take in turn (their hash order). `run_v`: the run's
    carried values (sorted_runs.SortedRuns), copied to `out_v` with each pair when not empty.

    Probes in ascending hash order (ChainedIndex sorts its batch once for all its subindexes;
    `order`) find their entries by galloping on from the last one: the run is read about in
    order, not searched from its middle per probe (a probe of 11 subindexes took a third of the
    time)."""
    n = 0
    nx = x_seq.shape[0]
    m = run_h.shape[0]
    q0 = 0
    has_first = first.shape[0] > 0
    ordered = order.shape[0] > 0
    hprev = p_h[0] if p_h.shape[0] else 0
    carry = run_v.shape[0] > 0
    for k in range(p_h.shape[0]):
        i = order[k] if ordered else k
        h = p_h[i]
        q0 = np.searchsorted(run_h, h) if k == 0 or h < hprev else _gallop(run_h, q0, h)
        hprev = h
        q = q0
        f = first[i] if has_first else 0
        while q < m and run_h[q] == h:
            j = run_pos[q] - xbase
            q += 1
            if j < 0 or j >= nx:
                continue
            if j < split:           # older than every probe: seen from the probe's first row on
                if j < f or not (one_word or K._keys_equal(p_keys, i, x_keys, j, 0)):
                    continue
            elif (newer and (run_v[q - 1] if carry else x_seq[j]) > p_seq[i]) or not (one_word or K._keys_equal(p_keys, i, x_keys, j, 0)) or (
                    check and not K._visible(p_seq[i], p_coord[i], p_lo[i] + p_dlo, x_seq[j], x_coord[j],
                                             x_lo[j] + x_dlo)):
                continue
            if n < out_a.shape[0]:
                out_a[n], out_b[n] = i, j
                if carry:
                    out_v[n] = run_v[q - 1]
            n += 1
    return n


@njit(cache=True)
def range_run(p_h, lo, hi, run_h, run_pos, shift, out_a, out_b):
    """Range probes through one run of a key index (range_join.KeyIndex): for probe i, the rows
    r = run_pos + shift with hash p_h[i] and lo[i] <= r < hi[i]. One key's entries lie in row
    order, so a probe finds its first row by one binary search on (hash, row) and reads on only
    while the rows are in its range (entries of rows gone lie below every lo)."""
    n = 0
    m = run_h.shape[0]
    for i in range(p_h.shape[0]):
        h, a, b = p_h[i], lo[i], hi[i]
        if a >= b:
            continue
        q, e = 0, m
        while q < e:
            mid = (q + e) >> 1
            if run_h[mid] < h or (run_h[mid] == h and np.int64(run_pos[mid]) + shift < a):
                q = mid + 1
            else:
                e = mid
        while q < m and run_h[q] == h:
            r = np.int64(run_pos[q]) + shift
            if r >= b:
                break
            if n < out_a.shape[0]:
                out_a[n], out_b[n] = i, r
            n += 1
            q += 1
    return n


@njit(cache=True, inline="always")
def band_range(v, eps):
    """Candidate range [lo, hi] for |x - v| <= eps evaluated in float64, never narrower than the
    condition: v - eps and v + eps round to nearest, which can land inside the band (0.2 + 0.7 is
    0.8999999999999999 < 0.9 although |0.9 - 0.2| == 0.7 in float64), so both ends are widened by
    a few ulps of the larger magnitude; the exact test then runs on every candidate."""
    slack = (abs(v) + eps) * 1e-15 + 5e-324
    return (v - eps) - slack, (v + eps) + slack


@njit(cache=True)
def band_run(p_band, p_seq, p_coord, p_lo, p_dlo, run_v, run_pos, xbase, x_band, x_seq, x_coord, x_lo, x_dlo, eps,
             closed, check, order, out_a, out_b):
    """Probe one run of a band index (sorted on the first band column): rows of X within every
    band of the probe, visible to each other (tested only when `check`). `order` (when not
    empty): the probes to take in turn. A probe whose band starts at or after the last one's
    gallops on from the last one's place, so probes in ascending first band value (the caller's
    order) read the run about in order, and neighbouring probes' candidates are neighbours."""
    n = 0
    nx = x_seq.shape[0]
    m = run_v.shape[0]
    ordered = order.shape[0] > 0
    q0 = 0
    lo_prev = np.inf
    for k in range(p_band.shape[0]):
        i = order[k] if ordered else k
        v = p_band[i, 0]
        if not np.isfinite(v):      # NaN and +-inf are within no band of anything
            continue
        lo, hi = band_range(v, eps[0])
        q0 = _gallop(run_v, q0, lo) if lo >= lo_prev else np.searchsorted(run_v, lo)
        lo_prev = lo
        q = q0
        while q < m and run_v[q] <= hi:
            j = run_pos[q] - xbase
            q += 1
            if j < 0 or j >= nx:
                continue
            if K._band_ok(p_band, i, x_band, j, eps, closed) and (not check or K._visible(
                    p_seq[i], p_coord[i], p_lo[i] + p_dlo, x_seq[j], x_coord[j], x_lo[j] + x_dlo)):
                if n < out_a.shape[0]:
                    out_a[n], out_b[n] = i, j
                n += 1
    return n


@njit(cache=True)
def scan_band(p_band, p_seq, p_coord, p_lo, p_dlo, x_band, x_seq, x_coord, x_lo, x_dlo, eps, closed, check, out_a,
              out_b):
    """Nested loop over every probe and window row, band conditions checked inline: the
    original handshake join's comparison loop (visibility tested only when `check`). The tight
    loop reads the first band column alone, contiguous, and keeps a superset of its band
    (|a - x| <= eps, NaN out); the rare candidate gets every condition: 3.47e9 comparisons/s
    against 2.06e9 for every condition in the loop (4,096 probes against 25,600 rows here)."""
    n = 0
    x0 = np.ascontiguousarray(x_band[:, 0])
    e0 = eps[0]
    for i in range(p_band.shape[0]):
        a0 = p_band[i, 0]
        for j in range(x0.shape[0]):
            if not abs(a0 - x0[j]) <= e0:
                continue
            if K._band_ok(p_band, i, x_band, j, eps, closed) and (not check or K._visible(
                    p_seq[i], p_coord[i], p_lo[i] + p_dlo, x_seq[j], x_coord[j], x_lo[j] + x_dlo)):
                if n < out_a.shape[0]:
                    out_a[n], out_b[n] = i, j
                n += 1
    return n


@njit(cache=True)
def visible_pairs(p_seq, p_coord, p_lo, p_dlo, x_seq, x_coord, x_lo, x_dlo, i0, i1, check, out_a, out_b):
    """Every pair (i in [i0, i1), j) of probe and window rows in which the newer sees the older
    (every pair, when `check` is false)."""
    n = 0
    for i in range(i0, i1):
        for j in range(x_seq.shape[0]):
            if not check or K._visible(p_seq[i], p_coord[i], p_lo[i] + p_dlo, x_seq[j], x_coord[j], x_lo[j] + x_dlo):
                if n < out_a.shape[0]:
                    out_a[n], out_b[n] = i, j
                n += 1
    return n
