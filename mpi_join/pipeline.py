"""stage -> run -> collect (-> verify) in one command, with one Spark session for both Spark steps.

Each of `mpi-join stage` and `mpi-join collect` starts its own JVM (about 5 s on a small machine);
here the session started for staging is kept while the ranks run and serves collection too."""
import os
import time
from concurrent.futures import ThreadPoolExecutor


def pipeline(job_path, nprocs, *, with_payload=False, verify=False, collect_out=None, force=False,
             master="local[*]", conf=(), run_args=(), say=print, engine="auto"):
    """Run the whole pipeline for the job at `job_path`. Returns the exit code (the run's when
    it fails, 1 when verification fails, else 0). Staging is skipped for a job without raw
    input, and by stage itself when the staged input is up to date (unless `force`). `engine`
    ("auto" | "spark") chooses for staging and collection alike (`stage --engine`, `collect --engine`)."""
    from .launch import Launch, mpiexec_cmd
    # the ranks start first and wait at the gate (gate.py): what they pay to start is spent while
    # this process reads the job and stages; a job refused below stops them before they read it
    launch = Launch(mpiexec_cmd(nprocs, ["run", job_path, *run_args]), gated=True)
    try:
        from .config import load_job
        from .storage.spark.collect import collect, collecting, default_out, small_collect
        from .storage.staged_log import hold_staged
        job = load_job(job_path)
        out = collect_out or default_out(job.output)
        from .storage.paths import check_layout, job_dirs
        check_layout(job_dirs(job, collect_out=out))        # before any JVM starts or rank reads
        t0 = time.perf_counter()
        steps = 3 + bool(verify)
        lock = hold_staged(job.staged, force=force, say=say) if all(s.raw is not None for s in job.streams) else None
        try:                                                # the lock before any JVM starts
            spark, job, took = _stage(job, steps, force, master, conf, say, t0, engine)
        finally:
            if lock is not None:
                lock.release()
    except BaseException:
        launch.stop()
        raise
    say(f"2/{steps} run: mpiexec -n {nprocs} mpi-join run {job_path} (its ranks started beside step 1)")
    launch.go()
    from .storage.local_collect import collect_local, staged_payloads, why_spark
    with ThreadPoolExecutor(1) as reader:       # the staged payloads read while the ranks run
        staged = reader.submit(_idle, lambda: staged_payloads(job, threads=False)) if with_payload and why_spark(
            engine, master, conf, job, job.output, out, with_payload) is None else None
        rc = launch.wait()
    if rc != 0:
        say(f"run failed with exit code {rc}; nothing collected")
        return rc
    took["run"] = time.perf_counter() - t0 - sum(took.values())
    why = why_spark(engine, master, conf, job, job.output, out, with_payload)
    with collecting(job, job.output, out) as parts:
        if why is None:
            say(f"3/{steps} collect in this process (engine local) -> {out}")
            s = collect_local(job, job.output, out, with_payload, progress=lambda m: say("    " + m), parts=parts,
                              staged=staged)
        else:
            say(f"3/{steps} collect with Spark ({why}) -> {out}")
            spark = spark or _session(master, conf, say, small_collect(job, parts, with_payload))
            s = collect(spark, job, job.output, out, with_payload=with_payload, progress=lambda m: say("    " + m),
                        parts=parts)
    lat = s["latency_ms"]
    say(f"    {s['results']:,} results" + (" with payloads" if with_payload else "")
        + f"; latency ms p50 {lat['p50']:.2f} p99 {lat['p99']:.2f}")
    took["collect"] = time.perf_counter() - t0 - sum(took.values())
    code = 0
    if verify:
        from .storage.verify import format_report, verify as check
        say(f"4/{steps} verify against the oracle")
        rep = check(job.output, job)
        say(format_report(rep))
        code = 0 if rep["ok"] else 1
        took["verify"] = time.perf_counter() - t0 - sum(took.values())
    most = max(took, key=took.get)
    say(f"pipeline: done in {time.perf_counter() - t0:.1f} s (" + ", ".join(f"{k} {v:.1f} s" for k, v in took.items())
        + f"; {most} took longest"
        + (f"; the Spark session's start in its first Spark step {_STARTED[-1]:.1f} s" if spark and _STARTED else "")
        + f"); results {os.path.join(job.output, 'results')}, collected {out}")
    return code


def _stage(job, steps, force, master, conf, say, t0, engine="auto"):
    """Step 1, under the staged directory's lock: (the Spark session or None, the job with its
    string widths as staged, {"stage": seconds}). `engine` as `stage --engine`: auto stages
    local CSV input in this process where it can (storage/local_stage.py), else with Spark."""
    from .storage.local_stage import NeedsSpark, stage_local, why_spark
    from .storage.spark.stage import precheck, stage
    spark, staged, raw = None, False, all(s.raw is not None for s in job.streams)
    if raw and precheck(job, force=force) is not None:
        say(f"1/{steps} stage: {job.staged} is up to date (same settings, raw files unchanged; no Spark needed)")
        staged = True
    elif raw and why_spark(engine, master, conf, job.staged) is None:
        say(f"1/{steps} stage in this process (engine local) -> {job.staged}")
        try:
            man = stage_local(job, job.staged, lambda m: say("    " + m))
            say(f"    {man['total']:,} tuples staged, {sum(man['quarantined'].values()):,} quarantined")
            from .storage.staged import with_string_widths
            job = with_string_widths(job, man)          # string columns as wide as the input staged now
            staged = True
        except NeedsSpark as e:
            say(f"    engine spark: {e}")
    if raw and not staged:
        say(f"1/{steps} stage with Spark ({master}) -> {job.staged}")
        spark = _session(master, conf, say, False)      # its results are not known yet (see _session)
        man = stage(spark, job, progress=lambda m: say("    " + m), force=force)
        say(f"    {man['total']:,} tuples staged, {sum(man['quarantined'].values()):,} quarantined")
        from .storage.staged import with_string_widths
        job = with_string_widths(job, man)          # string columns as wide as the input staged now
    elif not raw:
        say(f"1/{steps} stage: skipped (streams without raw input; staged input is {job.staged})")
    took = {"stage": time.perf_counter() - t0}
    return spark, job, took


def _idle(fn):
    """fn() on this thread at the lowest priority (Linux's nice applies to a thread), so that it
    takes only what the ranks leave of the cores (`fn` should not hand its work to other threads)."""
    import threading
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError):
        pass
    return fn()


def _session(master, conf, say, small):
    """The one Spark session of a pipeline (a JVM start, about 5 s), said once. `small`: set up
    for a short life (session.SHORT_LIVED), only when the session starts at collect and the
    results are small (collect.small_collect). A session that stages keeps the full JIT: the same
    JVM collects later, and a small input can give many results (the demo's 2.5 M collected in
    12.2 s on the short-lived JVM against 7.5 s)."""
    from .storage.spark.session import spark_session
    t = time.perf_counter()
    spark = spark_session(master, "mpi-join pipeline", conf, small=small)
    _STARTED.append(time.perf_counter() - t)
    say(f"    Spark session started ({master}) in {_STARTED[-1]:.1f} s")
    return spark


_STARTED = []       # the Spark session's start, measured (the pipeline's summary states it)
