"""A stream's own conditions (SQL's one-stream WHERE or ON terms, `[predicate] filter`),
evaluated on its staged rows as they are read, with SQL's three-valued logic: a row whose
condition is false or unknown (a null compared) meets no partner. It still flows, routes and
sits in its window like any row, its NULL flag set (schema.NULL: every join path already
matches such a row with nothing), so no strategy, count, offset or checkpoint changes; with an
outer join a kept stream's filtered row is a result without a partner, as SQL's ON says.

What a condition may hold (DuckDB's meaning where engines differ: `/` divides as floats):
comparisons (= <> < <= > >=), BETWEEN, IN (literals), IS [NOT] NULL, [NOT] LIKE / ILIKE,
AND / OR / NOT, + - * / and unary minus on numbers, LOWER, UPPER, LENGTH, ABS, the stream's
columns (unqualified) and its event time `ts` (a number in the job's ts_unit), number, text,
TRUE/FALSE and NULL literals. Anything else is refused with one line naming it."""
import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from ..errors import ConfigError

_CMP = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.LT: "less", exp.LTE: "less_equal", exp.GT: "greater",
        exp.GTE: "greater_equal"}
_ARITH = {exp.Add: "add_checked", exp.Sub: "subtract_checked", exp.Mul: "multiply_checked"}
_FUNCS = {"LOWER": "utf8_lower", "UPPER": "utf8_upper", "LENGTH": "utf8_length", "ABS": "abs_checked"}


class Refused(Exception):
    """What a condition holds that this module cannot evaluate (its text is the reason)."""


@functools.lru_cache(maxsize=64)
def parse(text):
    """The condition `text` as a sqlglot expression (Refused when it is not one); parsed once
    (every reader of a stream asks: the run's, a count of lone rows, collect)."""
    if not isinstance(text, str) or not text.strip():
        raise Refused("expected a condition as SQL text, such as \"device <> 'bot'\"")
    try:
        return sqlglot.parse_one(text)
    except sqlglot.errors.ParseError as e:
        raise Refused(f"not a SQL condition sqlglot can read: {str(e).splitlines()[0] if str(e) else text}") from None


def columns(tree):
    """The column names a condition reads."""
    return sorted({c.name for c in tree.find_all(exp.Column)})


@functools.lru_cache(maxsize=64)
def compiled(text):
    """A function of an Arrow table giving the rows that pass `text` (numpy bool), compiled once."""
    tree = parse(text)

    def keep(table):
        v = _eval(tree, table)
        if isinstance(v, pa.Scalar):
            v = pa.array(np.full(table.num_rows, bool(v.as_py()) if v.is_valid else False))
        if not pa.types.is_boolean(v.type):
            raise Refused(f"{text}: not a condition (it gives {v.type}, not true or false)")
        return pc.fill_null(v, False).to_numpy(zero_copy_only=False).astype(bool)
    return keep


def check(text, schema, where):
    """Refuse (ConfigError naming `where`) a condition that reads an unknown column or does not
    evaluate to true/false on rows of `schema` ({column: Arrow type}, `ts` included)."""
    try:
        tree = parse(text)
        unknown = [c for c in columns(tree) if c not in schema]
        if unknown:
            raise Refused(f"{text}: unknown column {unknown[0]!r} (columns: {', '.join(schema)})")
        compiled(text)(pa.table({c: pa.array([], t) for c, t in schema.items()}))
    except Refused as e:
        raise ConfigError(f"{where}: {e}") from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise ConfigError(f"{where}: {text}: {str(e).splitlines()[0]}") from None


def _text(col):
    """A binary column as text (a fixed-width one without its zero padding)."""
    if pa.types.is_fixed_size_binary(col.type):
        col = pc.utf8_rtrim(pc.cast(pc.cast(col, pa.binary()), pa.string()), characters="\0")
    elif pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        col = pc.cast(col, pa.string())
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    return col


def _eval(e, t):
    if isinstance(e, exp.Paren):
        return _eval(e.this, t)
    if isinstance(e, exp.Column):
        if e.name not in t.column_names:
            raise Refused(f"{e.sql()}: no such column")
        return _text(t.column(e.name))
    if isinstance(e, exp.Literal):
        if e.is_string:
            return pa.scalar(e.name)
        return pa.scalar(_number(e.name))
    if isinstance(e, exp.Null):
        return pa.scalar(None, pa.null())
    if isinstance(e, exp.Boolean):
        return pa.scalar(bool(e.this))
    if type(e) in _CMP:
        return getattr(pc, _CMP[type(e)])(_eval(e.left, t), _eval(e.right, t))
    if isinstance(e, exp.And):
        return pc.and_kleene(_eval(e.left, t), _eval(e.right, t))
    if isinstance(e, exp.Or):
        return pc.or_kleene(_eval(e.left, t), _eval(e.right, t))
    if isinstance(e, exp.Not):
        return pc.invert(_eval(e.this, t))
    if isinstance(e, exp.Is):
        if not isinstance(e.expression, exp.Null):
            raise Refused(f"{e.sql()}: IS compares with NULL only")
        return pc.is_null(_eval(e.this, t))
    if isinstance(e, exp.Between):
        x = _eval(e.this, t)
        return pc.and_kleene(pc.greater_equal(x, _eval(e.args["low"], t)), pc.less_equal(x, _eval(e.args["high"], t)))
    if isinstance(e, exp.In):
        if e.args.get("query") is not None or e.args.get("unnest") is not None:
            raise Refused(f"{e.sql()}: IN with a subquery; list the values")
        x = _eval(e.this, t)
        vals = [_literal(v) for v in e.expressions]
        known = [v for v in vals if v is not None]
        hit = pc.is_in(x, value_set=pa.array(known)) if known else pc.equal(x, x)
        if not known:
            hit = pc.and_kleene(hit, pa.scalar(False))
        if len(known) < len(vals):          # x IN (..., NULL): unknown where not found
            hit = pc.if_else(hit, True, pa.scalar(None, pa.bool_()))
        return pc.if_else(pc.is_valid(x), hit, pa.scalar(None, pa.bool_()))   # NULL IN (...) is unknown
    if isinstance(e, (exp.Like, exp.ILike)):
        pat = e.expression
        if not (isinstance(pat, exp.Literal) and pat.is_string):
            raise Refused(f"{e.sql()}: LIKE takes a text pattern")
        hit = pc.match_like(_eval(e.this, t), pat.name, ignore_case=isinstance(e, exp.ILike))
        return pc.invert(hit) if e.args.get("negate") else hit
    if type(e) in _ARITH:
        return getattr(pc, _ARITH[type(e)])(_eval(e.left, t), _eval(e.right, t))
    if isinstance(e, exp.Div):
        return pc.divide(pc.cast(_eval(e.left, t), pa.float64()), pc.cast(_eval(e.right, t), pa.float64()))
    if isinstance(e, exp.Neg):
        return pc.negate_checked(_eval(e.this, t))
    name = (e.name if isinstance(e, exp.Anonymous) else type(e).__name__).upper()
    if isinstance(e, exp.Func) and name in _FUNCS:
        return getattr(pc, _FUNCS[name])(_eval(e.this if not isinstance(e, exp.Anonymous) else e.expressions[0], t))
    if isinstance(e, (exp.Func, exp.Anonymous)):
        raise Refused(f"{e.sql()}: a function mpi-join does not know (it knows {', '.join(_FUNCS)})")
    raise Refused(f"{e.sql()}: not a condition mpi-join evaluates (comparisons, BETWEEN, IN, IS NULL, LIKE, "
                  f"AND/OR/NOT, arithmetic)")


def _number(text):
    """A number literal's value: an integer as an int (exact), else a float."""
    return float(text) if any(c in text for c in ".eE") else int(text)


def _literal(v):
    if isinstance(v, exp.Null):
        return None
    if isinstance(v, exp.Neg) and isinstance(v.this, exp.Literal) and not v.this.is_string:
        x = _literal(v.this)
        return -x
    if isinstance(v, exp.Literal):
        return v.name if v.is_string else _number(v.name)
    if isinstance(v, exp.Boolean):
        return bool(v.this)
    raise Refused(f"{v.sql()}: IN lists values (numbers, text, NULL)")
