"""TPC-H workloads (BiStream's evaluation queries) from `tpchgen-cli` output, as raw Parquet
inputs with a job file that `mpi-join stage` (Spark) stages.

- `q5`: the most expensive join of TPC-H Q5, ORDERS placed in 1994 (Q5's date range) with
  LINEITEM on the order key; aggregate: revenue and lines per order priority.
- `q7`: the join of TPC-H Q7's LINEITEM, shipped in 1995-1996 (Q7's range), with SUPPLIER on
  the supplier key; aggregate: revenue per supplier nation.
- `band`: the paper's synthetic band join, LINEITEM L1 with LINEITEM L2 where
  |L1.orderkey - L2.orderkey| <= 1, L1.shipmode = 'TRUCK', L1.quantity > 48 and
  L2.shipinstruct = 'NONE' (the selections are applied to each stream, the band is the join);
  aggregate: count, least and greatest L2 quantity per L2 ship mode.

Each stream keeps its table's order (the key order TPC-H generates) and the two streams are
spread over the same span of event time at `rate` tuples/s in all, so matching rows arrive
close together, as a feed of both tables would deliver them. Decimals become float64, dates are
filters only, text becomes fixed-width char columns."""
import datetime
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import JobError


@dataclass(frozen=True)
class Side:
    name: str            # the stream's name in the job
    table: str           # the TPC-H table
    where: object        # pyarrow table -> boolean mask, or None
    columns: tuple       # ((column, TPC-H column, schema type), ...)


@dataclass(frozen=True)
class Query:
    doc: str
    sides: tuple
    predicate: str
    aggregate: str


def _date(y, m=1, d=1):
    return datetime.date(y, m, d)


def _between(col, lo, hi):
    def where(t):
        import pyarrow.compute as pc
        import pyarrow as pa
        v = t[col]
        return pc.and_(pc.greater_equal(v, pa.scalar(lo)), pc.less(v, pa.scalar(hi)))
    return where


def _band_l1(t):
    import pyarrow.compute as pc
    return pc.and_(pc.equal(t["l_shipmode"].cast("string"), "TRUCK"), pc.greater(t["l_quantity"], 48))


def _band_l2(t):
    import pyarrow.compute as pc
    return pc.equal(t["l_shipinstruct"].cast("string"), "NONE")


_LINE = (("orderkey", "l_orderkey", "int64"), ("suppkey", "l_suppkey", "int64"),
         ("price", "l_extendedprice", "float64"), ("quantity", "l_quantity", "float64"))

QUERIES = {
    "q5": Query("ORDERS of 1994 joined with LINEITEM on the order key (TPC-H Q5's most expensive join)",
                (Side("O", "orders", _between("o_orderdate", _date(1994), _date(1995)),
                      (("orderkey", "o_orderkey", "int64"), ("custkey", "o_custkey", "int64"),
                       ("total", "o_totalprice", "float64"), ("priority", "o_orderpriority", "char15"))),
                 Side("L", "lineitem", None, _LINE)),
                'equi = [["O.orderkey", "L.orderkey"]]', "sum(L.price), count(*) by O.priority"),
    "q7": Query("LINEITEM shipped in 1995-1996 joined with SUPPLIER on the supplier key (from TPC-H Q7)",
                (Side("L", "lineitem", _between("l_shipdate", _date(1995), _date(1997)), _LINE),
                 Side("S", "supplier", None, (("suppkey", "s_suppkey", "int64"), ("nation", "s_nationkey", "int64")))),
                'equi = [["L.suppkey", "S.suppkey"]]', "sum(L.price) by S.nation"),
    "band": Query("LINEITEM L1 (TRUCK, quantity > 48) with LINEITEM L2 (instruction NONE), |orderkey| <= 1 apart",
                  (Side("L1", "lineitem", _band_l1, _LINE + (("mode", "l_shipmode", "char10"),)),
                   Side("L2", "lineitem", _band_l2, _LINE + (("mode", "l_shipmode", "char10"),))),
                  'band = [{left = "L1.orderkey", right = "L2.orderkey", eps = 1.0, closed = true}]',
                  "count(*), min(L2.quantity), max(L2.quantity) by L2.mode"),
}


def generate_tables(sf, out):
    """Run tpchgen-cli at scale factor `sf` into `out`; a one-line JobError when it is missing."""
    exe = shutil.which("tpchgen-cli") or os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
    if not os.path.exists(exe):
        raise JobError("tpchgen-cli not found: install it (pip install tpchgen-cli) or pass --tables with its output")
    os.makedirs(out, exist_ok=True)
    p = subprocess.run([exe, "parquet", "-s", str(sf), "-o", out], capture_output=True, text=True)
    if p.returncode != 0:
        raise JobError(f"tpchgen-cli -s {sf} failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return out


def read_side(tables, side, limit=0):
    """The side's rows (selection applied, columns renamed and converted) as {column: array}."""
    import pyarrow.parquet as pq
    path = os.path.join(tables, f"{side.table}.parquet")
    if not os.path.exists(path):
        raise JobError(f"{path}: not found; --tables must be a tpchgen-cli parquet output directory")
    import pyarrow as pa
    t = pq.read_table(path)
    for i, f in enumerate(t.schema):       # tpchgen-cli writes string_view, which filters cannot take
        if str(f.type) == "string_view":
            t = t.set_column(i, f.name, t.column(i).cast(pa.string()))
    if side.where is not None:
        t = t.filter(side.where(t))
    if limit:
        t = t.slice(0, limit)
    cols = {}
    for name, src, typ in side.columns:
        v = t[src]
        if typ.startswith("char"):
            cols[name] = np.array([x.encode()[:int(typ[4:])] for x in v.cast("string").to_pylist()],
                                  f"S{int(typ[4:])}")
        else:
            cols[name] = v.cast(typ).to_numpy()
    return cols, t.num_rows


def make(query, out, tables=None, sf=0.01, rate=2000.0, window="10s", limit=0, strategy=None, raw=True):
    """Write OUT/raw/<stream>/ (Parquet with an event_time column, in ms) and OUT/job.toml for
    `query`; returns (the job path, rows per stream). `limit`: at most this many rows per stream
    (0: all). raw=False writes OUT/staged/ directly instead (the benches: no Spark start-up)."""
    from ..config import parse_job
    from ..storage.staged import write_staged
    from .workloads import _merge, _toml, write_raw
    q = QUERIES[query]
    tables = tables or generate_tables(sf, os.path.join(out, "tpch"))
    sides = [read_side(tables, s, limit) for s in q.sides]
    total = sum(n for _, n in sides)
    if not all(n for _, n in sides):
        empty = next(s.name for s, (_, n) in zip(q.sides, sides) if not n)
        raise JobError(f"{tables}: stream {empty} of {query} has no rows at this scale factor; raise --sf")
    span_ms = total / rate * 1e3
    tss = [(np.arange(n) * (span_ms / n)).astype(np.int64) for _, n in sides]
    streams = ""
    for s in q.sides:
        schema = ", ".join(f'{c} = "{t}"' for c, _, t in s.columns)
        streams += (f'[streams.{s.name}]\nschema = {{ {schema} }}\nwindow = "{window}"\n' +
                    (f'raw = {{ path = "raw/{s.name}", format = "parquet", time = "event_time", time_unit = "ms" }}\n'
                     if raw else ""))
    how = ": stage it with `mpi-join stage job.toml`" if raw else ""
    from ..strategies import get, with_param
    strategy = strategy or with_param("aggregate")       # the query's aggregate, computed online
    info = get(strategy)
    agg = f'aggregate = "{q.aggregate}"\n' if info is not None and "aggregate" in info.params else ""
    text = (f'# {q.doc}\n# built from tpchgen-cli output by `mpi-join tpch {query}`{how}\n'
            f'[job]\nname = "tpch-{query}"\nts_unit = "ms"\n[input]\nstaged = "staged"\n[output]\ndir = "out"\n'
            f'{streams}[predicate]\n{q.predicate}\n[strategy]\nname = "{strategy}"\n{agg}[run]\n')
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "job.toml")
    with open(path, "w") as f:
        f.write(text)
    job = parse_job(_toml(text), path)
    arrays = []
    for st, (cols, n), ts, seq in zip(job.streams, sides, tss, _merge(tss, np.random.default_rng(0))):
        a = np.zeros(n, st.dtype)
        a["seq"], a["ts"] = seq, ts
        for c, v in cols.items():
            a[c] = v
        arrays.append(a)
        if raw:
            write_raw(os.path.join(out, "raw", st.name), a, "parquet", "ms")
    if not raw:
        write_staged(job.staged, job.streams, arrays, "ms", extra={"workload": f"tpch-{query}"})
    return path, {s.name: n for s, (_, n) in zip(q.sides, sides)}
