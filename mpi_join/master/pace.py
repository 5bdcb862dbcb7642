"""The replay's schedule (Schedule). With a set rate, the replay behind schedule (the workers
do not keep up, credits hold the source back) for longer than run.overload_after makes the run
overloaded. Said once on stderr with the rate, and kept in the summary; the run goes on, later
than scheduled (or stops, with run.stop_when_overloaded)."""
import sys
import time

import numpy as np

from ..errors import JobError


class Schedule:
    """When each tuple is due at a set rate (`rate` tuples/s per stream; None: all at once):
    tuple seq is due (seq - start) / (rate x M) after the replay's start (a resumed replay's
    schedule starts at its offset), and `tin(seq)` stamps it with that time, so a tuple's delay
    includes waiting in the driver; without a rate, with the time of its release."""

    def __init__(self, rate, M):
        self.rate, self.M = rate, M
        self.t0 = self.wall0 = None
        self.start = 0

    def begin(self, now, origin):
        if self.t0 is None:
            self.t0, self.wall0, self.start = now, time.time_ns(), origin

    def due(self, now, total):
        """Tuples whose scheduled arrival has come: the first arrives at the start."""
        if self.rate is None:
            return total
        return min(total, self.start + int((now - self.t0) * self.rate * self.M) + 1)

    def tin(self, seq):
        if self.rate is None:
            return np.full(len(seq), time.time_ns(), np.int64)
        return self.wall0 + ((seq - self.start) / (self.rate * self.M) * 1e9).astype(np.int64)


class Pace:
    def __init__(self, run):
        self.run = run
        self.max_lag = 0.0
        self.overloaded = None

    def check(self, src, t_replay):
        run = self.run
        sch = src.schedule
        if run.rate is None or sch.t0 is None:
            return
        lag = (time.perf_counter() - sch.t0) - (src.released - sch.start) / (run.rate * src.M)
        self.max_lag = max(self.max_lag, lag)
        if lag > run.overload_after_s and self.overloaded is None:
            at = time.perf_counter() - t_replay
            self.overloaded = {"after_s": round(at, 3), "rate_per_stream": run.rate, "lag_s": round(lag, 3),
                               "released": src.released}
            sys.stderr.write(f"mpi-join: overloaded: at {run.rate:g} tuples/s per stream the replay fell "
                             f"{lag:.1f} s behind schedule {at:.1f} s into the run (after {src.released:,} "
                             f"tuples); the workers do not keep up with this rate\n")
            if run.stop_when_overloaded:
                raise JobError(f"run.stop_when_overloaded: stopped, overloaded at {run.rate:g} tuples/s per stream "
                               f"(the replay {lag:.1f} s behind schedule after {src.released:,} tuples)")
