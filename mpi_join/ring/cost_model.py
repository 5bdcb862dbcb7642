"""The cost model of a PSP ring (pipelined state partitioning): how ring length N trades
per-node join work against hops, and how to slice the windows over the ring.

Terms (all times in seconds, rates in tuples/s, windows in seconds):
  lam[k], W[k], S[k]  arrival rate, window and join selectivity of the k-th probing step, in the
                      join order of an input tuple (k = 0 .. M-2: the M-1 other streams)
  Tj                  time to join (compare) one pair of tuples
  Ti, Tp              time to insert / purge one tuple of a state
  Ts                  processing time to send and receive one tuple
  Tn                  one network hop's latency
  N                   ring length (operators); M the number of streams

Equations (numbered as in the PSP design):
  (1) L_C   = Ti + Tp + Tj * sum_{k=2..M} prod_{i=1..k-1} lam_i W_i S_i     one tuple, one node
      L_PSP = L_C + Ts N (1 + sum_{k=2..M-1} prod_{i=1..k-1} lam_i W_i S_i)  one tuple, the ring
  (2) L_PSP ~ L_C (1 + Ts N / (lam W Tj))        with equal rates, windows and selectivities
  (3) mu    = 1 / L_PSP                          service rate of the ring
  (4) O_PSP = O_S N / (1 + Ts N / (lam W Tj))    output rate (O_S: one node's)
  (5) tau   = (N-1)/2 Tn + max(L_C/N + Ts L_C / (lam W Tj), M N Tn)    average response latency
  (6) Band >= tuple_size / (Tj min_i lam_i W_i / N)                      bandwidth that hides hops
Pure functions, no MPI: the planner and the adaptive ring both call them.
"""
import math

import numpy as np


def _prefix_products(lam, W, S):
    """prod_{i=1..k-1} lam_i W_i S_i for k = 2 .. M (the intermediate results per probing step)."""
    out, p = [], 1.0
    for l, w, s in zip(lam, W, S):
        p *= l * w * s
        out.append(p)
    return out


def l_c(lam, W, S, Tj, Ti=0.0, Tp=0.0):
    """(1): the work of one input tuple on one node."""
    return Ti + Tp + Tj * sum(_prefix_products(lam, W, S))


def l_c_steps(steps, Ti=0.0, Tp=0.0):
    """(1) for probes that scan: steps are (lam, W, S, Tj, indexed) in join order. A step is
    reached by the intermediate results of the steps before it (prod lam W S); an indexed step
    (equi key) costs Tj per result it finds (lam W S, as (1) counts), a scanning step (band
    without an index, UDF) compares with its whole window (lam W) at Tj per pair."""
    total, reach = 0.0, 1.0
    for lam, W, S, Tj, indexed in steps:
        total += reach * Tj * lam * W * (S if indexed else 1.0)
        reach *= lam * W * S
    return Ti + Tp + total


def l_psp(lam, W, S, Tj, Ts, N, Ti=0.0, Tp=0.0):
    """(1): the work of one input tuple over a ring of N, transmission of the tuple and of its
    intermediate results included."""
    inter = _prefix_products(lam, W, S)[:-1]        # k = 2 .. M-1: results that travel on
    return l_c(lam, W, S, Tj, Ti, Tp) + Ts * N * (1 + sum(inter))


def l_psp_uniform(Lc, lam, W, Tj, Ts, N):
    """(2), with equal rates, windows and selectivities."""
    return Lc * (1 + Ts * N / (lam * W * Tj))


def service_rate(Lpsp):
    """(3)."""
    return 1.0 / Lpsp


def output_rate(Os, lam, W, Tj, Ts, N):
    """(4): grows with N, towards Os lam W Tj / Ts."""
    return Os * N / (1 + Ts * N / (lam * W * Tj))


def latency(Lc, lam, W, Tj, Ts, Tn, N, M):
    """(5): average response latency of a ring of N."""
    return (N - 1) / 2 * Tn + max(Lc / N + Ts * Lc / (lam * W * Tj), M * N * Tn)


def best_length(Lc, lam, W, Tj, Ts, Tn, M, n_max):
    """The N in 1..n_max with the lowest latency (5), by enumeration (exact on integers)."""
    return min(range(1, n_max + 1), key=lambda n: (latency(Lc, lam, W, Tj, Ts, Tn, n, M), n))


def closed_form_lengths(Lc, lam, W, Tj, Ts, Tn, M):
    """(N1, N2) of the closed form: N1 where the node's work equals the hops of M rounds,
    L_C/N1 + Ts L_C/(lam W Tj) = M N1 Tn; N2 where half the ring's hops equal the node's join
    work, (N2-1)/2 Tn = L_C/N2. The latency is lowest near min(N1, N2)."""
    c = Ts * Lc / (lam * W * Tj)
    n1 = (c + math.sqrt(c * c + 4 * M * Tn * Lc)) / (2 * M * Tn)
    n2 = (Tn + math.sqrt(Tn * Tn + 8 * Tn * Lc)) / (2 * Tn)
    return n1, n2


def bandwidth_bound(tuple_size, Tj, lam, W, N):
    """(6): bytes/s the links need so that sending a tuple hides behind probing a slice."""
    return tuple_size / (Tj * min(l * w for l, w in zip(lam, W)) / N)


def initial_lengths(streams, Lc, Tj, Ts, Tn, M, n_max):
    """Ring length per stream for streams of different rates and windows (the initial slicing
    heuristic): visit the streams by lam W S_avg ascending and give each the best length (5) for
    its own rate and window. `streams` is [(name, lam, W, S_avg)]; returns {name: N}."""
    out = {}
    for name, lam, W, _ in sorted(streams, key=lambda s: (s[1] * s[2] * s[3], s[0])):
        out[name] = best_length(Lc, lam, W, Tj, Ts, Tn, M, n_max)
    return out


def balanced_bounds(ages, window, n):
    """Slice boundaries [0 = b_0 < b_1 < ... < b_n = window] of one stream's window so that each
    of the n operators holds about the same number of tuples (the join work is proportional to
    it). `ages` are the tuples' current ages (now - ts), each in [0, window). The ranges
    [b_k, b_{k+1}) abut: the head starts at 0 and the tail ends at the window."""
    ages = np.sort(np.asarray(ages, np.float64))
    if n <= 0:
        raise ValueError("a ring has at least one operator")
    if not len(ages):
        return [window * k / n for k in range(n + 1)]
    inner = [float(ages[(len(ages) * k) // n]) for k in range(1, n)]
    bounds = [0.0] + inner + [float(window)]
    for k in range(1, n + 1):                 # never decreasing, even with repeated ages
        bounds[k] = max(bounds[k], bounds[k - 1])
    return bounds
