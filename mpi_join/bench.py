"""`mpi-join bench` and `mpi-join demo`: real runs under mpiexec, measured against the oracle."""
import json
import os
import subprocess
import sys
import tempfile
import time

from .errors import JobError


def _run_mpi(nprocs, job_path, output, quiet=True):
    from .cli import mpiexec_cmd
    env = dict(os.environ)
    if quiet:
        env["MPI_JOIN_QUIET"] = "1"
    cmd = mpiexec_cmd(nprocs, ["run", job_path, "--output", output])
    p = subprocess.run(cmd, env=env, stdout=None if not quiet else subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise JobError(f"mpiexec run failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
    with open(os.path.join(output, "metrics", "summary.json")) as f:
        return json.load(f)


def _oracle_rate(job):
    """Single-core oracle tuples/s on the job's input (after compiling on a small prefix)."""
    from .oracle import run_oracle
    from .staged import read_staged
    arrays = read_staged(job)
    run_oracle(job, [a[:100] for a in arrays])   # compile the kernels outside the timing
    t0 = time.perf_counter()
    res = run_oracle(job, arrays)
    el = time.perf_counter() - t0
    n = sum(len(a) for a in arrays)
    return n / el, el, len(res)


def bench_hash(nprocs, tuples, rate, window, skew, local_join, workdir):
    from .config import load_job
    from .verify import verify
    from .workloads import make
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="mpi-join-bench-")
        workdir = tmp.name
    print(f"workload (b): {tuples:,} tuples, {rate:g} tuples/s per stream, window {window}, b = {skew}; "
          f"hash on {nprocs} ranks, local join {local_join}", flush=True)
    job_path = make("equi", workdir, tuples=tuples, rate=rate, window=window, skew=skew)
    _set_param(job_path, "local_join", local_join)
    job = load_job(job_path)
    o_rate, o_s, o_n = _oracle_rate(job)
    s = _run_mpi(nprocs, job_path, os.path.join(workdir, "out"))
    rep = verify(os.path.join(workdir, "out"), job)
    lat = s["latency_ms"]
    rows = [
        ("oracle (1 core)", f"{o_rate:,.0f}", f"{o_s:.2f}", f"{o_n:,}", "-", "-", "-"),
        (f"hash ({nprocs} ranks)", f"{s['tuples_per_s']:,.0f}", f"{s['wall_s']:.2f}", f"{s['results']:,}",
         f"{lat['p50']:.2f}", f"{lat['p90']:.2f}", f"{lat['p99']:.2f}"),
    ]
    head = ("", "tuples/s", "seconds", "results", "p50 ms", "p90 ms", "p99 ms")
    w = [max(len(str(r[k])) for r in rows + [head]) for k in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).rjust(w[k]) if k else str(c).ljust(w[k]) for k, c in enumerate(r)))
    print(f"ratio hash / oracle tuples/s: {s['tuples_per_s'] / o_rate:.2f}")
    print("results equal the oracle" if rep["ok"] else
          f"RESULTS DIFFER: missing {rep['missing']}, extra {rep['extra']}, duplicated {rep['duplicated']}")
    if tmp:
        tmp.cleanup()
    if not rep["ok"]:
        raise JobError("bench: results differ from the oracle")
    return {"oracle_tps": o_rate, "hash_tps": s["tuples_per_s"], "latency_ms": lat}


def _set_param(job_path, key, value):
    with open(job_path) as f:
        text = f.read()
    text = text.replace('[strategy]\n', f'[strategy]\n{key} = "{value}"\n', 1)
    with open(job_path, "w") as f:
        f.write(text)


def demo(nprocs, tuples, workdir, spark_master="local[*]"):
    """The whole pipeline: generate raw files, stage them with Spark, run under mpiexec, collect
    the results with Spark, verify against the oracle. Returns the exit code."""
    from .cli import mpiexec_cmd
    from .config import load_job
    from .spark.collect import collect
    from .spark.session import spark_session
    from .spark.stage import stage
    from .verify import format_report, verify
    from .workloads import make
    say = lambda m: print(m, flush=True)  # noqa: E731
    say(f"1/5 generate workload (b) as raw CSV: {tuples:,} tuples, Poisson arrivals, b-model keys -> {workdir}/raw")
    job_path = make("equi", workdir, tuples=tuples, raw="csv")
    job = load_job(job_path)
    say(f"2/5 stage with Spark ({spark_master}) -> {job.staged}")
    spark = spark_session(spark_master, "mpi-join demo")
    man = stage(spark, job, progress=lambda m: say("    " + m))
    say(f"    staged {man['total']:,} tuples, quarantined {sum(man['quarantined'].values()):,}")
    say(f"3/5 run: mpiexec -n {nprocs} mpi-join run {job_path}")
    rc = subprocess.call(mpiexec_cmd(nprocs, ["run", job_path]))
    if rc != 0:
        print(f"run failed with exit code {rc}", file=sys.stderr)
        return rc
    out = os.path.join(workdir, "collected")
    say(f"4/5 collect with Spark -> {out}")
    s = collect(spark, job, job.output, out, with_payload=True, progress=lambda m: say("    " + m))
    lat = s["latency_ms"]
    say(f"    {s['results']:,} results with payloads; latency ms p50 {lat['p50']:.2f} p99 {lat['p99']:.2f}")
    say("5/5 verify against the oracle")
    rep = verify(job.output, job)
    say(format_report(rep))
    return 0 if rep["ok"] else 1
