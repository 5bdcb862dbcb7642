"""JSON-lines landing files read in the stager's own process, as the text columns Spark's JSON
reader gives with a string schema (spark/stage.py reads every declared column so, then parses
the text): a string as its value, a number as written (`1.5e3` stays `1.5e3`), `true`/`false`,
null or an absent key as null; blank lines give no row and take no record number. fast_csv.py
then parses the columns exactly as it parses a CSV file's.

A file is read here only when Python's JSON parser and Spark's (Jackson, with Spark's options)
surely read it alike; otherwise Spark reads it (None). Spark's then: a line that is not one JSON
object (a corrupt line, an array of objects, a bare value, a second object after the first,
single quotes, NaN, a key twice in one object), a declared column holding an object or an
array (Spark gives its raw text, white space and all), a key that differs from another or from
a declared column only in case (Spark's schema inference is case-insensitive), a CR that does
not end a line, text that is not UTF-8, and a file over 128 MB (Spark splits it, and numbers
its records per split).

`stage` at rest also checks that a stream's files agree on each column's inferred type (Spark's
schema inference, spark/stage.py _read_each): `types` gives each declared column's type as Spark
infers it (`bigint`, `double`, `string`, `boolean`), or None where this reader does not (a key
no line has, an integer past int64: a decimal); stage sends those files to Spark, which says
what is wrong."""
import json

import pyarrow as pa

LARGEST = 128 << 20          # spark.sql.files.maxPartitionBytes: a larger file is split by Spark
_WS = " \t\r\n"              # JSON's white space (Python's str.strip would take more)


class _Int(str):
    """An integer token's text."""


class _Float(str):
    """A fraction or exponent token's text."""


def _constant(name):
    raise ValueError(name)       # NaN, Infinity: Spark's spelling of them is not repeated here


def _object(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        raise ValueError("a repeated key")      # Spark's schema inference refuses it
    return d


_decode = json.JSONDecoder(parse_int=_Int, parse_float=_Float, parse_constant=_constant,
                           object_pairs_hook=_object).decode


def text_columns(data, names):
    """(the declared columns `names` of JSON-lines bytes `data` as a table of text, as Spark reads
    them; {column: inferred type or None}), or None when Spark must read the file."""
    if len(data) > LARGEST or data.count(b"\r") != data.count(b"\r\n"):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        objs = [_decode(ln) for ln in text.split("\n") if ln.strip(_WS)]
    except ValueError:
        return None
    if any(type(o) is not dict for o in objs):
        return None
    keys = set().union(*objs)
    lower = {k.lower() for k in keys}
    if len(lower) != len(keys) or any(c not in keys and c.lower() in lower for c in names):
        return None
    cols, types = {}, {}
    for c in names:
        values = [o.get(c) for o in objs]
        kinds = set(map(type, values)) - {type(None)}
        if kinds & {dict, list}:
            return None
        if bool in kinds:
            values = [("true" if v else "false") if type(v) is bool else v for v in values]
        big = _Int in kinds and not all(_fits_long(v) for v in values if type(v) is _Int)
        types[c] = None if big or c not in keys else _inferred(kinds)
        try:
            cols[c] = pa.array(values, pa.string())
        except (UnicodeEncodeError, pa.ArrowException):     # a lone surrogate (\ud800)
            return None
    return pa.table(cols), types


def _fits_long(v):
    return len(v) <= 18 or -2 ** 63 <= int(v) < 2 ** 63


def _inferred(kinds):
    """The type Spark's JSON schema inference gives a column whose values (nulls aside) are of
    `kinds`: integers `bigint` (a larger one, a decimal, is not inferred here), numbers `double`,
    `boolean`, and text for all nulls and for any other mix."""
    if kinds == {_Int}:
        return "bigint"
    if kinds and kinds <= {_Int, _Float}:
        return "double"
    return "boolean" if kinds == {bool} else "string"
