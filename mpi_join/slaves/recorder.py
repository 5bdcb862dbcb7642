"""What a worker writes down: results with their production delay, a metrics series per handled
message, load reports for the driver, and the state's memory at its peak."""
import time

import numpy as np

from ..runtime.graph import DRIVER
from ..join.jit import Compiles, GcPauses
from ..runtime.protocol import LoadReport

SERIES = ("t", "src", "tuples", "results", "delay_ms", "cpu_s", "idle_s", "comm_s", "window_tuples", "occupancy")


class Recorder:
    def __init__(self, tx, module, metrics, writer, capacity):
        self.tx, self.module, self.metrics, self.writer = tx, module, metrics, writer
        self.capacity = capacity                   # tuples, for the occupancy of the driver's queue
        self.occupancy = []
        self.series = {k: [] for k in SERIES}
        self.memory = StateMemory(module)
        self.start()

    def start(self):
        """The replay begins: CPU, idle and communication times count from here."""
        self.load_mark = (time.perf_counter(), self.metrics.cpu(), self.metrics.tuples_in)
        self._last = (self.metrics.cpu(), self.tx.idle_s, self.tx.comm_s)

    def results(self, results):
        """Write `results` [(seq arrays, tin)] stamped now; returns (count, mean delay in ms)."""
        if not results:
            return 0, None
        nres, lat_sum = 0, 0.0
        now = time.time_ns()
        for seqs, tin in results:
            lat = now - tin
            self.writer.add(list(seqs), np.full(len(tin), now, np.int64), lat)
            self.metrics.latency.add(lat)
            nres += len(tin)
            lat_sum += float(lat.sum())
        self.metrics.count(results=nres)
        return nres, (lat_sum / nres / 1e6 if nres else None)

    def occupied(self, buffered):
        """The driver's tuples still queued at the end of a batch of its."""
        self.occupancy.append(min(1.0, buffered / self.capacity))

    def load_report(self, buffered):
        wall0, cpu0, n0 = self.load_mark
        wall, cpu = time.perf_counter(), self.metrics.cpu()
        busy = (cpu - cpu0) / max(wall - wall0, 1e-9)
        occ = float(np.mean(self.occupancy)) if self.occupancy else min(1.0, buffered / self.capacity)
        self.occupancy = []
        self.load_mark = (wall, cpu, self.metrics.tuples_in)
        return LoadReport(occ, min(1.0, busy), self.metrics.tuples_in - n0,
                          state_bytes=int(self.module.stats().get("state_bytes", 0)))

    def final(self, role, compiled):
        """Close the result files and put the run's figures in the metrics."""
        files = self.writer.close()
        self.metrics.extra.update(result_files=len(files), result_parts=self.writer.file_records(),
                                  snapshot_parts=self.writer.snapshot_records(),
                                  compiled_during_replay=Compiles.mine()[0] - compiled, **GcPauses.stats(),
                                  series=self.series, role=role, **self.module.stats(), **self.memory.summary())
        self.metrics.record(role=role)

    def handled(self, src, n, results, delay):
        cpu, idle, comm = self.metrics.cpu(), self.tx.idle_s, self.tx.comm_s
        c0, i0, k0 = self._last
        self._last = (cpu, idle, comm)
        occ = self.occupancy[-1] if src == DRIVER and self.occupancy else None
        for k, v in zip(SERIES, (round(self.metrics.wall_s(), 4), src, n, results, delay, cpu - c0, idle - i0,
                                 comm - k0, self.module.stats()["window_tuples"], occ)):
            self.series[k].append(v)
        self.memory.sample()


class StateMemory:
    """The module's window state in bytes (spare capacity and indexes included) when the raw
    bytes of the tuples it held were at their peak (the windows at their fullest): the ratio of
    the two is the memory overhead the benchmarks report. Sampled at most every `every_s` (a
    footprint walks every bucket)."""

    def __init__(self, module, every_s=0.02):
        self.module, self.every_s = module, every_s
        self.t = 0.0
        self.peak = (0, 0)

    def sample(self):
        now = time.perf_counter()
        if now - self.t < self.every_s:
            return
        self.t = now
        held, raw = self.module.footprint()
        if raw > self.peak[1]:
            self.peak = (int(held), int(raw))

    def summary(self):
        self.t = 0.0
        self.sample()
        held, raw = self.peak
        return {"peak_state_bytes": held, "raw_bytes_at_peak": raw}
