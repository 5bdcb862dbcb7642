"""Aggregates over join results (BiStream, Section 3.4.2): `agg(col), ... by col, ...` with sum,
count, avg, min and max, grouped by columns of either stream.

The two phases share one representation, a *view*: a structured array with one row per group
(the group columns g0, g1, ...; `n`, the pairs in the group; a0, a1, ... one running value per
aggregate: the sum for sum and avg, the least for min, the greatest for max). A join unit turns
each batch's pairs into a view and merges it into the part it has not sent yet; a merger merges
the parts it receives into the global view and writes it, finished (avg = sum / n), as a
timestamped snapshot. Merging views is associative and commutative, so the final snapshot does
not depend on how the pairs were split or batched: it equals the aggregate of the oracle's
result set (`of_pairs`). Integer sums are exact (int64); float sums may differ from the
oracle's in the last bits, which `compare` allows for.

NaN follows the rule of SQL engines such as DuckDB and PostgreSQL: NaN equals NaN as a group
key and sorts above every number, so min skips it (NaN only when every value is NaN) and max
gives NaN when any value is NaN; sum and avg give NaN. The units, the merger and the oracle all
reduce through `reduce`, so they agree on it.
"""
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

FUNCTIONS = ("sum", "count", "avg", "min", "max")
_ITEM = re.compile(r"^(sum|count|avg|min|max)\s*\(\s*([^()]*?)\s*\)$", re.I)


@dataclass(frozen=True)
class Spec:
    text: str
    groups: tuple       # ((stream index, column), ...)
    aggs: tuple         # ((function, stream index or None for count(*), column or None), ...)
    stream_names: tuple

    @property
    def columns(self):
        """(stream, column) pairs a unit must read for every result pair."""
        cols = list(self.groups) + [(s, c) for _, s, c in self.aggs if c is not None]
        return list(dict.fromkeys(cols))

    def label(self, s, c):
        return f"{self.stream_names[s]}.{c}"

    def out_names(self):
        """Column names of a finished snapshot: the group columns, then one per aggregate."""
        return ([self.label(s, c) for s, c in self.groups] +
                [f"{fn}({'*' if c is None else self.label(s, c)})" for fn, s, c in self.aggs])


def parse(text, streams, where="strategy.aggregate"):
    """The spec `text` (e.g. "sum(S.v), count(*), avg(R.v) by R.k") over `streams` (config
    Stream list). One-line ConfigError naming the item that is wrong."""
    names = [s.name for s in streams]
    body, by = _split_by(text)

    def column(ref, item):
        stream, dot, col = ref.partition(".")
        if not dot or stream not in names:
            raise ConfigError(f"{where}: {item}: expected a column as STREAM.COLUMN with STREAM one of "
                              f"{', '.join(names)}, got {ref!r}")
        s = names.index(stream)
        dt = streams[s].dtype
        if col not in dt.names:
            raise ConfigError(f"{where}: {item}: stream {stream} has no column {col!r} (columns: "
                              f"{', '.join(dt.names)})")
        return s, col, dt[col]

    aggs = []
    for item in [i.strip() for i in body.split(",") if i.strip()]:
        m = _ITEM.fullmatch(item)
        if not m:
            raise ConfigError(f"{where}: {item!r} is not one of {', '.join(f + '(STREAM.COLUMN)' for f in FUNCTIONS)} "
                              f"or count(*)")
        fn, ref = m.group(1).lower(), m.group(2)
        if ref == "*":
            if fn != "count":
                raise ConfigError(f"{where}: {item}: only count takes *")
            aggs.append((fn, None, None))
            continue
        s, col, dt = column(ref, item)
        if dt.shape or dt.kind not in "iufb":
            raise ConfigError(f"{where}: {item}: {ref} is {dt}, {fn} needs a numeric column")
        aggs.append((fn, s, col) if fn != "count" else ("count", None, None))
    if not aggs:
        raise ConfigError(f"{where}: no aggregate given, e.g. \"sum(S.v), count(*) by R.k\"")
    groups = []
    for ref in [r.strip() for r in by.split(",") if r.strip()]:
        s, col, dt = column(ref, f"by {ref}")
        if dt.shape:
            raise ConfigError(f"{where}: by {ref}: a group column must be a scalar, got {dt}")
        if (s, col) in groups:
            raise ConfigError(f"{where}: by {ref}: the column is named twice")
        groups.append((s, col))
    spec = Spec(text.strip(), tuple(groups), tuple(aggs), tuple(names))
    out = spec.out_names()
    twice = next((n for k, n in enumerate(out) if n in out[:k]), None)
    if twice is not None:
        raise ConfigError(f"{where}: {twice} is asked for twice (count of a column counts the pairs, as count(*))"
                          if twice == "count(*)" else f"{where}: {twice} is asked for twice")
    return spec


def _split_by(text):
    parts = re.split(r"\s+(?:group\s+)?by\s+", text.strip(), maxsplit=1, flags=re.I)
    return (parts[0], parts[1] if len(parts) > 1 else "")


def _value_dtype(fn, dt):
    if fn in ("sum", "avg"):
        return np.float64 if dt.kind == "f" or fn == "avg" else np.int64
    return np.float64 if dt.kind == "f" else np.int64


def view_dtype(spec, dtypes):
    """The view's row: group columns as the streams hold them, n, one value per aggregate."""
    fields = [(f"g{k}", dtypes[s][c]) for k, (s, c) in enumerate(spec.groups)] + [("n", np.int64)]
    fields += [(f"a{k}", _value_dtype(fn, dtypes[s][c]) if c is not None else np.int64)
               for k, (fn, s, c) in enumerate(spec.aggs)]
    return np.dtype(fields)


def view(spec, dtype, values, n):
    """The view of n result pairs; values[(stream, column)] is that column of each pair."""
    rows = np.zeros(n, dtype)
    for k, sc in enumerate(spec.groups):
        rows[f"g{k}"] = values[sc]
    rows["n"] = 1
    for k, (fn, s, c) in enumerate(spec.aggs):
        if c is not None:
            rows[f"a{k}"] = values[(s, c)]
    return reduce(spec, rows)


def reduce(spec, rows):
    """Rows of a view (several per group) to one row per group, in group order."""
    dt = rows.dtype
    if not len(rows):
        return rows
    g = [f"g{k}" for k in range(len(spec.groups))]
    if g:
        uniq, inv = np.unique(group_keys(rows, g), return_inverse=True)
        inv = inv.reshape(-1)
        first = np.zeros(len(uniq), np.intp)
        first[inv[::-1]] = np.arange(len(rows))[::-1]          # a row of each group, for its key
    else:
        uniq, inv = None, np.zeros(len(rows), np.intp)
    out = np.zeros(len(uniq) if g else 1, dt)
    for f in g:
        out[f] = rows[f][first]
    np.add.at(out["n"], inv, rows["n"])
    for k, (fn, _, c) in enumerate(spec.aggs):
        a, col = out[f"a{k}"], rows[f"a{k}"]
        if fn in ("sum", "avg"):
            np.add.at(a, inv, col)
        elif fn == "min":               # NaN above every number: skipped unless all are NaN
            if a.dtype.kind == "f":
                a[:] = np.nan
                np.fmin.at(a, inv, col)
            else:
                a[:] = np.iinfo(a.dtype).max
                np.minimum.at(a, inv, col)
        elif fn == "max":               # NaN above every number: any NaN makes the max NaN
            a[:] = -np.inf if a.dtype.kind == "f" else np.iinfo(a.dtype).min
            np.maximum.at(a, inv, col)
    return out


def group_keys(rows, fields):
    """Sortable keys of `rows`' group columns on which NaN equals NaN and sorts above every
    number: a float column becomes (is NaN, value with NaN as 0)."""
    parts = []
    for f in fields:
        if rows.dtype[f].kind == "f":
            nan = np.isnan(rows[f])
            parts += [(f"{f}_nan", nan.astype(np.uint8)), (f, np.where(nan, 0, rows[f]))]
        else:
            parts.append((f, rows[f]))
    keys = np.empty(len(rows), np.dtype([(n, v.dtype) for n, v in parts]))
    for n, v in parts:
        keys[n] = v
    return keys


def merge(spec, *views):
    """One view of several (associative, commutative)."""
    views = [v for v in views if v is not None and len(v)]
    if not views:
        return None
    return views[0] if len(views) == 1 else reduce(spec, np.concatenate(views))


def finish(spec, v, dtypes):
    """A view as the user reads it: group columns, then each aggregate (avg = sum / n; count = n)."""
    names = spec.out_names()
    fields = [(names[k], dtypes[s][c]) for k, (s, c) in enumerate(spec.groups)]
    fields += [(names[len(spec.groups) + k], np.float64 if fn == "avg" else
                (np.int64 if fn == "count" else v.dtype[f"a{k}"])) for k, (fn, _, _) in enumerate(spec.aggs)]
    out = np.zeros(0 if v is None else len(v), np.dtype(fields))
    if v is None:
        return out
    for k in range(len(spec.groups)):
        out[names[k]] = v[f"g{k}"]
    for k, (fn, _, _) in enumerate(spec.aggs):
        name = names[len(spec.groups) + k]
        out[name] = v["n"] if fn == "count" else (v[f"a{k}"] / v["n"] if fn == "avg" else v[f"a{k}"])
    return out


def of_pairs(spec, arrays, pairs, dtypes=None):
    """The aggregate of result pairs (an (r, 2) seq array) over the staged `arrays`: what the
    final snapshot must equal."""
    values = {}
    for s, c in spec.columns:
        a = arrays[s]
        order = np.argsort(a["seq"], kind="stable")
        values[(s, c)] = a[c][order][np.searchsorted(a["seq"][order], pairs[:, s])]
    dts = dtypes or [a.dtype for a in arrays]
    return finish(spec, view(spec, view_dtype(spec, dts), values, len(pairs)), dts)


def compare(spec, expected, got, rtol=1e-9):
    """None when two finished aggregates agree (groups and counts exactly, integer values
    exactly, float values within rtol), else the first difference in words."""
    names = spec.out_names()
    if len(expected) != len(got):
        return f"{len(got)} groups, expected {len(expected)}"
    gnames = names[:len(spec.groups)]
    if gnames:                   # by group key (NaN equal to NaN), not by row position
        expected, got = (a[np.argsort(group_keys(a, gnames), kind="stable")] for a in (expected, got))
        for name in gnames:
            e, g = expected[name], got[name]
            same = ((e == g) | (np.isnan(e) & np.isnan(g))) if e.dtype.kind == "f" else e == g
            if not np.all(same):
                i = int(np.flatnonzero(~same)[0])
                return f"group {name}={g[i]} where {name}={e[i]} was expected (the groups differ)"
    for name in names:
        e, g = expected[name], got[name]
        same = np.isclose(e, g, rtol=rtol, atol=0, equal_nan=True) if e.dtype.kind == "f" else e == g
        if not np.all(same):
            i = int(np.flatnonzero(~same)[0])
            group = ", ".join(f"{names[k]}={expected[names[k]][i]}" for k in range(len(spec.groups))) or "all"
            return f"{name} of group ({group}) is {g[i]}, expected {e[i]}"
    return None
