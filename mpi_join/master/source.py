"""The source: replays M staged streams merged in seq order at the configured rate, an epoch at a
time, reading the Parquet files incrementally so rank 0's memory does not grow with the input.

Each released tuple gets the runtime columns of window.py: its own `_coord`, and `lo` over every
other stream (`_lo` for a binary join: over the opposite stream; `_los[j]` for M > 2). The
source also gives each stream's expiry bound: the smallest lo that any tuple still to come can
have over it. The input is checked as it is read (seq dense across streams, ts non-decreasing,
rows in seq order), and an error names the file and row.

With several sources (run.sources = k), each releases its share: the input is dealt in parts of
about `run.part` tuples (seq ranges, a whole number of batches; by default four row groups of
each stream, so a source decodes little more than its own parts), part p to source p mod k. A
source releases whole batches of its parts (batch b holds seq [b x B, (b + 1) x B), so every
source numbers batches alike: `batch_no`) and skips the others' parts (count-window coordinates
continue from the files' counts), so every batch, its coordinates and its bounds are what one
source would give. Each source checks its own parts, and the first tuple past each of them.

A followed log with several sources: a source releases a batch once all of it is committed (or
the log has ended), and goes past the others' parts once the log holds them (their counts are
the coordinates' base), so batches and parts are those of the log at rest.
"""
import time

import numpy as np

from ..errors import InputError
from ..schema import SEQ, TS
from ..storage.staged import ROW_GROUP, ArrayReader, LogTail, OrderCheck, Prefetched, StreamReader
from ..join.window import NEG_INF, POS_INF, coords, lows, runtime_dtype


def default_part(job):
    """Tuples per part when run.part is not set: about four row groups of each stream (source i
    reads little more than its own parts; every link from a source has credit for a whole part,
    the driver's Credits, so each source can send its next part while the entries take another's),
    and no more than checkpoint.every_tuples: with several sources a checkpoint is cut at a part
    boundary, so parts larger than that would take fewer checkpoints than asked, or none."""
    part = 4 * ROW_GROUP * len(job.streams)
    every = job.checkpoint.every_tuples if job.checkpoint is not None else None
    return min(part, every) if every else part


class Source:
    def __init__(self, job, annotate=None, slots=1, chunk_rows=65536, counts=None, arrays=None, man=None,
                 follow=False, share=(0, 1)):
        """`arrays`: replay these in-memory streams instead of the staged files (tests, tools).
        `man`: the staged manifest the run read (a log is read at that commit); `follow`: tail the
        staged log, releasing batches as they are committed, until its end marker. `share`:
        (i, k): release the parts of source i of k (the module docstring)."""
        self.job = job
        self.M = len(job.streams)
        if share[1] > 1:     # a row group at a time: a source reads little past its own parts
            chunk_rows = min(chunk_rows, ROW_GROUP)
        self.readers = ([Prefetched(StreamReader(job.staged, s, chunk_rows, man)) for s in job.streams]
                        if arrays is None else [ArrayReader(a, chunk_rows) for a in arrays])
        self.tail = LogTail(job.staged, man, [s.name for s in job.streams]) if follow else None
        self.windows = [s.window for s in job.streams]
        self.dtypes = [runtime_dtype(s.dtype, self.M) for s in job.streams]
        self.annotate = annotate                 # annotate(batch, stream) fills strategy columns
        self.total = sum(r.count for r in self.readers)
        if counts is not None and list(counts) != [r.count for r in self.readers]:
            raise InputError(f"{job.staged}: the manifest counts {list(counts)} tuples per stream, the Parquet "
                             f"files hold {[r.count for r in self.readers]}; stage the input again")
        self.released = 0
        self._bounds, self._bounds_at = None, None
        self.cursor = [0] * self.M               # tuples of each stream released so far
        self._buf = [np.zeros(0, s.dtype) for s in job.streams]
        self._eof = [False] * self.M
        self.check = OrderCheck(job)
        self._first_ts = None
        self.rate = job.run.rate
        self.t0 = None
        self.start = 0
        # with sub-groups an epoch is `slots` slots: each releases a slot's share
        self.batch_size = max(1, -(-job.run.batch_size // slots))
        self.flush_ns = job.run.flush_interval_ns / slots
        self.index, self.k = share
        part = job.run.part or default_part(job)
        self.part_rows = self.batch_size * max(1, -(-part // self.batch_size)) if self.k > 1 else None
        self.batch_no = -1                       # several sources: the number of the batch last released
        self.own = 0                             # tuples this source released (its share)
        self._in_part = False                    # released some of the part it is on
        self.origin = 0                          # where this run's replay starts (a resumed one's offset)
        self._skip = None                        # several sources, a followed log: go past seq below
        if self.k > 1:                           # this once the log holds it (_pass)
            self._pass(self.index * self.part_rows)

    @property
    def _end(self):
        """Where the input ends, as far as is known: a followed log's end is not known until it ends."""
        return self.total if self.tail is None or self.tail.ended else 1 << 62

    @property
    def part_end(self):
        """Where the part being released ends (one source: the input's end)."""
        if self.k == 1:
            return self.total
        return min(self._end, (self.released // self.part_rows + 1) * self.part_rows)

    @property
    def part(self):
        return self.released // self.part_rows if self.k > 1 else 0

    @property
    def at_part_start(self):
        """Several sources: about to release the first batch of a part (a checkpoint's marker or a
        wait for the lease goes here: master/driver.py)."""
        return self.k > 1 and not self._in_part and not self.done

    def resume_at(self, offset):
        """Go on from input `offset` (a checkpoint's): with several sources, from this source's
        first part at or past it (checkpoints of several sources are at part boundaries)."""
        self.seek(offset)
        self.origin = int(offset)
        if self.k > 1:
            p = self.origin // self.part_rows
            self._pass((p + (self.index - p) % self.k) * self.part_rows)

    def part_done(self):
        """Has this source released the whole part it was on (several sources)?"""
        return self._in_part and (self.released % self.part_rows == 0 or self.released >= self._end)

    def next_part(self):
        """Past the other sources' parts, to this source's next one (or the input's end)."""
        self._pass(self.released + (self.k - 1) * self.part_rows)

    def _pass(self, end):
        """Go past every tuple with seq < `end` without releasing it: the row groups of other
        sources' parts are not read (StreamReader.skip_to); counts come from the files'
        statistics. The first tuple past the part just released is checked against its last
        (seq dense, ts not going back), so every part boundary is checked by one source. A
        followed log that does not hold them all yet: later (wait_for_input)."""
        if end > self.total and (self.tail is not None and not self.tail.ended):
            self._skip = end
            return
        self._skip = None
        end = min(end, self.total)
        if end <= self.released:
            return
        heads = [b[:1] if len(b) and b[SEQ][0] == self.released else b[:0] for b in self._buf]
        if self._in_part:
            self.check.check(heads)
        for k in range(self.M):
            b = self._buf[k]
            self._buf[k] = b[int(np.searchsorted(b[SEQ], end)):]
            if not len(self._buf[k]) and not self._eof[k]:
                self.readers[k].skip_to(end)
            self.cursor[k] = self.readers[k].count_before(end)
        self.released = end
        self.check = OrderCheck(self.job, end)
        self._in_part = False
        for r in self.readers:            # no reading ahead past this part (the next is another's)
            r.upto = self.part_end

    @property
    def done(self):
        return self._skip is None and self.released >= self.total and (self.tail is None or self.tail.ended)

    def _ready(self):
        """Can the next release go out? One source: any tuple past those released is committed;
        several: this source's whole next batch is (batches are fixed seq ranges), and the
        others' parts before it, which it goes past, too."""
        if self._skip is not None:
            self._pass(self._skip)
            if self._skip is not None:
                return False
        if self.k == 1:
            return self.released < self.total
        return self.released < self.total and self.released + min(self.batch_size, self.part_end - self.released) <= self.total

    def wait_for_input(self, idle):
        """Following a log: block until the next release is committed (True) or the log has ended
        (False), calling `idle()` between looks (the driver handles its messages); the look is a
        stat of the manifest every few ms, so a waiting rank 0 uses no core."""
        if self.tail is None or self._ready():
            return True
        while True:
            files = self.tail.poll()
            if files is not None:
                for r, f, s in zip(self.readers, files, self.job.streams):
                    r.add(f, self.tail.records[s.name])
                self.total = sum(r.count for r in self.readers)
                self._eof = [False] * self.M
                if self._ready():          # once the log has ended, this goes past the others' parts
                    return True
            if self.tail.ended:
                return False
            idle()
            time.sleep(self.tail.interval)

    # -- reading ----------------------------------------------------------------------------
    def _fill(self, k, end):
        """Make stream k's buffer hold every row with seq < end, plus one row beyond (the next
        tuple, for the bounds), unless the stream ends first."""
        while not self._eof[k] and (not len(self._buf[k]) or self._buf[k][SEQ][-1] < end):
            c = self.readers[k].next_chunk()
            if c is None:
                self._eof[k] = True
            else:
                self._buf[k] = np.concatenate([self._buf[k], c]) if len(self._buf[k]) else c

    def _take(self, k, end):
        self._fill(k, end)
        b = self._buf[k]
        n = int(np.searchsorted(b[SEQ], end))
        out, self._buf[k] = b[:n], b[n:]
        return out

    # -- replay -----------------------------------------------------------------------------
    def _due(self, now):
        """Tuples whose scheduled arrival ((seq - start) / (rate x M) after the start, as _tin
        says) has come: the first tuple arrives at the start (after a resume, the offset's)."""
        if self.rate is None:
            return self.total
        return min(self.total, self.start + int((now - self.t0) * self.rate * self.M) + 1)

    def next_epoch(self):
        """Release the next epoch: up to batch_size tuples, or what is due within flush_interval.

        Returns one runtime batch per stream (with _tin stamped). Sleeps while nothing is due."""
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = now
            self._wall0 = time.time_ns()
            self.start = self.origin          # a resumed replay's schedule starts at its offset
        bs = self.batch_size if self.k == 1 else min(self.batch_size, self.part_end - self.released)
        deadline = now + self.flush_ns / 1e9
        while True:
            due = self._due(now)
            pending = due - self.released
            if pending >= bs or (self.k == 1 and pending > 0 and (now >= deadline or due >= self.total)):
                break
            if now >= deadline:     # nothing arrived this epoch: start a new one
                deadline = now + self.flush_ns / 1e9
            time.sleep(min(max(deadline - now, 0.0002), 0.002))
            now = time.perf_counter()
        end = min(due, self.released + bs)
        return self.release(end)

    def release(self, end):
        """Runtime batches of every tuple with seq in [released, end), in seq order per stream."""
        raw = [self._take(k, end) for k in range(self.M)]
        self.check.check(raw)
        if self._first_ts is None and self.check.last_ts is not None:
            self._first_ts = min(int(a[TS][0]) for a in raw if len(a))
        if self.check.next_seq != end:
            raise InputError(f"{self.job.staged}: seq must be dense from 0 across streams; seq "
                             f"{self.check.next_seq} is missing (the streams end before it)")
        out = []
        for k, a in enumerate(raw):
            b = np.zeros(len(a), self.dtypes[k])
            for name in a.dtype.names:
                b[name] = a[name]
            b["_coord"] = coords(self.windows[k], a, self.cursor[k])
            los = [lows(self.windows[j], a, raw[j], self.cursor[j]) if j != k else None for j in range(self.M)]
            if self.M == 2:
                b["_lo"] = los[1 - k]
            else:
                for j in range(self.M):
                    b["_los"][:, j] = NEG_INF if j == k else los[j]
            if self.rate is None:
                b["_tin"] = time.time_ns()
            else:   # the tuple's scheduled arrival, so delay includes waiting in the driver
                b["_tin"] = self._wall0 + ((b[SEQ] - self.start) / (self.rate * self.M) * 1e9).astype(np.int64)
            if self.annotate is not None:
                self.annotate(b, k)
            out.append(b)
        for k, a in enumerate(raw):
            self.cursor[k] += len(a)
        self.own += end - self.released
        if self.k > 1:
            self.batch_no = self.released // self.batch_size
        self.released = end
        self._in_part = self.k > 1
        return out

    def bounds(self):
        """Expiry bound of each stream's window: the smallest lo any tuple still to come can have.
        Computed once per release (rank 0's operator and every send of that batch ask for it)."""
        key = (self.released, tuple(self.cursor), self.tail.frontier if self.tail else None,
               self.tail.ended if self.tail else None)
        if self._bounds_at != key:
            self._bounds, self._bounds_at = self._compute_bounds(), key
        return list(self._bounds)

    def _compute_bounds(self):
        nxt = []
        for k in range(self.M):
            self._fill(k, self.released)
            b = self._buf[k]
            # a log still growing: a tuple not committed yet has ts >= every committed ts
            nxt.append(int(b[TS][0]) if len(b) else self.tail.frontier if self.tail and not self.tail.ended else None)
        out = []
        for j, w in enumerate(self.windows):
            others = [t for k, t in enumerate(nxt) if k != j and t is not None]
            if not others:
                out.append(int(POS_INF))
            elif w.kind == "time":
                out.append(min(others) - (w.size - 1))
            elif w.kind == "count":
                out.append(self.cursor[j] - w.size)
            else:
                out.append(int(NEG_INF))
        return out

    def windows_full(self):
        """Have the windows filled up (so load measured now is steady-state load)? Time windows: the
        replayed event time spans the largest window; count windows: each stream has released its
        window's worth; unbounded windows never fill."""
        for k, w in enumerate(self.windows):
            if w.kind == "unbounded":
                return False
            if w.kind == "count" and self.cursor[k] < w.size:
                return False
        spans = [w.size for w in self.windows if w.kind == "time"]
        if spans:
            if self.check.last_ts is None or self._first_ts is None:
                return False
            return self.check.last_ts - self._first_ts >= max(spans)
        return True

    def seek(self, offset):
        """Continue after the first `offset` tuples (restart from a checkpoint): row groups before
        the offset are skipped without reading; the rest of the prefix is read and dropped."""
        offset = int(offset)
        for r in self.readers:
            r.seek(offset)
        self._buf = [np.zeros(0, s.dtype) for s in self.job.streams]
        self._eof = [False] * self.M
        # per-stream counts before the offset: what the count windows' coordinates continue from
        self.cursor = [r.count_before(offset) for r in self.readers]
        self.released = offset
        self._in_part = False
        self.check = OrderCheck(self.job, offset)
