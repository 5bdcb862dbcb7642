"""`mpi-join bench-suite`: every strategy on the shared workloads, side by side in one run.

For each strategy, each workload it can run (`band`: |x - a| < 10 and |y - b| < 10; `equi`:
uniform keys; time windows of `window`) and each worker count (ranks other than rank 0):
- the maximum sustainable rate per stream, found by bracketing and geometric bisection: a rate
  is sustained when the replay at it never falls 0.25 s behind schedule (run.overload_after,
  master/driver.py) and the p99 production delay stays under 1 s (MAX_DELAY_MS), each probe
  replaying `seconds` of input and checked against the oracle;
- production delay p50 and p99, and the peak memory of every rank, at 80% of that rate;
- the result count (equal to the oracle's in every probe, or the suite stops).
Beside them, on each workload's input at its highest rate found: the single-core oracle (the
baseline of every ratio) and DuckDB computing the same result set at rest (peers.py), its set
compared with the oracle's. Where the ranks outnumber this machine's cores the figures are
marked oversubscribed.

Writes RESULTS/results.json (everything, every probe; cases.json grows case by case while it
runs), RESULTS/results.md (the tables) and
RESULTS/<workload>-rate.png, <workload>-p99.png."""
import json
import os
import time

from .bench import run_verified, oracle_timed, set_option, set_param
from ..config import load_job
from ..errors import JobError
from ..storage.checksums import dtype_text
from ..strategies import check_strategy, label as case_name, parse_label

WORKLOADS = {"band": {"window": "1s"}, "equi": {"window": "1s", "uniform_keys": 20000}}
WINDOWS_S = {"band": 1.0, "equi": 1.0}                   # the windows above, in seconds (scaling_model)
CORES = os.cpu_count() or 1


def plan(strategies_, workloads, workers):
    """[(case name, workload, workers, ranks)] the suite runs: a workload when the strategy can
    evaluate its predicate, a worker count when the strategy can run on that many ranks; the
    variants a strategy's registry entry names follow it."""
    from .. import strategies
    out = []
    for name in strategies_:
        info = strategies.get(name)
        runs = [(w, {}) for w in workloads] + [(w, p) for w, p in info.variants if w in workloads]
        for w, params in runs:
            if w not in info.predicates or info.requires - {w} or not (info.streams[0] <= 2 <= info.streams[1]):
                continue
            for k in workers:
                if k + 1 >= info.min_ranks:
                    out.append((case_name(name, params), w, k, k + 1))
    return out


def _job(strategy, workload, rate, seconds, d, params=None):
    from .workloads import make
    spec = WORKLOADS[workload]
    n = max(200, int(2 * rate * seconds))
    path = make(workload, d, tuples=n, rate=rate, window=spec["window"], strategy=strategy,
                uniform_keys=spec.get("uniform_keys"))
    set_option(path, "run", "batch_size", "4096")          # a batch is what arrives in 5 ms (at most 4096)
    set_option(path, "run", "flush_interval", '"5ms"')
    set_option(path, "run", "overload_after", '"0.25s"')
    for k, v in (params or {}).items():
        set_param(path, k, v)
    return path, check_strategy(load_job(path))


class OracleCache:
    """The oracle's results of the last few inputs, by a digest of the job's join semantics and
    its staged arrays: cases at other worker counts probe the same rates, and the oracle (74 s on
    the band input at 128,000 tuples/s per stream here) need not run again on identical input."""

    def __init__(self, keep=6):
        self.keep, self.items = keep, {}
        self.timings = {}              # input digest -> the oracle's time on it (every ratio's baseline)
        self.last = None               # the timing of the input asked for last
        self._warm = set()

    def get(self, job, arrays):
        """The oracle's result of `job` on `arrays` (its staged input), timed (wall and CPU) the
        first time that input is seen, after compiling its kernels on a prefix."""
        import hashlib
        sem = repr((job.predicate, [(s.name, s.window) for s in job.streams]))
        h = hashlib.sha256(sem.encode())
        for a in arrays:
            h.update(dtype_text(a.dtype).encode())
            h.update(memoryview(a).cast("B"))
        key = h.hexdigest()
        if key not in self.items:
            while len(self.items) >= self.keep:
                self.items.pop(next(iter(self.items)))
            self.items[key], wall, cpu = oracle_timed(job, arrays, warm=sem not in self._warm)
            self._warm.add(sem)
            self.timings[key] = {"input": key[:16], "tuples": int(sum(len(a) for a in arrays)),
                                 "wall_s": wall, "cpu_s": cpu, "results": int(len(self.items[key]))}
        self.last = self.timings[key]
        return self.items[key]


ORACLE = OracleCache()


MAX_DELAY_MS = 1000.0


def probe(strategy, workload, ranks, rate, seconds, d, params=None, stop=True, max_delay_ms=MAX_DELAY_MS):
    """One paced run at `rate` per stream, checked against the oracle: (sustained, summary).
    Sustained: the replay kept its schedule and the p99 production delay stayed under
    `max_delay_ms` (a chain can keep the schedule for seconds by queueing inside it; a delay
    that grows to seconds is overload too). With `stop`, an overloaded run stops there
    (run.stop_when_overloaded) instead of working through input it cannot keep up with:
    (False, None)."""
    path, job = _job(strategy, workload, rate, seconds, d, params)
    if stop:
        set_option(path, "run", "stop_when_overloaded", "true")
    try:
        s = run_verified(path, d, job, ranks, rate, None, expected=lambda arrays: ORACLE.get(job, arrays))
    except JobError as e:
        if stop and "overloaded" in str(e):
            return False, None
        raise
    s["oracle"] = dict(ORACLE.last, job=path)        # the oracle on this very input
    return s["ranks"][0].get("overloaded") is None and s["latency_ms"]["p99"] <= max_delay_ms, s


def rank_costs(summary):
    """What the scaling model calibrates on: each rank's role, input tuples and CPU seconds over
    the run's wall time (cpu_s / wall_s is its utilisation)."""
    return [{"role": r.get("role"), "tuples_in": r.get("tuples_in", 0), "cpu_s": round(r.get("cpu_s", 0.0), 4),
             "wall_s": round(r.get("wall_s", 0.0), 4)} for r in summary["ranks"]]


def same_input(rate, summary, streams=2):
    """The max-rate probe against the oracle on its own input: tuples/s over the oracle's."""
    o = summary["oracle"]
    per_s = o["tuples"] / o["wall_s"]
    return {"oracle_tuples_per_s": round(per_s), "vs_oracle": float(f"{streams * rate / per_s:.4g}"), "input": o["input"]}


def cpu_per_tuple(summary):
    """CPU seconds of all ranks together per input tuple, over the single-core oracle's on the
    same input (the CPU target: at most 1.5); load-independent, unlike a rate on a busy machine."""
    o = summary["oracle"]
    n = max(summary["tuples"], 1)
    ours = sum(r.get("cpu_s", 0.0) for r in summary["ranks"]) / n
    base = o["cpu_s"] / max(o["tuples"], 1)
    return {"cpu_us_per_tuple": round(ours * 1e6, 3), "oracle_cpu_us_per_tuple": round(base * 1e6, 3),
            "cpu_over_oracle": round(ours / base, 2) if base > 0 else None}


def state_memory(ranks):
    """Window state at its peak, summed over the ranks (MB), and its ratio to the raw bytes of the
    tuples held then (the memory target: at most 1.5)."""
    held = sum(r.get("peak_state_bytes", 0) for r in ranks)
    raw = sum(r.get("raw_bytes_at_peak", 0) for r in ranks)
    return {"state_mb": round(held / 2**20, 2), "state_over_raw": round(held / raw, 2) if raw else None}


def max_rate(try_rate, start, lo, hi, steps, factor=2.0):
    """The largest rate `try_rate(rate)` sustains: step up (or down) from `start` by `factor`
    until the outcome flips, then bisect geometrically until the bracket is as narrow as
    `steps` bisections of a factor-2 bracket make it (2^(1/2^steps)). A later case starts from
    a close rate, and a factor of sqrt(2) there often saves a probe at the same precision.
    Returns (rate, [(rate, ok)])."""
    seen = []

    def t(r):
        ok = try_rate(r)
        seen.append((r, ok))
        return ok
    r = min(max(start, lo), hi)
    if t(r):
        good, bad = r, None
        while bad is None and good < hi:
            r = min(good * factor, hi)
            if t(r):
                good = r
            else:
                bad = r
        if bad is None:
            return good, seen
    else:
        good, bad = None, r
        while good is None and bad > lo:
            r = max(bad / factor, lo)
            if t(r):
                good = r
            else:
                bad = r
        if good is None:
            return 0.0, seen
    narrow = 2.0 ** (1.0 / 2 ** steps) * (1 + 1e-9)
    while bad / good > narrow:
        r = (good * bad) ** 0.5
        if t(r):
            good = r
        else:
            bad = r
    return good, seen


# a strategy's first case starts here, on the grid 2,000 x 2^k: most strategies sustain between
# 40,000 and 400,000 tuples/s per stream on two cores, and an overloaded probe stops early, so
# this takes fewer probes than doubling up from 2,000 (later cases start from the last maximum)
FIRST_RATE = 64000.0
# the highest rate tried (`--ceiling`): hash sustains 362,000-400,000 tuples/s per stream on equi
# here, and a probe past a strategy's rate stops early, so trying up to 800,000 costs one probe
CEILING = 800000.0

MARKER = ".mpi-join-bench-suite"


def claim(out, overwrite=False):
    """`out` as an absolute path (a relative one is relative to where the user is), made this
    suite's: a non-empty directory that an earlier suite did not write is refused unless
    `overwrite`, and one inside the installed package always."""
    from ..storage.paths import contains, real
    out = os.path.abspath(out)
    pkg = real(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))        # the mpi_join package
    if contains(pkg, real(out)):
        raise JobError(f"--out {out}: inside the installed mpi-join package {pkg}; a suite writes and deletes its "
                       f"runs there: choose a directory of your own")
    if os.path.exists(out) and not os.path.isdir(out):
        raise JobError(f"--out {out}: exists and is not a directory")
    if os.path.isdir(out) and os.listdir(out) and not os.path.exists(os.path.join(out, MARKER)) and not overwrite:
        raise JobError(f"--out {out}: exists, is not empty and was not written by mpi-join bench-suite; choose "
                       f"another directory or pass --overwrite")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, MARKER), "w") as f:
        f.write("written by mpi-join bench-suite\n")
    return out


def run(out, strategies_=None, workloads=("band", "equi"), workers=(1, 2, 3, 4), seconds=2.0, steps=2,
        lo=200.0, hi=CEILING, progress=print, spark=True, overwrite=False, flink=True):
    from .. import strategies
    names = list(strategies_ or strategies.names())
    cases = plan(names, workloads, workers)
    if not cases:
        raise JobError("bench-suite: no strategy can run these workloads on these worker counts")
    out = claim(out, overwrite)
    work = os.path.join(out, "work")
    t_start = time.perf_counter()
    progress(f"bench-suite: {len(cases)} cases ({', '.join(names)} on {', '.join(workloads)}, "
             f"{', '.join(map(str, workers))} worker ranks), {seconds:g} s of input per probe; this machine has "
             f"{CORES} cores")
    records, best_rate = [], {}
    start = {}
    for i, (name, w, k, ranks) in enumerate(cases, 1):
        t0 = time.perf_counter()
        strategy, params = parse_label(name)
        d = os.path.join(work, _dirname(name, w, k))
        last = {}

        def try_rate(rate):
            ok, s = probe(strategy, w, ranks, rate, seconds, os.path.join(d, f"r{rate:.0f}"), params)
            last[rate] = s
            progress(f"  [{i}/{len(cases)}] {name}, {w}, {k} worker{'s' if k > 1 else ''}: {rate:,.0f}/s per stream "
                     f"{'sustained' if ok else 'overloaded'}")
            return ok
        rate, seen = max_rate(try_rate, start.get((name, w), FIRST_RATE), lo, hi, steps,
                              factor=2.0 ** 0.5 if (name, w) in start else 2.0)
        start[(name, w)] = max(rate, lo)
        rec = {"strategy": name, "workload": w, "workers": k, "ranks": ranks, "oversubscribed": ranks > CORES,
               "max_rate": round(rate), "at_ceiling": rate >= hi, "probes": [[round(r), ok] for r, ok in seen]}
        if rate > 0:
            rec.update(same_input(rate, last[rate]), peer_job=last[rate]["oracle"]["job"])
        if rate > 0 and w == "band":            # the nested-loop work the sustained rate stands for
            rec["comparisons_per_s_core"] = _comparisons(os.path.join(d, f"r{rate:.0f}")) / seconds / min(k, CORES)
        if rate > 0:
            _, s = probe(strategy, w, ranks, 0.8 * rate, seconds, os.path.join(d, "at80"), params, stop=False)
            lat = s["latency_ms"]
            rec.update(p50_ms=lat["p50"], p99_ms=lat["p99"], results=s["results"],
                       peak_rss_mb=max(r.get("peak_rss_mb", 0) for r in s["ranks"]),
                       rss_by_rank=[round(r.get("peak_rss_mb", 0), 1) for r in s["ranks"]],
                       window_tuples_peak=max((r.get("peak_window_tuples", 0) for r in s["ranks"]), default=0),
                       **state_memory(s["ranks"]), **cpu_per_tuple(s), ranks_at80=rank_costs(s))
            best_rate[w] = max(best_rate.get(w, (0, strategy)), (rate, strategy))
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        records.append(rec)
        with open(os.path.join(out, "cases.json"), "w") as f:      # so far, should the suite be stopped
            json.dump(records, f, indent=1)
        progress(f"  [{i}/{len(cases)}] {name}, {w}, {k} worker{'s' if k > 1 else ''}: max {rate:,.0f}/s per stream"
                 + (f", at 80%: p50 {rec['p50_ms']:.1f} ms, p99 {rec['p99_ms']:.1f} ms" if rate else "")
                 + f" ({rec['seconds']:.0f} s)")
    baselines = {w: _baselines(w, best_rate[w][0], best_rate[w][1], seconds, os.path.join(work, f"baseline-{w}"),
                               progress) for w in workloads if w in best_rate}
    peers = same_input_peers(records, os.path.join(work, "peers"), progress, spark, flink)
    result = {"machine": _machine(), "seconds_per_probe": seconds, "cases": records, "baselines": baselines,
              "peers": peers, "wall_s": round(time.perf_counter() - t_start, 1)}
    write_outputs(result, out)
    progress(f"bench-suite: {result['wall_s']:.0f} s; wrote {os.path.join(out, 'results.json')}, results.md and plots")
    return result


DUCKDB_MAX_TUPLES = {"band": 60000}     # DuckDB's band join (IEJoin under the window's OR) grows as
                                        # the square of the input: 40 s on 120,000 tuples here


def _dirname(name, w, k):
    return f"{name.replace('[', '-').replace(']', '').replace('=', '-')}-{w}-{k}"


def _shape(name):
    from .. import strategies
    try:
        return strategies.get(parse_label(name)[0]).shape
    except JobError:
        return ""


def write_outputs(result, out):
    """results.json (with the scaling model fitted to the cases), results.md and the plots."""
    from . import scaling_model
    result["model"] = scaling_model.fit(result, _shape, WINDOWS_S)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(result))
    plots(result, out)


def rerender(out):
    """Fit the model and write results.md and the plots again from OUT/results.json; cases run
    before the suite kept each rank's costs take them from the run's metrics under OUT/work."""
    from ..runtime.metrics import load_run, read_json
    result = read_json(os.path.join(out, "results.json"), "the suite's results")
    for c in result["cases"]:
        if c.get("max_rate") and not c.get("ranks_at80"):
            d = os.path.join(out, "work", _dirname(c["strategy"], c["workload"], c["workers"]), "at80")
            runs = sorted(x for x in os.listdir(d) if x.startswith("out-")) if os.path.isdir(d) else []
            if runs:
                c["ranks_at80"] = rank_costs({"ranks": load_run(os.path.join(d, runs[-1]))[1]})
    write_outputs(result, out)
    return result


def peers_again(out, spark=True, flink=True, progress=print):
    """Run the peers again on the inputs of OUT's finished cases (kept under OUT/work) and write
    the outputs again: each peer run replaces that peer's figures; the others are kept."""
    from ..runtime.metrics import read_json
    result = read_json(os.path.join(out, "results.json"), "the suite's results")
    got = same_input_peers(result["cases"], os.path.join(out, "work", "peers"), progress, spark, flink)
    for key, p in got.items():
        kept = result["peers"].setdefault(key, {})
        kept.update({k: v for k, v in p.items() if k not in ("spark", "flink") or v})
    write_outputs(result, out)
    return result


FLINK_MAX_TUPLES = {"band": 20000}      # Flink's interval join without a key runs at parallelism 1 and
                                        # compares every pair in the window: 9 s on 20,000 band tuples here


def same_input_peers(records, work, progress, spark=True, flink=True):
    """Spark Structured Streaming (equi) and Apache Flink on the input of every case's max-rate
    probe, once per distinct input, each result set checked against the oracle's (Flink's by a
    count and checksums it computes itself). Flink runs its SQL interval join at parallelism =
    this machine's cores on equi; on band (no key: parallelism 1) on one input of at most
    FLINK_MAX_TUPLES per workload, marked as not the case's input. Sets each record's vs_spark
    and vs_flink; returns {input: {"spark": ..., "flink": ...}}."""
    from ..config import load_job
    from ..storage.staged import read_staged
    from .flink_peer import checksums
    inputs = {}
    for r in records:
        if r.get("peer_job"):
            inputs.setdefault(r["input"], (r["workload"], r["peer_job"], r["strategy"], r["max_rate"]))
    out, flink_cases, small = {}, [], {}
    for key, (w, path, strategy, rate) in inputs.items():
        job = load_job(path)
        arrays = read_staged(job)
        n = sum(len(a) for a in arrays)
        out[key] = {"workload": w, "tuples": n, "input_rate": rate}
        if spark and w == "equi":
            from .peers import spark_stream_join
            progress(f"  Spark Structured Streaming on the {w} input {key} ({n:,} tuples)...")
            got, st = spark_stream_join(job, os.path.join(work, f"spark-{key}"))
            out[key]["spark"] = {**_peer(got, ORACLE.get(job, arrays), st["seconds"], n, rate), **st}
        if flink and w not in FLINK_MAX_TUPLES:
            flink_cases.append((key, w, job, arrays, CORES))
        elif flink and w not in small:
            small_rate = FLINK_MAX_TUPLES[w] / 4.0           # 2 streams, 2 s of input
            _, job_s = _job(strategy, w, small_rate, 2.0, os.path.join(work, f"flink-{w}-input"))
            small[w] = f"{w}-small"
            flink_cases.append((small[w], w, job_s, read_staged(job_s), 1))
            out[small[w]] = {"workload": w, "tuples": FLINK_MAX_TUPLES[w], "input_rate": round(small_rate)}
    if flink_cases:
        from .flink_peer import time_flink
        progress(f"  Apache Flink (SQL interval join) on {len(flink_cases)} input(s)...")
        try:
            got = time_flink([(c, j, a, p) for c, _, j, a, p in flink_cases], os.path.join(work, "flink"))
        except JobError as e:
            if "make flink" not in str(e):
                raise
            progress(f"  {e}: Flink's figures are left out")
            got = {}
        for cid, w, job, arrays, p in flink_cases:
            if cid not in got:
                continue
            n = sum(len(a) for a in arrays)
            g = got[cid]
            fl = {"seconds": round(g["seconds"], 3), "tuples": n, "tuples_per_s": round(n / g["seconds"]),
                  "parallelism": p, "checksums": g["checksums"],
                  "equals_oracle": g["checksums"] == checksums(ORACLE.get(job, arrays))}
            out[cid]["flink"] = fl
            progress(f"  Flink on {cid}: {fl['tuples_per_s']:,} tuples/s at parallelism {p}, result set "
                     f"{_equal(fl)} the oracle's")
    for r in records:
        p = out.get(r.get("input"), {})
        for name in ("spark", "flink"):
            peer = p.get(name) or (out.get(small.get(r["workload"]), {}).get(name) if name == "flink" else None)
            if peer and r.get("max_rate"):
                r[f"vs_{name}"] = round(2 * r["max_rate"] / peer["tuples_per_s"], 2)
                r[f"{name}_same_input"] = name in p
                r[f"{name}_equal"] = peer["equals_oracle"]
    return out


def _baselines(workload, rate, strategy, seconds, d, progress):
    """The peers at rest on the input of the workload's highest sustained rate: the single-core
    oracle (timed once; its result is the reference) and DuckDB at rest (band: on a smaller input
    at a lower rate when the full one is beyond DUCKDB_MAX_TUPLES)."""
    from ..join.oracle import run_oracle
    from ..storage.input_stats import comparisons
    from ..storage.staged import read_staged
    _, job = _job(strategy, workload, rate, seconds, d)
    arrays = read_staged(job)
    expect = ORACLE.get(job, arrays)           # that input is the best case's max-rate probe's: checked there
    o_s = ORACLE.last["wall_s"]
    n = sum(len(a) for a in arrays)
    out = {"input_rate": round(rate), "tuples": n, "oracle_tuples_per_s": round(n / o_s), "oracle_s": round(o_s, 3),
           "results": int(len(expect)), "oracle_comparisons_per_s": comparisons(job, arrays) / o_s}
    progress(f"  {workload}: single-core oracle {out['oracle_tuples_per_s']:,} tuples/s on {n:,} tuples")
    cap = DUCKDB_MAX_TUPLES.get(workload)
    if cap and n > cap:
        small = cap / (2 * seconds)
        _, job_d = _job(strategy, workload, small, seconds, d + "-duckdb")
        arrays_d = read_staged(job_d)
        expect_d, rate_d = run_oracle(job_d, arrays_d), small
    else:
        job_d, arrays_d, expect_d, rate_d = job, arrays, expect, rate
    try:
        from .peers import duckdb_join
        got, d_s = duckdb_join(job_d)
    except ImportError:
        progress("  DuckDB is not installed (pip install duckdb): its figures are left out")
    else:
        out.update(duckdb=_peer(got, expect_d, d_s, sum(len(a) for a in arrays_d), rate_d))
        progress(f"  {workload}: DuckDB at rest {out['duckdb']['tuples_per_s']:,} tuples/s on "
                 f"{out['duckdb']['tuples']:,} tuples, {_equal(out['duckdb'])} the oracle's result set")
    return out


def _comparisons(d):
    """Pairs a nested-loop window join compares on the input staged in `d`."""
    from ..config import load_job
    from ..storage.input_stats import comparisons
    from ..storage.staged import read_staged
    job = load_job(os.path.join(d, "job.toml"))
    return comparisons(job, read_staged(job))


def _peer(got, expect, seconds, n, rate):
    from ..storage.results import compare
    missing, extra, (dups, _) = compare(expect, got)
    return {"seconds": round(seconds, 3), "tuples": int(n), "input_rate": round(rate),
            "tuples_per_s": round(n / max(seconds, 1e-9)),
            "equals_oracle": not (len(missing) or len(extra) or len(dups))}


def _equal(peer):
    return "equal to" if peer["equals_oracle"] else "DIFFERENT from"


def _machine():
    import platform
    return {"host": platform.node(), "cores": CORES, "python": platform.python_version(),
            "machine": platform.machine(), "date": time.strftime("%Y-%m-%d")}


def _ratio(r, key):
    return "-" if r.get(key) is None else f"{r[key]:.2f}"


def _peers_line(result, w, b):
    """The peers on the workload's densest input (the oracle, DuckDB at rest) and Spark and
    Flink where they ran: each with its result set against the oracle's."""
    peers = [f"single-core oracle {b['oracle_tuples_per_s']:,} tuples/s"]
    if w == "band":
        peers[0] += f" ({b['oracle_comparisons_per_s']:.3g} comparisons/s)"
    p = b.get("duckdb")
    if p:
        where = "" if p["tuples"] == b["tuples"] else f" (on {p['tuples']:,} tuples at {p['input_rate']:,}/s)"
        peers.append(f"DuckDB at rest {p['tuples_per_s']:,} tuples/s{where}, result set {_equal(p)} the oracle's")
    ins = [v for v in (result.get("peers") or {}).values() if v.get("workload") == w]
    dense = max(ins, key=lambda v: v["tuples"], default={})
    for key, label in (("spark", "Spark Structured Streaming"), ("flink", "Apache Flink SQL interval join")):
        src = next((v for v in [dense] + ins if key in v), b if key in b else None)   # b: a suite before peers
        if src:
            q = src[key]
            lat = (f", micro-batches p50 {q['batch_ms_p50']:.0f} ms and p99 {q['batch_ms_p99']:.0f} ms"
                   if "batch_ms_p50" in q else f" at parallelism {q['parallelism']}" if "parallelism" in q else "")
            peers.append(f"{label} {q['tuples_per_s']:,} tuples/s on {src['tuples']:,} tuples at "
                         f"{src['input_rate']:,}/s{lat}, result set {_equal(q)} the oracle's")
    return "; ".join(peers)


def markdown(result):
    m = result["machine"]
    lines = [f"Machine: {m['cores']} cores ({m['machine']}), Python {m['python']}, {m['date']}; "
             f"{result['seconds_per_probe']:g} s of input per probe; suite {result['wall_s']:.0f} s.", ""]
    for w, b in result["baselines"].items():
        cmp_ = w == "band"
        rows = [x for x in result["cases"] if x["workload"] == w]
        lines += [f"### {w}", "",
                  f"Peers on the densest input, at {b['input_rate']:,} tuples/s per stream ({b['tuples']:,} tuples, "
                  f"{b['results']:,} results): " + _peers_line(result, w, b) + ".", "",
                  "| strategy | workers | max rate /stream | vs oracle | CPU /tuple vs oracle | vs Spark | vs Flink |"
                  + (" comparisons /s /core |" if cmp_ else "")
                  + " p50 ms at 80% | p99 ms at 80% | peak RSS MB | state MB | state / raw | probes |",
                  "|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if cmp_ else "") + "---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            star = " (oversubscribed)" if r["oversubscribed"] else ""
            vs_o = r.get("vs_oracle", r["max_rate"] / (b["oracle_tuples_per_s"] / 2))
            mark = {k: ("" if r.get(f"{k}_same_input", True) else "*") + ("" if r.get(f"{k}_equal", True) else " (wrong)")
                    for k in ("spark", "flink")}
            ge = "≥ " if r.get("at_ceiling") else ""         # the search's ceiling: a lower bound
            lines.append(f"| {r['strategy']} | {r['workers']}{star} | {ge}{r['max_rate']:,} | {ge}{vs_o:.2f} | "
                         f"{_ratio(r, 'cpu_over_oracle')} | {_lower(ge, _ratio(r, 'vs_spark'))}{mark['spark']} | "
                         f"{_lower(ge, _ratio(r, 'vs_flink'))}{mark['flink']} |"
                         + (f" {r.get('comparisons_per_s_core', 0):.3g} |" if cmp_ else "")
                         + (f" {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['peak_rss_mb']:.0f} | {r['state_mb']:.1f} | "
                            f"{_num(r['state_over_raw'])} |" if r["max_rate"] else " - | - | - | - | - |")
                         + f" {len(r['probes'])} |")
        lines.append("")
    lines += ["state: the window state at its peak, summed over the ranks, spare capacity and indexes included; "
              "state / raw: its ratio to the staged bytes of the tuples it held then.", "",
              "vs oracle: the strategy's sustained tuples/s over the single-core oracle's on the same input (the "
              "max-rate probe's, which the oracle checks). CPU /tuple vs oracle: the CPU seconds of all ranks "
              "together per input tuple at 80% of that rate, over the oracle's CPU seconds per tuple on that "
              "probe's input. vs Spark, vs Flink: the sustained tuples/s over the peer's on the same input "
              "(* : Flink on band runs without a key at parallelism 1, on a smaller input it can finish; "
              "(wrong): the peer's result set differs from the oracle's there). "
              "comparisons /s /core: the pairs a nested-loop join compares on the input at the sustained rate, "
              "per second of input and per core used (an indexed join compares fewer). ≥: the case sustained "
              "the highest rate tried (--ceiling), a lower bound. Every probe's results equal the oracle's.", ""]
    from .scaling_model import markdown as model_md
    return "\n".join(lines) + "\n" + model_md(result.get("model") or [])


def _lower(ge, text):
    return text if text == "-" else ge + text


def _num(x):
    return "-" if x is None else f"{x:.2f}"


def plots(result, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for w in result["baselines"]:
        rows = [r for r in result["cases"] if r["workload"] == w and r["max_rate"]]
        for key, label, fname in (("max_rate", "max sustainable tuples/s per stream", "rate"),
                                  ("p99_ms", "p99 production delay at 80% (ms)", "p99")):
            fig, ax = plt.subplots(figsize=(6, 4))
            for name in dict.fromkeys(r["strategy"] for r in rows):
                pts = [(r["workers"], r[key]) for r in rows if r["strategy"] == name]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
            if key == "max_rate":
                ax.axhline(result["baselines"][w]["oracle_tuples_per_s"] / 2, ls="--", c="gray", label="oracle (1 core)")
            ax.axvspan(CORES - 0.5, max([r["workers"] for r in rows] + [CORES]) + 0.5, color="0.9",
                       label="oversubscribed")
            ax.set_xlabel("worker ranks")
            ax.set_ylabel(label)
            ax.set_yscale("log")
            ax.set_title(f"{w} workload")
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(os.path.join(out, f"{w}-{fname}.png"), dpi=100)
            plt.close(fig)
