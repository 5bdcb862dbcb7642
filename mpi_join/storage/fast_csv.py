"""Landing CSV files read in the stager's own process with Arrow (and JSON-lines files, whose
text fast_json.py takes out, parsed by the same rules), when every value in a file is
one that `stage`'s Spark parse (spark/stage.py) reads the same way; any other file is read by
Spark as before. This keeps Spark's planning and parsing off the common case of live staging
(well-formed numbers), and the result equal field for field to `stage`'s (tests/test_live.py
stages the same files both ways and compares).

A file takes this path when: its name is plain (letters, digits, `._/-`, so its URI is
`file://` + the path, as Spark names it), it is valid UTF-8 (a byte order mark and CRLF line
ends are read as Spark reads them), its header names each declared column once, every row has
the header's number of fields, and every
value of a declared column is, for its type:
  integers        -?[0-9]{1,18} within the type's range (Spark: try_cast as the SQL integer type)
  floats          a plain decimal or exponent number (Java's and Arrow's parsers both round
                  correctly)
  bool            true or false
  charN           text of at most N UTF-8 bytes without NUL or CR, not a quoted "\\N" (a quoted
                  "" is the empty text)
  a null          an unquoted empty field or \\N, in any column (Spark's nullValue): kept with
                  its NULLS flag, or, in the event time or a compared column not declared
                  `nullable`, its row quarantined by itself (`k: missing (null)`, as Spark writes)
  event time      an integer, in ns, us, ms or s, where the unit's ratio to the job's ts_unit is
                  at least 1e-6 (Spark's decimal product is then exact; ns in a job of seconds
                  is rounded by Spark at 6 decimals, so it goes to Spark); or, with
                  time_unit = "timestamp", ISO-8601 / RFC 3339 text YYYY-MM-DD, `T` or a space,
                  hh:mm:ss, an optional fraction of 1 to 6 digits, and `Z`, `+hh:mm` or `-hh:mm`
                  or no zone (UTC, as the stager's Spark session reads it), a valid date and
                  time in the years 1900 to 2200 (Spark's try_to_timestamp reads each such
                  value to the microsecond exactly; the job's ts_unit takes it rounded down)
A row whose numeric value (an integer, a float, an integer event time) Spark's parse surely
refuses (letters only and no word a number is spelled as, such as `abc` or `x`; an integer
outside its type's range), or whose ISO event time is letters only and none of Spark's time
words (`now`, `today`, `epoch`, ...), such as `unknown`, is quarantined by itself, with Spark's reason, and the rest of its
file staged. Anything else (spaces, base64 arrays, other timestamp forms, other
unparseable values) sends the whole file to Spark, which writes the reasons of the rows it
quarantines.
"""
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import NULLS, SEQ, padded_bytes, payload
from ..units import ts_unit_ns
from . import paths

_PLAIN_PATH = re.compile(r"[A-Za-z0-9._/-]+")
_INT = r"^-?[0-9]{1,18}$"
_FLOAT = r"^-?([0-9]{1,40}(\.[0-9]{0,40})?|\.[0-9]{1,40})([eE][-+]?[0-9]{1,2})?$"


def expected_reader(s):
    """Which path stream `s`'s landing files are expected to take, in words (live says it)."""
    if s.raw is not None and s.raw.source == "kafka":
        return f"Kafka records ({s.raw.format}): read in the stager's process (confluent-kafka), parsed as a CSV file is"
    if s.raw is None or s.raw.source is not None or s.raw.format not in ("csv", "json"):
        what = "records of a stream source" if s.raw is not None and s.raw.source is not None else \
            f"{s.raw.format if s.raw else '?'} files"
        return f"{what}: read by Spark"
    if not paths.local(s.raw.path):
        return (f"{s.raw.format.upper()} files on {s.raw.path.split('://')[0]}://: read by Spark (the in-process "
                f"path reads local files)")
    times = ("ISO-8601 times (Z, +hh:mm or no zone; up to 6 fraction digits)" if s.raw.time_unit == "timestamp"
             else f"integer times in {s.raw.time_unit}")
    what = "CSV" if s.raw.format == "csv" else "JSON lines"
    return (f"{what} with {times}: read in the stager's process (nulls too); a file with a space or a "
            f"value of another form goes to Spark (a row with a letters-only number is quarantined by itself)")


def plain_uri(path):
    """The URI Spark gives a local file (input_file_name), when the path needs no escaping."""
    return f"file://{path}" if _PLAIN_PATH.fullmatch(path) else None


def read(s, path, header, declared, waiting, job_unit, types=None):
    """Stream `s`'s landing CSV file `path` (whose column names are `header`), or JSON-lines file
    (fast_json.py; `types`, a dict, then takes the columns' inferred types), as (rows of dtype
    `waiting`: the staged row with _src 0 and _rec its record; the rows Spark's parse would
    refuse, quarantined by themselves as Spark writes them, or None; how many staged event times
    had a part finer than the job's unit), or None when Spark must read the file (see the
    module's rules)."""
    uri = plain_uri(path)
    if uri is None:
        return None
    if s.raw.format == "json":
        from .fast_json import text_columns
        try:
            with open(path, "rb") as f:
                got = text_columns(f.read(), declared)
        except OSError:
            return None
        if got is None:
            return None
        t, file_types = got
        if types is not None:
            types.update(file_types)
        return parse(t, s, declared, waiting, job_unit, uri)
    if s.raw.format != "csv" or len(set(header)) != len(header) \
            or any(c not in header for c in declared) or any('"' in c for c in header):
        return None
    try:                                 # Arrow skips a UTF-8 byte order mark, as Spark's read does
        t = read_text(s, path, header, skip=1 if s.raw.header else 0)
    except (pa.ArrowInvalid, OSError):
        return None                      # a row with another number of fields, invalid UTF-8, ...
    return parse(t, s, declared, waiting, job_unit, uri)


def read_text(s, source, names, skip=0):
    """CSV (a path or a file object) as text columns `names`, quoted and nulled as Spark reads it."""
    import pyarrow.csv as pcsv
    return pcsv.read_csv(
        source,
        read_options=pcsv.ReadOptions(column_names=list(names), skip_rows=skip),
        parse_options=pcsv.ParseOptions(delimiter=s.raw.delimiter, quote_char='"', double_quote=True,
                                        escape_char=False, newlines_in_values=True),
        # an unquoted empty field or \N is a null (Spark's nullValue), a quoted "" an empty string
        convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in names}, null_values=["", "\\N"],
                                            strings_can_be_null=True, quoted_strings_can_be_null=False))


def parse(t, s, declared, waiting, job_unit, uri):
    """The text columns `t` of records of `uri` parsed as read() parses a file's (its result), or
    None where a value may be one Spark reads otherwise."""
    n = t.num_rows
    waiting = _widened(waiting, s, t)
    parsed, good, finer, kept = {}, np.ones(n, bool), None, {}
    for c in declared:
        col, null = _without_nulls(t.column(c), s, c, waiting)
        v = _time(col, s, job_unit) if c == s.raw.time else _value(col, s, c, waiting)
        if v is None:
            return None
        if c == s.raw.time:
            v, finer = v[:2], v[2]
        if null is not None and (c == s.raw.time or (c in s.reads and c not in s.nullable)):
            v = (v[0], v[1] & ~null)          # a null the join cannot hold: its row is quarantined
        elif null is not None:
            kept[c] = null                    # a null kept (schema.NULLS)
        parsed[c] = v
        good &= v[1]
    finer = int((finer & good).sum())
    out = np.zeros(n, waiting)
    for c, (v, _) in parsed.items():
        out["ts" if c == s.raw.time else c] = v
    pay = payload(waiting)
    for c, null in kept.items():
        out[NULLS][:, pay.index(c)] = null
    out["_rec"] = np.arange(1, n + 1)
    out[SEQ] = 0
    if good.all():
        return out, None, finer
    return out[good], _quarantined(t, s, declared, parsed, good, uri, job_unit), finer


def _widened(dtype, s, t):
    """`dtype` with each `string` column as wide as this file's longest value (at rest: stage
    takes the widest of its files, over the rows it stages, as Spark's path does)."""
    from ..schema import is_string
    text = [c for c, ty in s.schema.items() if is_string(ty)]
    if not text:
        return dtype
    width = {c: max(1, int(pc.max(pc.binary_length(t.column(c))).as_py() or 0)) for c in text}
    return np.dtype([(d[0], f"S{width[d[0]]}") if d[0] in width else d for d in dtype.descr])


def _without_nulls(col, s, c, dtype):
    """(`col` with each null as a value that parses, which values were null or None)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not col.null_count:
        return col, None
    if c == s.raw.time:
        zero = _a_good_one(col, ~np.asarray(col.is_null())) if s.raw.time_unit == "timestamp" else "0"
    else:
        kind = dtype.fields[c][0].kind
        zero = "false" if kind == "b" else "" if kind == "S" else "0"
    return col.fill_null(zero), pc.is_null(col).to_numpy(zero_copy_only=False)


def _a_good_one(col, ok):
    """A value of `col` where `ok` (what a refused or null time is replaced by until its row is
    dropped: one of the column's own form keeps Arrow's parse, _iso_cast, on the file)."""
    i = np.flatnonzero(ok)
    return col[int(i[0])].as_py() if len(i) else "1970-01-01 00:00:00"


def _quarantined(t, s, declared, parsed, good, uri, job_unit):
    """The rows of `t` with a value Spark would refuse, as Spark's path writes them (file, record,
    reason: each refused value as `column: expected ..., got '...'`, joined by "; "; the raw text
    of every declared column)."""
    from types import SimpleNamespace
    from .spark.stage import _expected
    job = SimpleNamespace(ts_unit=job_unit)
    bad = np.flatnonzero(~good)
    rows = pa.array(bad)
    why = [[] for _ in bad]
    for c in [s.raw.time] + [c for c in s.schema if c != s.raw.time]:
        ok = parsed[c][1][bad]
        raw = t.column(c).take(rows).to_pylist()
        label = f"event time {c}" if c == s.raw.time else c
        for i in np.flatnonzero(~ok):
            why[i].append(f"{label}: missing (null)" if raw[i] is None else
                          f"{label}: {_expected(s, '_ts' if c == s.raw.time else c, job)}, got '{raw[i][:60]}'")
    return pa.table({"file": pa.array([uri] * len(bad), pa.string()),
                     "record": pa.array(bad + 1, pa.int64()), "reason": pa.array(["; ".join(w) for w in why]),
                     **{c: t.column(c).take(rows).combine_chunks().cast(pa.string()) for c in declared}})


# a value Spark's parse surely refuses in a numeric column: letters only, none of the words a
# number may be spelled as (NaN, Infinity, inf, true, false, ...): its row is quarantined by itself
_SURELY_NOT_A_NUMBER = r"^[A-Za-z]+$"
_NUMBER_WORDS = {"nan", "inf", "infinity", "true", "false", "t", "f", "y", "n", "yes", "no", "e", "d"}


# the words Spark reads as a time (its special datetime values)
_TIME_WORDS = {"epoch", "now", "today", "yesterday", "tomorrow"}


def _refusable(col, ok, ints=False, spelled_as=_NUMBER_WORDS):
    """`ok`, or None when a value that is not ok may be one Spark's parse reads (then Spark reads
    the file): a value not ok must be letters only and none of the words in `spelled_as` (those a
    number, or a time, may be spelled as), or, in an integer column, an integer outside the
    type's range."""
    if ok.all():
        return ok
    refused = pc.filter(col, pa.array(~ok))
    letters = pc.match_substring_regex(refused, _SURELY_NOT_A_NUMBER).to_numpy(zero_copy_only=False)
    spelled = pc.is_in(pc.utf8_lower(refused), pa.array(sorted(spelled_as))).to_numpy(zero_copy_only=False)
    sure = letters & ~spelled
    if ints:
        sure |= pc.match_substring_regex(refused, _INT).to_numpy(zero_copy_only=False)     # out of range
    return ok if sure.all() else None


def _time(col, s, job_unit):
    """The event-time column parsed as Spark would: (times in the job's unit, rounded down; which
    values parse; which had a part finer than the unit, the manifest's ts_finer), or None when
    some value that does not parse might be one Spark reads."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if col.null_count:
        return None
    n = len(col)
    den = ts_unit_ns(job_unit)
    if s.raw.time_unit == "timestamp":
        ok = pc.match_substring_regex(col, _ISO).to_numpy(zero_copy_only=False)
        if not ok.all():        # a letters-only word that names no time is quarantined by itself
            ok = _refusable(col, ok, spelled_as=_TIME_WORDS)
            if ok is None:
                return None
            col = pc.if_else(pa.array(ok), col, _a_good_one(col, ok))
        v = iso_times(col, den, matched=True)
        return None if v is None else (v[0], ok, v[1] & ok)
    ok = _refusable(col, pc.match_substring_regex(col, _INT).to_numpy(zero_copy_only=False))
    if ok is None:
        return None
    x = pc.cast(pc.if_else(pa.array(ok), col, "0"), pa.int64()).to_numpy()
    num = ts_unit_ns(s.raw.time_unit)
    if num >= den:
        f = num // den
        if n and int(np.abs(x).max()) > (2 ** 62) // f:
            return None
        return x * f, ok, np.zeros(n, bool)
    if den // num > 10 ** 6:
        return None
    return np.floor_divide(x, den // num), ok, ok & (x % (den // num) != 0)


def _value(col, s, c, dtype):
    """Payload column `c` parsed as Spark would, and which values parse; None when some value
    that does not parse might be one Spark reads (then Spark reads the file)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if col.null_count:
        return None
    n = len(col)
    fd = dtype.fields[c][0]
    if fd.shape:
        return None
    if fd.kind in "iu":
        form = pc.match_substring_regex(col, _INT).to_numpy(zero_copy_only=False)
        x = pc.cast(pc.if_else(pa.array(form), col, "0"), pa.int64()).to_numpy()
        lo, hi = (0, min(np.iinfo(fd).max, 2 ** 63 - 1)) if fd.kind == "u" else (np.iinfo(fd).min, np.iinfo(fd).max)
        ok = _refusable(col, form & (x >= lo) & (x <= hi), ints=True)
        return None if ok is None else (np.where(ok, x, 0), ok)
    if fd.kind == "f":
        ok = _refusable(col, pc.match_substring_regex(col, _FLOAT).to_numpy(zero_copy_only=False))
        if ok is None:
            return None
        x = pc.cast(pc.if_else(pa.array(ok), col, "0"), pa.float32() if fd.itemsize == 4 else pa.float64())
        return x.to_numpy(zero_copy_only=False), ok
    if fd.kind == "b":
        if n and not pc.all(pc.is_in(col, pa.array(["true", "false"]))).as_py():
            return None
        return pc.equal(col, "true").to_numpy(zero_copy_only=False), np.ones(n, bool)
    if fd.kind == "S":
        if n and (pc.max(pc.binary_length(col)).as_py() > fd.itemsize or pc.any(pc.equal(col, "\\N")).as_py()):
            return None              # too long, or a quoted \N
        # a NUL or a CR: Spark reads the file (it makes a quoted CRLF a LF)
        out = padded_bytes(col, fd.itemsize, refuse=b"\0\r")
        return None if out is None else (out, np.ones(n, bool))
    return None


_ISO = (r"^(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[T ](?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})"
        r"(?:\.(?P<f>[0-9]{1,6}))?(?P<z>Z|[+-][0-9]{2}:[0-9]{2})?$")
_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def _days_from_civil(y, m, d):
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm, in numpy)."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


_ZONED = r"(Z|[+-](0[0-9]|1[0-7]):[0-5][0-9]|[+-]18:00)$"
_YEARS = r"^(19[0-9]{2}|2[01][0-9]{2}|2200)-"


def _iso_cast(col, matched=False):
    """Microseconds since the epoch of ISO text of the module's form (`matched`: every value is
    known to be), by Arrow's own parser (about 40 times the speed of taking the fields apart),
    where every value has a zone in range, or none has, and every year is in range: Arrow then
    reads exactly what the rules allow, and refuses (None: take the fields apart) an invalid date
    or time. None otherwise."""
    if (not matched and not pc.all(pc.match_substring_regex(col, _ISO)).as_py()) or \
            not pc.all(pc.match_substring_regex(col, _YEARS)).as_py():
        return None
    zoned = pc.match_substring_regex(col, _ZONED)
    if pc.all(zoned).as_py():
        tz = "UTC"
    elif not pc.any(pc.match_substring_regex(col, r"(Z|[+-][0-9]{2}:[0-9]{2})$")).as_py():
        tz = None
    else:
        return None
    try:
        return pc.cast(col, pa.timestamp("us", tz=tz)).cast(pa.int64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def iso_times(col, target_ns, matched=False):
    """ISO-8601 text (the module's form; `matched`: every value is known to be) as (event times
    in units of `target_ns` ns, rounded down; which had a part finer than that), or None when
    some value is not of that form (Spark then reads the file)."""
    if not len(col):
        return np.zeros(0, np.int64), np.zeros(0, bool)
    us = _iso_cast(col, matched)
    if us is not None:
        ns = us * 1000
        return np.floor_divide(ns, target_ns), ns % target_ns != 0
    parts = pc.extract_regex(col, _ISO)
    if parts.null_count:
        return None
    f = {k: parts.field(k) for k in ("y", "mo", "d", "h", "mi", "s", "f", "z")}
    y, mo, d, h, mi, sec = (pc.cast(f[k], pa.int64()).to_numpy() for k in ("y", "mo", "d", "h", "mi", "s"))
    frac = pc.cast(pc.utf8_rpad(f["f"], 6, "0"), pa.int64()).to_numpy()
    z = f["z"]
    zh = pc.cast(pc.if_else(pc.equal(pc.utf8_length(z), 6), pc.utf8_slice_codeunits(z, 1, 3), "0"),
                 pa.int64()).to_numpy()
    zm = pc.cast(pc.if_else(pc.equal(pc.utf8_length(z), 6), pc.utf8_slice_codeunits(z, 4, 6), "0"),
                 pa.int64()).to_numpy()
    sign = np.where(pc.starts_with(z, "-").to_numpy(zero_copy_only=False), -1, 1)
    if (y.min() < 1900 or y.max() > 2200 or mo.min() < 1 or mo.max() > 12 or h.max() > 23 or mi.max() > 59
            or sec.max() > 59 or zh.max() > 18 or zm.max() > 59 or ((zh == 18) & (zm > 0)).any()):
        return None
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    month_days = _DAYS[mo - 1] + ((mo == 2) & leap)
    if d.min() < 1 or (d > month_days).any():
        return None
    secs = _days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - sign * (zh * 3600 + zm * 60)
    ns = secs * 1_000_000_000 + frac * 1000
    return np.floor_divide(ns, target_ns), ns % target_ns != 0
