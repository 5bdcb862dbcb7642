"""The `mpi-join` command line."""
import os
import subprocess
import sys
import time

import click

from .errors import JobError, fail as _fail

MAX_RANKS = 1 << 16


class Finite(click.FloatRange):
    """A float option in a range that is also finite: click's FloatRange lets NaN through (every
    comparison with it is false)."""
    name = "finite float"

    def convert(self, value, param, ctx):
        import math
        v = super().convert(value, param, ctx)
        if v is not None and not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return v


def _under_mpi():
    return any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"))


class _StrategyChoice(click.Choice):
    """Strategy names from the registry (plugins named in MPI_JOIN_STRATEGIES included)."""

    def __init__(self):
        from . import strategies
        super().__init__(strategies.names())


class _Main(click.Group):
    """The command group: an error Spark or Hadoop raised in the JVM is one line, exit 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as e:
            from .storage.spark.java_errors import java_error_line
            line = java_error_line(e)
            if line is None:
                raise
            click.echo(f"mpi-join: error: {line}", err=True)
            sys.exit(1)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="mpi-join")
def main():
    """Exact sliding-window stream joins across MPI ranks.

    \b
    Typical session:
      mpi-join generate equi --out work/equi          # staged input + job.toml
      mpiexec -n 4 mpi-join run work/equi/job.toml    # or: mpi-join run -n 4 work/equi/job.toml
      mpi-join verify work/equi/out --job work/equi/job.toml

    \b
    Live streams (README "Live streams"):
      mpi-join generate equi --live --out work/live --rate 5000   # files land in real time
      mpi-join stage --follow work/live/job.toml                 # Spark stages them into a log
      mpi-join run -n 4 --follow work/live/job.toml              # joins the log as it grows
      mpi-join tail work/live/out                                # each committed result once
    """


@main.command()
@click.argument("job", type=click.Path(dir_okay=False))
@click.option("-n", "--np", "nprocs", type=click.IntRange(1, MAX_RANKS), default=None,
              help="Launch this many ranks with mpiexec yourself (default: run as one rank of an "
                   "mpiexec/srun launch); where there is no mpiexec, they run in this process (--local).")
@click.option("--output", type=click.Path(file_okay=False), default=None,
              help="Override [output] dir: where results/ and metrics/ are written.")
@click.option("--staged", type=click.Path(file_okay=False), default=None,
              help="Override [input] staged: the staged input directory.")
@click.option("--strategy", default=None, help="Override [strategy] name (see `mpi-join strategies`).")
@click.option("--resume", type=click.Path(file_okay=False), default=None,
              help="Restart from the newest complete checkpoint in this directory: results already "
                   "committed are kept, later ones discarded and recomputed (exactly once). Also at "
                   "another rank count or run.sources: each worker takes its state out of the old "
                   "workers' files (README \"Resuming at another rank count\").")
@click.option("--overwrite", is_flag=True, help="Write into an existing non-empty output directory that no "
              "mpi-join run has used; only mpi-join's own files there are ever replaced.")
@click.option("--follow", is_flag=True, help="Tail a staged log (written by `stage --follow`): join its batches as "
              "they are committed, until its end marker (README \"Live streams\"). With run.sources > 1 "
              "each source waits for whole batches of its parts and commits come at part boundaries; "
              "\"auto\" takes one source here.")
@click.option("--allow-empty", is_flag=True, help="Exit 0 on 0 results even when the input drew a warning (a time "
              "unit that looks wrong, streams that never meet); without it such a run exits 3.")
@click.option("--local", is_flag=True, help="Run every rank in this process, each a thread (-n of them, default 3, at most 4,096 or what the machine's thread limits allow), "
              "without mpiexec: one start instead of one per rank, for small jobs, first tries and notebooks. "
              "Results, checkpoints and output are those of an mpiexec run of the same -n, and each resumes the "
              "other's checkpoints. One core runs the join.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=None,
              help="With --local: run every rank in this one thread, each message delivered in an order this seed "
                   "picks (each link stays first in, first out, as MPI's), instead of as threads happen to run. The "
                   "same seed gives the same interleaving, so a run that failed under one can be replayed under "
                   "it; other seeds try other interleavings (README \"Replaying an interleaving\").")
def run(job, nprocs, output, staged, strategy, resume, overwrite, follow, allow_empty, local, seed):
    """Run JOB (a TOML job file) on the MPI ranks of this launch.

    Rank 0 drives: it reads the staged input, replays the merged stream in seq order and sends it
    into the strategy's graph; the other ranks (workers) join. Results go to OUTPUT/results/part-*.parquet (one
    column <stream>_seq per stream, emit_ns, latency_ns), metrics to OUTPUT/metrics/.

    \b
    The job file:
      [job]       name, ts_unit ("ns" | "us" | "ms" | "s", unit of the ts column; default "ms")
      [input]     staged = "dir"                      staged layout: dir/<stream>/part-*.parquet
                  (written by `mpi-join stage JOB` from each stream's raw input, below)
                  allowed_lateness = "1s"  live staging: how far behind a stream's newest
                  event time a row may arrive (0 to 1 day; README "Live streams")
                  idle_timeout = "5s"      live staging: a stream silent this long no longer
                  holds the watermark back (default: none; README "Live streams")
      [output]    dir = "dir"
                  commit_every = "1s"      results are committed (made durable and visible) at
                  commit_rows = 1000000    least this often and after this many rows at most
                  kafka = { servers = "host:9092", topic = "t", format = "json" | "csv" }
                                           `mpi-join publish` produces the committed results
                                           there, exactly once (README "Results to Kafka")
      [streams.R] schema = { x = "int32", name = "string", z = "char20", pix = "uint8[5000,3]" }
                  (names: identifiers; string: UTF-8 text; charN: at most N bytes; text up to
                  1 MB, rows up to 64 MB)
                  window = "15min" (time, up to 100 years) | 1000 (last 1000 tuples, up to 2^40)
                  | "unbounded"
                  nullable = ["x"]         columns the join compares that may be null (a row
                  with a null key matches nothing); every other column may hold nulls anyway
                  (README "Nulls")
                  raw = { path = "raw/R/*.csv", format = "csv" | "json" | "parquet",
                          time = "column", time_unit = "ms" }   (for stage; time_unit = "timestamp"
                          reads a timestamp or ISO-8601 text, as UTC when it names no time zone)
                        delimiter = ",", header = true        CSV only
                        source = "socket", options = { ... }  live: a Spark streaming source
                          instead of files (README "Live streams")
      [predicate] equi  = [ ["R.x", "S.a"], ... ]              all must hold (AND)
                  band  = [ { left = "R.y", right = "S.b", eps = 10, closed = false } ]  (eps finite)
                  theta = [ { udf = "module:function", streams = ["R", "S"] } ]
                  interval = { left = "R", right = "S", lower = "-5s", upper = "0s",
                               closed = "both" | "neither" | "left" | "right" }
                           S.ts - R.ts within [lower, upper] (Flink's between; 0 may lie outside,
                           as in lower = "1s", upper = "5s"), given instead of window =
                  outer = ["R"]            LEFT outer join: each R tuple without a partner is also
                           a result, with null S (["S"]: RIGHT; ["R", "S"]: FULL; every strategy)
                  sql = "SELECT * FROM R r JOIN S s ON r.x = s.a AND ABS(r.y - s.b) < 10 AND
                         s.ts BETWEEN r.ts - INTERVAL '5' SECOND AND r.ts"
                           the join as one SELECT instead of equi, band and interval (README
                           "The join in SQL"); `explain` prints the TOML form it is read as
                  asof = { left = "R", right = "S", direction = "backward" | "forward" | "nearest",
                           tolerance = "5s", closed = true }   with equi keys: each R tuple's one S
                           tuple nearest in event time (README "ASOF joins"; outer = ["R"]: ASOF
                           LEFT JOIN; hash, matrix: keys or none)
                  filter = { R = "device <> 'bot' AND x IN (1, 2)" }   a stream's own condition
                           (SQL: WHERE/ON terms on one stream's columns); a row that fails it
                           meets no partner
                  select = [ ["click_id", "S.id"], ["t", "S.ts"] ]   the columns, named and in
                           order, of collect --with-payload and tail --with-payload (SQL's list)
      [strategy]  name = "hash"; partitions = 60; local_join = "index" | "bnl"
      [run]       batch_size = 8192        tuples per distribution epoch at most (1..2^24)
                  flush_interval = "50ms"  an epoch closes after this long at most (up to 1 day)
                  rate = "max" | N         replay as fast as possible or N tuples/s per stream (up to 1e9)
                  max_inflight = 4         unacknowledged messages per link, backpressure (1..1024)
                  progress = true          live progress line on stderr
                  liveness_timeout = "30s" a rank or link silent this long aborts the job ("off")
                  overload_after = "2s"    replay behind the rate this long: reported overloaded
                  stop_when_overloaded = false  an overloaded run stops with an error
                  sources = "auto"         ranks that read and route the input (1..64): k - 1 more
                           ranks after the strategy's, each routing every kth part of the input;
                           "auto": the planner's choice for the ranks and cores at start (1 on
                           small runs; README "Parallel sources")
                  part = 0                 with sources > 1: tuples per part, rounded up to batches
                           (0: four staged row groups per stream); a source link has credit
                           for a whole part
      [checkpoint] dir = "ckpt"            HDF5 checkpoints (one file per rank + MANIFEST.json)
                  every_tuples = 100000   cut every N input tuples, and/or
                  every = "10s"           every interval; keep = 2 newest complete ones (1..1000)
      [live]      restart_attempts = 3     `mpi-join live` restarts a stager or run that dies at
                  restart_delay = "2s"     most this often, after this delay; with
                  restart_interval = "10min"  at most that many within any such interval
      Numbers are refused outside their ranges; NaN and infinity everywhere. Strategy
      parameters and their ranges: `mpi-join strategies`. What run reads, writes, deletes and
      locks: README "Safety".

    \b
    Exit codes: 0 success, 2 bad job or input (one-line error), 1 a rank failed, 3 a complete
    run with 0 results on input that drew a warning (unless --allow-empty).
    """
    overrides = {"output": output, "staged": staged, "strategy": strategy, "resume": resume}
    flags = dict(overwrite=overwrite, follow=follow, allow_empty=allow_empty)
    if nprocs is not None and not local and not _under_mpi():
        from .launch import mpiexec_path
        if not mpiexec_path():      # the same ranks in this process: the same results and checkpoints
            sys.stderr.write(f"mpi-join: no mpiexec here (pip install mpich, or put one on PATH): running the "
                             f"{nprocs} ranks in this process, as --local does\n")
            local = True
    if seed is not None and not local:
        _fail(JobError("--seed: replays an interleaving of the ranks of one process; add --local"))
    if local:
        if _under_mpi():
            _fail(JobError("--local runs every rank in this one process; start it without mpiexec or srun"))
        if seed is not None:
            from .stepped import run_stepped
            sys.exit(run_stepped(job, dict(overrides, **flags), nprocs or 3, seed))
        from .ranks import run_local
        from .tools.scaling_model import auto_sources
        sys.exit(run_local(job, dict(overrides, **flags), nprocs or 3, auto_sources))
    if nprocs is not None and not _under_mpi():
        args = ["run", job] + sum([[f"--{k}", v] for k, v in overrides.items() if v], []) + (
            ["--overwrite"] if overwrite else []) + (["--follow"] if follow else []) + (
            ["--allow-empty"] if allow_empty else [])
        from .launch import mpiexec_cmd, run as launch
        try:
            cmd = mpiexec_cmd(nprocs, args)
        except JobError as e:
            _fail(e)
        sys.exit(launch(cmd, lambda signum: _stopped_line(job, overrides, follow, signum)))
    from .ranks import run_rank
    from .tools.scaling_model import auto_sources
    sys.exit(run_rank(job, dict(overrides, **flags), auto_sources))


@main.command()
@click.argument("job_path", metavar="JOB", type=click.Path(dir_okay=False))
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="The run's output directory (default: the job's output.dir).")
@click.option("--no-follow", is_flag=True, help="Produce what is committed now and stop.")
def publish(job_path, out, no_follow):
    """Produce the run's committed results to the Kafka topic of [output] kafka, exactly once.

    Each results commit of the run (a followed run commits at every checkpoint; a finished
    batch run is one commit) is produced in one Kafka transaction, with the payload columns
    `collect --with-payload` gives, as JSON objects or CSV lines (output.kafka.format). The
    transaction also records how many commits the topic holds, so a restarted publish goes on
    after the last one, and a `read_committed` consumer sees each result once. Runs until the
    run's final commit; Ctrl-C stops (what is not committed to Kafka is produced again next time).

    \b
      [output]
      dir = "out"
      kafka = { servers = "broker:9092", topic = "joined", format = "json" }

      mpi-join run --follow -n 4 job.toml &   mpi-join publish job.toml"""
    from .config import load_job
    from .storage.kafka_sink import publish as do_publish
    try:
        job = load_job(job_path)
        n, rows = do_publish(job, out, once=no_follow, say=lambda m: click.echo(m, err=True))
    except JobError as e:
        _fail(e)
    except KeyboardInterrupt:
        click.echo("publish: stopped; the next publish goes on after the last commit on the topic", err=True)
        sys.exit(130)
    click.echo(f"published {n} commit(s), {rows:,} result(s)")


@main.command()
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--counts", is_flag=True, help="One line per commit (results so far, input covered) instead of "
              "the result rows.")
@click.option("--no-follow", is_flag=True, help="Print what is committed now and stop.")
@click.option("--with-payload", is_flag=True, help="Add each result's tuples' columns (<stream>_ts, <stream>_<col>) "
              "from the staged input; needs --job.")
@click.option("--job", "job_path", type=click.Path(dir_okay=False), default=None,
              help="The run's job file (for --with-payload).")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default="csv", show_default=True,
              help="csv: a header line, then a line per result; jsonl: a JSON object per result.")
def tail(out, counts, no_follow, with_payload, job_path, fmt):
    """Print the results of the run in OUT as they are committed.

    A followed run (`run --follow`) commits its results at least every output.commit_every;
    each commit's new part files are checked against their records and printed (<stream>_seq...,
    emit_ns, latency_ns, and with --with-payload the tuples' columns), each result once, until
    the run's last commit. Ctrl-C stops. On a finished replay run it prints its results once.

    \b
      mpi-join tail OUT --with-payload --job JOB --format jsonl | consumer"""
    import csv
    import io
    import json
    import numpy as np
    import pyarrow.parquet as pq
    from .storage.tail import Payloads, follow, project
    if not os.path.isdir(out):
        _fail(JobError(f"{out}: no such run output directory"))
    if os.path.exists(os.path.join(out, "_manifest.json")):
        _fail(JobError(f"{out}: a staged directory (it has _manifest.json), not a run's output; tail reads the "
                       f"results of a run (its output.dir)"))
    if with_payload and not job_path:
        _fail(JobError("--with-payload: give the run's job file with --job JOB (its staged input holds the columns)"))
    if (with_payload or job_path) and counts:
        _fail(JobError("--counts prints one line per commit; --with-payload and --job go with the result rows"))
    header = False
    try:
        payloads = None
        if with_payload:
            from .config import load_job
            job = load_job(job_path)
            payloads = Payloads(job)
        for rec, files in follow(out, once=no_follow):
            if counts:
                click.echo(f"commit {rec['commits'] - 1}: {rec['results']:,} results, input seq "
                           f"{rec.get('input_offset') or 0:,}{' (final)' if rec.get('final') else ''}")
                continue
            for f in files:
                t = pq.read_table(f)
                names = list(t.column_names)
                rows = list(zip(*[t.column(i).to_pylist() for i in range(t.num_columns)]))
                if payloads is not None:
                    seq = [f"{n}_seq" for n in payloads.job.stream_names]
                    if any(c not in names for c in seq):
                        raise JobError(f"{f}: result columns {', '.join(seq)} expected (is --job the run's job?)")
                    seqs = np.stack([t.column(c).fill_null(-1).to_numpy() for c in seq], axis=1).astype(np.int64) \
                        if t.num_rows else np.zeros((0, len(seq)), np.int64)
                    names, cols = project(payloads.job, names + payloads.names(),
                                          [t.column(i).to_pylist() for i in range(t.num_columns)] +
                                          payloads.columns(seqs))
                    rows = list(zip(*cols)) if cols else []
                if fmt == "jsonl":
                    for r in rows:
                        click.echo(json.dumps(dict(zip(names, r))))
                    continue
                buf = io.StringIO()
                w = csv.writer(buf, lineterminator="\n")
                if not header:
                    w.writerow(names)
                    header = True
                w.writerows(["" if v is None else v for v in r] for r in rows)
                click.echo(buf.getvalue(), nl=False)
    except JobError as e:
        _fail(e)
    except KeyboardInterrupt:
        sys.exit(130)


@main.command()
@click.argument("job_path", metavar="JOB", type=click.Path(dir_okay=False))
@click.option("-n", "--np", "nprocs", type=click.IntRange(1, MAX_RANKS), required=True,
              help="MPI ranks of the following run.")
@click.option("--no-drain", is_flag=True, help="Ctrl-C or SIGTERM stops at once: the log stays open and the "
              "committed results stand, and the next `live` continues both (default: drain, see below).")
@click.option("--trigger", default="500ms", show_default=True, help="How often the stager looks for new files.")
@click.option("--batch-mb", type=click.IntRange(1, 1 << 20), default=64, show_default=True,
              help="The landing files one micro-batch reads, at most this many MB in all.")
@click.option("--status-every", type=Finite(0.2, 3600), default=5.0, show_default=True,
              help="Seconds between status lines (and OUT/metrics/live.json).")
@click.option("--spark-start", type=click.Choice(["now", "needed"]), default="now", show_default=True,
              help="now: the stager starts Spark's JVM at its start, on a thread beside its fast path, so a file that needs Spark (or a restarted stager's) finds it up; needed: at the first such file (no JVM while every file is read in process).")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Serve the status figures to Prometheus on this port (GET /metrics; gauges named "
              "mpi_join_live_*).")
def live(job_path, nprocs, no_drain, trigger, batch_mb, status_every, metrics_port, spark_start):
    """Run a live join as one supervised job: the stager (`stage --follow JOB`) and the
    following run (`run -n N --follow JOB`) together.

    \b
    It checks the job before anything starts (landing directories, what a live log cannot
    hold), starts both, and restarts either when it dies, by the job's [live] restart strategy
    (restart_attempts, restart_delay, restart_interval): a stager continues its log, a run
    resumes from its newest checkpoint (or the log's beginning before its first). Each restart
    is one line. A status line every --status-every seconds: per stream rows staged and
    quarantined per second, the watermark's lag behind wall time, results committed and per
    second, restarts; the same in OUT/metrics/live.json.

    \b
    Ctrl-C or SIGTERM (to it or its process group): by default it drains: stages every file
    that has landed, ends the log, and the run commits its last results; exit 0. With
    --no-drain: stops at once, exit 130 (143 for SIGTERM), the log open; a second Ctrl-C stops
    a drain at once. Exit 1 when a child dies more often than the restart strategy allows."""
    from .config import load_job
    from .live import Supervisor, precheck
    from .storage.paths import check_layout, job_dirs
    from .units import parse_duration_ns
    from .live import Exporter
    try:
        job = load_job(job_path)
        check_layout(job_dirs(job))
        parse_duration_ns(trigger, "--trigger")
        lock = precheck(job, nprocs)
        try:
            exporter = Exporter(job, metrics_port) if metrics_port else None
        except OSError as e:
            lock.release()
            raise JobError(f"--metrics-port {metrics_port}: cannot serve metrics there ({e.strerror or e})") from None
    except JobError as e:
        _fail(e)
    from .live import expected_paths
    for ln in expected_paths(job):
        click.echo(ln, err=True)
    from .storage.kafka_source import is_kafka
    click.echo("live: no Spark: every stream is a Kafka topic, read in the stager's process" if all(
        is_kafka(s) for s in job.streams) else "live: Spark's JVM starts " + (
        "now, on a thread beside the stager's fast path (--spark-start needed: at the first file that needs it)"
        if spark_start == "now" else "at the first file that needs it"), err=True)
    try:
        code = Supervisor(job, nprocs, lambda m: click.echo(m, err=True), drain=not no_drain, trigger=trigger,
                          batch_mb=batch_mb, status_every=status_every, exporter=exporter,
                          spark_start=spark_start).run()
    finally:
        lock.release()
    sys.exit(code)


def _generate_live(workload, out, rate, window, keys, seed, seconds, disorder, late, every, strategy):
    from .tools.live_workload import Generator, job_text
    from .units import parse_duration_ns
    if workload != "equi":
        _fail(JobError(f"--live: the live workload is an equi join; got {workload!r}"))
    try:
        every_s = parse_duration_ns(every, "--file-every") / 1e9
    except JobError as e:
        _fail(e)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "job.toml")
    with open(path, "w") as f:
        f.write(job_text(rate, window or "1s", "500ms", keys or 10_000, strategy))
    click.echo(f"wrote the job file {path}; writing {rate:,.0f} tuples/s per stream into {out}/raw/R and "
               f"{out}/raw/S{'' if seconds else ' until Ctrl-C'}; stage them with: mpi-join stage --follow {path}",
               err=True)
    gen = Generator(out, rate, every_s, disorder, late, 500, keys or 10_000, seed)
    try:
        gen.run(seconds, say=lambda m: click.echo(m, err=True))
    except KeyboardInterrupt:
        pass
    click.echo(f"wrote {sum(gen.rows.values()):,} rows in {gen.files} file(s) per stream "
               f"({sum(gen.late_rows.values()):,} of them meant to be late)")


@main.command("bench-door")
@click.option("--out", default="bench-door", show_default=True, type=click.Path(file_okay=False),
              help="Work directory: the raw files, the staged input, the results, door.json.")
@click.option("--impressions", type=click.IntRange(1000, 10**9), default=1_000_000, show_default=True)
@click.option("--clicks", type=click.IntRange(1000, 10**9), default=200_000, show_default=True)
@click.option("-n", "--np", "nprocs", type=click.IntRange(2, MAX_RANKS), multiple=True,
              help="Ranks of the run; repeat to time the pipeline at several counts (the first is the "
                   "ratio in door.json). Default: one rank per core, as DuckDB runs one thread per core.")
@click.option("--no-spark", is_flag=True, help="Skip timing `stage` and `collect` on Spark.")
def bench_door_cmd(out, impressions, clicks, nprocs, no_spark):
    """Raw CSV in, result Parquet with payloads out, against DuckDB on the same files in the same run.

    Generates a click log and its impressions as CSV (ISO-8601 times with offsets, text ids, Zipf
    users, nulls, a few unreadable times), has DuckDB join them into Parquet, then `pipeline`
    (staging and collecting in process), checks the two answers are equal pair for pair, and
    prints the ratio; then times `stage --engine spark` and `collect --engine spark` alone.

    \b
      mpi-join bench-door --no-spark            # pipeline at one rank per core against DuckDB
      mpi-join bench-door -n 2 -n 3             # at 2 ranks, then at 3"""
    import json as _json
    from .tools.bench_door import bench_door, one_per_core
    os.makedirs(out, exist_ok=True)
    fig = bench_door(os.path.abspath(out), nprocs or (one_per_core(),), impressions, clicks, spark=not no_spark,
                     say=lambda m: click.echo(m, err=True))
    with open(os.path.join(out, "door.json"), "w") as f:
        _json.dump(fig, f, indent=2)
    click.echo(", ".join(f"pipeline -n {n} {v:.2f} s" for n, v in fig["pipeline_s_by_ranks"].items())
               + f", DuckDB {fig['duckdb_s']:.2f} s: {fig['ratio']:.2f}x; "
               + (f"stage --engine spark {fig['stage_spark_s']:.1f} s, collect --engine spark "
                  f"{fig['collect_spark_s']:.1f} s" if "stage_spark_s" in fig else "Spark not timed"))


@main.command("bench-live")
@click.option("--out", default="bench-live", show_default=True, type=click.Path(file_okay=False),
              help="Work directory: one folder per trial, and live.json.")
@click.option("--rates", default="5000,10000,20000,40000", show_default=True,
              help="Rates to try, tuples/s per stream, ascending; the ladder stops at the first one whose lag grows.")
@click.option("--seconds", type=click.IntRange(5, 3600), default=20, show_default=True, help="Length of each trial.")
@click.option("-n", "--np", "nprocs", type=click.IntRange(2, MAX_RANKS), default=3, show_default=True,
              help="Ranks of the following run.")
@click.option("--spark-rates", default="1000,2000,4000,8000,16000", show_default=True,
              help="The rates to try for Spark's own stream-stream join, ascending.")
@click.option("--no-spark", is_flag=True, help="Skip Spark Structured Streaming's own stream-stream join.")
@click.option("--kafka", "kafka", is_flag=True,
              help="Kafka topics in and out instead of landing files, against Flink SQL's interval join (Flink's "
                   "Kafka connector fetched with Maven; `make flink` for Flink itself).")
@click.option("--kafka-servers", metavar="HOST:PORT",
              help="--kafka: the broker to use (default: one of its own, started as dev-services starts it).")
@click.option("--flink-rates", default="5000,10000,20000,40000", show_default=True,
              help="--kafka: the rates to try for Flink, ascending.")
@click.option("--no-flink", is_flag=True, help="--kafka: skip Flink.")
def bench_live_cmd(out, rates, seconds, nprocs, no_spark, spark_rates, kafka, kafka_servers, flink_rates, no_flink):
    """Live streams end to end: generator, `stage --follow` and `run --follow` together.

    Reports for each rate the end-to-end latency (a row's file landing to its result's commit)
    p50 and p99 and whether the lag grows; the highest rate sustained; the latency and its parts
    (staging, replay, join, commit) at 80% of that rate; the stager's CPU per row and the cores
    the generator, the stager and the run used; `mpi-join live`'s time from its start to its log
    and to its first committed result; and Spark Structured Streaming's own stream-stream join
    on the same input and cores, measured the same way.

    With --kafka: R and S are Kafka topics and the results go to a third, exactly once, for
    `mpi-join live` and for Flink SQL's interval join with its exactly-once Kafka sink; the
    latency runs from a record's produce time to its result's arrival at a read_committed
    consumer (tools/bench_kafka.py); OUT/kafka.json.

      mpi-join bench-live --kafka --seconds 20 --rates 10000,20000,40000"""
    from .tools.bench_live import bench_live
    ladders = {}
    for opt, text in (("--rates", rates), ("--spark-rates", spark_rates), ("--flink-rates", flink_rates)):
        try:
            ladders[opt] = [float(x) for x in text.split(",") if x.strip()]
        except ValueError:
            _fail(JobError(f"{opt}: expected numbers separated by commas, got {text!r}"))
        if not ladders[opt] or any(r <= 0 for r in ladders[opt]) or ladders[opt] != sorted(ladders[opt]):
            _fail(JobError(f"{opt}: expected positive rates in ascending order, got {text!r}"))
    try:
        if kafka:
            from .tools.bench_kafka import bench_kafka
            bench_kafka(out, ladders["--rates"], seconds, nprocs, flink=not no_flink, say=lambda m: click.echo(m, err=True),
                        flink_rates=ladders["--flink-rates"], servers=kafka_servers)
            return
        bench_live(out, ladders["--rates"], seconds, nprocs, spark=not no_spark, say=lambda m: click.echo(m, err=True),
                   spark_rates=ladders["--spark-rates"])
    except JobError as e:
        _fail(e)


def _stage_follow(job, out, master, conf, force, until, trigger, batch_bytes=64 << 20, drain=True,
                  spark_start="needed"):
    from .storage.spark.follow import follow, landing_dir
    from .storage.spark.session import spark_session
    from .storage.staged_log import hold_staged, refuse_live, until_ts
    from .units import parse_duration_ns
    every = parse_duration_ns(trigger, "--trigger") / 1e9
    refuse_live(job)
    if until not in (None, "end"):
        until_ts(until, job)
    for s in job.streams:                           # before any JVM starts
        if s.raw is None:
            raise JobError(f"{job.path}: streams.{s.name}.raw: required to stage (path, format, time, time_unit)")
        landing_dir(s)
    lock = hold_staged(out or job.staged, follow=True, force=force, say=lambda m: click.echo(m, err=True))
    try:
        man = follow(lambda: spark_session(master, "mpi-join stage --follow", conf, shield_term=True), job,
                     out or job.staged, until=until, trigger=f"{max(every, 0.05):g} seconds",
                     say=lambda m: click.echo(m, err=True), force=force, batch_bytes=batch_bytes, drain=drain,
                     spark_start=spark_start)
    finally:
        if lock is not None:
            lock.release()
    q = man["quarantined"]
    late = man["log"]["late"]
    per = ", ".join(f"{k} {v['count']:,}" for k, v in man["streams"].items())
    click.echo(f"staged {man['total']:,} tuples in {man['log']['batches']} batch(es) ({per}); quarantined "
               f"{sum(q.values()):,}, of them late {sum(late.values()):,}; "
               + ("the log has ended" if man["log"].get("ended") else "the log stays open"))


def _planned_command(f):
    """`check` and `explain`: a command of JOB and the rank count it is checked and planned for."""
    f = click.option("-n", "--np", "nprocs", type=click.IntRange(1, MAX_RANKS), default=4, show_default=True,
                     help="MPI ranks the job will run on.")(f)
    return main.command()(click.argument("job_path", metavar="JOB", type=click.Path(dir_okay=False))(f))


@_planned_command
def check(job_path, nprocs):
    """Validate JOB and its staged input without running: the job file, the strategy on -n ranks,
    the staged manifest (time unit, schemas, counts) and every Parquet file's schema. Exit 0 when
    a run would start, 2 with a one-line error otherwise."""
    job, man = _planned(job_path, nprocs, "check")
    _warn(job, man)
    if man is None:
        click.echo(f"ok: {job_path}: strategy {job.strategy.name} on {nprocs} ranks; nothing staged yet in "
                   f"{job.staged}, so the staged input is not checked (`mpi-join stage JOB` stages it, and "
                   f"`check` then checks it)")
        return
    per = ", ".join(f"{k} {v['count']:,}" for k, v in man["streams"].items())
    click.echo(f"ok: {job_path}: strategy {job.strategy.name} on {nprocs} ranks, {man['total']:,} staged tuples "
               f"({per}), ts in {job.ts_unit}")


@_planned_command
def explain(job_path, nprocs):
    """Print JOB's plan on -n ranks: the strategy and its parameters, each rank's role and links,
    each window in tuples at the staged arrival rate, the state per worker, and which local join
    decides which condition. Validates like `mpi-join check` first."""
    from .storage.staged import staged_manifest
    from .tools.plan import not_staged_yet
    job, lines = _planned(job_path, nprocs, "explain")
    click.echo("\n".join(lines))
    _warn(job, None if not_staged_yet(job) else staged_manifest(job))


def _planned(job_path, nprocs, what):
    """(the job, plan.check or plan.explain of it on `nprocs` ranks); a one-line error exits 2."""
    from .tools import plan
    from .config import load_job
    try:
        job = load_job(job_path)
        return job, getattr(plan, what)(job, nprocs)
    except JobError as e:
        _fail(e)


def _warn(job, man):
    """One line on stderr per warning about the staged input (input_warnings.py)."""
    from .storage.input_warnings import warnings
    for w in warnings(job, man):
        click.echo(f"mpi-join: warning: {w}", err=True)


@main.command()
@click.argument("job_path", metavar="JOB", type=click.Path(exists=True, dir_okay=False))
@click.option("-n", "--np", "nprocs", type=click.IntRange(1, MAX_RANKS), default=8, show_default=True,
              help="Largest rank count to consider (the driver and up to n-1 operators).")
@click.option("--tn", default=50.0, show_default=True, help="One network hop's latency, microseconds (psp's own model).")
@click.option("--ts", default=None, type=Finite(), help="Send + receive time per tuple, microseconds "
                                                      "(default: measured pack + unpack, a lower bound).")
@click.option("--calibration", default=None, type=click.Path(exists=True),
              help="A bench-suite directory (or its results.json) whose fitted scaling model to use "
                   "(default: the one shipped with mpi-join, fitted on BENCHMARKS.md's run).")
@click.option("--cores", type=click.IntRange(1, MAX_RANKS), default=None,
              help="Cores the ranks share (default: one per rank).")
@click.option("--rate", "rate_text", default=None, metavar="N|max|staged",
              help="The input rate to plan for, tuples/s per stream: a number; `max`, as fast as the staged "
                   "input can be replayed; or `staged`, its event-time rate (a replay at event time). "
                   "Default: JOB's [run] rate, else max.")
@click.option("--goal", type=click.Choice(["throughput", "latency", "memory"]), default=None,
              help="What to rank by, among the strategies that keep up: the highest rate, the lowest delay "
                   "or the least window state. Default: throughput at --rate max, else latency.")
def plan(job_path, nprocs, tn, ts, calibration, cores, rate_text, goal):
    """Recommend a strategy and a rank count for JOB on up to N ranks, from the scaling model.

    The model (README "Scaling model") is calibrated on a bench suite's measured costs; for
    every strategy that can run JOB it gives the sustainable rate per stream, the p50 delay and
    the window state on N ranks at JOB's window, and the fewest ranks that keep up with the
    planned rate (--rate) with a quarter to spare. The recommendation: of the strategies that
    keep up, the best by --goal. A strategy with a cost model of its own (psp: ring length,
    latency, output rate, bandwidth; the selectivity of each pair of streams, measured on a
    sample of the staged input) then prints that too when it is JOB's strategy.

    \b
    Examples:
      mpi-join plan job.toml -n 16                          # the fastest, as fast as the input replays
      mpi-join plan job.toml -n 16 --rate 50000 --goal memory
      mpi-join plan job.toml -n 256 --calibration bench-suite    # costs measured on your machine
      mpi-join generate images --out img --streams 3 --predicate costly --selectivity 0.1
      mpi-join plan img/job.toml -n 8                            # psp's own model follows
    """
    from . import strategies
    from .config import load_job
    from .storage.input_stats import rates_and_windows
    from .tools.scaling_model import load_models, recommend, window_bytes
    try:
        job = strategies.check_strategy(load_job(job_path))
        info = strategies.get(job.strategy.name)
        lines = []
        if len(job.streams) == 2:
            models, machine = load_models(calibration)
            lam, W = rates_and_windows(job)
            target = _plan_rate(rate_text, job, lam)
            said, _ = recommend(job, nprocs, models, target, max(W), cores, goal,
                                window_bytes(job, [target or x for x in lam], W))
            lines += [f"calibration: {calibration or 'shipped'} ({machine.get('cores', '?')} cores, "
                      f"{machine.get('date', '?')})"] + said
        if info.planner:
            more, _ = info.load("planner")(job, max(1, nprocs - 1), Tn=tn * 1e-6, Ts=None if ts is None else ts * 1e-6)
            lines += ([""] if lines else []) + more
        if not lines:
            raise JobError(f"{job_path}: the scaling model covers two-stream jobs, and strategy {info.name!r} has no "
                           f"cost model of its own; `mpi-join explain JOB` prints its plan")
    except JobError as e:
        _fail(e)
    for line in lines:
        click.echo(line)


def _plan_rate(text, job, staged):
    """plan's --rate: tuples/s per stream, or None for as fast as the input can be replayed."""
    if text is None:
        return job.run.rate
    if text == "max":
        return None
    if text == "staged":
        return max(staged)
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    from .config import MAX_RATE
    if not 0 < v <= MAX_RATE:
        raise JobError(f"--rate: expected tuples/s per stream in (0, 1e9], max or staged, got {text!r}")
    return v


@main.command()
@click.argument("workload", type=click.Choice(["band", "equi", "images"]))
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Directory for job.toml and the data: staged/ (ready to run), or raw/ with --raw (stage it first).")
@click.option("--tuples", default=20000, show_default=True, type=click.IntRange(1, 10**10),
              help="Tuples over all streams.")
@click.option("--seed", default=1, show_default=True, help="Random seed (same seed, same data).")
@click.option("--rate", default=1000.0, show_default=True, type=Finite(1e-6, 1e9),
              help="Arrival rate per stream, tuples/s (event time).")
@click.option("--window", default=None, help="Time window, e.g. 30s (defaults: band 10s, equi 30s, images 5s).")
@click.option("--count-window", type=click.IntRange(1, 1 << 40), default=None, help="Use a count window of this many tuples instead.")
@click.option("--skew", default=0.7, show_default=True, type=Finite(0, 1),
              help="equi: b-model skew b of the join keys.")
@click.option("--keys", type=click.IntRange(1, 2), default=1, show_default=True, help="equi: join on 1 or 2 key columns.")
@click.option("--domain-bits", default=14, show_default=True, type=click.IntRange(1, 62), help="equi: keys take 2^bits values.")
@click.option("--uniform-keys", type=click.IntRange(1, 1 << 62), default=None, help="equi: uniform keys over this many values instead of the b-model.")
@click.option("--streams", default=3, show_default=True, help="images: number of streams M.")
@click.option("--pixels", type=click.Choice(["5000", "10000", "20000"]), default="5000", show_default=True,
              help="images: RGB pixels per image.")
@click.option("--predicate", type=click.Choice(["similarity", "probabilistic", "costly"]), default="similarity",
              show_default=True, help="images: per-pixel similarity UDF, a coin with set selectivity, or that "
                                      "coin at the cost of comparing every pixel.")
@click.option("--selectivity", default=0.01, show_default=True, type=Finite(0, 1), help="images: selectivity of the probabilistic and costly predicates.")
@click.option("--strategy", default=None, type=_StrategyChoice(),
              help="Strategy written into job.toml (default: the one the registry names for this workload, "
                   "else hash).")
@click.option("--raw", type=click.Choice(["csv", "json", "parquet"]), default=None,
              help="Write raw files (out/raw/<stream>/) for `mpi-join stage` instead of staged data.")
@click.option("--live", is_flag=True, help="equi: write CSV files into landing directories out/raw/R and out/raw/S "
              "in real time, at --rate per stream, for `stage --follow` (README \"Live streams\").")
@click.option("--seconds", type=Finite(), default=None, help="--live: write for this long (default: until Ctrl-C).")
@click.option("--disorder", type=Finite(0, 1), default=0.05, show_default=True,
              help="--live: share of rows behind by up to half the allowed lateness (out of order, not late).")
@click.option("--late", type=Finite(0, 1), default=0.001, show_default=True,
              help="--live: share of rows behind by one to two allowed latenesses (late: quarantined).")
@click.option("--file-every", default="200ms", show_default=True, help="--live: a file per stream this often.")
def generate(workload, out, tuples, seed, rate, window, count_window, skew, keys, domain_bits, uniform_keys, streams,
             pixels, predicate, selectivity, strategy, raw, live, seconds, disorder, late, file_every):
    """Generate a workload as staged input plus a job file.

    \b
    band    band-join benchmark: R<x int32, y float32, z char20>, S<a int32, b float32, c float64, d bool>,
            values uniform in 1..10^4, |x-a| < 10 and |y-b| < 10, fixed rate per stream
    equi    shared-nothing paper: Poisson arrivals, 64-byte tuples, b-model keys (skew b)
    images  PSP multi-way: M streams of k-pixel RGB images, similarity UDF or probabilistic predicate
    """
    if live:
        return _generate_live(workload, out, rate, window, uniform_keys, seed, seconds, disorder, late, file_every,
                              strategy)
    from .tools.workloads import make
    from . import strategies
    if strategy is None:
        strategy = strategies.for_workload(workload)
    try:
        path = make(workload, out, tuples=tuples, seed=seed, rate=rate, window=window, skew=skew, keys=keys,
                    domain_bits=domain_bits, streams=streams, pixels=int(pixels), predicate=predicate,
                    selectivity=selectivity, strategy=strategy, count_window=count_window, raw=raw,
                    uniform_keys=uniform_keys)
    except (JobError, ValueError) as e:
        _fail(e)
    where = os.path.join(out, "raw" if raw else "staged")
    click.echo(f"wrote {tuples:,} tuples to {where} and the job file {path}")
    from .config import load_job
    job = load_job(path)
    can = strategies.runnable(job)
    if strategy not in can:
        kinds = ", ".join(sorted(job.predicate.kinds))
        click.echo(f"note: strategy {strategy!r} cannot run this workload ({len(job.streams)} streams, {kinds} "
                   "predicates); " + (f"use --strategy {can[0]} (or: {', '.join(can)})" if can else
                                      "no strategy in this version can; `mpi-join oracle JOB` computes its exact "
                                      "result in one process"), err=True)


@main.command()
@click.argument("query", type=click.Choice(["q5", "q7", "band"]))
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Directory for job.toml and raw/<stream>/ (Parquet); stage it with `mpi-join stage OUT/job.toml`.")
@click.option("--tables", type=click.Path(file_okay=False, exists=True), default=None,
              help="A tpchgen-cli parquet output directory (default: run tpchgen-cli at --sf into OUT/tpch).")
@click.option("--sf", default=0.01, show_default=True, type=Finite(0.001, 1000),
              help="TPC-H scale factor, when tpchgen-cli runs.")
@click.option("--rate", default=2000.0, show_default=True, type=Finite(1, 1e9),
              help="Event-time rate of both streams together, tuples/s.")
@click.option("--window", default="10s", show_default=True, help="Time window of both streams.")
@click.option("--limit", default=0, show_default=True, type=click.IntRange(0),
              help="At most this many rows per stream, from the start of each table (0: all).")
@click.option("--strategy", default=None, type=_StrategyChoice(),
              help="Strategy written into job.toml; one that computes aggregates online also gets the query's "
                   "aggregate. [default: the first such strategy, biclique]")
def tpch(query, out, tables, sf, rate, window, limit, strategy):
    """Build a TPC-H workload of the join-biclique paper from tpchgen-cli output.

    \b
    q5    ORDERS of 1994 x LINEITEM on the order key; sum(L.price), count(*) by O.priority
    q7    LINEITEM shipped 1995-1996 x SUPPLIER on the supplier key; sum(L.price) by S.nation
    band  LINEITEM L1 (TRUCK, quantity > 48) x LINEITEM L2 (instruction NONE), |orderkey| <= 1;
          count(*), min and max of L2.quantity by L2.mode

    Writes raw Parquet with an event_time column and a job file; then `mpi-join stage
    OUT/job.toml` (Spark) and `mpi-join run -n N OUT/job.toml`.
    """
    from .tools import tpch as T
    try:
        path, rows = T.make(query, out, tables=tables, sf=sf, rate=rate, window=window, limit=limit,
                            strategy=strategy)
    except (JobError, ValueError) as e:
        _fail(e)
    click.echo(f"wrote {', '.join(f'{n} {k:,} rows' for n, k in rows.items())} to {os.path.join(out, 'raw')} and "
               f"the job file {path}; next: mpi-join stage {path}")


_MASTER = click.option("--master", default="local[*]", show_default=True,
                       help="Spark master URL (local[*], spark://host:7077, yarn, ...).")
_CONF = click.option("--conf", multiple=True, metavar="KEY=VALUE", help="Extra Spark configuration (repeatable).")


@main.command()
@click.argument("job_path", metavar="JOB", type=click.Path(dir_okay=False))
@click.option("--out", default=None, help="Staged output path or URI (default: the job's [input] staged).")
@click.option("--overwrite", is_flag=True, help="Stage into an existing non-empty directory that is not a "
              "staged directory (its stream folders are replaced).")
@click.option("--force", is_flag=True, help="Stage again even when the staged input is up to date (same "
              "settings, raw files unchanged).")
@click.option("--allow-empty", is_flag=True, help="Stage a stream that ends up with no rows (all quarantined, or "
              "empty raw files) instead of refusing it.")
@click.option("--follow", is_flag=True, help="Stage live: keep reading the files that land in each stream's "
              "raw directory into an append-only staged log (README \"Live streams\").")
@click.option("--until", default=None, metavar="end|TIME", help="With --follow: stop once the files present now "
              "are staged ('end'), or once the watermark passes an event time (a number in the job's ts_unit, or "
              "ISO-8601 text); then end the log. Default: run until Ctrl-C or SIGTERM.")
@click.option("--trigger", "trigger", default="500ms", show_default=True, help="With --follow: how often Spark "
              "looks for new files (a micro-batch at most this often).")
@click.option("--batch-mb", type=click.IntRange(1, 1 << 20), default=64, show_default=True, help="With --follow: "
              "the landing files one micro-batch reads, at most this many MB in all (one file at least), so that a "
              "backlog is staged in bounded steps.")
@click.option("--spark-start", type=click.Choice(["now", "needed"]), default="needed", show_default=True,
              help="With --follow: when Spark's JVM starts: now (on a thread beside the fast path) or at the first "
                   "file that needs it.")
@click.option("--no-drain", is_flag=True, help="With --follow: Ctrl-C or SIGTERM stops at once and leaves the log "
              "open, to be continued by the next `stage --follow` (default: stage every file that has landed, then "
              "end the log).")
@click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default="auto", show_default=True,
              help="At rest: `local` reads local CSV files in this process (the stager's reader, no JVM), `spark` "
                   "with Spark; `auto` takes local where every file allows it (local CSV, values Spark parses the "
                   "same way, --master local) and says which it took in its first line.")
@_MASTER
@_CONF
def stage(job_path, out, master, conf, overwrite, force, allow_empty, follow, until, trigger, batch_mb, no_drain,
          engine, spark_start):
    """Stage the raw input of JOB into the staged layout, in this process or with Spark.

    Each stream's `raw = { path, format, time, time_unit }` names its files (CSV, JSON lines or
    Parquet; a file, directory, glob, or hdfs:// / file:// URI) and its event-time column (a
    timestamp, or a number in ns/us/ms/s). The union is ordered by (event time, stream, file,
    row) and numbered with a dense seq. Rows whose event time or columns are null or cannot be
    parsed go to <staged>/_quarantine/<stream>/ with the reason; the counts are printed and kept
    in the manifest. Also runnable as `spark-submit jobs/stage.py JOB`.

    \b
    Live: `stage --follow JOB` keeps staging the files that land in each raw directory into an
    append-only staged log (atomic batch commits, an event-time watermark, late rows
    quarantined), until --until or Ctrl-C/SIGTERM; `run --follow JOB` joins it as it grows."""
    from .config import load_job
    from .storage.paths import check_layout, job_dirs
    from .storage.spark.session import spark_session
    from .storage.spark.stage import precheck, small_input, stage as do_stage, stageable
    from .storage.staged_log import hold_staged
    if (until or trigger != "500ms" or batch_mb != 64 or no_drain or spark_start != "needed") and not follow:
        _fail(JobError("--until, --trigger, --batch-mb, --spark-start and --no-drain go with --follow (live staging)"))
    try:
        job = load_job(job_path)
        check_layout(job_dirs(job, stage_out=out))     # before any JVM starts
        if follow:
            return _stage_follow(job, out, master, conf, force, until, trigger, batch_mb << 20, not no_drain,
                                 spark_start)
        stageable(job)
        lock = hold_staged(out or job.staged, force=force, say=lambda m: click.echo(m, err=True))
        try:
            man = precheck(job, out, force=force, overwrite=overwrite, allow_empty=allow_empty)
            if man is not None:
                click.echo(f"stage: {out or job.staged} is up to date (same settings, raw files unchanged); --force "
                           f"stages again", err=True)
            else:
                man = _stage_local(job, out, engine, master, conf, allow_empty)
            if man is None:
                man = do_stage(spark_session(master, "mpi-join stage", conf, small=small_input(job)), job, out,
                               progress=lambda m: click.echo(m, err=True), overwrite=overwrite, force=force,
                               allow_empty=allow_empty)
        finally:
            if lock is not None:
                lock.release()
    except JobError as e:
        _fail(e)
    q = man["quarantined"]
    per = ", ".join(f"{k} {v['count']:,}" for k, v in man["streams"].items())
    bad = ", ".join(f"{k} {v:,}" for k, v in q.items() if v)
    click.echo(f"staged {man['total']:,} tuples ({per}); quarantined {sum(q.values()):,}" + (f" ({bad})" if bad else ""))
    _warn(job, man)          # a wrong time unit, streams that never meet: said where they are made


@main.command("warm-spark")
@click.option("--force", is_flag=True, help="Build the archive again even when it is up to date.")
@click.option("--where", is_flag=True, help="Print the archive's path (and whether it is there) and exit.")
def warm_spark(force, where):
    """Make Spark start faster on this machine (once, one to two minutes).

    Runs a small stage with Spark listing the classes its JVM loads, then writes them, parsed
    and verified, into a class-data-sharing archive that every later local Spark driver maps at
    start-up (stage, collect, pipeline, stage --follow): a small stage went from 25 s to 15 s
    on 2 cores. The archive (about 200 MB) is kept in $MPI_JOIN_CACHE, else
    $XDG_CACHE_HOME/mpi-join, else ~/.cache/mpi-join, under a name that hashes the java binary
    and the Spark jars: after an upgrade of either, run this again. Without it everything works
    as before (README "Spark start-up")."""
    from .storage.spark import warm
    if where:
        path, ok = warm.archive_path(), warm.usable_archive()
        click.echo(f"{path or '(no java found)'} ({'present' if ok else 'not built'})")
        return
    try:
        warm.build(progress=lambda m: click.echo(m, err=True), force=force)
    except JobError as e:
        _fail(e)


@main.command()
@click.argument("job_path", metavar="JOB", type=click.Path(dir_okay=False))
@click.option("-n", "--np", "nprocs", type=click.IntRange(1, MAX_RANKS), default=4, show_default=True, help="MPI ranks for the run.")
@click.option("--with-payload", is_flag=True, help="Collect with each result's input columns.")
@click.option("--verify", is_flag=True, help="Check the results against the oracle at the end.")
@click.option("--collect-out", default=None, help="Collected dataset (default: the run's output dir + '-collected').")
@click.option("--force", is_flag=True, help="Stage again even when the staged input is up to date.")
@click.option("--overwrite", is_flag=True, help="Let the run replace a non-empty output dir it did not write.")
@click.option("--engine", type=click.Choice(["auto", "spark"]), default="auto", show_default=True,
              help="As `stage --engine` and `collect --engine`: auto stages local CSV input and collects a "
                   "local run in this process where it can; spark does both with Spark.")
@_MASTER
@_CONF
def pipeline(job_path, nprocs, with_payload, verify, collect_out, force, overwrite, master, conf, engine):
    """Stage, run and collect JOB in one go, with one Spark session for both Spark steps.

    
    Same as, but without a second JVM start:
      mpi-join stage JOB && mpi-join run -n N JOB && mpi-join collect OUT --job JOB --out OUT-collected
    Staging is skipped when a stream has no raw input or the staged input is up to date."""
    from .pipeline import pipeline as run_pipeline
    try:
        code = run_pipeline(job_path, nprocs, with_payload=with_payload, verify=verify, collect_out=collect_out,
                            force=force, master=master, conf=conf, run_args=("--overwrite",) if overwrite else (),
                            say=lambda m: click.echo(m, err=True), engine=engine)
    except JobError as e:
        _fail(e)
    sys.exit(code)


@main.command()
@click.argument("run_dir", type=click.Path())
@click.option("--job", "job_path", required=True, type=click.Path(dir_okay=False), help="The job file of the run.")
@click.option("--out", required=True, help="Output dataset path or URI.")
@click.option("--with-payload", is_flag=True, help="Join each result back to its input tuples' columns.")
@click.option("--files", default=1, show_default=True, help="Number of Parquet files to write.")
@click.option("--partial", is_flag=True, help="Collect a run that did not finish (no _SUCCESS); the summary "
              "marks the dataset partial.")
@click.option("--overwrite", is_flag=True, help="Replace an existing non-empty OUT that collect did not write.")
@click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default="auto", show_default=True,
              help="auto: a local run collected into a local OUT in this process (no JVM; payloads taken "
                   "by seq from the staged parts); spark: with Spark (also for hdfs:// and --master); local: "
                   "in this process or refuse. The first line says which.")
@_MASTER
@_CONF
def collect(run_dir, job_path, out, with_payload, files, partial, overwrite, master, conf, engine):
    """Merge the result part files of a run (RUN_DIR = its output dir) into one Parquet dataset.

    Writes OUT/_summary.json: result count, latency percentiles and per-rank figures. With
    --with-payload, each result carries <stream>_<column> for every input column. OUT must not
    overlap RUN_DIR or the staged input. A run without _SUCCESS (interrupted, failed) is refused
    unless --partial. Only the part files the run recorded in _SUCCESS are read, each checked
    against its rows, size and SHA-256 first; a missing, added or changed one is refused. One
    collect at a time writes OUT (a lock beside it). Also runnable as `spark-submit jobs/collect.py RUN_DIR --job JOB --out OUT`."""
    from .config import load_job
    from .storage.local_collect import collect_local, why_spark
    from .storage.spark.collect import collect as do_collect, collecting, small_collect
    from .storage.spark.session import spark_session
    say = lambda m: click.echo(m, err=True)
    try:
        job = load_job(job_path)
        why = why_spark(engine, master, conf, job, run_dir, out, with_payload) or \
            ("--files given" if files != 1 else None)
        if engine == "local" and why:
            raise JobError(f"--engine local: collects a local run into a local --out with --master local[*] "
                           f"({why}); use --engine spark")
        with collecting(job, run_dir, out, partial, overwrite) as parts:     # before any JVM starts
            if why is None:
                say("collect: engine local: in this process (--engine spark collects with Spark)")
                s = collect_local(job, run_dir, out, with_payload, progress=say, partial=partial, parts=parts)
            else:
                say(f"collect: engine spark: {why}")
                spark = spark_session(master, "mpi-join collect", conf, small=small_collect(job, parts, with_payload))
                s = do_collect(spark, job, run_dir, out, with_payload, files, progress=say, partial=partial,
                               overwrite=overwrite, parts=parts)
    except JobError as e:
        _fail(e)
    lat = s["latency_ms"]
    click.echo(f"collected {s['results']:,} results into {out}; latency ms p50 {lat['p50']} p99 {lat['p99']}")


@main.command()
@click.argument("job_path", metavar="JOB", type=click.Path(dir_okay=False))
@click.option("--nodes", default=1, show_default=True, help="Nodes for the run step.")
@click.option("--ntasks", default=4, show_default=True, help="MPI ranks for the run step.")
@click.option("--time", "time_limit", default="01:00:00", show_default=True, help="Time limit per job.")
@click.option("--partition", default=None, help="Slurm partition.")
@click.option("--launcher", type=click.Choice(["srun", "mpiexec"]), default="srun", show_default=True,
              help="srun --mpi=pmi2, or the venv's mpiexec inside the allocation.")
@click.option("--chain", is_flag=True, help="One job per step, chained with --dependency=afterok.")
@click.option("--overcommit", is_flag=True, help="Allow more tasks than CPUs (#SBATCH --overcommit).")
@click.option("--stage/--no-stage", default=None, help="Stage with Spark first (default: when every stream has raw input).")
@click.option("--collect/--no-collect", default=True, show_default=True, help="Collect the results with Spark after the run.")
@click.option("--verify", is_flag=True, help="Check the results against the oracle after the run.")
@click.option("--spark-master", default="local[*]", show_default=True, help="Spark master for stage and collect.")
@click.option("--collect-out", default=None, help="Collected dataset (default: OUTPUT-collected, beside the run's output).")
@click.option("--with-payload", is_flag=True, help="The collect step joins each result back to its input "
              "tuples' columns (collect --with-payload).")
@click.option("--python", "python_exe", default=sys.executable, show_default=True, help="Python with mpi-join installed.")
@click.option("--sbatch-opt", multiple=True, metavar="OPTION", help="Extra #SBATCH line, e.g. --account=abc (repeatable).")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Where to write the scripts (default: slurm/ next to the job file).")
@click.option("--submit", is_flag=True, help="Submit right away (sbatch, or the chain's submit script).")
def slurm(job_path, nodes, ntasks, time_limit, partition, launcher, chain, overcommit, stage, collect, verify,
          spark_master, collect_out, with_payload, python_exe, sbatch_opt, out_dir, submit):
    """Render Slurm batch scripts for JOB: stage -> run -> collect as one job, or a chain.

    \b
    Examples:
      mpi-join slurm job.toml --ntasks 16 --nodes 4 --partition batch --time 02:00:00
      sbatch slurm/<name>.sbatch
      mpi-join slurm job.toml --chain --submit          # stage, run, collect as 3 dependent jobs
    """
    from .config import load_job
    from .slurm import SlurmOptions, log_dir, render
    o = SlurmOptions(nodes=nodes, ntasks=ntasks, time=time_limit, partition=partition, launcher=launcher,
                     chain=chain, overcommit=overcommit, python=python_exe, spark_master=spark_master,
                     collect_out=collect_out, stage=stage, collect=collect, verify=verify, extra=tuple(sbatch_opt),
                     with_payload=with_payload)
    out_dir = out_dir or os.path.join(os.path.dirname(os.path.abspath(job_path)), "slurm")
    try:
        job = load_job(job_path, udfs=False)        # renders scripts: no code of the job's runs here
        from .storage.paths import check_text
        check_text(os.path.abspath(out_dir), "--out")
        files = render(job, o)
    except JobError as e:
        _fail(e)
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(log_dir(job, o), exist_ok=True)
    for name, text in files.items():
        p = os.path.join(out_dir, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o755)
        click.echo(f"wrote {p}")
    entry = next((n for n in files if n.endswith("-submit.sh")), next(iter(files)))
    entry = os.path.join(out_dir, entry)
    cmd = ["bash", entry] if entry.endswith(".sh") else ["sbatch", "--parsable", entry]
    if not submit:
        click.echo("submit with: " + " ".join(cmd[:1] + cmd[2:] if cmd[0] == "sbatch" else cmd))
        return
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        _fail(JobError(f"{' '.join(cmd)} failed: {p.stderr.strip() or p.stdout.strip()}"))
    click.echo(f"submitted: job id(s) {p.stdout.strip()}")


@main.group()
def checkpoint():
    """Look at HDF5 checkpoints."""


@checkpoint.command("inspect")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--ranks", "-n", "ranks", type=click.IntRange(2, 4096), multiple=True,
              help="Also say what a restore of the newest complete checkpoint at this many ranks would move: "
                   "the key groups whose owner changes, with their rows and bytes, or for state "
                   "without key groups the stored tuples dealt again (repeatable).")
@click.option("--sources", type=click.IntRange(1, 4096), default=None,
              help="With --ranks: the restore's run.sources (default: the checkpoint's); the extra sources are "
                   "the last ranks and hold no state, so the workers are ranks 1 .. N - sources.")
def checkpoint_inspect(directory, ranks, sources):
    """List the checkpoints in DIRECTORY and what each holds.

    With --ranks N, plan a restore at N ranks: keyed state (hash's partition groups) is named by
    key group in the rank files, and the groups are dealt to the workers (N - 1, less the extra
    sources of --sources or the checkpoint's run.sources) with as few moves as
    an even share allows (partitioning/key_groups.py), as `run --resume` at N ranks does; the
    other strategies deal all their stored tuples again by rules of their own."""
    from .storage.checkpoint import describe
    if not os.path.isdir(directory):
        _fail(JobError(f"{directory}: checkpoint directory not found"))
    rows = describe(directory)
    if not rows:
        click.echo(f"{directory}: no checkpoints")
        return
    _inspect_table(rows)
    for n in ranks:
        click.echo(_restore_line(directory, n, sources))


def _restore_line(directory, n, sources=None):
    from .partitioning.restore_plan import plan
    try:
        p = plan(directory, n, sources=sources)
    except ValueError as e:
        return str(e)
    w = f"{p['workers']} worker" + ("s" if p["workers"] != 1 else "")
    if not p["keyed"]:
        head = f"checkpoint {p['checkpoint']} at {n} ranks ({w}): its state holds no key groups; "
        if n == p["ranks"]:
            return head + "its own rank count: each worker reads its own file back, nothing moves"
        return (head + f"its strategy deals all of it again, {p['other_rows']:,} stored tuples, "
                f"{p['other_bytes'] / 1e6:.2f} MB (README \"Resuming at another rank count\")")
    return (f"checkpoint {p['checkpoint']} at {n} ranks ({w}): would move {p['groups']} of "
            f"{p['of_groups']} key groups, {p['rows']:,} of {p['of_rows']:,} rows, {p['bytes'] / 1e6:.2f} of "
            f"{p['of_bytes'] / 1e6:.2f} MB of keyed state")


def _inspect_table(rows):
    head = ("id", "complete", "epoch", "input offset", "results", "result files", "ranks", "state rows", "MB", "created")
    table = [head] + [(r["id"], "yes" if r["complete"] else "NO (ignored)", _d(r["epoch"]), _d(r["input_offset"]),
                       _d(r["results"]), _d(r["result_files"]), r["rank_files"],
                       "damaged" if r["state_rows"] is None else f"{r['state_rows']:,}",
                       f"{r['bytes'] / 1e6:.2f}", r["created"] or "-") for r in rows]
    w = [max(len(str(t[k])) for t in table) for k in range(len(head))]
    for t in table:
        click.echo("  ".join(str(c).rjust(w[k]) for k, c in enumerate(t)))


def _d(v):
    return "-" if v is None else f"{v:,}"


@main.command()
@click.argument("results", type=click.Path())
@click.option("--job", "job_path", required=True, type=click.Path(dir_okay=False), help="The job file of the run.")
@click.option("--examples", default=5, show_default=True, help="How many examples of each difference to print.")
@click.option("--ordered", type=click.Choice(["outer", "inner"]), default=None,
              help="Also check the order the results were written in (one writer's part files, as splitjoin's "
                   "combiner writes them): 'outer', grouped in the arrival order of the tuple that triggered them "
                   "(splitjoin's default, punctuation = \"tuples\", interval = 1); 'inner', also in the arrival "
                   "order of the tuple it met (punctuation = \"comparisons\", interval = 1).")
def verify(results, job_path, examples, ordered):
    """Compare RESULTS (a run's output dir or a results dataset) with the oracle.

    Prints the counts of missing, extra and duplicated results with examples; exits 1 on any
    difference (and with --ordered, on any result written out of order)."""
    from .config import load_job
    from .storage.verify import format_report, verify as do_verify
    try:
        job = load_job(job_path)
        rep = do_verify(results, job, examples, ordered)
    except JobError as e:
        _fail(e)
    click.echo(format_report(rep))
    if rep["expected"] == 0:
        click.echo("mpi-join: warning: the oracle finds 0 results: an empty answer is equal, but rarely what was "
                   "meant; `mpi-join check JOB` warns about time ranges and units", err=True)
    sys.exit(0 if rep["ok"] else 1)


def _stage_local(job, out, engine, master, conf, allow_empty):
    """`stage --engine local|auto`: the manifest of staging in this process, or None where Spark
    stages (asked for, or a file this process's reader cannot read as Spark would: auto says
    which and goes on with Spark; local refuses in one line)."""
    from .storage.local_stage import NeedsSpark, stage_local, why_spark
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    target = out or job.staged
    why = why_spark(engine, master, conf, target)
    if why is not None:
        if engine == "local":
            raise JobError(f"--engine local: stages local files into a local directory with --master local[*] "
                           f"({why}); use --engine spark")
        say(f"stage: engine spark ({why})")
        return None
    say("stage: engine local: reading the raw files in this process (--engine spark stages with Spark)")
    try:
        return stage_local(job, target, say, allow_empty)
    except NeedsSpark as e:
        if engine == "local":
            raise JobError(f"--engine local: {e}; stage it with --engine spark (or auto)") from None
        say(f"stage: engine spark: {e}")
        return None


def _stopped_line(job_path, overrides, follow, signum):
    """What rank 0 of a run stopped by `signum` says (ranks.stopped_line), from the job file."""
    from .config import load_job
    from .ranks import stopped_line
    from .storage.commits import IMPLICIT
    job = load_job(job_path, overrides, udfs=False)
    ckpt = job.checkpoint.dir if job.checkpoint else (os.path.join(job.output, IMPLICIT) if follow else None)
    return stopped_line(signum, job.output, ckpt)


def _oracle_out(job, out):
    """`oracle --out` writes a directory of its own: apart from the job's input, output,
    checkpoint and raw directories (check_layout), and new or empty, so that it replaces nothing."""
    from .storage import paths
    paths.check_layout(paths.job_dirs(job, collect_out=out))
    if not paths.local(out):
        raise JobError(f"--out: {out}: the oracle writes a local directory")
    p = paths.real(out)
    if os.path.lexists(p) and (not os.path.isdir(p) or os.path.islink(out) or os.listdir(p)):
        raise JobError(f"--out: {out}: exists and is not an empty directory; the oracle writes a new one")


@main.command()
@click.argument("job_path", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Write the results here as Parquet "
              "(a new or empty directory apart from the job's input, output and checkpoint directories).")
def oracle(job_path, out):
    """Compute JOB's exact result in one process (the reference every strategy must equal)."""
    from .config import load_job
    from .join.oracle import run_oracle
    from .storage.staged import read_staged
    try:
        job = load_job(job_path)
        if out:
            _oracle_out(job, out)
        arrays = read_staged(job)
    except JobError as e:
        _fail(e)
    t0 = time.perf_counter()
    res = run_oracle(job, arrays)
    el = time.perf_counter() - t0
    n = sum(len(a) for a in arrays)
    click.echo(f"{len(res):,} results from {n:,} tuples in {el:.2f} s ({n / max(el, 1e-9):,.0f} tuples/s)")
    if out:
        import numpy as np
        from .storage.results import ResultWriter
        w = ResultWriter(out, 0, job.stream_names)
        w.add([res[:, k] for k in range(res.shape[1])], np.zeros(len(res), np.int64), np.zeros(len(res), np.int64))
        w.close()
        click.echo(f"wrote {out}")


@main.command("bench-adaptive")
@click.option("-n", "--np", "nprocs", type=click.IntRange(1, MAX_RANKS), default=4, show_default=True, help="MPI ranks (master + slaves).")
@click.option("--out", default="bench-adaptive", show_default=True, type=click.Path(file_okay=False),
              help="Where figures.md, figures.png, imbalance.png and the runs go.")
@click.option("--seconds", default=5.0, show_default=True, help="Event time replayed per point.")
@click.option("--rates", default="20000,40000,60000,80000", show_default=True, help="Arrival rates per stream.")
@click.option("--window", default="4s", show_default=True, help="Time window of both streams.")
@click.option("--theta", default=32, show_default=True, help="Fine tuning's bucket limit (blocks) in the tuned runs.")
@click.option("--epochs", default="10,25,50,100,200", show_default=True, help="Distribution epochs (ms).")
def bench_adaptive(nprocs, out, seconds, rates, epochs, window, theta):
    """The shapes of the shared-nothing paper's Figures 5 to 10 for the adaptive `hash` strategy.

    Delay, CPU and idle time against arrival rate with and without fine tuning; communication
    overhead against the distribution epoch; load imbalance under skew with and without
    reorganisation. Writes a markdown table and PNG plots; every point is a real mpiexec run."""
    from .tools.bench_adaptive import run_figures
    try:
        md = run_figures(out, nprocs, seconds, tuple(int(x) for x in rates.split(",")),
                         tuple(int(x) for x in epochs.split(",")), window, theta,
                         progress=lambda m: click.echo(m, err=True))
    except JobError as e:
        _fail(e)
    click.echo(md)
    click.echo(f"plots: {os.path.join(out, 'figures.png')}, {os.path.join(out, 'imbalance.png')}")


@main.command("bench-suite")
@click.option("--out", default="bench-suite", show_default=True, type=click.Path(file_okay=False),
              help="Results directory: results.json, results.md, <workload>-rate.png, <workload>-p99.png, work/.")
@click.option("--strategy", "names", multiple=True, type=_StrategyChoice(),
              help="A strategy to run (repeatable; default: every strategy).")
@click.option("--workload", "workloads", multiple=True, type=click.Choice(["band", "equi"]),
              help="A workload (repeatable; default: band and equi).")
@click.option("-n", "--workers", "workers", multiple=True, type=click.IntRange(1, 64),
              help="Worker ranks (ranks other than rank 0; repeatable; default 1 2 3 4).")
@click.option("--seconds", default=2.0, show_default=True, type=Finite(0.1, 600),
              help="Input per probe, in seconds at the rate under test.")
@click.option("--steps", default=2, show_default=True, type=click.IntRange(0, 20),
              help="Precision of the rate search: bisect until the bracket is 2^(1/2^STEPS) wide (2: 19%).")
@click.option("--ceiling", default=800_000, show_default=True, type=click.IntRange(1_000, 100_000_000),
              help="The highest rate tried, tuples/s per stream; a case that sustains it is shown as >= it "
                   "(a lower bound, as are its ratios): raise it on a bigger machine.")
@click.option("--spark/--no-spark", default=True, show_default=True,
              help="Run Spark Structured Streaming's stream-stream join on the equi input as a peer (a JVM "
                   "in local mode on 2 cores; about a minute on the default input).")
@click.option("--flink/--no-flink", default=True, show_default=True,
              help="Run Apache Flink's SQL interval join on every case's input as a peer (`make flink` builds "
                   "its environment; left out with a note when it is missing).")
@click.option("--rerender", is_flag=True,
              help="Run nothing: fit the scaling model and write results.md and the plots again from OUT's "
                   "results.json.")
@click.option("--peers", "peers_only", is_flag=True,
              help="Run only the peers again (--spark, --flink), on the inputs of OUT's finished cases, and "
                   "write results.md again: Flink's figures after `make flink`, say.")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty OUT that no earlier bench-suite wrote.")
def bench_suite(out, names, workloads, workers, seconds, steps, ceiling, spark, flink, rerender, peers_only,
                overwrite):
    """Every strategy on the shared band and equi workloads, side by side in one run.

    For each strategy, workload and worker count: the maximum sustainable rate per stream (by
    bracketing and bisection; each probe checked against the oracle), production-delay p50 and
    p99, peak memory per rank and window state against the raw bytes it holds, at 80% of it.
    Beside them, on each case's own input: the single-core oracle (tuples/s, and CPU per tuple
    against all ranks' together), Spark Structured Streaming's stream-stream join (equi) and
    Apache Flink's SQL interval join, and DuckDB at rest on the densest input (each peer's result
    set compared with the oracle's). Figures past the machine's cores are marked oversubscribed. Last, the scaling
    model is fitted on the runs, checked against them and extrapolated to 256 cores (`mpi-join
    plan JOB -n N --calibration OUT` then uses it).

    \b
    Examples:
      mpi-join bench-suite                                   # everything (about 30 minutes on 2 cores)
      mpi-join bench-suite --strategy hash --workload equi -n 1 -n 2 --seconds 1
      mpi-join bench-suite --out bench-suite --rerender      # tables, plots and model again
      mpi-join bench-suite --out bench-suite --peers --no-spark   # Flink on its inputs (after make flink)
      mpi-join report bench-suite                            # the whole run as one HTML page
    """
    from .tools.bench_suite import peers_again, rerender as rerender_, run
    out = os.path.abspath(out)
    try:
        if rerender:
            rerender_(out)
        elif peers_only:
            peers_again(out, spark, flink, progress=lambda m: click.echo(m, err=True))
        else:
            run(out, list(names) or None, tuple(workloads) or ("band", "equi"), tuple(workers) or (1, 2, 3, 4),
                seconds, steps, hi=float(ceiling), progress=lambda m: click.echo(m, err=True), spark=spark,
                overwrite=overwrite, flink=flink)
    except JobError as e:
        _fail(e)
    with open(os.path.join(out, "results.md")) as f:
        click.echo(f.read())


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="HTML file to write (default: RUN_DIR/report.html).")
def report(run_dir, out):
    """One self-contained HTML page of a run's metrics (or of a bench-suite directory).

    For a run's output directory: the summary table; rate and production delay over time;
    per-rank load, window tuples over time and window state against the raw bytes held; and
    what the strategy did (its notes, and every figure a rank reports beyond the common ones:
    reorganisations, migrations, relocations, scaling events, overload). For a bench-suite
    directory: its plots and tables. Plots are inlined, so the page is one file to mail or open.

    \b
    Examples:
      mpi-join report out/                  # writes out/report.html
      mpi-join report bench-suite --out suite.html
    """
    from .tools.report import write_report
    try:
        click.echo(write_report(run_dir, out))
    except (JobError, OSError) as e:
        _fail(e)


@main.command("strategies")
def strategies_cmd():
    """List the strategies: what each joins, on which graph, and its parameters."""
    from . import strategies
    for name in strategies.names():
        info = strategies.get(name)
        lo, hi = info.streams
        streams = str(lo) if lo == hi else f"{lo}-{hi}"
        kinds = ", ".join(sorted(info.predicates))
        need = f" (needs {', '.join(sorted(info.requires))})" if info.requires else ""
        shape = info.build_graph(max(info.min_ranks, 4), {k: p.default for k, p in info.params.items()}).name
        click.echo(f"{name}: {info.summary}\n  predicates {kinds}{need}; {streams} streams; at least "
                   f"{info.min_ranks} ranks; graph {shape}; workload {info.workload}"
                   + ("; resumes at another rank count" if info.rescale else ""))
        for line in strategies.describe_params(info):
            click.echo("    " + line)
        if info.planner:
            click.echo("  cost model: mpi-join plan JOB")
        for case, (_, help_) in info.cases.items():
            click.echo(f"  bench case {case}: {help_}")


class _BenchChoice(click.Choice):
    """A strategy, `live` (the live pipeline: `mpi-join bench-live`) or `door` (`mpi-join bench-door`)."""

    def __init__(self):
        from . import strategies
        super().__init__(strategies.names() + ["live", "door"])


@main.command()
@click.argument("strategy", type=_BenchChoice())
@click.option("-n", "--np", "nprocs", multiple=True, type=click.IntRange(1, MAX_RANKS), help="MPI ranks; repeat to compare rank counts "
              "in one run (default: 4).")
@click.option("--tuples", type=click.IntRange(1, 10**9), default=None,
              help="Tuples over all streams (default: 400,000; 3,000 for the images workload, whose UDF "
                   "compares every pixel of every pair).")
@click.option("--rate", type=Finite(), default=None, help="Event-time arrival rate per stream, tuples/s (default: 1000; "
              "100 for images).")
@click.option("--window", default=None, help="Time window of every stream (default: 60s; 1s for images).")
@click.option("--skew", default=0.7, show_default=True, type=Finite(0, 1), help="b-model skew of the join keys.")
@click.option("--uniform-keys", type=click.IntRange(1, 1 << 62), default=None, help="Uniform join keys over this many values instead.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Strategy parameter (repeatable), e.g. --param local_join=bnl.")
@click.option("--load", "load_fraction", type=Finite(), default=None,
              help="Also replay at this fraction of the sustainable rate (the slowest quarter of the best run's second half) and report its delays (e.g. 0.8).")
@click.option("--case", default=None,
              help="runtime: 4.8 M equi tuples (20,000/s per stream over 120 s, 100,000 uniform keys, 60 s windows; "
                   "the band workload for a strategy without equi joins) on 2 and 3 ranks in 3 rounds, and at 80% "
                   "of the sustainable rate. memory: rank 0's peak RSS with 1 M and "
                   "8 M staged tuples (--tuples adds a size), on 2 ranks unless -n is given. sources: rank 0's "
                   "CPU per tuple with run.sources = 1, 2 and 4 at one worker count (-n: ranks with one source; "
                   "1.6 M tuples unless --tuples). window: a worker's cost per batch of its join against windows of 10 s, "
                   "1 min and 10 min at 20,000 tuples/s per stream (flat is the goal). commits: rank 0's "
                   "bookkeeping per commit after none, 15 min, 1 h and 4 h of a live run's committed files "
                   "(flat is the goal). A strategy's own "
                   "cases are listed by `mpi-join strategies` (psp: fig8a; handshake, llhj: max-rate; splitjoin: "
                   "cores, where -n values are join cores; biclique: fig6a, where -n is join units).")
@click.option("--repeat", type=click.IntRange(1, 50), default=None,
              help="Rounds of the strategy's runs, the oracle timed again after each run; the table adds medians "
                   "over the rounds and each run's ratio to the oracle timed beside it (default 1; 3 with --case runtime).")
@click.option("--dir", "workdir", type=click.Path(file_okay=False), default=None, help="Work directory (default: a temporary one).")
def bench(strategy, nprocs, tuples, rate, window, skew, uniform_keys, params, load_fraction, case, repeat, workdir):
    """Throughput and latency of STRATEGY against the single-core oracle, measured in the same run.

    Generates the strategy's workload (from the registry), times the oracle on it, runs STRATEGY
    under mpiexec on each rank count, checks each run equals the oracle, and prints tuples/s,
    the ratio to the oracle and production-delay percentiles.

    \b
    Examples:
      mpi-join bench hash                       # 400,000 tuples on 4 ranks
      mpi-join bench hash -n 2 -n 3 --load 0.8  # compare rank counts, then delays at 80% load
      mpi-join bench hash --case runtime        # the 4.8 M tuple case of the README
      mpi-join bench hash --case memory         # rank 0's peak RSS, 1 M against 8 M tuples
      mpi-join bench hash --case sources -n 3   # rank 0's CPU per tuple with 1, 2 and 4 sources
      mpi-join bench hash --case commits        # a commit's bookkeeping after hours of a live run
      mpi-join bench psp --case fig8a           # response time against ring length, and the model's
      mpi-join bench splitjoin --case cores     # splitjoin, handshake, llhj on 1..4 join cores, and a model
      mpi-join bench live                       # live streams end to end against Spark (= bench-live)
      mpi-join bench door                       # raw CSV to result Parquet against DuckDB (= bench-door)
    """
    if strategy == "door":
        return click.get_current_context().invoke(bench_door_cmd, nprocs=nprocs, out="bench-door",
                                                  impressions=1_000_000, clicks=200_000, no_spark=False)
    if strategy == "live":               # the live pipeline has a command of its own, with its options
        return click.get_current_context().invoke(bench_live_cmd, nprocs=nprocs[0] if nprocs else 3,
                                                  out="bench-live", rates="5000,10000,20000,40000", seconds=20,
                                                  no_spark=False, spark_rates="1000,2000,4000,8000,16000")
    from .tools.bench import bench as run_bench
    prm = {}
    for kv in params:
        k, _, v = kv.partition("=")
        prm[k] = int(v) if v.lstrip("-").isdigit() else (v == "true" if v in ("true", "false") else v)
    from . import strategies
    own = strategies.get(strategy).cases
    images = strategies.get(strategy).workload == "images"     # defaults that finish in about a minute here
    tuples = tuples if tuples is not None else (3_000 if images else 400_000)
    rate = rate if rate is not None else (100.0 if images else 1000.0)
    window = window if window is not None else ("1s" if images else "60s")
    if case is not None and case not in ("runtime", "memory", "sources", "window", "commits") and case not in own:
        _fail(JobError(f"--case: unknown case {case!r} for strategy {strategy!r} (cases: "
                       f"{', '.join(['runtime', 'memory', 'sources', 'window', 'commits', *own])})"))
    if case in own:
        fn = own[case][0]
        mod, _, attr = fn.partition(":")
        import importlib
        try:
            getattr(importlib.import_module(mod), attr)(list(nprocs), workdir)
        except JobError as e:
            _fail(e)
        return
    if case == "memory":
        from .tools.bench import bench_memory
        given = click.get_current_context().get_parameter_source("tuples") == click.core.ParameterSource.COMMANDLINE
        sizes = sorted({1_000_000, 8_000_000} | ({tuples} if given else set()))
        try:
            bench_memory(strategy, sizes, nprocs[0] if nprocs else 2, workdir)
        except JobError as e:
            _fail(e)
        return
    if case == "sources":
        from .tools.bench import bench_sources
        given = click.get_current_context().get_parameter_source("tuples") == click.core.ParameterSource.COMMANDLINE
        try:
            bench_sources(strategy, nprocs[0] if nprocs else strategies.get(strategy).min_ranks + 1,
                          tuples if given else 1_600_000, (1, 2, 4), workdir)
        except JobError as e:
            _fail(e)
        return
    if case == "window":
        from .tools.bench import bench_window
        bench_window(say=lambda m: click.echo(m, err=True))
        return
    if case == "commits":
        from .tools.bench import bench_commits
        bench_commits(workdir=workdir, say=lambda m: click.echo(m, err=True))
        return
    workload = None
    if case == "runtime":
        tuples, rate, window, uniform_keys = 4_800_000, 20000.0, "60s", 100_000
        nprocs = nprocs or tuple(n for n in (2, 3) if n >= strategies.get(strategy).min_ranks) or (
            strategies.get(strategy).min_ranks,)
        load_fraction = load_fraction or 0.8
        repeat = repeat or 3
        workload = "equi" if strategy in strategies.supporting({"equi"}) else None
    try:
        run_bench(strategy, list(nprocs) or [4], tuples, rate, window, skew, prm, workdir, uniform_keys,
                  load_fraction=load_fraction, repeat=repeat or 1, workload=workload)
    except JobError as e:
        _fail(e)


@main.command()
@click.option("-n", "--np", "nprocs", type=click.IntRange(1, MAX_RANKS), default=4, show_default=True, help="MPI ranks.")
@click.option("--tuples", default=200_000, show_default=True, type=click.IntRange(1, 10**9),
              help="Tuples over both streams.")
@click.option("--dir", "workdir", default="demo-run", show_default=True, type=click.Path(file_okay=False))
@_MASTER
def demo(nprocs, tuples, workdir, master):
    """The whole pipeline on workload (b): generate raw CSV, stage with Spark, run `hash` under
    mpiexec, collect with Spark, verify against the oracle."""
    from .tools.bench import demo as run_demo
    try:
        sys.exit(run_demo(nprocs, tuples, workdir, master))
    except JobError as e:
        _fail(e)


from .services.commands import dev_services  # noqa: E402 (a group of its own module)

main.add_command(dev_services)

if __name__ == "__main__":
    main()
