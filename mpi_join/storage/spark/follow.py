"""Live staging (README "Live streams"): `mpi-join stage --follow JOB`.

Landing directories: the stager lists them itself and reads the files it has not read yet, a
clean CSV file with Arrow in this process and any other with Spark exactly as `stage` reads it
(Reader; Spark starts when a file first needs it). A job with a stream source (a socket, a named
Spark source) runs one Spark Structured Streaming query for all streams instead (Packed), whose
file source lists the landing directories and whose checkpoint (in <staged>/_spark) remembers
what was read. Each batch is committed to the staged log (staged_log.py), which holds rows back
until the event-time watermark passes them, numbers them, quarantines late rows and commits
atomically, recording the files read; a stager killed at any point and started again continues
without losing or repeating a row.
"""
import os
import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import InputError, JobError
from ...schema import SEQ, from_arrow
from ..kafka_source import KafkaInputs, options as kafka_options, check as kafka_check, is_kafka
from ..staged_log import LOG, LogWriter, waiting_dtype
from .. import paths
from .stage import _declared, _settings, _tag, _union, _utf8, csv_options
from . import fs

SPARK_DIR = "_spark"
SOCKET = "socket://"


def settings(job):
    """What a log is started with; a restart with other settings is refused (staged_log.LogWriter)."""
    return {"stage": _settings(job), "allowed_lateness": job.allowed_lateness}


def socket_address(s):
    """(host, port) of a socket source (raw.path "socket://HOST:PORT"), or None."""
    if s.raw.source is not None or not s.raw.path.startswith(SOCKET):
        return None
    host, _, port = s.raw.path[len(SOCKET):].rstrip("/").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise JobError(f"streams.{s.name}.raw.path: {s.raw.path}: expected socket://HOST:PORT")
    if s.raw.format != "csv":
        raise JobError(f"streams.{s.name}.raw.format: a socket source carries CSV lines (no header), got "
                       f"{s.raw.format!r}")
    return host, int(port)


def landing_dir(s):
    """Stream `s`'s landing directory (its raw path): a local directory, or a Hadoop URI
    (hdfs://...), which Spark's file source watches (remote()); a socket source has none (None)."""
    if socket_address(s) is not None or s.raw.source is not None:
        return None
    p = s.raw.path[len("file://"):] if s.raw.path.startswith("file://") else s.raw.path
    if "://" in p:
        return p.rstrip("/")
    if os.path.exists(p) and not os.path.isdir(p):
        raise InputError(f"{p}: the landing directory of stream '{s.name}' is a file, not a directory (live staging "
                         f"reads the files that arrive in a directory; point streams.{s.name}.raw.path at one)")
    if not os.path.isdir(p):
        raise InputError(f"{p}: the landing directory of stream '{s.name}' does not exist (live staging reads the "
                         f"files that arrive in a directory; create it, or point streams.{s.name}.raw.path at one)")
    return os.path.abspath(p)


def remote(path):
    """Is a landing directory or file a Hadoop URI (read through Spark, never opened here)?"""
    return path is not None and not paths.local(path)


def _records_source(spark, s):
    """A stream of records (a socket, or any Spark streaming source): CSV lines in the declared
    order, or JSON objects, parsed in the streaming query itself."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType
    want = _declared(s)
    if s.raw.format == "parquet":
        raise JobError(f"streams.{s.name}.raw.format: a stream source carries CSV lines or JSON objects "
                       f"in its `value`, not Parquet")
    if s.raw.source is None:
        host, port = socket_address(s)
        # one partition: the lines stay in the order they came (the default deals them round
        # robin), so a line's record is its number on the socket
        reader = (spark.readStream.format("socket").option("host", host).option("port", port)
                  .option("numPartitions", 1))
    else:                # any Spark streaming source, its options passed as they are
        reader = spark.readStream.format(s.raw.source)
        for k, v in s.raw.options:
            reader = reader.option(k, v)
    value = F.col("value").cast("string")
    if s.raw.format == "json":
        schema = StructType([StructField(c, StringType()) for c in want])
        parsed = F.from_json(value, schema)
        df = reader.load().select(parsed.alias("r"), F.when(parsed.isNull(), value).alias("_corrupt")).select(
            "r.*", "_corrupt")
    else:
        ddl = ", ".join(f"`{c}` STRING" for c in want) + ", `_corrupt` STRING"
        df = reader.load().select(F.from_csv(value, ddl, {"sep": s.raw.delimiter, "mode": "PERMISSIVE",
                                                          "columnNameOfCorruptRecord": "_corrupt"}).alias("r")
                                  ).select("r.*")
    df = _utf8(df, want, "csv-text")
    return df.select(*want, F.col("_corrupt").isNotNull().alias("_bad_fields"), "_bad_utf8", F.lit(0).alias("_file"),
                     F.lit(s.raw.path).alias("_path"), F.lit(0).cast("long").alias("_row"))


# Spark's binaryFile source lists the files that land; only their names and sizes are selected
# from it, so Spark never loads their content
_LISTING = "path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY"


def _listing(spark, s, batch_bytes):
    """The files that land in stream `s`'s directory, as a stream of names: Spark's file source
    and its checkpoint say which are new, exactly once. A micro-batch takes files of at most
    `batch_bytes` in all (one file at least), so a backlog is worked off in bounded steps."""
    from pyspark.sql import functions as F
    r = spark.readStream.format("binaryFile").schema(_LISTING)
    if batch_bytes:
        r = r.option("maxBytesPerTrigger", int(batch_bytes))
    return r.load(landing_dir(s)).select(F.col("path").alias("_listed"), F.col("length").alias("_bytes"))


def header_of(s, path, spark=None):
    """A landing CSV file's column names, from its first line (the declared order when the job
    says its files have no header line); a remote file's through `spark`'s Hadoop client."""
    if not s.raw.header:
        return tuple(_declared(s))
    import csv
    if remote(path):
        line = (fs.first_line(spark, path) or "").rstrip("\r\n")      # (first_line drops a BOM)
    else:
        with open(path, encoding="ISO-8859-1", newline="") as f:
            line = f.readline().rstrip("\r\n")
        line = line[3:] if line.startswith("\xef\xbb\xbf") else line   # a UTF-8 byte order mark
    return tuple(c.strip() for c in next(csv.reader([line], delimiter=s.raw.delimiter), []))


def read_landed(spark, s, files, say=print):
    """Landed files of stream `s` (local paths) as one batch DataFrame of text columns, each file
    read as `stage` reads one: CSV columns matched by name in each file's own header, in any
    order; a declared column that a file lacks is null in its rows, which are quarantined."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType
    want, groups, frames = _declared(s), {}, []
    for f in files:
        groups.setdefault(header_of(s, f, spark) if s.raw.format == "csv" else None, []).append(f)
    for header, group in groups.items():
        uris = [f if remote(f) else f"file://{f}" for f in group]
        if s.raw.format == "csv":
            missing = [c for c in want if c not in header]
            if missing:
                say(f"stage --follow: warning: {uris[0]}"
                    f"{f' and {len(group) - 1} more' if len(group) > 1 else ''}: column '{missing[0]}' of stream "
                    f"'{s.name}' is missing (file has: {', '.join(header) or 'no columns'}); its rows are quarantined")
            # each header column read by position; a repeated name after its first is not used
            names = [c if c not in header[:i] else f"_dup{i}" for i, c in enumerate(header or ("_c0",))]
            schema = StructType([StructField(c, StringType()) for c in names] + [StructField("_corrupt", StringType())])
            df = csv_options(spark.read, s).schema(schema).csv(uris)
            df = df.select(*[F.col(f"`{c}`") if c in names else F.lit(None).cast("string").alias(c) for c in want],
                           "_corrupt")
            bad_fields = F.col("_corrupt").isNotNull()
        elif s.raw.format == "json":
            schema = StructType([StructField(c, StringType()) for c in want] +
                                [StructField("_corrupt_record", StringType())])
            df = spark.read.schema(schema).json(uris)
            bad_fields = F.lit(False)
        else:
            df = spark.read.parquet(*uris)
            df = df.select(*[F.col(f"`{c}`") if c in df.columns else F.lit(None).cast("string").alias(c)
                             for c in want])
            bad_fields = F.lit(False)
        df = _utf8(df, want, s.raw.format)
        frames.append(df.select(*want, bad_fields.alias("_bad_fields"), "_bad_utf8", F.lit(0).alias("_file"),
                                F.input_file_name().alias("_path"), F.lit(0).cast("long").alias("_row")))
    return _union(frames)


def _empty(spark, s):
    """No rows, in the shape read_landed gives (for the packed rows' types)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType
    want = _declared(s)
    df = spark.createDataFrame([], StructType([StructField(c, StringType()) for c in want]))
    return df.select(*want, F.lit(False).alias("_bad_fields"), F.lit("").alias("_bad_utf8"), F.lit(0).alias("_file"),
                     F.lit("").alias("_path"), F.lit(0).cast("long").alias("_row"))


def _pack(tagged, types=None):
    """Per stream tagged rows (None: none this time) as one DataFrame of packed rows: _stream,
    _path, _reason, _why, and per stream a struct _p{i} of its parsed (_v_*) and raw (_raw_*)
    columns, null in other streams' rows. Returns (it, the structs' types)."""
    from pyspark.sql import functions as F
    structs = []
    for t in tagged:
        if t is None:
            structs.append(None)
            continue
        bad = F.col("_reason") != ""
        # the raw text travels only with rows that go to the quarantine (a good row's is not needed)
        structs.append(F.struct(*[F.col(c) for c in t.columns if c.startswith("_v_")],
                                *[F.when(bad, F.col(c)).alias(c) for c in t.columns if c.startswith("_raw_")]))
    types = types or [t.select(st.alias("x")).schema["x"].dataType for t, st in zip(tagged, structs)]
    frames = [t.select(F.lit(i).alias("_stream"), "_path", "_reason",
                       F.when(F.col("_reason") != "", F.col("_why")).alias("_why"),
                       *[(structs[i] if j == i else F.lit(None).cast(types[j])).alias(f"_p{j}")
                         for j in range(len(tagged))])
              for i, t in enumerate(tagged) if t is not None]
    return _union(frames), types


class Reader:
    """Reads landed files into waiting rows: a CSV file whose every value Arrow reads as Spark
    does in this process (fast_csv.py), any other by Spark as `stage` reads it (read_landed).
    `spark`: the session, or a function that starts one, called only when a file needs it."""

    def __init__(self, spark, job, types=None):
        """`types`: the streams' packed column types where the caller has them (else made when needed)."""
        self.job, self._spark, self._types = job, spark, types
        self._warming, self._warm_error = None, None

    def warm(self, say):
        """Start the session now, on a thread of its own, so that a file that needs Spark later
        finds its JVM up, and the fast path's batches go on meanwhile (`--spark-start now`)."""
        if not callable(self._spark) or self._warming is not None:
            return
        start, t0 = self._spark, time.perf_counter()

        def run():
            try:
                self._spark = start()
                say(f"stage --follow: Spark's session is up ({time.perf_counter() - t0:.1f} s), for files the "
                    f"fast path cannot read")
            except BaseException as e:  # noqa: BLE001 - raised where the session is needed
                self._warm_error = e
        self._warming = threading.Thread(target=run, name="spark-start", daemon=True)
        self._warming.start()

    def spark(self):
        if self._warming is not None:
            self._warming.join()
            if self._warm_error is not None:
                raise self._warm_error
        if callable(self._spark):
            self._spark = self._spark()
        return self._spark

    def types(self):
        """The packed rows' struct types, from the same parse with no rows."""
        if self._types is None:
            self._types = _pack([_tag(_empty(self.spark(), s), s, self.job) for s in self.job.streams])[1]
        return self._types

    def read(self, per_stream, say, records=None):
        """`per_stream`: each stream's landed files (local paths); `records`: packed rows a
        stream source delivered (an Arrow table with _mid) or None. Returns (per stream waiting
        rows, their sources, per stream quarantined rows or None; files read by Arrow). A file
        nothing can be parsed from (junk, a damaged Parquet file, a CSV header naming none of the
        declared columns) is quarantined whole, never fatal (unreadable)."""
        from .. import fast_csv
        tables = [records] if records is not None and records.num_rows else []
        fast, fast_paths, spark_files = [[] for _ in self.job.streams], [], []
        whole = [[] for _ in self.job.streams]
        for i, s in enumerate(self.job.streams):
            mine = []
            for f in per_stream[i]:
                header = header_of(s, f, self.spark() if remote(f) else None) if s.raw.format == "csv" else None
                why = unreadable(s, f, header)
                if why is not None:
                    whole[i].append(whole_file(s, f, why, say, self.spark() if remote(f) else None))
                    continue
                got = fast_csv.read(s, f, header, _declared(s), waiting_dtype(s), self.job.ts_unit) \
                    if (header is not None or s.raw.format == "json") and not remote(f) else None
                if got is None:
                    mine.append(f)
                else:
                    rows, refused, _ = got              # a row Spark would refuse: quarantined by itself
                    rows["_src"] = len(fast_paths)
                    fast_paths.append(fast_csv.plain_uri(f))
                    fast[i].append(rows)
                    if refused is not None:
                        whole[i].append(refused)
            spark_files.append(mine)
        if any(spark_files):
            try:
                tables.append(self._spark_read(spark_files, say))
            except Exception as e:  # noqa: BLE001 - a file Spark cannot read: found alone, quarantined
                if not _spark_error(e):
                    raise
                spark_files = self._readable_alone(spark_files, whole, say)
                if any(spark_files):
                    tables.append(self._spark_read(spark_files, say))
        t = (None if not tables else tables[0] if len(tables) == 1 else
             pa.concat_tables(tables, promote_options="permissive"))
        arrivals, paths, bad = (_split(t, self.job) if t is not None else
                                ([np.zeros(0, waiting_dtype(s)) for s in self.job.streams], [], None))
        for i, s in enumerate(self.job.streams):      # Arrow's files after Spark's sources
            for rows in fast[i]:
                rows["_src"] += len(paths)
            arrivals[i] = np.concatenate([arrivals[i]] + fast[i]) if fast[i] else arrivals[i]
        if any(whole):
            bad = bad or [None] * len(self.job.streams)
            bad = [pa.concat_tables(([b] if b is not None else []) + w, promote_options="permissive") if w else b
                   for b, w in zip(bad, whole)]
        return arrivals, paths + fast_paths, bad, len(fast_paths)

    def _spark_read(self, per_stream, say):
        from pyspark.sql import functions as F
        tagged = [_tag(read_landed(self.spark(), s, files, say), s, self.job) if files else None
                  for s, files in zip(self.job.streams, per_stream)]
        packed, _ = _pack(tagged, self.types())
        return packed.withColumn("_mid", F.monotonically_increasing_id()).toArrow()

    def _readable_alone(self, per_stream, whole, say):
        """The files of `per_stream` that Spark reads one at a time; each one it cannot read goes
        to `whole` as unreadable, with the first line of Spark's error."""
        keep = []
        for i, files in enumerate(per_stream):
            ok = []
            for f in files:
                one = [[f] if k == i else [] for k in range(len(per_stream))]
                try:
                    self._spark_read(one, say)
                    ok.append(f)
                except Exception as e:  # noqa: BLE001 - this file is the one
                    if not _spark_error(e):
                        raise
                    whole[i].append(whole_file(self.job.streams[i], f, f"unreadable: {_first_line(e)[:200]}", say,
                                               self.spark()))
            keep.append(ok)
        return keep


def _spark_error(e):
    """Is `e` Spark's own error about what it read (not an interrupt or a stopped JVM)?"""
    from pyspark.errors import PySparkException
    try:
        from py4j.protocol import Py4JJavaError
    except ImportError:          # pragma: no cover - py4j comes with pyspark
        Py4JJavaError = PySparkException
    return isinstance(e, (PySparkException, Py4JJavaError)) and "SparkContext was shut down" not in str(e)


def unreadable(s, path, header=None):
    """Why nothing can be parsed from landing file `path` of stream `s` (a CSV file's `header`:
    its column names), or None when it can be read: a Parquet file whose footer cannot be read, a
    CSV file whose header names none of the declared columns (Spark refuses to read such a file:
    its query would see only corrupt records)."""
    if s.raw.format == "parquet" and not remote(path):    # a remote one: Spark says (_readable_alone)
        import pyarrow.parquet as pq
        try:
            pq.read_metadata(path)
        except Exception as e:  # noqa: BLE001 - any damage
            return f"not a readable Parquet file ({str(e).splitlines()[0][:120] if str(e) else type(e).__name__})"
        return None
    if s.raw.format == "csv" and s.raw.header:
        if not any(c in header for c in _declared(s)):
            shown = ascii(", ".join(header)[:60]) if header else "no columns"
            return f"its header names none of the columns of stream '{s.name}' ({', '.join(_declared(s))}; it has {shown})"
    return None


def whole_file(s, path, why, say, spark=None):
    """A landing file quarantined whole: one record per line (a CSV header left out; a binary
    file: one record of its first bytes), the reason on each, in the shape of the quarantined
    rows (file, record, reason, the declared columns, here null) plus the line's `text`."""
    from pathlib import Path
    if remote(path):
        data = (fs.read_text(spark, path) or "").encode()
    else:
        with open(path, "rb") as f:
            data = f.read(64 << 20)
    text = data.decode("utf-8", "replace")
    if s.raw.format == "parquet" or "\x00" in text:
        lines = [data[:200].hex()]
    else:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        lines = lines[1:] if s.raw.format == "csv" and s.raw.header else lines
    n, uri = len(lines), (path if remote(path) else Path(path).as_uri())
    say(f"stage --follow: warning: {path}: {why}; its {n:,} record(s) are quarantined")
    return pa.table({"file": pa.array([uri] * n, pa.string()), "record": pa.array(range(1, n + 1), pa.int64()),
                     "reason": pa.array([why] * n, pa.string()),
                     **{c: pa.nulls(n, pa.string()) for c in _declared(s)}, "text": pa.array(lines, pa.string())})


class Packed:
    """The stager's streaming query, for a job with a stream source (a socket, a named Spark
    source): a landing directory delivers the names of new files (read in the micro-batch by
    Reader, so each file's header is its own); a stream source delivers records, parsed in the
    query."""

    def __init__(self, spark, job, batch_bytes=None):
        from pyspark.sql import functions as F
        self.spark, self.job = spark, job
        self.files = [landing_dir(s) is not None for s in job.streams]
        shape, self.types = _pack([_tag(_empty(spark, s), s, job) for s in job.streams])
        self.reader = Reader(spark, job, self.types)
        rows = shape.schema
        frames = []
        for i, s in enumerate(job.streams):
            if self.files[i]:
                frames.append(_listing(spark, s, batch_bytes).select(
                    F.lit(i).alias("_stream"), "_listed", "_bytes", F.lit(None).cast(rows).alias("_rows")))
            else:
                packed, _ = _pack([_tag(_records_source(spark, s), s, job) if j == i else None
                                   for j in range(len(job.streams))], self.types)
                frames.append(packed.select(F.lit(i).alias("_stream"), F.lit(None).cast("string").alias("_listed"),
                                            F.lit(None).cast("long").alias("_bytes"),
                                            F.struct(*[F.col(c) for c in rows.names]).alias("_rows")))
        self.query = _union(frames)

    def batch(self, df, say):
        """One micro-batch -> (per stream waiting rows, their sources, per stream quarantined
        rows or None (as _split gives them); what it read: files, bytes, files read by Arrow)."""
        from pyspark.sql import functions as F
        from .. import landed
        listed = df.where(F.col("_listed").isNotNull()).select("_stream", "_listed", "_bytes").toArrow()
        rec = None
        if not all(self.files):
            rec = df.where(F.col("_listed").isNull()).select("_rows.*").withColumn(
                "_mid", F.monotonically_increasing_id()).toArrow()
        streams, names = listed.column("_stream").to_pylist(), listed.column("_listed").to_pylist()
        per = [sorted(landed.local_path(p) or p for p, k in zip(names, streams) if k == i)
               for i in range(len(self.job.streams))]
        arrivals, paths, bad, arrow = self.reader.read(per, say, rec)
        stats = {"files": len(names), "bytes": int(sum(x or 0 for x in listed.column("_bytes").to_pylist())),
                 "arrow_files": arrow}
        return arrivals, paths, bad, stats


def _records(files, mid):
    """Each row's record number in its file (1-based), from the order Spark read them in."""
    n = len(mid)
    if not n:
        return np.zeros(0, np.int64)
    o = np.lexsort((mid, files))
    sp = files[o]
    start = np.r_[True, sp[1:] != sp[:-1]]
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    rec = np.empty(n, np.int64)
    rec[o] = np.arange(n) - first + 1
    return rec


def _split(t, job):
    """One collected micro-batch -> (per stream waiting rows, the batch's source paths, per stream
    quarantined rows as Arrow tables or None)."""
    stream = t.column("_stream").to_numpy(zero_copy_only=False)
    pathcol = t.column("_path").to_pylist()
    paths = sorted(set(pathcol))
    where = {p: i for i, p in enumerate(paths)}
    pidx = np.array([where[p] for p in pathcol], np.int32)
    rec = _records(pidx, t.column("_mid").to_numpy(zero_copy_only=False))
    good_mask = np.array([r == "" for r in t.column("_reason").to_pylist()], bool)
    arrivals, bad = [], []
    for i, s in enumerate(job.streams):
        mine = stream == i
        g = np.nonzero(mine & good_mask)[0]
        sub = t.take(pa.array(g)).column(f"_p{i}")
        sub = pa.chunked_array([c for c in sub.chunks]) if sub.num_chunks else sub
        flat = {f.name: pc.struct_field(sub, f.name) for f in sub.type}
        cols = {SEQ: pa.array(np.zeros(len(g), np.int64)), "ts": flat["_v__ts"],
                **{c: flat[f"_v_{c}"] for c in s.schema}}
        rows = from_arrow(pa.table(cols), s.rows_dtype, f"stream '{s.name}'", s)
        w = np.zeros(len(g), waiting_dtype(s))
        for n in rows.dtype.names:
            w[n] = rows[n]
        w["_src"], w["_rec"] = pidx[g], rec[g]
        arrivals.append(w)
        b = np.nonzero(mine & ~good_mask)[0]
        if len(b):
            q = t.take(pa.array(b))
            raw = q.column(f"_p{i}")
            bad.append(pa.table({"file": q.column("_path"), "record": pa.array(rec[b]), "reason": q.column("_why"),
                                 **{c: pc.struct_field(raw, f"_raw_{c}") for c in _declared(s)}}))
        else:
            bad.append(None)
    return arrivals, paths, bad


def clear(job, out):
    """Remove a log (or staged input) from `out`: the stream folders' part files, the quarantine,
    the log's folder and Spark's checkpoint, and the manifest. Only files inside `out`."""
    import shutil
    root = paths.real(out)
    for sub in [s.name for s in job.streams] + ["_quarantine", LOG, SPARK_DIR]:
        p = os.path.join(root, sub)
        paths.plain_dir(p, "a folder the log replaces")
        paths.inside(root, p)
        if os.path.isdir(p):
            shutil.rmtree(p)
    m = os.path.join(root, "_manifest.json")
    if os.path.lexists(m):
        paths.remove_file(root, m)


BATCH_BYTES = 64 << 20


def follow(spark, job, out, until=None, trigger="500 milliseconds", say=print, force=False, batch_bytes=BATCH_BYTES,
           drain=True, spark_start="needed"):
    """Stage the landing directories of `job` into the staged log at `out` until `until` ("end":
    the files present now; an event time in the job's unit; None: until Ctrl-C or SIGTERM), then
    write the end marker. Returns the log's manifest. The caller holds `out`'s lock
    (staged_log.hold_staged), taken before the JVM started."""
    if not paths.local(out):
        raise JobError(f"{out}: a staged log is written on a local or mounted filesystem (its commits are atomic "
                       f"renames)")
    out = paths.real(out[len("file://"):] if out.startswith("file://") else out)
    # the stager handles SIGINT and SIGTERM itself (a drain): Arrow must not cancel a read it is
    # in the middle of on the same signal (ArrowCancelled ended the stager instead of draining)
    pa.enable_signal_handlers(False)
    for s in job.streams:
        if s.raw is None:
            raise JobError(f"{job.path}: streams.{s.name}.raw: required to stage (path, format, time, time_unit)")
        d = landing_dir(s)
        if d and not remote(d) and (paths.contains(out, d) or paths.contains(d, out)):
            raise InputError(f"{out}: the staged log overlaps the landing directory of stream '{s.name}'; "
                             f"stage into a directory of its own")
    os.makedirs(out, exist_ok=True)
    return _follow(spark, job, out, until, trigger, say, force, batch_bytes, drain, spark_start)


def _follow(spark, job, out, until, trigger, say, force, batch_bytes, drain, spark_start="needed"):
    from ..staged_log import until_ts
    if force:
        clear(job, out)
    cap = None if until in (None, "end") else until_ts(until, job)
    dirs = [landing_dir(s) for s in job.streams]
    if any(remote(d) for d in dirs) and any(is_kafka(s) for s in job.streams):
        raise JobError(f"{job.path}: a landing directory on {next(d for d in dirs if remote(d))} and a Kafka topic "
                       f"in one live job: not supported (stage them as two jobs)")
    if any(is_kafka(s) for s in job.streams):
        kafka_check(job)               # an unreachable broker or a missing topic: before a log is started
    writer = LogWriter(job, out, job.allowed_lateness, settings(job), say)
    if writer.log["batches"]:
        say(f"stage --follow: continuing the log in {out} after batch {writer.log['batches'] - 1} "
            f"(seq {writer.man['total']:,}, {sum(len(p) for p in writer.pending):,} rows waiting)")
    if all((d is not None and not remote(d)) or is_kafka(s) for d, s in zip(dirs, job.streams)):
        return _follow_dirs(spark, job, out, writer, cap, until, float(trigger.split()[0]), batch_bytes, drain, say,
                            spark_start)
    spark = spark() if callable(spark) else spark
    lock, state = threading.Lock(), {"stopping": False, "signal": None, "error": None}

    def on_batch(df, batch_id):
        with lock:
            if state["stopping"]:
                raise RuntimeError("the stager is stopping")
            try:
                t0, seen = time.perf_counter(), time.time_ns()
                arrivals, paths, bad, stats = packed.batch(df, say)
                e = writer.commit(batch_id, arrivals, paths, bad, until=cap, seen_ns=seen,
                                  timing={"read_ms": round((time.perf_counter() - t0) * 1e3, 1), **stats})
            except Exception as ex:  # noqa: BLE001 - reported by the main thread, one line
                state["error"] = ex
                raise
            if e is not None:
                _report(say, e, writer)

    packed = Packed(spark, job, batch_bytes)

    def start(now):
        w = packed.query.writeStream.foreachBatch(on_batch).option("checkpointLocation", os.path.join(out, SPARK_DIR))
        return (w.trigger(availableNow=True) if now else w.trigger(processingTime=trigger)).start()

    state["signals"] = 0
    old = _catch(state)
    try:
        q = start(until == "end")
        say(_watching(job, out, until, cap, drain))
        _watch(q, state, lock, writer, cap, say, out)
        if state["signal"] is not None and drain and until != "end" and state["error"] is None \
                and state["signals"] < 2:
            # the files that landed before the signal are staged too (an availableNow query on the
            # same checkpoint: what the stopped query had not read, each once); a second signal
            # stops at once and leaves the log open
            say(_draining(state["signal"]))
            state["stopping"], seen = False, state["signals"]
            _watch(start(True), state, lock, writer, cap, say, out, until_signal=seen)
            if state["signals"] > seen:
                drain = False
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if state["error"] is not None:
        e = state["error"]
        raise e if isinstance(e, JobError) else InputError(f"{out}: a micro-batch failed: {_first_line(e)}")
    if state["failed"] is not None:
        raise InputError(f"{out}: the streaming query failed: {_first_line(state['failed'])}; the log stays open (a "
                         f"restart continues it)")
    if state["signal"] is not None and (not drain or state["signals"] > 1):
        return _left_open(writer, say, state["signal"])
    return _end(writer, say, state["signal"], until, cap)


def landed_files(job, done, only=None, notes=None):
    """[(mtime_ns, name, stream index, local path, bytes)] of the files in the landing
    directories not in `done` (their URIs) and, with `only`, in it; hidden names (`.`, `_`) are
    being written, by the producer contract. A symbolic link is followed (as `stage` at rest
    follows it); a subdirectory, a broken link or what is not a regular file is not read, said
    once through `notes` (a Notes) when given."""
    import stat as st_mode
    from pathlib import Path
    out = []
    for i, s in enumerate(job.streams):
        if landing_dir(s) is None:          # a Kafka topic: kafka_source.py
            continue
        with os.scandir(landing_dir(s)) as it:
            for e in it:
                if e.name.startswith((".", "_")):
                    continue
                uri = Path(e.path).as_uri()
                if uri in done or (only is not None and uri not in only):
                    continue
                try:
                    st = e.stat()                       # through a symbolic link
                except OSError:
                    notes and notes.once(e.path, "a broken symbolic link: not read")
                    continue
                if st_mode.S_ISDIR(st.st_mode):
                    notes and notes.once(e.path, "a subdirectory: the files in it are not read (only files directly "
                                                 "in a landing directory are)")
                    continue
                if not st_mode.S_ISREG(st.st_mode):
                    notes and notes.once(e.path, "not a regular file: not read")
                    continue
                out.append((st.st_mtime_ns, e.name, i, e.path, st.st_size))
    return sorted(out)


class Notes:
    """One warning line per landing path about something the stager does not read."""

    def __init__(self, say):
        self.say, self.said = say, set()

    def once(self, path, what):
        if (path, what) not in self.said:
            self.said.add((path, what))
            self.say(f"stage --follow: warning: {path}: {what}")


def _already_staged(job, landed, take, notes):
    """Which files of `take` not to read: an empty file (nothing to stage), or one whose bytes are
    a file's the log staged (`landed`, its record; renamed, hard-linked or copied under a new
    name, its rows would be staged twice), each said in one line. Returns ({URI: record} of
    those, {local path: record} of the others, to be read)."""
    from pathlib import Path
    from ..landed import record, staged_contents
    contents, skip, read = None, {}, {}
    for f in take:
        n = job.streams[f[2]].name
        rec = record(f[3], n)
        if rec is None:
            continue                                    # gone: the reader says so
        uri = Path(f[3]).as_uri()
        if rec["bytes"] == 0:
            notes.say(f"stage --follow: warning: {f[3]}: an empty file: nothing to stage")
        else:
            contents = staged_contents(landed) if contents is None else contents
            first = contents.get((n, rec["sha256"]))
            if first is None:
                contents[(n, rec["sha256"])] = uri      # a second copy in this batch is not read either
                read[f[3]] = rec
                continue
            notes.say(f"stage --follow: warning: {f[3]}: the same bytes as {first}, staged before (a rename, a link "
                      f"or a copy): not staged again")
        skip[uri] = rec
    return skip, read


def _follow_dirs(spark, job, out, writer, cap, until, every_s, batch_bytes, drain, say, spark_start="needed"):
    """Live staging of landing directories and Kafka topics, with no streaming query: the stager lists the
    directories itself every `every_s` and reads the files it has not read (oldest first, at
    most `batch_bytes` a batch, one file at least); the log records each file read in the same
    commit as its rows (log["consumed"]), so that a restart reads each exactly once. Spark
    starts only when a file needs it (Reader). Kafka topics are polled in the same rounds, their
    offsets committed with the rows they gave (kafka_source.py)."""
    reader = Reader(spark, job)
    if spark_start == "now" and any(landing_dir(s) is not None for s in job.streams):
        reader.warm(say)                # (Kafka records are parsed here, never by Spark)
    kafka = KafkaInputs(job, writer.log, say) if any(is_kafka(s) for s in job.streams) else None
    try:
        return _follow_loop(job, out, writer, cap, until, every_s, batch_bytes, drain, say, reader, kafka)
    finally:
        if kafka is not None:
            kafka.close()


def _follow_loop(job, out, writer, cap, until, every_s, batch_bytes, drain, say, reader, kafka):
    """_follow_dirs' loop: each round the new landing files and the Kafka records, one commit."""
    from pathlib import Path
    from ..landed import local_path
    done = set(writer.log.get("consumed") or []) | {Path(local_path(u)).as_uri() for u in writer.log["landed"]
                                                   if local_path(u)}
    state = {"signal": None, "signals": 0}
    old = _catch(state)
    say(_watching(job, out, until, cap, drain))
    only, look, stopped, notes, last_hold = None, 0.0, False, Notes(say), None
    try:
        ends = None                   # the Kafka offsets `--until end` and a drain stage up to
        if until == "end":
            only = {Path(f[3]).as_uri() for f in landed_files(job, done)}
            ends = kafka.ends() if kafka else None
        while True:
            t0 = time.monotonic()
            if state["signal"] is not None and only is None:
                if not drain or state["signals"] > 1:
                    stopped = True
                    break
                say(_draining(state["signal"]))
                only = {Path(f[3]).as_uri() for f in landed_files(job, done)}
                ends = kafka.ends() if kafka else None
            if state["signals"] > 1:
                stopped = True
                break
            new, take, size = landed_files(job, done, only, notes), [], 0
            for f in new:
                if take and size + f[4] > batch_bytes:
                    break
                take.append(f)
                size += f[4]
            skip, looked = _already_staged(job, writer.log["landed"], take, notes) if take else ({}, {})
            if skip:        # read, nothing to stage: recorded so that no restart reads them again
                writer.consume(skip)
                done.update(skip)
                take = [f for f in take if Path(f[3]).as_uri() not in skip]
                new = [f for f in new if Path(f[3]).as_uri() not in skip]
            seen, r0 = time.time_ns(), time.perf_counter()
            got = kafka.read(stop=ends) if kafka is not None else None
            held = kafka.hold() if kafka is not None else None
            if take or (got and got[3]) or (held != last_hold and any(len(p) for p in writer.pending)):
                arrivals, paths, bad, arrow = reader.read(
                    [[f[3] for f in take if f[2] == i] for i in range(len(job.streams))], say) if take else \
                    ([np.zeros(0, waiting_dtype(s)) for s in job.streams], [], None, 0)
                if got and got[3]:
                    arrivals, paths, bad = _merged((arrivals, paths, bad), got[:3])
                uris = [Path(f[3]).as_uri() for f in take]
                timing = {"read_ms": round((time.perf_counter() - r0) * 1e3, 1), "files": len(take), "bytes": size,
                          "arrow_files": arrow, **({"kafka_records": sum(len(a) for a in got[0]) if got else 0}
                                                   if kafka else {})}
                e = writer.commit(None, arrivals, paths, bad, until=cap, seen_ns=seen, consumed=uris, known=looked,
                                  timing=timing, kafka=kafka.state(held) if kafka is not None else None)
                last_hold = held
                done.update(uris)
                _report(say, e, writer)
            if time.monotonic() >= look:
                writer.quarantine_changed(say)
                look = time.monotonic() + 1.0
            wm = writer.log.get("watermark")
            if cap is not None and wm is not None and wm >= cap:
                break
            behind = kafka is not None and ends is not None and kafka.behind(ends)
            if only is not None and len(take) == len(new) and not behind:      # every file and record of the set
                break
            if len(take) < len(new) or (got and got[3]):           # a backlog: the next batch at once
                continue
            while time.monotonic() - t0 < every_s and state["signals"] == (0 if only is None else 1):
                time.sleep(0.02)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if stopped:
        return _left_open(writer, say, state["signal"])
    return _end(writer, say, state["signal"], until, cap)


def _merged(a, b):
    """Two reads' (per stream rows, sources, per stream bad rows or None) as one."""
    (ra, pa_, ba), (rb, pb, bb) = a, b
    rows = []
    for x, y in zip(ra, rb):
        y = y.copy()
        y["_src"] += len(pa_)
        rows.append(np.concatenate([x, y]) if len(x) else y)
    if ba is None or bb is None:
        bad = ba if bb is None else bb
    else:
        bad = [x if y is None else y if x is None else pa.concat_tables([x, y], promote_options="permissive")
               for x, y in zip(ba, bb)]
    return rows, pa_ + pb, bad


def _catch(state):
    """Count Ctrl-C and SIGTERM in `state` (the first one's number in "signal", how many in
    "signals") instead of dying; SIGUSR1 counts as two (stop at once, the log left open: how
    `live` gives up, where two SIGTERMs could come after a small drain had ended the log).
    Returns the handlers it replaced."""
    def on_signal(n, f):
        state["signals"] += 2 if n == signal.SIGUSR1 else 1
        state["signal"] = state["signal"] or n
    return {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}


def _watching(job, out, until, cap, drain):
    def where(s):
        if is_kafka(s):
            servers, topic, _ = kafka_options(s)
            return f"Kafka topic {topic!r} at {servers}"
        return landing_dir(s) or s.raw.path
    kafka = any(is_kafka(s) for s in job.streams)
    return (f"stage --follow: watching {', '.join(where(s) for s in job.streams)} -> {out}"
            + ((" (until the files and records present are staged)" if kafka else " (until the files present are staged)")
               if until == "end" else
               f" (until event time {cap})" if cap is not None else
               " (Ctrl-C or SIGTERM stages what has landed and ends the log)" if drain else
               " (Ctrl-C or SIGTERM stops, the log stays open)"))


def _draining(signum):
    return (f"stage --follow: {signal.Signals(signum).name}: draining (staging every file that has landed; a "
            f"second Ctrl-C or SIGTERM stops at once and leaves the log open)")


def _left_open(writer, say, signum):
    """Stopped without draining: the log stays open, to be continued by the next stager."""
    writer.quarantine_changed(say)
    say(f"stage --follow: stopped by {signal.Signals(signum).name} without draining; the log stays open after "
        f"batch {writer.log['batches'] - 1} (seq {writer.man['total']:,}); `stage --follow` continues it")
    return writer.man


def _end(writer, say, signum, until, cap):
    """Release what waits and write the end marker, saying why."""
    writer.quarantine_changed(say)       # a change since the last look, before the log ends
    reason = (f"stopped by {signal.Signals(signum).name}" if signum is not None else
              "the files present were staged" if until == "end" else f"event time {cap} reached")
    e = writer.end(reason, until=cap)
    _report(say, e, writer)
    say(f"stage --follow: the log ended ({reason}); {writer.man['total']:,} tuples in {writer.log['batches']} batch(es)"
        + (f"; {writer.log['ended']['beyond_until']:,} row(s) after event time {cap} not staged" if cap is not None
           and writer.log["ended"]["beyond_until"] else ""))
    return writer.man


def _watch(q, state, lock, writer, cap, say, out, until_signal=None):
    """Run query `q` until it finishes, fails, a signal comes (with `until_signal`: another
    signal than the `until_signal` seen so far) or the watermark reaches `cap`; then stop it
    (a micro-batch in flight commits first; none starts after). Landing files are looked at
    for changes about every second meanwhile."""
    look = 0.0
    state.setdefault("failed", None)
    try:
        while True:
            if time.monotonic() >= look:
                with lock:
                    writer.quarantine_changed(say)
                look = time.monotonic() + 1.0
            try:
                if not q.isActive:
                    break
                q.awaitTermination(0.25)
            except Exception:  # noqa: BLE001 - the JVM is gone (a SIGKILL to it)
                if state["signal"] is None:
                    raise
                break
            signalled = state["signals"] > until_signal if until_signal is not None else state["signal"] is not None
            if signalled or state["error"] is not None:
                break
            wm = writer.log.get("watermark")
            if cap is not None and wm is not None and wm >= cap:
                break
    finally:
        with lock:
            state["stopping"] = True
        try:
            state["failed"] = q.exception() if state["signal"] is None else None
            q.stop()
        except Exception:  # noqa: BLE001 - stopping a query whose JVM is gone
            pass


def _first_line(e):
    text = str(getattr(e, "desc", None) or e)
    return text.strip().splitlines()[0][:300] if text.strip() else type(e).__name__


def _as_time(ts, unit):
    """A watermark as the event time it is and as UTC ("1767225600000 (2026-01-01 00:00:00 UTC)")."""
    if ts is None:
        return "-"
    from ..input_warnings import human
    return f"{ts} ({human(ts, unit)} UTC)"


def _report(say, e, writer):
    st = e["streams"]
    late = sum(v["late"] for v in st.values())
    bad = sum(v["quarantined"] for v in st.values())
    say(f"stage --follow: batch {e['batch']}: +{e['seq'][1] - e['seq'][0]:,} tuples ("
        + ", ".join(f"{k} {v['rows']:,}" for k, v in st.items()) + f"), seq {e['seq'][1]:,}, watermark "
        f"{_as_time(e['watermark'], writer.job.ts_unit)}, {e['pending']:,} waiting"
        + (f", {late:,} late" if late else "") + (f", {bad:,} unparseable" if bad else ""))

