"""Staging: raw input (CSV, JSON lines, Parquet) -> the staged layout (README "Staged input").

For each stream: read every raw file (checking that each has the declared columns, with the
same types as the stream's first file), parse the event time into ts (job's ts unit) and each
column into its declared type, send rows that cannot be parsed (null or unparseable event time
or column) to <staged>/_quarantine/<stream>/ with the reason, order the union of the streams by
(event time, stream, file, row), and number it with a dense global seq. The seq is assigned in
parallel: rows are range-partitioned by the sort, each partition is counted, and a row's seq is
its partition's offset plus its position in the partition.
"""
import csv
import dataclasses
import re
import time
import json

from ...errors import InputError, JobError
from ...schema import MAX_CHAR, is_string
from ..staged import ROW_GROUP, string_columns
from ...units import ts_unit_ns
from .. import paths
from . import fs

_INT = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
        "uint8": "smallint", "uint16": "int", "uint32": "bigint", "uint64": "bigint"}
_UMAX = {"uint8": 255, "uint16": 65535, "uint32": 4294967295}


SMALL_INPUT_BYTES = 64 << 20      # a JVM for a short life (session.py); the parse cached uncompressed
# input up to this is ordered in one partition (no sampling job, no shuffle); above it Spark's
# range partitioning sorts and writes on every core (63 MB of CSV on 2 cores: 27.6 s against 30.3 s)
ONE_PARTITION_BYTES = 16 << 20


def precheck(job, out=None, force=False, overwrite=False, allow_empty=False):
    """What stage can decide without Spark, for raw input on local (or mounted) filesystems:
    raw paths that match no file, CSV headers without a declared column, raw files with no rows
    (unless `allow_empty`), an event time written as text under a numeric time unit, a staged
    directory that is not one, and whether the staged input is up to date (then its manifest is
    returned, and no JVM need start). Returns None when Spark must run; raises InputError on a
    refusal."""
    import os
    out = fs.qualify(out or job.staged)
    _check_local_targets(job, out)
    if paths.local(out) and os.path.isdir(paths.real(out)) and set(os.listdir(paths.real(out))) - {paths.LOCK} \
            and not os.path.exists(os.path.join(paths.real(out), "_manifest.json")) and not overwrite:
        raise _not_staged(out)
    sources = {}
    for s in job.streams:
        if s.raw is None:
            raise _no_raw(job, s)
        _not_a_socket(job, s)
        files = _local_files(s)
        if files is None:
            return None
        if not files:
            raise _no_files(s)
        _check_first_rows(s, files, allow_empty)
        sources[s.name] = files
    if force or not paths.local(out):
        return None
    mp = os.path.join(paths.real(out), "_manifest.json")
    if not os.path.exists(mp):
        return None
    try:
        with open(mp) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return None
    staging = local_staging(job, sources)
    if isinstance(old, dict) and old.get("staging") == staging:
        return dict(old, up_to_date=True)
    return None


SAMPLE_ROWS = 20
_ISO = re.compile(r"\s*\d{4}-\d{2}-\d{2}([T ]\d{1,2}:\d{2}.*)?\s*")


def _check_first_rows(s, files, allow_empty):
    """Stream `s`'s local raw files, read as far as their first rows (uncompressed CSV and JSON
    lines): every declared column in each CSV header; some row in some file (else stage would
    only find it after Spark has read everything); and an event time that is a number when
    time_unit says it is one. Only when every sampled value is ISO-8601 text is the unit refused
    (a few bad rows are quarantined by stage, not a reason to refuse the job)."""
    if s.raw.format == "parquet":
        import pyarrow.parquet as pq
        for f in files:
            try:
                pq.read_metadata(f)
            except Exception as e:  # noqa: BLE001 - any damage, named in one line
                raise InputError(f"file:{f}: not a readable Parquet file of stream '{s.name}' "
                                 f"({str(e).splitlines()[0][:120] if str(e) else type(e).__name__})") from None
        return
    if s.raw.format not in ("csv", "json"):
        return
    sample, unknown = [], False                  # (file, event-time value) of the first rows
    for f in files:
        if f.lower().endswith(fs._COMPRESSED):
            unknown = True
            continue
        with open(f, encoding="utf-8", errors="replace", newline="") as fh:
            if s.raw.format == "json":
                for line in fh:
                    if len(sample) >= SAMPLE_ROWS:
                        break
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        unknown = unknown or bool(line.strip())     # one JSON document over many lines
                        continue
                    if isinstance(rec, dict):
                        sample.append((f, rec.get(s.raw.time)))
                continue
            rows = csv.reader(fh, delimiter=s.raw.delimiter)
            if s.raw.header:
                line = fh.readline().lstrip("\ufeff").rstrip("\r\n")
                have = [c.strip() for c in next(csv.reader([line], delimiter=s.raw.delimiter), [])]
                for c in _declared(s):
                    if c not in have:
                        raise InputError(f"file:{f}: column '{c}' of stream '{s.name}' is missing "
                                         f"(file has: {', '.join(have) or 'no columns'})")
                at = have.index(s.raw.time) if s.raw.time in have else None
            else:
                at = None
            for row in rows:
                if len(sample) >= SAMPLE_ROWS:
                    break
                if row:
                    sample.append((f, row[at] if at is not None and at < len(row) else None))
        if len(sample) >= SAMPLE_ROWS:
            break
    if not sample and not unknown and not allow_empty:
        raise InputError(f"{s.raw.path}: stream '{s.name}': nothing to stage, its raw files hold no rows"
                         f"{' (a header only)' if s.raw.format == 'csv' and s.raw.header else ''}; "
                         f"pass --allow-empty to stage an empty stream")
    values = [(f, v) for f, v in sample if v not in (None, "")]
    if s.raw.time_unit != "timestamp" and values and all(isinstance(v, str) and _ISO.fullmatch(v)
                                                         for _, v in values):
        f, v = values[0]
        raise InputError(f"file:{f}: column '{s.raw.time}' of stream '{s.name}' holds dates as text ({v.strip()!r}), "
                         f"but streams.{s.name}.raw.time_unit is {s.raw.time_unit!r} (a number of "
                         f"{s.raw.time_unit}); set time_unit = \"timestamp\" to read it")


def _raw_hits(s):
    """What stream `s`'s local raw path names: the files and directories its glob matches."""
    import glob as globmod
    import os
    p = os.path.abspath(s.raw.path[len("file://"):] if s.raw.path.startswith("file://") else s.raw.path)
    return sorted(globmod.glob(p)) if globmod.has_magic(p) else ([p] if os.path.exists(p) else [])


def _local_files(s):
    """The raw files of stream `s` (what Spark would read, without its hidden `_`/`.` files), or
    None when its raw path is not on a local filesystem."""
    import os
    if s.raw is None or not paths.local(s.raw.path):
        return None
    files = []
    for h in _raw_hits(s):
        if os.path.isdir(h):
            files += [os.path.join(h, f) for f in sorted(os.listdir(h)) if os.path.isfile(os.path.join(h, f))]
        else:
            files.append(h)
    return sorted(f for f in files if not os.path.basename(f).startswith(("_", ".")))


def local_subdirs(s):
    """The subdirectories of stream `s`'s local raw directories (not hidden): not read, and said."""
    import os
    return [os.path.join(h, f) for h in _raw_hits(s) if os.path.isdir(h) for f in sorted(os.listdir(h))
            if not f.startswith(("_", ".")) and os.path.isdir(os.path.join(h, f))]


def subdir_warning(s, d):
    """The one line for a subdirectory `d` (a URI) of stream `s`'s raw path, which is not read."""
    return (f"stage: warning: {d}: a subdirectory of stream {s.name}'s raw path: the files in it are not read "
            f"(only files directly in it are, as live staging reads a landing directory)")


def local_staging(job, sources):
    """The staging record of local raw files ({stream: paths}), as the manifest keeps it (the
    URI, size and modification time in ms of each, as Hadoop's file status gives them): what
    says a staged input is up to date, whichever engine staged it."""
    import os
    return {"settings": _settings(job),
            "inputs": {k: [[f"file:{f}", os.path.getsize(f), os.stat(f).st_mtime_ns // 10**6] for f in v]
                       for k, v in sources.items()}}


def small_input(job):
    """Is the whole raw input local and at most SMALL_INPUT_BYTES? (Then a JVM set up for a
    short life starts and finishes sooner; see session.spark_session.)"""
    import os
    total = 0
    for s in job.streams:
        files = _local_files(s)
        if files is None:
            return False
        total += sum(os.path.getsize(f) for f in files)
    return total <= SMALL_INPUT_BYTES


def _not_staged(out):
    return InputError(f"{out}: exists, is not empty and is not a staged directory (no _manifest.json); "
                      f"choose another [input] staged, or pass --overwrite to replace its stream folders")


def _no_raw(job, s):
    return JobError(f"{job.path}: streams.{s.name}.raw: required to stage (path, format, time, time_unit)")


def _not_a_socket(job, s):
    if s.raw.path.startswith("socket://") or s.raw.source is not None:
        raise JobError(f"{job.path}: streams.{s.name}.raw.path: {s.raw.path} is a live source; stage it with "
                       f"`mpi-join stage --follow JOB`")


def stageable(job):
    """What the job alone says against staging it at rest (no raw input, a live source), before
    any directory is locked or file read."""
    for s in job.streams:
        if s.raw is None:
            raise _no_raw(job, s)
        _not_a_socket(job, s)


def _no_files(s):
    return InputError(f"{s.raw.path}: no input files for stream '{s.name}'")


def _by_reason(reasons, most):
    """The `most` commonest reasons of [(reason, count)], for one line."""
    return "; ".join(f"{n:,} unparsed: {r}" for r, n in sorted(reasons, key=lambda x: -x[1])[:most])


def _settings(job):
    """The staging settings as the manifest holds them (a JSON round trip: lists, not tuples), so
    that settings read back compare equal to the job's."""
    return json.loads(json.dumps({"ts_unit": job.ts_unit,
                                  "streams": [[s.name, dict(s.schema), dataclasses.asdict(s.raw)] for s in job.streams]}))


def stage(spark, job, out=None, progress=print, overwrite=False, force=False, small_bytes=ONE_PARTITION_BYTES,
          allow_empty=False):
    """Stage every stream of `job` into `out` (_stage), each CSV file its own read partition:
    a file's records are then numbered by its one task (see _read_stream)."""
    keys = ("spark.sql.files.openCostInBytes", COMPRESSED_CACHE)
    prev = {k: spark.conf.get(k, None) for k in keys}
    spark.conf.set(keys[0], spark.conf.get("spark.sql.files.maxPartitionBytes", "134217728"))
    try:
        return _stage(spark, job, out, progress, overwrite, force, small_bytes, allow_empty)
    finally:
        for k, v in prev.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


# the parsed rows of an input up to SMALL_INPUT_BYTES are cached uncompressed: the columnar
# cache's compression (dictionary and run-length statistics gathered row by row) took a fifth of
# staging's time (63 MB of CSV: 35.9 s against 29.8 s)
COMPRESSED_CACHE = "spark.sql.inMemoryColumnarStorage.compressed"


def _stage(spark, job, out=None, progress=print, overwrite=False, force=False, small_bytes=ONE_PARTITION_BYTES,
           allow_empty=False):
    """Stage every stream of `job` into `out` (default: the job's [input] staged). Returns the manifest.

    `out` is replaced stream by stream, so it must be a staged directory already (it holds a
    _manifest.json), empty, or absent; anything else is refused unless `overwrite`. It must not
    overlap a stream's raw input.

    Staging is skipped when `out` already holds this input staged with these settings (time
    unit, schemas, raw sources) from raw files unchanged since (names, sizes, modification
    times), unless `force`. Each phase reports its time. Raw input of at most `small_bytes`
    (Spark conf spark.mpijoin.stage.smallInputBytes overrides it) is ordered in one partition,
    which saves Spark's sampling job and shuffle."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    out = fs.qualify(out or job.staged)
    _check_local_targets(job, out)
    for s in job.streams:
        if s.raw is not None and fs.overlap(out, fs.qualify(s.raw.path)):
            raise InputError(f"{out}: the staged directory overlaps the raw input of stream '{s.name}' "
                             f"({s.raw.path}); stage into a directory of its own")
    if (fs.exists(spark, out) and fs.list_files(spark, out) and not fs.exists(spark, f"{out}/_manifest.json")
            and not overwrite):
        raise _not_staged(out)
    t0 = time.perf_counter()
    frames, quarantined, sources = [], {}, {}
    for s in job.streams:
        if s.raw is None:
            raise _no_raw(job, s)
        _not_a_socket(job, s)
        subdirs = []
        files = fs.list_files(spark, s.raw.path, subdirs)
        for d in subdirs:
            progress(subdir_warning(s, d))
        if not files:
            raise _no_files(s)
        sources[s.name] = files
    staging = {"settings": _settings(job), "inputs": {k: fs.file_stats(spark, v) for k, v in sources.items()}}
    old = fs.read_text(spark, f"{out}/_manifest.json")
    if old and not force and json.loads(old).get("staging") == staging:
        progress(f"stage: {out} is up to date (same settings, raw files unchanged); --force stages again")
        return dict(json.loads(old), up_to_date=True)
    small_bytes = int(spark.conf.get("spark.mpijoin.stage.smallInputBytes", str(small_bytes)))
    total = sum(st[1] for v in staging["inputs"].values() for st in v)
    small = total <= small_bytes
    if total <= SMALL_INPUT_BYTES:
        spark.conf.set(COMPRESSED_CACHE, "false")
    tagged_frames, unparsed, quarantine = [], [], []
    for i, s in enumerate(job.streams):
        files = sources[s.name]
        progress(f"stage: stream {s.name}: reading {len(files)} file(s) from {s.raw.path}")
        tagged = _tag(_read_stream(spark, s, files), s, job)
        # parsed once into the cache, with the raw text of the quarantined rows only (the rest
        # null: the cache holds little more), so that the quarantine is written from it too
        bad_row = F.col("_reason") != ""
        parsed = tagged.select(*[F.when(bad_row, F.col(c)).alias(c) if c.startswith("_raw_") else F.col(c)
                                 for c in tagged.columns]).persist(StorageLevel.MEMORY_AND_DISK)
        tagged_frames.append(parsed)
        good, bad = _split(parsed, s)
        frames.append(_as_union_row(good, i, job))
        unparsed.append(parsed.filter(F.col("_reason") != ""))
        quarantine.append(bad)
    # one job parses every stream (into the cache) and counts its unparseable rows
    by_reason = (_union([b.select(F.lit(i).alias("_stream"), "_reason") for i, b in enumerate(unparsed)])
                 .groupBy("_stream", "_reason").count().collect())
    reasons = {}
    for r in by_reason:
        reasons.setdefault(r["_stream"], []).append((r["_reason"], int(r["count"])))
    for i, s in enumerate(job.streams):
        quarantined[s.name] = sum(n for _, n in reasons.get(i, []))
    union = _union(frames)
    keys = ("_ts", "_stream", "_file", "_row")
    # a small input is ordered in one partition: no sampling job, no shuffle, one file per stream
    ordered = (union.coalesce(1).sortWithinPartitions(*keys) if small else union.orderBy(*keys))
    ordered = (ordered.withColumn("_pid", F.spark_partition_id())
               .withColumn("_mid", F.monotonically_increasing_id())
               .persist(StorageLevel.MEMORY_AND_DISK))
    # one job: tuples per (partition, stream) give the seq offsets and each stream's count and ts range
    text = [(i, c) for i, s in enumerate(job.streams) for c in string_columns(s)]
    stats = ordered.groupBy("_pid", "_stream").agg(
        F.count("*").alias("n"), F.min("_ts").alias("lo"), F.max("_ts").alias("hi"),
        F.sum(F.col("_finer").cast("long")).alias("finer"),
        *[F.max(F.octet_length(F.col(f"_p{i}.{c}"))).alias(f"_w{k}") for k, (i, c) in enumerate(text)]).collect()
    staged_n = {}
    for r in stats:
        staged_n[r["_stream"]] = staged_n.get(r["_stream"], 0) + r["n"]
    empty = [i for i in range(len(job.streams)) if not staged_n.get(i)]
    if empty and not allow_empty:
        for t in [ordered] + tagged_frames:
            t.unpersist()
        s = job.streams[empty[0]]
        q = quarantined[s.name]
        why = (f"all {q:,} of its rows are unparseable ({_by_reason(reasons[empty[0]], 3)}"
               f"): is its time column {s.raw.time!r} really in {s.raw.time_unit!r}?") if q else "its raw files hold no rows"
        raise InputError(f"{s.raw.path}: stream '{s.name}': nothing staged, {why}; nothing was written to the "
                         f"stream folders; pass --allow-empty to stage an empty stream")
    # a string column is held as wide as its longest value
    widths = {(i, c): max([1] + [r[f"_w{k}"] or 0 for r in stats]) for k, (i, c) in enumerate(text)}
    for (i, c), w in widths.items():
        if w > MAX_CHAR:
            for t in [ordered] + tagged_frames:
                t.unpersist()
            raise InputError(f"{job.streams[i].raw.path}: stream '{job.streams[i].name}' column '{c}': a value "
                             f"of {w:,} bytes; text columns hold at most {MAX_CHAR:,} bytes; nothing was written")
    # the quarantine is written only now, once nothing can refuse the input any more: a refused
    # stage leaves the disk as it was
    for i, s in enumerate(job.streams):
        qpath = f"{out}/_quarantine/{s.name}"
        fs.delete(spark, qpath)
        if quarantined[s.name]:
            quarantine[i].write.mode("overwrite").parquet(fs.uri(qpath))
            progress(f"stage: stream {s.name}: {quarantined[s.name]:,} row(s) quarantined to {qpath} "
                     f"({_by_reason(reasons[i], 5)})")
    for t in tagged_frames:
        t.unpersist()
    counts = {}
    for r in stats:
        counts[r["_pid"]] = counts.get(r["_pid"], 0) + r["n"]
    offsets, acc = {}, 0
    for pid in sorted(counts):
        offsets[pid] = acc
        acc += counts[pid]
    off = F.create_map(*[x for pid, o in offsets.items() for x in (F.lit(pid), F.lit(o))]) if offsets else None
    seq = (off[F.col("_pid")] + (F.col("_mid") - F.shiftleft(F.col("_pid").cast("bigint"), 33))) if off is not None else F.lit(0)
    numbered = ordered.withColumn("seq", seq.cast("bigint"))
    progress(f"stage: read, parsed and ordered {acc:,} tuples"
             f"{' (small input: one partition, no shuffle)' if small else ''} ({time.perf_counter() - t0:.1f} s)")
    t1 = time.perf_counter()
    man = {"format": "mpi-join-staged/1", "ts_unit": job.ts_unit, "streams": {}, "total": int(acc),
           "quarantined": quarantined, "sources": sources, "staging": staging}
    for i, s in enumerate(job.streams):
        cols = [F.col("seq"), F.col("_ts").alias("ts")] + [F.col(f"_p{i}.{c}").alias(c) for c in s.schema]
        part = numbered.filter(F.col("_stream") == i).select(*cols)
        # row groups of about ROW_GROUP rows: several sources each decode little more than their
        # own parts (master/source.py). Parquet sizes them in encoded bytes, about half a row's
        # width here (a 64-byte equi row: 8,191-row groups at half of ROW_GROUP x 64)
        # in seq order already: `ordered` is sorted within its partitions, seq numbers it so
        part.write.mode("overwrite").option(
            "parquet.block.size", str(ROW_GROUP * s.dtype.itemsize // 2)).parquet(fs.uri(f"{out}/{s.name}"))
        mine = [r for r in stats if r["_stream"] == i]
        n = sum(r["n"] for r in mine)
        man["streams"][s.name] = {"count": int(n), "ts_min": min((r["lo"] for r in mine), default=None),
                                  "ts_max": max((r["hi"] for r in mine), default=None),
                                  "schema": {"seq": "int64", "ts": "int64", **dict(s.schema)},
                                  "ts_finer": int(sum(r["finer"] or 0 for r in mine))}
        if string_columns(s):
            man["streams"][s.name]["string_bytes"] = {c: w for (j, c), w in widths.items() if j == i}
        progress(f"stage: stream {s.name}: {n:,} tuples -> {out}/{s.name}")
    ordered.unpersist()
    if paths.local(out):          # checksums of the part files: a resume verifies its input by them
        from ..staged import hash_input
        man["files"] = hash_input(job, paths.real(out))
    fs.write_text(spark, f"{out}/_manifest.json", json.dumps(man, indent=2))
    progress(f"stage: wrote {acc:,} tuples ({time.perf_counter() - t1:.1f} s; {time.perf_counter() - t0:.1f} s in all)")
    return man


def _check_local_targets(job, out):
    """Every folder stage replaces in a local `out` must lie inside it and be no symlink."""
    if not paths.local(out):
        return
    import os
    root = paths.real(out)
    for sub in [os.path.join(root, s.name) for s in job.streams] + [os.path.join(root, "_quarantine")] + \
            [os.path.join(root, "_quarantine", s.name) for s in job.streams]:
        paths.plain_dir(sub, "a folder stage replaces")
        paths.inside(root, sub)


def _declared(s):
    return [s.raw.time] + list(s.schema)


def _read_stream(spark, s, files):
    """Read the stream's files, check their columns against the stream (and, but for CSV, each
    against its first file), union them. CSV files are read in one scan per distinct header
    (the columns in the header's order): a plan and a generated parse per header, not per file
    (40 files of one header: 6.6 s of planning and 40 compiled parses before). Each file is one
    partition of its scan (stage sets openCostInBytes), so `_row`'s ids number its records."""
    want = _declared(s)
    if s.raw.format == "csv":
        groups = {}
        for k, f in enumerate(files):
            header = _csv_header(spark, s, f)
            if not s.raw.header:
                header = want[:len(header)]
            missing = [c for c in want if c not in header]
            if missing:
                raise InputError(f"{f}: column '{missing[0]}' of stream '{s.name}' is missing "
                                 f"(file has: {', '.join(header) or 'no columns'})")
            groups.setdefault(tuple(header), []).append((k, f))
        frames = [_csv_scan(spark, s, list(h), g, want) for h, g in groups.items()]
        return _union(frames)
    return _read_each(spark, s, files, want)


def _csv_scan(spark, s, header, group, want):
    """One scan of CSV files `group` ([(index, path)]) that share `header`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType
    # RFC 4180: "" inside a quoted field is one quote, a quoted field may span lines; a row with
    # more or fewer fields than the header fills _corrupt and is quarantined. A quoted empty
    # field ("") is an empty string, an unquoted empty field or \\N a null. Read as ISO-8859-1
    # (one character per byte), so that invalid UTF-8 is seen as it is (a UTF-8 read turns every
    # bad byte into U+FFFD, and two different keys would join)
    schema = StructType([StructField(c, StringType()) for c in header] + [StructField("_corrupt", StringType())])
    df = csv_options(spark.read, s).schema(schema).csv([f for _, f in group])
    to_uri = spark._jvm.org.apache.hadoop.fs.Path
    index = F.create_map(*[x for k, f in group for x in (F.lit(to_uri(f).toUri().toString()), F.lit(k))])
    paths = F.create_map(*[x for k, f in group for x in (F.lit(k), F.lit(f))])
    df = df.withColumn("_file", index[F.col("_metadata.file_path")]).withColumn("_path", paths[F.col("_file")])
    df = _utf8(df, want, "csv")
    return (df.select(*want, F.col("_corrupt").isNotNull().alias("_bad_fields"), "_bad_utf8", "_file", "_path")
            .withColumn("_row", F.monotonically_increasing_id()))


def _read_each(spark, s, files, want):
    """JSON lines and Parquet files, a read each: their types are checked file by file."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType
    first_types, frames = None, []
    for k, f in enumerate(files):
        try:
            df = spark.read.json(f) if s.raw.format == "json" else spark.read.parquet(f)
        except Exception as e:  # noqa: BLE001 - Spark's AnalysisException, named by its condition
            if "COLUMN_ALREADY_EXISTS" not in str(e):
                raise
            col = str(e).split("`")[1] if "`" in str(e) else "?"
            raise InputError(f"{f}: key '{col}' is in it twice (in one object, or as two keys that differ only in "
                             f"case: Spark's schema inference takes names case-insensitively)") from None
        types = {fld.name: fld.dataType for fld in df.schema.fields}
        for c in want:
            if c not in types:
                raise InputError(f"{f}: column '{c}' of stream '{s.name}' is missing (file has: {', '.join(types) or 'no columns'})")
        if first_types is None:
            first_types = {c: types[c] for c in want}
        for c in want:
            if types[c] != first_types[c] and not _both_null_type(types[c], first_types[c]):
                raise InputError(f"{f}: column '{c}' has type {types[c].simpleString()}, but {files[0]} "
                                 f"has {first_types[c].simpleString()} (files of stream '{s.name}' must agree)")
        if s.raw.format == "json":   # re-read as text so that every value is parsed the same way
            df = spark.read.schema(StructType([StructField(c, StringType()) for c in want] +
                                              [StructField("_corrupt_record", StringType())])).json(f)
        df = _utf8(df, want, s.raw.format)
        frames.append(df.select(*want, F.lit(False).alias("_bad_fields"), "_bad_utf8").withColumn("_file", F.lit(k))
                      .withColumn("_path", F.lit(f))
                      .withColumn("_row", F.monotonically_increasing_id()))
    return _union(frames)


def _utf8(df, cols, fmt):
    """df with its text as UTF-8 strings and a column _bad_utf8 saying where a row's text is not
    valid UTF-8 ("" when it is). CSV was read as ISO-8859-1: each value's bytes are checked, then
    decoded. A JSON line with invalid UTF-8 is a corrupt record (its parser refuses it), whose
    text keeps the bad bytes. Parquet text is checked as it is."""
    from pyspark.sql import functions as F
    bad = []
    if fmt == "json":
        rec = F.col("_corrupt_record")
        at = F.octet_length(F.substring_index(F.call_function("make_valid_utf8", rec), "\ufffd", 1))
        bad = F.when(rec.isNotNull() & ~F.call_function("is_valid_utf8", rec),
                     F.concat(F.lit("the record is not valid UTF-8 (at byte "), at.cast("string"), F.lit(")")))
        return df.withColumn("_bad_utf8", F.coalesce(bad, F.lit("")))
    out = []
    for c in cols:
        if fmt == "csv":
            raw = F.encode(F.col(c), "ISO-8859-1")
            text = raw.cast("string")
        elif dict(df.dtypes).get(c) in ("string", "binary"):
            raw, text = F.col(c).cast("binary"), F.col(c).cast("string")
        else:
            out.append(F.col(c))
            continue
        ok = F.call_function("is_valid_utf8", text)
        at = F.octet_length(F.substring_index(F.call_function("make_valid_utf8", text), "\ufffd", 1))
        bad.append(F.when(text.isNotNull() & ~ok, F.concat(
            F.lit(f"{c}: not valid UTF-8 (byte "), at.cast("string"), F.lit(" of the value, 0x"),
            F.hex(F.substring(raw, at + 1, 1)), F.lit(")"))))
        out.append(F.when(text.isNull() | ok, text).otherwise(F.call_function("make_valid_utf8", text))
                   .alias(c) if fmt == "csv" else F.col(c))
    rest = [F.col(c) for c in df.columns if c not in cols]
    return df.select(*out, *rest, (F.concat_ws("; ", *bad) if bad else F.lit("")).alias("_bad_utf8"))


def csv_options(reader, s):
    """A CSV reader (batch or streaming) as staging reads: RFC 4180 quoting, ISO-8859-1 bytes,
    bad rows into _corrupt."""
    return (reader.option("header", s.raw.header).option("sep", s.raw.delimiter)
            .option("encoding", "ISO-8859-1")
            .option("quote", '"').option("escape", '"').option("multiLine", True)
            .option("nullValue", "\\N").option("emptyValue", "")
            .option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", "_corrupt"))


def _csv_header(spark, s, f):
    """A CSV file's column names (or, without a header line, as many _cN as its first line has
    fields), read from its first line, without a Spark job when the file is uncompressed."""
    line = fs.first_line(spark, f)
    if line is None:
        return spark.read.option("header", s.raw.header).option("sep", s.raw.delimiter).csv(f).columns
    fields = next(csv.reader([line], delimiter=s.raw.delimiter), []) if line else []
    return [c.strip() for c in fields] if s.raw.header else [f"_c{i}" for i in range(len(fields))]


def _both_null_type(a, b):
    from pyspark.sql.types import NullType
    return isinstance(a, NullType) or isinstance(b, NullType)


def _tag(df, s, job):
    """Each row parsed into _ts and the stream's columns, plus _reason: what could not be parsed
    ("" for a good row). Kept with the raw text so that quarantined rows show what was read."""
    from pyspark.sql import functions as F
    ts, finer = _parse_time(df, s, job)
    parsed = {"_ts": ts}
    for c, t in s.schema.items():
        parsed[c] = _parse_col(df, c, s.dtype.fields[c][0], t)
    fields = "a row with more or fewer fields than the header"
    label = {k: ("event time " + s.raw.time) if k == "_ts" else k for k in parsed}
    raw = {k: F.col(f"_raw_{s.raw.time if k == '_ts' else k}") for k in parsed}
    # _reason: what failed, by column (counted per reason); _why: the same in words, with the value
    # invalid UTF-8 is the reason itself (a JSON line with it parses to nothing at all)
    utf8 = F.col("_bad_utf8") != ""
    # a null is kept (the staged Parquet holds it) in a column the ranks do not read or that the
    # stream declares nullable; in the event time or another column the join reads, it is refused
    bad = {k: F.col(f"_v_{k}").isNull() & (raw[k].isNotNull() | F.lit(k == "_ts" or (k in s.reads and k not in s.nullable)))
           for k in parsed}
    reason = F.when(utf8, F.lit("not valid UTF-8")).otherwise(F.concat_ws(
        ", ", F.when(F.col("_bad_fields"), F.lit(fields)),
        *[F.when(bad[k], F.lit(label[k])) for k in parsed]))
    why = F.when(utf8, F.col("_bad_utf8")).otherwise(F.concat_ws(
        "; ", F.when(F.col("_bad_fields"), F.lit(fields)),
        *[F.when(bad[k] & raw[k].isNull(), F.lit(f"{label[k]}: missing (null)"))
          .when(bad[k],
                F.concat(F.lit(f"{label[k]}: {_expected(s, k, job)}, got '"),
                         F.substring(raw[k], 1, 60), F.lit("'")))
          for k in parsed]))
    return (df.select("_file", "_path", "_row", "_bad_fields", "_bad_utf8",
                      *[F.col(c).cast("string").alias(f"_raw_{c}") for c in _declared(s)],
                      *[v.alias(f"_v_{k}") for k, v in parsed.items()], finer.alias("_finer"))
            .withColumn("_reason", reason).withColumn("_why", why))


def _expected(s, k, job):
    """What a column's raw text must be, in words (for quarantined rows)."""
    if k == "_ts":
        return ("expected a timestamp or ISO-8601 text" if s.raw.time_unit == "timestamp" else
                f"expected a number of {s.raw.time_unit}")
    t = str(s.schema[k]).strip().lower()
    fd = s.dtype.fields[k][0]
    if t in _INT:
        return f"expected an integer that fits {t}"
    if t in ("float32", "float64"):
        return "expected a number"
    if t == "bool":
        return "expected true or false"
    if fd.shape:
        return f"expected base64 of exactly {fd.itemsize} bytes"
    if is_string(t):
        return "expected text without a NUL character"
    return f"expected text of at most {fd.itemsize} bytes (UTF-8)"


def _split(parsed, s):
    """(parsed rows, quarantined rows with a reason and their raw text) of one stream."""
    from pyspark.sql import functions as F
    good = parsed.filter(F.col("_reason") == "").select(
        "_file", "_row", F.col("_v__ts").alias("_ts"), "_finer", *[F.col(f"_v_{c}").alias(c) for c in s.schema])
    # record: the row's number in its file (1-based, header excluded). A CSV file is read whole by
    # one task (multiLine), so its rows are numbered in order within the task's ids; a JSON file
    # read in one split likewise (the default split is 128 MB)
    record = (F.col("_row").bitwiseAND(F.lit((1 << 33) - 1)) + 1).cast("long")
    bad = parsed.filter(F.col("_reason") != "").select(
        F.col("_path").alias("file"), record.alias("record"), F.col("_why").alias("reason"),
        *[F.col(f"_raw_{c}").alias(c) for c in _declared(s)])
    return good, bad


def _union(frames):
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _parse_time(df, s, job):
    """(the event time in the job's ts_unit, rounded down; whether rounding dropped a part of it:
    ISO timestamps with milliseconds staged in seconds, counted so that stage can say so)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType, TimestampNTZType
    c = s.raw.time
    target_ns = ts_unit_ns(job.ts_unit)
    # whether a part was dropped is decided in whole numbers where the value is one: comparing the
    # decimal product with its floor loses the last digit to Spark's precision rules (a time
    # 1 us past a second, staged in s, was not counted)
    if s.raw.time_unit == "timestamp":
        dt = df.schema[c].dataType
        ts = F.col(c) if isinstance(dt, (TimestampType, TimestampNTZType)) else F.expr(f"try_to_timestamp(`{c}`)")
        micros = F.unix_micros(ts.cast("timestamp"))
        exact = micros.cast("decimal(38,9)") * F.lit(1000 / target_ns).cast("decimal(38,9)")
        finer = (F.pmod(micros, F.lit(target_ns // 1000)) != 0) if target_ns > 1000 else F.lit(False)
    else:
        num = ts_unit_ns(s.raw.time_unit)
        exact = F.expr(f"try_cast(`{c}` as decimal(38,9))") * F.lit(num / target_ns).cast("decimal(38,9)")
        whole = F.when(F.col(c).cast("string").rlike(r"^\s*-?[0-9]{1,18}\s*$"), F.expr(f"try_cast(`{c}` as bigint)"))
        finer = (F.when(whole.isNotNull(), F.pmod(whole, F.lit(target_ns // num)) != 0)
                 .otherwise(exact != F.floor(exact))) if num < target_ns else (exact != F.floor(exact))
    return F.floor(exact).cast("bigint"), F.coalesce(finer, F.lit(False))


def _parse_col(df, c, fd, tname):
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType
    dt = df.schema[c].dataType
    t = str(tname).strip().lower()
    if t in _INT:
        v = F.expr(f"try_cast(`{c}` as {_INT[t]})")
        if t.startswith("uint"):
            hi = _UMAX.get(t)
            ok = (v >= 0) if hi is None else ((v >= 0) & (v <= hi))
            v = F.when(ok, v)
        return v
    if t in ("float32", "float64"):
        return F.expr(f"try_cast(`{c}` as {'float' if t == 'float32' else 'double'})")
    if t == "bool":
        return F.expr(f"try_cast(`{c}` as boolean)")
    if is_string(t):   # kept as text; a NUL would be lost as the padding of the fixed-width column
        v = F.col(c).cast(StringType())
        return F.when(F.instr(v, "\u0000") == 0, v)
    width = fd.itemsize
    if fd.shape:   # arrays: binary of exactly the array's size (base64 text in CSV/JSON)
        b = F.col(c) if isinstance(dt, BinaryType) else F.unbase64(F.col(c))
        return F.when(F.length(b) == width, b)
    b = F.col(c) if isinstance(dt, BinaryType) else F.encode(F.col(c).cast(StringType()), "UTF-8")
    return F.when(F.length(b) <= width, b)


def _as_union_row(good, i, job):
    """One row shape for every stream: _stream, _ts, _file, _row, and a struct per stream."""
    from pyspark.sql import functions as F
    cols = [F.lit(i).alias("_stream"), "_ts", "_finer", "_file", "_row"]
    for j, s in enumerate(job.streams):
        if j == i:
            cols.append(F.struct(*[F.col(c) for c in s.schema]).alias(f"_p{j}"))
        else:
            cols.append(F.lit(None).cast(_struct_type(good, s, j, job)).alias(f"_p{j}"))
    return good.select(*cols)


def _struct_type(good, s, j, job):
    from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DoubleType, FloatType, IntegerType,
                                   LongType, ShortType, StringType, StructField, StructType)
    m = {"tinyint": ByteType(), "smallint": ShortType(), "int": IntegerType(), "bigint": LongType()}
    fields = []
    for c, t in s.schema.items():
        t = str(t).strip().lower()
        if t in _INT:
            dt = m[_INT[t]]
        elif t == "float32":
            dt = FloatType()
        elif t == "float64":
            dt = DoubleType()
        elif t == "bool":
            dt = BooleanType()
        elif is_string(t):
            dt = StringType()
        else:
            dt = BinaryType()
        fields.append(StructField(c, dt))
    return StructType(fields)
