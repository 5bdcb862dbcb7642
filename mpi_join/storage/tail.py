"""`mpi-join tail`: follow a run's committed results (commits.py), each result once."""
import os

import numpy as np

from ..schema import NULLS
from .commits import read_commits, read_committed


def follow(out, interval=0.2, once=False, stopped=lambda: False):
    """Yield (commit record, [new result part file paths]) as a followed run in `out` commits,
    each file once and checked against its record, until the run's final commit (or, with
    `once`, after what is committed now). A finished replay run (with _SUCCESS, no commits)
    yields its recorded parts once. Each look reads only the commits not yet read."""
    import time
    from .checksums import read_success, recorded_parts, verify_part
    seen, n = set(), 0
    rdir = os.path.join(out, "results")
    while not stopped():
        rec = read_committed(out, files=False)
        if rec is None and os.path.exists(os.path.join(out, "_SUCCESS")):
            parts = recorded_parts(read_success(os.path.join(out, "_SUCCESS")), os.path.join(out, "_SUCCESS"))
            rec = {"files": parts, "final": True, "commits": 1, "results": sum(r["rows"] for r in parts.values())}
        if rec is not None:
            files, n = _files_since(out, rec, n)
            new = sorted(set(files) - seen)
            for name in new:
                verify_part(os.path.join(rdir, name), files[name])
            seen.update(new)
            if new or rec.get("final"):
                yield rec, [os.path.join(rdir, name) for name in new]
            if rec.get("final"):
                return
        if once:
            return
        time.sleep(interval)


def _files_since(out, rec, n):
    """({name: record} of the commits from number `n` on, the next number to read) of a commit
    record (one that lists its files, format /1 or a replay's, is taken whole); a resume that
    took commits back has them read again from the first."""
    if "files" in rec:
        return rec["files"], rec["commits"]
    if rec["commits"] < n:
        n = 0
    files = {}
    try:
        for e in read_commits(out, n, rec["commits"]):
            files.update(e["files"])
    except FileNotFoundError:          # taken back as it was read: the next look reads again
        return {}, n
    return files, rec["commits"]


def project(job, names, columns):
    """(names, columns) of a result table with payloads (`names[k]` the name of `columns[k]`:
    <stream>_seq, emit_ns, latency_ns, <stream>_<column>) as the job's SELECT list gives them
    ([predicate] select), or as they are without one."""
    proj = job.projection()
    if not proj:
        return names, columns
    at = {n: k for k, n in enumerate(names)}
    return [n for n, _ in proj], [columns[at[src]] for _, src in proj]


class Payloads:
    """The staged columns of each result's tuples (`tail --with-payload`, `publish`). Each
    stream's rows are read once, as the followed log grows: a StreamReader per stream is given
    each newly committed part (checked against the manifest) and read on from where it was, so
    a commit costs what it added, never the whole log again. The newest `keep` rows of a stream
    are held; a result naming an older tuple (a long window's) has it read again by seek."""

    def __init__(self, job, keep=2_000_000):
        self.job, self.keep, self.top = job, keep, -1
        self.readers = [None] * len(job.streams)
        self.held = [Recent(s.rows_dtype, keep) for s in job.streams]
        self.rows = [h.view() for h in self.held]

    def names(self):
        return [f"{s.name}_{c}" for s in self.job.streams for c in ["ts", *s.schema]]

    def _grow(self):
        """Read what the log committed since the last call."""
        from .staged import StreamReader, staged_manifest, stream_files
        man = staged_manifest(self.job)
        for k, s in enumerate(self.job.streams):
            r = self.readers[k]
            if r is None:
                self.readers[k] = StreamReader(self.job.staged, s, man=man, nulls=True)
            else:                                  # the parts committed since: those it has not
                had = {p[0] for p in r.parts}
                r.add([f for f in stream_files(self.job.staged, s.name, man) if f not in had],
                      (man.get("files") or {}).get(s.name))
            chunks = []
            while (c := self.readers[k].next_chunk()) is not None:
                chunks.append(c)
            self.rows[k] = self.held[k].add(chunks)
        self.top = max([int(a["seq"][-1]) for a in self.rows if len(a)] + [-1])

    def _older(self, k, q):
        """Stream k's rows of seqs `q` (sorted, unique) below what is held: read again."""
        from .staged import StreamReader, staged_manifest
        r = StreamReader(self.job.staged, self.job.streams[k], man=staged_manifest(self.job), nulls=True)
        r.seek(int(q[0]))
        got = []
        while (c := r.next_chunk()) is not None:
            got.append(c[np.isin(c["seq"], q)])
            if c["seq"][-1] >= q[-1]:
                break
        return np.concatenate(got) if got else np.zeros(0, self.rows[k].dtype)

    def values(self, seqs):
        """Per result (rows of `seqs`: one column per stream, -1 for an outer join's missing
        side), its payload values in the order of names()."""
        cols = self.columns(seqs)
        return list(zip(*cols)) if cols else [() for _ in range(len(seqs))]

    def columns(self, seqs):
        """values(), a list per payload column (None where a result has no such tuple)."""
        if seqs.size and int(seqs.max()) > self.top:
            self._grow()
        cols = []
        for k, s in enumerate(self.job.streams):
            a, q = self.rows[k], seqs[:, k]
            if len(a) and ((q >= 0) & (q < a["seq"][0])).any():
                a = np.concatenate([self._older(k, np.unique(q[(q >= 0) & (q < a["seq"][0])])), a])
            at = np.minimum(np.searchsorted(a["seq"], q), max(len(a) - 1, 0))
            ok = (q >= 0) & (len(a) > 0)
            ok[ok] = a["seq"][at[ok]] == q[ok]
            flags = a[NULLS][at] if len(a) else np.zeros((len(q), len(s.schema)), np.uint8)
            for i, c in enumerate(["ts", *s.schema]):
                vals = _plain_column(a[c][at] if len(a) else np.zeros(len(q), a.dtype[c]))
                good = ok if i == 0 else ok & (flags[:, i - 1] == 0)      # a staged null is null
                cols.append(vals if good.all() else [v if g else None for v, g in zip(vals, good)])
        return cols


class Recent:
    """The newest `keep` rows of a stream, in a buffer with room to append: rows held are
    moved once per `keep` or so appended, where a concatenation of all of them per commit was a
    fifth of the publisher's time at 60,000 records/s per stream (two million rows held)."""

    def __init__(self, dtype, keep):
        self.buf, self.lo, self.hi, self.keep = np.zeros(0, dtype), 0, 0, int(keep)

    def view(self):
        return self.buf[self.lo:self.hi]

    def add(self, chunks):
        """Append `chunks` (arrays of the dtype); returns the rows held now (a view)."""
        n = sum(len(c) for c in chunks)
        if self.hi + n > len(self.buf):          # no room: the rows still held after these, moved to a new buffer
            kept = self.buf[max(self.lo, self.hi - max(self.keep - n, 0)):self.hi]
            buf = np.empty(max(2 * min(len(kept) + n, self.keep + n), 1024), self.buf.dtype)
            buf[:len(kept)] = kept
            self.buf, self.lo, self.hi = buf, 0, len(kept)
        for c in chunks:
            self.buf[self.hi:self.hi + len(c)] = c
            self.hi += len(c)
        self.lo = max(self.lo, self.hi - self.keep)
        return self.view()


def _plain_column(col):
    """A column of staged values as Python values (_plain, a whole column at once for numbers)."""
    if col.dtype.shape or col.dtype.kind == "S":
        return [_plain(v, col.dtype) for v in col]
    return col.tolist()


def _plain(v, dt):
    """A staged value as text or a number: char columns as text without their padding, arrays
    as base64 (as a CSV or JSON landing file gives them)."""
    import base64
    import numpy as np
    if dt.shape:
        return base64.b64encode(np.ascontiguousarray(v).tobytes()).decode()
    if dt.kind == "S":
        return bytes(v).rstrip(b"\0").decode("utf-8", "replace")
    return v.item() if hasattr(v, "item") else v
