"""Strategy `handshake`: the handshake-join chain across ranks, with two-phase forwarding.

Workers 1..n form a chain (graph.chain, both ways). R tuples enter at worker 1 and flow right,
S tuples enter at worker n and flow left; each worker holds one segment of both windows. A batch
entering a segment is joined with the opposite stream's tuples there (eager scan), kept, and
moved on when it ages out of the segment (time windows: by age against the newest timestamp the
worker has seen; count windows: beyond the segment's share of the window). Segments are equal, or
weighted (`weights`) for unequal ranks.

Two-phase forwarding: a forwarded batch stays in the sender's window, marked as sent, until the
receiver acknowledges it; acknowledgements travel as DATA on the same FIFO link as tuples (so a
checkpoint records them as channel state). An arriving R batch is joined with every S tuple
present, sent or not; an arriving S batch only with the R tuples not yet sent. Two batches that
cross between neighbours therefore meet exactly once, at the receiver of the R batch: the S
batch it crossed is still there, marked, because its acknowledgement leaves the other worker
only after the R batch did.

Pipeline ends: worker 1 drops S tuples and worker n drops R tuples that no tuple still to come
can see (the expiry bounds that the driver's messages to that end carry: for count windows this
is the source's expiry message for the opposite end). At the end of the input every worker
pushes what it holds on towards its exit, so every pair that must meet has met.

Pairs are evaluated with the shared local join (slaves/local_join.BinaryJoin): `scan` is the
nested loop of the original, `index` keeps an equi hash or band index across batches. Each pair
is checked with the exact window test, so results equal the oracle's.
"""
import time
from dataclasses import dataclass

import numpy as np

from ..runtime.headers import Header
from ..slaves.local_join import BinaryJoin, warm_up
from ..join.kernels import search
from ..runtime.operator import Fields, Operator, Output, oldest_seqs
from .chain_routing import Arriving, beside


@dataclass(frozen=True)
class Acked(Header):
    """The neighbour now holds the first `upto` tuples of `side` this worker forwarded."""
    side: int
    upto: int


class Segment:
    """One worker's segments of both windows, the two-phase forwarding state and the movement
    policy; pure (no MPI): methods return what to send where."""

    def __init__(self, job, k, n, dtypes, exits, method="scan", weights=None, older=False):
        """`older`: a stored row is always the older of a pair it meets (llhj), so it holds no
        `_tin` (BinaryJoin); in handshake join either tuple of a pair can be the newer."""
        self.k, self.n, self.dtypes = k, n, dtypes
        # exits[s]: stream s leaves the chain at this segment (R at the right end, S at the left);
        # the worker's role decides it
        self.exits = tuple(exits)
        self.join = BinaryJoin(job.predicate, dtypes, method, older=older)
        self.sent = [0, 0]                 # oldest rows of each window sent on, not yet acknowledged
        self.now = None                    # newest ts seen here (time windows age against it)
        w = np.asarray(weights if weights else [1.0] * n, np.float64)
        cum = np.cumsum(w) / w.sum()
        rcum = np.cumsum(w[::-1]) / w.sum()
        self.kinds = [s.window.kind for s in job.streams]
        self.sizes = [s.window.size for s in job.streams]
        # R ages [0, end) are held by workers 1..k; S (entering at n) by workers n..k
        self.end = [float(cum[k - 1]), float(rcum[n - k])]
        self.share = [float(w[k - 1] / w.sum())] * 2

    @classmethod
    def of(cls, job, rank, n, dtypes, exits, older=False):
        """The segment of worker `rank` of n, from the strategy's local_join and weights."""
        p = job.strategy.params
        weights = [float(x) for x in str(p["weights"]).split(",")] if p["weights"] else None
        return cls(job, rank, n, dtypes, exits, p["local_join"], weights, older)

    # -- messages --------------------------------------------------------------------------------
    def arrive(self, s, batch, bounds=None, from_driver=False):
        """A batch of stream s enters this segment. Returns (results, ack_count or 0)."""
        if len(batch):
            self._clock(batch)
        skip = self.sent[0] if s == 1 else 0       # S meets only R not sent on; R meets every S
        res = self.join.probe(batch, s, skip)
        self.join.append(self.join.derive(batch, s), s)
        if bounds is not None:
            self._drop_at_end(s, bounds)
        return res, (0 if from_driver else len(batch))

    def acked(self, s, count):
        """The neighbour took `count` forwarded tuples of stream s: they leave this segment."""
        self.join.drop(s, count)
        self.sent[s] -= count

    def _drop_at_end(self, s, bounds):
        """A batch of stream s from the driver lets the end where the other stream exits (S at
        the left end, R at the right) drop that stream's tuples no tuple still to come can see.
        Only the opposite stream: the bounds count this epoch's other batch as arrived, and with
        one worker that batch comes next."""
        o = 1 - s
        if self.exits[o]:
            self.join.expire_stream(o, bounds[o])

    def drop_met(self, ended):
        """At the end where a stream leaves, its tuples wait only for tuples of the other stream
        still to enter there; once that input has ended (`ended[s]`: the input has ended on
        stream s's side) they have met every partner (an arriving batch meets what is here, and
        one it crossed meets it at the neighbour), so they go: at the end of the input every
        stream moves to its exit, and would otherwise pile up there."""
        for s in (0, 1):
            if self.exits[s] and ended[1 - s] and len(self.join.windows[s]):
                self.join.drop(s, len(self.join.windows[s]))

    def _clock(self, batch):
        t = int(batch["ts"][-1])
        self.now = t if self.now is None else max(self.now, t)

    # -- movement ---------------------------------------------------------------------------------
    def due(self, flush=(False, False), limit=(None, None)):
        """Rows of each stream to send on now (R to the right, S to the left), as runtime rows;
        marks them sent. `flush[s]`: the input has ended on that side, send everything;
        `limit[s]`: send none of the rows from that one on."""
        out = [None, None]
        for s in (0, 1):
            if self.exits[s]:
                continue                              # this end drops instead
            w = self.join.windows[s]
            v = w.view()
            first = self.sent[s]
            if first >= len(v):
                continue
            if flush[s]:
                stop = len(v)
            elif self.kinds[s] == "time":
                if self.now is None:
                    continue
                oldest = self.now - self.end[s] * self.sizes[s]    # older than the segment's end: move
                stop = search(self.join.coord(v, s), oldest, side="right")
            else:
                cap = max(1, int(np.ceil(self.share[s] * self.sizes[s]))) if self.kinds[s] == "count" else None
                stop = len(v) - cap if cap is not None else first
            if limit[s] is not None:
                stop = min(stop, limit[s])
            if stop > first:
                out[s] = self.join.runtime_rows(v[first:stop], s, self.dtypes[s])
                self.sent[s] = stop
        return out

    # -- state (a part, operator.declare) ----------------------------------------------------------
    def snapshot(self):
        return self.join.snapshot(), {"sent": list(self.sent), "now": self.now}

    def restore(self, arrays, attrs):
        self.join.restore(arrays)
        self.sent, self.now = list(attrs["sent"]), attrs["now"]

    def state_dtype(self, name):
        return self.join.state_dtype(name)

    def footprint(self):
        return self.join.footprint()

    def oldest(self, n):
        """Rows sent on but not yet acknowledged are still here: counted."""
        return oldest_seqs([w.view() for w in self.join.windows], n)

    def held(self):
        return [len(self.join.windows[s]) - self.sent[s] for s in (0, 1)]


class HandshakeModule(Operator):
    """A middle worker of the chain: its Segment, wired to the neighbours. The ends are the role
    classes below; they differ only in which stream leaves the chain there (`exits`)."""
    exits = (False, False)

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        p = job.strategy.params
        self.n = len(graph.workers)
        self.seg = Segment.of(job, rank, self.n, dtypes, self.exits)
        # the driver stands beyond each end: it feeds R at the left end and S at the right
        self.left, self.right = beside(graph, rank)
        self.ended = [False, False]          # the input has ended on the R side / the S side
        self.delay = float(p["slow_delay"]) if p["slow_rank"] == rank else 0.0
        self.counts = {"forwarded": 0, "acks": 0}
        self.declare(segment=self.seg, ends=Fields(self, "ended"))

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, self.job.strategy.params["local_join"])

    def restore_rescaled(self, read, old, root, cid):
        from .chain_rescale import restore_segment
        out, self.ended = restore_segment(self, read, old)
        return out

    def on_data(self, src, header, batches):
        out = Output()
        if self.delay:
            time.sleep(self.delay)
        body = header.body
        if isinstance(body, Arriving):
            s = body.side
            from_driver = src == 0
            res, ack = self.seg.arrive(s, batches[s], header.bounds if from_driver else None, from_driver)
            out.emit(res[:2], res[2])
            if ack:
                back = self.left if s == 0 else self.right
                out.send(self.to(back), [b[:0] for b in batches], header.bounds, Acked(s, ack))
        elif isinstance(body, Acked):
            self.seg.acked(body.side, body.upto)
            self.counts["acks"] += 1
        else:
            raise RuntimeError(f"rank {self.rank}: a handshake batch without its header ({body!r})")
        self._move(out, header.bounds)
        self.seg.drop_met(self.ended)
        return out

    def _move(self, out, bounds):
        due = self.seg.due(tuple(self.ended))
        for s, rows in enumerate(due):
            if rows is None:
                continue
            empty = [np.zeros(0, dt) for dt in self.dtypes]
            empty[s] = rows
            out.send(self.to(self.right if s == 0 else self.left), empty, bounds, Arriving(s))
            self.counts["forwarded"] += len(rows)

    def on_eos(self, src):
        """The input has ended on the side `src` feeds: push that stream on towards its exit."""
        if src == self.left:
            self.ended[0] = True
        if src == self.right:
            self.ended[1] = True
        out = Output()
        self._move(out, tuple(0 for _ in self.dtypes))
        self.seg.drop_met(self.ended)
        return out

    def stats(self):
        r, s = self.seg.held()
        return {"window_tuples": r + s, **self.counts}


class AtLeftEnd:
    """Role mix-in for worker 1: R enters from the driver, S leaves the chain."""
    exits = (False, True)


class AtRightEnd:
    """Role mix-in for worker n: S enters from the driver, R leaves the chain."""
    exits = (True, False)


class Alone:
    """Role mix-in for a chain of one worker: both streams enter and leave there."""
    exits = (True, True)


class LeftEnd(AtLeftEnd, HandshakeModule):
    pass


class RightEnd(AtRightEnd, HandshakeModule):
    pass


class OnlySegment(Alone, HandshakeModule):
    pass


def hops(k, params):
    """bench cores' delay model: a tuple crosses the whole chain of k segments, meeting the other stream's on the way."""
    return k
