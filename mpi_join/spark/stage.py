"""Staging: raw input (CSV, JSON lines, Parquet) -> the staged layout (README "Staged input").

For each stream: read every raw file (checking that each has the declared columns, with the
same types as the stream's first file), parse the event time into ts (job's ts unit) and each
column into its declared type, send rows that cannot be parsed (null or unparseable event time
or column) to <staged>/_quarantine/<stream>/ with the reason, order the union of the streams by
(event time, stream, file, row), and number it with a dense global seq. The seq is assigned in
parallel: rows are range-partitioned by the sort, each partition is counted, and a row's seq is
its partition's offset plus its position in the partition.
"""
import dataclasses
import time
import json

from ..errors import InputError, JobError
from ..units import ts_unit_ns
from . import fs

_INT = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
        "uint8": "smallint", "uint16": "int", "uint32": "bigint", "uint64": "bigint"}
_UMAX = {"uint8": 255, "uint16": 65535, "uint32": 4294967295}


def stage(spark, job, out=None, progress=print, overwrite=False, force=False):
    """Stage every stream of `job` into `out` (default: the job's [input] staged). Returns the manifest.

    `out` is replaced stream by stream, so it must be a staged directory already (it holds a
    _manifest.json), empty, or absent; anything else is refused unless `overwrite`. It must not
    overlap a stream's raw input.

    Staging is skipped when `out` already holds this input staged with these settings (time
    unit, schemas, raw sources) from raw files unchanged since (names, sizes, modification
    times), unless `force`. Each phase reports its time."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    out = fs.qualify(out or job.staged)
    for s in job.streams:
        if s.raw is not None and fs.overlap(out, fs.qualify(s.raw.path)):
            raise InputError(f"{out}: the staged directory overlaps the raw input of stream '{s.name}' "
                             f"({s.raw.path}); stage into a directory of its own")
    if (fs.exists(spark, out) and fs.list_files(spark, out) and not fs.exists(spark, f"{out}/_manifest.json")
            and not overwrite):
        raise InputError(f"{out}: exists, is not empty and is not a staged directory (no _manifest.json); "
                         f"choose another [input] staged, or pass --overwrite to replace its stream folders")
    t0 = time.perf_counter()
    frames, quarantined, sources = [], {}, {}
    for s in job.streams:
        if s.raw is None:
            raise JobError(f"{job.path}: streams.{s.name}.raw: required to stage (path, format, time, time_unit)")
        files = fs.list_files(spark, s.raw.path)
        if not files:
            raise InputError(f"{s.raw.path}: no input files for stream '{s.name}'")
        sources[s.name] = files
    staging = {"settings": {"ts_unit": job.ts_unit,
                            "streams": [[s.name, dict(s.schema), dataclasses.asdict(s.raw)] for s in job.streams]},
               "inputs": {k: fs.file_stats(spark, v) for k, v in sources.items()}}
    old = fs.read_text(spark, f"{out}/_manifest.json")
    if old and not force and json.loads(old).get("staging") == staging:
        progress(f"stage: {out} is up to date (same settings, raw files unchanged); --force stages again")
        return dict(json.loads(old), up_to_date=True)
    for i, s in enumerate(job.streams):
        files = sources[s.name]
        progress(f"stage: stream {s.name}: reading {len(files)} file(s) from {s.raw.path}")
        raw = _read_stream(spark, s, files)
        good, bad = _parse(raw, s, job)
        nbad = bad.count()
        quarantined[s.name] = nbad
        qpath = f"{out}/_quarantine/{s.name}"
        fs.delete(spark, qpath)
        if nbad:
            bad.write.mode("overwrite").parquet(qpath)
            progress(f"stage: stream {s.name}: {nbad:,} row(s) quarantined to {qpath}")
        frames.append(_as_union_row(good, i, job))
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    ordered = (union.orderBy("_ts", "_stream", "_file", "_row")
               .withColumn("_pid", F.spark_partition_id())
               .withColumn("_mid", F.monotonically_increasing_id())
               .persist(StorageLevel.MEMORY_AND_DISK))
    counts = dict(ordered.groupBy("_pid").count().collect())
    offsets, acc = {}, 0
    for pid in sorted(counts):
        offsets[pid] = acc
        acc += counts[pid]
    off = F.create_map(*[x for pid, o in offsets.items() for x in (F.lit(pid), F.lit(o))]) if offsets else None
    seq = (off[F.col("_pid")] + (F.col("_mid") - F.shiftleft(F.col("_pid").cast("bigint"), 33))) if off is not None else F.lit(0)
    numbered = ordered.withColumn("seq", seq.cast("bigint"))
    progress(f"stage: read, parsed and ordered {acc:,} tuples ({time.perf_counter() - t0:.1f} s)")
    t1 = time.perf_counter()
    man = {"format": "mpi-join-staged/1", "ts_unit": job.ts_unit, "streams": {}, "total": int(acc),
           "quarantined": quarantined, "sources": sources, "staging": staging}
    for i, s in enumerate(job.streams):
        cols = [F.col("seq"), F.col("_ts").alias("ts")] + [F.col(f"_p{i}.{c}").alias(c) for c in s.schema]
        part = numbered.filter(F.col("_stream") == i).select(*cols)
        part.sortWithinPartitions("seq").write.mode("overwrite").parquet(f"{out}/{s.name}")
        st = part.agg(F.count("*").alias("n"), F.min("ts").alias("lo"), F.max("ts").alias("hi")).collect()[0]
        man["streams"][s.name] = {"count": int(st["n"]), "ts_min": st["lo"], "ts_max": st["hi"],
                                  "schema": {"seq": "int64", "ts": "int64", **dict(s.schema)}}
        progress(f"stage: stream {s.name}: {st['n']:,} tuples -> {out}/{s.name}")
    ordered.unpersist()
    fs.write_text(spark, f"{out}/_manifest.json", json.dumps(man, indent=2))
    progress(f"stage: wrote {acc:,} tuples ({time.perf_counter() - t1:.1f} s; {time.perf_counter() - t0:.1f} s in all)")
    return man


def _declared(s):
    return [s.raw.time] + list(s.schema)


def _read_stream(spark, s, files):
    """Read each file, check its columns against the stream and its first file, union them."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType
    want = _declared(s)
    first_types, frames = None, []
    for k, f in enumerate(files):
        if s.raw.format == "csv":
            header = spark.read.option("header", s.raw.header).option("sep", s.raw.delimiter).csv(f).columns
            if not s.raw.header:
                header = want[:len(header)]
            schema = StructType([StructField(c, StringType()) for c in header])
            # an empty field is an empty string (valid for charN, unparseable for numbers); \\N is null
            df = (spark.read.option("header", s.raw.header).option("sep", s.raw.delimiter)
                  .option("nullValue", "\\N").option("emptyValue", "")
                  .option("mode", "PERMISSIVE").schema(schema).csv(f))
        elif s.raw.format == "json":
            df = spark.read.json(f)
        else:
            df = spark.read.parquet(f)
        types = {fld.name: fld.dataType for fld in df.schema.fields}
        for c in want:
            if c not in types:
                raise InputError(f"{f}: column '{c}' of stream '{s.name}' is missing (file has: {', '.join(types) or 'no columns'})")
        if s.raw.format != "csv":
            if first_types is None:
                first_types = {c: types[c] for c in want}
            for c in want:
                if types[c] != first_types[c] and not _both_null_type(types[c], first_types[c]):
                    raise InputError(f"{f}: column '{c}' has type {types[c].simpleString()}, but {files[0]} "
                                     f"has {first_types[c].simpleString()} (files of stream '{s.name}' must agree)")
            if s.raw.format == "json":   # re-read as text so that every value is parsed the same way
                df = spark.read.schema(StructType([StructField(c, StringType()) for c in want])).json(f)
        frames.append(df.select(*want).withColumn("_file", F.lit(k)).withColumn("_row", F.monotonically_increasing_id()))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _both_null_type(a, b):
    from pyspark.sql.types import NullType
    return isinstance(a, NullType) or isinstance(b, NullType)


def _parse(df, s, job):
    """(parsed rows, quarantined rows with a reason) for one stream."""
    from pyspark.sql import functions as F
    parsed = {"_ts": _parse_time(df, s, job)}
    for c, t in s.schema.items():
        parsed[c] = _parse_col(df, c, s.dtype.fields[c][0], t)
    reason = F.concat_ws(", ", *[F.when(v.isNull(), F.lit(("event time " + s.raw.time) if k == "_ts" else k))
                                 for k, v in parsed.items()])
    tagged = df.withColumn("_reason", reason)
    good = tagged.filter(F.col("_reason") == "").select("_file", "_row", *[v.alias(k) for k, v in parsed.items()])
    bad = tagged.filter(F.col("_reason") != "").select(
        *[F.col(c).cast("string").alias(c) for c in _declared(s)], F.col("_reason").alias("reason"),
        F.col("_file").alias("file_index"), F.col("_row").alias("row_id"))
    return good, bad


def _parse_time(df, s, job):
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType, TimestampNTZType
    c = s.raw.time
    target_ns = ts_unit_ns(job.ts_unit)
    if s.raw.time_unit == "timestamp":
        dt = df.schema[c].dataType
        ts = F.col(c) if isinstance(dt, (TimestampType, TimestampNTZType)) else F.expr(f"try_to_timestamp(`{c}`)")
        micros = F.unix_micros(ts.cast("timestamp"))
        return F.floor(micros.cast("decimal(38,9)") * F.lit(1000 / target_ns).cast("decimal(38,9)")).cast("bigint")
    factor = ts_unit_ns(s.raw.time_unit) / target_ns
    v = F.expr(f"try_cast(`{c}` as decimal(38,9))")
    return F.floor(v * F.lit(factor).cast("decimal(38,9)")).cast("bigint")


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
    width = fd.itemsize
    if fd.shape:   # arrays: binary of exactly the array's size (base64 text in CSV/JSON)
        b = F.col(c) if isinstance(dt, BinaryType) else F.unbase64(F.col(c))
        return F.when(F.length(b) == width, b)
    b = F.col(c) if isinstance(dt, BinaryType) else F.encode(F.col(c).cast(StringType()), "UTF-8")
    return F.when(F.length(b) <= width, b)


def _as_union_row(good, i, job):
    """One row shape for every stream: _stream, _ts, _file, _row, and a struct per stream."""
    from pyspark.sql import functions as F
    cols = [F.lit(i).alias("_stream"), "_ts", "_file", "_row"]
    for j, s in enumerate(job.streams):
        if j == i:
            cols.append(F.struct(*[F.col(c) for c in s.schema]).alias(f"_p{j}"))
        else:
            cols.append(F.lit(None).cast(_struct_type(good, s, j, job)).alias(f"_p{j}"))
    return good.select(*cols)


def _struct_type(good, s, j, job):
    from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DoubleType, FloatType, IntegerType,
                                   LongType, ShortType, StructField, StructType)
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
        else:
            dt = BinaryType()
        fields.append(StructField(c, dt))
    return StructType(fields)
