"""`mpi-join bench` and `mpi-join demo`: real runs under mpiexec, measured against the oracle."""
import functools
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

from ..errors import JobError


def work_dir(workdir, prefix="mpi-join-bench-"):
    """(the directory to work in, the TemporaryDirectory to clean up when none was given, else None)."""
    if workdir is not None:
        return workdir, None
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    return tmp.name, tmp


def run_mpi(nprocs, job_path, output, quiet=True):
    from ..launch import mpiexec_cmd
    env = dict(os.environ)
    if quiet:
        env["MPI_JOIN_QUIET"] = "1"
    cmd = mpiexec_cmd(nprocs, ["run", job_path, "--output", output])
    p = subprocess.run(cmd, env=env, stdout=None if not quiet else subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines()
        ours = [x for x in lines if x.startswith(("mpi-join: error", "mpi-join: rank"))]   # not a note
        why = ours[0] if ours else (lines[-1] if lines else "")
        raise JobError(f"mpiexec run failed (exit {p.returncode}): {why}")
    with open(os.path.join(output, "metrics", "summary.json")) as f:
        return json.load(f)


def print_table(head, rows, label=True):
    """Print rows under head in aligned columns; with `label` the first column is a left-aligned
    label, every other column right-aligned."""
    w = [max(len(str(r[k])) for r in [head] + list(rows)) for k in range(len(head))]
    for r in [head] + list(rows):
        print("  ".join(str(c).ljust(w[k]) if (label and k == 0) else str(c).rjust(w[k]) for k, c in enumerate(r)))


@functools.cache
def keep_heap():
    """Let glibc keep freed memory for reuse in this process (M_TRIM_THRESHOLD 4 GB, M_TOP_PAD
    256 MB, M_MMAP_THRESHOLD 32 MB): the oracle makes its result arrays, hundreds of MB, at
    once, and fresh mappings' page faults made its CPU per tuple on one equi input vary from
    0.89 to 1.69 us between runs (0.83 to 1.07 with the heap kept). A rank makes small batches
    and showed no difference either way. Once per process; a no-op where there is no glibc."""
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    for option, value in ((-1, 1 << 32), (-2, 1 << 28), (-3, 1 << 25)):
        libc.mallopt(option, value)


def oracle_timed(job, arrays, warm=True):
    """(the oracle's result on `arrays`, its seconds, its CPU seconds), compiled on a small prefix
    first (unless `warm` is false: compiled already) so that the time is the join's; the heap is
    kept between runs (keep_heap), so that the time is not the page faults'."""
    from ..join.oracle import run_oracle
    keep_heap()
    if warm:
        run_oracle(job, [a[:100] for a in arrays])   # compile the kernels outside the timing
    t0, c0 = time.perf_counter(), time.process_time()
    res = run_oracle(job, arrays)
    return res, time.perf_counter() - t0, time.process_time() - c0


def oracle_rate(job):
    """Single-core oracle tuples/s on the job's input (after compiling on a small prefix)."""
    from ..storage.staged import read_staged
    arrays = read_staged(job)
    res, el, _ = oracle_timed(job, arrays)
    n = sum(len(a) for a in arrays)
    return n / el, el, len(res)


def bench(strategy, ranks, tuples, rate, window, skew, params, workdir, uniform_keys=None, replay_rate=None,
          load_fraction=None, repeat=1, workload=None):
    """Time the single-core oracle and `strategy` on each rank count in `ranks`, on the strategy's
    workload (or `workload`), in one run; check every run equals the oracle; print tuples/s, ratios
    against the oracle and production-delay percentiles. With `repeat` > 1 the strategy's runs
    come in that many rounds and the oracle is timed again after each run (when its result is
    checked), so the two alternate on the machine: a single-core baseline moved by 30% within an
    hour here, and one pair of runs shows neither a ratio nor its absence. The table then gives
    each run, and medians over the rounds against the median of the oracle's timings. With
    `load_fraction`, also replay once at that fraction of the sustainable rate (see _steady_rate)
    of the fastest rank count and report its delays."""
    from .. import strategies
    from ..config import load_job
    from .workloads import make
    info = strategies.get(strategy)
    workload = workload or info.workload
    workdir, tmp = work_dir(workdir)
    keys = ("" if workload != "equi" else      # keys and skew apply to the equi workload only
            f", uniform keys over {uniform_keys:,}" if uniform_keys else f", b-model keys with b = {skew}")
    rounds = f", {repeat} rounds" if repeat > 1 else ""
    print(f"workload {workload}: {tuples:,} tuples, {rate:g} tuples/s per stream (event time), window "
          f"{window}{keys}; {strategy} on {', '.join(map(str, ranks))} ranks{rounds}", flush=True)
    job_path = make(workload, workdir, tuples=tuples, rate=rate, window=window, skew=skew, strategy=strategy,
                    uniform_keys=uniform_keys)
    for k, v in params.items():
        set_param(job_path, k, v)
    job = load_job(job_path)
    total = len(ranks) * repeat + bool(load_fraction)
    print(f"bench: the oracle on {tuples:,} tuples (the baseline)", flush=True)
    o_rate, o_s, o_n = oracle_rate(job)
    oracle_s = [o_s]
    rows = [("oracle (1 core)", f"{o_rate:,.0f}", f"{o_s:.2f}", f"{o_n:,}", "-", "-", "-", "1.00")]
    out = {"oracle_tps": o_rate, "runs": {}, "rounds": []}
    k = 0
    for r in range(repeat):
        for n in ranks:
            k += 1
            print(f"bench: run {k}/{total}: {strategy} on {n} ranks" + (f" (round {r + 1})" if repeat > 1 else ""),
                  flush=True)
            s = run_verified(job_path, workdir, job, n, replay_rate, o_n)
            oracle_s.append(s["oracle_s"])
            out["rounds"].append(dict(s, nprocs=n, round=r + 1))
            if repeat == 1:
                out["runs"][n] = s
                rows.append(_row(f"{strategy} ({n} ranks)", s, o_rate))
    if repeat > 1:
        n_in = round(o_rate * o_s)                           # the input's tuples
        rows = median_rows(strategy, ranks, out, oracle_s, n_in, o_n)
        out["oracle_tps"] = o_rate = n_in / statistics.median(oracle_s)
    if load_fraction:
        n = max(out["runs"], key=lambda k: out["runs"][k]["tuples_per_s"])
        average, steady = _steady_rate(out["runs"][n])
        per_stream = load_fraction * steady / len(job.streams)
        print(f"sustainable rate on {n} ranks, over the second half of the input (windows full): "
              f"{steady:,.0f} tuples/s in its slowest quarter ({average:,.0f} on average)", flush=True)
        print(f"bench: run {total}/{total}: {strategy} on {n} ranks at {per_stream:,.0f} tuples/s per stream",
              flush=True)
        s = run_verified(job_path, workdir, job, n, per_stream, o_n)
        out["loaded"] = dict(s, rate_per_stream=per_stream, ranks=n)
        rows.append(_row(f"{strategy} ({n} ranks) at {load_fraction:.0%} = {per_stream:,.0f}/s per stream", s, o_rate))
    print_table(("", "tuples/s", "seconds", "results", "p50 ms", "p90 ms", "p99 ms", "vs oracle"), rows)
    if repeat > 1:
        print(f"medians: the oracle over its {len(oracle_s)} timings (one before the runs, one after each), "
              f"each rank count over its {repeat} rounds; 'range' rows give the lowest and highest ratio of a "
              f"run to the oracle timed right after it")
    print("results equal the oracle in every run")
    if tmp:
        tmp.cleanup()
    return out


def median_rows(strategy, ranks, out, oracle_s, tuples, results):
    """The table's rows for a repeated bench: every run against the oracle timed right after it
    (when its result was checked), then the oracle's median and each rank count's median; the
    median run of each rank count goes into out["runs"] (what --load starts from)."""
    o_med = tuples / statistics.median(oracle_s)
    rows = [("oracle (1 core), each timing", ", ".join(f"{tuples / x:,.0f}" for x in oracle_s), "-", "-", "-",
             "-", "-", "-")]
    for s in out["rounds"]:
        rows.append(_row(f"{strategy} ({s['nprocs']} ranks), round {s['round']}", s, tuples / s["oracle_s"]))
    rows.append(("oracle (1 core), median", f"{o_med:,.0f}", f"{statistics.median(oracle_s):.2f}", f"{results:,}",
                 "-", "-", "-", "1.00"))
    for n in ranks:
        mine = sorted((s for s in out["rounds"] if s["nprocs"] == n), key=lambda s: s["tuples_per_s"])
        mid = mine[(len(mine) - 1) // 2]
        out["runs"][n] = mid
        ratios = [s["tuples_per_s"] * s["oracle_s"] / tuples for s in mine]
        rows.append(_row(f"{strategy} ({n} ranks), median", dict(mid, tuples_per_s=statistics.median(
            s["tuples_per_s"] for s in mine), wall_s=statistics.median(s["wall_s"] for s in mine)), o_med))
        rows.append((f"{strategy} ({n} ranks), range", "-", "-", "-", "-", "-", "-",
                     f"{min(ratios):.2f}-{max(ratios):.2f}"))
    return rows


def bench_sources(strategy, nprocs, tuples, ks, workdir, repeat=3):
    """Parallel sources: the same job with run.sources = k for each k in `ks`, at the same worker
    count (`nprocs` ranks with one source, k - 1 more with k), each run equal to the oracle. CPU
    seconds are load-independent: rank 0's and every source's per input tuple, and their ratio to
    one source's in the same run (the median of `repeat` runs of each k)."""
    import statistics
    from .. import strategies
    from ..config import load_job
    from ..runtime.graph import SOURCE_ROLE
    from ..storage.staged import read_staged
    from .workloads import make
    info = strategies.get(strategy)
    workdir, tmp = work_dir(workdir)
    print(f"workload {info.workload}: {tuples:,} tuples, 20,000 tuples/s per stream (event time), 60s windows, "
          f"uniform keys over 100,000; {strategy} with {nprocs - 1} workers and {', '.join(map(str, ks))} sources, "
          f"{repeat} runs each", flush=True)
    job_path = make(info.workload, workdir, tuples=tuples, rate=20000.0, window="60s", skew=0.7, strategy=strategy,
                    uniform_keys=100_000)
    job = load_job(job_path)
    expected = oracle_timed(job, read_staged(job))[0]
    rows, out = [], {}
    for k in ks:
        set_option(job_path, "run", "sources", str(k))
        runs = []
        for i in range(repeat):
            print(f"bench: {k} source{'s' if k > 1 else ''}, run {i + 1}/{repeat} on {nprocs + k - 1} ranks", flush=True)
            s = run_verified(job_path, workdir, job, nprocs + k - 1, None, len(expected), expected)
            cpu = [r["cpu_s"] / s["tuples"] * 1e6 for r in s["ranks"] if r["role"] in ("driver", SOURCE_ROLE)]
            runs.append({"tps": s["tuples_per_s"], "rank0_us": cpu[0], "max_source_us": max(cpu),
                         "sources_us": sum(cpu)})
        out[k] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    base = out[ks[0]]
    for k in ks:
        m = out[k]
        rows.append((f"{k} source{'s' if k > 1 else ''} ({nprocs + k - 1} ranks)", f"{m['tps']:,.0f}",
                     f"{m['rank0_us']:.3f}", f"{m['rank0_us'] / base['rank0_us']:.2f}", f"{1 / k:.2f}",
                     f"{m['max_source_us']:.3f}", f"{m['sources_us']:.3f}"))
    print_table(("", "tuples/s", "rank 0 us/tuple", f"vs {ks[0]}", "1/k", "busiest source us/tuple",
                 "all sources us/tuple"), rows)
    print("CPU seconds per input tuple (medians); results equal the oracle in every run")
    if tmp:
        tmp.cleanup()
    return out


def bench_memory(strategy, sizes, nprocs, workdir):
    """Rank 0's peak RSS against the staged input's size: one run per size in `sizes` (tuples),
    each equal to the oracle, on uniform keys over 10 M values with 1 s windows so that the
    workers' state stays small and the driver's reading is what grows, if anything does."""
    from .. import strategies
    from ..config import load_job
    from .workloads import make
    info = strategies.get(strategy)
    workdir, tmp = work_dir(workdir)
    print(f"workload {info.workload}: uniform keys over 10,000,000, 1 s windows; {strategy} on {nprocs} ranks; "
          f"rank 0 peak RSS by staged tuples", flush=True)
    rows, base = [], None
    for n in sizes:
        d = os.path.join(workdir, f"mem-{n}")
        job_path = make(info.workload, d, tuples=n, rate=1000.0, window="1s", skew=0.7, strategy=strategy,
                        uniform_keys=10_000_000)
        job = load_job(job_path)
        s = run_verified(job_path, d, job, nprocs, None, None)
        rss = s["ranks"][0]["peak_rss_mb"]
        base = base or rss
        rows.append((f"{n:,}", f"{rss:.0f}", f"{rss / base:.2f}", f"{s['tuples_per_s']:,.0f}"))
        print(f"  {n:>12,} tuples: rank 0 peak RSS {rss:7.1f} MB ({rss / base:.2f} x the smallest)", flush=True)
    print("results equal the oracle in every run")
    if tmp:
        tmp.cleanup()
    return rows


def _steady_rate(summary):
    """(average, sustained) tuples/s over the second half of the input, where the windows are full
    (they fill within the first half unless --window exceeds half the event time). The whole run's
    average overstates what the job can sustain: while windows fill each tuple has fewer partners.
    Even the second half's average does: throughput drifts within a run, and a rate above a slow
    stretch's builds queues there. So the sustained rate is the slowest quarter of the second half,
    a rate the job kept up with in every stretch."""
    marks = summary["ranks"][0].get("released_at") or []
    half = [tuple(m) for m in marks if m[0] >= summary["tuples"] / 2]
    if not half or half[-1][0] < summary["tuples"]:
        half.append((summary["tuples"], summary["wall_s"]))
    if len(half) < 2:
        return summary["tuples_per_s"], summary["tuples_per_s"]
    (n0, t0), (n1, t1) = half[0], half[-1]
    average = (n1 - n0) / max(t1 - t0, 1e-9)
    k = max(1, (len(half) - 1) // 4)
    ends = [(half[i], half[min(i + k, len(half) - 1)]) for i in range(0, len(half) - 1, k)]
    stretches = [(b[0] - a[0]) / max(b[1] - a[1], 1e-9) for a, b in ends if b[0] > a[0]]
    return average, min(stretches, default=average)


def run_verified(job_path, workdir, job, n, replay_rate, expect_n, expected=None):
    """Run `job_path` on `n` ranks and verify it (the bench-case API: every strategy's bench
    runs its cases through this); `expected`: the oracle's result, or a function of the staged arrays giving
    it (verify calls it only once the run has finished, so a run that fails costs no oracle)."""
    from ..storage.verify import verify
    output = os.path.join(workdir, f"out-{n}" + (f"-{replay_rate:.0f}" if replay_rate else ""))
    if replay_rate:
        set_option(job_path, "run", "rate", f"{replay_rate:.1f}")
    s = run_mpi(n, job_path, output)
    if replay_rate:
        set_option(job_path, "run", "rate", '"max"')
    rep = verify(output, job, expected=expected)
    if not rep["ok"]:
        raise JobError(f"bench: results on {n} ranks differ from the oracle: missing {rep['missing']}, "
                       f"extra {rep['extra']}, duplicated {rep['duplicated']}")
    return dict(s, oracle_s=rep["oracle_s"])


def _row(label, s, o_rate):
    lat = s["latency_ms"]
    return (label, f"{s['tuples_per_s']:,.0f}", f"{s['wall_s']:.2f}", f"{s['results']:,}", f"{lat['p50']:.2f}",
            f"{lat['p90']:.2f}", f"{lat['p99']:.2f}", f"{s['tuples_per_s'] / o_rate:.2f}")


def set_option(job_path, section, key, value):
    """Set `key = value` (`value` as TOML text) in the [section] table of a job file, replacing
    the key's line in that table if it has one."""
    with open(job_path) as f:
        lines = f.read().split("\n")
    if f"[{section}]" not in lines:
        lines += [f"[{section}]"]
    start = lines.index(f"[{section}]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    keep = [ln for ln in lines[start + 1:end] if not re.match(rf"{re.escape(key)}\s*=", ln)]
    lines[start + 1:end] = [f"{key} = {value}"] + keep
    with open(job_path, "w") as f:
        f.write("\n".join(lines))


def set_param(job_path, key, value):
    """Set strategy parameter `key` to the Python value `value` in a job file."""
    v = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    set_option(job_path, "strategy", key, v)


def demo(nprocs, tuples, workdir, spark_master="local[*]"):
    """The whole pipeline on a generated workload: raw CSV, then `pipeline` (stage, run under
    mpiexec, collect with payloads, verify against the oracle). Returns the exit code."""
    from ..pipeline import pipeline
    from .workloads import make
    print(f"generate workload (b) as raw CSV: {tuples:,} tuples, Poisson arrivals, b-model keys -> {workdir}/raw",
          flush=True)
    job_path = make("equi", workdir, tuples=tuples, raw="csv")
    say = lambda m: print(m, flush=True)
    say("the pipeline on Spark (--engine spark: stage and collect with Spark)")
    t0 = time.perf_counter()
    code = pipeline(job_path, nprocs, with_payload=True, verify=True, master=spark_master, engine="spark",
                    collect_out=os.path.join(workdir, "collected"), say=say)
    on_spark = time.perf_counter() - t0
    if code != 0 or spark_master != "local[*]":
        return code
    say("the same files in this process (--engine auto: stage and collect without a JVM; staged again, --force)")
    t0 = time.perf_counter()
    code = pipeline(job_path, nprocs, with_payload=True, master=spark_master, engine="auto", force=True,
                    run_args=("--overwrite",), collect_out=os.path.join(workdir, "collected-local"), say=say)
    here = time.perf_counter() - t0
    say(f"demo: the pipeline took {on_spark:.1f} s on Spark (verify included) and {here:.1f} s in this process "
        f"(without verify), the same files and results")
    return code


def bench_commits(before=(0, 7_200, 28_800, 115_200), per_commit=2, commits=20, workdir=None, say=print):
    """Rank 0's bookkeeping for one commit of a live run (a checkpoint's manifest, the ledger of
    committed files, the results log's commit) after `before` files committed (at 4 commits a
    second, each closing 2 workers' files: none, 15 minutes, 1 hour and 4 hours of a live run),
    against the same with every committed file listed in the manifest and the commit point (what
    each commit wrote before the ledger). The median of `commits` commits of `per_commit` files each; the
    ratio to the first row's, measured in the same run. Flat is the goal."""
    import shutil
    import tempfile
    import numpy as np
    from ..storage import checkpoint as ck
    from ..storage.commits import COMMITTED, Commits
    from ..storage.durable import write_json
    from ..storage.ledger import Ledger
    root = tempfile.mkdtemp(prefix="bench-commits-", dir=workdir)

    def rec(i):
        return f"part-r{1 + i % 2:04d}-{i // 2:05d}.parquet", {"rows": 3_000 + i % 97, "bytes": 61_000 + i,
                                                              "sha256": f"{i:064x}"}
    out, base = [], None
    try:
        for n in before:
            d = os.path.join(root, str(n))
            led, log = Ledger(os.path.join(d, "ckpt")).start(), Commits(os.path.join(d, "out"))
            old = dict(rec(i) for i in range(n))
            for i in range(0, n, 4_000):                       # the history, in big appends
                led.append(dict(rec(k) for k in range(i, min(n, i + 4_000))))
            took, listed = [], []
            for c in range(commits):
                new = dict(rec(n + c * per_commit + k) for k in range(per_commit))
                t = time.perf_counter()
                ref = led.append(new)
                os.makedirs(ck.ckpt_path(os.path.join(d, "ckpt"), c))
                ck.write_manifest(os.path.join(d, "ckpt"), c, {"ledger": ref, "results": 0})
                log.commit(c, c, new, 0)
                took.append(time.perf_counter() - t)
                old.update(new)
                t = time.perf_counter()        # the same commit listing every file, as before the ledger
                os.makedirs(ck.ckpt_path(os.path.join(d, "old"), c))
                ck.write_manifest(os.path.join(d, "old"), c, {"committed_files": sorted(old), "committed": old,
                                                              "results": 0})
                write_json(os.path.join(d, "old", COMMITTED), {"commits": c, "files": old, "results": 0})
                listed.append(time.perf_counter() - t)
            per, was = float(np.median(took[3:])), float(np.median(listed[3:]))
            base = base or per
            out.append([f"{n:,}", f"{per * 1e3:.2f}", f"{per / base:.2f}x", f"{was * 1e3:.2f}", f"{was / per:.1f}x"])
            say(f"bench commits: after {n:,} files committed: {per * 1e3:.2f} ms a commit "
                f"(listing every file: {was * 1e3:.2f} ms)")
            shutil.rmtree(d)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(["files before", "ms per commit", "vs none before", "listing every file (ms)", "listing / ledger"], out)
    return out


def bench_window(seconds=(10, 60, 600), rate=20_000, batch=2048, batches=40, say=print):
    """A worker's cost per batch against the window's length, for the two ways a worker probes
    its window: slaves/local_join.BinaryJoin (hash, biclique, matrix, splitjoin, handshake,
    llhj) and a slice of psp's ring (ring/psp.Slice, range_join with its KeyIndex). An equi join
    on an int32 key (a window row of 28 bytes, its 8-byte columns unaligned, as equi A's) at
    `rate` tuples/s per stream, time windows of each of `seconds` held full, then `batches`
    batches of `batch` rows a stream joined against them (every window row older than its
    probes); the median per batch, and its ratio to the shortest window's, measured in the same
    run. The keys are drawn from a domain a quarter of the window's rows, so that a probe finds
    about four partners in every window and a batch makes as many results whatever the window's
    length: flat is the goal, a batch costing what its rows find, not what the window holds."""
    import numpy as np
    from ..config import parse_job
    from ..join.window import runtime_dtype
    from ..ring.psp import Slice
    from ..slaves.local_join import BinaryJoin
    rows_out, base = [], None
    for sec in seconds:
        w = int(sec * rate)
        job = parse_job({"job": {"name": "window", "ts_unit": "ms"}, "input": {"staged": "staged"},
                         "output": {"dir": "out"}, "predicate": {"equi": [["R.k", "S.k"]]},
                         "strategy": {"name": "hash"},
                         "streams": {n: {"schema": {"k": "int32"}, "window": f"{sec}s"} for n in ("R", "S")}},
                        "window.toml")
        dts = [runtime_dtype(s.dtype) for s in job.streams]
        rng = np.random.default_rng(7)

        def rows(s, n, first):      # tuples of both streams interleaved at `rate` each
            r = np.zeros(n, dts[s])
            r["seq"] = np.arange(first, first + 2 * n, 2) + s
            r["ts"] = r["seq"] * 1000 // (2 * rate)
            r["k"] = rng.integers(0, max(1, w // 4), n)
            r["_coord"] = r["ts"]
            r["_lo"] = r["ts"] - sec * 1000 + 1
            return r
        j = BinaryJoin(job.predicate, dts, "index", older=True)
        for s in (0, 1):              # the windows filled, not joined (their own pairs are not the point)
            j.append(j.layout.derive(rows(s, w, 0), s), s)
        per, found = _per_batch(lambda b0, b1: len(j.step(b0, b1)[0]), rows, w, batch, batches)
        del j
        sl = Slice(job, dts, 1, 1)
        sl.append([rows(0, w, 0), rows(1, w, 0)])
        per_s, found_s = _per_batch(lambda b0, b1: _slice_step(sl, job.predicate, b0, b1), rows, w, batch, batches)
        del sl
        base = base or (per, per_s)
        rows_out.append([f"{sec:,} s", f"{w:,}", f"{found / batches:,.0f}", f"{per * 1e3:.2f}", f"{per / base[0]:.2f}x",
                         f"{found_s / batches:,.0f}", f"{per_s * 1e3:.2f}", f"{per_s / base[1]:.2f}x"])
        say(f"bench window: {sec} s window ({w:,} rows a stream): {per * 1e3:.2f} ms a batch of 2 x {batch:,} "
            f"({found / batches:,.0f} results a batch), a psp slice {per_s * 1e3:.2f} ms ({found_s / batches:,.0f})")
    print_table(["window", "rows a stream", "results a batch", "ms per batch", "vs the shortest",
                 "psp slice: results", "ms per batch", "vs the shortest"], rows_out)
    return rows_out


def _per_batch(step, rows, w, batch, batches):
    """(median seconds a batch of `step`, results over all batches): `batches` batches of
    `batch` rows a stream, after the `w` rows a stream the window holds."""
    import numpy as np
    took, found = [], 0
    for b in range(batches):
        first = 2 * w + 2 * b * batch
        new0, new1 = rows(0, batch, first), rows(1, batch, first)
        t = time.perf_counter()
        found += step(new0, new1)
        took.append(time.perf_counter() - t)
    return float(np.median(took[2:])), found


def _slice_step(sl, pred, new0, new1):
    """A psp slice's step for a batch of both streams (the ring's only operator): each stream's
    probes meet the other stream's rows of the slice, then the batch joins the slice."""
    from ..join.window import POS_INF
    n = 0
    for i, t in enumerate((new0, new1)):
        n += len(sl.meet(pred, {i: t}, t, 1 - i, -POS_INF, POS_INF)[1])
    sl.append([new0, new1])
    return n
