"""SplitJoin's root of the merge tree, the `combiner` (it joins nothing, and writes), with the
Gather every merging node uses. The root of the distribution tree, rank 0, is the runtime's edge
router: its edges to the tree's first level broadcast every batch, whole (graph.py). No join code (and no numba) is imported here, so these ranks
start without loading a kernel; the join cores: roles.py."""
from collections import deque

import numpy as np

from ..storage.results import result_dtype
from ..runtime.operator import Fields, Operator, Output, oldest_seqs
from . import rap, rescale
from .graph import FLOWS


class Gather:
    """Flows waiting at a merger, one queue per input; a batch's set is merged once every input
    has brought its message for it (inputs answer every batch, in order). Declared state: the
    queued flows, "<input>/<message>/<flow>"."""

    def __init__(self, n, dtypes, names):
        """`names`: the streams' (the results' "<name>_seq" columns)."""
        self.queues = [deque() for _ in range(n)]
        self.dtypes, self.names = dtypes, names

    def add(self, i, flows):
        self.queues[i].append(list(flows))

    def ready(self):
        """Merged flows [R rows, R stars, S rows, S stars] of each complete set, oldest first."""
        while all(self.queues):
            sets = [q.popleft() for q in self.queues]
            yield [x for s in (0, 2) for x in rap.merge([(f[s], f[s + 1]) for f in sets])]

    def oldest(self, n):
        """Results still queued name tuples whose results are not yet written."""
        out = [None] * n
        for q in self.queues:
            for f in q:
                out = oldest_seqs(f, n, self.names, into=out)
        return out

    def snapshot(self):
        arrays = {f"{i}/{m}/{a}": x for i, q in enumerate(self.queues) for m, f in enumerate(q)
                  for a, x in enumerate(f)}
        return arrays, {"lengths": [len(q) for q in self.queues]}

    def restore(self, arrays, attrs):
        for i, n in enumerate(attrs["lengths"]):
            self.queues[i] = deque([[arrays.get(f"{i}/{m}/{a}", np.zeros(0, dt)) for a, dt in enumerate(self.dtypes)]
                                    for m in range(n)])

    def state_dtype(self, name):
        p = name.split("/")
        return self.dtypes[int(p[2])] if len(p) == 3 and p[2] in "0123" else None


class Combiner(Operator):
    """Role `combiner`: merges the flows of the driver's children, joins the R- and S-punctuated
    flows into one stream (stars flagged R or S) and writes its results in that order."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.inputs = graph.upstream(rank)
        self.gather = Gather(len(self.inputs), self.link_dtypes(FLOWS), job.stream_names)
        self.cols = [f"{n}_seq" for n in job.stream_names]
        self.stars = [0, 0]
        self.received = 0
        self.declare(gather=self.gather, counts=Fields(self, "stars", "received"))

    def link_dtypes(self, kind):
        rows = result_dtype(self.job.stream_names)
        return [rows, rap.STAR, rows, rap.STAR]

    def on_data(self, src, header, batches):
        self.gather.add(self.inputs.index(src), batches)
        out = Output()
        for f in self.gather.ready():
            rows, stars, flags = rap.combine((f[0], f[1]), (f[2], f[3]))
            self.stars[0] += int((flags == 0).sum())
            self.stars[1] += int((flags == 1).sum())
            self.received += len(rows)
            out.emit([np.ascontiguousarray(rows[c]) for c in self.cols], np.ascontiguousarray(rows["_tin"]))
        return out

    in_flight = "own"        # the flows in flight at a cut, written by the new combiner in punctuated order

    def restore_rescaled(self, read, old, root, cid):
        stars, self.received, out = rescale.restore_combiner(self, read, old)
        self.stars = self.stars if stars is None else stars
        return out

    def stats(self):
        return {"window_tuples": 0, "results_received": self.received, "stars_r": self.stars[0],
                "stars_s": self.stars[1]}
