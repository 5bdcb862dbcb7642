"""Synthetic workloads, deterministic from a seed, written in the staged layout with a job file.

  band   CellJoin / handshake join / SplitJoin band-join benchmark (R: x,y,z; S: a,b,c,d)
  equi   the shared-nothing paper's workload: Poisson arrivals, 64-byte tuples, b-model keys
  images PSP's multi-way workload: M streams of k-pixel RGB images, similarity or coin predicate
"""
import os

import numpy as np

from ..config import parse_job
from ..storage.staged import write_staged
from ..units import ts_unit_ns

WORKLOADS = ("band", "equi", "images")


def _merge(per_stream_ts, rng):
    """Assign the global seq: order the union by (ts, stream, source order)."""
    ts = np.concatenate(per_stream_ts)
    sid = np.concatenate([np.full(len(t), k) for k, t in enumerate(per_stream_ts)])
    src = np.concatenate([np.arange(len(t)) for t in per_stream_ts])
    order = np.lexsort((src, sid, ts))
    seq = np.empty(len(ts), np.int64)
    seq[order] = np.arange(len(ts))
    out, k = [], 0
    for t in per_stream_ts:
        out.append(seq[k:k + len(t)])
        k += len(t)
    return out


def _fixed_rate_ts(n, rate, unit_ns, phase):
    return ((np.arange(n) + phase) * (1e9 / rate) / unit_ns).astype(np.int64)


def _poisson_ts(n, rate, unit_ns, rng):
    gaps = rng.exponential(1e9 / rate / unit_ns, n)
    return np.floor(np.cumsum(gaps)).astype(np.int64)


def bmodel_keys(n, bias, levels, rng):
    """b-model (Wang, Ailamaki, Faloutsos): at each of `levels` halvings a key falls in one half
    with probability `bias`; gives 80/20-like skew for bias=0.7 over 2**levels values."""
    bits = rng.random((n, levels)) >= bias
    keys = (bits.astype(np.int64) << np.arange(levels, dtype=np.int64)).sum(axis=1)
    perm = np.random.default_rng(12345).permutation(1 << levels)   # spread hot keys over the domain
    return perm[keys].astype(np.int64) + 1


def make(workload, out, tuples=20000, seed=1, rate=1000.0, window=None, skew=0.7, keys=1,
         domain_bits=14, streams=3, pixels=5000, predicate="similarity", selectivity=0.01,
         strategy=None, count_window=None, raw=None, uniform_keys=None):
    """Generate a workload under `out` (staged/ and job.toml); returns the job file path.

    With raw="csv" | "json" | "parquet", write raw files under out/raw/<stream>/ instead, with
    an event_time column, and a job file whose streams say how to stage them (mpi-join stage).
    `strategy`: by default the registry's for the workload (strategies.for_workload)."""
    if strategy is None:
        from ..strategies import for_workload
        strategy = for_workload(workload)
    rng = np.random.default_rng(seed)
    gen = {"band": _band, "equi": _equi, "images": _images}[workload]
    if uniform_keys:
        skew = ("uniform", int(uniform_keys))
    job_text, names, cols, tss, unit = gen(rng, tuples, rate, window, skew, keys, domain_bits, streams,
                                           pixels, predicate, selectivity, strategy, count_window, out)
    os.makedirs(out, exist_ok=True)
    if raw:
        job_text = _with_raw(job_text, names, raw, unit)
    job_path = os.path.join(out, "job.toml")
    with open(job_path, "w") as f:
        f.write(job_text)
    job = parse_job(_toml(job_text), job_path)
    seqs = _merge(tss, rng)
    arrays = []
    for s, c, ts, seq in zip(job.streams, cols, tss, seqs):
        a = np.empty(len(ts), s.dtype)
        a["seq"], a["ts"] = seq, ts
        for k, v in c.items():
            a[k] = v
        arrays.append(a)
    if raw:
        for st, a in zip(job.streams, arrays):
            write_raw(os.path.join(out, "raw", st.name), a, raw, unit)
    else:
        write_staged(job.staged, job.streams, arrays, unit, extra={"workload": workload, "seed": seed})
    return job_path


RAW_TIME = {"csv": None, "parquet": None, "json": "timestamp"}   # None: a number in the ts unit


def _with_raw(text, names, fmt, unit):
    tu = RAW_TIME[fmt] or unit
    for n in names:
        text = text.replace(f"[streams.{n}]\n", f'[streams.{n}]\nraw = {{ path = "raw/{n}", format = "{fmt}", '
                                                 f'time = "event_time", time_unit = "{tu}" }}\n', 1)
    return text


def write_raw(directory, arr, fmt, unit, files=2):
    """A stream's rows as raw files (event_time instead of seq/ts), split into `files` parts."""
    import base64
    import datetime
    import json
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    os.makedirs(directory, exist_ok=True)
    names = [n for n in arr.dtype.names if n not in ("seq", "ts")]
    for k, part in enumerate(np.array_split(arr, files)):
        cols = {"event_time": part["ts"]}
        for n in names:
            fd = arr.dtype.fields[n][0]
            v = part[n]
            if fd.shape:
                v = [bytes(x) for x in np.ascontiguousarray(v).reshape(len(v), -1)]
                cols[n] = v if fmt == "parquet" else [base64.b64encode(x).decode() for x in v]
            elif fd.kind == "S":
                cols[n] = [x.decode() for x in v] if fmt != "parquet" else list(v)
            else:
                cols[n] = v
        path = os.path.join(directory, f"part-{k:05d}.{'jsonl' if fmt == 'json' else fmt}")
        if fmt == "json":
            epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            per = ts_unit_ns(unit) // 1000
            with open(path, "w") as f:
                for i in range(len(part)):
                    row = {"event_time": (epoch + datetime.timedelta(microseconds=int(cols["event_time"][i]) * per))
                           .strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
                    for n in names:
                        x = cols[n][i]
                        row[n] = x.item() if hasattr(x, "item") else x
                    f.write(json.dumps(row) + "\n")
        else:
            table = pa.table({c: pa.array(v) for c, v in cols.items()})
            if fmt == "csv":
                pcsv.write_csv(table, path)
            else:
                pq.write_table(table, path)


def _toml(text):
    import tomllib
    return tomllib.loads(text)


def _split(tuples, m):
    return [tuples // m + (1 if k < tuples % m else 0) for k in range(m)]


def _window_line(window, count_window, default):
    if count_window:
        return f"{int(count_window)}"
    return f'"{window or default}"'


def _binary_job(comment, name, unit, schema_r, schema_s, window, predicate, strategy, run):
    """The job file of a two-stream workload (streams R and S, staged/ and out/ beside it)."""
    return (f'{comment}\n[job]\nname = "{name}"\nts_unit = "{unit}"\n\n[input]\nstaged = "staged"\n\n'
            f'[output]\ndir = "out"\n\n[streams.R]\nschema = {schema_r}\nwindow = {window}\n\n'
            f'[streams.S]\nschema = {schema_s}\nwindow = {window}\n\n[predicate]\n{predicate}\n\n'
            f'[strategy]\n{strategy}\n\n[run]\n{run}\n')


def _band(rng, tuples, rate, window, skew, keys, domain_bits, streams, pixels, predicate, sel,
          strategy, count_window, out):
    unit = "us"
    nr, ns = _split(tuples, 2)
    R = {"x": rng.integers(1, 10_001, nr, dtype=np.int32),
         "y": rng.uniform(1, 10_000, nr).astype(np.float32),
         "z": rng.integers(97, 123, (nr, 20), dtype=np.uint8).view("S20").reshape(nr)}
    S = {"a": rng.integers(1, 10_001, ns, dtype=np.int32),
         "b": rng.uniform(1, 10_000, ns).astype(np.float32),
         "c": rng.uniform(0, 1, ns),
         "d": rng.random(ns) < 0.5}
    tss = [_fixed_rate_ts(nr, rate, ts_unit_ns(unit), 0.0), _fixed_rate_ts(ns, rate, ts_unit_ns(unit), 0.5)]
    w = _window_line(window, count_window, "10s")
    text = _binary_job(
        "# band-join benchmark (CellJoin, handshake join, SplitJoin): selectivity about 1:250,000",
        "band", unit, '{ x = "int32", y = "float32", z = "char20" }',
        '{ a = "int32", b = "float32", c = "float64", d = "bool" }', w,
        'band = [ { left = "R.x", right = "S.a", eps = 10 }, { left = "R.y", right = "S.b", eps = 10 } ]',
        f'name = "{strategy}"', 'rate = "max"')
    return text, ["R", "S"], [R, S], tss, unit


def _equi(rng, tuples, rate, window, skew, keys, domain_bits, streams, pixels, predicate, sel,
          strategy, count_window, out):
    unit = "us"
    cols, tss = [], []
    for n in _split(tuples, 2):
        keys_of = (rng.integers(1, skew[1] + 1, n, dtype=np.int64) if isinstance(skew, tuple)
                   else bmodel_keys(n, skew, domain_bits, rng))
        c = {"key": keys_of,
             "key2": rng.integers(0, 4, n, dtype=np.int32),
             "pad": np.zeros(n, "S36")}
        cols.append(c)
        tss.append(_poisson_ts(n, rate, ts_unit_ns(unit), rng))
    w = _window_line(window, count_window, "30s")
    on = '[ ["R.key", "S.key"] ]' if keys == 1 else '[ ["R.key", "S.key"], ["R.key2", "S.key2"] ]'
    schema = '{ key = "int64", key2 = "int32", pad = "char36" }'
    text = _binary_job(
        f"# shared-nothing paper workload: Poisson arrivals ({rate:g}/s per stream), 64-byte tuples,\n" +
        (f"# uniform join keys over {skew[1]} values" if isinstance(skew, tuple) else
         f"# b-model join keys (b = {skew}) over 2^{domain_bits} values"),
        "equi", unit, schema, schema, w, f"equi = {on}", f'name = "{strategy}"',
        'rate = "max"\nbatch_size = 8192')
    return text, ["R", "S"], cols, tss, unit


def _images(rng, tuples, rate, window, skew, keys, domain_bits, streams, pixels, predicate, sel,
            strategy, count_window, out):
    unit = "ms"
    m = int(streams)
    if pixels not in (5000, 10000, 20000):
        raise ValueError("images: pixels must be 5000, 10000 or 20000 (PSP's image sizes)")
    names = [chr(ord("A") + k) for k in range(m)]
    protos = rng.integers(0, 256, (8, pixels, 3), dtype=np.uint8)
    cols, tss = [], []
    next_id = 0
    for n in _split(tuples, m):
        which = rng.integers(0, len(protos), n)
        noise = rng.integers(-10, 11, (n, pixels, 3))
        pix = np.clip(protos[which].astype(np.int16) + noise, 0, 255).astype(np.uint8)
        cols.append({"id": np.arange(next_id, next_id + n, dtype=np.int64), "pix": pix})
        next_id += n
        tss.append(_fixed_rate_ts(n, rate, ts_unit_ns(unit), rng.random()))
    w = _window_line(window, count_window, "5s")
    if predicate == "similarity":
        fn, udf_mod = "mpi_join.udfs:image_similar", None
    elif predicate == "probabilistic":
        fn = "workload_udfs:coin"
        udf_mod = f"from mpi_join.udfs import make_coin\n\ncoin = make_coin({float(sel)!r})\n"
    else:
        fn = "workload_udfs:costly_coin"
        udf_mod = (f"from mpi_join.udfs import make_costly_coin\n\n"
                   f"costly_coin = make_costly_coin({float(sel)!r})\n")
    streams_t = "\n".join(f'[streams.{s}]\nschema = {{ id = "int64", pix = "uint8[{pixels},3]" }}\nwindow = {w}\n'
                          for s in names)
    pairs = ", ".join(f'{{ udf = "{fn}", streams = ["{a}", "{b}"] }}' for a, b in zip(names, names[1:]))
    if udf_mod:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "workload_udfs.py"), "w") as f:
            f.write(udf_mod)
    text = (f'# PSP multi-way workload: {m} streams of {pixels}-pixel RGB images, {predicate} predicate\n'
            f'[job]\nname = "images"\nts_unit = "{unit}"\n\n[input]\nstaged = "staged"\n\n[output]\ndir = "out"\n\n'
            f'{streams_t}\n[predicate]\ntheta = [ {pairs} ]\n\n[strategy]\nname = "{strategy}"\n\n[run]\nrate = "max"\n')
    return text, names, cols, tss, unit
