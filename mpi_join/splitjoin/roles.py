"""SplitJoin's join cores (`core`; `distributor` for one with children). The roles that join
nothing, the driver's router and the `combiner` that also writes: root.py. See graph.py for the
layout, rap.py for the punctuation.

A join core receives every tuple of both streams and splits storing from processing:
- store: it keeps the tuples whose count in their stream is its position mod k (round-robin,
  decided by the core alone from what it has seen: no coordinator);
- process: every tuple is joined with the core's sub-window of the other stream (the tuples of a
  batch that this core stores and that arrived before it included), with the shared local join
  (slaves/local_join.BinaryJoin: the paper's nested loop, `local_join = "scan"`, or an equi or
  band index).
- expire without messages: a count window is a ring of ceil(W/k) tuples per core, the oldest
  overwritten in round-robin order (passive); a time window drops, before a batch is processed,
  what its oldest tuple of the other stream no longer sees (active). Visibility is still checked
  per pair (window.py), so the ring only bounds memory.
Each core sends, per input batch, one message up the merge tree: its R-triggered and S-triggered
results, each sorted by (trigger, stored tuple) and punctuated (rap.py). Every core gets every
batch and answers each with one message, so a merger's inputs line up batch by batch.
"""
import math

import numpy as np

from ..storage.results import result_dtype, result_rows
from ..slaves.local_join import BinaryJoin, warm_up
from ..join.kernels import search
from ..runtime.operator import Fields, Operator, Output, Rows
from . import rap, rescale
from .root import Gather
from ..runtime.graph import INPUT
from .graph import FLOWS


class JoinCore(Operator):
    """Role `core`: a leaf of the distribution tree."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        p = job.strategy.params
        v = graph.vertex(rank)
        self.k, self.pos = v.count, v.index              # the group `cores`, in pre-order (graph.py)
        self.parent, = graph.upstream(rank, INPUT)
        self.up, = graph.downstream(rank, FLOWS)
        self.method = p["local_join"]
        self.join = BinaryJoin(job.predicate, dtypes, self.method, older=True)     # probe_newer: the probe's tin
        self.kinds = [s.window.kind for s in job.streams]
        self.ring = [math.ceil(s.window.size / self.k) if s.window.kind == "count" else 0 for s in job.streams]
        self.mode, self.interval = p["punctuation"], int(p["interval"])
        self.seen = [0, 0]
        self.names = job.stream_names
        self.declare(join=Rows(self), counts=Fields(self, "seen"))

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, self.method)

    def restore_rescaled(self, read, old, root, cid):
        self.seen = rescale.restore_core(self, read, old)

    def link_dtypes(self, kind):
        assert kind == FLOWS, kind
        rows = result_dtype(self.names)
        return [rows, rap.STAR, rows, rap.STAR]

    def on_data(self, src, header, batches):
        out = Output()
        out.send(self.to(self.up), self.process(batches), ())
        return out

    def process(self, batches):
        """Store, expire and process one batch; returns its flows [R rows, R stars, S rows, S stars]."""
        j = self.join
        for s in (0, 1):
            o = batches[1 - s]
            if self.kinds[s] == "time" and len(o):            # active expiry, before processing
                j.expire_stream(s, int(o["_lo"][0]))
        first = list(self.seen)
        for s, b in enumerate(batches):
            count = self.seen[s] + np.arange(len(b))
            mine = b[count % self.k == self.pos]
            j.append(j.derive(mine, s), s)
            self.seen[s] += len(b)
        flows = []
        for s, b in enumerate(batches):
            flows += self._flow(s, b, j.probe_newer(b, s), first[s])
        for s, cap in enumerate(self.ring):                  # passive expiry: the ring overwrites
            if cap and len(j.windows[s]) > cap:
                j.drop(s, len(j.windows[s]) - cap)
        return flows

    def _flow(self, s, new, res, first):
        """Stream s's new tuples' results (seq 0, seq 1, tin) as a punctuated flow."""
        trig, stored = res[s], res[1 - s]
        if self.mode == "none":
            return [result_rows(self.names, res[:2], res[2]), rap.no_stars()]
        order = np.lexsort((stored, trig))
        trig, stored = trig[order], stored[order]
        rows = result_rows(self.names, (res[0][order], res[1][order]), res[2][order])
        counts = first + np.arange(len(new), dtype=np.int64)
        row_count = first + np.searchsorted(new["seq"], trig)
        if self.mode == "tuples":
            return [rows, rap.punctuate("tuples", self.interval, counts, new["seq"], row_count, None, None)]
        w = self.join.windows[1 - s]
        view, c = w.view(), self.interval
        block = (w.base + search(view["seq"], stored)) // c
        hi = w.base + search(view["seq"], new["seq"])
        lo = w.base + search(self.join.coord(view, 1 - s), new["_lo"])
        last = np.where(hi > lo, (hi - 1) // c, lo // c - 1)
        return [rows, rap.punctuate("comparisons", c, counts, new["seq"], row_count, block, (lo // c, last))]

    def stats(self):
        return {"window_tuples": len(self.join)}


class DistributorCore(JoinCore):
    """Role `distributor`: a core with children. The runtime passes each batch on to them before
    it joins it (graph.Edge.first); it merges its own flows (input 0) with theirs (inputs 1..)
    before sending them up."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.children = graph.upstream(rank, FLOWS)
        self.gather = Gather(1 + len(self.children), self.link_dtypes(FLOWS), job.stream_names)
        self.declare(gather=self.gather)

    def on_data(self, src, header, batches):
        if src == self.parent:
            self.gather.add(0, self.process(batches))
        else:
            self.gather.add(1 + self.children.index(src), batches)
        out = Output()
        for flows in self.gather.ready():
            out.send(self.to(self.up), flows, ())
        return out
