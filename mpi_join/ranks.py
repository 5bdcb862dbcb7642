"""What every rank runs under `mpiexec ... mpi-join run JOB`.

Rank 0 (the driver) loads and validates the job, and what it can of the input (schemas, counts,
Parquet metadata), before anyone works, then tells the others to start or to exit with its
one-line error. Each rank then builds its part from the strategy registry: the driver with the
strategy's router (master/driver.py), a worker with its join module (slaves/worker.py). Any
exception on any rank after that aborts the whole job (COMM_WORLD.Abort) with that rank's number
and reason: no rank hangs. An input error found while reading (a row out of order) is printed as
the same one-line error as before the start.
"""
import os
import re
import signal
import sys
import threading
import time
import traceback

from .config import load_job
from . import gate
from .errors import JobError
from .runtime.hydra import finalize_pmi
from .runtime.metrics import RankMetrics, summarize, write_json
from .strategies import check_runnable
from .runtime.protocol import Start, Tag, decode_control
from .storage.paths import LOCK


def run_rank(job_path, overrides, choose_sources=None):
    """Run this rank's role; returns the process exit code. `choose_sources(job, nranks, cores)`:
    (k, why), the planner's run.sources where the job leaves it "auto" (cli.py gives the scaling
    model's auto_sources; without it, auto is 1)."""
    from mpi4py import MPI
    from .runtime.transport import Transport
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    ctx = {}
    quiet_h5py_teardown()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _: _interrupted(rank, ctx, signum))
    try:
        tx = Transport(comm)
        hosts = comm.allgather((MPI.Get_processor_name(), cpus()))
        tx.hosts = [h for h, _ in hosts]                         # the rank-to-host map
        ctx["cores"] = _cores(hosts)
        ctx["choose_sources"] = choose_sources
        try:
            held = gate.gated()
            if held:
                gate.preload(rank, lambda: warm_ahead(job_path, overrides, tx))
            if held and rank == 0 and not gate.opened():
                code = _leave(tx, 2)             # the launcher stopped: every rank leaves quietly
            else:
                code = _driver(job_path, overrides, tx, ctx) if rank == 0 else _worker(job_path, overrides, tx, ctx)
        finally:
            tx.close()
    except KeyboardInterrupt:
        _interrupted(rank, ctx, signal.SIGINT)
    except BaseException as e:  # noqa: BLE001 - any failure must take the whole job down
        from .runtime.transport import tell_rank0_failed
        from .runtime.wire import PeerFailed
        _release(ctx)
        if isinstance(e, PeerFailed):       # its rank said why; rank 0 has released its locks
            sys.stderr.flush()
            time.sleep(0.2)      # let mpiexec forward that rank's line before the job is torn down
            comm.Abort(e.code)
            return e.code
        why, code = _say_failed(rank, e)
        sys.stderr.flush()
        if rank != 0:            # rank 0 releases its locks and aborts the job (or this rank does, in 1 s)
            tell_rank0_failed(comm, why, code)
        else:
            time.sleep(0.2)      # let mpiexec forward the line before the job is torn down
        comm.Abort(code)
        return 1
    # finalise here, not at interpreter exit: a message still unmatched (a protocol bug) is then
    # an error with this rank's name, not a silent exit that makes mpiexec kill the others
    try:
        MPI.Finalize()
    except MPI.Exception as e:
        sys.stderr.write(f"mpi-join: rank {rank} failed: MPI_Finalize: {str(e).strip().splitlines()[-1]}\n")
        return 1
    return code


def _leave(tx, code):
    """Rank 0, before any job is read: every other rank leaves with `code`, nothing said."""
    start = Start("stopped before the start", None, -1, 1, 0).encode()
    for r in range(1, tx.size):
        tx.send(r, Tag.START, start)
    tx.flush()
    return code


# what the machine ran out of or refused, not a bug: one line, no traceback
_ENVIRONMENT = {"ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EIO", "EMFILE", "ENFILE", "ENOMEM", "EFBIG"}


def _environment_error(e):
    """"No space left on device (errno 28): PATH" for an OSError of the machine (a full disk, a
    quota, a read-only filesystem), whose messages (HDF5's, Arrow's) span lines; None otherwise."""
    import errno as errnos
    code = getattr(e, "errno", None)
    if not isinstance(e, OSError) or code is None or errnos.errorcode.get(code) not in _ENVIRONMENT:
        return None
    path = e.filename or (re.search(r"filename = '([^']+)'", str(e)) or [None, None])[1]
    return f"{os.strerror(code)} (errno {code})" + (f": {path}" if path else "")


def quiet_h5py_teardown():
    """After a write failed (a full disk), h5py's objects fail again as they are freed, each
    printing two tracebacks ("Exception ignored in: h5py._objects.ObjectID.__dealloc__") around
    the rank's one line: those, and only those, are not printed. The failure itself is raised
    where the write was made."""
    def from_h5py(tb):
        while tb is not None:
            if "h5py" in tb.tb_frame.f_code.co_filename and "_objects" in tb.tb_frame.f_code.co_filename:
                return True
            tb = tb.tb_next
        return False
    old_unraisable, old_except = sys.unraisablehook, sys.excepthook

    def unraisable(u):
        if not from_h5py(u.exc_traceback) and "h5py._objects" not in str(u.object):
            old_unraisable(u)

    def excepthook(t, v, tb):
        if not (t is RuntimeError and from_h5py(tb)):
            old_except(t, v, tb)
    sys.unraisablehook, sys.excepthook = unraisable, excepthook


def _say_failed(rank, e):
    """The one line (and, for a bug, the traceback) of a rank that failed; returns (why, exit code)."""
    why = str(e).splitlines()[0] if str(e) else type(e).__name__
    env = _environment_error(e)
    if isinstance(e, JobError):
        sys.stderr.write(f"mpi-join: error: {why} (rank {rank}; job aborted)\n")
    elif env is not None:
        why = env
        sys.stderr.write(f"mpi-join: rank {rank} failed: {why}\n")
    else:
        sys.stderr.write(f"mpi-join: rank {rank} failed: {type(e).__name__}: {why}\n")
        traceback.print_exc(file=sys.stderr)
    sys.stderr.flush()
    return why, 2 if isinstance(e, JobError) else 1


LOCAL_RANKS = 4096       # --local's own bound: past it a thread per rank helps nobody on one machine


def local_rank_limit():
    """How many ranks `run --local` runs as threads here: LOCAL_RANKS, or fewer where the machine's
    limits on threads (RLIMIT_NPROC, kernel.threads-max, less what runs already) say so."""
    import resource
    room = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    room = None if room == resource.RLIM_INFINITY else room
    try:
        with open("/proc/sys/kernel/threads-max") as f:
            room = int(f.read()) if room is None else min(room, int(f.read()))
        with open("/proc/loadavg") as f:               # "... running/total last_pid": threads that exist now
            room -= int(f.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError, TypeError):
        pass
    most = LOCAL_RANKS if room is None else min(LOCAL_RANKS, room)
    return max(most, 2)


def run_local(job_path, overrides, nprocs, choose_sources=None):
    """Run the job's `nprocs` ranks in this process, each a thread (runtime/local.py), rank 0 on
    this one: the same driver, workers, checkpoints and output as under mpiexec, with one start
    (one import, one numba compile) instead of one per rank. A rank that fails stops the others
    as under MPI; returns the exit code run_rank would."""
    from .runtime.local import Hub
    from .runtime.wire import PeerFailed
    most = local_rank_limit()
    if nprocs > most:
        sys.stderr.write(f"mpi-join: error: run --local -n {nprocs}: at most {most:,} ranks run as threads of one "
                         f"process on this machine (its thread limits); run fewer, or launch them with mpiexec\n")
        return 2
    hub = Hub(nprocs)
    ctxs = [{"cores": 1, "choose_sources": choose_sources} for _ in range(nprocs)]   # one thread at a time runs Python
    codes = [0] * nprocs

    def rank_body(r):
        try:
            tx = hub.transport(r)
            codes[r] = _driver(job_path, overrides, tx, ctxs[r]) if r == 0 else _worker(job_path, overrides, tx, ctxs[r])
        except PeerFailed as e:
            _release(ctxs[r])
            codes[r] = e.code
        except BaseException as e:  # noqa: BLE001 - any failure must take the whole job down
            _release(ctxs[r])
            why, codes[r] = _say_failed(r, e)
            hub.fail(r, why, codes[r])

    if threading.current_thread() is threading.main_thread():     # not so when a program runs it on a thread
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, _: _interrupted(0, ctxs[0], signum))
    threads = [threading.Thread(target=rank_body, args=(r,), name=f"rank {r}", daemon=True) for r in range(1, nprocs)]
    for k, t in enumerate(threads):
        try:
            t.start()
        except RuntimeError:             # "can't start new thread": the machine's limit, below the check's
            why = (f"run --local -n {nprocs}: this machine let this process start only {k + 1} rank threads; "
                   f"run fewer ranks (-n), or launch them with mpiexec")
            hub.fail(0, why, 2)
            for started in threads[:k]:
                started.join()
            sys.stderr.write(f"mpi-join: error: {why}\n")
            return 2
    rank_body(0)
    for t in threads:
        t.join()
    failed = hub.failed
    return failed[2] if failed else codes[0]


def _interrupted(rank, ctx, signum):
    """Ctrl-C (SIGINT) or a scheduler's cancel (SIGTERM, as `scancel` sends it) reaches every
    rank of the launch (mpiexec and srun forward both; `mpi-join run -n N` forwards what it gets):
    one line from rank 0, the others quiet, and every rank leaves with 128 + the signal, its
    locks released, without MPI_Abort and without waiting in MPI_Finalize for ranks that are
    leaving too. A signal that comes again (from the launcher as well) is ignored. Rank 0 writes
    its line at once (mpiexec stops forwarding output soon after ranks leave) and says what is on
    disk: results are buffered in memory up to a part file's size, so there may be none. A worker
    leaves once rank 0 has released the output directory's lock (at most WAIT_FOR_RANK0_S): on a
    loaded machine a worker that left first let mpiexec end rank 0 before its handler had run (no
    line, a lock left). Rank 0 leaves last, after a wait longer than a worker's for it. A worker
    that saw rank 0 release the lock finalizes PMI before it leaves (runtime/hydra.py), so that
    mpiexec takes its exit for an orderly one: a rank that leaves without makes mpiexec SIGKILL
    the others, and one still in its handler then made the launch's exit code 9, not 130 (about
    one run in six on a loaded machine). Rank 0 does not, so that its exit still ends a worker
    whose handler never ran; and a worker that waited for rank 0 in vain does not either, so that
    its exit ends a rank 0 that cannot run (the launcher then says rank 0's line)."""
    if ctx.get("stopping"):
        return
    ctx["stopping"] = True
    if rank == 0:
        line = stopped_line(signum, ctx.get("output"), ctx.get("checkpoint_dir"))
        sys.stderr.write(f"\n{line}\n")
        sys.stderr.flush()
        _release(ctx)
        time.sleep(WAIT_FOR_WORKERS_S)
    elif ctx.get("output"):
        lock, end = os.path.join(ctx["output"], LOCK), time.monotonic() + WAIT_FOR_RANK0_S
        while os.path.exists(lock) and time.monotonic() < end:
            time.sleep(0.02)
        if not os.path.exists(lock):
            finalize_pmi()
    sys.stderr.flush()
    os._exit(128 + int(signum))


WAIT_FOR_RANK0_S = 3.0      # a stopped worker's wait for rank 0 to have said so (_interrupted)
WAIT_FOR_WORKERS_S = WAIT_FOR_RANK0_S + 1.0    # rank 0's, for its workers to have left


def stopped_line(signum, output, checkpoint_dir=None):
    """The one line of a run stopped by Ctrl-C (SIGINT) or SIGTERM: what is on disk in `output`
    (partial part files, or a followed run's committed results, which stand). Rank 0 says it; the
    launcher of `run -n N` says it instead when rank 0's line did not reach it (launch.run)."""
    where = ""
    if output:
        import glob
        rdir = os.path.join(output, "results")
        parts = glob.glob(os.path.join(rdir, "part-r*.parquet"))
        where = (f"; {len(parts)} partial result part file(s) in {rdir} (`mpi-join collect --partial` reads "
                 f"them)" if parts else "; no result part file had been written yet")
        from .storage.commits import read_committed
        try:
            done = read_committed(output)
        except JobError:
            done = None
        if done is not None:         # a followed run: what it committed stands
            where = (f"; {done['results']:,} results committed up to input seq {done.get('input_offset') or 0:,} "
                     f"stand ({os.path.join(output, '_COMMITTED')}; `mpi-join collect` reads them, `--resume "
                     f"{checkpoint_dir}` continues)")
    why = "interrupted by the user" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    return f"mpi-join: {why}; no _SUCCESS written{where}"


def cpus():
    """The cores this process may run on (its affinity: a Slurm allocation's, say)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cores(hosts):
    """The cores the job's ranks run on: per host, the fewer of its ranks and its cores."""
    per = {}
    for name, cpus in hosts:
        n, c = per.get(name, (0, 0))
        per[name] = (n + 1, max(c, cpus))
    return sum(min(n, c) for n, c in per.values())


def _sources(job, tx, ctx, follow, resumed=None):
    """The job with run.sources resolved where it is "auto": a resumed run's checkpoint's, one
    for a followed log, else the planner's choice (ctx["choose_sources"]); ctx["sources_why"]
    says why."""
    from dataclasses import replace
    run = job.run
    if not run.sources_auto:
        return job
    if resumed is not None:
        k, why = resumed, "the checkpoint's"
    elif follow:
        k, why = 1, ("a followed log: one source releases each batch as soon as it is committed (several wait "
                     "for whole batches, and commit at part boundaries); set run.sources for more")
    elif ctx.get("choose_sources") is None:
        k, why = 1, "no planner"
    else:
        k, why = ctx["choose_sources"](job, tx.size, ctx["cores"])
    ctx["sources_why"] = why
    return replace(job, run=replace(run, sources=k))


def _release(ctx):
    for lock in ctx.pop("locks", []):
        lock.release()


def _driver(job_path, overrides, tx, ctx):
    from . import strategies
    from .master.driver import Driver
    from .master.progress import Progress, summary_table
    t_start = time.perf_counter()
    err, resume, driver = None, None, None
    metrics = RankMetrics(0, "driver", tx.cpu)
    try:
        job = load_job(job_path, overrides)
        if overrides.get("follow"):
            job = _live_job(job)              # results are committed at checkpoints (commits.py)
        ctx["output"] = job.output
        ctx["checkpoint_dir"] = job.checkpoint.dir if job.checkpoint else None
        check_runnable(job, tx.size)
        from .slaves.worker import fault_spec
        fault_spec(tx.size)
        info = strategies.get(job.strategy.name)
        ctx["locks"] = _lock_dirs(job, overrides)
        if overrides.get("follow"):
            _await_log(job)
        man = None
        if overrides.get("resume") and overrides.get("follow") and _no_checkpoint_yet(overrides["resume"]):
            _say(f"run --follow --resume: {os.path.abspath(overrides['resume'])} holds no checkpoint yet (the run "
                 f"before stopped before its first commit): starting from the log's beginning")
        elif overrides.get("resume"):
            from .storage.checkpoint import latest_complete
            root = os.path.abspath(overrides["resume"])
            cid, man = latest_complete(root, job, tx.size, say=_say,
                                       results_dir=os.path.join(job.output, "results"))
            if man.get("sources", 1) != job.run.sources and not job.run.sources_auto and not info.rescale:
                raise JobError(f"{os.path.join(root, f'ckpt-{cid:06d}')}: checkpoint {cid} was cut with run.sources = "
                               f"{man.get('sources', 1)}, this run has {job.run.sources}; {job.strategy.name!r} "
                               f"resumes only with the same run.sources")
            resume = (root, cid)
        job = _sources(job, tx, ctx, overrides.get("follow"), man.get("sources", 1) if man else None)
        graph = info.build_graph(tx.size, job.strategy.params, job.run.sources)
        progress = Progress(0, enabled=job.run.progress)
        tx.enable_liveness(job.run.liveness_timeout_s)
        driver = Driver(job, tx, graph, info.load_role("driver"), metrics, progress, resume,
                        follow=bool(overrides.get("follow")))
        if job.checkpoint is not None:
            from .storage.staged import hash_input, staged_files
            driver.ckpt.record_input(staged_files(job, driver.manifest) or hash_input(job))
        ctx["kept"] = man["committed"] if resume else {}
        _prepare_output(job.output, keep=set(ctx["kept"]) if resume else None,
                        overwrite=bool(overrides.get("overwrite")))
        if overrides.get("follow"):
            driver.ckpt.commit_with(_commits(job, resume, ctx["kept"], man.get("input_offset") if man else None))
    except JobError as e:
        err = str(e)
        _release(ctx)
    start = Start(err, resume[0] if resume else None, resume[1] if resume else -1,
                  job.run.sources if err is None else 1, _start_part(driver) if err is None else 0).encode()
    for r in range(1, tx.size):
        tx.send(r, Tag.START, start)
    tx.flush()
    if err:
        sys.stderr.write(f"mpi-join: error: {err}\n")
        return 2
    from .storage.input_warnings import warnings
    from .storage.staged import is_log
    growing = is_log(driver.manifest) and not driver.manifest["log"].get("ended")
    warned = [] if growing and overrides.get("follow") else warnings(job, driver.manifest)
    unadapted = driver.router.with_sources(job.run.sources) if job.run.sources > 1 and driver.router.adapts() else None
    if unadapted:
        sys.stderr.write(f"mpi-join: warning: run.sources = {job.run.sources}: {unadapted}\n")
    for w in warned:
        sys.stderr.write(f"mpi-join: warning: {w}\n")
    few = None if overrides.get("follow") else _few_parts(job, driver.source,
                                                         driver.resumed_from["input_offset"] if resume else 0)
    if few:
        sys.stderr.write(f"mpi-join: warning: {few}\n")
    if job.run.sources_auto and job.run.sources > 1:
        sys.stderr.write(f"mpi-join: run.sources = \"auto\": {job.run.sources} sources ({ctx['sources_why']}); set "
                         f"run.sources to choose\n")
    if growing and not overrides.get("follow"):
        sys.stderr.write(f"mpi-join: warning: the staged log {job.staged} has not ended: this run joins the "
                         f"{driver.source.total:,} tuples committed so far; `run --follow` follows it to its end\n")
    for r in range(1, tx.size):
        tx.watch(r)                      # every worker must be heard from (liveness.py)
    if resume:
        sys.stderr.write(f"mpi-join: resuming from checkpoint {resume[1]} in {resume[0]} "
                         f"at input offset {driver.resumed_from['input_offset']:,}\n")
    progress.total = driver.source.total      # the progress line counts released tuples from seq 0, resumed or not
    report = driver.run()
    total = driver.source.total - (driver.resumed_from["input_offset"] if resume else 0)   # a followed log grew
    worker_metrics = report.workers
    ranks = [metrics.to_dict(tx)] + worker_metrics
    for r in ranks:
        r["host"] = tx.host(r["rank"])
    summary = summarize(ranks, report.wall_s, total)
    lone = driver.ckpt.lone                          # an outer join's lone rows (storage/lone_rows.py)
    if lone is not None:                             # those the cuts wrote are results too (a resumed one's included)
        summary["results"] += lone.rows
    summary["results"], part_records = _verify_parts(job.output, ctx["kept"], worker_metrics, summary["results"],
                                                     lone.written if lone is not None else {})
    if lone is not None:                             # the input has ended: every tuple is final
        last = lone.finish(driver.source.total, part_records)
        part_records = dict(part_records, **last)
        summary["results"] += sum(r["rows"] for r in last.values())
    from .storage.checksums import as_records, verify_snapshots
    snapshots = as_records(row for w in worker_metrics for row in w.get("snapshot_parts", []))
    if snapshots:                # every one as written, numbered without a gap, none other there
        verify_snapshots(os.path.join(job.output, "aggregate"), snapshots, final=True)
    summary.update(job=job.name, strategy=job.strategy.name, ranks_n=tx.size, resumed_from=report.resumed_from,
                   hosts=list(tx.hosts), liveness_timeout_s=job.run.liveness_timeout_s, sources=job.run.sources,
                   sources_auto=ctx.get("sources_why"), cores=ctx["cores"],
                   checkpoints=report.checkpoints, topology=graph.name,
                   startup_s=report.t_replay - t_start, peak_buffer_bytes=metrics.extra.get("peak_buffer_bytes"))
    mdir = os.path.join(job.output, "metrics")
    parts = len(part_records)
    summary["notes"] = report.notes + [
        f"results: {os.path.join(job.output, 'results')} ({parts} part files)",
        f"metrics: {os.path.join(mdir, 'summary.json')} (and rank-*.json)"]
    for r in ranks:
        write_json(os.path.join(mdir, f"rank-{r['rank']:04d}.json"), r)
    write_json(os.path.join(mdir, "summary.json"), summary)
    write_json(os.path.join(job.output, "_SUCCESS"), {"results": summary["results"], "tuples": total, "parts": part_records,
                                                          "snapshots": snapshots})
    if driver.ckpt.commits is not None:      # the last commit: every result, the whole log
        driver.ckpt.commits.commit(None, driver.source.total, part_records, summary["results"], final=True)
        from .storage.latency import Clock, percentiles
        summary["landing_latency_ms"] = percentiles(Clock(job).new_results(job.output))
        write_json(os.path.join(mdir, "summary.json"), summary)
    _release(ctx)
    if not os.environ.get("MPI_JOIN_QUIET"):
        print(summary_table(summary), flush=True)
    if summary["results"] == 0 and warned and not overrides.get("allow_empty"):
        # complete and right, but most likely not what was meant: not the exit of a good answer
        for w in warned:
            sys.stderr.write(f"mpi-join: warning: {w}\n")
        sys.stderr.write("mpi-join: error: 0 results, on input the warning above is about; exit 3 (the results "
                         "and _SUCCESS are written; run --allow-empty accepts an empty answer)\n")
        return 3
    return 0


def _no_checkpoint_yet(root):
    """Does `root` hold no checkpoint at all (not even a damaged one)? A followed run that died
    before its first commit left none, and starting from the log's beginning is then exact."""
    from .storage.checkpoint import list_checkpoints
    return not os.path.isdir(root) or not list_checkpoints(root)


def _await_log(job, poll_s=0.2):
    """A followed run started before its stager has written the log waits for the log's manifest
    to appear, saying so once, asleep between looks (a stager takes 20 s to minutes to start)."""
    from .storage.staged import MANIFEST
    p = os.path.join(job.staged, MANIFEST)
    if os.path.exists(p):
        return
    _say(f"run --follow: waiting for the staged log {job.staged} to appear (`mpi-join stage --follow "
         f"{job.path}` writes it)")
    t0 = time.monotonic()
    while not os.path.exists(p):
        time.sleep(poll_s)
    _say(f"run --follow: the staged log appeared after {time.monotonic() - t0:.1f} s")


def _live_job(job):
    """`job` as a followed run runs it: checkpoints at least every output.commit_every (in
    OUTPUT/_checkpoints when the job configures none), since its results commit at checkpoints."""
    import dataclasses
    from .storage.commits import IMPLICIT
    from .config import Checkpoint
    c = job.checkpoint
    if c is None:
        c = Checkpoint(os.path.join(job.output, IMPLICIT), None, job.commit_every_ns, 2)
    else:
        c = dataclasses.replace(c, every_ns=min(c.every_ns or job.commit_every_ns, job.commit_every_ns))
    return dataclasses.replace(job, checkpoint=c)


def _few_parts(job, source, origin):
    """With several sources a checkpoint is cut at the first part no source has begun, 2k parts
    ahead: why a job asking for checkpoints by tuples would take none, or None."""
    from .master.source import part_for_checkpoints
    every = job.checkpoint.every_tuples if job.checkpoint is not None else None
    if not every or source.k < 2 or (origin // source.part_rows + 2 * source.k) * source.part_rows < source.total:
        return None
    return (f"checkpoint.every_tuples = {every:,}: with run.sources = {source.k} a checkpoint is cut at a part "
            f"boundary {2 * source.k} parts ahead, and the {source.total - origin:,} tuples to replay are "
            f"{-(-(source.total - origin) // source.part_rows)} part(s) of {source.part_rows:,} (run.part): this "
            f"run takes no checkpoint; set run.part to {part_for_checkpoints(every, source.k):,} or less")


def _commits(job, resume, kept, offset=None):
    """A followed run's results log (commits.py): a fresh run starts it, a resumed one goes back
    to its checkpoint's commit; a fresh run also drops the implicit checkpoints of a run before."""
    from .storage.commits import IMPLICIT, Commits
    if resume is None and job.checkpoint.dir == os.path.join(job.output, IMPLICIT):
        import shutil
        from .storage.paths import inside
        for d in os.listdir(job.checkpoint.dir):
            if re.fullmatch(r"ckpt-\d{6}", d):
                shutil.rmtree(inside(job.checkpoint.dir, os.path.join(job.checkpoint.dir, d)))
    c = Commits(job.output, resumed=resume)
    if resume is not None:
        c.resumed(kept, resume[1], _say, offset)
    return c


def _say(line):
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _lock_dirs(job, overrides):
    """Hold every directory this run writes or reads state from, for its life: the output
    directory, the checkpoint directory it resumes from, and the job's own checkpoint
    directory, where its new checkpoints go."""
    from .storage.paths import DirLock
    locks = [DirLock(job.output, "output.dir", say=_say)]
    resume = overrides.get("resume")
    if resume and not os.path.isdir(resume):
        raise JobError(f"{os.path.abspath(resume)}: checkpoint directory not found")
    seen = {os.path.realpath(job.output)}
    for what, d in (("--resume", resume), ("checkpoint.dir", job.checkpoint.dir if job.checkpoint else None)):
        if d and os.path.realpath(d) not in seen:
            seen.add(os.path.realpath(d))
            locks.append(DirLock(os.path.abspath(d), what, say=_say))
    held = []
    try:
        for lock in locks:
            held.append(lock.acquire())
    except JobError:
        for lock in held:
            lock.release()
        raise
    return held


def _verify_parts(out, kept, workers, counted, own=None):
    """Every result part file of the run must be readable with the rows its writer wrote (the
    files a resumed checkpoint committed were verified before the start); no other part file may
    be there (`own`: rank 0's, an outer join's lone rows). Returns the number of results in the files, which is what the summary reports (it
    must equal what the workers counted), and the files' records, which _SUCCESS keeps for
    `collect` to check."""
    from .errors import InputError
    from .storage.checksums import as_records, verify_part
    rdir = os.path.join(out, "results")
    records = dict(kept, **as_records(row for w in workers for row in w.get("result_parts", [])), **(own or {}))
    present = {f for f in os.listdir(rdir) if _OWN["results"].fullmatch(f) and not f.endswith(".tmp")}
    stray = sorted(present - set(records))
    if stray:
        raise InputError(f"{os.path.join(rdir, stray[0])}: result part file that no rank of this run wrote or "
                         f"committed; is another run writing here?")
    for name, rec in sorted(records.items()):
        verify_part(os.path.join(rdir, name), rec, full=name not in kept)
    total = sum(r["rows"] for r in records.values())
    if total != counted:
        raise InputError(f"{rdir}: the part files hold {total:,} results, the ranks counted {counted:,}; "
                         f"no _SUCCESS written")
    return total, records


def _worker(job_path, overrides, tx, ctx):
    _, _, buf = tx.recv(source=0, tag=Tag.START)
    part = worker_part(decode_control(buf), job_path, overrides, tx)
    if part is None:
        return 2
    ctx["output"] = part.job.output          # where rank 0's lock is (_interrupted)
    part.run()
    return 0


def worker_part(start, job_path, overrides, tx):
    """What a rank other than 0 runs once rank 0's Start is in: an extra source (master/feeder.py)
    or a worker with its join module (slaves/worker.py); None when rank 0 refused the job."""
    from . import strategies
    from .master.progress import Progress
    from .storage.results import ResultWriter
    from .slaves.worker import Worker
    if start.error:
        return None
    job = load_job(job_path, overrides)
    if overrides.get("follow"):
        job = _live_job(job)                 # as rank 0 runs it: its checkpoints are the commits
    if job.run.sources_auto:             # rank 0's choice (_sources)
        from dataclasses import replace
        job = replace(job, run=replace(job.run, sources=start.sources))
    tx.enable_liveness(job.run.liveness_timeout_s)
    tx.watch(0)                          # the driver must be heard from (liveness.py)
    info = strategies.get(job.strategy.name)
    graph = info.build_graph(tx.size, job.strategy.params, job.run.sources)
    metrics = RankMetrics(tx.rank, graph.role(tx.rank), tx.cpu)
    if tx.rank in graph.sources:                  # an extra source: reads and routes its share
        from .master.feeder import Feeder
        return Feeder(job, tx, graph, info.load_role("driver"), metrics, Progress(0, enabled=False),
                      (start.resume_dir, start.resume_id) if start.resume_dir else None, bool(overrides.get("follow")))
    writer = ResultWriter(os.path.join(job.output, "results"), tx.rank, job.stream_names,
                          snapshot_dir=os.path.join(job.output, "aggregate"))
    module = _operator(info, job, tx.rank, graph)
    resume = (start.resume_dir, start.resume_id, start.part) if start.resume_dir else None
    return Worker(job, tx, graph, module, metrics, writer, resume)


def warm_ahead(job_path, overrides, tx):
    """A worker held at the gate (gate.py): load the kernels its role will run, for the job as its
    file reads before staging (a `string` column is 1 byte wide until the manifest says more; a
    join's kernels take hashed keys and row fields, which that does not change), so that what
    the gate's "go" leaves to load is little (bench door: a worker's warm-up after "go" 105-120
    ms before). A guess only: a job that cannot be read, a role it cannot build, is read again,
    and said, after the gate; a job with UDFs (compiled every run) is left to then."""
    from . import strategies
    try:
        job = load_job(job_path, overrides)         # run.sources "auto" reads as 1, rank 0's usual choice
        if job.predicate.theta:
            return
        info = strategies.get(job.strategy.name)
        graph = info.build_graph(tx.size, job.strategy.params, job.run.sources)
        if tx.rank not in graph.sources:
            _operator(info, job, tx.rank, graph).warm_up()
    except Exception:  # noqa: BLE001 - a guess; the job is read, and any error said, after the gate
        pass


def _operator(info, job, rank, graph):
    """The operator of this worker's role in `graph` (a join module, dispatcher, merger, ...)."""
    from .join.window import runtime_dtype
    if job.predicate.outer and not info.outer:    # its places join; rank 0 finds the lone rows at the end
        from dataclasses import replace
        job = replace(job, predicate=replace(job.predicate, outer=()))
    dtypes = [runtime_dtype(s.dtype, len(job.streams)) for s in job.streams]
    return info.load_role(graph.role(rank))(job, rank, graph, dtypes)


def _start_part(driver):
    """Several sources: the part of the input that holds where the run starts (a resumed run's
    offset), which the workers' inboxes take first; 0 with one source."""
    src = driver.source
    return src.origin // src.part_rows if src.part_rows else 0


MARKER = ".mpi-join-run"
_OWN = {"commits": re.compile(r"commit-\d{6}\.json(\.tmp)?$"),
        "results": re.compile(r"part-r\d{4}-\d{5}\.parquet(\.tmp)?$"),
        "metrics": re.compile(r"(rank-\d{4}|summary)\.json(\.tmp)?$"),
        "aggregate": re.compile(r"snapshot-\d{6}\.parquet(\.tmp)?$")}


def _prepare_output(out, keep=None, overwrite=False):
    """Make `out` ready for this run without deleting anything mpi-join did not write.

    A directory is mpi-join's once it holds the MARKER file (written on first use). An existing
    non-empty directory without it is refused unless `overwrite`. From an earlier run only
    mpi-join's own files go: result part files, rank metrics and _SUCCESS, by their names, never
    through a symlink (a linked results/ or metrics/ is refused); when resuming, the result files
    the checkpoint committed (`keep`) stay."""
    from .storage.paths import plain_dir, remove_file
    if "://" in out:
        raise JobError(f"output.dir: {out}: runs write results to a local or shared filesystem path")
    try:
        plain_dir(out, "output.dir")
        marked = os.path.isfile(os.path.join(out, MARKER))
        mine = {MARKER, LOCK, "_checkpoints"}
        if os.path.isdir(out) and set(os.listdir(out)) - mine and not marked and not overwrite:
            raise JobError(f"output.dir: {out} exists, is not empty and holds no mpi-join run; choose another "
                           "directory, or pass --overwrite to write into it (only mpi-join's own files are replaced)")
        rdir = os.path.join(out, "results")
        for sub in _OWN:
            plain_dir(os.path.join(out, sub), f"output.dir's {sub}/")
        if keep is not None:
            missing = [f for f in keep if not os.path.exists(os.path.join(rdir, f))]
            if missing:
                raise JobError(f"{rdir}: result file {missing[0]} committed by the checkpoint is missing; "
                               "cannot resume exactly once")
        for sub, own in _OWN.items():
            d = os.path.join(out, sub)
            for f in os.listdir(d) if os.path.isdir(d) else []:
                # a resume keeps the committed result files and the snapshots (rewritten past the cut)
                if own.fullmatch(f) and not (keep is not None and (sub in ("aggregate", "commits") or
                                                                  (sub == "results" and f in keep))):
                    remove_file(out, os.path.join(d, f))
        for name in ("_SUCCESS",) + (("_COMMITTED",) if keep is None else ()):
            if os.path.lexists(os.path.join(out, name)):
                remove_file(out, os.path.join(out, name))
        # results/*.parquet is the run's answer: a Parquet file or a link mpi-join did not write
        # would sit beside a _SUCCESS that does not name it (collect refuses the run; DuckDB's
        # read_parquet('results/*.parquet') counts it in), so it is refused before anything runs
        # (--overwrite replaces only mpi-join's own files); another file of the user's stays
        left = [f for f in (os.listdir(rdir) if os.path.isdir(rdir) else []) if not (keep is not None and f in keep)]
        foreign = sorted(f for f in left if os.path.islink(os.path.join(rdir, f)) or f.endswith(".parquet"))
        if foreign:
            f = os.path.join(rdir, foreign[0])
            what = f"a symbolic link (to {os.readlink(f)})" if os.path.islink(f) else "a file mpi-join did not write"
            raise JobError(f"{f}: {what}, in output.dir's results/, where a run's part files are its answer; move "
                           f"it out{' (' + str(len(foreign) - 1) + ' more)' if len(foreign) > 1 else ''}")
        os.makedirs(rdir, exist_ok=True)
        if not marked:
            with open(os.path.join(out, MARKER), "w") as f:
                f.write("mpi-join run output: results/, metrics/, aggregate/ and _SUCCESS are written by `mpi-join run`\n")
    except OSError as e:
        raise JobError(f"output.dir: cannot prepare {out}: {e.strerror}") from None
