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
An `own` edge is routed by the strategy's own code: Routes refuses it at load. A worker's edges
route the same way (Routes): what it passes on before it joins (graph.Edge.first), and what its
operator routes with a Routes of its own edges.

The partitioner is the one declaration of where a row lives (placement.py): it routes here, and a
restore at another rank count deals the stored rows by it (Operator.restore_rescaled), so routing
and rescale cannot disagree.
"""
import numpy as np

from ..errors import ConfigError
from ..partitioning.hashing import group_rows
from .graph import DRIVER, INPUT
from .operator import Fields, Operator, Output
from .placement import WHOLE, declared, labeller, reach


class Routes:
    """Edges of one vertex, executed: each batch along them as their partitioners say (the list
    above). Rank 0's EdgeRouter routes the source's batches by its edges so; a worker routes what
    it passes on along its `first` edges so (slaves/worker.py), and an operator that holds one of
    its own edges what it routes. `turn` is the round-robin's next edge."""

    def __init__(self, job, edges):
        self.whole, self.turns, self.split = [], [], {}        # split: partitioner -> [edge]
        for e in edges:
            if e.partitioner in WHOLE:
                self.whole.append(e)
            elif e.partitioner == "round-robin":
                self.turns.append(e)
            elif e.partitioner == "own":
                raise ConfigError(f"strategy {job.strategy.name!r}: edge {e.src} -> {e.dst} is routed by the "
                                  f"strategy's own code (partitioner 'own'), not by the runtime")
            else:
                self.split.setdefault(e.partitioner, []).append(e)
        self.label = {p: labeller(job, p, len(dsts)) for p, dsts in self.split.items()}
        self.turn = 0

    def restart(self):
        """The round-robin from its first edge again (a run at another rank count)."""
        self.turn = 0

    def route(self, out, batches, bounds, body=None, order=-1):
        """Add to Output `out` the messages of `batches` along these edges; returns `out`."""
        if self.whole:
            out.send_many(self.whole, batches, bounds, body, order)
        if self.turns:
            out.send(self.turns[self.turn % len(self.turns)], batches, bounds, body, order)
            self.turn += 1
        for p, dsts in self.split.items():
            n = len(dsts)
            if declared(self.label[p]):          # a row to every edge it reaches (placement.py)
                for i, dst in enumerate(dsts):
                    out.send(dst, [b[reach(self.label[p], b, s, i, n)] for s, b in enumerate(batches)], bounds,
                             body, order)
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
                out.send(dst, arrays, bounds, body, order)
        return out


class FirstEdges:
    """What a worker passes on before it joins (graph.Edge.first), routed by the edges'
    partitioners: `route(src, header, batches)` -> an Output, or None where nothing goes on."""

    def __init__(self, job, graph, rank):
        self.job, self.graph, self.rank, self.routes = job, graph, rank, {}     # upstream -> Routes or None

    def route(self, src, header, batches):
        if src not in self.routes:
            edges = self.graph.first_edges(self.rank, src)
            self.routes[src] = Routes(self.job, edges) if edges else None
        r = self.routes[src]
        return None if r is None else r.route(Output(), batches, header.bounds, header.body, header.order)


class Distributor(Operator):
    """A vertex that only passes rows on (the runtime's `distributor` role, strategies.ROLE_DEFAULTS):
    each batch along its input edges by their partitioners. Rank 0's EdgeRouter is one."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.routes = Routes(job, [e for e in graph.out_edges(rank) if e.carries == INPUT])
        self.declare(turns=Fields(self.routes, "turn", rescale="fresh"))

    def on_data(self, src, header, batches):
        return self.routes.route(Output(), batches, header.bounds, header.body, header.order)


class EdgeRouter(Distributor):
    """Rank 0's operator for a strategy that names none: the source's batches along its edges."""

    def __init__(self, job, rank, graph, dtypes):
        own = [e for e in graph.out_edges(DRIVER) if e.partitioner == "own"]
        if own:
            raise ConfigError(f"strategy {job.strategy.name!r}: edge 0 -> {own[0].dst} is routed by the strategy's own "
                              f"rank-0 operator (partitioner 'own'), and it names none (its 'driver' role)")
        super().__init__(job, rank, graph, dtypes)

    def rescale(self, root, cid):
        """At another rank count it routes along this run's edges, as every worker's restore
        dealt its rows by them (home): only the round-robin turn starts again."""
        self.routes.restart()

    def on_data(self, src, header, batches):
        """The source's header: its `order` is the batch's slot in its epoch, not an order any
        receiver merges by, and it carries no body: neither goes on."""
        return self.routes.route(Output(), batches, header.bounds)
