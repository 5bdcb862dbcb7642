"""The join written as one SQL SELECT, as Flink and DuckDB users write it, read by sqlglot (a
maintained SQL parser) into the job file's own [predicate] table: the TOML form below is what
the loader then checks and runs, so a SQL job and its TOML twin are one job.

    SELECT * FROM trades t JOIN quotes q
      ON t.sym = q.sym AND q.ts BETWEEN t.ts - INTERVAL '5' SECOND AND t.ts
    ==  equi = [["trades.sym", "quotes.sym"]]
        interval = { left = "trades", right = "quotes", lower = "-5s", upper = "0s", closed = "both" }

What it takes: the streams as tables (each once, by name, with an optional alias), joined by
JOIN ... ON, by commas with a WHERE, or both, and for psp three or more of them; a condition
that is an AND of
  a.x = b.y                                       equi
  ABS(a.x - b.y) < eps (or <=), a.x BETWEEN b.y - eps AND b.y + eps      band (open, closed)
  b.ts BETWEEN a.ts + lo AND a.ts + hi,  b.ts >= a.ts + lo (> for open) and b.ts <= a.ts + hi
                                                  interval (b.ts - a.ts within [lo, hi])
with `ts` (or the stream's raw time column) as each stream's event time and lo, hi as INTERVAL
'n' UNIT (or a number in the job's ts_unit). A condition whose columns are all of one stream
(comparisons, IN, IS NULL, LIKE, arithmetic, OR and NOT among them) is that stream's filter,
applied to its rows before the join (join/filters.py: `filter = { s = "..." }`). A SELECT list
of columns (`t.x`, `t.x AS y`, `t.*` as `<stream>_<column>`, a name only one stream has; `ts` the event time, `seq` the
tuple number) is the result's columns for `collect --with-payload` (`select = [[name,
"stream.column"], ...]`). Anything else is refused with one line naming the clause: OR between
streams, an expression in the SELECT list, GROUP BY, ORDER BY, LIMIT, a subquery, ... `A LEFT
JOIN B ON ...` keeps A's tuples without a partner (outer = ["A"]), RIGHT keeps B's, FULL both;
its one-stream conditions go in ON (a kept row that fails them is kept without a partner, as
SQL's ON says), and a WHERE beside an outer join is refused."""
import json

import sqlglot
from sqlglot import exp

from ..errors import ConfigError

# what a SQL text may hold: its parser and the tree walks recurse, so a deeper or longer
# condition is refused with one line instead of a RecursionError traceback
MAX_DEPTH = 32          # parentheses nested (about 45 overflowed the parser)
MAX_CONDITIONS = 256    # conditions joined by AND

UNITS = {"MICROSECOND": "us", "MILLISECOND": "ms", "SECOND": "s", "MINUTE": "min", "HOUR": "h", "DAY": "d"}


class _Refused(Exception):
    pass


def _no(what):
    raise _Refused(what)


def predicate_table(sql, streams, ts_unit, time_columns=None, schemas=None):
    """The [predicate] table (equi, band, interval, filter, select) that `sql` says, for a job
    with these stream names; `time_columns`: {stream: its raw time column}, also read as its event
    time; `schemas`: {stream: its schema's column names} (a SELECT list's columns are resolved
    against them). Raises ConfigError("predicate.sql: ...") naming what it cannot express."""
    try:
        _limits(sql)
        return _translate(_plain_interval_numbers(sql) if isinstance(sql, str) else sql, list(streams), ts_unit,
                          time_columns or {}, schemas or {})
    except _Refused as e:
        raise ConfigError(f"predicate.sql: {e}") from None
    except RecursionError:
        raise ConfigError("predicate.sql: nested too deeply to read; write the conditions as a flat AND") from None
    except sqlglot.errors.ParseError as e:
        first = str(e).splitlines()[0] if str(e) else "cannot parse it"
        raise ConfigError(f"predicate.sql: not a SQL SELECT sqlglot can read: {first}") from None


def _limits(sql):
    """Refuse a text nested deeper than MAX_DEPTH parentheses or with more than MAX_CONDITIONS
    ANDs (outside quoted text) before it is parsed."""
    if not isinstance(sql, str):
        return
    import re
    bare = re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", "''", sql)     # quoted text and names count for nothing
    depth = deepest = 0
    for c in bare:
        if c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
    if deepest > MAX_DEPTH:
        _no(f"parentheses nested {deepest:,} deep; at most {MAX_DEPTH}")
    ands = len(re.findall(r"\bAND\b", bare, re.IGNORECASE))
    if ands + 1 > MAX_CONDITIONS:
        _no(f"{ands + 1:,} conditions joined by AND; at most {MAX_CONDITIONS}")


def _translate(sql, names, ts_unit, time_columns, schemas):
    if not isinstance(sql, str) or not sql.strip():
        _no("expected one SELECT ... FROM ... statement as text")
    trees = [t for t in sqlglot.parse(sql) if t is not None]
    if len(trees) != 1:
        _no(f"expected one statement, found {len(trees)}")
    q = trees[0]
    if not isinstance(q, exp.Select):
        _no(f"expected a SELECT, found {q.key.upper()}")
    for arg, what in (("group", "GROUP BY"), ("having", "HAVING"), ("order", "ORDER BY"), ("limit", "LIMIT"),
                      ("offset", "OFFSET"), ("distinct", "SELECT DISTINCT"), ("with", "WITH"),
                      ("windows", "WINDOW"), ("qualify", "QUALIFY")):
        if q.args.get(arg):
            _no(f"{what}: the join's result is its matching pairs; aggregate or order them after `collect`")
    for e in q.expressions:
        if e.find(exp.AggFunc):
            _no(f"an aggregate in the SELECT list ({e.sql()}): the join's result is its matching pairs")
        if e.find(exp.Subquery, exp.Select) and e is not q:
            _no(f"a subquery in the SELECT list ({e.sql()})")
    alias = {}

    def table(t):
        if not isinstance(t, exp.Table):
            _no(f"FROM {t.sql()}: only the job's streams, by name, can be joined (no subquery or function)")
        if t.args.get("db") or t.args.get("catalog"):
            _no(f"FROM {t.sql()}: a stream is named without a schema or catalog")
        name = t.name
        if name not in names:
            _no(f"FROM {name}: not a stream of this job ({', '.join(names)})")
        if name in alias.values():
            _no(f"FROM {name}: the stream appears twice; a self-join is not supported")
        a = t.alias_or_name
        if a in alias:
            _no(f"FROM {t.sql()}: the alias {a!r} is given twice")
        alias[a] = name

    frm = q.args.get("from_") or q.args.get("from")
    if frm is None:
        _no("no FROM clause: name the streams to join")
    table(frm.this)
    conds, outer = [], []
    joins = q.args.get("joins") or []
    asof = None                      # (left stream, right stream): an ASOF JOIN
    for j in joins:
        side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
        if (j.args.get("method") or "").upper() == "ASOF":
            if len(joins) != 1 or j.args.get("on") is None or side not in ("", "LEFT"):
                _no(f"ASOF {side + ' ' if side else ''}JOIN: an ASOF join is of two streams, inner or LEFT, with its "
                    f"conditions in ON")
            asof = (alias[frm.this.alias_or_name], j.this.name)
            outer = [asof[0]] if side == "LEFT" else []
            if side == "LEFT" and q.args.get("where") is not None:
                _no(f"ASOF LEFT JOIN with WHERE {q.args['where'].this.sql()}: put a condition on one stream in ON")
        elif side in ("LEFT", "RIGHT", "FULL") or kind == "OUTER":
            if len(joins) != 1 or j.args.get("on") is None:
                _no(f"{side or kind} JOIN: an outer join is of two streams, with its conditions in ON (a join of "
                    f"more streams is not supported)")
            if q.args.get("where") is not None:
                _no(f"{side or kind} JOIN with WHERE {q.args['where'].this.sql()}: a WHERE filters the outer "
                    f"join's result, which mpi-join does not do; put a condition on one stream in ON (a kept row "
                    f"that fails it is kept without a partner)")
            if side not in ("LEFT", "RIGHT", "FULL"):
                _no(f"{kind} JOIN: say which side is kept: LEFT, RIGHT or FULL OUTER JOIN")
            first, other = alias[frm.this.alias_or_name], j.this.name
            outer = {"LEFT": [first], "RIGHT": [other], "FULL": [first, other]}[side]
        if kind in ("SEMI", "ANTI", "NATURAL") or j.args.get("using"):
            _no(f"{kind or 'USING'} join: write JOIN ... ON with the conditions")
        if kind == "CROSS" and j.args.get("on"):
            _no("CROSS JOIN with ON")
        table(j.this)
        if j.args.get("on") is not None:
            conds.append(j.args["on"])
    if q.args.get("where") is not None:
        conds.append(q.args["where"].this)
    if len(alias) < 2:
        _no("one stream: a join needs two or more")
    if len(alias) != len(names):
        _no(f"the job has streams {', '.join(names)}, the SELECT joins {', '.join(alias.values())}")
    atoms = []
    for c in conds:
        atoms += _conjuncts(c)
    if not atoms:
        _no("no condition between the streams (a cross product); give ON or WHERE conditions")
    out = {"equi": [], "band": []}
    times = {}                       # (left stream, right stream) -> {"lower": (value, closed), "upper": ...}
    filters = {}                     # stream -> its own conditions
    for a in atoms:
        one = _one_stream(a, alias, time_columns)
        if one is not None:
            filters.setdefault(one[0], []).append(one[1])
        else:
            _atom(a, alias, time_columns, ts_unit, out, times)
    if not any(out.values()) and not times:
        _no("no condition between the streams (a cross product); give ON or WHERE conditions that relate them")
    if asof is not None:
        out["asof"] = _asof(asof, times, out)
        times = {}
    out["filter"] = {n: " AND ".join(f"({c})" if len(conds) > 1 else c for c in conds)
                     for n, conds in filters.items()}
    out["select"] = _select_list(q.expressions, alias, schemas, time_columns)
    for (left, right), b in times.items():
        if "interval" in out:
            _no("time conditions between more than one pair of streams: give the other streams windows")
        if set(b) != {"lower", "upper"}:
            _no(f"a time condition between {left} and {right} bounds one side only; give both "
                f"(BETWEEN lo AND hi, or >= and <=)")
        (lo, lo_closed), (hi, hi_closed) = b["lower"], b["upper"]
        closed = {(True, True): "both", (False, False): "neither", (True, False): "left", (False, True): "right"}
        out["interval"] = {"left": left, "right": right, "lower": lo, "upper": hi,
                           "closed": closed[(lo_closed, hi_closed)]}
    out["outer"] = outer
    return {k: v for k, v in out.items() if v}


def _asof(sides, times, out):
    """The [predicate] asof table of an ASOF JOIN's time conditions, as DuckDB writes them
    (`t.ts >= q.ts`: backward; `t.ts <= q.ts`: forward; `>`/`<`: equal times do not match), with
    an optional tolerance as a second bound (`q.ts >= t.ts - INTERVAL '5' SECOND`)."""
    left, right = sides
    if out["band"]:
        _no("ASOF JOIN: its conditions are equal keys and one event-time comparison; no band")
    if set(times) - {(left, right), (right, left)} or not times:
        _no(f"ASOF JOIN: compare the two streams' event times ({left}.ts >= {right}.ts)")
    b = dict(times.get((left, right), {}))         # bounds on right.ts - left.ts
    for which, (v, closed) in times.get((right, left), {}).items():   # left.ts - right.ts: the other way round
        b["upper" if which == "lower" else "lower"] = (_negated(v), closed)
    lo, up = b.get("lower"), b.get("upper")
    zero = {k for k, v in (("lower", lo), ("upper", up)) if v is not None and v[0] == "0s"}
    if zero == {"upper"} or (zero == {"lower", "upper"} and up[1] is False):
        direction, closed, tol = "backward", up[1], lo
    elif zero == {"lower"}:
        direction, closed, tol = "forward", lo[1], up
    else:
        _no(f"ASOF JOIN: its time condition reads {left}.ts >= {right}.ts (backward) or {left}.ts <= {right}.ts "
            f"(forward), with an optional tolerance as a second bound")
    table = {"left": left, "right": right, "direction": direction, "closed": closed}
    if tol is not None:
        if not tol[1]:
            _no("ASOF JOIN: a tolerance bound is inclusive (>= or <=)")
        table["tolerance"] = tol[0].lstrip("-")
    return table


def _conjuncts(c):
    if isinstance(c, exp.Paren):
        return _conjuncts(c.this)
    if isinstance(c, exp.And):
        return _conjuncts(c.left) + _conjuncts(c.right)
    tables = {x.table for x in c.find_all(exp.Column)}
    if isinstance(c, exp.Or) and len(tables) != 1:
        _no(f"OR ({c.sql()}): conditions between streams must all hold (AND); an OR may join conditions on "
            f"one stream")
    if isinstance(c, exp.Not) and len(tables) != 1:
        _no(f"NOT ({c.sql()}): conditions between streams must hold as written; NOT may negate a condition on "
            f"one stream")
    return [c]


def _one_stream(a, alias, time_columns):
    """(stream, the condition `a` as its filter's text, columns unqualified) when every column
    `a` reads is of one stream: applied to that stream's rows before the join (join/filters.py);
    else None."""
    cols = list(a.find_all(exp.Column))
    refs = {_col(c, alias) for c in cols}
    if len({r[0] for r in refs}) != 1:
        if not cols:
            _no(f"{a.sql()}: a condition without a column of any stream")
        return None
    stream = next(iter(refs))[0]
    for c in cols:
        if c.name != "ts" and c.name == time_columns.get(stream):
            _no(f"{a.sql()}: a condition on one stream's event time reads its ts ({c.table}.ts, a number in the "
                f"job's ts_unit), not the raw column")

    def bare(n):
        return exp.column(n.name, quoted=n.this.quoted if isinstance(n.this, exp.Identifier) else False) \
            if isinstance(n, exp.Column) else n
    return stream, a.copy().transform(bare).sql()


def _select_list(items, alias, schemas, time_columns):
    """[[name, "stream.column"], ...] of a SELECT list that names columns (empty for SELECT *):
    qualified columns, `t.*` (its stream's ts and schema columns, named `<stream>_<column>` as
    SELECT * names them), columns whose name is one stream's only, each with an optional alias;
    `ts` (or the stream's raw time column) is its event time, `seq` its tuple number."""
    if all(isinstance(e, exp.Star) for e in items):
        return []
    out = []
    for e in items:
        name = e.alias if isinstance(e, exp.Alias) else None
        c = e.this if isinstance(e, exp.Alias) else e
        if isinstance(c, exp.Star):
            _no("SELECT * with other columns: name the columns, or t.* for all of one stream's")
        if isinstance(c, exp.Column) and isinstance(c.this, exp.Star):
            if c.table not in alias:
                _no(f"SELECT {c.sql()}: {c.table!r} is not a stream or alias of the FROM clause")
            s = alias[c.table]
            out += [[f"{s}_{x}", f"{s}.{x}"] for x in ["ts", *schemas.get(s, [])]]    # as SELECT * names them
            continue
        if not isinstance(c, exp.Column):
            _no(f"SELECT {e.sql()}: the result's columns are the streams' columns (with an alias); compute "
                f"others from the collected result")
        if c.table:
            s = _col(c, alias)[0]
        else:
            owners = [s for s in alias.values() if c.name in ("ts", "seq", *schemas.get(s, []))]
            if len(owners) != 1:
                _no(f"SELECT {c.sql()}: " + (f"a column of {' and '.join(owners)}; qualify it" if owners else
                                             f"no stream has a column {c.name!r}"))
            s = owners[0]
        out.append([name or c.name, f"{s}.{'ts' if c.name == time_columns.get(s) else c.name}"])
    return out


def _col(e, alias):
    """(stream, column) of a qualified column reference, else None."""
    if not isinstance(e, exp.Column):
        return None
    t = e.table
    if not t:
        _no(f"{e.sql()}: qualify the column with its stream or alias (t.{e.name})")
    if t not in alias:
        _no(f"{e.sql()}: {t!r} is not a stream or alias of the FROM clause")
    return alias[t], e.name


def _is_time(ref, time_columns):
    return ref is not None and ref[1] in ("ts", time_columns.get(ref[0]))


def _offset(e, alias, time_columns, ts_unit):
    """(stream, duration text) of `s.ts`, `s.ts + d` or `s.ts - d`, else None."""
    ref = _col(e, alias)
    if ref is not None:
        return (ref[0], "0s") if _is_time(ref, time_columns) else None
    if isinstance(e, (exp.Add, exp.Sub)):
        ref = _col(e.left, alias)
        if ref is None or not _is_time(ref, time_columns):
            return None
        d = _duration(e.right, ts_unit)
        return ref[0], (("-" + d) if isinstance(e, exp.Sub) and d != "0s" else d)
    return None


def _duration(e, ts_unit):
    """A duration as the job file writes it ("5s", "250ms", or a number in the job's ts_unit)."""
    if isinstance(e, exp.Paren):
        return _duration(e.this, ts_unit)
    if isinstance(e, exp.Interval):
        unit = e.unit.name.upper() if e.unit is not None else ""
        unit = unit[:-1] if unit.endswith("S") else unit                  # SECONDS as SECOND
        if unit not in UNITS:
            _no(f"{e.sql()}: interval unit {unit or '(none)'}; use one of {', '.join(UNITS)}")
        n = _exact(e, e.this.name if isinstance(e.this, exp.Literal) else None, f"INTERVAL 'n' UNIT with a number n")
        if n < 0:
            _no(f"{e.sql()}: expected a non-negative number of {unit.lower()}s")
        if n != int(n):                      # Flink writes 250 ms as INTERVAL '0.25' SECOND
            return f"{format(n, 'f')}{UNITS[unit]}"
        return f"{int(n)}{UNITS[unit]}" if n else "0s"
    if isinstance(e, exp.Literal) and not e.is_string:
        n = _exact(e, e.name, f"a number of {ts_unit}")
        if n != int(n) or n < 0:
            _no(f"{e.sql()}: expected a whole, non-negative number of {ts_unit} (or INTERVAL 'n' UNIT)")
        return f"{int(n)}{ts_unit}" if n else "0s"
    _no(f"{e.sql()}: expected a duration (INTERVAL '5' SECOND, or a number of {ts_unit})")


def _signed_ns(text):
    """A duration text of _offset ("-5s", "250ms", "0s") as exact signed nanoseconds."""
    from ..units import parse_duration
    neg = text.startswith("-")
    ns = parse_duration(text[1:] if neg else text, "predicate.sql")
    return -ns if neg else ns


def _plain_interval_numbers(sql):
    """`INTERVAL '1e3' MILLISECOND` with its number written plainly ('1000'): sqlglot reads an
    exponent in an interval's text as a unit ('1' E). Exact (Decimal)."""
    import re
    from decimal import Decimal, InvalidOperation

    def plain(m):
        try:
            return f"INTERVAL '{format(Decimal(m.group(1)), 'f')}'"
        except InvalidOperation:
            return m.group(0)
    return re.sub(r"(?i)INTERVAL\s+'\s*([+-]?\d+(?:\.\d*)?[eE][+-]?\d+)\s*'", plain, sql)


def _exact(e, text, what):
    """The number `text` of the expression `e` read exactly (a Decimal: an integer above 2^53
    stays that integer, where a float would read another duration); a non-finite one refused."""
    from decimal import Decimal, InvalidOperation
    try:
        n = Decimal(str(text).strip())
    except (InvalidOperation, ValueError):
        _no(f"{e.sql()}: expected {what}")
    if not n.is_finite() or abs(n.adjusted()) > 30:
        _no(f"{e.sql()}: {str(text).strip()[:40]} is out of range (a duration's magnitude is at most 10^30)")
    return n


def _number(e):
    if isinstance(e, exp.Neg):
        _no(f"{e.sql()}: a band's width must be positive")
    if isinstance(e, exp.Literal) and not e.is_string:
        if any(c in e.name for c in ".eE"):
            v = float(e.name)
            if v != v or v in (float("inf"), float("-inf")):
                _no(f"{e.sql()}: {e.name[:40]} is not a finite number (a band's width)")
            return v
        return int(e.name)
    _no(f"{e.sql()}: expected a number (a band's width)")


def _atom(a, alias, time_columns, ts_unit, out, times):
    where = a.sql()
    if isinstance(a, exp.EQ):
        l, r = _col(a.left, alias), _col(a.right, alias)
        if l is not None and r is not None and _is_time(l, time_columns) and _is_time(r, time_columns):
            # equal event times: b.ts - a.ts in [0, 0], an interval (ts is no column of the schema)
            _time_bound(times, l[0], r[0], "lower", "0s", True, where)
            _time_bound(times, l[0], r[0], "upper", "0s", True, where)
            return
        if l is None or r is None:
            _no(f"{where}: a filter on one stream, or an expression; an equality joins two columns "
                f"(a.x = b.y); filter rows when staging")
        if l[0] == r[0]:
            _no(f"{where}: both sides are in stream {l[0]!r}; a condition relates two streams")
        out["equi"].append([f"{l[0]}.{l[1]}", f"{r[0]}.{r[1]}"])
        return
    if isinstance(a, exp.Between):
        lo_e, hi_e = a.args["low"], a.args["high"]
        x = _col(a.this, alias)
        if x is not None and _is_time(x, time_columns):
            lo, hi = _offset(lo_e, alias, time_columns, ts_unit), _offset(hi_e, alias, time_columns, ts_unit)
            if lo is None or hi is None or lo[0] != hi[0]:
                _no(f"{where}: a time condition reads b.ts BETWEEN a.ts - d1 AND a.ts + d2")
            if a.args.get("symmetric") and _signed_ns(lo[1]) > _signed_ns(hi[1]):
                lo, hi = hi, lo                  # BETWEEN SYMMETRIC: between the smaller and the larger
            _time_bound(times, lo[0], x[0], "lower", lo[1], True, where)
            _time_bound(times, lo[0], x[0], "upper", hi[1], True, where)
            return
        if x is not None and isinstance(lo_e, exp.Sub) and isinstance(hi_e, exp.Add):
            y1, y2 = _col(lo_e.left, alias), _col(hi_e.left, alias)
            e1, e2 = _number(lo_e.right), _number(hi_e.right)
            if y1 is not None and y1 == y2 and e1 == e2:
                _band(out, x, y1, e1, True, where)
                return
        _no(f"{where}: BETWEEN reads b.y BETWEEN a.x - eps AND a.x + eps (a band) or b.ts BETWEEN a.ts - d1 "
            f"AND a.ts + d2 (an interval)")
    if isinstance(a, (exp.LT, exp.LTE, exp.GT, exp.GTE)):
        closed = isinstance(a, (exp.LTE, exp.GTE))
        left, right = (a.left, a.right) if isinstance(a, (exp.LT, exp.LTE)) else (a.right, a.left)
        if isinstance(left, exp.Abs) or (isinstance(left, exp.Anonymous) and left.name.upper() == "ABS"):
            arg = left.this if isinstance(left, exp.Abs) else left.expressions[0]
            if isinstance(arg, exp.Paren):
                arg = arg.this
            if isinstance(arg, exp.Sub):
                x, y = _col(arg.left, alias), _col(arg.right, alias)
                if x is not None and y is not None:
                    _band(out, x, y, _number(right), closed, where)
                    return
            _no(f"{where}: a band reads ABS(a.x - b.y) < eps")
        # a time bound: small <= big, where one side is s.ts and the other t.ts +- d
        small, big = (_offset(left, alias, time_columns, ts_unit), _offset(right, alias, time_columns, ts_unit))
        if small is not None and big is not None:
            if _col(right, alias) is not None and _col(left, alias) is not None:
                # a.ts < b.ts: b.ts - a.ts > 0
                _time_bound(times, small[0], big[0], "lower", "0s", closed, where)
                return
            if _col(right, alias) is not None:       # a.ts + d <= b.ts: b.ts - a.ts >= d
                _time_bound(times, small[0], big[0], "lower", small[1], closed, where)
                return
            if _col(left, alias) is not None:        # b.ts <= a.ts + d: b.ts - a.ts <= d
                _time_bound(times, big[0], small[0], "upper", big[1], closed, where)
                return
        _no(f"{where}: a comparison other than a band (ABS(a.x - b.y) < eps) or an event-time bound "
            f"(b.ts >= a.ts - d)")
    if isinstance(a, exp.NEQ):
        _no(f"{where}: <> is not a condition mpi-join joins on (equi, band or interval)")
    if isinstance(a, (exp.Like, exp.ILike, exp.In, exp.Is)):
        _no(f"{where}: {a.key.upper()} relates two streams; such a condition is on one stream's columns")
    if isinstance(a, (exp.Func, exp.Anonymous)) or a.find(exp.Subquery, exp.Exists):
        _no(f"{where}: a function or subquery as a condition; a user-defined condition is a theta UDF in the "
            f"TOML form ([predicate] theta)")
    _no(f"{where}: not an equality, band or time condition")


def _band(out, x, y, eps, closed, where):
    if x[0] == y[0]:
        _no(f"{where}: both sides are in stream {x[0]!r}; a condition relates two streams")
    out["band"].append({"left": f"{x[0]}.{x[1]}", "right": f"{y[0]}.{y[1]}", "eps": eps, "closed": closed})


def _negated(value):
    """A duration text of _offset ("5s", "-250ms", "0s") with its sign turned."""
    return value[1:] if value.startswith("-") else (value if value == "0s" else "-" + value)


def _time_bound(times, a, b, which, value, closed, where):
    """b.ts - a.ts >= value (lower) or <= value (upper), kept per ordered pair of streams."""
    if a == b:
        _no(f"{where}: both sides are in stream {a!r}; a condition relates two streams")
    key, flip = ((a, b), False) if (b, a) not in times else ((b, a), True)
    if flip:                                   # a.ts - b.ts: the other bound of the other pair
        which = "upper" if which == "lower" else "lower"
        value = _negated(value)
    b_ = times.setdefault(key, {})
    if which in b_:
        _no(f"{where}: a second {which} bound on {key[1]}.ts - {key[0]}.ts")
    b_[which] = (value, closed)


def as_toml(table):
    """The [predicate] table in the job file's TOML form (what `explain` prints beside the SQL)."""
    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)      # a TOML basic string (quotes escaped)
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)
    return [f"{k} = {val(v)}" for k, v in table.items() if k != "sql"]
