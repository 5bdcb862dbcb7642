"""Collection: a run's result part files -> one Parquet dataset, optionally with payloads, plus a
summary (result count, latency percentiles, per-rank figures)."""
import contextlib
import json
import os
import sys
import time

from ...errors import InputError
from ..checksums import check_names, no_success, recorded_parts, success_record
from . import fs

PCTS = (0.5, 0.9, 0.99, 0.999)


MARKER = ".mpi-join-collect"
SMALL_RESULT_BYTES = 16 << 20      # about half a million results


def small_collect(job, parts, with_payload):
    """Are the run's result files local and at most SMALL_RESULT_BYTES, and (with payloads) its
    staged input local and at most stage.SMALL_INPUT_BYTES? Then a JVM set up for a short life
    (session.SHORT_LIVED) collects in about half the CPU (4,000 tuples: 13 to 6.5 CPU-s), where
    millions of results need the full JIT. `parts`: check_collect's (None: not local)."""
    from ..paths import local, real
    from .stage import SMALL_INPUT_BYTES
    if parts is None or sum(os.path.getsize(p) for p in parts) > SMALL_RESULT_BYTES:
        return False
    if not with_payload:
        return True
    if not local(job.staged):
        return False
    staged = 0
    for s in job.streams:
        for root, _, names in os.walk(os.path.join(real(job.staged), s.name)):
            staged += sum(os.path.getsize(os.path.join(root, n)) for n in names)
    return staged <= SMALL_INPUT_BYTES


def default_out(run_dir):
    """Where a run's results are collected by default: beside its output dir, never inside it."""
    return run_dir.rstrip("/") + "-collected"


def check_collect(job, run_dir, out, partial=False, overwrite=False):
    """What collect can refuse without Spark: a run folder that does not exist; an `out` that
    equals, contains or lies inside the run, the staged or raw input, or the checkpoints
    (symlinks resolved); for a local run, a run without _SUCCESS (unless `partial`) and any
    part file that is not what the run recorded; a local `out` that is not empty and was not
    written by collect (unless `overwrite`). Returns the part files to read (local run), or None
    (a run on another filesystem: `collect` checks it through Spark)."""
    from ...errors import ConfigError
    from ..checksums import check_recorded_parts
    from ..paths import check_layout, job_dirs, local, real
    if local(run_dir) and not os.path.isdir(real(run_dir)):
        raise InputError(f"{run_dir}: no such run output directory")
    try:
        check_layout(job_dirs(job, collect_out=out))
        check_layout([("RUN_DIR", run_dir), ("--out", out)])
    except ConfigError as e:
        raise InputError(str(e)) from None
    if local(out) and os.path.isdir(real(out)) and not overwrite and not os.path.exists(os.path.join(real(out), MARKER)) \
            and any(not n.startswith(".") for n in os.listdir(real(out))):
        raise InputError(f"--out {out}: exists, is not empty and was not written by mpi-join collect; "
                         f"choose another directory or pass --overwrite to replace it")
    return check_recorded_parts(real(run_dir), partial, job) if local(run_dir) else None


@contextlib.contextmanager
def collecting(job, run_dir, out, partial=False, overwrite=False):
    """check_collect, then hold `out` for this collect (a lock beside it, as a run locks its
    directories: Spark replaces `out` itself when it writes), all before any JVM starts.
    Yields the part files to read (check_collect)."""
    from ..paths import DirLock, local, real
    parts = check_collect(job, run_dir, out, partial, overwrite)
    lock = None
    if local(out):
        target = real(out)
        lock = DirLock(os.path.dirname(target), "--out", name=f".{os.path.basename(target)}.mpi-join-collect.lock",
                       say=lambda m: sys.stderr.write(m + "\n"), subject=target).acquire()
    try:
        yield parts
    finally:
        if lock is not None:
            lock.release()


def _recorded_parts_remote(spark, run_dir, success):
    """A run's part files on another filesystem (hdfs://...), checked by name and size against
    what the run recorded in _SUCCESS (its text: `success`; the checksums are checked for local
    runs only)."""
    rdir = f"{run_dir}/results"
    parts = recorded_parts(success_record(success, f"{run_dir}/_SUCCESS"), f"{run_dir}/_SUCCESS")
    present = {u.rsplit("/", 1)[-1]: u for u in fs.list_files(spark, rdir) if u.endswith(".parquet")}
    check_names(parts, present, rdir)
    for u, size, _ in fs.file_stats(spark, [present[n] for n in sorted(parts)]):
        rec = parts[u.rsplit("/", 1)[-1]]
        if size != rec.get("bytes"):
            raise InputError(f"{u}: result part file has {size:,} bytes, {rec.get('bytes')!r} were recorded; it changed")
    return [present[n] for n in sorted(parts)]


def run_commit(job, run_dir, succeeded, partial):
    """What a run without _SUCCESS (`succeeded` False) offers either engine's collect: a local
    followed run's committed prefix, read once so that its files and the summary agree on one
    commit, each part checked against its record: (committed, its part files); (None, None) for a
    run that succeeded or, with `partial`, one that has no commit. Refuses a run with neither."""
    from ..commits import read_committed
    from ..paths import local, real
    committed = read_committed(real(run_dir)) if not succeeded and local(run_dir) else None
    if not succeeded and not partial and committed is None:
        raise no_success(run_dir, job)
    if committed is None:
        return None, None
    from ..checksums import verify_part
    rdir = os.path.join(real(run_dir), "results")
    for name, rec in sorted(committed["files"].items()):
        verify_part(os.path.join(rdir, name), rec)
    return committed, [os.path.join(rdir, n) for n in sorted(committed["files"])]


def collect(spark, job, run_dir, out, with_payload=False, files=1, progress=print, partial=False, overwrite=False,
            parts=None):
    """Collect the results of the run in `run_dir` into the dataset `out`.

    Refuses what would lose data or pass off a partial answer as whole: a run without _SUCCESS
    (unless `partial`; the summary then says so, and up to which input offset the run's last
    checkpoint is complete), part files that are not the ones the run recorded, an `out` that
    overlaps the run's or the staged directory, and an existing non-empty `out` that an earlier
    collect did not write (unless `overwrite`). `parts`: the part files `collecting` checked."""
    from pyspark.sql import functions as F
    if parts is None:
        parts = check_collect(job, run_dir, out, partial, overwrite)
    run_dir, out = fs.qualify(run_dir), fs.qualify(out)
    for name, d in (("the run's output directory", run_dir), ("the staged input", fs.qualify(job.staged))):
        if fs.overlap(out, d):
            raise InputError(f"--out {out}: overlaps {name} {d}; collect into a directory of its own")
    success = fs.read_text(spark, f"{run_dir}/_SUCCESS")
    succeeded = success is not None
    committed, committed_parts = run_commit(job, run_dir, succeeded, partial)
    if committed is not None:
        parts = committed_parts
    if fs.exists(spark, out) and fs.list_files(spark, out) and not fs.exists(spark, f"{out}/{MARKER}") and not overwrite:
        raise InputError(f"--out {out}: exists, is not empty and was not written by mpi-join collect; "
                         f"choose another directory or pass --overwrite to replace it")
    if parts is None:
        parts = _recorded_parts_remote(spark, run_dir, success) if succeeded else \
            [f for f in fs.list_files(spark, f"{run_dir}/results") if f.endswith(".parquet")]
    if with_payload:
        from ..staged import check_manifest
        man = fs.read_text(spark, f"{fs.qualify(job.staged)}/_manifest.json")
        check_manifest(job, json.loads(man) if man else None, f"{job.staged}/_manifest.json")
    rdir = f"{run_dir}/results"
    if not parts:
        raise InputError(f"{rdir}: no result part files (is this a run's output directory?)")
    t0 = time.perf_counter()
    progress(f"collect: reading {len(parts)} part file(s) from {rdir}")
    res = spark.read.parquet(*[fs.uri(p) for p in parts]).withColumn(
        "rank", F.regexp_extract(F.input_file_name(), r"part-r(\d+)-", 1).cast("int"))
    seq_cols = [f"{s.name}_seq" for s in job.streams]
    missing = [c for c in seq_cols if c not in res.columns]
    if missing:
        raise InputError(f"{rdir}: result column(s) {', '.join(missing)} missing; the job's streams are "
                         f"{', '.join(job.stream_names)}")
    # one aggregation: per rank, and (rank null, grouping 1) over all ranks
    rows = (res.rollup("rank").agg(F.count("*").alias("n"), F.grouping("rank").alias("all"),
                                   F.percentile_approx("latency_ns", list(PCTS), 10000).alias("p")).collect())
    whole = next(r for r in rows if r["all"])
    total, lat = whole["n"], whole["p"]
    per_rank = {r["rank"]: {"results": r["n"], "latency_ms": _pcts(r["p"])} for r in rows if not r["all"]}
    progress(f"collect: {total:,} results counted, latency per rank ({time.perf_counter() - t0:.1f} s)")
    t1 = time.perf_counter()
    data = res.drop("rank")
    order = seq_cols + ["emit_ns", "latency_ns"]
    if with_payload:
        for s in job.streams:
            staged = spark.read.parquet(fs.uri(f"{fs.qualify(job.staged)}/{s.name}"))
            cols = [F.col("seq").alias(f"{s.name}_seq"), _event_time(F, F.col("ts"), job.ts_unit).alias(f"{s.name}_ts")]
            cols += [_typed(F, F.col(c), t).alias(f"{s.name}_{c}") for c, t in s.schema.items()]
            data = data.join(staged.select(*cols), on=f"{s.name}_seq", how="left")
            order += [f"{s.name}_{c}" for c in ["ts", *s.schema]]
    prev = spark.conf.get("spark.sql.parquet.outputTimestampType", None)
    spark.conf.set("spark.sql.parquet.outputTimestampType",
                   "TIMESTAMP_MICROS" if job.ts_unit == "us" else "TIMESTAMP_MILLIS")
    if with_payload and job.projection():      # the SELECT list's columns, named and in its order
        data, order = data.select(*[F.col(src).alias(name) for name, src in job.projection()]), \
            [name for name, _ in job.projection()]
    try:
        data.select(*order).coalesce(max(1, files)).write.mode("overwrite").parquet(fs.uri(out))
    finally:
        if prev is not None:
            spark.conf.set("spark.sql.parquet.outputTimestampType", prev)
    metrics = fs.read_text(spark, f"{run_dir}/metrics/summary.json")
    summary = collect_summary(job, total, _pcts(lat), per_rank, json.loads(metrics) if metrics else None,
                              with_payload, out, succeeded, committed)
    fs.write_text(spark, f"{out}/_summary.json", json.dumps(summary, indent=2))
    fs.write_text(spark, f"{out}/{MARKER}", json.dumps({"written_by": "mpi-join collect", "run": run_dir}))
    progress(f"collect: {total:,} results" + (" with payloads" if with_payload else "") + f" -> {out} "
             f"({time.perf_counter() - t1:.1f} s; {time.perf_counter() - t0:.1f} s in all)"
             + ("" if succeeded else " (PARTIAL: the run did not finish)"))
    return summary


def collect_summary(job, total, latency_ms, per_rank, run, with_payload, out, succeeded, committed, **extra):
    """A collected dataset's _summary.json (either engine's): counts, latencies, per rank (the
    run's metrics added), and what of the run it covers (a followed run's committed prefix, or
    up to which input offset a partial one is complete)."""
    summary = {
        "results": int(total), "latency_ms": latency_ms,
        "per_rank": {str(k): v for k, v in sorted(per_rank.items())},
        "run": run, "with_payload": bool(with_payload), "output": out, "partial": not succeeded, **extra,
    }
    if committed is not None:            # a followed run's committed prefix, exactly
        summary.update(partial=False, committed_prefix={k: committed.get(k) for k in (
            "commits", "results", "input_offset", "final")})
    elif not succeeded:
        summary["complete_through_input_offset"] = _checkpointed_offset(job)
    for r in (run or {}).get("ranks", []):
        summary["per_rank"].setdefault(str(r["rank"]), {}).update(
            {k: r.get(k) for k in ("role", "tuples_in", "tuples_out", "cpu_s", "idle_s", "comm_s")})
    return summary


def _event_time(F, col, unit):
    """Event time as a timestamp in the job's unit (Parquet: millis for "ms" and "s", micros for
    "us"). Spark cannot write nanosecond timestamps, so "ns" stays an int64 count of ns."""
    return {"ms": F.timestamp_millis, "us": F.timestamp_micros, "s": F.timestamp_seconds}.get(unit, lambda c: c)(col)


def _typed(F, col, type_name):
    """A payload column as users expect it: text (charN, staged as bytes) as a string without
    the padding."""
    if str(type_name).strip().lower().startswith("char"):
        return F.regexp_replace(col.cast("string"), "\u0000+$", "")
    return col


def _checkpointed_offset(job):
    """Input offset of the job's newest complete checkpoint: every result of the tuples before it
    is in the run's results. None without one."""
    if job.checkpoint is None or "://" in str(job.checkpoint.dir):
        return None
    from ..checkpoint import list_checkpoints
    done = [m for _, m in list_checkpoints(job.checkpoint.dir) if m]
    return done[-1].get("input_offset") if done else None


def _pcts(p):
    if p is None:
        return {f"p{q * 100:g}": None for q in PCTS}
    return {f"p{q * 100:g}": v / 1e6 for q, v in zip(PCTS, p)}
