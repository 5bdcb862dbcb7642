"""`matrix`: the join-matrix baseline BiStream is compared with. The workers form a grid of
`rows` x `cols` cells; the driver sends each R tuple to every cell of one row and each S tuple to
every cell of one column (row and column chosen at random: a hash of the tuple's seq, so a replay
routes it the same way). Every pair meets in exactly one cell, (row of r, column of s), where
both are stored: each R tuple is held `cols` times and each S tuple `rows` times, the memory the
join-biclique saves.

This module is the grid's placement, which rank 0's edge router (and every extra source's) sends
by: it imports no join code (and no numba), so a rank that routes starts without loading a
kernel. The cells: cell.py."""
import math

from ..runtime.graph import star
from .routing import spread


ONE_COLUMN = -1          # `rows` of a grid of one column (every row a cell of its own)


def grid_rows(job):
    """The `rows` a job's grid is built with: strategy.rows, but for an ASOF join, whose left
    rows must each be in one cell with every right row (join/asof.py): one column when the left
    stream is R (each R tuple in one cell, each S tuple in all), one row when it is S."""
    a = job.predicate.asof
    if a is None:
        return job.strategy.params["rows"]
    return ONE_COLUMN if a.left == 0 else 1


def grid(workers, rows=0):
    """(rows, cols) with rows x cols = workers: `rows` if given (ONE_COLUMN: `workers`), else the
    divisor of `workers` nearest its square root (from below)."""
    if rows == ONE_COLUMN:
        return workers, 1
    if rows:
        return rows, workers // rows
    r = max(d for d in range(1, math.isqrt(workers) + 1) if workers % d == 0)
    return r, workers // r


class Grid:
    """The grid as the placement of rank 0's edges to the cells (runtime/placement.py): the
    index-th cell of `count`, at (index // cols, index % cols), holds the R tuples spread to its
    row and the S tuples spread to its column. The runtime's edge router sends each tuple to
    every cell of its row or column by it, and a restore onto another grid deals the stored
    tuples by it."""

    def __init__(self, job):
        self.rows, self._last = grid_rows(job), {}

    def home(self, batch, stream, index, count):
        rows, cols = grid(count, self.rows)
        at = self._spread(batch, stream, rows if stream == 0 else cols)
        return at == (index // cols if stream == 0 else index % cols)

    def _spread(self, batch, stream, n):
        """`spread(batch, n)`, once per stream's batch: the router asks for every cell in turn
        (the batch itself is kept and compared, so a new array is never taken for it)."""
        last = self._last.get(stream)
        if last is None or last[0] is not batch or last[1] != n:
            self._last[stream] = last = (batch, n, spread(batch, n))
        return last[2]


def build(size, params):
    """Rank 0 feeds every cell along an edge placed by the grid."""
    return star(size, params, partitioner="mpi_join.biclique.matrix:Grid")
