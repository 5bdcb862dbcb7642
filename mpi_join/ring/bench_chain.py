"""`mpi-join bench handshake --case max-rate`: the maximum sustainable per-stream rate of a chain,
by bisection, for each chain length, and per-tuple latency at 80% of it, beside the single-core
oracle measured in the same run (as the original prototype's find-max-rate script did).

A rate is sustainable when a run at it is never overloaded: the replay never falls more than
`overload_after` behind schedule (master/driver.py). Each probe replays `seconds` of input at
the rate under test on the `band` workload (|x - a| < 10 and |y - b| < 10, about 1 match in
250,000 pairs) and checks the result against the oracle. Comparisons are counted exactly: each
tuple is compared with every tuple of the other stream its window holds (window.index_ranges).
"""
import os
import tempfile

from ..tools.bench import oracle_rate, run_verified, print_table, set_option, set_param
from ..config import load_job
from ..storage.staged import read_staged
from ..strategies import check_strategy
from ..storage.input_stats import comparisons
from ..tools.workloads import make


def max_rate(strategy, ranks=(2, 3, 4), seconds=3.0, window="1s", lo=500.0, hi=80000.0, steps=7, workdir=None,
             params=None):
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="mpi-join-max-rate-")
        workdir = tmp.name
    print(f"{strategy}: maximum sustainable rate per stream by bisection ({steps} steps in [{lo:g}, {hi:g}]), "
          f"band workload, windows {window}, {seconds:g} s of input per probe; then latency at 80% of it",
          flush=True)
    rows, best = [], lo
    for r in ranks:
        w = r - 1
        good, bad = lo, hi
        for step in range(steps):
            rate = (good * bad) ** 0.5 if step else lo          # geometric bisection, after a check at lo
            s, comps = _probe(strategy, r, rate, seconds, window, os.path.join(workdir, f"n{r}-{step}"), params)
            ok = s["ranks"][0].get("overloaded") is None
            print(f"  {w} worker{'s' if w > 1 else ''}: {rate:8,.0f} tuples/s per stream: "
                  f"{'sustained' if ok else 'overloaded'} (max lag {s['ranks'][0].get('max_lag_s', 0):.2f} s)",
                  flush=True)
            if step == 0 and not ok:
                break
            if ok:
                good = rate
            else:
                bad = rate
        best = max(best, good)
        s, comps = _probe(strategy, r, 0.8 * good, seconds, window, os.path.join(workdir, f"n{r}-lat"), params)
        lat = s["latency_ms"]
        per_core = comps / s["wall_s"] / w
        rows.append((f"{strategy} ({w} worker{'s' if w > 1 else ''})", f"{good:,.0f}", f"{0.8 * good:,.0f}",
                     f"{lat['mean']:.2f}", f"{lat['p50']:.2f}", f"{lat['p99']:.2f}", f"{per_core:.3g}"))
    # the single-core oracle, as fast as it goes, on the input of the largest rate found (its
    # windows hold what the chains' windows held there)
    job_path = make("band", os.path.join(workdir, "oracle"), tuples=int(2 * best * seconds), rate=best,
                    window=window, strategy=strategy)
    job = check_strategy(load_job(job_path))
    o_rate, o_s, _ = oracle_rate(job)
    o_comps = comparisons(job, read_staged(job))
    head = ("", "max rate /stream", "at 80%", "mean ms", "p50 ms", "p99 ms", "comparisons/s/core")
    rows.append((f"oracle (1 core, input at {best:,.0f}/s, as fast as it goes)", f"{o_rate / 2:,.0f}", "-", "-",
                 "-", "-", f"{o_comps / o_s:.3g}"))
    print_table(head, rows)
    print("results equal the oracle in every run")
    if tmp:
        tmp.cleanup()
    return rows


def _probe(strategy, ranks, rate, seconds, window, d, params):
    n = max(2, int(2 * rate * seconds))
    path = make("band", d, tuples=n, rate=rate, window=window, strategy=strategy)
    set_option(path, "run", "batch_size", "64")
    set_option(path, "run", "flush_interval", '"5ms"')
    set_option(path, "run", "overload_after", '"0.5s"')
    for k, v in (params or {}).items():
        set_param(path, k, v)
    job = check_strategy(load_job(path))
    s = run_verified(path, d, job, ranks, rate, None)
    return s, comparisons(job, read_staged(job))


def run_case(nprocs, workdir, strategy="handshake", **_):
    return max_rate(strategy, ranks=tuple(nprocs) or (2, 3, 4), workdir=workdir)


def run_case_llhj(nprocs, workdir, **_):
    return max_rate("llhj", ranks=tuple(nprocs) or (2, 3, 4), workdir=workdir)
