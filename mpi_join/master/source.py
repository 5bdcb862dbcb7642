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

from ..errors import InputError
from ..schema import TS
from ..storage.staged import ROW_GROUP, ArrayReader, LogTail, OrderCheck, Prefetched, StreamReader
from ..join.window import runtime_dtype
from .pace import Schedule
from .streams import Streams
from .stamp import expiry_bounds, stamp, windows_full


def default_part(job, k=1):
    """Tuples per part when run.part is not set: about four row groups of each stream (source i
    reads little more than its own parts; every link from a source has credit for a whole part,
    the driver's Credits, so each source can send its next part while the entries take another's),
    and with checkpoints every N tuples at most N / (4k + 4): with k sources a checkpoint is cut
    at the first part none has started, 2k parts ahead of rank 0's, and the next one can be
    placed once it is complete, so the 2k parts and the cut's round trip must fit in N tuples for
    every checkpoint asked for to be taken (parts of N took a sixth of them)."""
    part = 4 * ROW_GROUP * len(job.streams)
    every = job.checkpoint.every_tuples if job.checkpoint is not None else None
    return min(part, part_for_checkpoints(every, k)) if every else part


def part_for_checkpoints(every, k):
    """The largest part with which k sources take a checkpoint every `every` tuples (default_part)."""
    return max(1, every // (4 * k + 4))


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
        self.streams = Streams([Prefetched(StreamReader(job.staged, s, chunk_rows, man, only_read=True))
                                for s in job.streams]
                               if arrays is None else [ArrayReader(a, chunk_rows) for a in arrays],
                               [s.dtype for s in job.streams])
        self.tail = LogTail(job.staged, man, [s.name for s in job.streams]) if follow else None
        self.windows = [s.window for s in job.streams]
        self.dtypes = [runtime_dtype(s.dtype, self.M) for s in job.streams]
        self.annotate = annotate                 # annotate(batch, stream) fills strategy columns
        self.total = self.streams.count
        if counts is not None and list(counts) != [r.count for r in self.streams.readers]:
            raise InputError(f"{job.staged}: the manifest counts {list(counts)} tuples per stream, the Parquet "
                             f"files hold {[r.count for r in self.streams.readers]}; stage the input again")
        self.released = 0
        self._bounds, self._bounds_at = None, None
        self.check = OrderCheck(job)
        self._first_ts = None
        self.schedule = Schedule(job.run.rate, self.M)    # when each tuple is due (pace.py)
        # with sub-groups an epoch is `slots` slots: each releases a slot's share
        self.batch_size = max(1, -(-job.run.batch_size // slots))
        self.flush_ns = job.run.flush_interval_ns / slots
        self.index, self.k = share
        part = job.run.part or default_part(job, self.k)
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
        self.origin = self.released = int(offset)
        self.streams.seek(self.origin)      # row groups before it are not read
        self._in_part = False
        self.check = OrderCheck(self.job, self.origin)
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
        if self._in_part:
            self.check.check(self.streams.heads(self.released))
        self.released = end
        self.check = OrderCheck(self.job, end)
        self._in_part = False
        self.streams.skip_to(end, self.part_end)     # no reading ahead past this part (the next is another's)

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
                self.streams.grown(files, self.tail.records, [s.name for s in self.job.streams])
                self.total = self.streams.count
                if self._ready():          # once the log has ended, this goes past the others' parts
                    return True
            if self.tail.ended:
                return False
            idle()
            time.sleep(self.tail.interval)

    # -- replay -----------------------------------------------------------------------------
    def next_epoch(self):
        """Release the next epoch: up to batch_size tuples, or what is due within flush_interval.

        Returns one runtime batch per stream (with _tin stamped). Sleeps while nothing is due."""
        now = time.perf_counter()
        self.schedule.begin(now, self.origin)
        bs = self.batch_size if self.k == 1 else min(self.batch_size, self.part_end - self.released)
        deadline = now + self.flush_ns / 1e9
        while True:
            due = self.schedule.due(now, self.total)
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
        raw = self.streams.take(end)
        self.check.check(raw)
        if self._first_ts is None and self.check.last_ts is not None:
            self._first_ts = min(int(a[TS][0]) for a in raw if len(a))
        if self.check.next_seq != end:
            raise InputError(f"{self.job.staged}: seq must be dense from 0 across streams; seq "
                             f"{self.check.next_seq} is missing (the streams end before it)")
        out = stamp(raw, self.windows, self.dtypes, self.streams.cursor, self.schedule.tin)
        if self.annotate is not None:
            for k, b in enumerate(out):
                self.annotate(b, k)
        self.streams.advance(raw)
        self.own += end - self.released
        if self.k > 1:
            self.batch_no = self.released // self.batch_size
        self.released = end
        self._in_part = self.k > 1
        return out

    def bounds(self):
        """Expiry bound of each stream's window: the smallest lo any tuple still to come can have.
        Computed once per release (rank 0's operator and every send of that batch ask for it)."""
        key = (self.released, tuple(self.streams.cursor), self.tail.frontier if self.tail else None,
               self.tail.ended if self.tail else None)
        if self._bounds_at != key:
            self._bounds, self._bounds_at = self._compute_bounds(), key
        return list(self._bounds)

    def _compute_bounds(self):
        # a log still growing: a tuple not committed yet has ts >= every committed ts
        growing = self.tail.frontier if self.tail and not self.tail.ended else None
        nxt = [growing if t is None else t for t in self.streams.next_ts(self.released)]
        return expiry_bounds(self.windows, nxt, self.streams.cursor)

    def windows_full(self):
        """Have the windows filled up (so load measured now is steady-state load)? (stamp.py)"""
        return windows_full(self.windows, self.streams.cursor, self._first_ts, self.check.last_ts)
