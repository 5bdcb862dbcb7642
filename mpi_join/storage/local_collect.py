"""`collect` in this process (`--engine local`, or `auto` where it can): a local run's result
part files -> one Parquet dataset with its `_summary.json`, as spark/collect.py writes it, with
no JVM. With payloads, each result's input columns are taken by seq from the staged parts (each
stream's parts are sorted by seq: one binary search per result, no join), nulls kept. The same
checks come first (`collecting`: the recorded parts, their checksums, a run without _SUCCESS,
an `out` that overlaps or that collect did not write); tests/test_local_collect.py collects
one run both ways and compares."""
import json
import os
import re
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError
from ..schema import SEQ, TS
from . import paths
from .pages import small_pages
from .tail import project

_RANK = re.compile(r"part-r(\d+)-")


def why_spark(engine, master, conf, job, run_dir, out, with_payload):
    """Why collecting takes Spark (`--engine spark`, a master or configuration given for Spark, a
    run, output or staged input that is not local), or None."""
    if engine == "spark":
        return "--engine spark"
    if master != "local[*]":
        return f"--master {master}"
    if conf:
        return "--conf given"
    for what, p in (("the run", run_dir), ("--out", out)) + ((("the staged input", job.staged),) if with_payload else ()):
        if not paths.local(p):
            return f"{what} is not local"
    from .local_stage import too_big
    dirs = [os.path.join(paths.real(run_dir), "results")] + \
        ([os.path.join(paths.real(job.staged), s.name) for s in job.streams] if with_payload else [])
    return too_big(sum(os.path.getsize(os.path.join(d, n)) for d in dirs if os.path.isdir(d) for n in os.listdir(d)),
                   "results" + (" and staged input" if with_payload else ""))


def collect_local(job, run_dir, out, with_payload=False, progress=print, partial=False, parts=None, staged=None):
    """Collect the local run in `run_dir` into the local dataset `out` (after `collecting`'s
    checks; `parts`: the part files it checked). `staged`: staged_payloads(job) read already (a
    future of it), which is then not read again. Returns the summary, as spark/collect.collect."""
    from .spark.collect import MARKER, PCTS, _pcts, collect_summary, run_commit
    t0 = time.perf_counter()
    small_pages()
    rd = paths.real(run_dir)
    succeeded = os.path.exists(os.path.join(rd, "_SUCCESS"))
    committed, committed_parts = run_commit(job, run_dir, succeeded, partial)
    if committed is not None:
        parts = committed_parts
    if parts is None:
        parts = sorted(os.path.join(rd, "results", n) for n in os.listdir(os.path.join(rd, "results"))
                       if n.endswith(".parquet"))
    if not parts:
        raise InputError(f"{run_dir}/results: no result part files (is this a run's output directory?)")
    if with_payload:
        from .staged import check_manifest, read_manifest
        check_manifest(job, read_manifest(job.staged), f"{job.staged}/_manifest.json")
    progress(f"collect: reading {len(parts)} part file(s) from {run_dir}/results (engine local)")
    tables, ranks = [], []
    for p in parts:
        t = pq.read_table(p)
        m = _RANK.search(os.path.basename(p))
        tables.append(t)
        ranks.append(np.full(t.num_rows, int(m.group(1)) if m else -1, np.int64))
    seq_cols = [f"{s.name}_seq" for s in job.streams]
    res = pa.concat_tables(tables, promote_options="default")
    missing = [c for c in seq_cols if c not in res.column_names]
    if missing:
        raise InputError(f"{run_dir}/results: result column(s) {', '.join(missing)} missing; the job's streams "
                         f"are {', '.join(job.stream_names)}")
    rank = np.concatenate(ranks)
    lat = res.column("latency_ns").to_numpy(zero_copy_only=False) if "latency_ns" in res.column_names else None
    total = res.num_rows
    per_rank = {int(r): {"results": int((rank == r).sum()),
                         "latency_ms": _pcts(_quantiles(lat[rank == r], PCTS) if lat is not None else None)}
                for r in np.unique(rank)}
    cols = {c: res.column(c) for c in seq_cols + ["emit_ns", "latency_ns"] if c in res.column_names}
    if with_payload:
        tables = staged.result() if staged is not None else staged_payloads(job)
        for s in job.streams:
            cols.update(_payload(job, s, res.column(f"{s.name}_seq"), tables[s.name]))
        cols = dict(zip(*project(job, list(cols), list(cols.values()))))   # the SELECT list's, if any
    _write(out, pa.table(cols), job.ts_unit)
    metrics = os.path.join(rd, "metrics", "summary.json")
    run = json.load(open(metrics)) if os.path.exists(metrics) else None
    summary = collect_summary(job, total, _pcts(_quantiles(lat, PCTS) if lat is not None else None), per_rank, run,
                              with_payload, _uri(out), succeeded, committed, engine="local")
    root = paths.real(out)
    for name, text in (("_summary.json", json.dumps(summary, indent=2)),
                       (MARKER, json.dumps({"written_by": "mpi-join collect", "run": run_dir}))):
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    progress(f"collect: {total:,} results" + (" with payloads" if with_payload else "") + f" -> {out} "
             f"({time.perf_counter() - t0:.1f} s in all, engine local)"
             + ("" if succeeded else " (PARTIAL: the run did not finish)"))
    return summary


def _uri(out):
    return out if "://" in out else f"file:{paths.real(out)}"


def _quantiles(x, qs):
    """Each quantile as a value of `x` (as Spark's percentile_approx gives one), None when empty;
    nulls (NaN: the lone rows rank 0 writes have no production delay) left out, as Spark does."""
    if x is not None and x.dtype.kind == "f":
        x = x[~np.isnan(x)]
    if x is None or not len(x):
        return None
    return [int(v) for v in np.quantile(x, qs, method="inverted_cdf")]


def staged_payloads(job, threads=True):
    """{stream: its staged rows' seq, ts and columns as one table, or None without files}: what
    collect takes payloads from. `pipeline` reads it while the ranks run, which leave part of
    the cores free (bench door: the pipeline's collect step 0.3 s -> 0.1-0.2 s)."""
    from .staged import stream_files
    out = {}
    for s in job.streams:
        files = stream_files(job.staged, s.name)
        want = [SEQ, TS] + list(s.schema)
        out[s.name] = pa.concat_tables([pq.read_table(f, columns=want, use_threads=threads) for f in files]) \
            if files else None
    return out


def _payload(job, s, seqs, staged):
    """{column: Arrow array} of stream `s`'s staged columns (`staged`, its staged_payloads table)
    for each result's seq (null where the seq is null: an outer join's other side), named
    <stream>_<column>, as collect writes them."""
    key = seqs.combine_chunks() if isinstance(seqs, pa.ChunkedArray) else seqs
    valid = ~np.asarray(key.is_null())
    k = np.asarray(key.fill_null(0), np.int64)
    have = staged.column(SEQ).to_numpy() if staged is not None else np.zeros(0, np.int64)
    at = _positions(have, k)
    ok = valid & (at < len(have))
    ok[ok] &= have[at[ok]] == k[ok]
    if (valid & ~ok).any():
        bad = int(k[np.flatnonzero(valid & ~ok)[0]])
        raise InputError(f"{job.staged}/{s.name}: no staged tuple has seq {bad}, which a result names; "
                         f"was the input staged again after the run? (run it again)")
    idx = pa.array(np.where(ok, at, 0), mask=~ok)
    out = {}
    for c in [TS] + list(s.schema):
        a = staged.column(c).take(idx) if staged is not None else pa.nulls(len(k))
        if c == TS:
            a = _event_time(a, job.ts_unit)
        elif str(s.schema[c]).strip().lower().startswith("char"):
            a = pc.utf8_rtrim(a.cast(pa.string()), characters="\u0000")     # its padding off
        out[f"{s.name}_{c}"] = a
    return out


def _positions(have, k):
    """np.searchsorted(have, k) where it matters (the row of each seq of `k` that `have`, a
    stream's staged seqs in order, holds; len(have) or a row of another seq where it holds
    none), by a map from seq to row: the staged seqs are dense over all streams, so the map is
    at most a few times the stream's rows, and a lookup each is 3 times faster than a binary
    search each (bench door's 155,431 results into 1.2 M staged rows)."""
    top = int(have[-1]) + 1 if len(have) else 0
    if not len(have) or top > 16 * len(have) + 1024:
        return np.searchsorted(have, k)
    pos = np.full(top + 1, len(have), np.int64)
    pos[have] = np.arange(len(have))
    return pos[np.clip(k, 0, top)]


def _event_time(a, unit):
    """As spark/collect._event_time: a timestamp in ms (for "s" and "ms") or us, UTC; ns stays int64."""
    if unit == "ns":
        return a
    mult = {"s": 1000, "ms": 1, "us": 1}[unit]
    vals = pc.multiply(a, mult) if mult != 1 else a
    return vals.cast(pa.timestamp("us" if unit == "us" else "ms", tz="UTC"))


# A column's dictionary page at most this big: a column of few values (a country, a device) is
# dictionary-encoded still, and one of mostly distinct values (seqs, times, ids) gives up after
# 64 KB instead of Arrow's 1 MB (bench door's 155,431 results with payloads: written in 0.059 s
# instead of 0.102 s, and 5.8 MB instead of 6.9 MB)
DICTIONARY_PAGE = 1 << 16


def _write(out, table, unit):
    """`out`'s part file, replacing what an earlier collect wrote there (collecting checked it)."""
    root = paths.real(out)
    os.makedirs(root, exist_ok=True)
    for n in os.listdir(root):
        if n.startswith("part-") or n.startswith(".part-") or n in ("_SUCCESS", "._SUCCESS.crc", "_summary.json"):
            paths.remove_file(root, os.path.join(root, n))
    tmp = os.path.join(root, ".part-00000.parquet")
    pq.write_table(table, tmp, coerce_timestamps="us" if unit == "us" else "ms",
                   dictionary_pagesize_limit=DICTIONARY_PAGE)
    os.replace(tmp, os.path.join(root, "part-00000.parquet"))
    with open(os.path.join(root, "_SUCCESS"), "w"):
        pass
