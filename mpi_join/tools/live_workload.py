"""A live workload (`mpi-join generate live`): CSV files written into landing directories at a set
rate per stream, in real time, with a share of out-of-order rows (behind by less than the
allowed lateness) and of late rows (behind by more), as a source system would deliver them.

Event time is wall-clock time in ms. Each row carries `landed`, the wall-clock ms at which its
file was renamed into the landing directory, so that `bench live` can measure from a row's
landing to its result's commit.
"""
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

STREAMS = ("R", "S")


def job_text(rate, window="1s", lateness="500ms", keys=10_000, strategy=None, commit_every="250ms",
             trigger_note="", iso=False):
    """The job file of a live equi join over landing directories raw/R and raw/S (`strategy`: by
    default the registry's for the equi workload)."""
    if strategy is None:
        from ..strategies import for_workload
        strategy = for_workload("equi")
    streams = "".join(
        f'[streams.{n}]\nschema = {{ k = "int32", v = "float64", landed = "int64" }}\nwindow = "{window}"\n'
        f'raw = {{ path = "raw/{n}", format = "csv", time = "t", time_unit = "{"timestamp" if iso else "ms"}" }}\n'
        for n in STREAMS)
    return (f'# live equi join: {rate:g} tuples/s per stream, {keys:,} uniform keys{trigger_note}\n'
            f'[job]\nname = "live"\nts_unit = "ms"\n[input]\nstaged = "staged"\nallowed_lateness = "{lateness}"\n'
            f'[output]\ndir = "out"\ncommit_every = "{commit_every}"\n{streams}'
            f'[predicate]\nequi = [["R.k", "S.k"]]\n[strategy]\nname = "{strategy}"\n'
            f'[run]\nbatch_size = 4096\nflush_interval = "5ms"\nprogress = false\n')


class Generator:
    """Writes one file per stream every `every_s` seconds holding the rows of that interval:
    rate x interval rows per stream, event times spread over it; a `disorder` share moved back
    by up to half the lateness, a `late` share by one to two latenesses (late once the log has
    written past them)."""

    def __init__(self, root, rate, every_s=0.2, disorder=0.05, late=0.001, lateness_ms=500, keys=10_000, seed=1,
                 iso=False, bad=0.0):
        """`iso`: event times as ISO-8601 text with milliseconds (`Z`, `+05:30` and `-05:00` in
        turn); `bad`: the share of rows whose time is unreadable (`oops`: quarantined)."""
        self.iso, self.bad = iso, float(bad)
        self.root, self.rate, self.every = root, float(rate), float(every_s)
        self.disorder, self.late, self.lateness, self.keys = disorder, late, int(lateness_ms), int(keys)
        self.rng = np.random.default_rng(seed)
        self.files = 0
        self.rows = {n: 0 for n in STREAMS}
        self.late_rows = {n: 0 for n in STREAMS}
        self._last = None
        for n in STREAMS:
            os.makedirs(os.path.join(root, "raw", n), exist_ok=True)

    def step(self):
        """Write the rows since the last step (one file per stream); returns the rows written."""
        now = time.time_ns() // 1_000_000
        last = self._last if self._last is not None else now - int(self.every * 1000)
        self._last = now
        total = 0
        for n in STREAMS:
            k = self.rng.poisson(self.rate * (now - last) / 1000)
            ts = np.sort(self.rng.integers(last + 1, now + 1, k))
            u = self.rng.random(k)
            back = np.where(u < self.late, self.lateness * (1 + self.rng.random(k)) + 1,
                            np.where(u < self.late + self.disorder, self.rng.random(k) * self.lateness / 2, 0))
            ts = ts - back.astype(np.int64)
            self.late_rows[n] += int((u < self.late).sum())
            tmp = os.path.join(self.root, "raw", n, f".f{self.files:06d}.tmp")
            landed = np.full(k, time.time_ns() // 1_000_000, np.int64)
            pcsv.write_csv(pa.table({"t": self._times(ts) if self.iso or self.bad else ts, "k": self.rng.integers(0, self.keys, k).astype(np.int32),
                                     "v": np.round(self.rng.random(k), 4), "landed": landed}), tmp)
            os.rename(tmp, os.path.join(self.root, "raw", n, f"f{self.files:06d}.csv"))
            self.rows[n] += k
            total += k
        self.files += 1
        return total

    def _times(self, ts):
        """Event times as text: ISO-8601 (with `iso`) or ms, a `bad` share unreadable."""
        if self.iso:
            zone = self.rng.integers(0, 3, len(ts))
            out = np.empty(len(ts), object)
            for z, (suffix, minutes) in enumerate((("Z", 0), ("+05:30", 330), ("-05:00", -300))):
                sel = zone == z
                local = (ts[sel] + minutes * 60_000).astype("datetime64[ms]")
                out[sel] = np.char.add(np.datetime_as_string(local, unit="ms"), suffix)
        else:
            out = ts.astype(str).astype(object)
        out[self.rng.random(len(ts)) < self.bad] = "oops"
        return pa.array(out.tolist(), pa.string())

    def run(self, seconds, stop=lambda: False, say=None):
        """Write for `seconds` (None: until `stop()`), a file per stream every `every_s`."""
        t0 = time.monotonic()
        nxt = t0
        while (seconds is None or time.monotonic() - t0 < seconds) and not stop():
            self.step()
            if say and self.files % max(1, int(5 / self.every)) == 0:
                say(f"generate: {sum(self.rows.values()):,} rows in {self.files} file(s) per stream "
                    f"({time.monotonic() - t0:.0f} s)")
            nxt += self.every
            time.sleep(max(0.0, nxt - time.monotonic()))
