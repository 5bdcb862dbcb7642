"""Job files (TOML) -> typed, validated objects.

Everything is checked here, before any rank starts work; each error names the field.
"""
import os
import re
import tomllib
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import ConfigError, InputError
from .join.predicate import AsOf, Band, Equi, Interval, Predicate, Theta
from .storage.paths import check_layout, check_name, check_text, job_dirs
from .reads import with_reads
from .schema import INTEGER_KINDS, TS, rows_dtype, stream_dtype
from .units import TS_UNITS, ns_to_ts, parse_duration, parse_duration_ns, ts_unit_ns

# ranges of the job's numbers (README "The job file"); NaN and infinity are never accepted
MAX_COUNT_WINDOW = 1 << 40          # tuples
MAX_WINDOW_NS = 100 * 365 * 86_400 * 10**9   # 100 years
MAX_BATCH = 1 << 24
MAX_SOURCES = 64
MAX_INFLIGHT = 1024
MAX_RATE = 1e9                      # tuples/s per stream
MAX_INTERVAL_NS = 86_400 * 10**9    # flush interval, liveness timeout, overload, checkpoint interval: 1 day
MAX_KEEP = 1000


@dataclass(frozen=True)
class Window:
    """A stream's window: `time` (size in ts units), `count` (size in tuples) or `unbounded`."""
    kind: str
    size: int
    text: str

    def describe(self):
        return self.text


@dataclass(frozen=True)
class RawSource:
    """Where a stream's raw input is and how to read its event time (for `mpi-join stage`)."""
    path: str             # file, directory, glob, or URI (hdfs://, file://)
    format: str           # csv | json | parquet
    time: str             # the event-time column
    time_unit: str        # ns | us | ms | s (a number) or "timestamp"
    delimiter: str = ","
    header: bool = True
    source: str | None = None        # live only: a Spark streaming source by name (kafka, ...)
    options: tuple = ()              # ... and its options, passed as they are: ((key, value), ...)


@dataclass(frozen=True)
class Stream:
    name: str
    schema: dict
    dtype: np.dtype       # a rank's row (schema.stream_dtype): with the NULL flag when `null_flag`
    window: Window
    raw: RawSource | None = None
    nullable: tuple = ()  # columns the ranks read that may hold nulls (every other payload column may)
    reads: tuple = ()     # payload columns the ranks read: the predicate's, a strategy's (an aggregate's)
    filter: str | None = None   # its own condition ([predicate] filter, SQL's one-stream terms: join/filters.py)

    @property
    def null_flag(self):
        """Do this stream's rows carry the NULL flag (a column the ranks read may be null, or the
        stream has a filter: a row that fails it is flagged, and so meets no partner)?"""
        return bool(set(self.nullable) & set(self.reads)) or self.filter is not None

    @property
    def rows_dtype(self):
        """A staged row, as staging and the staged log hold it: the columns and their null flags."""
        return rows_dtype(self.dtype)


@dataclass(frozen=True)
class KafkaOut:
    """[output] kafka: the topic a run's committed results are produced to (storage/kafka_sink.py)."""
    servers: str
    topic: str
    format: str = "json"      # json | csv


@dataclass(frozen=True)
class Restart:
    """`mpi-join live`'s restart strategy for its stager and its run (live.py): at most
    `attempts` restarts in all, or, with `interval_ns`, within any such interval (Flink's
    fixed-delay and failure-rate strategies); `delay_ns` before each."""
    attempts: int = 3
    delay_ns: int = 2_000_000_000
    interval_ns: int | None = None


@dataclass(frozen=True)
class Checkpoint:
    """Consistent cuts of every rank's state, written to HDF5 (see checkpoint.py)."""
    dir: str
    every_tuples: int | None
    every_ns: int | None
    keep: int


@dataclass(frozen=True)
class Strategy:
    name: str
    params: dict


@dataclass(frozen=True)
class Run:
    batch_size: int
    flush_interval_ns: int
    rate: float | None        # tuples/s per stream; None = as fast as possible
    max_inflight: int
    progress: bool
    liveness_timeout_s: float = 30.0   # a rank or link silent this long aborts the job; 0: off
    overload_after_s: float = 2.0      # replay behind schedule this long: the run is overloaded
    stop_when_overloaded: bool = False  # an overloaded run stops with an error (a rate search's probe)
    sources: int = 1                   # ranks that read and route the input (graph.with_sources)
    part: int = 0                      # with several sources: tuples per part (source.py); 0: four row groups a stream
    sources_auto: bool = False         # run.sources = "auto" (the default): rank 0 sets `sources` from the
                                       # planner's model at start (ranks.py); 1 until then


@dataclass(frozen=True)
class Job:
    path: str
    name: str
    ts_unit: str
    staged: str
    output: str
    streams: tuple
    predicate: Predicate
    strategy: Strategy
    run: Run
    checkpoint: Checkpoint | None = None
    raw: dict = field(repr=False, compare=False, default=None)
    allowed_lateness: int = 0     # ts units a live stream's row may arrive behind the newest (staged_log.py)
    commit_every_ns: int = 1_000_000_000   # a followed run commits its results at least this often (commits.py)
    commit_rows: int = 1_000_000           # ... and after this many results
    idle_timeout_ns: int | None = None     # a live stream silent this long stops holding the watermark back
    restart: Restart = Restart()           # `mpi-join live`'s restart strategy ([live])
    kafka_out: KafkaOut | None = None      # [output] kafka: results produced to a topic, exactly once
    select: tuple = ()                     # [predicate] select: ((name, stream index, column), ...) payloads give

    @property
    def stream_names(self):
        return tuple(s.name for s in self.streams)

    def stream_index(self, name):
        return self.stream_names.index(name)

    def projection(self):
        """[(name, the column collect --with-payload names <stream>_<column>)] of [predicate]
        select (SQL's SELECT list) in its order, or None: every column (SELECT *)."""
        return [(n, f"{self.streams[i].name}_{c}") for n, i, c in self.select] or None


# Every key a job file may hold, by the table it is in (`streams.*` for each stream's table):
# the loader refuses any other, and `run --help` documents each one (tests/test_help.py).
# [strategy] holds `name` and the strategy's own parameters (`mpi-join strategies`).
JOB_KEYS = {
    "": ("job", "input", "output", "streams", "predicate", "strategy", "run", "checkpoint", "live"),
    "job": ("name", "ts_unit"),
    "input": ("staged", "allowed_lateness", "idle_timeout"),
    "output": ("dir", "commit_every", "commit_rows", "kafka"),
    "streams.*": ("schema", "window", "raw", "nullable"),
    "streams.*.raw": ("path", "format", "time", "time_unit", "delimiter", "header", "source", "options"),
    "predicate": ("equi", "band", "theta", "interval", "outer", "sql", "filter", "select", "asof"),
    "predicate.asof": ("left", "right", "direction", "tolerance", "closed"),
    "predicate.band": ("left", "right", "eps", "closed"),
    "predicate.theta": ("udf", "streams"),
    "predicate.interval": ("left", "right", "lower", "upper", "closed"),
    "run": ("batch_size", "flush_interval", "rate", "max_inflight", "progress", "liveness_timeout",
            "overload_after", "stop_when_overloaded", "sources", "part"),
    "checkpoint": ("dir", "every_tuples", "every", "keep"),
    "live": ("restart_attempts", "restart_delay", "restart_interval"),
}
_TOP = set(JOB_KEYS[""])


def load_job(path, overrides=None, udfs=True):
    """Read and validate a job file. `overrides` ({"output": ..., ...}) come from the command line.
    UDF modules are imported last, once everything else is valid, and not at all with
    `udfs=False` (`mpi-join slurm` only renders scripts: no code of the job's runs)."""
    if not os.path.exists(path):
        raise ConfigError(f"{path}: job file not found")
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: not a file")
    try:
        with open(path, "rb") as f:
            data = f.read((1 << 20) + 1)
        if len(data) > 1 << 20:
            raise ConfigError(f"{path}: larger than 1 MB; not a job file")
        text = data.decode("utf-8")
        raw = tomllib.loads(text[1:] if text.startswith("\ufeff") else text)     # a byte order mark (Windows editors)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}); a job file is TOML") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the job file: {e.strerror}") from None
    return parse_job(raw, path, overrides or {}, udfs=udfs)


_CLI_PATHS = ("output", "staged", "checkpoint_dir", "resume")


def parse_job(raw, path="<job>", overrides=None, udfs=True):
    # a path in the job file is relative to the job file; one given on the command line, to where
    # the user is (README "Safety")
    overrides = {k: (os.path.abspath(v) if k in _CLI_PATHS and isinstance(v, str) and v and "://" not in v else v)
                 for k, v in (overrides or {}).items()}
    base = os.path.dirname(os.path.abspath(path)) if path != "<job>" else os.getcwd()
    _no_unknown(raw, _TOP, "", path)
    job_t = _table(raw, "job", path, required=False)
    _no_unknown(job_t, JOB_KEYS["job"], "job.", path)
    name = job_t.get("name", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{path}: job.name: expected text, got {name!r}")
    check_text(name, f"{path}: job.name", 200)
    ts_unit = job_t.get("ts_unit", "ms")
    if ts_unit not in TS_UNITS:
        raise ConfigError(f"{path}: job.ts_unit: must be one of {', '.join(TS_UNITS)}, got {ts_unit!r}")

    raw = _sql_predicate(raw, ts_unit, path)
    inp = _table(raw, "input", path)
    _no_unknown(inp, JOB_KEYS["input"], "input.", path)
    staged = overrides.get("staged") or _str(inp, "staged", "input.", path)
    lateness = ns_to_ts(_duration(inp.get("allowed_lateness", "1s"), "input.allowed_lateness", path, lo_ns=0),
                        ts_unit)
    idle = (_duration(inp["idle_timeout"], "input.idle_timeout", path, lo_ns=1_000_000)
            if "idle_timeout" in inp else None)
    out = _table(raw, "output", path)
    _no_unknown(out, JOB_KEYS["output"], "output.", path)
    output = overrides.get("output") or _str(out, "dir", "output.", path)
    commit_every = _duration(out.get("commit_every", "1s"), "output.commit_every", path, lo_ns=10_000_000)
    commit_rows = _int_in(out.get("commit_rows", 1_000_000), 1, 1 << 40, "output.commit_rows", path)
    kafka_out = _kafka_out(out.get("kafka"), path)
    check_text(staged, f"{path}: input.staged")
    check_text(output, f"{path}: output.dir")
    staged, output = (p if "://" in p else os.path.join(base, p) for p in (staged, output))

    windows, residual = _interval(raw, ts_unit, path)
    asof_windows, asof = _asof(raw, ts_unit, path)
    if asof is not None and windows:
        raise ConfigError(f"{path}: predicate.asof: give an ASOF join or an interval, not both")
    streams = _filters(raw, _streams(raw, ts_unit, path, base, windows or asof_windows,
                                     "predicate.asof" if asof else "predicate.interval"), path)
    predicate = _predicate(raw, streams, path, base, residual, asof)
    streams = with_reads(streams, predicate)
    strategy = _strategy(raw, path, overrides)
    run = _run(raw, path)
    ckpt = _checkpoint(raw, path, base, overrides)
    job = _staged_widths(Job(path, name, ts_unit, staged, output, streams, predicate, strategy, run, ckpt, raw,
                             lateness, commit_every, commit_rows, idle, _restart(raw, path), kafka_out,
                             _select(raw, streams, path)))
    from .strategies import check_strategy
    job = check_strategy(job)
    try:
        check_layout(job_dirs(job))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    if udfs:
        load_udfs(job)
    return job


def _staged_widths(job):
    """`string` columns take the widths the staged input records. Read here, once, so every
    rank of a run holds the same dtypes; a manifest that cannot be read is left to the step
    that reads the input (staged.staged_manifest), which names what is wrong."""
    from .storage.staged import read_manifest, string_columns, with_string_widths
    if "://" in job.staged or not any(string_columns(s) for s in job.streams):
        return job
    try:
        return with_string_widths(job, read_manifest(job.staged))
    except (InputError, ConfigError, ValueError, TypeError, AttributeError):
        return job


def load_udfs(job):
    """Import and compile-check every theta UDF of a validated job (README "Safety": a job's
    own code runs only after the rest of the job is known to be valid)."""
    from .join.predicate import load_udf
    for k, t in enumerate(job.predicate.theta):
        try:
            load_udf(t.udf)
        except ConfigError as err:
            raise ConfigError(f"{job.path}: predicate.theta[{k}].udf: {err}") from None


def _outer(p, streams, path):
    """`outer = ["trades"]`: the streams whose tuples with no partner are results too, once, with
    null for the other side (a LEFT, RIGHT or, with both, FULL outer join). Stream indices."""
    if "outer" not in p:
        return ()
    o, where = p["outer"], f"{path}: predicate.outer"
    names = [s.name for s in streams]
    if isinstance(o, str):
        o = [o]
    if not (isinstance(o, list) and o and all(isinstance(x, str) for x in o) and len(set(o)) == len(o)):
        raise ConfigError(f"{where}: expected a list of stream names whose tuples are kept without a partner, "
                          f"such as [\"{names[0]}\"], got {p['outer']!r}")
    for x in o:
        if x not in names:
            raise ConfigError(f"{where}: unknown stream {x!r} (streams: {', '.join(names)})")
    if len(streams) != 2:
        raise ConfigError(f"{where}: outer joins relate two streams; this job has {len(streams)}")
    kinds = {s.window.kind for s in streams}
    if kinds != {"time"} and "asof" not in p:        # (an ASOF join's left rows wait in a time window)
        raise ConfigError(f"{where}: outer joins need time windows or an interval on both streams (a tuple is "
                          f"emitted without a partner once event time has passed every partner it could have); "
                          f"this job has {' and '.join(sorted(kinds))} windows")
    return tuple(sorted(names.index(x) for x in o))


def _filters(raw, streams, path):
    """`[predicate] filter = { clicks = "device <> 'bot'" }`: each stream's own condition on its
    columns and `ts` (join/filters.py), checked against its schema here."""
    p = raw.get("predicate") if isinstance(raw.get("predicate"), dict) else {}
    f = p.get("filter")
    if f is None:
        return streams
    import pyarrow as pa
    from .join import filters                 # (sqlglot: imported only by a job with a filter)
    from .schema import arrow_type, is_string
    names = [s.name for s in streams]
    if not isinstance(f, dict) or not f:
        raise ConfigError(f"{path}: predicate.filter: expected a table of conditions by stream, such as "
                          f"{{ {names[0]} = \"x > 0\" }}, got {f!r}")
    out = list(streams)
    for name, text in f.items():
        if name not in names:
            raise ConfigError(f"{path}: predicate.filter.{name}: unknown stream (streams: {', '.join(names)})")
        s = streams[names.index(name)]
        schema = {c: pa.string() if is_string(t) else arrow_type(s.dtype.fields[c][0]) for c, t in s.schema.items()}
        where = f"{path}: " + (f"predicate.sql: the condition on {name}" if "sql" in p else f"predicate.filter.{name}")
        filters.check(text, {**schema, TS: pa.int64()}, where)
        out[names.index(name)] = replace(s, filter=text)
    return tuple(out)


def _select(raw, streams, path):
    """`[predicate] select = [["user", "clicks.user_id"], ["click_ts", "clicks.ts"], ...]`: the
    columns `collect --with-payload` and `tail --with-payload` give, named and in this order
    (SQL's SELECT list); a column is a stream's schema column, its `ts` or its `seq`."""
    p = raw.get("predicate") if isinstance(raw.get("predicate"), dict) else {}
    sel = p.get("select")
    if sel is None:
        return ()
    where = f"{path}: predicate.select"
    if not (isinstance(sel, list) and sel and all(isinstance(x, list) and len(x) == 2 and
                                                  all(isinstance(y, str) for y in x) for x in sel)):
        raise ConfigError(f"{where}: expected a list of [name, \"stream.column\"] pairs, such as "
                          f"[[\"user\", \"{streams[0].name}.ts\"]], got {sel!r}")
    names = [s.name for s in streams]
    out, seen = [], set()
    for k, (name, ref) in enumerate(sel):
        check_text(name, f"{where}[{k}]", 200)
        if name in seen:
            raise ConfigError(f"{where}[{k}]: the column name {name!r} is given twice; give one an alias "
                              f"(c.ts AS click_ts)")
        seen.add(name)
        st, _, col = ref.partition(".")
        if st not in names:
            raise ConfigError(f"{where}[{k}]: {ref!r}: unknown stream {st!r} (streams: {', '.join(names)})")
        s = streams[names.index(st)]
        if col not in ("ts", "seq", *s.schema):
            raise ConfigError(f"{where}[{k}]: {ref!r}: stream {st} has no column {col!r} "
                              f"(columns: ts, seq, {', '.join(s.schema)})")
        out.append((name, names.index(st), col))
    return tuple(out)


def _sql_predicate(raw, ts_unit, path):
    """`raw` with a [predicate] sql = "SELECT ..." read into the TOML form it stands for
    (join/sql.py), the SQL kept beside it; a theta UDF may be given with it (SQL cannot name one)."""
    p = raw.get("predicate")
    if not isinstance(p, dict) or "sql" not in p:
        return raw
    both = sorted(set(p) & {"equi", "band", "interval", "filter", "select", "asof"})
    if both:
        raise ConfigError(f"{path}: predicate.sql: give the join as SQL or as {', '.join(both)}, not both")
    from .join.sql import predicate_table
    st = raw.get("streams") if isinstance(raw.get("streams"), dict) else {}
    times = {n: (s.get("raw") or {}).get("time") for n, s in st.items()
             if isinstance(s, dict) and isinstance(s.get("raw"), dict)}
    schemas = {n: list(s.get("schema") or {}) if isinstance(s, dict) and isinstance(s.get("schema"), dict) else []
               for n, s in st.items()}
    try:
        table = predicate_table(p["sql"], list(st), ts_unit, times, schemas)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return dict(raw, predicate=dict(table, sql=p["sql"], **({"theta": p["theta"]} if "theta" in p else {})))


ASOF_DIRECTIONS = ("backward", "forward", "nearest")


def _left_right(spec, raw, where, what):
    """The job's stream names, once `spec`'s `left` and `right` (an interval's, an ASOF join's:
    `what`) are checked to be two of them."""
    names = list(raw.get("streams", {}) or {})
    for k in ("left", "right"):
        if spec.get(k) not in names:
            raise ConfigError(f"{where}.{k}: expected a stream name ({', '.join(map(str, names))}), got {spec.get(k)!r}")
    if spec["left"] == spec["right"]:
        raise ConfigError(f"{where}: left and right are both {spec['left']!r}; {what} relates two streams")
    return names


def _asof(raw, ts_unit, path):
    """`[predicate] asof = { left = "trades", right = "quotes", direction = "backward",
    tolerance = "5s", closed = true }` with equi keys (and `outer = ["trades"]` for ASOF LEFT):
    ({stream name: Window}, the (left, right, direction, tolerance in ts units or None, closed)),
    or ({}, None). Each left row waits in its window until no right row that could be its match
    can still come, and is matched then against the right window, which holds every right row
    that could still be one (README "ASOF joins"):
      backward  left W = 1,             right W = tolerance + 1 (unbounded without one)
      forward   left W = tolerance + 1, right W = tolerance + 1
      nearest   left W = tolerance + 1, right W = 2 x tolerance + 1"""
    p = raw.get("predicate")
    if not isinstance(p, dict) or "asof" not in p:
        return {}, None
    a, where = p["asof"], f"{path}: predicate.asof"
    if not isinstance(a, dict):
        raise ConfigError(f"{where}: expected {{ left = \"trades\", right = \"quotes\", direction = \"backward\", "
                          f"tolerance = \"5s\", closed = true }}")
    _no_unknown(a, JOB_KEYS["predicate.asof"], "predicate.asof.", path)
    names = _left_right(a, raw, where, "an ASOF join")
    if len(names) != 2:
        raise ConfigError(f"{where}: an ASOF join is of two streams; this job has {len(names)}")
    direction = a.get("direction", "backward")
    if direction not in ASOF_DIRECTIONS:
        raise ConfigError(f"{where}.direction: expected one of {', '.join(ASOF_DIRECTIONS)}, got {direction!r}")
    closed = a.get("closed", True)
    if not isinstance(closed, bool):
        raise ConfigError(f"{where}.closed: expected true (equal times match) or false, got {closed!r}")
    tol = None
    if "tolerance" in a:
        ns = _duration(a["tolerance"], "predicate.asof.tolerance", path, lo_ns=0, hi_ns=MAX_WINDOW_NS,
                       hi_text="100 years")
        per = ts_unit_ns(ts_unit)
        if ns % per:
            raise ConfigError(f"{where}.tolerance: {a['tolerance']!r} is not a whole number of {ts_unit} (job.ts_unit)")
        tol = int(ns // per)
    elif direction != "backward":
        raise ConfigError(f"{where}.tolerance: required with direction = \"{direction}\" (a left row waits that long "
                          f"for a right row after it); give one such as \"5s\" (in SQL: a second bound, "
                          f"{a['right']}.ts <= {a['left']}.ts + INTERVAL '5' SECOND)")
    text = f"asof {direction} {a['left']} -> {a['right']}" + (f" within {a['tolerance']}" if tol is not None else "")
    wait = 1 if direction == "backward" else tol + 1
    reach = (None if tol is None else tol + 1) if direction != "nearest" else 2 * tol + 1
    right = Window("unbounded", 0, text) if reach is None else Window("time", reach, text)
    return {a["left"]: Window("time", wait, text), a["right"]: right}, (a["left"], a["right"], direction, tol, closed)


def _interval(raw, ts_unit, path):
    """`[predicate] interval = { left = "trades", right = "quotes", lower = "-5s", upper = "0s",
    closed = "both" }`: quotes.ts - trades.ts within [lower, upper] (Flink's between(lower,
    upper)), given instead of the two time windows. Returns ({stream name: Window}, residual
    conditions); ({}, ()) for a job without one.

    With integer event times, an open bound is the closed one a unit further in: the interval
    is [lo, up], closed. The windows are its hull with 0: (r, s) is in the windows iff
    s.ts - r.ts in (-W_right, W_left), so W_left = max(up, 0) + 1 and W_right = max(-lo, 0) + 1,
    and each side is kept only as long as a partner can still come. An interval that includes 0
    is exactly its windows; a shifted one (0 outside it, such as [1s, 5s]) adds the condition
    `Interval` for the pairs the hull holds but the interval does not."""
    p = raw.get("predicate")
    if not isinstance(p, dict) or "interval" not in p:
        return {}, ()
    iv, where = p["interval"], f"{path}: predicate.interval"
    if not isinstance(iv, dict):
        raise ConfigError(f"{where}: expected {{ left = \"R\", right = \"S\", lower = \"-5s\", upper = \"0s\", "
                          f"closed = \"both\" }}")
    _no_unknown(iv, JOB_KEYS["predicate.interval"], "predicate.interval.", path)
    names = _left_right(iv, raw, where, "an interval")
    if len(names) != 2:
        raise ConfigError(f"{where}: an interval gives the windows of a two-stream join; this job has "
                          f"{len(names)} streams (give each stream a window instead)")
    closed = iv.get("closed", "both")
    if closed not in ("both", "neither", "left", "right"):
        raise ConfigError(f"{where}.closed: expected \"both\", \"neither\", \"left\" (lower bound included) or "
                          f"\"right\" (upper bound included), got {closed!r}")
    per = ts_unit_ns(ts_unit)
    bounds = {}
    for k in ("lower", "upper"):
        v = iv.get(k)
        if isinstance(v, str) and v.strip().startswith(("-", "+")):
            sign, text = (-1 if v.strip()[0] == "-" else 1), v.strip()[1:]
        else:
            sign, text = 1, v
        if text in (0, "0"):
            ns = 0
        else:
            try:
                ns = parse_duration(text, f"predicate.interval.{k}")
            except ConfigError as e:
                raise ConfigError(f"{path}: {e} (a signed duration such as \"-5s\")") from None
        if ns > MAX_WINDOW_NS:
            raise ConfigError(f"{where}.{k}: at most 100 years, got {v!r}")
        if (ns / per).denominator != 1:
            raise ConfigError(f"{where}.{k}: {v!r} is not a whole number of {ts_unit} (job.ts_unit); "
                              f"an interval's bounds are exact")
        bounds[k] = sign * int(ns / per)
    lo = bounds["lower"] + (0 if closed in ("both", "left") else 1)
    up = bounds["upper"] - (0 if closed in ("both", "right") else 1)
    if lo > up:
        raise ConfigError(f"{where}: [{iv.get('lower')}, {iv.get('upper')}] ({closed} closed) holds no "
                          f"{ts_unit} value: lower must be below upper (or equal, with both closed)")
    text = f"interval {iv['right']}.ts - {iv['left']}.ts in [{iv.get('lower')}, {iv.get('upper')}] ({closed} closed)"
    windows = {iv["left"]: Window("time", max(up, 0) + 1, text), iv["right"]: Window("time", max(-lo, 0) + 1, text)}
    if lo <= 0 <= up:
        return windows, ()
    return windows, ((iv["left"], iv["right"], lo, up),)


def _streams(raw, ts_unit, path, base, interval=None, given="predicate.interval"):
    st = _table(raw, "streams", path)
    if len(st) < 2:
        raise ConfigError(f"{path}: streams: a join needs at least two streams, found {len(st)}")
    out = []
    for name, spec in st.items():
        where = f"streams.{name}"
        check_name(name, f"{path}: streams", "stream name")
        if not isinstance(spec, dict):
            raise ConfigError(f"{path}: {where}: expected a table with schema and window")
        _no_unknown(spec, JOB_KEYS["streams.*"], where + ".", path)
        schema = spec.get("schema")
        if not isinstance(schema, dict) or not schema:
            raise ConfigError(f"{path}: {where}.schema: required, a table of column = type")
        for col in schema:
            check_name(col, f"{path}: {where}.schema", "column name")
        try:
            dtype = stream_dtype(schema, f"{where}.schema")
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
        if interval and "window" in spec:
            raise ConfigError(f"{path}: {where}.window: the windows are given by {given}; give one or the other")
        if "window" not in spec and not interval:
            raise ConfigError(f"{path}: {where}.window: required (a duration such as \"15min\", a tuple count, or \"unbounded\")")
        rs = _raw_source(spec["raw"], schema, f"{where}.raw", path, base) if "raw" in spec else None
        win = interval[name] if interval else _window(spec["window"], ts_unit, f"{where}.window", path)
        out.append(Stream(name, dict(schema), dtype, win, rs, _nullable(spec, schema, where, path)))
    return tuple(out)


def _nullable(spec, schema, where, path):
    """`nullable = ["user_id"]`: the columns the join compares (keys, band columns, a UDF's) that
    may hold nulls; a row with a null in one matches nothing. Every other payload column may hold
    nulls anyway (the ranks never read it; README "Nulls")."""
    v = spec.get("nullable", [])
    if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
        raise ConfigError(f"{path}: {where}.nullable: expected a list of column names, got {v!r}")
    for c in v:
        if c not in schema:
            raise ConfigError(f"{path}: {where}.nullable: {c!r} is not a column of the schema "
                              f"(columns: {', '.join(schema)}; the event time is never null)")
    return tuple(dict.fromkeys(v))


RAW_FORMATS = ("csv", "json", "parquet")
TIME_UNITS = TS_UNITS + ("timestamp",)


def _raw_source(r, schema, where, path, base):
    if not isinstance(r, dict):
        raise ConfigError(f"{path}: {where}: expected {{ path = ..., format = ..., time = ..., time_unit = ... }}")
    _no_unknown(r, JOB_KEYS["streams.*.raw"], where + ".", path)
    source, options = r.get("source"), r.get("options", {})
    if source is not None:
        if not isinstance(source, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,99}", source):
            raise ConfigError(f"{path}: {where}.source: expected the name of a Spark streaming source "
                              f"(kafka, socket, ...), got {source!r}")
        if not isinstance(options, dict) or not all(isinstance(v, (str, int, float, bool)) for v in options.values()):
            raise ConfigError(f"{path}: {where}.options: expected a table of the source's options "
                              f"(text, numbers or true/false)")
        for k, v in options.items():
            check_text(str(k), f"{path}: {where}.options")
            check_text(str(v), f"{path}: {where}.options.{k}")
        r = dict(r, path=r.get("path") or f"{source}://{where.split('.')[1]}")
    elif "options" in r:
        raise ConfigError(f"{path}: {where}.options: goes with source (a Spark streaming source)")
    p = r.get("path")
    if not isinstance(p, str) or not p:
        raise ConfigError(f"{path}: {where}.path: required, a file, directory, glob or URI")
    fmt = r.get("format") or next((f for f in RAW_FORMATS if p.rstrip("/*").endswith("." + f)), None)
    if fmt == "jsonl":
        fmt = "json"
    if fmt not in RAW_FORMATS:
        raise ConfigError(f"{path}: {where}.format: expected one of {', '.join(RAW_FORMATS)}, got {fmt!r}")
    check_text(p, f"{path}: {where}.path")
    t = r.get("time")
    if not isinstance(t, str) or not t:
        raise ConfigError(f"{path}: {where}.time: required, the name of the event-time column")
    check_text(t, f"{path}: {where}.time", 256)
    if "`" in t:
        raise ConfigError(f"{path}: {where}.time: a column name with a backquote is not supported, got {t!r}")
    if t in schema:
        raise ConfigError(f"{path}: {where}.time: {t!r} is also a schema column; the event time becomes ts")
    unit = r.get("time_unit", "timestamp")
    if unit not in TIME_UNITS:
        raise ConfigError(f"{path}: {where}.time_unit: expected one of {', '.join(TIME_UNITS)}, got {unit!r}")
    delim = r.get("delimiter", ",")
    if not isinstance(delim, str) or len(delim) != 1 or delim in '"\r\n':
        raise ConfigError(f"{path}: {where}.delimiter: expected one character other than a quote or a line "
                          f"break, got {delim!r}")
    header = r.get("header", True)
    if not isinstance(header, bool):
        raise ConfigError(f"{path}: {where}.header: expected true or false")
    full = p if "://" in p or os.path.isabs(p) else os.path.join(base, p)
    return RawSource(full, fmt, t, unit, delim, header, source,
                     tuple(sorted((str(k), str(v).lower() if isinstance(v, bool) else str(v)) for k, v in options.items())))


def _restart(raw, path):
    lv = _table(raw, "live", path, required=False)
    _no_unknown(lv, JOB_KEYS["live"], "live.", path)
    return Restart(_int_in(lv.get("restart_attempts", 3), 0, 1000, "live.restart_attempts", path),
                   _duration(lv.get("restart_delay", "2s"), "live.restart_delay", path, lo_ns=0),
                   _duration(lv["restart_interval"], "live.restart_interval", path)
                   if "restart_interval" in lv else None)


def _checkpoint(raw, path, base, overrides):
    c = raw.get("checkpoint")
    if c is None:
        return None
    if not isinstance(c, dict):
        raise ConfigError(f"{path}: checkpoint: expected a table")
    _no_unknown(c, JOB_KEYS["checkpoint"], "checkpoint.", path)
    d = overrides.get("checkpoint_dir") or _str(c, "dir", "checkpoint.", path)
    if "://" in d:
        raise ConfigError(f"{path}: checkpoint.dir: checkpoints are written to a local or shared filesystem path, got {d!r}")
    check_text(d, f"{path}: checkpoint.dir")
    d = d if os.path.isabs(d) else os.path.join(base, d)
    if os.path.exists(d) and not os.path.isdir(d):
        raise ConfigError(f"{path}: checkpoint.dir: {d} exists and is not a directory")
    et = c.get("every_tuples")
    if et is not None:
        _int_in(et, 1, 1 << 62, "checkpoint.every_tuples", path)
    ev = None
    if c.get("every") is not None:
        ev = _duration(c["every"], "checkpoint.every", path)
    if et is None and ev is None:
        raise ConfigError(f"{path}: checkpoint: give every_tuples, every (a duration), or both")
    keep = _int_in(c.get("keep", 2), 1, MAX_KEEP, "checkpoint.keep", path)
    return Checkpoint(d, et, ev, keep)


def _window(w, ts_unit, where, path):
    if isinstance(w, bool):
        raise ConfigError(f"{path}: {where}: expected a duration, a tuple count or \"unbounded\", got {w!r}")
    if isinstance(w, float):
        raise ConfigError(f"{path}: {where}: a count window is a whole number of tuples, a time window a "
                          f"duration such as \"30s\"; got {w!r}")
    if isinstance(w, int):
        if w <= 0:
            raise ConfigError(f"{path}: {where}: a count window must hold at least 1 tuple, got {w}")
        if w > MAX_COUNT_WINDOW:
            raise ConfigError(f"{path}: {where}: a count window holds at most {MAX_COUNT_WINDOW:,} tuples "
                              f"(2^40), got {w:,}")
        return Window("count", w, f"{w} tuples")
    if isinstance(w, str) and w.strip().lower() in ("unbounded", "inf", "infinite"):
        return Window("unbounded", 0, "unbounded")
    try:
        ns = parse_duration(w, where)          # exact; the window rounds up to the job's unit below
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    if ns <= 0:
        raise ConfigError(f"{path}: {where}: a time window must be longer than zero, got {w!r}")
    if ns > MAX_WINDOW_NS:
        raise ConfigError(f"{path}: {where}: a time window is at most 100 years, got {w!r}")
    return Window("time", ns_to_ts(ns, ts_unit), w)


def _col(ref, streams, where, path):
    if not isinstance(ref, str) or ref.count(".") != 1:
        raise ConfigError(f"{path}: {where}: expected \"stream.column\", got {ref!r}")
    s, c = ref.split(".")
    names = [x.name for x in streams]
    if s not in names:
        raise ConfigError(f"{path}: {where}: unknown stream {s!r} (streams: {', '.join(names)})")
    i = names.index(s)
    if c not in streams[i].schema:
        raise ConfigError(f"{path}: {where}: stream {s!r} has no column {c!r} (columns: {', '.join(streams[i].schema)})")
    return (i, c)


def _pair(l, r, streams, where, path):
    a, b = _col(l, streams, where, path), _col(r, streams, where, path)
    if a[0] == b[0]:
        raise ConfigError(f"{path}: {where}: both sides are in stream {streams[a[0]].name!r}; a condition relates two streams")
    return a, b


def _predicate(raw, streams, path, base=None, interval=(), asof=None):
    p = _table(raw, "predicate", path)
    _no_unknown(p, JOB_KEYS["predicate"], "predicate.", path)
    equi, band, theta = [], [], []
    for k, e in enumerate(p.get("equi", [])):
        where = f"predicate.equi[{k}]"
        if not (isinstance(e, list) and len(e) == 2):
            raise ConfigError(f"{path}: {where}: expected a pair [\"R.x\", \"S.a\"], got {e!r}")
        a, b = _pair(e[0], e[1], streams, where, path)
        for (si, c) in (a, b):
            dt = streams[si].dtype.fields[c][0]
            if (dt.kind not in INTEGER_KINDS and dt.kind != "S") or dt.shape:
                raise ConfigError(f"{path}: {where}: equi-join column {streams[si].name}.{c} is "
                                  f"{streams[si].schema[c]}; equi keys must be integer, bool or text (string, charN) columns")
        ta, tb = (streams[si].dtype.fields[c][0] for si, c in (a, b))
        if (ta.kind == "S") != (tb.kind == "S"):
            raise ConfigError(f"{path}: {where}: equi-join of {streams[a[0]].name}.{a[1]} "
                              f"({streams[a[0]].schema[a[1]]}) with {streams[b[0]].name}.{b[1]} "
                              f"({streams[b[0]].schema[b[1]]}): text keys join only text keys")
        if (ta == np.uint64) != (tb == np.uint64):
            u, o = (a, b) if ta == np.uint64 else (b, a)
            raise ConfigError(f"{path}: {where}: equi-join of uint64 column {streams[u[0]].name}.{u[1]} with "
                              f"{streams[o[0]].schema[o[1]]} column {streams[o[0]].name}.{o[1]}: values above "
                              f"2^63-1 cannot be compared with signed ones; declare both uint64 or both signed")
        equi.append(Equi(a, b))
    for k, e in enumerate(p.get("band", [])):
        where = f"predicate.band[{k}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{path}: {where}: expected {{left=\"R.x\", right=\"S.a\", eps=10}}")
        _no_unknown(e, JOB_KEYS["predicate.band"], where + ".", path)
        a, b = _pair(e.get("left"), e.get("right"), streams, where, path)
        for (si, c) in (a, b):
            dt = streams[si].dtype.fields[c][0]
            if dt.kind not in "iufb" or dt.shape:
                raise ConfigError(f"{path}: {where}: band column {streams[si].name}.{c} is {streams[si].schema[c]}; band columns must be numeric")
        eps = e.get("eps")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps <= 1e300:
            raise ConfigError(f"{path}: {where}.eps: expected a finite number >= 0, got {eps!r}")
        closed = e.get("closed", False)
        if not isinstance(closed, bool):
            raise ConfigError(f"{path}: {where}.closed: expected true or false, got {closed!r}")
        band.append(Band(a, b, float(eps), closed))
    for k, e in enumerate(p.get("theta", [])):
        where = f"predicate.theta[{k}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{path}: {where}: expected {{udf=\"module:function\", streams=[\"R\", \"S\"]}}")
        _no_unknown(e, JOB_KEYS["predicate.theta"], where + ".", path)
        udf = e.get("udf")
        if not isinstance(udf, str) or udf.count(":") != 1 or not _UDF.fullmatch(udf):
            raise ConfigError(f"{path}: {where}.udf: expected \"module:function\" (dotted identifiers), got {udf!r}")
        names = [s.name for s in streams]
        ss = e.get("streams", names[:2] if len(names) == 2 else None)
        if not (isinstance(ss, list) and len(ss) == 2 and all(x in names for x in ss) and ss[0] != ss[1]):
            raise ConfigError(f"{path}: {where}.streams: expected two distinct stream names from {names}, got {ss!r}")
        mod, _, fn = udf.partition(":")
        local = os.path.join(base or ".", *mod.split(".")) + ".py"
        if base and os.path.isfile(local):   # next to the job file: by path, under a private name, so
            udf = f"{os.path.abspath(local)}:{fn}"   # two jobs' same-named modules never mix in one process
        theta.append(Theta(udf, (names.index(ss[0]), names.index(ss[1]))))
    order = [s.name for s in streams]
    iv = tuple(Interval((order.index(a), TS), (order.index(b), TS), lo, up) for a, b, lo, up in interval)
    outer = _outer(p, streams, path)
    if asof is not None:
        left, right, direction, tol, closed = asof
        if band or theta:
            raise ConfigError(f"{path}: predicate.asof: an ASOF join matches on equal keys (equi, or none) and event "
                              f"time; give no band or theta conditions")
        if outer and outer != (order.index(left),):
            raise ConfigError(f"{path}: predicate.outer: an ASOF join keeps its left stream's rows (outer = "
                              f"[\"{left}\"], ASOF LEFT JOIN) or none")
        asof = AsOf(order.index(left), order.index(right), direction, tol, closed, bool(outer))
        outer = ()
    pred = Predicate(tuple(equi), tuple(band), tuple(theta), iv, outer, tuple(s.window for s in streams), asof)
    if not pred.kinds:
        raise ConfigError(f"{path}: predicate: give at least one of equi, band, theta or asof")
    # every stream must be connected to the others, or the join is a cross product
    linked = {0, 1} if asof is not None else {0}      # an ASOF join relates its two streams by event time
    changed = True
    while changed:
        changed = False
        for i in range(len(streams)):
            for j in list(linked):
                if i not in linked and pred.between(i, j):
                    linked.add(i)
                    changed = True
    if len(linked) != len(streams):
        lost = [streams[i].name for i in range(len(streams)) if i not in linked]
        raise ConfigError(f"{path}: predicate: no condition links stream(s) {', '.join(lost)} to the others")
    return pred


_UDF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def _int_in(v, lo, hi, field, path, also=""):
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError(f"{path}: {field}: expected an integer in {lo:,}..{hi:,}{' ' + also if also else ''}, "
                          f"got {v!r}")
    return v


def _duration(v, field, path, lo_ns=1, hi_ns=MAX_INTERVAL_NS, hi_text="1 day"):
    try:
        ns = parse_duration_ns(v, field)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    if ns < lo_ns:
        least = "longer than zero" if lo_ns <= 1 else f"at least {lo_ns / 1e6:g}ms"
        raise ConfigError(f"{path}: {field}: must be {least}, got {v!r}")
    if ns > hi_ns:
        raise ConfigError(f"{path}: {field}: at most {hi_text}, got {v!r}")
    return ns


def _strategy(raw, path, overrides):
    st = dict(_table(raw, "strategy", path))
    if overrides.get("strategy"):
        st["name"] = overrides["strategy"]
    name = st.pop("name", None)
    if not isinstance(name, str):
        raise ConfigError(f"{path}: strategy.name: required")
    return Strategy(name, st)


def _run(raw, path):
    r = _table(raw, "run", path, required=False)
    _no_unknown(r, JOB_KEYS["run"], "run.", path)
    bs = _int_in(r.get("batch_size", 8192), 1, MAX_BATCH, "run.batch_size", path)
    fi = _duration(r.get("flush_interval", "50ms"), "run.flush_interval", path)
    rate = r.get("rate", "max")
    if rate == "max":
        rate = None
    elif isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= MAX_RATE:
        raise ConfigError(f"{path}: run.rate: expected \"max\" or tuples/s per stream (a number in (0, 1e9]), "
                          f"got {rate!r}")
    mi = _int_in(r.get("max_inflight", 4), 1, MAX_INFLIGHT, "run.max_inflight", path)
    prog = r.get("progress", True)
    if not isinstance(prog, bool):
        raise ConfigError(f"{path}: run.progress: expected true or false, got {prog!r}")
    lt = r.get("liveness_timeout", "30s")
    lt_ns = 0 if lt in (0, "off") else _duration(lt, "run.liveness_timeout", path)
    if lt_ns and lt_ns < 1_000_000_000:
        raise ConfigError(f"{path}: run.liveness_timeout: at least 1s (or \"off\"), got {lt!r}")
    ov = _duration(r.get("overload_after", "2s"), "run.overload_after", path)
    stop = r.get("stop_when_overloaded", False)
    if not isinstance(stop, bool):
        raise ConfigError(f"{path}: run.stop_when_overloaded: expected true or false, got {stop!r}")
    auto = r.get("sources", "auto") == "auto"
    sources = 1 if auto else _int_in(r.get("sources"), 1, MAX_SOURCES, "run.sources", path, also='or "auto"')
    part = _int_in(r.get("part", 0), 0, 1 << 40, "run.part", path)
    return Run(bs, fi, None if rate is None else float(rate), mi, prog, lt_ns / 1e9, ov / 1e9, stop, sources, part,
               auto)


def _table(raw, key, path, required=True):
    v = raw.get(key)
    if v is None:
        if required:
            raise ConfigError(f"{path}: [{key}]: required section is missing")
        return {}
    if not isinstance(v, dict):
        raise ConfigError(f"{path}: {key}: expected a table")
    return v


def _kafka_out(t, path):
    """[output] kafka = { servers = "HOST:PORT", topic = "...", format = "json" | "csv" }, or None."""
    if t is None:
        return None
    if not isinstance(t, dict):
        raise ConfigError(f"{path}: output.kafka: expected a table {{ servers, topic, format }}")
    _no_unknown(t, ("servers", "topic", "format"), "output.kafka.", path)
    for k in ("servers", "topic"):
        if not isinstance(t.get(k), str) or not t[k] or (k == "topic" and not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", t[k])):
            raise ConfigError(f"{path}: output.kafka.{k}: required, " + ("HOST:PORT[,HOST:PORT...]" if k == "servers"
                                                                         else "a topic name (letters, digits, . _ -)"))
    fmt = t.get("format", "json")
    if fmt not in ("json", "csv"):
        raise ConfigError(f"{path}: output.kafka.format: json or csv, got {fmt!r}")
    return KafkaOut(t["servers"], t["topic"], fmt)


def _str(t, key, prefix, path):
    v = t.get(key)
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{path}: {prefix}{key}: required, a path")
    return v


def _no_unknown(t, allowed, prefix, path):
    extra = sorted(set(t) - set(allowed))
    if extra:
        raise ConfigError(f"{path}: {prefix}{extra[0]}: unknown field (allowed: {', '.join(sorted(allowed))})")
