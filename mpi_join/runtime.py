"""What every rank runs under `mpiexec ... mpi-join run JOB`.

Rank 0 (the master) loads and validates the job and its input before anyone works, then tells
the others to start or to exit with its one-line error. Any exception on any rank after that
aborts the whole job (COMM_WORLD.Abort) with that rank's number and reason: no rank hangs.
"""
import os
import shutil
import sys
import time
import traceback

from .config import load_job
from .errors import JobError
from .metrics import RankMetrics, summarize, write_json
from .strategies import check_runnable
from .transport import Tag, pack_obj, unpack_obj


def run_rank(job_path, overrides):
    """Run this rank's role; returns the process exit code."""
    from mpi4py import MPI
    from .transport import Transport
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        tx = Transport(comm)
        if rank == 0:
            return _master(job_path, overrides, tx)
        return _slave(job_path, overrides, tx)
    except BaseException as e:  # noqa: BLE001 - any failure must take the whole job down
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        sys.stderr.write(f"mpi-join: rank {rank} failed: {type(e).__name__}: {why}\n")
        if not isinstance(e, (JobError, KeyboardInterrupt)):
            traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        comm.Abort(1)
        return 1


def _master(job_path, overrides, tx):
    from .staged import read_staged
    t_start = time.perf_counter()
    err, resume = None, None
    try:
        job = load_job(job_path, overrides)
        check_runnable(job, tx.size)
        arrays = read_staged(job)
        if overrides.get("resume"):
            from .checkpoint import latest_complete
            root = os.path.abspath(overrides["resume"])
            cid, man = latest_complete(root, job, tx.size)
            resume = {"dir": root, "id": cid}
            _prepare_output(job.output, keep=set(man["committed_files"]))
        else:
            _prepare_output(job.output)
    except JobError as e:
        err = str(e)
    for r in range(1, tx.size):
        tx.send(r, Tag.START, pack_obj({"error": err, "resume": resume}))
    tx.flush()
    if err:
        sys.stderr.write(f"mpi-join: error: {err}\n")
        return 2
    from .master.progress import Progress, summary_table
    metrics = RankMetrics(0, "master")
    total = sum(len(a) for a in arrays)
    progress = Progress(total, enabled=job.run.progress)
    master = _strategy_master(job)(job, tx, arrays, metrics, progress, resume)
    if resume:
        sys.stderr.write(f"mpi-join: resuming from checkpoint {resume['id']} in {resume['dir']} "
                         f"at input offset {master.resumed_from['input_offset']:,}\n")
        total -= master.resumed_from["input_offset"]
        progress.total = total
    slave_metrics = master.run()
    wall = master.wall_s           # from the start of the replay (all ranks ready) to the last report
    ranks = [metrics.to_dict(tx)] + slave_metrics
    summary = summarize(ranks, wall, total)
    summary.update(job=job.name, strategy=job.strategy.name, ranks_n=tx.size, resumed_from=master.resumed_from,
                   checkpoints=master.ckpt.completed,
                   startup_s=master.t_replay - t_start, peak_buffer_bytes=metrics.extra.get("peak_buffer_bytes"))
    mdir = os.path.join(job.output, "metrics")
    for r in ranks:
        write_json(os.path.join(mdir, f"rank-{r['rank']:04d}.json"), r)
    write_json(os.path.join(mdir, "summary.json"), summary)
    write_json(os.path.join(job.output, "_SUCCESS"), {"results": summary["results"], "tuples": total})
    if not os.environ.get("MPI_JOIN_QUIET"):
        print(summary_table(summary), flush=True)
    return 0


def _slave(job_path, overrides, tx):
    _, _, buf = tx.recv(source=0, tag=Tag.START)
    start = unpack_obj(buf)
    if start["error"]:
        return 2
    job = load_job(job_path, overrides)
    from .metrics import RankMetrics as RM
    from .results import ResultWriter
    metrics = RM(tx.rank, "slave")
    writer = ResultWriter(os.path.join(job.output, "results"), tx.rank, job.stream_names)
    _strategy_slave(job)(job, tx, metrics, writer, start["resume"])
    return 0


def _strategy_master(job):
    if job.strategy.name == "hash":
        from .master.hash_dispatch import HashMaster
        return HashMaster
    raise JobError(f"strategy {job.strategy.name!r} has no master")


def _strategy_slave(job):
    if job.strategy.name == "hash":
        from .slaves.hash_slave import run_slave
        return run_slave
    raise JobError(f"strategy {job.strategy.name!r} has no slave")


def _prepare_output(out, keep=None):
    """Clear the results and metrics of an earlier run into the same output directory; when
    resuming, keep exactly the result files committed by the checkpoint (`keep`, file names)."""
    if "://" in out:
        raise JobError(f"output.dir: {out}: runs write results to a local or shared filesystem path")
    try:
        os.makedirs(out, exist_ok=True)
        rdir = os.path.join(out, "results")
        if keep is None:
            shutil.rmtree(rdir, ignore_errors=True)
        else:
            missing = [f for f in keep if not os.path.exists(os.path.join(rdir, f))]
            if missing:
                raise JobError(f"{rdir}: result file {missing[0]} committed by the checkpoint is missing; "
                               "cannot resume exactly once")
            for f in os.listdir(rdir) if os.path.isdir(rdir) else []:
                if f not in keep:
                    os.remove(os.path.join(rdir, f))
        shutil.rmtree(os.path.join(out, "metrics"), ignore_errors=True)
        done = os.path.join(out, "_SUCCESS")
        if os.path.exists(done):
            os.remove(done)
        os.makedirs(rdir, exist_ok=True)
    except OSError as e:
        raise JobError(f"output.dir: cannot prepare {out}: {e.strerror}") from None
