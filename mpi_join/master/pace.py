"""With a set rate: the replay behind schedule (the workers do not keep up, credits hold the
source back) for longer than run.overload_after makes the run overloaded. Said once on stderr
with the rate, and kept in the summary; the run goes on, later than scheduled (or stops, with
run.stop_when_overloaded)."""
import sys
import time

from ..errors import JobError


class Pace:
    def __init__(self, run):
        self.run = run
        self.max_lag = 0.0
        self.overloaded = None

    def check(self, src, t_replay):
        run = self.run
        if run.rate is None or src.t0 is None:
            return
        lag = (time.perf_counter() - src.t0) - (src.released - src.start) / (run.rate * src.M)
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
