"""The staged input layout (README "Staged input"): <staged>/<stream>/part-*.parquet + _manifest.json.

Reading validates everything a run relies on and names the file and column when it is wrong:
the schema, nulls, the seq numbering (dense from 0 across streams) and ts order.
"""
import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from ..schema import MAX_CHAR, NULL, SEQ, TS, arrow_type, from_arrow, is_string, numpy_field, stored, to_arrow, type_name

MANIFEST = "_manifest.json"
FORMAT = "mpi-join-staged/1"


# Rows per Parquet row group of staged files (write_staged; Spark's stage sets its block size
# to about as many, stage.py): a reader skips whole row groups, so several sources each decode
# little more than their own parts (master/source.py).
ROW_GROUP = 8192


def write_part(table, path):
    """One staged part file. Without dictionaries: seq, ts and ids are mostly distinct, where a
    dictionary is built, overflows and is dropped again (writing 1 M rows of the door's
    workload, bench door: 0.35 s with, 0.19 s without; 9% larger)."""
    pq.write_table(table, path, row_group_size=ROW_GROUP, use_dictionary=False)


def write_staged(path, streams, arrays, ts_unit, rows_per_file=1_000_000, extra=None):
    """Write one Parquet dataset per stream plus the manifest. `streams` are config.Stream."""
    os.makedirs(path, exist_ok=True)
    from .checksums import file_records
    from .paths import check_name, inside, plain_dir, remove_file
    man = {"format": FORMAT, "ts_unit": ts_unit, "streams": {}, "total": 0, "files": {}}
    for s, arr in zip(streams, arrays):
        d = os.path.join(path, check_name(s.name, f"{path}: stream"))
        plain_dir(d, f"staged stream folder of '{s.name}'")
        os.makedirs(inside(path, d), exist_ok=True)
        for old in glob.glob(os.path.join(d, "part-*.parquet")):
            remove_file(path, old)
        names = []
        text = string_columns(s)
        for k in range(max(1, -(-len(arr) // rows_per_file))):
            chunk = arr[k * rows_per_file:(k + 1) * rows_per_file]
            names.append(f"part-{k:05d}.parquet")
            write_part(to_arrow(chunk, text), os.path.join(d, names[-1]))
        man["files"][s.name] = file_records(d, names)
        man["streams"][s.name] = {
            "count": int(len(arr)),
            "ts_min": int(arr[TS].min()) if len(arr) else None,
            "ts_max": int(arr[TS].max()) if len(arr) else None,
            "schema": {n: s.schema[n] if n in text else type_name(arr.dtype.fields[n][0]) for n in stored(arr.dtype)},
        }
        if text:
            man["streams"][s.name]["string_bytes"] = {
                c: max(1, int(np.char.str_len(arr[c]).max()) if len(arr) else 1) for c in text}
        man["total"] += int(len(arr))
    if extra:
        man.update(extra)
    tmp = os.path.join(path, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(man, f, indent=2)
    os.replace(tmp, os.path.join(path, MANIFEST))
    return man


def string_columns(stream):
    """The stream's `string` columns (text without a declared width)."""
    return [c for c, t in stream.schema.items() if is_string(t)]


def with_string_widths(job, man):
    """`job` with each `string` column as wide as the staged input's longest value, as the
    manifest `man` records it (unchanged where it records none: check_manifest refuses those)."""
    import dataclasses
    from ..schema import stream_dtype
    streams = []
    for s in job.streams:
        widths = ((man or {}).get("streams", {}).get(s.name) or {}).get("string_bytes")
        if string_columns(s) and isinstance(widths, dict):
            s = dataclasses.replace(s, dtype=stream_dtype(s.schema, f"streams.{s.name}.schema", widths, s.null_flag))
        streams.append(s)
    return dataclasses.replace(job, streams=tuple(streams))


def stream_files(staged, stream, man=None):
    """The part files of one stream: those on disk, or for a staged log (`man`: its manifest, read
    once by the caller so that every stream is read at the same commit) the committed ones."""
    d = os.path.join(staged, stream)
    if not os.path.isdir(staged):
        raise InputError(f"{staged}: staged input directory not found; stage the raw input with "
                         f"`mpi-join stage JOB` first")
    if not os.path.isdir(d):
        raise InputError(f"{d}: no staged data for stream '{stream}' (expected {d}/part-*.parquet)")
    if man is None:
        man = read_manifest(staged)
    files = [os.path.join(d, n) for n in committed_names(man, stream, d)]
    if not files and not is_log(man):
        raise InputError(f"{d}: no Parquet part files for stream '{stream}'")
    return files


def check_part(path, records):
    """A staged part file must be the one its manifest records, `records` ({name: {bytes, sha256}}
    of its stream): listed, of that size and SHA-256. A part changed after staging (a key edited, a
    file copied over another) would give a different join that verify, reading the same files,
    would call right. Input staged by a version that recorded no files (`records` None) is read
    unchecked. Raises InputError naming the file."""
    from .checksums import check_file
    if records is None:
        return
    rec = records.get(os.path.basename(path))
    if rec is None:
        raise InputError(f"{path}: staged part file is not in the manifest; stage again")
    try:
        check_file(path, rec, "staged part file")
    except InputError as e:
        raise InputError(f"{e}; stage again (`mpi-join stage JOB --force`)") from None


def is_log(man):
    """Is this manifest a staged log's (staged_log.py), grown batch by batch?"""
    return isinstance(man, dict) and isinstance(man.get("log"), dict)


def committed_names(man, stream, d):
    """A stream's part file names: the manifest's for a log (a batch being written is not yet
    listed), else every part file in its folder `d`."""
    if is_log(man):
        return sorted((man.get("files") or {}).get(stream, {}))
    return part_names(d)


def part_names(d):
    """The Parquet part files of one stream's folder `d`, by name, sorted."""
    return sorted(os.path.basename(f) for f in glob.glob(os.path.join(d, "*.parquet")))


class StreamReader:
    """One stream's staged rows, read incrementally in seq order (record batch by record batch),
    so memory does not grow with the input. Files are ordered by their smallest seq (from the
    Parquet statistics); rows must be in seq order within the stream, checked as they are read.
    `seek(seq)` skips whole row groups before `seq` using their statistics, without reading them."""

    def __init__(self, staged, stream, chunk_rows=65536, man=None, only_read=False, nulls=False, bare=False):
        """`only_read`: decode seq, ts and the columns the ranks read (stream.reads), the other
        payload columns 0 (a run's source: nothing reads them, and collect takes them from the
        staged parts; `bench door`'s 1.2 M rows, three unread text columns: rank 0's CPU 0.98 s ->
        0.60 s). `nulls`: rows of the staged row dtype (stream.rows_dtype: a NULLS flag per
        payload column), the stream's filter not applied (a result's payload, which shows nulls).
        `bare`: seq and ts alone, no filter (an outer join's count of lone rows)."""
        self.stream, self.chunk_rows = stream, chunk_rows
        self.dtype = (np.dtype([(SEQ, np.int64), (TS, np.int64)]) if bare else
                      stream.rows_dtype if nulls else stream.dtype)
        self.keep = None                 # the stream's filter: a row that fails it gets the NULL flag
        wanted = set()
        if stream.filter is not None and not nulls and not bare:
            from ..join import filters
            self.keep, wanted = filters.compiled(stream.filter), set(filters.columns(filters.parse(stream.filter)))
        self.columns = [c for c in stored(stream.dtype)
                        if c in (SEQ, TS) or not bare and (not only_read or c in stream.reads or c in wanted)]
        self.parts = []                  # (file, ParquetFile, [(row group, rows, seq min, seq max)])
        self.count = 0
        if man is None and os.path.isdir(staged):
            man = read_manifest(staged)
        files = stream_files(staged, stream.name, man)
        recorded = (man or {}).get("files")            # None: staged by a version that recorded no files
        self.records = None if recorded is None else dict(recorded.get(stream.name, {}))   # {part: {bytes, sha256}}
        self.add(files)
        self._it = None
        self._pos = (0, 0)               # next (part, row group) to open
        self._skip = -1                  # drop rows with seq below this (after a seek)
        self._last = (-1, None, 0)       # last seq read, its file and row (order checks)
        self._row = 0                    # rows read from the current file so far
        self._counting = {}              # file -> ParquetFile for count_before
        self.upto = None                 # read no row group wholly at or past this seq (a source's part end)

    def limit(self, seq):
        """Read no row group wholly at or past `seq` from now on (a source's part end; None: any)."""
        self.upto = seq

    def add(self, files, records=None):
        """Read these part files too (a log's newly committed batches: their seqs follow every
        file's already added, so they go at the end; `records` are theirs from the manifest).
        Each must be the file the manifest records (check_part) before a row of it is trusted."""
        if records:
            self.records = {**(self.records or {}), **records}
        new = []
        for f in files:
            check_part(f, self.records)
            try:
                pf = pq.ParquetFile(f, buffer_size=1 << 20, pre_buffer=False)
            except Exception as e:  # noqa: BLE001 - a damaged file is the user's to see
                raise InputError(f"{f}: cannot read Parquet: {e}") from None
            _check_schema(f, pf.schema_arrow, self.stream)
            new.append((f, pf, _row_groups(f, pf)))
        new.sort(key=lambda p: (p[2][0][2] if p[2] and p[2][0][2] is not None else 2 ** 62, p[0]))
        self.parts += new
        self.count += sum(rg[1] for p in new for rg in p[2])

    def _group_of(self, seq):
        """(file, row group) of the first row group whose rows reach `seq` (by statistics)."""
        for pi, (_, _, rgs) in enumerate(self.parts):
            for gi, (_, n, lo, hi) in enumerate(rgs):
                if hi is None or hi >= seq:
                    return pi, gi
        return len(self.parts), 0

    def skip_to(self, seq):
        """Go forward to the first row with seq >= `seq`: within the row group being read its rows
        below are dropped as they come; row groups wholly before it are not read (seek)."""
        if self._it is not None and self._last[0] >= 0 and self._group_of(seq) <= self._group_of(self._last[0]):
            self._skip = max(self._skip, int(seq))
        else:
            self.seek(seq)

    def seek(self, seq):
        """Continue at the first row with seq >= `seq`; row groups wholly before it are skipped."""
        self._it, self._skip, self._last = None, int(seq), (-1, None, 0)
        pi, gi = self._pos = self._group_of(seq)
        self._row = sum(rg[1] for rg in self.parts[pi][2][:gi]) if pi < len(self.parts) else 0

    def _open(self):
        pi, gi = self._pos
        if pi >= len(self.parts):
            return False
        f, pf, rgs = self.parts[pi]
        if gi == 0:
            self._row = 0
        end, size = len(rgs), self.chunk_rows
        if self.upto is not None:     # a part's row groups in one chunk: one decode, not one per group
            end = next((g for g in range(gi + 1, len(rgs)) if rgs[g][2] is not None and rgs[g][2] >= self.upto),
                       len(rgs))
            size = max(size, sum(rg[1] for rg in rgs[gi:end]))
        self._it = pf.iter_batches(batch_size=size, row_groups=list(range(gi, end)),
                                   columns=self.columns)
        self._file = f
        self._pos = (pi + 1, 0) if end == len(rgs) else (pi, end)
        return True

    def next_chunk(self):
        """The next rows as a structured array sorted by seq, or None at the end."""
        while True:
            if self._it is None and not self._open():
                return None
            try:
                rb = next(self._it)
            except StopIteration:
                self._it = None
                continue
            f, row0 = self._file, self._row
            self._row += rb.num_rows
            table = pa.Table.from_batches([rb])
            arr = from_arrow(table, self.dtype, f, self.stream, missing_zero=True)
            if self.keep is not None:
                arr[NULL] |= ~self.keep(table)
            self._check_order(arr, f, row0)
            if self._skip >= 0 and len(arr) and arr[SEQ][0] < self._skip:
                arr = arr[int(np.searchsorted(arr[SEQ], self._skip)):]
            if len(arr):
                return arr

    def _check_order(self, arr, f, row0):
        seq = arr[SEQ]
        if not len(seq):
            return
        prev, pf, prow = self._last
        bad = np.nonzero(seq[1:] <= seq[:-1])[0]
        if seq[0] <= prev:
            raise InputError(f"{f}: row {row0}: seq {seq[0]} of stream '{self.stream.name}' comes after seq {prev} "
                             f"({pf} row {prow}); a stream's rows must be in increasing seq order")
        if len(bad):
            k = int(bad[0]) + 1
            raise InputError(f"{f}: row {row0 + k}: seq {seq[k]} of stream '{self.stream.name}' comes after seq "
                             f"{seq[k - 1]}; a stream's rows must be in increasing seq order")
        self._last = (int(seq[-1]), f, row0 + len(seq) - 1)


    def count_before(self, offset):
        """Rows with seq < offset, from row-group statistics (reading the seq column of at most
        one row group, the one that straddles the offset)."""
        n = 0
        for f, _, rgs in self.parts:
            for g, rows, lo, hi in rgs:
                if hi is not None and hi < offset:
                    n += rows
                    continue
                if lo is not None and lo >= offset:
                    return n
                if f not in self._counting:      # a handle of its own: a read may be in flight
                    self._counting[f] = pq.ParquetFile(f, buffer_size=1 << 20, pre_buffer=False)
                seq = self._counting[f].read_row_group(g, columns=[SEQ]).column(0).to_numpy()
                n += int(np.searchsorted(seq, offset))
                if len(seq) and seq[-1] >= offset:
                    return n
        return n


class Prefetched:
    """A reader whose next chunk is read by a background thread while the caller works on the
    current one (Parquet decoding releases the GIL). Rank 0 would otherwise stop replaying for
    each chunk it reads: tens of ms, and over 200 ms when the cores are busy with workers, which
    showed as production-delay spikes every 64 K rows. One chunk ahead per stream, no more."""

    def __init__(self, reader):
        from concurrent.futures import ThreadPoolExecutor
        self.reader = reader
        self.count = reader.count
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"read-{reader.stream.name}")
        self._ahead = None
        self._held = None                 # a chunk to give next (kept across a skip_to)

    @property
    def upto(self):
        """Read ahead only while chunks end before this seq (StreamReader.upto: nor past it)."""
        return self.reader.upto

    def limit(self, seq):
        self.reader.limit(seq)

    def next_chunk(self):
        if self._held is not None:
            c, self._held = self._held, None
        else:
            if self._ahead is None:
                self._ahead = self._pool.submit(self.reader.next_chunk)
            c = self._ahead.result()          # an input error raised while reading surfaces here
        more = c is not None and (self.upto is None or not len(c) or c[SEQ][-1] < self.upto)
        self._ahead = self._pool.submit(self.reader.next_chunk) if more else None
        return c

    def seek(self, seq):
        self._settle()
        self._held = None
        self.reader.seek(seq)

    def skip_to(self, seq):
        """StreamReader.skip_to; the chunk already read (held or read ahead) is kept from `seq` on
        if it reaches it (the reader is past it then), else the reader skips."""
        c, self._held = self._held, None
        if c is None and self._ahead is not None:
            c, self._ahead = self._ahead.result(), None
        if c is not None and len(c) and c[SEQ][-1] >= seq:
            self._held = c[int(np.searchsorted(c[SEQ], seq)):]
        else:
            self.reader.skip_to(seq)

    def add(self, files, records=None):
        """More part files (a log's new commits): the read in flight, if any, is kept, unless it
        found the end, which is now further on."""
        if self._ahead is not None:
            self._ahead.exception()
            if self._ahead.result() is None:
                self._ahead = None
        self.reader.add(files, records)
        self.count = self.reader.count

    def count_before(self, offset):
        return self.reader.count_before(offset)     # its own file handles: the read ahead goes on

    def _settle(self):
        """Wait for a read in flight (its chunk is dropped: the position is about to change)."""
        if self._ahead is not None:
            a, self._ahead = self._ahead, None
            a.exception()


class LogTail:
    """A source's view of a staged log it follows: which committed part files it has not read yet,
    the event-time frontier (no later tuple is older) and whether the log has ended. A look
    costs a stat of the manifest; it is read again only when it changed."""

    interval = 0.02

    def __init__(self, staged, man, names):
        if not is_log(man):
            raise InputError(f"{os.path.join(staged, MANIFEST)}: not a staged log; --follow tails a log written by "
                             f"`mpi-join stage --follow JOB` (this input was staged at rest: run it without --follow)")
        self.staged = staged
        self.known = {n: set(man["files"].get(n, {})) for n in names}
        self.records = {n: dict(man["files"].get(n, {})) for n in names}   # {stream: {part: {bytes, sha256}}}
        self.ended = bool(man["log"].get("ended"))
        self.frontier = self._frontier(man)
        self._stat = None

    @staticmethod
    def _frontier(man):
        ts = [st["ts_max"] for st in man["streams"].values() if st.get("ts_max") is not None]
        return max(ts) if ts else int(NEG_TS)

    def poll(self):
        """[new part files per stream, in the manifest's stream order], or None when nothing changed."""
        p = os.path.join(self.staged, MANIFEST)
        try:
            st = os.stat(p)
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self._stat:
            return None
        self._stat = key
        man = check_structure(read_manifest(self.staged), p)
        if not is_log(man):
            raise InputError(f"{p}: the staged log was replaced by input staged at rest while it was followed")
        new = []
        for n in self.known:
            names = sorted(set(man["files"].get(n, {})) - self.known[n])
            self.known[n].update(names)
            self.records[n].update({x: man["files"][n][x] for x in names})
            new.append([os.path.join(self.staged, n, x) for x in names])
        self.frontier = max(self.frontier, self._frontier(man))
        self.ended = bool(man["log"].get("ended"))
        return new


NEG_TS = -(2 ** 62)


class ArrayReader:
    """StreamReader's interface over a stream already in memory (sorted by seq)."""

    def __init__(self, arr, chunk_rows=65536):
        self.arr, self.chunk_rows = arr, chunk_rows
        self.count = len(arr)
        self._pos = 0

    def seek(self, seq):
        self._pos = self.count_before(seq)

    def skip_to(self, seq):
        self._pos = max(self._pos, self.count_before(seq))

    def count_before(self, offset):
        return int(np.searchsorted(self.arr[SEQ], offset))

    def limit(self, seq):
        """Nothing to limit: the rows are in memory (StreamReader.limit)."""

    def next_chunk(self):
        if self._pos >= self.count:
            return None
        c = self.arr[self._pos:self._pos + self.chunk_rows]
        self._pos += len(c)
        return c


def _row_groups(f, pf):
    """[(index, rows, seq min, seq max)] of a file's row groups (min/max None without statistics)."""
    out = []
    md = pf.metadata
    col = pf.schema_arrow.get_field_index(SEQ)
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        lo = hi = None
        if col >= 0:
            st = rg.column(col).statistics
            if st is not None and st.has_min_max:
                lo, hi = int(st.min), int(st.max)
        out.append((g, rg.num_rows, lo, hi))
    return out


def read_stream(staged, stream, man=None):
    """Read one stream's staged rows as a structured array sorted by seq (validated)."""
    r = StreamReader(staged, stream, man=man)
    parts = []
    while (c := r.next_chunk()) is not None:
        parts.append(c)
    return np.concatenate(parts) if parts else np.zeros(0, stream.dtype)


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
    for name in stored(stream.dtype):
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
    """Read and validate every stream of a job; returns arrays in job stream order (all in memory:
    for single-process tools; a run's driver reads incrementally through master/source.py)."""
    man = staged_manifest(job)
    arrays = [read_stream(job.staged, s, man) for s in job.streams]
    OrderCheck(job).check(arrays)
    return arrays


class OrderCheck:
    """seq must be dense from 0 across all streams and ts non-decreasing in seq: checked on
    consecutive slices of the merged input (one epoch at a time, or everything at once)."""

    def __init__(self, job, start=0):
        self.job = job
        self.next_seq = int(start)
        self.last_ts = None

    def check(self, parts):
        """`parts[k]`: stream k's rows of the next slice [next_seq, next_seq + total)."""
        seqs = np.concatenate([a[SEQ] for a in parts])
        if not len(seqs):
            return
        tss = np.concatenate([a[TS] for a in parts])
        sid = np.concatenate([np.full(len(a), k) for k, a in enumerate(parts)])
        order = np.argsort(seqs, kind="stable")
        seqs, tss, sid = seqs[order], tss[order], sid[order]
        dup = np.nonzero(seqs[1:] == seqs[:-1])[0]
        if len(dup):
            k = dup[0]
            where = sorted({self.job.streams[sid[k]].name, self.job.streams[sid[k + 1]].name})
            raise InputError(f"{os.path.join(self.job.staged, where[0])}: seq must be dense from 0 across streams; "
                             f"seq {seqs[k]} is used twice (streams {', '.join(where)})")
        want = np.arange(self.next_seq, self.next_seq + len(seqs))
        bad = np.nonzero(seqs != want)[0]
        if len(bad):
            k = bad[0]
            s = self.job.streams[sid[k]].name
            raise InputError(f"{os.path.join(self.job.staged, s)}: seq must be dense from 0 across streams; "
                             f"seq {want[k]} is missing (next is {seqs[k]})")
        if self.last_ts is not None and tss[0] < self.last_ts:
            back = np.array([0])
        else:
            back = np.nonzero(tss[1:] < tss[:-1])[0] + 1
        if len(back):
            k = back[0]
            prev = tss[k - 1] if k else self.last_ts
            s = self.job.streams[sid[k]].name
            raise InputError(f"{os.path.join(self.job.staged, s)}: ts goes backwards at seq {seqs[k]}: "
                             f"{tss[k]} after {prev} (ts must be non-decreasing in seq)")
        self.next_seq += len(seqs)
        self.last_ts = int(tss[-1])


def read_manifest(staged):
    """The staged manifest as a dict, None when there is none; InputError when it cannot be read."""
    p = os.path.join(staged, MANIFEST)
    if not os.path.exists(p):
        return None
    try:
        with open(p, "rb") as f:
            return json.loads(f.read(64 << 20).decode("utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{p}: the staged manifest cannot be read ({str(e).splitlines()[0][:100]}); "
                         f"stage again (`mpi-join stage JOB --force`)") from None


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_structure(man, p):
    """A manifest must add up: known format, counts >= 0 that sum to `total`, ts ranges in order,
    file records with sizes and checksums. Raises InputError naming the manifest and the field."""
    def bad(what):
        raise InputError(f"{p}: {what}; the staged manifest is damaged; stage again (`mpi-join stage JOB --force`)")
    if not isinstance(man, dict):
        bad("not a JSON object")
    if man.get("format") != FORMAT:
        bad(f"format is {str(man.get('format'))[:40]!r}, expected {FORMAT!r}")
    streams = man.get("streams")
    if not isinstance(streams, dict) or not all(isinstance(v, dict) for v in streams.values()):
        bad("'streams' is not a table of streams")
    for name, st in streams.items():
        n, lo, hi = st.get("count"), st.get("ts_min"), st.get("ts_max")
        if not _int(n) or n < 0:
            bad(f"streams.{name}.count is {n!r}, expected an integer >= 0")
        if n and not (_int(lo) and _int(hi) and lo <= hi):
            bad(f"streams.{name}: ts_min {lo!r} and ts_max {hi!r} are not an ordered pair of integers")
        if not isinstance(st.get("schema"), dict):
            bad(f"streams.{name}.schema is missing")
        reserved = [c for c in st["schema"] if isinstance(c, str) and c.startswith("_")]
        if reserved:
            bad(f"streams.{name}: column '{reserved[0]}' starts with '_', reserved for mpi-join's own columns")
        widths = st.get("string_bytes", {})
        if not isinstance(widths, dict) or not all(_int(w) and 1 <= w <= MAX_CHAR for w in widths.values()):
            bad(f"streams.{name}.string_bytes: expected {{column: bytes from 1 to {MAX_CHAR:,}}}")
        for c, t in st["schema"].items():
            if is_string(t) and c not in widths:
                bad(f"streams.{name}.string_bytes: no width recorded for string column '{c}'")
    total = man.get("total")
    if not _int(total) or total != sum(st["count"] for st in streams.values()):
        bad(f"total is {total!r}, the streams' counts add up to {sum(st['count'] for st in streams.values()):,}")
    files = man.get("files")
    if files is not None:
        if not isinstance(files, dict):
            bad("'files' is not a table")
        for name, recs in files.items():
            if not isinstance(recs, dict) or not all(
                    isinstance(r, dict) and _int(r.get("bytes")) and isinstance(r.get("sha256"), str)
                    for r in recs.values()):
                bad(f"files.{name}: expected {{part file: {{bytes, sha256}}}}")
    return man


def staged_files(job, man):
    """{stream: {part file name: {bytes, sha256}}} of the staged input now: the manifest's records,
    checked against the part files present (names and sizes; contents are hashed by `hash_input`).
    A manifest without records (staged by an older version) gives None."""
    files = man.get("files")
    if files is None:
        return None
    for s in job.streams:
        d = os.path.join(job.staged, s.name)
        want = files.get(s.name, {})
        have = set(part_names(d)) if not is_log(man) else set(part_names(d)) & set(want)
        for n in sorted(set(want) - have):
            raise InputError(f"{os.path.join(d, n)}: staged part file listed in the manifest is missing; stage again")
        for n in sorted(have - set(want)):
            raise InputError(f"{os.path.join(d, n)}: staged part file is not in the manifest; stage again")
        for n, rec in want.items():
            size = os.path.getsize(os.path.join(d, n))
            if size != rec["bytes"]:
                raise InputError(f"{os.path.join(d, n)}: staged part file has {size:,} bytes, the manifest records "
                                 f"{rec['bytes']:,}; it changed since staging; stage again")
    return {s.name: files.get(s.name, {}) for s in job.streams}


def hash_input(job, staged=None):
    """{stream: {part file: {bytes, sha256}}} computed from the part files in `staged` (default
    the job's staged input) now."""
    from .checksums import file_records
    staged = staged or job.staged
    man = read_manifest(staged) if os.path.isdir(staged) else None
    return {s.name: file_records(os.path.join(staged, s.name),
                                 committed_names(man, s.name, os.path.join(staged, s.name)))
            for s in job.streams}


def staged_manifest(job):
    """The staged input's manifest, checked against the job as it is now: the time unit and
    every stream's schema must be those the input was staged with. A unit changed after staging
    would silently read a 5 s window as 5000 s, and the oracle would make the same mistake, so
    every step that reads staged data (run, resume, oracle, verify, collect) comes through here."""
    p = os.path.join(job.staged, MANIFEST)
    if not os.path.isdir(job.staged):
        raise InputError(f"{job.staged}: staged input directory not found; stage the raw input with "
                         f"`mpi-join stage JOB` first")
    return check_manifest(job, read_manifest(job.staged), p)


def check_manifest(job, man, p):
    """`man`: the manifest read from `p` (None if there is none). See staged_manifest."""
    if man is None:
        raise InputError(f"{p}: missing: the staged input has no manifest; stage it with `mpi-join stage JOB`")
    check_structure(man, p)
    unit = man.get("ts_unit")
    if unit != job.ts_unit:
        raise InputError(f"{p}: the input was staged with ts_unit = \"{unit}\" and the job says "
                         f"\"{job.ts_unit}\": windows and timestamps would be read in the wrong unit; "
                         f"stage again (`mpi-join stage JOB`) or set job.ts_unit = \"{unit}\"")
    staged = man.get("streams", {})
    for st in job.streams:
        if st.name not in staged:
            raise InputError(f"{p}: stream '{st.name}' was not staged (staged: {', '.join(staged) or 'none'}); "
                             f"stage again")
        sch = staged[st.name].get("schema", {})
        widths = staged[st.name].get("string_bytes", {})
        for name in stored(st.dtype):
            want = st.dtype.fields[name][0]
            if name not in sch:
                raise InputError(f"{p}: stream '{st.name}' was staged without column '{name}'; stage again")
            if is_string(sch[name]) != is_string(st.schema.get(name)):
                raise InputError(f"{p}: stream '{st.name}' column '{name}' was staged as {sch[name]}, the job "
                                 f"declares {st.schema.get(name, type_name(want))}; stage again or change the job back")
            got = np.dtype([numpy_field(name, sch[name], p, widths.get(name))])[0]
            if got != want:
                raise InputError(f"{p}: stream '{st.name}' column '{name}' was staged as {sch[name]}, the job "
                                 f"declares {type_name(want)}; stage again or change the job back")
    return man
