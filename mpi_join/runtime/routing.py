"""Edges that route: rank 0's operator for a strategy that names none of its own (its rank 0 only
routes). Each batch the source releases goes out along rank 0's edges (graph.Edge), as each
edge's partitioner says:

- `forward` and `broadcast`: the whole batch, to every such edge (packed once);
- `round-robin`: the whole batch to one such edge, the next one each batch;
- `hash`: each row to one such edge by the hash of its equi key (the job's equi columns, as
  hash's partitioning reads them), so equal keys meet on one rank; every such edge gets a
  message each batch, empty or not, so that its expiry bounds move on;
- `"module:function"`, a strategy's own: `function(batch, stream, n)` -> each row's edge, 0..n-1,
  among the edges with that partitioner (rank order); every such edge gets a message each batch;
- `"module:Class"`, a strategy's own placement (placement.py): each row to every edge its
  `reach` (else `home`) gives, so a row may be copied; every such edge gets a message each batch.
An `own` edge is routed by the strategy's own rank-0 operator: this one refuses it at load.

The partitioner is the one declaration of where a row lives (placement.py): it routes here, and a
restore at another rank count deals the stored rows by it (Operator.restore_rescaled), so routing
and rescale cannot disagree.
"""
import numpy as np

from ..errors import ConfigError
from ..partitioning.hashing import group_rows
from .graph import DRIVER
from .operator import Fields, Operator, Output
from .placement import declared, labeller, reach


class EdgeRouter(Operator):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.whole, self.turns, self.split = [], [], {}        # split: partitioner -> [dst]
        for e in graph.out_edges(DRIVER):
            if e.partitioner in ("forward", "broadcast"):
                self.whole.append(e.dst)
            elif e.partitioner == "round-robin":
                self.turns.append(e.dst)
            elif e.partitioner == "own":
                raise ConfigError(f"strategy {job.strategy.name!r}: edge 0 -> {e.dst} is routed by the strategy's own "
                                  f"rank-0 operator (partitioner 'own'), and it names none (its 'driver' role)")
            else:
                self.split.setdefault(e.partitioner, []).append(e.dst)
        self.label = {p: labeller(job, p, len(dsts)) for p, dsts in self.split.items()}
        self.turn = 0
        self.declare(turns=Fields(self, "turn"))

    def rescale(self, root, cid):
        """At another rank count it routes along this run's edges, as every worker's restore
        dealt its rows by them (home): only the round-robin turn starts again."""
        self.turn = 0

    def on_data(self, src, header, batches):
        out = Output()
        if self.whole:
            out.send_many(self.whole, batches, header.bounds)
        if self.turns:
            out.send(self.turns[self.turn % len(self.turns)], batches, header.bounds)
            self.turn += 1
        for p, dsts in self.split.items():
            n = len(dsts)
            if declared(self.label[p]):          # a row to every edge it reaches (placement.py)
                for i, dst in enumerate(dsts):
                    out.send(dst, [b[reach(self.label[p], b, s, i, n)] for s, b in enumerate(batches)], header.bounds)
                continue
            parts = [[] for _ in dsts]
            for s, b in enumerate(batches):
                labels = np.asarray(self.label[p](b, s, n), np.int64)
                if len(labels) != len(b) or (len(b) and not (0 <= labels.min() and labels.max() < n)):
                    raise ValueError(f"partitioner {p!r} gave {len(labels)} labels for {len(b)} rows, or one "
                                     f"outside 0..{n - 1}")
                rows = dict(group_rows(b, labels))              # rows of one edge stay in seq order
                for i in range(n):
                    parts[i].append(rows.get(i, b[:0]))
            for dst, arrays in zip(dsts, parts):
                out.send(dst, arrays, header.bounds)
        return out
