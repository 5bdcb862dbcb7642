"""`matrix`'s cells (the grid, as the placement rank 0's edges route by: matrix.py)."""

import numpy as np

from ..join.window import POS_INF
from ..slaves.local_join import BinaryJoin, warm_up
from ..runtime.operator import Fields, Operator, Output, Rows
from .matrix import grid, grid_rows
from .roles import check_state, state_limit


class Cell(Operator):
    """A cell of the grid: joins what it gets of both streams with its windows and each other."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.method = job.strategy.params["local_join"]
        self.join = BinaryJoin(job.predicate, dtypes, self.method, older=True)     # a cell's input is in seq order
        self.limit = state_limit(job)
        self.peak = 0
        self.ended = 0                                # input links ended (an ASOF join's rows wait for all)
        # at another rank count each cell's rows come by the grid's placement (matrix.Grid), its peak anew
        self.declare(windows=Rows(self), counts=Fields(self, "peak", rescale="fresh"))

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, self.method)

    def on_data(self, src, header, batches):
        a, b, tin = self.join.step(batches[0], batches[1])
        self.peak = max(self.peak, len(self.join))    # before expiry: at the end of input everything expires
        check_state(self.join, self.limit, f"cell {self.rank}")
        self.join.expire(header.bounds)
        out = Output()
        out.emit((a, b), tin)
        self._matched(out)
        return out

    def _matched(self, out):
        """An ASOF join's matches of the left rows that left the window (BinaryJoin._asof_matches)."""
        for a, b, tin in self.join.lone:
            out.emit((a, b), tin)
        self.join.lone.clear()

    def on_eos(self, src):
        """The input has ended (every link's): an ASOF join's left rows still waiting are matched."""
        self.ended += 1
        if self.job.predicate.asof is None or self.ended < sum(d == self.rank for _, d in self.graph.eos_links()):
            return None
        self.join.expire(np.full(2, POS_INF, np.int64))
        out = Output()
        self._matched(out)
        return out

    def stats(self):
        return {"window_tuples": len(self.join), "peak_window_tuples": self.peak}

    def shape(self):
        """This run's grid (rows, cols)."""
        return grid(len(self.graph.workers), grid_rows(self.job))

