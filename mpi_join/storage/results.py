"""Result part files (one column <stream>_seq per stream, emit and latency), reading and comparing."""
import glob
import hashlib
import json
import os
import re
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from .checksums import SNAPSHOT, as_records, as_rows, file_sha256


PART = re.compile(r"part-r(\d+)-(\d+)\.parquet")


def part_name(rank, number):
    """The name of rank `rank`'s result part file number `number`."""
    return f"part-r{rank:04d}-{number:05d}.parquet"


def part_of(name):
    """(rank, number) a result part file's name says, or None for another name."""
    m = PART.fullmatch(os.path.basename(name))
    return (int(m.group(1)), int(m.group(2))) if m else None


def result_dtype(stream_names):
    """Rows of a result edge (graph.RESULTS): each stream's seq, then `_tin`, the arrival time
    of the tuple that produced the result, so the delay is measured where the result is written."""
    return np.dtype([(f"{n}_seq", np.int64) for n in stream_names] + [("_tin", np.int64)])


def result_rows(stream_names, seqs, tin):
    """Results (a seq array per stream, and their `_tin`) as rows of result_dtype."""
    rows = np.empty(len(tin), result_dtype(stream_names))
    for n, s in zip(stream_names, seqs):
        rows[f"{n}_seq"] = s
    rows["_tin"] = tin
    return rows


class ResultWriter:
    """Buffers results of one rank and writes Parquet part files of up to `rows_per_file` rows.

    Files are written by one background thread (Parquet encoding releases the GIL, so it overlaps
    the join), at most one file at a time: a second flush waits for the first, which bounds the
    memory to two files' rows. `flush(wait=True)` returns once every file is on disk (a
    checkpoint commits the names in `files`). Dictionary encoding is off: these columns are
    nearly unique, and it doubled the write time."""

    def __init__(self, directory, rank, stream_names, rows_per_file=1_000_000, snapshot_dir=None):
        self.dir, self.rank, self.names = directory, rank, list(stream_names)
        self.snapshot_dir = snapshot_dir
        self.rows_per_file = rows_per_file
        self._buf = []
        self._n = 0
        self.files = []
        self._next = 0               # the number of the next part file (resume: past those held)
        self._pool = None
        self._pending = None
        self.records = {}            # file name -> {"rows", "bytes", "sha256"}: what was written
        self.fresh = []              # names of files written since the last new_records()
        self.snap_records = {}       # the same of the aggregate snapshots written
        os.makedirs(directory, exist_ok=True)

    def add(self, seqs, emit_ns, latency_ns):
        """seqs: list of int64 arrays, one per stream (same length)."""
        if len(emit_ns) == 0:
            return
        self._buf.append((seqs, emit_ns, latency_ns))
        self._n += len(emit_ns)
        if self._n >= self.rows_per_file:
            self.flush()

    def flush(self, wait=False):
        if self._buf:
            path = os.path.join(self.dir, part_name(self.rank, self._next))
            self._next += 1
            chunks, names = self._buf, [f"{n}_seq" for n in self.names] + ["emit_ns", "latency_ns"]
            self._buf, self._n = [], 0
            self._wait()
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="results", initializer=_lower_priority)
            self._pending = self._pool.submit(_write, chunks, names, path)
            self.files.append(path)
        if wait:
            self._wait()

    def _wait(self):
        if self._pending is not None:
            p, self._pending = self._pending, None
            name, rec = p.result()           # a write error surfaces here, on the rank's own thread
            self.records[name] = rec
            self.fresh.append(name)

    def close(self):
        self.flush(wait=True)
        if self._pool is not None:
            self._pool.shutdown()
        return self.files

    def write_snapshot(self, number, final, rows, meta):
        """Write an aggregate snapshot (aggregate.finish rows) as snapshot-<number>.parquet, with
        a `snapshot` and a `time_ns` column and `meta` in the file's metadata. Snapshots are
        numbered in the merger's checkpointed state, so after a resume the ones past the
        checkpoint are written again under the same names; the final one removes any numbered
        after it (left by the failed attempt)."""
        d = self.snapshot_dir
        if d is None:
            raise RuntimeError(f"rank {self.rank}: an aggregate snapshot, but this run has no aggregate directory")
        os.makedirs(d, exist_ok=True)
        now = time.time_ns()
        cols = {name: rows[name] for name in rows.dtype.names}
        table = pa.table({"snapshot": np.full(len(rows), number, np.int64), "time_ns": np.full(len(rows), now, np.int64),
                          **cols})
        meta = {**meta, "snapshot": number, "time_ns": now}
        table = table.replace_schema_metadata({b"mpi_join": json.dumps(meta).encode()})
        path = os.path.join(d, f"snapshot-{number:06d}.parquet")
        pq.write_table(table, path + ".tmp")
        os.replace(path + ".tmp", path)
        self.snap_records[os.path.basename(path)] = {"rows": table.num_rows, "bytes": os.path.getsize(path),
                                                     "sha256": file_sha256(path)}
        if final:
            from .paths import remove_file
            for f in os.listdir(d):
                m = SNAPSHOT.fullmatch(f)
                if m and int(m.group(1)) > number:
                    remove_file(d, os.path.join(d, f))
                    self.snap_records.pop(f, None)

    def resume(self, file_records=(), snapshot_records=(), after=-1):
        """Continue after a checkpoint: its aggregate snapshots are `snapshot_records` (what
        snapshot_records() gave at the cut, verified on resume), the next file's number is past
        `after` (the number the cut recorded, or at another rank count the highest of any
        committed file) and past the files of `file_records` (a checkpoint written before the
        ledger listed each rank's). Files written from here on are this run's records; those
        committed before are the checkpoint's (its ledger)."""
        held = [part_of(n) for n, *_ in file_records]
        self.records, self.fresh, self.snap_records = {}, [], as_records(snapshot_records)
        self.files = []
        self._next = max([after + 1] + [k + 1 for r, k in filter(None, held) if r == self.rank])

    @property
    def next_number(self):
        """The number the next part file takes (a cut records it: the restore goes on from it)."""
        return self._next

    def new_records(self):
        """[[name, rows, bytes, sha256]] of the files written since the last call (after a flush
        with wait): what a cut commits, so it costs what was added, not what the run wrote."""
        new, self.fresh = self.fresh, []
        return as_rows({n: self.records[n] for n in new})

    def file_records(self):
        """[[name, rows, bytes, sha256]] of every file this run wrote (the end of a run)."""
        return as_rows(self.records)

    def snapshot_records(self):
        """[[name, rows, bytes, sha256]] of every aggregate snapshot written so far."""
        return as_rows(self.snap_records)




def read_snapshots(path):
    """[(meta, table)] of an aggregate directory's snapshots in number order; InputError naming
    a file that cannot be read as one."""
    out = []
    for f in sorted(os.listdir(path)):
        if SNAPSHOT.fullmatch(f):
            try:
                t = pq.read_table(os.path.join(path, f))
                meta = json.loads(t.schema.metadata[b"mpi_join"])
            except Exception as e:  # noqa: BLE001 - a damaged file is the user's to see
                raise InputError(f"{os.path.join(path, f)}: aggregate snapshot cannot be read: "
                                 f"{(str(e).splitlines() or [type(e).__name__])[0]}") from None
            out.append((meta, t))
    return out


def _lower_priority():
    """The writer thread yields the core to the join (Linux nice is per thread): on a node with
    more busy threads than cores, encoding a file then delays no batch's results."""
    import threading
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


def _write(chunks, names, path):
    """One part file from the buffered (seqs, emit, latency) chunks; the columns are chunked
    arrays over the same memory, so nothing is copied before Parquet encodes them."""
    cols = [[c[0][k] for c in chunks] for k in range(len(names) - 2)] + [[c[1] for c in chunks], [c[2] for c in chunks]]
    seqs = len(names) - 2
    table = pa.Table.from_arrays([pa.chunked_array([_seq_array(a) if k < seqs else
                                                    a if isinstance(a, pa.Array) else pa.array(a, pa.int64())
                                                    for a in col])
                                  for k, col in enumerate(cols)], names=names)
    tmp = path + ".tmp"
    # every column is int64, near its neighbours (a probe's partners are in one window): delta
    # encoding without compression writes a million results 1.5x faster than snappy and 2.4x
    # smaller (3.1 MB), and reads back about 20x faster. Min/max statistics only for emit_ns
    # (a reader's time filter): the seq and latency columns' took a fifth of the write. The file
    # is encoded in memory and hashed there, not read back (55 -> 45 ms a million results)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, use_dictionary=False, compression="none", write_statistics=["emit_ns"],
                   column_encoding={n: "DELTA_BINARY_PACKED" for n in names})
    data = sink.getvalue()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return os.path.basename(path), {"rows": table.num_rows, "bytes": data.size,
                                    "sha256": hashlib.sha256(data).hexdigest()}


def _seq_array(a):
    """A seq column chunk; a seq of -1 is the null side of an outer join's row (README "Exact
    semantics"), null in the file."""
    null = a < 0
    return pa.array(a, pa.int64(), mask=null if null.any() else None)


def result_files(path):
    """Part files of a results dataset: `path` is the run's output dir or its results/ dir."""
    if not os.path.exists(path):
        raise InputError(f"{path}: results not found")
    d = os.path.join(path, "results") if os.path.isdir(os.path.join(path, "results")) else path
    files = sorted(glob.glob(os.path.join(d, "*.parquet")))
    if not files and os.path.isfile(path):
        files = [path]
    return files


def read_results(path, stream_names, only=None, order=None):
    """All result rows as an (n, M) int64 array of seqs, columns in stream order (`only`: of the
    part files of these names; `order`: the files' names in the order to read them, else by name)."""
    cols = [f"{n}_seq" for n in stream_names]
    parts = []
    files = result_files(path)
    if order is not None:
        rank = {n: i for i, n in enumerate(order)}
        files = sorted(files, key=lambda f: rank.get(os.path.basename(f), len(rank)))
    for f in files:
        if only is not None and os.path.basename(f) not in only:
            continue
        try:
            t = pq.read_table(f, columns=cols)
        except Exception as e:  # noqa: BLE001
            raise InputError(f"{f}: cannot read result columns {cols}: {e}") from None
        parts.append(np.stack([t.column(c).fill_null(-1).to_numpy() for c in cols], axis=1).astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros((0, len(cols)), np.int64)


def _encode(expected, got):
    """Rows as one int64 each (mixed radix over the seq range) when they fit, else None."""
    M = expected.shape[1]
    hi = max([int(a.max()) for a in (expected, got) if len(a)] + [0]) + 1
    mins = [int(a.min()) for a in (expected, got) if len(a)]
    if (mins and min(mins) < 0) or hi ** M >= 2 ** 62:
        return None
    enc = []
    for a in (expected, got):
        k = np.zeros(len(a), np.int64)
        for c in range(M):
            k = k * hi + a[:, c]
        enc.append(k)
    return enc, hi


def _unique_counts(keys):
    """Sorted unique values and their counts (a plain sort: faster than np.unique here)."""
    s = np.sort(keys)
    if len(s) == 0:
        return s, np.zeros(0, np.int64)
    starts = np.nonzero(np.concatenate([[True], s[1:] != s[:-1]]))[0]
    return s[starts], np.diff(np.append(starts, len(s)))


def _member(a, sorted_b):
    """Which values of a occur in the sorted array sorted_b."""
    if len(sorted_b) == 0:
        return np.zeros(len(a), bool)
    p = np.minimum(np.searchsorted(sorted_b, a), len(sorted_b) - 1)
    return sorted_b[p] == a


def _decode(keys, hi, M):
    out = np.empty((len(keys), M), np.int64)
    for c in range(M - 1, -1, -1):
        out[:, c] = keys % hi
        keys = keys // hi
    return out


def compare(expected, got):
    """Compare result sets: (missing rows, extra rows, (duplicated rows, their counts))."""
    M = expected.shape[1]
    enc = _encode(expected, got)
    if enc is None:
        return _compare_rows(expected, got)
    (ke, kg), hi = enc
    ue, _ = _unique_counts(ke)
    ug, cg = _unique_counts(kg)
    missing = ue[~_member(ue, ug)]
    extra = ug[~_member(ug, ue)]
    dup = cg > 1
    return _decode(missing, hi, M), _decode(extra, hi, M), (_decode(ug[dup], hi, M), cg[dup])


def _group_starts(rows):
    """rows sorted lexicographically -> bool array marking the first row of each run of equal rows."""
    first = np.ones(len(rows), bool)
    if len(rows) > 1:
        first[1:] = np.any(rows[1:] != rows[:-1], axis=1)
    return first


def _sort_rows(rows, *extra):
    order = np.lexsort(tuple(extra) + tuple(rows.T[::-1]))
    return order


def unique_rows(rows):
    """Unique rows (lexicographic order) and how often each occurs."""
    if len(rows) == 0:
        return rows, np.zeros(0, np.int64)
    s = rows[_sort_rows(rows)]
    starts = np.nonzero(_group_starts(s))[0]
    return s[starts], np.diff(np.append(starts, len(s)))


def _compare_rows(expected, got):
    """compare() for rows too wide to encode in one int64: lexicographic sorts."""
    ue, _ = unique_rows(expected)
    ug, cg = unique_rows(got)
    both = np.concatenate([ue, ug])
    tag = np.concatenate([np.zeros(len(ue), np.int8), np.ones(len(ug), np.int8)])
    order = np.lexsort((tag,) + tuple(both.T[::-1]))
    s, t = both[order], tag[order]
    first = _group_starts(s)
    size = np.diff(np.append(np.nonzero(first)[0], len(s)))
    alone = np.repeat(size == 1, size)
    missing = s[alone & (t == 0)]
    extra = s[alone & (t == 1)]
    dup = cg > 1
    return missing, extra, (ug[dup], cg[dup])
