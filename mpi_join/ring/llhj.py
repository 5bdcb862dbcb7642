"""Strategy `llhj`: the low-latency handshake join. New tuples are fast-forwarded: the driver
sends every batch (both streams, in seq order) to every worker at once (graph.fed_chain with
feed_all), so each new tuple meets the stored tuples of all segments without waiting for the
chain. Only its home segment stores it (R at worker 1, S at worker n); stored tuples then age
along the chain as in handshake join (R to the right, S to the left; ring/handshake.Segment's
movement policy) and leave at the far end by the expiry bounds.

Each pair is evaluated once, by its newer tuple's batch, at the worker that holds the older
tuple for that batch. Batches are numbered; a stored row carries `since`, the last batch whose
replica already met it elsewhere, and only batches after `since` probe it here. A worker that
moves rows on stamps them with the last batch it has processed (rows it has not caught up on
yet wait until it has). If the receiver has already
processed later batches, it joins the moved rows with its retained replicas of those batches
(catch-up); if it is behind, the `since` stamp keeps the batches it has yet to process from
meeting them again. Replicas are retained until every neighbour that can move rows here has
stamped past them (each worker tells its neighbours its progress every few batches).
Within one batch, new R x new S pairs are joined once, at worker 1.
"""
from dataclasses import dataclass

import numpy as np

from ..runtime.headers import Header
from ..join.range_join import probe_ranges
from ..join.kernels import search
from ..slaves.local_join import find_pairs, warm_up
from ..runtime.operator import INT_KEYS, Arrays, Fields, Operator, Output, oldest_seqs
from .chain_routing import New, beside
from .handshake import Alone, AtLeftEnd, AtRightEnd, Segment

PROGRESS_EVERY = 8


@dataclass(frozen=True)
class Moved(Header):
    """Stored tuples moving on (or none: a progress note), stamped with the sender's last batch."""
    done: int


class Replicas:
    """The batches a worker retains for its neighbours' catch-up, (batch id, [R rows, S rows]) in
    batch order, as declared state (operator.declare)."""

    def __init__(self, dtypes):
        self.dtypes, self.kept = dtypes, []

    def __iter__(self):
        return iter(self.kept)

    def __len__(self):
        return len(self.kept)

    def keep(self, b, rows):
        self.kept.append((b, rows))

    def since(self, stamp, s):
        """Stream s's rows of the batches after `stamp`, in seq order (as _pairs takes them; the
        batches of parallel sources need not come in seq order)."""
        rows = [r[s] for b, r in self.kept if b > stamp and len(r[s])]
        if len(rows) < 2:
            return rows[0] if rows else np.zeros(0, self.dtypes[s])
        rows = np.concatenate(rows)
        seq = rows["seq"]
        return rows if (seq[1:] > seq[:-1]).all() else rows[np.argsort(seq, kind="stable")]

    def drop_through(self, floor):
        """Forget the batches up to `floor`; none if `floor` is None (all of them)."""
        self.kept = [] if floor is None else [(b, r) for b, r in self.kept if b > floor]

    def oldest(self, n):
        """A retained batch's rows still meet moved rows at a catch-up."""
        out = [None] * n
        for _, rows in self.kept:
            out = oldest_seqs(rows, n, into=out)
        return out

    def snapshot(self):
        return ({f"{k}/{s}": rows[s] for k, (_, rows) in enumerate(self.kept) for s in (0, 1)},
                {"batches": [b for b, _ in self.kept]})

    def restore(self, arrays, attrs):
        self.kept = [(b, [arrays[f"{k}/0"], arrays[f"{k}/1"]]) for k, b in enumerate(attrs["batches"])]

    def state_dtype(self, name):
        k, _, s = name.partition("/")
        return self.dtypes[int(s)] if k.isdigit() and s in ("0", "1") else None


class Stamps:
    """Per stored row of each stream, aligned with its window: `since`, the last batch whose
    replica already met the row elsewhere (declared state through `arrays`: since/0, since/1).
    Rows are appended at the back and leave at the front, so each stream's stamps live in a
    buffer with room after them: an append writes its rows' stamps there (a new buffer, half
    again as large, when the room is used up), not a copy of the window's stamps per batch.
    Only rows moved in from a neighbour ahead of this worker carry a stamp past its last batch:
    the first of them is looked for only while the largest stamp is past it."""

    def __init__(self):
        self.set([np.zeros(0, np.int64), np.zeros(0, np.int64)])

    def set(self, arrays):
        self.buf = [np.array(a, np.int64) for a in arrays]
        self.lo, self.hi = [0, 0], [len(a) for a in self.buf]
        self.most = [None, None]        # the largest stamp of each stream, once asked for

    def __getitem__(self, s):
        return self.buf[s][self.lo[s]:self.hi[s]]

    def append(self, s, n, stamp):
        if self.hi[s] + n > len(self.buf[s]):
            kept = self[s]
            self.buf[s] = np.empty(max(64, (len(kept) + n) * 3 // 2), np.int64)
            self.buf[s][:len(kept)] = kept
            self.lo[s], self.hi[s] = 0, len(kept)
        self.buf[s][self.hi[s]:self.hi[s] + n] = stamp
        self.hi[s] += n
        if self.most[s] is not None:
            self.most[s] = max(self.most[s], int(stamp))

    def drop(self, s, k):
        """Forget the first k rows' stamps (they moved on, or expired at an end); none if k <= 0."""
        self.lo[s] = min(self.lo[s] + max(k, 0), self.hi[s])

    def first_past(self, s, done):
        """The first row of stream s stamped past `done`, or None."""
        if self.most[s] is None:
            self.most[s] = int(self[s].max(initial=-1))
        if self.most[s] <= done:
            return None
        ahead = self[s] > done
        if not ahead.any():
            self.most[s] = done
            return None
        return int(np.argmax(ahead))

    @property
    def arrays(self):
        """Both streams' stamps, as the operator's declared state saves them (operator.Arrays)."""
        return [self[0], self[1]]

    @arrays.setter
    def arrays(self, arrays):
        self.set(arrays)


class LowLatencyModule(Operator):
    """A middle worker of the chain; the ends are the role classes below (`exits`, as in
    handshake). A stream's home, where its new tuples are stored, is the end where it enters,
    which is where the other stream leaves."""
    exits = (False, False)

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.n = len(graph.workers)
        # a stored row is the older of every pair it is probed for (a new batch meets stored rows
        # of earlier batches; a catch-up meets moved rows with later replicas): it holds no _tin
        self.seg = Segment.of(job, rank, self.n, dtypes, self.exits, older=True)
        self.home = self.exits[::-1]
        self.left, self.right = beside(graph, rank)
        self.since = Stamps()                # per stored row, aligned with the window
        self.done = -1                       # the last batch processed here
        self.replicas = Replicas(dtypes)     # (batch id, [R rows, S rows]) retained for catch-up
        self.heard = {w: -1 for w in (self.left, self.right) if w}   # neighbours' last stamps
        self.told = -1
        self.counts = {"moved": 0, "catch_up_pairs": 0}
        self.declare(segment=self.seg, since=Arrays(self.since, "arrays", (np.dtype(np.int64),) * 2),
                     replicas=self.replicas, marks=Fields(self, "done", "told", heard=INT_KEYS))

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, self.job.strategy.params["local_join"])

    def restore_rescaled(self, read, old, root, cid):
        from .chain_rescale import restore_home
        out = restore_home(self, read, old)
        # the new run numbers its batches afresh (its sources may number otherwise): every stored
        # row waits for all of them, as if nothing had been processed yet; no replica is needed
        self.since.set([np.full(len(self.seg.join.windows[s]), -1, np.int64) for s in (0, 1)])
        self.done = self.told = -1
        self.heard = {w: -1 for w in self.heard}
        self.replicas.drop_through(None)
        return out

    # -- messages ---------------------------------------------------------------------------------
    def on_data(self, src, header, batches):
        out = Output()
        body = header.body
        if isinstance(body, New):
            self._new(out, body.batch, batches, header.bounds)
        elif isinstance(body, Moved):
            self._moved(out, src, body.done, batches)
        else:
            raise RuntimeError(f"rank {self.rank}: an llhj batch without its header ({body!r})")
        self._move(out, header.bounds)
        self._trim()
        return out

    def _new(self, out, b, batches, bounds):
        R, S = batches
        seg = self.seg
        for s, new in ((0, R), (1, S)):
            if len(new):
                seg._clock(new)
                self._probe_stored(out, new, s, b)
        if self.home[0] and len(R) and len(S):          # this batch's own pairs, once: at R's home
            self._emit(out, *self._pairs(R, S))
        for s, new in ((0, R), (1, S)):
            if self.home[s] and len(new):
                seg.join.append(seg.join.derive(new, s), s)
                self.since.append(s, len(new), b)
        self.done = b
        self.replicas.keep(b, [R, S])
        seg._drop_at_end(0, bounds)
        seg._drop_at_end(1, bounds)
        self._sync_since()

    def _probe_stored(self, out, new, s, b):
        """New rows of stream s (batch b) against the stored rows of the other stream that no
        earlier worker has met this batch with (since < b). Those stored rows came in batches
        before b, so the new row is a pair's newer: its arrival time is the result's."""
        o = 1 - s
        join = self.seg.join
        X = join.windows[o].view()
        if not len(X):
            return
        P = join.derive(new, s)
        A, a, B, bb = find_pairs(join.layout, P, s, X, join.windows[o].base, join.runs[o], split=join._older(P, o, X))
        ni, xi = (a, bb) if s == 0 else (bb, a)
        keep = self.since[o][xi] < b
        if keep.any():
            a, bb = a[keep], bb[keep]
            out.emit((A["seq"][a], B["seq"][bb]), new["_tin"][ni[keep]])

    def _moved(self, out, src, stamp, batches):
        self.heard[src] = max(self.heard[src], stamp)
        for s, rows in enumerate(batches):
            if not len(rows):
                continue
            # catch-up: replicas this worker processed after the sender's stamp met other rows
            # here; one probe of their rows together, not one per replica
            later = self.replicas.since(stamp, 1 - s)
            if len(later):
                res = self._pairs(rows, later) if s == 0 else self._pairs(later, rows)
                self.counts["catch_up_pairs"] += len(res[1])
                self._emit(out, *res)
            self.seg.join.append(self.seg.join.derive(rows, s), s)
            self.since.append(s, len(rows), stamp)

    def _pairs(self, R, S):
        """Every visible matching pair of R rows and S rows (both in seq order), each found by its
        newer tuple: R x older S and S x older R as row ranges (range_join.probe_ranges)."""
        pred = self.job.predicate
        out = []
        for i, j, A, B in ((0, 1, R, S), (1, 0, S, R)):
            hi = search(B["seq"], A["seq"])
            lo = np.minimum(search(B["_coord"], A["_lo"]), hi)
            ia, ib = probe_ranges(pred, i, j, A, B, lo, hi)
            out.append((ia, ib) if i == 0 else (ib, ia))
        a = np.concatenate([out[0][0], out[1][0]])
        b = np.concatenate([out[0][1], out[1][1]])
        return R, a, S, b

    def _emit(self, out, A, a, B, b):
        """Pairs of runtime rows (both carry _tin): the newer's arrival time is the result's."""
        if not len(a):
            return
        sa, sb = A["seq"][a], B["seq"][b]
        tin = np.where(sa > sb, A["_tin"][a], B["_tin"][b])
        out.emit((sa, sb), tin)

    # -- movement and housekeeping ----------------------------------------------------------------
    def _move(self, out, bounds):
        # rows that batches still to come here must meet (since > done) wait: a move is stamped
        # with `done`, and the next worker must not skip those batches for them
        limit = (self.since.first_past(0, self.done), self.since.first_past(1, self.done))
        due = self.seg.due(limit=limit)
        for s, rows in enumerate(due):
            if rows is None:
                continue
            k = self.seg.sent[s]
            self.seg.acked(s, k)                 # no acknowledgement needed: the stamp orders it
            self.since.drop(s, k)
            empty = [np.zeros(0, dt) for dt in self.dtypes]
            empty[s] = rows
            dest = self.right if s == 0 else self.left
            out.send(self.to(dest), empty, bounds, Moved(self.done))
            self.counts["moved"] += len(rows)
        if self.done - self.told >= PROGRESS_EVERY:
            for w in self.heard:
                out.send(self.to(w), [np.zeros(0, dt) for dt in self.dtypes], bounds, Moved(self.done))
            self.told = self.done

    def _sync_since(self):
        """Keep `since` aligned with the windows after expiry at the ends."""
        for s in (0, 1):
            self.since.drop(s, len(self.since[s]) - len(self.seg.join.windows[s]))

    def _trim(self):
        """Drop replicas every neighbour that can move rows here has stamped past."""
        floor = min(self.heard.values()) if self.heard else self.done
        self.replicas.drop_through(floor)

    def stats(self):
        r, s = self.seg.held()
        return {"window_tuples": r + s, "replicas": len(self.replicas), **self.counts}


class LeftHome(AtLeftEnd, LowLatencyModule):
    pass


class RightHome(AtRightEnd, LowLatencyModule):
    pass


class OnlyHome(Alone, LowLatencyModule):
    pass


def hops(k, params):
    """bench cores' delay model: every new tuple is fast-forwarded to all segments at once: one hop whatever k."""
    return 1
