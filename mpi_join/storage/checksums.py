"""Checksums that let a run and a resume trust what they read (README "Safety").

- Staged part files: `_manifest.json` lists each one's size and SHA-256 (`file_records`).
- Result part files: each writer records its rows, size and SHA-256; a checkpoint's manifest
  lists those of the files it commits, and `_SUCCESS` is written only after every part file of
  the run has been checked against its record (`verify_part`).
  `_SUCCESS` keeps those records, and `collect` reads only the files they name, each checked
  against its record (`check_recorded_parts`).
- Checkpoint arrays carry their SHA-256 (`array_sha256`), checked on restore.

These protect against accidents: a disk, a copy or an edit that changes what a file holds. They
are not signatures: someone who rewrites a file and its record alike is not detected.
"""
import hashlib
import json
import os
import sys
import re

import numpy as np

from ..errors import InputError


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def dtype_text(dt):
    """What a dtype is (fields, their types, offsets and shapes), without the metadata a library
    may attach: h5py reads a fixed-width bytes field back as `('|S36', {'h5py_encoding': ...})`,
    and a checksum over that description would never match the one written."""
    if dt.fields is not None:
        inner = ",".join(f"{n}:{dtype_text(dt.fields[n][0])}@{dt.fields[n][1]}" for n in dt.names)
        return f"{{{inner}}}#{dt.itemsize}"
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return f"{dtype_text(base)}{list(shape)}"
    return dt.str


def array_sha256(a):
    """SHA-256 of an array's bytes, its dtype and shape (so a reinterpreted array differs)."""
    h = hashlib.sha256(f"{dtype_text(a.dtype)}|{a.shape}|".encode())
    h.update(np.ascontiguousarray(a).view(np.uint8).reshape(-1).data if a.size else b"")
    return h.hexdigest()


def as_records(rows):
    """{name: {"rows", "bytes", "sha256"}} of [[name, rows, bytes, sha256], ...], the form in
    which ranks report and checkpoint the files they wrote."""
    return {n: {"rows": r, "bytes": b, "sha256": h} for n, r, b, h in rows}


def as_rows(records):
    """The inverse of as_records, sorted by name."""
    return [[n, r["rows"], r["bytes"], r["sha256"]] for n, r in sorted(records.items())]


def no_success(run_dir, job=None):
    """The error for a run without _SUCCESS, where a finished one is needed. It suggests --resume
    only to a job that keeps checkpoints (`job`, when known): without them a run can only be redone."""
    import os
    from .commits import DIR, IMPLICIT
    followed = job is not None and (os.path.isdir(os.path.join(str(run_dir), DIR)) or (     # commits.py
        job.checkpoint is None and os.path.isdir(os.path.join(str(run_dir), IMPLICIT))))
    if followed:
        again = (f"resume it with `mpi-join run --follow {job.path} --resume "
                 f"{job.checkpoint.dir if job.checkpoint else os.path.join(str(run_dir), IMPLICIT)}` (from the log's "
                 f"beginning when it stopped before its first commit)")
    elif job is not None and job.checkpoint is None:
        again = (f"run it again (its job {job.path} keeps no checkpoints, so it cannot be resumed: add a "
                 f"[checkpoint] table for that)")
    elif job is not None:
        again = f"resume it with `mpi-join run {job.path} --resume {job.checkpoint.dir}`"
    else:
        again = "resume it with --resume"
    return InputError(f"{run_dir}: no _SUCCESS: the run did not finish, so its results are partial; {again}, "
                      f"or collect what there is with --partial")


def success_record(text, where):
    """A finished run's _SUCCESS (`text`, its content) as a dict; InputError naming `where`."""
    try:
        rec = json.loads(text)
    except ValueError:
        rec = None
    if not isinstance(rec, dict):
        raise InputError(f"{where}: cannot be read as the run's record")
    return rec


def recorded_parts(rec, where):
    """The part files a _SUCCESS record (success_record) lists: {name: {"rows", "bytes", "sha256"}}."""
    parts = rec.get("parts")
    if not isinstance(parts, dict):
        raise InputError(f"{where}: does not record the run's part files (damaged, or written by an older "
                         f"mpi-join); check the run with `mpi-join verify`, or collect with --partial")
    return parts


def check_names(recorded, present, rdir):
    """The part files present in `rdir` must be those recorded: none missing, none added."""
    missing, added = sorted(set(recorded) - set(present)), sorted(set(present) - set(recorded))
    if missing:
        raise InputError(f"{os.path.join(rdir, missing[0])}: result part file the run recorded is missing")
    if added:
        raise InputError(f"{os.path.join(rdir, added[0])}: result part file the run did not record (added or "
                         f"copied after it ended); remove it")


def file_records(directory, names):
    """{name: {"bytes", "sha256"}} of the files `names` in `directory`."""
    return {n: {"bytes": os.path.getsize(os.path.join(directory, n)),
                "sha256": file_sha256(os.path.join(directory, n))} for n in names}


def check_file(path, rec, what):
    """`path` must exist with the size and SHA-256 in `rec`; raises InputError naming it."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: {what} is missing")
    size = os.path.getsize(path)
    if size != rec.get("bytes"):
        raise InputError(f"{path}: {what} has {size:,} bytes, {rec.get('bytes'):,} were recorded; it changed")
    if file_sha256(path) != rec.get("sha256"):
        raise InputError(f"{path}: {what} has changed since it was recorded (SHA-256 differs)")


def part_rows(path, what="result part file"):
    """Rows of a Parquet part file from its footer; InputError when it cannot be read."""
    import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception as e:  # noqa: BLE001 - a damaged file is the user's to see
        raise InputError(f"{path}: {what} cannot be read: {str(e).splitlines()[0]}") from None


def verify_part(path, rec, full=True, what="result part file"):
    """A result part file (or an aggregate snapshot: `what`) must be readable with the rows its
    writer wrote (and, with `full`, the same bytes). Raises InputError naming the file."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: {what} is missing")
    rows = part_rows(path, what)
    if rows != rec["rows"]:
        raise InputError(f"{path}: {what} holds {rows:,} rows, its writer wrote {rec['rows']:,}")
    if full:
        check_file(path, rec, what)


SNAPSHOT = re.compile(r"snapshot-(\d{6})\.parquet$")   # an aggregate snapshot's file name


def verify_snapshots(directory, records, final=False):
    """The aggregate snapshots `records` ({name: rec}) in `directory`, each as written, numbered
    0, 1, ... without a gap (with `final`: every snapshot of a finished run, the last one
    final). Raises InputError naming the file."""
    numbers = sorted(int(SNAPSHOT.fullmatch(n).group(1)) for n in records if SNAPSHOT.fullmatch(n))
    if len(numbers) != len(records):
        raise InputError(f"{directory}: a recorded aggregate snapshot has a name mpi-join does not write")
    gap = next((k for k, n in enumerate(numbers) if n != k), None)
    if gap is not None:
        raise InputError(f"{os.path.join(directory, f'snapshot-{gap:06d}.parquet')}: aggregate snapshot {gap} is "
                         f"not recorded; the snapshots must be numbered without a gap")
    for name, rec in sorted(records.items()):
        verify_part(os.path.join(directory, name), rec, what="aggregate snapshot")
    if final:
        present = sorted(f for f in os.listdir(directory) if SNAPSHOT.fullmatch(f)) if os.path.isdir(directory) else []
        extra = sorted(set(present) - set(records))
        if extra:
            raise InputError(f"{os.path.join(directory, extra[0])}: aggregate snapshot the run did not record")


def read_success(path):
    """The _SUCCESS file at `path` as a dict (success_record)."""
    try:
        with open(path, "rb") as f:
            text = f.read(64 << 20).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise InputError(f"{path}: cannot be read as the run's record") from None
    return success_record(text, path)


def check_recorded_parts(run_dir, partial=False, job=None):
    """The result part files of the finished run in `run_dir` (local), checked against what the
    run recorded in `_SUCCESS`: none missing, none added (a copy under a new name included),
    each with its rows, size and SHA-256. Returns their paths. With `partial` (a run without
    _SUCCESS), the part files present, each readable. Raises InputError naming the file."""
    rdir = os.path.join(run_dir, "results")
    if os.path.islink(rdir):
        raise InputError(f"{rdir}: is a symbolic link (to {os.readlink(rdir)}); collect reads a run's own results/ "
                         f"directory, never through a link")
    present = sorted(f for f in os.listdir(rdir) if f.endswith(".parquet") and not f.startswith((".", "_"))) \
        if os.path.isdir(rdir) else []
    done = os.path.join(run_dir, "_SUCCESS")
    if partial and not os.path.exists(done):
        for f in present:
            part_rows(os.path.join(rdir, f))
        return [os.path.join(rdir, f) for f in present]
    if not os.path.isfile(done):
        from .commits import read_committed
        committed = read_committed(run_dir)
        if committed is None:
            raise no_success(run_dir, job)
        # a followed run still going or stopped: its committed prefix; later files are not yet
        sys.stderr.write(f"mpi-join: {run_dir} has not finished: collecting its committed results, "
                         f"{committed['results']:,} in {committed['commits']} commit(s), up to input seq "
                         f"{committed.get('input_offset') or 0:,}\n")
        for name, r in sorted(committed["files"].items()):
            verify_part(os.path.join(rdir, name), r)
        return [os.path.join(rdir, n) for n in sorted(committed["files"])]
    parts = recorded_parts(read_success(done), done)
    check_names(parts, present, rdir)
    for name, r in sorted(parts.items()):
        verify_part(os.path.join(rdir, name), r)
    return [os.path.join(rdir, n) for n in sorted(parts)]
