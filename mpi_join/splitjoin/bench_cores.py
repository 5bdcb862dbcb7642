"""`mpi-join bench splitjoin --case cores`: the comparison of SplitJoin's Figures 12 and 13 at
this machine's scale. For k join cores (`-n` values; default 1 2 3 4), `splitjoin` (k + 2 ranks),
`handshake` and `llhj` (k + 1 ranks) run the same band workload with the nested-loop local join,
in the same run:

- throughput: the input replayed as fast as it goes, tuples/s;
- average visiting latency: the mean production delay (a result's write time minus the arrival
  of its newer tuple) with the input paced at half the slowest of the three throughputs at that
  k, so all three see the same rate, and batches flushed every 5 ms (the default 50 ms would
  hide what a hop costs).

Every run is checked against the oracle. A model calibrated on costs measured in the same run
predicts both curves, on this machine (P cores shared by all ranks) and on dedicated cores up to
256:

- c, seconds per comparison: the single-core oracle's (window.index_ranges counts them); W, the
  comparisons per tuple;
- per-tuple CPU of each rank from the 1-core runs' metrics (cpu_s / tuples): the driver's d, a
  core's t0 besides comparing (receive, store, pass on, punctuate, merge: its CPU minus c W),
  and the rest's e (splitjoin's combiner);
- throughput: every core sees every tuple and compares it with 1/k of the window, so on
  dedicated cores X(k) = 1 / max(d, t0 + c W / k, e); with N ranks on P < N cores they also
  share the CPU: X(k) = min(that, P / (d + k t0 + c W + e));
- delay L(k) = a + h hops(k), a and h fitted per strategy over the measured points (least
  relative squares), with hops: splitjoin 2 d(k) (down the distribution tree and up the merge tree, d(k)
  the levels of a breadth-first tree of k cores with fanout b, about log_b k), handshake k (a
  new tuple meets the oldest of the other stream at the far end of the chain), llhj 1 (fast-
  forwarded to every segment at once; a is its mean). h is what a hop costs in each design: a
  pass-through forward in splitjoin's trees, a wait in each segment until the chain moves on in
  handshake join.
"""
import os

from ..tools.bench import oracle_rate, run_verified, print_table, set_option, set_param, work_dir
from ..config import load_job
from ..storage.input_stats import comparisons
from ..storage.staged import read_staged
from .. import strategies
from ..tools.workloads import make

STRATEGIES = ("splitjoin", "handshake", "llhj")
MODEL_CORES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FLUSH_MS = 5          # the paced runs flush a batch every 5 ms, so batching does not hide what a hop costs


def hops(strategy, k, fanout=2):
    """The strategy's delay model in hops at k join cores (its registry entry's `hops`)."""
    return strategies.get(strategy).load("hops")(k, {"fanout": fanout})


def ranks_for(strategy, k):
    """Ranks that give the strategy k join cores: its fewest has one."""
    return k + strategies.get(strategy).min_ranks - 1


def rank_costs(summary, compare_s):
    """(d, t0, e): CPU seconds per tuple of the driver, of the busiest core besides its
    `compare_s` of comparing, and of the other ranks (splitjoin's combiner), from a run's metrics."""
    n = max(summary["tuples"], 1)
    d = t0 = e = 0.0
    for r in summary["ranks"]:
        per = r["cpu_s"] / n
        if r["rank"] == 0:
            d = per
        elif r["role"] == "combiner":
            e += per
        else:
            t0 = max(t0, per - compare_s)
    return d, max(t0, 0.0), e


def fit_delay(points, strategy, fanout):
    """points: [(k, seconds)] -> (a, h) of L = a + h hops(k), least squares on the relative error
    (the delays span two orders of magnitude across k), h >= 0. a is an intercept: it may be
    negative when a design's delay grows faster than its hops from one core to two."""
    import numpy as np
    x = np.array([hops(strategy, k, fanout) for k, _ in points], float)
    y = np.array([sec for _, sec in points], float)
    if len(set(x)) < 2:
        return float(y.mean()), 0.0
    w = 1.0 / np.maximum(y, 1e-9)
    a, h = np.linalg.lstsq(np.stack([w, x * w], axis=1), np.ones_like(y), rcond=None)[0]
    if h < 0:
        return float(y.mean()), 0.0
    return float(a), float(h)


def run(cores=(1, 2, 3, 4), workdir=None, tuples=100000, event_rate=4000.0, window="4s", fanout=2):
    workdir, tmp = work_dir(workdir, "mpi-join-bench-cores-")
    print(f"splitjoin against handshake and llhj on 1 to {max(cores)} join cores: band workload, {tuples:,} tuples "
          f"at {event_rate:g}/s per stream event time, windows {window}, nested-loop local joins; splitjoin on k + 2 "
          f"ranks (driver, k cores, combiner; fanout {fanout}), the chains on k + 1", flush=True)
    print(f"this machine has {os.cpu_count()} cores: runs on more ranks than that are oversubscribed (marked *)",
          flush=True)
    path = make("band", os.path.join(workdir, "oracle"), tuples=tuples, rate=event_rate, window=window,
                strategy="splitjoin")
    job = load_job(path)
    o_tps, o_s, o_n = oracle_rate(job)
    comps = comparisons(job, read_staged(job))
    c = o_s / comps
    w = comps / tuples
    print(f"oracle: {o_tps:,.0f} tuples/s, {comps / o_s:.3g} comparisons/s, {w:,.0f} comparisons per tuple", flush=True)
    thr, lat, jobs, summaries = {}, {}, {}, {}
    for k in cores:
        for s in STRATEGIES:
            d = os.path.join(workdir, f"{s}-{k}")
            jp = make("band", d, tuples=tuples, rate=event_rate, window=window, strategy=s)
            set_param(jp, "local_join", "scan")
            if "fanout" in strategies.get(s).params:
                set_param(jp, "fanout", fanout)
            j = jobs[s, k] = load_job(jp)
            print(f"bench: {s} on {k} core{'s' if k > 1 else ''} ({ranks_for(s, k)} ranks), as fast as it goes",
                  flush=True)
            summaries[s, k] = run_verified(jp, d, j, ranks_for(s, k), None, o_n)
            thr[s, k] = summaries[s, k]["tuples_per_s"]
        pace = 0.5 * min(thr[s, k] for s in STRATEGIES) / 2
        for s in STRATEGIES:
            j = jobs[s, k]
            set_option(j.path, "run", "flush_interval", f'"{FLUSH_MS}ms"')
            print(f"bench: {s} on {k} core{'s' if k > 1 else ''} at {pace:,.0f} tuples/s per stream", flush=True)
            summary = run_verified(j.path, os.path.dirname(j.path), j, ranks_for(s, k), pace, o_n)
            lat[s, k] = summary["latency_ms"]["mean"] / 1e3
    costs = {s: rank_costs(summaries[s, min(cores)], c * w / min(cores)) for s in STRATEGIES}
    fits = {s: fit_delay([(k, lat[s2, k]) for (s2, k) in lat if s2 == s], s, fanout) for s in STRATEGIES}
    cpus = os.cpu_count() or 1

    def model_x(s, k, cores_available=None):
        d, t0, e = costs[s]
        x = 1.0 / max(d, t0 + c * w / k, e, 1e-12)
        if cores_available is not None and cores_available < ranks_for(s, k):
            x = min(x, cores_available / (d + k * t0 + c * w + e))
        return x

    def model_l(s, k):
        a, h = fits[s]
        return a + h * hops(s, k, fanout)

    rows, err_x, err_l = [], [], []
    for k in cores:
        for s in STRATEGIES:
            over = "*" if ranks_for(s, k) > cpus else ""
            mx, ml = model_x(s, k, cpus), model_l(s, k)
            err_x.append(abs(mx - thr[s, k]) / thr[s, k])
            err_l.append(abs(ml - lat[s, k]) / max(lat[s, k], 1e-9))
            rows.append((f"{s} k={k}{over}", f"{thr[s, k]:,.0f}", f"{mx:,.0f}", f"{lat[s, k] * 1e3:.2f}",
                         f"{ml * 1e3:.2f}"))
    print("\nmeasured against the model (* oversubscribed: more ranks than cores)")
    print_table(("", "tuples/s", "model", "mean delay ms", "model"), rows)
    print(f"model: c = {c * 1e9:.3f} ns per comparison, W = {w:,.0f} comparisons per tuple; per tuple (us) "
          + "; ".join(f"{s} d {costs[s][0] * 1e6:.2f}, t0 {costs[s][1] * 1e6:.2f}, e {costs[s][2] * 1e6:.2f}"
                      for s in STRATEGIES))
    print("delay: " + "; ".join(f"{s} a {fits[s][0] * 1e3:.2f} ms, h {fits[s][1] * 1e3:.3f} ms per hop"
                                for s in STRATEGIES))
    print(f"model error on the measured points: throughput {100 * sum(err_x) / len(err_x):.0f}% on average "
          f"(calibrated on the 1-core runs' CPU, predicted for {cpus} shared cores), delay "
          f"{100 * sum(err_l) / len(err_l):.0f}% (fitted on these points)")
    print("\nthe model on dedicated cores, up to 256 (throughput tuples/s; mean delay ms)")
    print_table(("cores",) + tuple(f"{s} X" for s in STRATEGIES) + tuple(f"{s} L" for s in STRATEGIES),
                [(str(k),) + tuple(f"{model_x(s, k):,.0f}" for s in STRATEGIES)
                 + tuple(f"{model_l(s, k) * 1e3:.2f}" for s in STRATEGIES) for k in MODEL_CORES])
    print(f"delay grows as 2 ceil(log_{fanout} k) hops for splitjoin, k hops for handshake, 1 for llhj; "
          f"results equal the oracle in every run")
    if tmp:
        tmp.cleanup()
    return {"throughput": {f"{s}/{k}": v for (s, k), v in thr.items()},
            "delay_s": {f"{s}/{k}": v for (s, k), v in lat.items()}, "c": c, "w": w,
            "costs": costs, "delay_fit": fits}


def run_case(nprocs, workdir, **_):
    """-n values are join cores here."""
    return run(tuple(nprocs) or (1, 2, 3, 4), workdir)
