"""The staged input layout (DESIGN.md section 5): <staged>/<stream>/part-*.parquet + _manifest.json.

Reading validates everything a run relies on and names the file and column when it is wrong:
the schema, nulls, the seq numbering (dense from 0 across streams) and ts order.
"""
import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InputError
from .schema import SEQ, TS, arrow_type, from_arrow, to_arrow, type_name

MANIFEST = "_manifest.json"


def write_staged(path, streams, arrays, ts_unit, rows_per_file=1_000_000, extra=None):
    """Write one Parquet dataset per stream plus the manifest. `streams` are config.Stream."""
    os.makedirs(path, exist_ok=True)
    man = {"format": "mpi-join-staged/1", "ts_unit": ts_unit, "streams": {}, "total": 0}
    for s, arr in zip(streams, arrays):
        d = os.path.join(path, s.name)
        os.makedirs(d, exist_ok=True)
        for old in glob.glob(os.path.join(d, "part-*.parquet")):
            os.remove(old)
        for k in range(max(1, -(-len(arr) // rows_per_file))):
            chunk = arr[k * rows_per_file:(k + 1) * rows_per_file]
            pq.write_table(to_arrow(chunk), os.path.join(d, f"part-{k:05d}.parquet"))
        man["streams"][s.name] = {
            "count": int(len(arr)),
            "ts_min": int(arr[TS].min()) if len(arr) else None,
            "ts_max": int(arr[TS].max()) if len(arr) else None,
            "schema": {n: type_name(arr.dtype.fields[n][0]) for n in arr.dtype.names},
        }
        man["total"] += int(len(arr))
    if extra:
        man.update(extra)
    tmp = os.path.join(path, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(man, f, indent=2)
    os.replace(tmp, os.path.join(path, MANIFEST))
    return man


def stream_files(staged, stream):
    d = os.path.join(staged, stream)
    if not os.path.isdir(staged):
        raise InputError(f"{staged}: staged input directory not found")
    if not os.path.isdir(d):
        raise InputError(f"{d}: no staged data for stream '{stream}' (expected {d}/part-*.parquet)")
    files = sorted(glob.glob(os.path.join(d, "*.parquet")))
    if not files:
        raise InputError(f"{d}: no Parquet part files for stream '{stream}'")
    return files


def read_stream(staged, stream):
    """Read one stream's staged rows as a structured array sorted by seq (validated)."""
    parts = []
    for f in stream_files(staged, stream.name):
        try:
            table = pq.read_table(f)
        except Exception as e:  # noqa: BLE001 - a damaged file is the user's to see
            raise InputError(f"{f}: cannot read Parquet: {e}") from None
        _check_schema(f, table.schema, stream)
        parts.append(from_arrow(table, stream.dtype, f))
    arr = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if len(arr) > 1 and not np.all(arr[SEQ][1:] > arr[SEQ][:-1]):
        arr = arr[np.argsort(arr[SEQ], kind="stable")]
    return arr


def _compatible(fd, got):
    """Is an Arrow column type acceptable for a numpy field? Exact types always are; so are any
    integer width for an integer column (values are range-checked when read), and variable
    binary or string for fixed-size bytes (what Spark writes; lengths are checked when read)."""
    base = fd.base
    if got == arrow_type(fd):
        return True
    if base.kind in "iu" and not fd.shape:
        return pa.types.is_integer(got)
    if base.kind == "S" or fd.shape:
        return pa.types.is_binary(got) or pa.types.is_large_binary(got) or (
            base.kind == "S" and (pa.types.is_string(got) or pa.types.is_large_string(got)))
    if base.kind == "f":
        return pa.types.is_floating(got)
    return False


def _check_schema(f, schema, stream):
    for name in stream.dtype.names:
        fd = stream.dtype.fields[name][0]
        idx = schema.get_field_index(name)
        if idx < 0:
            raise InputError(f"{f}: column '{name}' of stream '{stream.name}' is missing "
                             f"(file has: {', '.join(schema.names)})")
        got = schema.field(idx).type
        if pa.types.is_dictionary(got):
            got = got.value_type
        if not _compatible(fd, got):
            raise InputError(f"{f}: column '{name}' has type {got}, the job declares "
                             f"{stream.schema.get(name, type_name(fd))} (Parquet {arrow_type(fd)})")


def read_staged(job):
    """Read and validate every stream of a job; returns arrays in job stream order."""
    arrays = [read_stream(job.staged, s) for s in job.streams]
    check_order(job, arrays)
    return arrays


def check_order(job, arrays):
    """seq must be dense from 0 across all streams and ts non-decreasing in seq."""
    seqs = np.concatenate([a[SEQ] for a in arrays])
    tss = np.concatenate([a[TS] for a in arrays])
    sid = np.concatenate([np.full(len(a), k) for k, a in enumerate(arrays)])
    order = np.argsort(seqs, kind="stable")
    seqs, tss, sid = seqs[order], tss[order], sid[order]
    dup = np.nonzero(seqs[1:] == seqs[:-1])[0]
    if len(dup):
        k = dup[0]
        where = sorted({job.streams[sid[k]].name, job.streams[sid[k + 1]].name})
        raise InputError(f"{os.path.join(job.staged, where[0])}: seq must be dense from 0 across streams; "
                         f"seq {seqs[k]} is used twice (streams {', '.join(where)})")
    bad = np.nonzero(seqs != np.arange(len(seqs)))[0]
    if len(bad):
        k = bad[0]
        s = job.streams[sid[k]].name
        raise InputError(f"{os.path.join(job.staged, s)}: seq must be dense from 0 across streams; "
                         f"seq {k} is missing (next is {seqs[k]})")
    back = np.nonzero(tss[1:] < tss[:-1])[0]
    if len(back):
        k = back[0] + 1
        s = job.streams[sid[k]].name
        raise InputError(f"{os.path.join(job.staged, s)}: ts goes backwards at seq {k}: "
                         f"{tss[k]} after {tss[k - 1]} (ts must be non-decreasing in seq)")


def read_manifest(staged):
    p = os.path.join(staged, MANIFEST)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)
