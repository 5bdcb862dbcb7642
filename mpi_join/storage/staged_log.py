"""The staged log (README "Live streams"): the staged layout, grown by atomic batch commits.

A live stager hands each micro-batch's parsed rows to `LogWriter.commit`. Rows wait until the
event-time watermark passes them (`advance`), then are written as one part file per stream, with
`seq` continuing from the last batch, in (event time, stream, file, row) order. A row older than
what has already been written is late: it goes to `_quarantine/<stream>/late-bNNNNNN.parquet`
with "late by X". The commit point is the atomic replace of `_manifest.json`, which lists every
committed file; readers (`staged.stream_files`) read only those, so a reader sees a batch whole
or not at all, and every committed prefix keeps the staged layout's contract (seq dense across
streams, ts non-decreasing in seq). The rows still waiting are saved with the commit, so a
restarted stager continues where the last commit ended; a micro-batch the log already holds
(Spark replays the one it was in after a kill) is skipped by its id.

Layout added to the staged layout:
    _log/batch-NNNNNN.json      one entry per committed batch (seq, event-time range, rows,
                                files and checksums, watermark, late and quarantined counts)
    _log/pending-NNNNNN.npz     the rows waiting for the watermark after batch NNNNNN
    _log/end.json               the end marker (also in the manifest's log.ended)
"""
import json
import os
import re
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

from ..errors import InputError, JobError
from .checksums import file_records, file_sha256
from ..schema import SEQ, TS, to_arrow
from .staged import FORMAT, MANIFEST, check_part, check_structure, is_log, read_manifest, string_columns
from ..units import ts_unit_ns
from .landed import LINES, remember
from .log_files import LOG, LogFiles, quarantine_changed

NOTHING = object()
# a log part's rows also carry when the stager first saw their landing file (wall-clock ns): the
# readers of staged input read only the declared columns; latency.py reads this one
LANDED = "_landed_ns"
EXTRA = [("_src", np.int32), ("_rec", np.int64)]   # a waiting row's source file (index) and record


def waiting_dtype(stream):
    """A stream's staged row (with its null flags) plus where it came from (file index into the
    log's sources, record)."""
    return np.dtype(list(stream.rows_dtype.descr) + EXTRA)


def advance(pending, arrivals, max_seen, frontier, lateness, flush=False, until=None, idle=None, hold=None):
    """One step of the watermark (no I/O, so it is tested as it is).

    `pending`, `arrivals`: per stream, rows (waiting_dtype) waiting and just arrived. `max_seen`:
    per stream, the largest event time seen (None: none yet). `frontier`: the largest event time
    written so far (None: nothing yet). Each stream's watermark is its max_seen less `lateness`;
    rows at or below the smallest watermark (every stream's, so that no stream can still send an
    older row) are released; `flush` releases every waiting row (the end of the input), `until`
    caps the release at that event time. `idle`: per stream, whether it has been silent longer
    than [input] idle_timeout; an idle stream does not hold the bound back (when every stream is
    idle, nothing is released), and its rows, when it wakes, are late if behind the frontier.
    `hold`: per stream, None, or an event time its max_seen counts as at most (a Kafka partition
    with records still unread has given no more: kafka_source.py), or NOTHING (nothing released).

    Returns (released, late, pending, max_seen, frontier, bound): per stream, the rows released
    (unordered across streams; `order` orders them), the late rows (older than `frontier`), the
    rows still waiting; then the new max_seen and frontier, and the release bound used."""
    M = len(arrivals)
    max_seen, released, late, keep = list(max_seen), [], [], []
    for k in range(M):
        a = arrivals[k]
        bad = a[TS] < frontier if frontier is not None else np.zeros(len(a), bool)
        late.append(a[bad])
        if len(a):
            top = int(a[TS].max())
            max_seen[k] = top if max_seen[k] is None else max(max_seen[k], top)
        pool = np.concatenate([pending[k], a[~bad]]) if len(pending[k]) else a[~bad]
        keep.append(pool)
    held = _held(max_seen, idle, hold)
    if flush:
        bound = until                    # None: release everything
    elif not held or any(m is None for m in held):
        bound = NOTHING                  # a stream not heard from yet may still send anything
    else:
        bound = min(m - lateness for m in held)
        bound = bound if until is None else min(bound, until)
    for k in range(M):
        pool = keep[k]
        if bound is None:
            take = np.ones(len(pool), bool)
        elif bound is NOTHING:
            take = np.zeros(len(pool), bool)
        else:
            take = pool[TS] <= bound
        released.append(pool[take])
        keep[k] = pool[~take]
        if take.any():
            top = int(released[k][TS].max())
            frontier = top if frontier is None else max(frontier, top)
    bound = None if bound is NOTHING else bound
    return released, late, keep, max_seen, frontier, bound


def _held(max_seen, idle, hold):
    """The max_seen of the streams that hold the watermark back (the idle ones do not), each at
    most its hold; a None among them (not heard from, or held at NOTHING) releases nothing."""
    out = []
    for k, m in enumerate(max_seen):
        if idle and idle[k]:
            continue
        h = hold[k] if hold else None
        out.append(None if h is NOTHING else m if h is None or m is None else min(m, h))
    return out


def order(released, sources, next_seq, origin=False):
    """Number the released rows of every stream with seq from `next_seq`, in (event time, stream,
    source file, record) order. Returns per stream its rows in seq order, without the origin
    columns (the staged dtype); with `origin`, (those, per stream each row's source index)."""
    n = sum(len(r) for r in released)
    if not n:
        rows = [r[[f for f in r.dtype.names if f not in ("_src", "_rec")]] for r in released]
        return (rows, [r["_src"] for r in released]) if origin else rows
    rank = np.empty(max(1, len(sources)), np.int64)
    rank[np.argsort(np.array(sources, dtype=object), kind="stable")] = np.arange(len(sources))
    ts = np.concatenate([r[TS] for r in released])
    sid = np.concatenate([np.full(len(r), k) for k, r in enumerate(released)])
    src = np.concatenate([rank[r["_src"]] for r in released])
    rec = np.concatenate([r["_rec"] for r in released])
    perm = np.lexsort((rec, src, sid, ts))
    seq = np.empty(n, np.int64)
    seq[perm] = np.arange(next_seq, next_seq + n)
    out, srcs, at = [], [], 0
    for k, r in enumerate(released):
        s = seq[at:at + len(r)]
        at += len(r)
        o = np.argsort(s, kind="stable")
        rows = r[o].copy()
        rows[SEQ] = s[o]
        out.append(rows[[f for f in r.dtype.names if f not in ("_src", "_rec")]])
        srcs.append(rows["_src"])
    return (out, srcs) if origin else out


def lateness_text(delta, ts_unit):
    """A lateness in the job's time unit, in words ("late by 1.5 s")."""
    s = delta * ts_unit_ns(ts_unit) / 1e9
    return f"late by {s:g} s" if s >= 1 else f"late by {delta:,} {ts_unit}"


def batch_records(out, man):
    """The log's batch records (_log/batch-*.json) as the manifest records them (SHA-256 each),
    in batch order; one edited or missing after its commit raises InputError naming it. A log
    written before the manifest recorded them gives them unchecked."""
    sums = man["log"].get("batch_files")
    names = sorted(sums) if sums is not None else sorted(
        f for f in os.listdir(os.path.join(out, LOG)) if f.startswith("batch-") and f.endswith(".json"))
    out_ = []
    for n in names:
        p = os.path.join(out, LOG, n)
        if sums is not None and (not os.path.isfile(p) or file_sha256(p) != sums[n]):
            raise InputError(f"{p}: the log's batch record is missing or changed since it was committed (SHA-256 "
                             f"differs from the manifest's)")
        with open(p) as f:
            out_.append(json.load(f))
    return out_


def hold_staged(out, follow=False, force=False, say=None):
    """Lock the staged directory `out` for this command, before any JVM starts, so that a second
    writer (a stager, a stage at rest, a pipeline) is refused at once with one line; and refuse
    what would destroy a log: staging at rest into a log that has not ended would delete its
    committed part files (rows whose landing files are gone would be lost for good), and into an
    ended one needs --force, as does following an ended log again (a new log). Returns the DirLock to release, or None where `out` is not local (a
    directory on HDFS is Spark's to write)."""
    from .paths import DirLock, local, real
    if not local(out):
        return None
    root = real(out[len("file://"):] if out.startswith("file://") else out)
    lock = DirLock(root, "the staged directory", say=say).acquire()
    try:
        try:
            man = read_manifest(root)
        except InputError:
            man = None                       # damaged: staging writes a new one
        if follow and is_log(man) and man["log"].get("ended") and not force:
            raise JobError(f"{os.path.join(root, LOG, 'end.json')}: the log has ended "
                           f"({man['log']['ended'].get('reason')}); pass --force to start a new log")
        if not follow and is_log(man):
            what = (f"{root}: holds a staged log ({man.get('total', 0):,} tuples in "
                    f"{man['log'].get('batches', 0)} batches)")
            if not man["log"].get("ended"):
                raise JobError(f"{what} that has not ended: staging at rest here would delete its committed part "
                               f"files, and rows whose landing files are gone would be lost; stage into a directory "
                               f"of its own (--out DIR), or end the log first (`mpi-join stage --follow JOB --until "
                               f"end`)")
            if not force:
                raise JobError(f"{what}: staging at rest replaces it; pass --force to, or stage into a directory "
                               f"of its own (--out DIR)")
    except BaseException:
        lock.release()
        raise
    return lock


def refuse_live(job):
    """What a live log cannot hold, said before any JVM starts: a `string` column (its width is
    set by the longest value, which a log that grows cannot know)."""
    for s in job.streams:
        if string_columns(s):
            c = string_columns(s)[0]
            raise JobError(f"{job.path}: streams.{s.name}.schema.{c}: a live log holds text at a fixed width; "
                           f"declare it char(N) (longer values are quarantined)")


class LogWriter:
    """The stager's side of the log: opens (or starts) the log in `out`, commits batches."""

    def __init__(self, job, out, lateness, settings, say=None):
        from .paths import plain_dir, inside
        self.job, self.out, self.lateness, self.say = job, out, int(lateness), say or (lambda m: None)
        self.names = [s.name for s in job.streams]
        self.files = LogFiles(out, self.names)        # log_files.py: each written whole, in `out`
        for s in job.streams:
            for d in (os.path.join(out, s.name), os.path.join(out, "_quarantine", s.name)):
                plain_dir(d, "a folder the log writes")
                inside(out, d)
        plain_dir(os.path.join(out, LOG), "the log's folder")
        man = read_manifest(out)
        if man is not None and not is_log(man):
            raise JobError(f"{out}: holds input staged at rest, not a log; stage the live input into a directory "
                           f"of its own, or pass --force to replace it")
        settings = json.loads(json.dumps(settings))      # as the manifest holds them (lists, not tuples)
        if man is None:
            man = self._fresh(settings)
        else:
            check_structure(man, os.path.join(out, MANIFEST))
            if man["log"].get("ended"):
                raise JobError(f"{os.path.join(out, LOG, 'end.json')}: the log has ended "
                               f"({man['log']['ended']['reason']}); pass --force to start a new log")
            if man["log"].get("settings") != settings:
                raise JobError(f"{os.path.join(out, MANIFEST)}: the log was started with other settings (streams, "
                               f"schemas, raw sources, allowed_lateness); pass --force to start a new log")
            batch_records(out, man)      # and the batch records it wrote
            for n in self.names:        # the parts it continues from must be those it committed
                recs = man["files"].get(n, {})
                for part in sorted(recs):
                    check_part(os.path.join(out, n, part), recs)
        self.man = man
        self.log.setdefault("landed", {})                 # landing file -> what was read of it (landed.py)
        self.log.setdefault("rewritten", {n: 0 for n in self.names})
        # when each stream last sent a row: from now, also after a restart (idle_timeout, _idle)
        self.log["heard_ns"] = {n: time.time_ns() for n in self.names}
        self.pending = self.files.load_pending(self.log.get("pending"), [waiting_dtype(s) for s in job.streams])
        self.files.sweep(self.man)

    # -- state ---------------------------------------------------------------------------
    def _fresh(self, settings):
        refuse_live(self.job)
        for d in [LOG] + self.names + [os.path.join("_quarantine", n) for n in self.names]:
            os.makedirs(os.path.join(self.out, d), exist_ok=True)
        man = {"format": FORMAT, "ts_unit": self.job.ts_unit, "total": 0, "files": {n: {} for n in self.names},
               "quarantined": {n: 0 for n in self.names},
               "streams": {s.name: {"count": 0, "ts_min": None, "ts_max": None,
                                    "schema": {"seq": "int64", "ts": "int64", **dict(s.schema)}}
                           for s in self.job.streams},
               "log": {"settings": settings, "batches": 0, "spark_batch": -1, "frontier": None,
                       "max_seen": {n: None for n in self.names}, "late": {n: 0 for n in self.names},
                       "sources": [], "pending": None, "quarantine_files": {}, "ended": None,
                       "allowed_lateness": self.lateness}}
        self.files.manifest(man)
        return man

    @property
    def log(self):
        return self.man["log"]

    # -- committing ----------------------------------------------------------------------
    def commit(self, spark_batch, arrivals, paths, bad=None, flush=False, until=None, end=None, timing=None,
               seen_ns=None, consumed=None, known=None, kafka=None):
        """Commit one micro-batch (returns its log entry, or None when the log holds it).
        `arrivals`: per stream, staged-dtype rows, `_src` indexing `paths` (this batch's sources),
        `_rec` their records; `bad`: per stream unparseable rows (Arrow) or None; `seen_ns`: when
        the stager saw the new sources. Kept for a restart: `consumed`, landing files read;
        `kafka`, KafkaInputs.state() (offsets, each partition's largest event time, the holds);
        `known`, {local path: record} of files looked at before they were read."""
        if spark_batch is not None and spark_batch <= self.log["spark_batch"]:
            return None
        srcs = self.log["sources"]
        index = {p: i for i, p in enumerate(srcs)}
        remap = np.array([index.setdefault(p, len(index)) for p in paths] or [0], np.int32)
        srcs.extend(p for p in paths if index[p] >= len(srcs))
        # a stream source (a socket) spans batches: its records continue from the last batch's
        base = self.log.setdefault("records", {})
        offset = np.array([base.get(p, 0) for p in paths] or [0], np.int64)
        arr = []
        for a in arrivals:
            a = a.copy()
            if len(a):
                a["_rec"] += offset[a["_src"]]
                a["_src"] = remap[a["_src"]]
            arr.append(a)
        if bad and any(p in base or _counted(p) for p in paths):
            bad = [_shift_records(t, base) for t in bad]
        for i, p in enumerate(paths):
            if _counted(p):
                n = [int(a["_rec"][a["_src"] == remap[i]].max()) for a in arr if (a["_src"] == remap[i]).any()]
                n += [int(pa.compute.max(t.column("record")).as_py()) for t in (bad or []) if t is not None
                      and t.num_rows and p in t.column("file").to_pylist()]
                base[p] = max([base.get(p, 0)] + n)
        remember(self.log["landed"], arrivals, paths, bad, self.names, os.path.join(self.out, LOG, LINES), known)
        max_seen = [self.log["max_seen"][n] for n in self.names]
        idle = self._idle(arr, bad)
        released, late, keep, max_seen, frontier, bound = advance(
            self.pending, arr, max_seen, self.log["frontier"], self.lateness, flush=flush, until=until, idle=idle,
            hold=kafka["hold"] if kafka else None)
        # when the stager first saw each source: a row's landing time (column LANDED of its part)
        seen = self.log.setdefault("seen_ns", [])
        seen.extend([int(seen_ns or time.time_ns())] * (len(srcs) - len(seen)))
        for p in paths:                  # a stream source's records go on: seen as they come
            if _streamed(p):
                seen[index[p]] = int(seen_ns or time.time_ns())
        rows, origin = order(released, srcs, self.man["total"], origin=True)
        b = self.log["batches"]
        t_begin = time.time_ns()
        entry = {"batch": b, "spark_batch": spark_batch, "committed_ns": t_begin,
                 "seq": [self.man["total"], self.man["total"] + sum(len(r) for r in rows)],
                 "watermark": bound, "frontier": frontier, "streams": {}, **(timing or {})}
        entry.update({"idle": self.log["idle"]} if any(idle) else {})
        for k, s in enumerate(self.job.streams):
            n = s.name
            st = self.man["streams"][n]
            e = {"rows": int(len(rows[k])), "late": int(len(late[k])),
                 "quarantined": int(bad[k].num_rows) if bad and bad[k] is not None else 0, "files": {}}
            if len(rows[k]):
                name = f"part-b{b:06d}.parquet"
                landed = np.asarray(seen, np.int64)[origin[k]] if len(seen) else np.zeros(len(rows[k]), np.int64)
                self.files.parquet(os.path.join(self.out, n), name,
                                     to_arrow(rows[k]).append_column(LANDED, pa.array(landed)))
                e["files"] = file_records(os.path.join(self.out, n), [name])
                e["seq"] = [int(rows[k][SEQ][0]), int(rows[k][SEQ][-1])]
                e["ts"] = [int(rows[k][TS][0]), int(rows[k][TS][-1])]
                st["count"] += len(rows[k])
                st["ts_min"] = e["ts"][0] if st["ts_min"] is None else st["ts_min"]
                st["ts_max"] = e["ts"][1]
                self.man["files"][n].update(e["files"])
            qf = []
            if len(late[k]):
                qf.append(self.files.quarantine(n, f"late-b{b:06d}.parquet", _late_table(self.job, late[k], self.log["frontier"], srcs)))
            if e["quarantined"]:
                qf.append(self.files.quarantine(n, f"bad-b{b:06d}.parquet", bad[k]))
            if qf:
                self.log["quarantine_files"].setdefault(n, []).extend(qf)
            self.log["late"][n] += e["late"]
            self.man["quarantined"][n] += e["late"] + e["quarantined"]
            entry["streams"][n] = e
        self.man["total"] += sum(len(r) for r in rows)
        old_pending = (self.log.get("pending") or {}).get("file")
        waiting = sum(len(p) for p in keep)
        self.log["pending"] = self.files.save_pending(b, keep) if waiting else None
        entry["pending"] = waiting
        entry["committed_ns"] = time.time_ns()          # the manifest is replaced right after
        entry["commit_ms"] = round((entry["committed_ns"] - t_begin) / 1e6, 1)
        self.log.update(batches=b + 1, frontier=frontier, max_seen=dict(zip(self.names, max_seen)),
                        watermark=bound, last_commit_ns=entry["committed_ns"])
        if spark_batch is not None:
            self.log["spark_batch"] = spark_batch
        if consumed:
            self.log.setdefault("consumed", []).extend(consumed)
        if kafka:                   # KafkaInputs.state(): every partition's, so replaced whole
            self.log.update(kafka_offsets=kafka["offsets"], kafka_max_seen=kafka["max_seen"])
        if end is not None:
            self.log["ended"] = dict(end, beyond_until=waiting, seq_end=self.man["total"])
        self.files.json(os.path.join(self.out, LOG), f"batch-{b:06d}.json", entry)
        self.log.setdefault("batch_files", {})[f"batch-{b:06d}.json"] = file_sha256(
            os.path.join(self.out, LOG, f"batch-{b:06d}.json"))      # the manifest covers the records
        self.files.manifest(self.man)                       # the commit point
        self.pending = keep
        if end is not None:
            self.files.json(os.path.join(self.out, LOG), "end.json", self.log["ended"])
        if old_pending and old_pending != (self.log.get("pending") or {}).get("file"):
            from .paths import remove_file
            remove_file(self.out, os.path.join(self.out, LOG, old_pending))
        return entry

    def _idle(self, arrivals, bad, now_ns=None):
        """Per stream, whether it has sent nothing (no row, good or bad) for longer than the job's
        idle_timeout (Flink's withIdleness); what each was last heard is kept in the log."""
        now = time.time_ns() if now_ns is None else now_ns
        heard = self.log["heard_ns"]
        for k, n in enumerate(self.names):
            if len(arrivals[k]) or (bad and bad[k] is not None and bad[k].num_rows):
                heard[n] = now
        t = self.job.idle_timeout_ns
        idle = [t is not None and now - heard.get(n, now) > t for n in self.names]
        self.log["idle"] = [n for n, i in zip(self.names, idle) if i]
        return idle

    def quarantine_changed(self, say):
        """Landing files that changed after they were staged: log_files.quarantine_changed."""
        return quarantine_changed(self, say)

    def end(self, reason, until=None):
        """Release what waits (up to `until`, if given) and write the end marker."""
        return self.commit(None, [np.zeros(0, waiting_dtype(s)) for s in self.job.streams], [],
                           flush=True, until=until, end={"reason": reason, "ended_ns": time.time_ns()})

    def consume(self, records):
        """Landing files read that hold nothing to stage (empty, or a staged file's bytes:
        follow._already_staged), {URI: record}, kept in log["landed"] (a change to one is then
        quarantined) and log["consumed"] (no restart reads them); committed by the manifest."""
        self.log["landed"].update(records)
        self.log.setdefault("consumed", []).extend(records)
        self.files.manifest(self.man)

def _late_table(job, rows, frontier, srcs):
    """Late rows as the quarantine holds them: file, record, reason ("late by ..."), the row."""
    t = to_arrow(rows[[f for f in rows.dtype.names if f not in ("_src", "_rec", SEQ)]])
    why = [lateness_text(int(frontier - ts), job.ts_unit) for ts in rows[TS]]
    return t.add_column(0, "reason", pa.array(why)).add_column(
        0, "record", pa.array(rows["_rec"])).add_column(0, "file", pa.array([srcs[i] for i in rows["_src"]]))


def _streamed(path):
    """Is this source a stream (a socket) rather than a file, whose records go on across batches?"""
    return "://" in path and not path.startswith("file:")


def _counted(path):
    """A stream source whose records the log numbers across batches (a socket): not a Kafka
    partition, whose records are numbered by their offsets."""
    return _streamed(path) and not path.startswith("kafka://")


def _shift_records(t, base):
    """Quarantined rows of a streamed source: records continue from the last batch's."""
    if t is None or not t.num_rows:
        return t
    files = t.column("file").to_pylist()
    rec = t.column("record").to_numpy() + np.array([base.get(f, 0) if _counted(f) else 0 for f in files], np.int64)
    return t.set_column(t.schema.get_field_index("record"), "record", pa.array(rec))


def until_ts(text, job):
    """`--until` as an event time in the job's unit: a number (in the job's unit) or ISO-8601 text."""
    import datetime
    try:
        v = int(text)
    except ValueError:
        v = None
    if v is not None:
        if not -(2 ** 62) < v < 2 ** 62:
            raise JobError(f"--until: {text[:40]} is out of range: an event time is an int64 in {job.ts_unit} "
                           f"(at most 2^62 in magnitude)")
        return v
    # the fraction of a second is read exactly (fromisoformat keeps 6 digits and drops the rest)
    m = re.fullmatch(r"(.*\d\d:\d\d:\d\d)[.,](\d+)(.*)", text.strip())
    whole, frac, zone = (m.group(1), m.group(2), m.group(3)) if m else (text.strip(), "", "")
    if frac.rstrip("0")[9:]:
        raise JobError(f"--until: {text!r} has a fraction of a second finer than a nanosecond")
    try:
        d = datetime.datetime.fromisoformat(whole + zone)
    except ValueError:
        raise JobError(f"--until: {text!r} is neither 'end', an event time in {job.ts_unit} nor ISO-8601 text") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    secs = (d - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(seconds=1)
    ns = secs * 10**9 + int((frac + "0" * 9)[:9])
    return ns // ts_unit_ns(job.ts_unit)
