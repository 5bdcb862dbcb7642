"""The source: replays the merged stream in seq order at the configured rate, an epoch at a time.

Streams are held as arrays sorted by seq, so the tuples of one epoch (a seq range) are one
contiguous row range per stream. The source also knows every window's expiry bound: the
smallest lo that any tuple still to come can have (window.py)."""
import time

import numpy as np

from ..schema import SEQ
from ..window import POS_INF, coords, lows, runtime_dtype


class Source:
    def __init__(self, job, arrays, hasher=None, slots=1):
        if len(arrays) != 2:
            raise ValueError("the epoch source serves binary joins")
        self.job = job
        self.streams = []
        for i, a in enumerate(arrays):
            j = 1 - i
            rt = np.zeros(len(a), runtime_dtype(a.dtype))
            for name in a.dtype.names:
                rt[name] = a[name]
            rt["_coord"] = coords(job.streams[i].window, a)
            rt["_lo"] = lows(job.streams[j].window, a, arrays[j])
            if hasher is not None:
                rt["_h"] = hasher(a, i)
            self.streams.append(rt)
        self.total = sum(len(a) for a in arrays)
        self.released = 0
        self.cursor = [0] * len(arrays)
        self.rate = job.run.rate
        self.t0 = None
        # with sub-groups an epoch is `slots` slots: each releases a slot's share
        self.batch_size = max(1, -(-job.run.batch_size // slots))
        self.flush_ns = job.run.flush_interval_ns / slots

    @property
    def done(self):
        return self.released >= self.total

    def _due(self, now):
        if self.rate is None:
            return self.total
        return min(self.total, int((now - self.t0) * self.rate * len(self.streams)))

    def next_epoch(self):
        """Release the next epoch: up to batch_size tuples, or what is due within flush_interval.

        Returns one batch per stream (copies, with _tin stamped). Sleeps while nothing is due."""
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = now
            self._wall0 = time.time_ns()
        bs = self.batch_size
        deadline = now + self.flush_ns / 1e9
        while True:
            due = self._due(now)
            pending = due - self.released
            if pending >= bs or (pending > 0 and (now >= deadline or due >= self.total)):
                break
            if now >= deadline:     # nothing arrived this epoch: start a new one
                deadline = now + self.flush_ns / 1e9
            time.sleep(min(max(deadline - now, 0.0002), 0.002))
            now = time.perf_counter()
        end = min(due, self.released + bs)
        out = []
        for i, rt in enumerate(self.streams):
            r1 = int(np.searchsorted(rt[SEQ], end))
            b = rt[self.cursor[i]:r1].copy()
            if self.rate is None:
                b["_tin"] = time.time_ns()
            else:   # the tuple's scheduled arrival, so delay includes waiting in the master
                b["_tin"] = self._wall0 + (b[SEQ] / (self.rate * len(self.streams)) * 1e9).astype(np.int64)
            self.cursor[i] = r1
            out.append(b)
        self.released = end
        return out

    def bounds(self):
        """Expiry bound of each stream's window: the lo of the next tuple of the other stream."""
        out = []
        for i in range(len(self.streams)):
            j = 1 - i
            rt = self.streams[j]
            out.append(int(rt["_lo"][self.cursor[j]]) if self.cursor[j] < len(rt) else int(POS_INF))
        return out

    def seek(self, offset):
        """Continue after the first `offset` tuples (restart from a checkpoint)."""
        self.released = int(offset)
        self.cursor = [int(np.searchsorted(rt[SEQ], offset)) for rt in self.streams]
