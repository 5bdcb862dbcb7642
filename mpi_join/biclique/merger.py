"""Online aggregation in the join-biclique (BiStream, Section 3.4.2; aggregate.py holds the
views): each unit's `Views` pre-aggregates the pairs it finds, and the `merger` role merges the
units' views and writes the global view as timestamped snapshots."""
import time

from ..join import aggregate
from ..runtime.operator import Array, Fields, Operator, Output
from . import rescale


class Views:
    """A unit's part of an online aggregate (aggregate.py): the view of the pairs it found and
    has not sent yet; sent to the merger once `update_ms` has passed since the last send (the
    paper's batch update: one message per period, not one per result), and at the end of its
    input. Does nothing for a job without `strategy.aggregate`."""

    def __init__(self, job, dtypes, upstream, merger):
        text = job.strategy.params["aggregate"]
        self.spec = aggregate.parse(text, job.streams) if text else None
        self.columns = self.spec.columns if self.spec else ()
        self.dtype = aggregate.view_dtype(self.spec, dtypes) if self.spec else None
        self.period_ns = int(float(job.strategy.params["update_ms"]) * 1e6)
        self.merger, self.upstream = merger, upstream          # merger: the unit's edge to it
        self.unsent, self.sent_at, self.ended = None, time.monotonic_ns(), 0

    def add(self, values, n, out):
        """Add n pairs (their `values`) to the view not sent yet; send it once the period passed."""
        if self.spec is None:
            return
        if n:
            self.unsent = aggregate.merge(self.spec, self.unsent, aggregate.view(self.spec, self.dtype, values, n))
        if self.unsent is not None and time.monotonic_ns() - self.sent_at >= self.period_ns:
            self._send(out)

    def _send(self, out):
        out.send(self.merger, [self.unsent], ())
        self.unsent, self.sent_at = None, time.monotonic_ns()

    def on_eos(self, src):
        self.ended += 1
        out = Output()
        if self.spec is not None and self.ended == self.upstream and self.unsent is not None:
            self._send(out)           # before end of stream goes on to the merger
        return out


class Merger(Operator):
    """Role `merger`: merges the units' views into the global view, and writes it, finished, as
    a timestamped snapshot at most once per `update_ms` and once more, marked final, when every
    unit has ended (the aggregate of every result, which `mpi-join verify` checks)."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.spec = aggregate.parse(job.strategy.params["aggregate"], job.streams)
        self.dtype = aggregate.view_dtype(self.spec, dtypes)
        self.period_ns = int(float(job.strategy.params["update_ms"]) * 1e6)
        self.units = len(graph.upstream(rank))
        self.view, self.number, self.ended, self.merged = None, 0, 0, 0
        self.written_at = time.monotonic_ns()
        self.declare(view=Array(self, "view", self.dtype), counts=Fields(self, "number", "merged"))

    def link_dtypes(self, kind):
        return [self.dtype]

    def on_data(self, src, header, batches):
        self.view = aggregate.merge(self.spec, self.view, batches[0])
        self.merged += 1
        if time.monotonic_ns() - self.written_at >= self.period_ns:
            return self._write(False)
        return None

    def on_eos(self, src):
        self.ended += 1
        return self._write(True) if self.ended == self.units else None

    def restore_rescaled(self, read, old, root, cid):
        self.view = rescale.restore_merger(self, read, old)

    def _write(self, final):
        out = Output()
        pairs = int(self.view["n"].sum()) if self.view is not None else 0
        out.snapshot(self.number, final, aggregate.finish(self.spec, self.view, self.dtypes),
                     {"aggregate": self.spec.text, "pairs": pairs, "final": final})
        self.number += 1
        self.written_at = time.monotonic_ns()
        return out

    def stats(self):
        return {"window_tuples": 0, "views_merged": self.merged, "snapshots": self.number,
                "groups": 0 if self.view is None else len(self.view)}
