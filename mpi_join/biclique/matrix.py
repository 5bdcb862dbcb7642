"""`matrix`: the join-matrix baseline BiStream is compared with. The workers form a grid of
`rows` x `cols` cells; the driver sends each R tuple to every cell of one row and each S tuple to
every cell of one column (row and column chosen at random: a hash of the tuple's seq, so a replay
routes it the same way). Every pair meets in exactly one cell, (row of r, column of s), where
both are stored: each R tuple is held `cols` times and each S tuple `rows` times, the memory the
join-biclique saves.

This module is the router (rank 0, and every extra source): it imports no join code (and no
numba), so a rank that routes starts without loading a kernel. The cells: cell.py."""
import math

from ..runtime.operator import Operator, Output
from .routing import spread


def grid(workers, rows=0):
    """(rows, cols) with rows x cols = workers: `rows` if given, else the divisor of `workers`
    nearest its square root (from below)."""
    if rows:
        return rows, workers // rows
    r = max(d for d in range(1, math.isqrt(workers) + 1) if workers % d == 0)
    return r, workers // r


class MatrixRouter(Operator):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.rows, self.cols = grid(len(graph.workers), job.strategy.params["rows"])

    def on_data(self, src, header, batches):
        r, s = batches
        row, col = spread(r, self.rows), spread(s, self.cols)
        out = Output()
        for i in range(self.rows):
            mine_r = r[row == i]
            for j in range(self.cols):
                mine_s = s[col == j]
                if len(mine_r) or len(mine_s):
                    out.send(1 + i * self.cols + j, [mine_r, mine_s], header.bounds)
        return out
