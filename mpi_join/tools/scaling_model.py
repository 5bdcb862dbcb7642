"""A throughput and latency model of every strategy, calibrated on a bench suite's measurements,
checked against them, and extrapolated to machines of up to 256 cores.

Each strategy names its shape in the registry (`StrategyInfo.shape`); with k worker ranks:
  share(k)  the fraction of the input tuples the busiest worker processes
  scope(k)  the fraction of the other stream's window one processed tuple is compared against
  hops(k)   the network hops between the driver and the last worker a tuple reaches
  partition  (hash)              share 1/k, scope 1/k, hops 1
  chain      (handshake, llhj, psp)  share 1, scope 1/k, hops k
  tree       (splitjoin)         share 1, scope 1/k, hops log2(k) + 1
  biclique   (one dispatcher, k-1 units, half per side)  share 1/2 + 1/(k-1), scope 2/(k-1), hops 2
  matrix     (a sqrt(k) x sqrt(k) grid of cells)  share 1/sqrt(k), scope 1/sqrt(k), hops 1

Costs, per strategy and workload, from the suite's runs at 80% of the sustained rate (each
rank's CPU seconds and input tuples, bench_suite.rank_costs):
  t   CPU seconds per tuple a worker processes (transport, routing, window upkeep)
  c   CPU seconds per window tuple in a processed tuple's scope (a comparison for a nested-loop
      join; an indexed join's share of its probe)
  d   the driver's CPU seconds per input tuple
The busiest worker's CPU per processed tuple is y = t + c x, with x = lam W scope(k); t and c are
the least-squares line through the measured (x, y), d the mean. With W the window (s), lam the
rate per stream and s sources (run.sources: each reads and routes one part of the input in s),
the sustainable rate solves
  2 lam share(k) (t + c lam W scope(k)) = cpu   and   2 lam d / s = cpu   (the smaller lam)
where cpu = kappa min(1, cores / (k + s)) is a rank's CPU: its share of the machine's cores
(below 1 when the ranks oversubscribe them) times kappa, the one figure fitted on a sustained rate:
measured over modelled at the fewest workers measured. kappa stands for what CPU seconds miss or
count twice (a rank's helper threads, such as its result writer, run on another core); the
other worker counts are the check. Latency at 80%: p50 = a + b hops(k), a and b fitted the same way; b is
the per-hop cost, queueing included. The error reported is |model - measured| / measured at
each measured worker count; beyond the machine, each rank is given a core of its own, and the
cores are split between workers and sources where the modelled rate is highest.
Not modelled: network bandwidth (messages are batches; see `mpi-join plan` for psp's bound)."""
import math
import os

import numpy as np

from ..errors import InputError, JobError

SHAPES = {
    "partition": (lambda k: 1 / k, lambda k: 1 / k, lambda k: 1),
    "chain": (lambda k: 1.0, lambda k: 1 / k, lambda k: k),
    "tree": (lambda k: 1.0, lambda k: 1 / k, lambda k: math.log2(max(k, 1)) + 1),
    "biclique": (lambda k: 0.5 + 1 / max(k - 1, 1), lambda k: 2 / max(k - 1, 2), lambda k: 2),
    "matrix": (lambda k: 1 / math.sqrt(k), lambda k: 1 / math.sqrt(k), lambda k: 1),
}
# how many workers store each window tuple, with k workers: a matrix keeps a tuple in every cell
# of its row (or column); every other shape stores it once, wherever the join reads it from
COPIES = {"partition": lambda k: 1, "chain": lambda k: 1, "tree": lambda k: 1, "biclique": lambda k: 1,
          "matrix": lambda k: math.sqrt(k)}
EXTRAPOLATE = (8, 16, 32, 64, 128, 256)
GOALS = ("throughput", "latency", "memory")


def _fit_line(xs, ys):
    """Least-squares y = a + b x with a, b >= 0 (one point: the line through it and the origin's
    slope 0)."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(xs) < 2 or np.ptp(xs) == 0:
        return float(max(np.mean(ys), 0.0)), 0.0
    b, a = np.polyfit(xs, ys, 1)
    if b < 0:
        return float(max(np.mean(ys), 0.0)), 0.0
    if a < 0:
        return 0.0, float(max(np.dot(xs, ys) / np.dot(xs, xs), 0.0))
    return float(a), float(b)


def calibrate(cases, shape_of, window_s, cores):
    """{(strategy, workload): costs} from the suite's cases that carry ranks_at80."""
    groups = {}
    for c in cases:
        if c.get("max_rate") and c.get("ranks_at80") and shape_of(c["strategy"]):
            groups.setdefault((c["strategy"], c["workload"]), []).append(c)
    out = {}
    for (name, w), cs in groups.items():
        share, scope, hops = SHAPES[shape_of(name)]
        xs, ys, ds, ks, p50 = [], [], [], [], []
        for c in cs:
            k, lam = c["workers"], 0.8 * c["max_rate"]
            ranks = c["ranks_at80"]
            n = max(ranks[0]["tuples_in"], 1)
            workers = [r for r in ranks[1:] if r["cpu_s"] > 0]
            if not workers:
                continue
            xs.append(lam * window_s[w] * scope(k))
            ys.append(max(r["cpu_s"] for r in workers) / (n * share(k)))
            ds.append(ranks[0]["cpu_s"] / n)
            ks.append(hops(k))
            p50.append(c["p50_ms"])
        if not xs:
            continue
        t, cc = _fit_line(xs, ys)
        a, b = _fit_line(ks, p50)
        costs = {"shape": shape_of(name), "t_us": t * 1e6, "c_ns": cc * 1e9, "d_us": float(np.mean(ds)) * 1e6,
                 "p50_base_ms": a, "p50_per_hop_ms": b, "window_s": window_s[w], "points": len(xs), "kappa": 1.0}
        first = min(cs, key=lambda c: c["workers"])
        costs["kappa"] = cpu_needed(costs, first["workers"], first["max_rate"]) / min(1.0, cores / (first["workers"] + 1))
        costs["calibrated_at"] = first["workers"]
        out[(name, w)] = costs
    return out


def _seconds(costs):
    """(t, c, d, W) in seconds."""
    return costs["t_us"] * 1e-6, costs["c_ns"] * 1e-9, costs["d_us"] * 1e-6, costs["window_s"]


def cpu_needed(costs, k, lam):
    """The CPU (in cores) the busiest rank needs at rate `lam` per stream."""
    share, scope, _ = SHAPES[costs["shape"]]
    t, c, d, W = _seconds(costs)
    return max(2 * lam * share(k) * (t + c * lam * W * scope(k)), 2 * lam * d, 1e-12)


def rate(costs, k, cores, sources=1):
    """Modelled sustainable rate per stream at k workers and `sources` sources on `cores` cores."""
    share, scope, _ = SHAPES[costs["shape"]]
    cpu = costs["kappa"] * min(1.0, cores / (k + sources))
    t, c, d, W = _seconds(costs)
    qa, qb = 2 * share(k) * c * W * scope(k), 2 * share(k) * t
    worker = (cpu / qb if qb > 0 else math.inf) if qa <= 0 else (-qb + math.sqrt(qb * qb + 4 * qa * cpu)) / (2 * qa)
    driver = sources * cpu / (2 * d) if d > 0 else math.inf
    return min(worker, driver)


def best_split(costs, n, cores=None):
    """(workers, sources) of n ranks with the highest modelled rate on `cores` cores (default:
    one core each)."""
    return max(((n - s, s) for s in range(1, max(1, n // 2) + 1)),
               key=lambda ws: (rate(costs, ws[0], cores or n, ws[1]), -ws[1]))


def p50_ms(costs, k):
    return costs["p50_base_ms"] + costs["p50_per_hop_ms"] * SHAPES[costs["shape"]][2](k)


def check(costs, cases, name, w, cores):
    """[(k, measured rate, model rate, error)] at the measured worker counts."""
    out = []
    for c in cases:
        if c["strategy"] == name and c["workload"] == w and c.get("max_rate"):
            m = rate(costs, c["workers"], cores)
            out.append((c["workers"], c["max_rate"], m, abs(m - c["max_rate"]) / c["max_rate"],
                        c.get("p50_ms"), p50_ms(costs, c["workers"])))
    return out


def fit(result, shape_of, window_s):
    """The model of a suite's result: costs, its check against the measured points, and its
    predictions with one core per rank up to 256."""
    cores = result["machine"]["cores"]
    cal = calibrate(result["cases"], shape_of, window_s, cores)
    out = []
    for (name, w), costs in sorted(cal.items()):
        pts = check(costs, result["cases"], name, w, cores)
        out.append({"strategy": name, "workload": w, **costs,
                    "check": [{"workers": k, "measured": round(me), "model": round(mo), "error": round(e, 3),
                               "p50_measured_ms": pm, "p50_model_ms": round(pp, 2)} for k, me, mo, e, pm, pp in pts],
                    "mean_error": _mean([p[3] for p in pts if p[0] != costs["calibrated_at"]]),
                    "predicted": [_predicted(costs, n) for n in EXTRAPOLATE]})
    return out


def _predicted(costs, n):
    """The modelled rate on n cores: with one source, and with the best split of the cores
    between workers and sources."""
    w, s = best_split(costs, n)
    return {"cores": n, "workers": n - 1, "rate": round(rate(costs, n - 1, n)), "p50_ms": round(p50_ms(costs, n - 1), 2),
            "sources": s, "rate_sources": round(rate(costs, w, n, s))}


def _mean(xs):
    return round(float(np.mean(xs)), 3) if xs else None


def markdown(models):
    if not models:
        return ""
    lines = ["### Scaling model", "",
             "Calibrated on the runs above at 80% (mpi_join/tools/scaling_model.py: CPU per processed tuple t, per "
             "window tuple in scope c, the driver's per tuple d, p50 per hop); checked against the measured "
             "sustained rates, then one core per rank up to 256.", "",
             "| strategy | workload | t us | c ns | d us | kappa | measured / model at 1..4 workers | error | "
             + " | ".join(f"{n} cores" for n in EXTRAPOLATE) + " |",
             "|---|---|---:|---:|---:|---:|---|---:|" + "---:|" * len(EXTRAPOLATE)]
    for m in models:
        pts = ", ".join(f"{p['measured']:,}/{p['model']:,}" for p in m["check"])
        err = "-" if m["mean_error"] is None else f"{m['mean_error']:.0%}"
        lines.append(f"| {m['strategy']} | {m['workload']} | {m['t_us']:.2f} | {m['c_ns']:.3g} | {m['d_us']:.2f} | "
                     f"{m['kappa']:.2f} | {pts} | {err} | "
                     + " | ".join(f"{p['rate']:,}" + (f" / {p['rate_sources']:,} ({p['sources']} src)"
                                                       if p.get("sources", 1) > 1 else "") for p in m["predicted"]) + " |")
    lines += ["", "error: the mean of |model - measured| / measured at the worker counts kappa was not fitted on "
              "(the first of them). Rates are tuples/s per stream. Past 2 cores the measured points are oversubscribed; the "
              "model gives each rank min(1, cores / ranks) of a core there. A / B (s src): A with one source, B with "
              "the cores split between workers and s sources (run.sources) where the model's rate is highest.", ""]
    return "\n".join(lines)


CALIBRATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.json")


def load_models(path=None):
    """The fitted models of a bench-suite directory (its results.json) or of a models file; by
    default $MPI_JOIN_CALIBRATION's, or the calibration shipped with mpi-join (BENCHMARKS.md's
    run)."""
    p = path or os.environ.get("MPI_JOIN_CALIBRATION") or CALIBRATION
    if os.path.isdir(p):
        p = os.path.join(p, "results.json")
    from ..runtime.metrics import read_json
    data = read_json(p, "a calibration")
    models = data.get("model") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        raise InputError(f"{p}: no fitted scaling model in it (a bench-suite results.json has one under \"model\")")
    for i, m in enumerate(models):
        _check_model(m, f"{p}: model[{i}]")
    return models, (data.get("machine") or {})


# a model's costs: (field, must be above zero); every one a finite number, none negative
_COSTS = (("t_us", False), ("c_ns", False), ("d_us", True), ("kappa", True), ("window_s", True),
          ("p50_base_ms", False), ("p50_per_hop_ms", False))


def _check_model(m, where):
    """A fitted model as `rate` and `p50_ms` read it, or one line naming the field."""
    from .. import strategies
    if not isinstance(m, dict):
        raise InputError(f"{where}: expected an object, got {type(m).__name__}")
    if m.get("shape") not in SHAPES:
        raise InputError(f"{where}.shape: {m.get('shape')!r} is not a shape the model knows ({', '.join(SHAPES)})")
    if m.get("workload") not in ("equi", "band"):
        raise InputError(f"{where}.workload: {m.get('workload')!r}; expected \"equi\" or \"band\"")
    try:
        known = strategies.get(strategies.parse_label(m.get("strategy"))[0]) is not None
    except (TypeError, ValueError, AttributeError):
        known = False
    if not known:
        raise InputError(f"{where}.strategy: {m.get('strategy')!r} is not a strategy of this mpi-join")
    for field, positive in _COSTS:
        v = m.get(field)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v == 0):
            raise InputError(f"{where}.{field}: {v!r}; expected a finite number {'above' if positive else 'at least'} 0")


def job_workload(job):
    """The suite workload whose costs stand for this job: equi when it has an equality condition
    (an index finds the pairs), else band (a band index, or a scan)."""
    return "equi" if "equi" in job.predicate.kinds else "band"


def _as(job, case):
    """`job` run by the case's strategy with its parameters (defaults filled in)."""
    from dataclasses import replace
    from ..config import Strategy
    from ..strategies import check_strategy, parse_label
    name, params = parse_label(case)
    return check_strategy(replace(job, strategy=Strategy(name, params)))


def window_bytes(job, lam, W):
    """The raw bytes of every stream's window at rates `lam` (per stream) and windows `W` (s): what
    one copy of the join's state holds before indexes and spare capacity."""
    return sum(l_ * w * s.dtype.itemsize for l_, w, s in zip(lam, W, job.streams) if math.isfinite(w))


def recommend(job, n, models, lam, W, cores=None, goal=None, state_bytes=None):
    """Lines: for each strategy that can run `job` on n ranks (strategies.check_runnable, its own
    checks included), its modelled sustainable rate, p50 delay and window state on n ranks (one
    core each unless `cores`), the fewest ranks that keep up with rate `lam` per stream with a
    quarter to spare, and the recommendation by `goal`: the highest rate ("throughput"), the
    lowest delay ("latency") or the least state ("memory"), among those that keep up. `lam` None:
    as fast as the input can be replayed (every strategy "keeps up"; the goal defaults to
    throughput, else to latency). If none keeps up, the highest rate. (W: the window, s;
    state_bytes: one copy of the windows' raw bytes, window_bytes.)"""
    from .. import strategies
    goal = goal or ("throughput" if lam is None else "latency")
    if goal not in GOALS:
        raise JobError(f"--goal: expected one of {', '.join(GOALS)}, got {goal!r}")
    w = job_workload(job)
    rows = []                       # (case, rate on n ranks, p50 on n ranks, fewest ranks, costs)
    for m in models:
        if m["workload"] != w:
            continue
        try:
            strategies.check_runnable(_as(job, m["strategy"]), n)
        except JobError:
            continue
        costs = dict(m, window_s=W)
        info = strategies.get(strategies.parse_label(m["strategy"])[0])
        s = job.run.sources                 # the job's sources: s - 1 of the n ranks do not join
        fewest = None if lam is None else next((k + s for k in range(max(1, info.min_ranks - 1), n - s + 1)
                                                if rate(costs, k, cores or k + s, s) >= 1.25 * lam), None)
        rows.append((m["strategy"], rate(costs, n - s, cores or n, s), p50_ms(costs, n - s), fewest, costs))
    if not rows:
        raise JobError(f"{job.path}: no calibrated strategy can run this job on {n} ranks")

    def ranks(r):
        return r[3] or n

    def state(r):
        return COPIES[r[4]["shape"]](ranks(r) - 1) * (state_bytes or 0)

    keep = rows if lam is None else [r for r in rows if r[1] >= 1.25 * lam]
    by = {"throughput": lambda r: (-r[1], r[0]), "latency": lambda r: (p50_ms(r[4], ranks(r) - 1), r[0]),
          "memory": lambda r: (state(r), -r[1], r[0])}[goal]
    best = min(keep, key=by) if keep else max(rows, key=lambda r: r[1])
    target = "as fast as the input can be replayed" if lam is None else f"{lam:,.0f} tuples/s per stream"
    srcs = f" ({job.run.sources} of them sources)" if job.run.sources > 1 else ""
    out = [f"scaling model ({w} costs; mpi_join/tools/scaling_model.py), planned for {target}, window {W:g} s, "
           f"{n} ranks{srcs} on {cores or n} cores, goal: {goal}:",
           f"  {'strategy':<28} {'rate /stream':>14} {'p50 ms':>8} {'state MB':>9}  fewest ranks that keep up "
           f"(rate x 1.25)"]
    for r in sorted(rows, key=lambda x: -x[1]):
        mb = COPIES[r[4]["shape"]](n - 1) * (state_bytes or 0) / 2**20
        out.append(f"  {r[0]:<28} {r[1]:>14,.0f} {r[2]:>8.1f} {mb:>9.1f}  {r[3] if r[3] else '-'}")
    out.append("  (state MB: the windows' raw bytes times the copies a strategy keeps, before indexes and spare "
               "capacity)")
    why = {"throughput": "the highest modelled rate", "latency": "the lowest modelled delay",
           "memory": "the least window state"}[goal]
    if keep:
        out.append(f"recommended: {best[0]} on {ranks(best)} ranks: {why}"
                   + ("" if lam is None else " of those that keep up")
                   + f" (job file: {_strategy_toml(best[0])}{_sources(best[4], ranks(best), cores, job.run.sources, job.run.sources_auto)}; "
                     f"mpi-join run JOB -n {ranks(best)})")
    else:
        out.append(f"recommended: {best[0]} on {n} ranks: no strategy keeps up with {lam:,.0f} tuples/s per "
                   f"stream on {n} ranks here; it comes closest ({best[1]:,.0f})")
    return out, best


GAIN = 1.05      # the planner splits the ranks for more sources when that models at least 5% faster


def _better_split(costs, n, cores, given=1):
    """(sources, rate, rate with `given` sources) of the split of n ranks between workers and
    sources that best_split models fastest, when it models at least GAIN times `given` sources;
    None otherwise: the planner's one rule for run.sources."""
    w, s = best_split(costs, n, cores)
    now, then = rate(costs, n - given, cores or n, given), rate(costs, w, cores or n, s)
    return (s, then, now) if s != given and then > now * GAIN else None


def _sources(costs, n, cores, given, auto=False):
    """The planner's choice of run.sources on n ranks, for the recommendation (_better_split; ""
    when there is none); a job that leaves it "auto" gets it at run time (auto_sources)."""
    split = _better_split(costs, n, cores, given)
    if split is None:
        return ""
    s, then, now = split
    how, base = ("run.sources = \"auto\" takes it", "one source") if auto else (f"[run] sources = {s}",
                                                                              f"run.sources = {given}")
    return (f", {how}: {s} of the {n} ranks read and route the input, {then:,.0f} tuples/s per stream modelled, "
            f"{then / now:.2f}x {base}")


def choose_sources(job, nranks, cores, window_s=None, models=None):
    """run.sources = "auto" (the default): (k, why). k is the number of sources _better_split
    takes for `job` on `nranks` ranks and `cores` cores, with the shipped calibration (or
    `models`) at the job's window `window_s` (seconds); else 1 (and where no model covers the
    job)."""
    from ..strategies import parse_label
    if len(job.streams) != 2:
        return 1, "the scaling model covers two-stream jobs"
    if window_s is not None and not math.isfinite(window_s):
        return 1, "unbounded windows"
    w, name, params = job_workload(job), job.strategy.name, job.strategy.params
    fits = [m for m in (models or load_models()[0]) if m["workload"] == w and parse_label(m["strategy"])[0] == name
            and all(str(params.get(k)) == str(v) for k, v in parse_label(m["strategy"])[1].items())]
    if not fits:
        return 1, f"no calibrated model of {name} on {w}"
    m = max(fits, key=lambda m: len(parse_label(m["strategy"])[1]))       # the most specific
    split = _better_split(dict(m, window_s=window_s) if window_s else m, nranks, cores)
    if split is not None:
        k, then, one = split
        return k, (f"the planner's model of {m['strategy']} on {w}: {then / one:.2f}x one source on {nranks} ranks "
                   f"and {cores} cores")
    return 1, f"more sources would not model {GAIN - 1:.0%} faster on {nranks} ranks and {cores} cores"


def auto_sources(job, nranks, cores):
    """run.sources = "auto" as a run (ranks.py, given it by cli.py) and `explain` resolve it:
    choose_sources at the job's window from its staged statistics, and one source where the
    strategy cannot run with the planner's k (its own checks: psp's count-bounded slices)."""
    from dataclasses import replace
    from ..storage.input_stats import rates_and_windows
    from ..strategies import check_runnable
    try:
        window = max(rates_and_windows(job)[1])
    except (JobError, OSError, KeyError, ValueError):
        window = None
    k, why = choose_sources(job, nranks, cores, window)
    if k > 1:
        try:
            check_runnable(replace(job, run=replace(job.run, sources=k)), nranks)
        except JobError as e:
            k, why = 1, f"the planner's {k} sources cannot run it: {e}"
    return k, why


def _strategy_toml(case):
    from ..strategies import parse_label
    name, params = parse_label(case)
    return "[strategy] " + ", ".join([f'name = "{name}"'] + [f'{k} = "{v}"' for k, v in params.items()])
