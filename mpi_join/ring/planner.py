"""`mpi-join plan JOB`: the PSP cost model (cost_model.py) fed with what this job and this machine
measure, and what it predicts for each ring length.

Measured, in this process, on a sample of the staged input (the first `sample` tuples):
  T_j   seconds to evaluate the job's conditions on one pair (per stream pair, then averaged over
        the probing steps of the join orderings)
  S     fraction of sampled pairs that satisfy each stream pair's conditions (the selectivities;
        they also give the join orderings, most selective first)
  T_s   seconds to pack and unpack one tuple into a message (a lower bound: MPI's copy is not in it)
  lam   each stream's arrival rate (tuples / event-time second, from the manifest)
  W     each window in seconds (a count window: its tuples over the stream's rate)
Given: T_n, one hop's latency (default 50 us, a shared-memory MPI message; set --tn on a network).
"""
import time
from dataclasses import replace

import numpy as np

from ..master.source import Source
from ..join.predicate import binary_parts
from ..join.range_join import pair_mask
from ..runtime.wire import pack, unpack
from ..storage.input_stats import rates_and_windows
from . import cost_model as cm
from .selectivity import estimate_selectivity
from .psp_router import auto_orderings, parse_ordering


def measure(job, sample=2000, pairs=2000):
    """Everything the model needs that the job and this machine can tell (see the docstring)."""
    M = len(job.streams)
    src = Source(replace(job, run=replace(job.run, batch_size=sample, rate=None)))
    batches = src.next_epoch()
    lam, W = rates_and_windows(job)
    sel, tried = estimate_selectivity(job.predicate, batches)
    Tj = np.zeros((M, M))
    rng = np.random.default_rng(0)
    for m in range(M):
        for j in range(M):
            if m < j and job.predicate.between(m, j) and len(batches[m]) and len(batches[j]):
                ia = rng.integers(0, len(batches[m]), pairs)
                ib = rng.integers(0, len(batches[j]), pairs)
                pair_mask(job.predicate, m, j, batches[m], batches[j], ia[:4], ib[:4])     # compile
                t = time.perf_counter()
                pair_mask(job.predicate, m, j, batches[m], batches[j], ia, ib)
                Tj[m, j] = Tj[j, m] = (time.perf_counter() - t) / pairs
    t = time.perf_counter()
    n = 0
    for _ in range(5):
        buf = pack([0, 0], batches)
        unpack(buf, [b.dtype for b in batches])
        n += sum(len(b) for b in batches)
    Ts = (time.perf_counter() - t) / max(1, n)
    size = float(np.mean([b.dtype.itemsize for b in batches]))
    given = parse_ordering(job.strategy.params.get("ordering", "auto"), [s.name for s in job.streams]) \
        if job.strategy.params.get("ordering", "auto") != "auto" else {}
    orderings = auto_orderings(job.predicate, M, sel, given)
    return {"lam": lam, "W": W, "sel": sel, "tried": tried, "Tj": Tj, "Ts": Ts, "tuple_size": size, "orderings": orderings,
            "names": [s.name for s in job.streams], "pred": job.predicate}


def model(meas, Tn):
    """Per-tuple work L_C, the uniform rate/window/join time the latency equation takes, the
    results per input tuple, and per-stream (lam, W, S_avg)."""
    lam, W, sel, Tj, names = meas["lam"], meas["W"], meas["sel"], meas["Tj"], meas["names"]
    M = len(lam)
    Lcs, tjs, outs, weights = [], [], [], []
    for i, order in meas["orderings"].items():
        bound, steps = [i], []
        for j in order:
            linked = [m for m in bound if Tj[m, j] > 0]
            s = float(np.prod([sel[m][j] for m in linked])) if linked else 1.0
            indexed = any(binary_parts(meas["pred"], m, j)[0] for m in linked)
            steps.append((lam[j], W[j], s, float(np.mean([Tj[m, j] for m in linked])) if linked else 0.0, indexed))
            bound.append(j)
        tj = float(np.mean([st[3] for st in steps]))
        Lcs.append(cm.l_c_steps(steps))
        tjs.append(tj)
        outs.append(float(np.prod([st[0] * st[1] * st[2] for st in steps])))
        weights.append(lam[i])
    w = np.asarray(weights) / sum(weights)
    Lc, tj, per_tuple = float(np.dot(w, Lcs)), float(np.dot(w, tjs)), float(np.dot(w, outs))
    S_avg = {names[k]: float(np.mean([sel[k][j] for j in range(M) if j != k and Tj[k, j] > 0] or [1.0]))
             for k in range(M)}
    return {"Lc": Lc, "Tj": max(tj, 1e-12), "lam": float(np.mean(lam)), "W": float(np.mean(W)), "M": M,
            "per_tuple": per_tuple, "arrival": float(sum(lam)), "S_avg": S_avg}


def plan_lines(job, n_max, Tn=50e-6, Ts=None, meas=None):
    """Lines of the plan for rings of 1..n_max operators, and what they came from."""
    meas = meas or measure(job)
    if Ts is not None:
        meas = dict(meas, Ts=Ts)
    md = model(meas, Tn)
    Lc, lam, W, Tj, M, Tsv = md["Lc"], md["lam"], md["W"], md["Tj"], md["M"], meas["Ts"]
    names = meas["names"]
    out = ["model: the PSP ring's cost model (mpi_join/ring/cost_model.py, equations 1 to 6; README \"psp\"), for "
           "strategy psp: every probe scans its slice, so work per tuple grows with the window"]
    if job.predicate.equi or job.predicate.band:
        out.append("caveat: this job's predicate has an equi or band condition, which the ring joins through an "
                   "index, not a scan: T_j below is per candidate pair, and the capacity column leaves out the "
                   "per-message and per-result costs that bound an index join; read it as an upper bound, and "
                   "measure with `mpi-join bench psp`")
    out.append("measured on a sample of the staged input:")
    for k, n in enumerate(names):
        out.append(f"  {n}: {meas['lam'][k]:,.1f} tuples/s, window {meas['W'][k]:g} s, join order "
                   f"{'>'.join([n] + [names[j] for j in meas['orderings'][k]])}")
    for m in range(M):
        for j in range(m + 1, M):
            if meas["Tj"][m, j] > 0:
                n = meas["tried"][m][j]
                said = (f"selectivity {meas['sel'][m][j]:.4g} ({n:,} sampled pairs)" if meas["sel"][m][j] > 0 else
                        f"selectivity below {1 / n:.2g} (no match among {n:,} sampled pairs; the model uses 0)")
                out.append(f"  {names[m]}~{names[j]}: {said}, T_j {meas['Tj'][m, j] * 1e6:.3g} us per pair")
    out.append(f"  T_s {Tsv * 1e6:.3g} us per tuple (pack + unpack), T_n {Tn * 1e6:.3g} us per hop (given), "
               f"{md['per_tuple']:,.4g} results per input tuple")
    out.append(f"  L_C {Lc * 1e3:.4g} ms: one input tuple's join work on one operator (1; a scanning probe "
               f"compares with the whole slice, an equi index only with its matches)")
    out.append("")
    head = ("N", "L_PSP ms (1)", "capacity tuples/s (3)", "latency ms (5)", "output results/s (4)", "")
    rows = []
    Os = md["per_tuple"] / Lc if Lc > 0 else float("inf")
    for n in range(1, n_max + 1):
        lp = cm.l_psp_uniform(Lc, lam, W, Tj, Tsv, n)
        cap = n * cm.service_rate(lp)
        lat = cm.latency(Lc, lam, W, Tj, Tsv, Tn, n, M)
        o = cm.output_rate(Os, lam, W, Tj, Tsv, n)
        note = "overloaded: arrivals exceed capacity" if md["arrival"] > cap else ""
        rows.append((str(n), f"{lp * 1e3:.4g}", f"{cap:,.0f}", f"{lat * 1e3:.4g}", f"{o:,.0f}", note))
    wd = [max(len(r[k]) for r in rows + [head]) for k in range(len(head))]
    for r in [head] + rows:
        out.append("  ".join(c.rjust(wd[k]) if k < len(head) - 1 else c for k, c in enumerate(r)).rstrip())
    best = cm.best_length(Lc, lam, W, Tj, Tsv, Tn, M, n_max)
    n1, n2 = cm.closed_form_lengths(Lc, lam, W, Tj, Tsv, Tn, M)
    out.append("")
    out.append(f"recommended ring length: N = {best} (lowest latency (5) for N <= {n_max}; closed form "
               f"N1 = {n1:.1f}, N2 = {n2:.1f}): mpiexec -n {best + 1}")
    bw = cm.bandwidth_bound(meas["tuple_size"], Tj, meas["lam"], meas["W"], best)
    out.append(f"bandwidth bound (6) at N = {best}: {bw / 1e6:,.3g} MB/s per link hides sending behind probing")
    streams = [(names[k], meas["lam"][k], meas["W"][k], md["S_avg"][names[k]]) for k in range(M)]
    lengths = cm.initial_lengths(streams, Lc, Tj, Tsv, Tn, M, n_max)
    out.append("initial slicing (streams of different rates and windows): ring length per stream "
               + ", ".join(f"{k} = {v}" for k, v in lengths.items()))
    return out, {"best": best, "meas": meas, "model": md}
