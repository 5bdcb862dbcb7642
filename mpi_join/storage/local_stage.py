"""`stage` at rest in this process (`--engine local`, or `auto` where it can): local CSV files
read by the stager's own reader (fast_csv.py, the reader that live staging uses), numbered and
written in this process, with no JVM. The result is the one Spark's path (spark/stage.py)
writes, field for field: the same rows in the same seq order ((event time, stream, file,
record)), the same quarantined rows and reasons, and a manifest with the same counts, ranges,
sources and staging record, so that either engine finds the other's output up to date
(tests/test_local_stage.py stages one corpus both ways and compares). What this reader cannot
read as Spark would (a space, another timestamp form, JSON, Parquet)
is left to Spark: `stage_local` then says which file, and returns None."""
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from ..schema import SEQ, TS, to_arrow
from . import paths
from .pages import small_pages
from .staged import FORMAT, MANIFEST, hash_input, string_columns, write_part

PART_ROWS = 1_000_000


class NeedsSpark(Exception):
    """A raw file this reader cannot read as Spark would; its message names the file and why."""


def why_spark(engine, master, conf, target):
    """Why staging into `target` takes Spark whatever the files hold (`--engine spark`, a master
    or configuration given for Spark, a staged directory that is not local), or None."""
    return ("--engine spark" if engine == "spark" else f"--master {master}" if master != "local[*]" else
            "--conf given" if conf else "the staged directory is not local" if not paths.local(target) else None)


def available_bytes():
    """This machine's available memory: MPI_JOIN_MEMORY_BYTES where set (a share of a node), else
    Linux's MemAvailable; None where neither can be read."""
    if os.environ.get("MPI_JOIN_MEMORY_BYTES", "").isdigit():
        return int(os.environ["MPI_JOIN_MEMORY_BYTES"])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# staging holds about 3 times the CSV bytes at once (the parsed rows, their sort, the part being
# written): input beyond a quarter of the memory available is left to Spark, which spills
MEMORY_SHARE = 4


def too_big(nbytes, what):
    """Why `nbytes` of input are too many for this process's memory (the text), or None."""
    avail = available_bytes()
    if avail is not None and nbytes * MEMORY_SHARE > avail:
        return (f"{what} of {nbytes / 2**30:.1f} GiB, more than a quarter of this machine's available memory "
                f"({avail / 2**30:.1f} GiB)")
    return None


def stage_local(job, out, progress, allow_empty=False):
    """Stage `job`'s raw input into the local directory `out`; returns the manifest. Raises
    NeedsSpark (before anything is written) when a file needs Spark's reader."""
    from .fast_csv import read
    from .spark.follow import header_of
    from .spark.stage import _by_reason, _declared, _local_files, local_staging
    from .staged_log import waiting_dtype
    t0 = time.perf_counter()
    root = paths.real(out)
    streams, sources, files_of = [], {}, {}
    for s in job.streams:
        files = _local_files(s)
        if files is None:
            raise NeedsSpark(f"{s.raw.path}: not a local path")
        if s.raw.format not in ("csv", "json"):
            raise NeedsSpark(f"{s.raw.path}: {s.raw.format} files (this reader reads CSV and JSON lines)")
        sources[s.name], files_of[s.name] = [f"file:{f}" for f in files], files
    big = too_big(sum(os.path.getsize(f) for fs in files_of.values() for f in fs), "raw input")
    if big:
        raise NeedsSpark(big)
    small_pages()
    types = {s.name: [{} for _ in files_of[s.name]] for s in job.streams}    # JSON lines: each file's column types

    def read_one(s, k):
        f = files_of[s.name][k]
        return read(s, f, header_of(s, f) if s.raw.format == "csv" else None, _declared(s), waiting_dtype(s),
                    job.ts_unit, types[s.name][k])

    # every stream's files on one pool (Arrow and numpy let go of the GIL), so that no core waits
    # for the last files of one stream before the next stream's begin
    pool = ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1)))
    reads = {s.name: [pool.submit(read_one, s, k) for k in range(len(files_of[s.name]))] for s in job.streams}
    try:
        for s in job.streams:
            streams.append(_gathered(s, files_of[s.name], [r.result() for r in reads[s.name]], types[s.name],
                                     progress))
    finally:
        pool.shutdown(cancel_futures=True)      # after a file that needs Spark, the reads not begun are dropped
    # the seq order: (event time, stream, file, record), as Spark's path orders the union
    ts, src, rec = (np.concatenate([r[c] for _, rows, _, _ in streams for r in rows] or [np.zeros(0, np.int64)])
                    for c in (TS, "_src", "_rec"))
    sizes = [sum(len(r) for r in rows) for _, rows, _, _ in streams]
    sid = np.repeat(np.arange(len(streams)), sizes)
    order = np.lexsort((rec, src, sid, ts))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    quarantined, reasons = {}, {}
    for i, st in enumerate(streams):
        s, bad = st[0], st[2]
        seqs = np.flatnonzero(sid[order] == i)      # the stream's seqs, in order, and its rows in that order
        st.append((seqs, order[seqs] - starts[i]))
        quarantined[s.name] = sum(t.num_rows for t in bad)
        counts = {}
        for t in bad:
            for why in t.column("reason").to_pylist():
                label = ", ".join(part.split(": ", 1)[0] for part in why.split("; "))
                counts[label] = counts.get(label, 0) + 1
        reasons[s.name] = list(counts.items())
    for (s, *_), size in zip(streams, sizes):
        if not size and not allow_empty:
            q = quarantined[s.name]
            why = (f"all {q:,} of its rows are unparseable ({_by_reason(reasons[s.name], 3)}): is its time column "
                   f"{s.raw.time!r} really in {s.raw.time_unit!r}?") if q else "its raw files hold no rows"
            raise InputError(f"{s.raw.path}: stream '{s.name}': nothing staged, {why}; nothing was written to the "
                             f"stream folders; pass --allow-empty to stage an empty stream")
    progress(f"stage: read, parsed and ordered {len(order):,} tuples in this process ({time.perf_counter() - t0:.1f} s)")
    t1 = time.perf_counter()
    man = {"format": FORMAT, "ts_unit": job.ts_unit, "streams": {}, "total": int(len(order)),
           "quarantined": quarantined, "sources": sources,
           "staging": local_staging(job, files_of)}
    cores = os.cpu_count() or 1

    def prepare(stream):
        """A stream's quarantine written, its folder emptied of parts, its columns joined across
        its files, and the row ranges of its parts."""
        s, files, bad, finer, (seqs, rows) = stream
        _write_quarantine(root, s, bad, quarantined[s.name], reasons[s.name], progress)
        _clear_parts(root, s)
        dt = s.rows_dtype
        cols = {n: np.concatenate([f[n] for f in files]) if files else np.zeros(0, dt.fields[n][0])
                for n in dt.names if n != SEQ}
        return cols, _part_bounds(len(seqs), len(order), cores)

    def write_one(task):
        """One part file: a gather per column in seq order (not a structured sort: 8x slower);
        returns its `string` columns' longest values and its event times' range (None if empty)."""
        (s, _, _, _, (seqs, rows)), cols, k, (lo, hi) = task
        text = string_columns(s)
        part = {n: c[rows[lo:hi]] for n, c in cols.items()}
        part[SEQ] = seqs[lo:hi].astype(np.int64)
        name = f"part-{k:05d}.parquet"
        tmp = os.path.join(root, s.name, f".{name}")
        write_part(to_arrow(part, text, s.rows_dtype), tmp)
        os.replace(tmp, os.path.join(root, s.name, name))
        ts = (int(part[TS].min()), int(part[TS].max())) if hi > lo else None
        return {c: int(np.char.str_len(part[c]).max(initial=0)) for c in text}, ts

    # parts of at most PART_ROWS rows, and at least as many over all streams as there are cores
    # (a million rows of one stream took one core for 0.4 s while the other had finished), each
    # written by a thread of its own: Arrow and numpy's gathers let go of the GIL
    with ThreadPoolExecutor(max(1, min(len(streams), cores))) as pool:
        prepared = list(pool.map(prepare, streams))
    tasks = [(st, cols, k, b) for st, (cols, bounds) in zip(streams, prepared) for k, b in enumerate(bounds)]
    with ThreadPoolExecutor(max(1, min(len(tasks), cores))) as pool:
        done = list(pool.map(write_one, tasks))
    for st, _ in zip(streams, prepared):
        s, finer, seqs = st[0], st[3], st[4][0]
        mine = [d for t, d in zip(tasks, done) if t[0] is st]
        text = string_columns(s)
        ts = [d[1] for d in mine if d[1] is not None]
        entry = {"count": int(len(seqs)), "ts_min": min(t[0] for t in ts) if ts else None,
                 "ts_max": max(t[1] for t in ts) if ts else None,
                 "schema": {"seq": "int64", "ts": "int64", **dict(s.schema)}, "ts_finer": int(finer)}
        if text:        # a `string` column staged as wide as its longest value (1 at least), as Spark's path has it
            entry["string_bytes"] = {c: max([1] + [d[0][c] for d in mine]) for c in text}
        man["streams"][s.name] = entry
        progress(f"stage: stream {s.name}: {entry['count']:,} tuples -> {os.path.join(root, s.name)}")
    man["files"] = hash_input(job, root)
    crc = os.path.join(root, f".{MANIFEST}.crc")     # Hadoop's checksum of a manifest Spark wrote: stale now
    if os.path.lexists(crc):
        paths.remove_file(root, crc)
    tmp = os.path.join(root, f".{MANIFEST}.tmp")
    with open(tmp, "w") as f:
        json.dump(man, f, indent=2)
    os.replace(tmp, os.path.join(root, MANIFEST))
    progress(f"stage: wrote {len(order):,} tuples ({time.perf_counter() - t1:.1f} s; {time.perf_counter() - t0:.1f} s "
             f"in all)")
    return man


def _gathered(s, files, got_all, types, progress):
    """[stream, its files' rows, their refused rows, rows with a finer time] from its reads (in
    file order); NeedsSpark for a file this reader did not read as Spark would."""
    from .spark.stage import local_subdirs, subdir_warning
    for d in local_subdirs(s):
        progress(subdir_warning(s, f"file:{d}"))
    progress(f"stage: stream {s.name}: reading {len(files)} file(s) from {s.raw.path}")
    rows, bad, finer = [], [], 0
    for k, (f, got) in enumerate(zip(files, got_all)):
        if got is None:
            raise NeedsSpark(f"file:{f}: a value this reader does not parse as Spark does")
        if types[k] and (None in types[k].values() or types[k] != types[0]):
            # Spark's inference of this file's types is not repeated here, or it differs
            # from the first file's (which Spark's path refuses, naming both): Spark says
            raise NeedsSpark(f"file:{f}: the JSON types of its columns (Spark infers and checks them)")
        r, refused, n_finer = got
        r["_src"] = k
        rows.append(r)
        finer += n_finer
        if refused is not None:
            bad.append(refused.set_column(0, "file", pa.array([f"file:{f}"] * refused.num_rows, pa.string())))
    return [s, rows, bad, finer]


def _clear_parts(root, s):
    """Empty the stream's staged folder of its part files (and only those)."""
    d = os.path.join(root, s.name)
    paths.plain_dir(d, f"staged stream folder of '{s.name}'")
    os.makedirs(paths.inside(root, d), exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("part-") or f.startswith(".part-") or f in ("_SUCCESS", "._SUCCESS.crc"):
            paths.remove_file(root, os.path.join(d, f))


def _part_bounds(n, total, cores):
    """[(first, end)] row ranges of a stream's `n` rows in its part files: at most PART_ROWS rows
    each, and no more than the `total` rows of all streams over the `cores` (rounded up to whole
    row groups), so that every core writes a part."""
    from .staged import ROW_GROUP
    size = min(PART_ROWS, max(ROW_GROUP, -(-total // max(cores, 1) // ROW_GROUP) * ROW_GROUP))
    return [(k, min(k + size, n)) for k in range(0, n, size)] or [(0, 0)]


def _write_quarantine(root, s, bad, n, reasons, progress):
    """The stream's quarantined rows in <out>/_quarantine/<stream>/ (replaced), as Spark writes them."""
    from .spark.stage import _by_reason
    d = os.path.join(root, "_quarantine", s.name)
    paths.plain_dir(d, f"quarantine folder of '{s.name}'")
    if os.path.isdir(d):
        for f in os.listdir(d):
            paths.remove_file(root, os.path.join(d, f))
    if not n:
        return
    os.makedirs(paths.inside(root, d), exist_ok=True)
    pq.write_table(pa.concat_tables(bad), os.path.join(d, "part-00000.parquet"))
    progress(f"stage: stream {s.name}: {n:,} row(s) quarantined to file:{d} ({_by_reason(reasons, 5)})")
