"""Per-rank metrics: tuples in/out, results, CPU, idle and communication time, latency.

Production delay (latency) is kept as a log-scale histogram (100 bins per decade, 2.3% wide)
from 1 us to 10^4 s, so ranks merge exactly by adding counts and memory stays fixed.
"""
import glob
import json
import os
import resource
import time

import numpy as np

from ..errors import InputError

_DECADES = (3, 13)             # 10^3 ns .. 10^13 ns
_PER_DECADE = 100
_NBINS = (_DECADES[1] - _DECADES[0]) * _PER_DECADE + 2
_EDGES = 10.0 ** (np.arange(_NBINS - 1) / _PER_DECADE + _DECADES[0])
PERCENTILES = (50, 90, 99, 99.9)


class LatencyHistogram:
    def __init__(self, counts=None):
        self.counts = np.zeros(_NBINS, np.int64) if counts is None else np.asarray(counts, np.int64)

    def add(self, latency_ns):
        """Count each delay in its bin. A probe's results come together and share its delay (13
        results per input tuple on the suite's equi input), so each run of equal values is
        binned once: 3.5x faster than binning every value."""
        n = len(latency_ns)
        if n:
            lat = np.asarray(latency_ns)
            starts = np.flatnonzero(np.concatenate(([True], lat[1:] != lat[:-1])))
            idx = np.searchsorted(_EDGES, lat[starts], side="right")
            runs = np.diff(np.append(starts, n))
            self.counts += np.bincount(idx, weights=runs, minlength=_NBINS).astype(np.int64)

    def merge(self, other):
        self.counts += other.counts

    @property
    def n(self):
        return int(self.counts.sum())

    def percentile_ms(self, p):
        """Upper edge of the bin holding the p-th percentile, in milliseconds."""
        n = self.n
        if n == 0:
            return None
        k = int(np.searchsorted(np.cumsum(self.counts), np.ceil(n * p / 100.0)))
        edge = _EDGES[min(k, len(_EDGES) - 1)]
        return float(edge / 1e6)

    def mean_ms(self):
        """Mean from the bins' geometric centres (within the bins' 2.3%)."""
        n = self.n
        if n == 0:
            return None
        centre = np.concatenate([[_EDGES[0]], np.sqrt(_EDGES[1:] * _EDGES[:-1]), [_EDGES[-1]]])
        return float((self.counts * centre).sum() / n / 1e6)

    def summary(self):
        return dict({f"p{p:g}": self.percentile_ms(p) for p in PERCENTILES}, mean=self.mean_ms())


class RankMetrics:
    def __init__(self, rank, role, cpu=time.process_time):
        """`cpu`: this rank's CPU clock, the process's under MPI, its thread's in one process
        (runtime/local.py)."""
        self.rank, self.role, self.cpu = rank, role, cpu
        self.tuples_in = 0
        self.tuples_out = 0
        self.results = 0
        self.epochs = 0
        self.latency = LatencyHistogram()
        self._wall0 = time.perf_counter()
        self._cpu0 = cpu()
        self.clock_start_unix = time.time()
        self.extra = {}

    def start_clock(self, transport):
        """Measure wall, CPU, idle and communication time from now on: the replay. Start-up (imports,
        compiling, waiting for the other ranks) is reported once, as the job's startup_s, so no
        rank shows more idle time than the run's wall time."""
        self._wall0, self._cpu0 = time.perf_counter(), self.cpu()
        self.clock_start_unix = time.time()     # where this rank's clock starts, to align the ranks' series
        transport.start_times()

    def count(self, **counts):
        """Add to counters (tuples_in=n, results=n, ...): the parts of a rank that count do so here."""
        for name, n in counts.items():
            setattr(self, name, getattr(self, name) + n)

    def record(self, **counts):
        """Values as they stand: counters a checkpoint recorded (a restored rank goes on from
        there), the epochs at the end, the role."""
        for name, n in counts.items():
            setattr(self, name, n)

    def wall_s(self):
        """Seconds since the clock started (the replay's, after start_clock)."""
        return time.perf_counter() - self._wall0

    def to_dict(self, transport=None):
        d = {
            "rank": self.rank, "role": self.role,
            "tuples_in": self.tuples_in, "tuples_out": self.tuples_out, "results": self.results,
            "epochs": self.epochs,
            "wall_s": self.wall_s(), "clock_start_unix": self.clock_start_unix,
            "cpu_s": self.cpu() - self._cpu0,
            "latency_ms": self.latency.summary(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "latency_hist": self.latency.counts.tolist(),
        }
        if transport is not None:
            d.update(idle_s=transport.idle_s, comm_s=transport.comm_s,
                     bytes_in=transport.bytes_in, bytes_out=transport.bytes_out)
        d.update(self.extra)
        return d


def read_json(path, what="metrics"):
    """A JSON file the tool wrote, or InputError naming the file and what it was read for."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read {what}: {e}") from None


def load_run(run_dir):
    """(summary, [rank dicts]) of a run directory, or InputError naming what is missing."""
    m = os.path.join(run_dir, "metrics")
    summary = os.path.join(m, "summary.json")
    if not os.path.isfile(summary):
        raise InputError(f"{run_dir}: no metrics/summary.json: not a finished run's output directory (nor a "
                         f"bench-suite directory with results.json)")
    ranks = [read_json(p) for p in sorted(glob.glob(os.path.join(m, "rank-*.json")))]
    s = read_json(summary)
    if not ranks:
        ranks = s.get("ranks") or []
    if not ranks:
        raise InputError(f"{m}: no rank-*.json files")
    return s, ranks


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def summarize(ranks, wall_s, total_tuples):
    """Job-wide summary from the per-rank dicts."""
    hist = LatencyHistogram()
    for r in ranks:
        hist.merge(LatencyHistogram(r["latency_hist"]))
    results = sum(r["results"] for r in ranks)
    return {
        "tuples": total_tuples, "results": results, "wall_s": wall_s,
        "tuples_per_s": total_tuples / wall_s if wall_s > 0 else None,
        "latency_ms": hist.summary(),
        "ranks": [{k: v for k, v in r.items() if k != "latency_hist"} for r in ranks],
    }
