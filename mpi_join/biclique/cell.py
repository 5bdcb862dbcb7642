"""`matrix`'s cells (the grid and its router: matrix.py)."""
import numpy as np

from ..slaves.local_join import BinaryJoin, warm_up
from ..runtime.operator import Fields, Operator, Output, Rows
from .matrix import grid
from .roles import check_state, state_limit
from .routing import spread


class Cell(Operator):
    """A cell of the grid: joins what it gets of both streams with its windows and each other."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.method = job.strategy.params["local_join"]
        self.join = BinaryJoin(job.predicate, dtypes, self.method, older=True)     # a cell's input is in seq order
        self.limit = state_limit(job)
        self.peak = 0
        self.declare(windows=Rows(self), counts=Fields(self, "peak"))

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, self.method)

    def on_data(self, src, header, batches):
        a, b, tin = self.join.step(batches[0], batches[1])
        self.peak = max(self.peak, len(self.join))    # before expiry: at the end of input everything expires
        check_state(self.join, self.limit, f"cell {self.rank}")
        self.join.expire(header.bounds)
        out = Output()
        out.emit((a, b), tin)
        return out

    def stats(self):
        return {"window_tuples": len(self.join), "peak_window_tuples": self.peak}

    def restore_rescaled(self, read, old, root, cid):
        """A restore onto another grid: this cell's R tuples are those of the old cells of column
        0 (each held every R tuple of its row) that spread to this cell's row now, its S tuples
        those of the old cells of row 0 that spread to its column. Pairs of two stored tuples met
        before the cut and do not meet again (a cell joins what arrives with what it holds)."""
        rows, cols = grid(len(old), self.job.strategy.params["rows"])
        new_rows, new_cols = self.shape()
        row, col = divmod(self.rank - 1, new_cols)
        kept = []
        for s, ranks, n, at in ((0, [old[i * cols] for i in range(rows)], new_rows, row),
                                (1, [old[j] for j in range(cols)], new_cols, col)):
            parts = [read(r, lambda name: name == f"windows/w/{s}")[0].get(f"windows/w/{s}") for r in ranks]
            rows_s = np.concatenate([p for p in parts if p is not None] or [np.zeros(0, self.join.state_dtypes[s])])
            rows_s = rows_s[spread(rows_s, n) == at]
            kept.append(rows_s[np.argsort(rows_s["seq"], kind="stable")])
        self.join.restore({"w/0": kept[0], "w/1": kept[1]}, "w")

    def shape(self):
        """This run's grid (rows, cols)."""
        return grid(len(self.graph.workers), self.job.strategy.params["rows"])

