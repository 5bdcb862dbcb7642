"""Strategy `psp`: pipelined state partitioning, a ring of time-sliced multi-way joins.

Workers 1..N form a ring (graph.ring); the driver feeds input batches to the head (worker 1).
Every stream's window is cut into N abutting slices by age (ring/slicing.py): the head holds the
newest tuples, the tail the oldest, and no tuple is stored twice. The execution steps of each
sliced-join operator, for a message from upstream:

- INPUT (head only, from the driver): insert the batch's tuples (build copies) into the head's
  state, then handle it as a PROBE.
- PROBE (the batch's probe copies): purge by the batch's cuts (tuples now past this slice move
  to the next operator as BUILD, ahead of the probe; the tail drops them), forward the probe to
  the next operator (not from the tail), then probe each tuple t of stream i against this
  slice of the first stream of i's join ordering. Matches are intermediate results (INTER).
- BUILD: append the moved tuples (they are older than everything already here).
- INTER (partial combinations with their schema, the id of the operator that made them and the
  level = streams bound - 1): forward unless it is back at the operator that made it (one round
  of the ring), and probe this slice of the next stream in the ordering. A complete combination
  is a result, emitted by the operator that completes it.

END life-span control: at the head, the last message a probe (or a returning END) produces is
marked END; when nothing is produced a null END goes instead. END of level M-1 is a null marker.
When it comes back to the head, every message of that batch has been processed everywhere
(FIFO links; Property 2 and Theorem 1 of the PSP design): the batch's cycle has ended. The head
then tells the driver (CycleDone) and takes the next input. With `interleave = 1` this is basic
PSP: one batch in the ring at a time. With `interleave = L` (PSP-I) up to L batches are in the
ring at once: each operator keeps, per batch in flight, its cuts (the StateStart/StateEnd of
that batch) and probes only rows inside them, and deletes purged rows only when no batch in
flight can still need them (delayed purge); the head tells the ring which batches have retired
on the next batch it sends.

Cuts: rank 0's slicer (or each source's) computes them per batch; count-bounded slices
(`slice_counts`) follow every tuple, which only the head sees with several sources, so there the
head's own slicer sets them (a relocation's weights do not apply: the counts set the slices).

State: a slice row holds what a probe reads of it (slice_dtype: seq, ts, its stream's
condition columns); probe copies, partial combinations and moved rows travel as runtime rows.

Exact under batching: each batch's cuts come from its oldest probe and never move backwards
(slicing.py), and each probe also checks the window and seq of its own tuple, so every pair a
tuple must see is met at exactly one operator.
"""
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from ..runtime.headers import Header
from ..runtime.protocol import DataHeader
from ..join.predicate import Theta
from ..join.range_join import extend, row_index
from ..join.kernels import search
from ..runtime.operator import Fields, Operator, Output
from ..runtime.graph import DRIVER, ring
from ..join.window import POS_INF, Window, footprint
from ..schema import NULL, TS
from ..slaves.join_rows import held_columns, runtime_rows
from .psp_rescale import Rescalable
from .psp_router import CycleDone, Entering, Probing, auto_orderings, batch_header, new_slicer, slice_counts


_E = np.zeros(0, np.int64)


@dataclass(frozen=True)
class Building(Header):
    """BUILD: tuples moved on to the next slice."""


@dataclass(frozen=True)
class Partial(Header):
    """INTER: partial combinations of stream `stream`'s tuples of batch `batch_id`, `level + 1`
    streams bound in `order`, made by operator `origin`; `end` marks the last of a step."""
    batch_id: int
    level: int
    stream: int
    origin: int
    end: bool
    order: tuple


def batch_parts(body, M, n):
    """(batch id, retired, {stream: probing order}, cuts M x n) of an Entering or Probing header."""
    o = list(body.orderings)
    orderings = {i: o[i * (M - 1):(i + 1) * (M - 1)] for i in range(M)}
    return body.batch_id, body.retired, orderings, np.asarray(body.cuts, np.int64).reshape(M, n)


def slice_dtype(pred, dtypes, j, coord):
    """What a slice row of stream j holds: seq, ts and the staged columns its conditions with
    any stream read, its NULL flag, plus `_coord` unless `coord` is ts (a time window's coordinate); not `_lo`,
    `_tin`, `_h`, which only a probe's are read for. A stream under a UDF keeps its runtime rows:
    the UDF takes whole records, compiled for the probes' record type."""
    if any(isinstance(c, Theta) for m in range(len(dtypes)) for c in pred.between(j, m)):
        return dtypes[j]
    held = {"seq", TS}
    for m in range(len(dtypes)):
        if m != j and pred.between(j, m):
            held |= held_columns(pred, (dtypes[j], dtypes[m]), j, m)[0]
    names = [n for n in dtypes[j].names if (n in held and not n.startswith("_")) or n == NULL] + \
        (["_coord"] if coord == "_coord" else [])
    return np.dtype([(n, dtypes[j].fields[n][0]) for n in names])


class Slice:
    """A slice operator's rows, its state (operator.declare): each stream's window, of which the
    rows from `owned[j]` on are held here (those before it left the slice and are kept only for
    batches in flight, not checkpointed: a cut waits until none is), and the latest cuts. A slice
    row holds what a probe reads of it: seq, ts (a time window's coordinate) and the columns of
    its stream's conditions; the probe copies and the wire carry runtime rows. `keys[j][k]`:
    stream j's rows indexed for probes from stream k (range_join.row_index; None for a theta
    alone), made at the first probe that needs one and kept with the window as rows come and go."""

    def __init__(self, job, dtypes, k, n):
        self.dtypes, self.M, self.k, self.n = dtypes, len(dtypes), k, n
        self.slice_dtypes = [slice_dtype(job.predicate, dtypes, j, TS if s.window.kind == "time" else "_coord")
                             for j, s in enumerate(job.streams)]
        self.coords = [TS if "_coord" not in dt.names else "_coord" for dt in self.slice_dtypes]
        self.windows, self.owned, self.cuts = self._new_windows(), [0] * self.M, None

    def _new_windows(self):
        self.keys = [{} for _ in self.dtypes]       # indexes of the windows replaced
        return [Window(dt, coord=c, raw=raw) for dt, c, raw in zip(self.slice_dtypes, self.coords, self.dtypes)]

    def _key_index(self, pred, j):
        """k -> the row index of stream j's rows for probes from stream k."""
        def of(k):
            if k not in self.keys[j]:
                self.keys[j][k] = row_index(pred, k, j, self.dtypes[k], self.windows[j])
            return self.keys[j][k]
        return of

    def _indexes(self, j):
        """Stream j's row indexes (not the None of a theta alone)."""
        return [ix for ix in self.keys[j].values() if ix is not None]

    def slice_rows(self, rows, j):
        """Runtime rows of stream j as slice rows (a copy)."""
        return runtime_rows(rows, self.slice_dtypes[j])

    def runtime_rows(self, rows, j, copy=False):
        """Slice rows of stream j (or runtime rows) as runtime rows (slice_to_runtime)."""
        return slice_to_runtime(rows, self.dtypes[j], copy)

    def append(self, batches):
        for j, b in enumerate(batches):
            w, rows = self.windows[j], self.slice_rows(b, j)
            first = w.base + len(w)
            w.append(rows)
            for ix in self._indexes(j) if len(rows) else ():
                ix.add(rows, first)

    def cut(self, cuts):
        """A batch's cuts: the latest."""
        self.cuts = cuts

    def meet(self, pred, rows, t, j, bottom, top):
        """The pairs of the combinations `rows` (their newest tuples `t`) with stream j's rows of
        this slice, between its `bottom` and `top` cuts, each seen by its tuple: (stream j's
        window rows, combination index, row index)."""
        w = self.windows[j].view()
        coord = w[self.coords[j]]
        lo_t = t["_lo"] if self.M == 2 else t["_los"][:, j]
        lo = search(coord, np.maximum(lo_t, bottom))
        hi = np.minimum(search(coord, top), search(w["seq"], t["seq"]))
        lo = np.minimum(lo, hi)
        if not (hi > lo).any():
            return w, _E, _E
        ic, ij = extend(pred, {m: (r, None) for m, r in rows.items()}, j, w, lo, hi, self._key_index(pred, j))
        return w, ic, ij

    def held(self, j):
        """Rows of stream j this operator holds (what is in its slice, not copies kept for
        batches in flight)."""
        w = self.windows[j]
        return w.view()[self.owned[j] - w.base:]

    def snapshot(self):
        arrays = {str(j): self.runtime_rows(self.held(j), j, copy=True) for j in range(self.M)}
        if self.cuts is not None:
            arrays["cuts"] = self.cuts.ravel().copy()
        return arrays, {}

    def restore(self, arrays, attrs):
        self.windows, self.owned = self._new_windows(), [0] * self.M
        self.append([arrays[str(j)] for j in range(self.M)])
        self.cuts = arrays["cuts"].reshape(self.M, self.n) if "cuts" in arrays else None

    def leaving(self, cuts):
        """Each stream's rows now below this slice (by the cuts), no longer held here (copies)."""
        moved = []
        for j, w in enumerate(self.windows):
            v = w.view()
            first = self.owned[j] - w.base
            stop = search(v[self.coords[j]], cuts[j][self.k - 1])
            if stop > first:
                moved.append(v[first:stop].copy())
                self.owned[j] = w.base + stop
            else:
                moved.append(v[:0].copy())
        return moved

    def delete(self, inflight):
        """Drop rows that left this slice and that no batch in flight (`inflight`: batch id ->
        (cuts, orderings)) can still need."""
        if self.cuts is None:
            return
        for j, w in enumerate(self.windows):
            if w.expire(min([int(self.cuts[j][self.k - 1])] + [int(c[0][j][self.k - 1]) for c in inflight.values()])):
                for ix in self._indexes(j):
                    ix.settle()

    def state_dtype(self, name):
        if name.isdigit():
            return self.dtypes[int(name)]
        return np.dtype(np.int64) if name == "cuts" else None

    def footprint(self):
        return footprint(*self.windows)


class Cycles:
    """The batches in the ring as an operator sees them: each seen and not yet retired (`inflight`,
    batch id -> (cuts, orderings)) and, at the head, how many run their cycle (`open`), which
    ended out of order, and `retired`: every batch up to it has ended its cycle (END life-span
    control)."""

    def __init__(self):
        self.inflight, self.ended, self.open, self.retired = {}, set(), 0, -1

    def seen(self, batch_id, cuts, orderings):
        self.inflight[batch_id] = (cuts, orderings)

    def entered(self):
        self.open += 1

    def retire_upto(self, upto):
        for b in [b for b in self.inflight if b <= upto]:
            del self.inflight[b]

    def restart(self, retired):
        """At another rank count: every batch up to `retired` has ended (psp_rescale.py)."""
        self.retired = retired

    def cycle_ended(self, batch_id):
        """The head: batch `batch_id` ended its cycle; True when `retired` moved on (to it or past)."""
        self.open -= 1
        self.ended.add(batch_id)
        before = self.retired
        while self.retired + 1 in self.ended:
            self.ended.discard(self.retired + 1)
            self.retired += 1
        return self.retired != before


class SlicedJoin(Rescalable, Operator):
    """An inner operator of the ring (role `ring`): the state machine of the module docstring,
    no MPI in it. The head and the tail are the role classes below: the head closes each batch's
    cycle (END life-span control), the tail passes nothing on."""
    closes = False         # holds the partial results a probe makes, to mark the last one END
    slicer = None          # the head's own, for count-bounded slices

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.M, self.n = len(dtypes), len(graph.workers)
        self.k = rank
        self.next = next(iter(graph.downstream(rank)), None)
        self.pred = job.predicate
        self.slice = Slice(job, dtypes, rank, self.n)      # the rows of its slice, as state (operator.declare)
        self.cycles = Cycles()             # the batches in the ring, as state: its `retired`
        self.limit = int(job.strategy.params["interleave"])
        self._local = deque()              # a ring of one operator sends to itself
        self.counts = {"probes": 0, "inter_in": 0, "inter_out": 0, "moved": 0, "cycles": 0}
        p = job.strategy.params
        self.slow = float(p["slow_cpu"]) if p["slow_rank"] == rank else 0.0
        self.declare(slice=self.slice, counts=Fields(self.cycles, "retired"))

    # -- the worker's calls ---------------------------------------------------------------------
    def accepts_input(self):
        return self.cycles.open < self.limit

    def quiet(self):
        """A checkpoint's marker enters the ring only between cycles (PspRouter.quiet)."""
        return self.cycles.open == 0

    def on_data(self, src, header, batches):
        out = Output()
        self._handle(out, header.body, batches, header.bounds)
        while self._local:
            self._handle(out, *self._local.popleft())
        return out

    def _handle(self, out, body, batches, bounds):
        if isinstance(body, Entering):
            self._input(out, batches, body, bounds)
        elif isinstance(body, Probing):
            self._probe_batch(out, batches, body, bounds)
        elif isinstance(body, Building):
            self.slice.append(batches)
        elif isinstance(body, Partial):
            self._inter(out, batches, body, bounds)
        else:
            raise RuntimeError(f"rank {self.rank}: a psp batch without its header ({body!r})")

    def _send(self, out, body, batches, bounds):
        if self.next is None:
            self._local.append((body, batches, bounds))
        else:
            out.send(self.to(self.next), [self.slice.runtime_rows(b, j) for j, b in enumerate(batches)], bounds, body)

    # -- input and probe copies -----------------------------------------------------------------
    def _input(self, out, batches, body, bounds):
        M = self.M
        batch_id, _, orderings, cuts = batch_parts(body, M, self.n)
        if self.slicer is not None:     # count-bounded slices: only the head sees every tuple
            cuts = self.slicer.next(batches)
        if self.slice.cuts is not None:       # cuts never decrease: with several sources, each slicer
            cuts = np.maximum(cuts, self.slice.cuts)    # knows only its own parts' batches (a no-op with one)
        self.slice.append(batches)
        self.cycles.entered()
        self._probe_batch(out, batches, batch_header(Probing, batch_id, self.cycles.retired, orderings, cuts), bounds)

    def _probe_batch(self, out, batches, body, bounds):
        batch_id, retired, orderings, cuts = batch_parts(body, self.M, self.n)
        if not self.closes:                 # the head's note: batches up to `retired` ended (the head
            self._retire_upto(retired)      # retires batches itself: _cycle_ended)
        self.cycles.seen(batch_id, cuts, orderings)
        self.slice.cut(cuts)
        self._purge(out, cuts, bounds)
        self._pass_on(out, body, batches, bounds)
        sent = []
        if self.slow:
            _burn(self.slow * sum(len(self.slice.held(j)) for j in range(self.M)) * sum(len(t) for t in batches) / 1e6)
        for i, t in enumerate(batches):
            if len(t):
                self.counts["probes"] += len(t)
                sent += self._step(out, batch_id, i, 0, orderings[i], {i: t}, bounds, hold=self.closes)
        if self.closes:
            self._end(out, batch_id, 1, sent, bounds)

    def _pass_on(self, out, body, batches, bounds):
        """Probe copies and purged rows go on to the next operator."""
        self._send(out, body, batches, bounds)

    def _purge(self, out, cuts, bounds):
        """Rows now below this slice leave for the next operator (or are dropped at the tail)."""
        moved = self.slice.leaving(cuts)
        n = sum(len(m) for m in moved)
        if n:
            self.counts["moved"] += n            # rows that left this slice (the tail drops them)
            self._pass_on(out, Building(), moved, bounds)
        self.slice.delete(self.cycles.inflight)

    # -- intermediate results -------------------------------------------------------------------
    def _inter(self, out, batches, body, bounds):
        batch_id, level, i, origin, end = body.batch_id, body.level, body.stream, body.origin, body.end
        order = list(body.order)
        if origin != self.k:
            self._send(out, body, batches, bounds)
        sent, closing = [], self.closes and origin == self.k and end
        if i >= 0 and len(batches[i]):
            self.counts["inter_in"] += len(batches[i])
            rows = {m: batches[m] for m in [i] + order[:level]}
            sent = self._step(out, batch_id, i, level, order, rows, bounds, hold=closing)
        if closing:
            if level == self.M - 1:
                self._cycle_ended(out, batch_id)
            else:
                self._end(out, batch_id, level + 1, sent, bounds)

    def _step(self, out, batch_id, i, level, order, rows, bounds, hold=False):
        """Join the combinations `rows` (level = streams bound - 1, stream i's tuple the newest)
        with this slice of the next stream; emit complete results, send partial ones on (or, with
        `hold`, return them: the head sends them itself and marks the last one END)."""
        j = order[level]
        cuts = self.cycles.inflight[batch_id][0][j]
        t = rows[i]
        w, ic, ij = self.slice.meet(self.pred, rows, t, j, cuts[self.k - 1], self._top(cuts))
        if not len(ic):
            return []
        if level + 1 == self.M - 1:
            seqs = [rows[m]["seq"][ic] if m in rows else w["seq"][ij] for m in range(self.M)]
            out.emit(seqs, t["_tin"][ic])
            return []
        nxt = [rows[m][ic] if m in rows else (w[ij] if m == j else w[:0].copy()) for m in range(self.M)]
        body = Partial(batch_id, level + 1, i, self.k, False, tuple(order))
        self.counts["inter_out"] += len(ic)
        if hold:
            return [(nxt, body)]
        self._send(out, body, nxt, bounds)
        return []

    def _top(self, cuts):
        """The upper end of this slice: the cut of the slice before it."""
        return cuts[self.k - 2]

    # -- delayed purge --------------------------------------------------------------------------
    def _retire_upto(self, upto):
        self.cycles.retire_upto(upto)
        self.slice.delete(self.cycles.inflight)


    def warm_up(self):
        warm_up_ring(self.job, self.dtypes)

    def stats(self):
        held = sum(len(self.slice.held(j)) for j in range(self.M))
        kept = sum(len(w) for w in self.slice.windows) - held
        return {"window_tuples": held, "kept_for_inflight": kept, **self.counts}


class HeadSlice(SlicedJoin):
    """The head (role `head`): takes the driver's input, closes every batch's cycle and decides
    which batches have retired."""
    closes = True

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        if slice_counts(job, self.n) is not None:
            # count-bounded cuts follow every tuple: with several sources each source's slicer sees
            # only its parts, so the head, where all input enters in seq order, sets them
            self.slicer = new_slicer(job, self.n, counts=True)
            self.declare(slicer=self.slicer)

    def _top(self, cuts):
        return POS_INF                         # the head's slice holds the newest tuples

    def _end(self, out, batch_id, level, made, bounds):
        """Head: send what this step made, the last marked END; a null END when it made nothing
        or when level M-1 (complete results) was reached."""
        for b, body in made[:-1]:
            self._send(out, body, b, bounds)
        if made:
            b, body = made[-1]
            self._send(out, replace(body, end=True), b, bounds)
        else:
            empty = [w.view()[:0].copy() for w in self.slice.windows]
            self._send(out, Partial(batch_id, level, -1, self.k, True, ()), empty, bounds)

    def _cycle_ended(self, out, batch_id):
        self.counts["cycles"] += 1
        if self.cycles.cycle_ended(batch_id):
            self._retire_upto(self.cycles.retired)
            out.tell(DRIVER, CycleDone(self.cycles.retired))


class TailSlice(SlicedJoin):
    """The tail (role `tail`): holds the oldest slice; what leaves it leaves the ring."""

    def _pass_on(self, out, body, batches, bounds):
        pass


class OnlySlice(HeadSlice, TailSlice):
    """A ring of one operator (role `solo`): head and tail at once; it sends to itself."""


def slice_to_runtime(rows, dt, copy=False):
    """Slice rows (or runtime rows: as they are, or a copy) as runtime rows of dtype `dt`: the
    wire and checkpoints carry those. `_coord` comes from ts; the columns a slice row does not
    hold are 0 (a result is made of seqs and the probe's own columns)."""
    if rows.dtype == dt:
        return rows.copy() if copy else rows
    out = np.zeros(len(rows), dt)
    for name in dt.names:
        if name in rows.dtype.names:
            out[name] = rows[name]
    if "_coord" not in rows.dtype.names:
        out["_coord"] = rows[TS]
    return out


def warm_up_ring(job, dtypes):
    """Compile the probe kernels on a tiny ring of one: every stream probes every other."""
    job = replace(job, strategy=replace(job.strategy, params=dict(job.strategy.params, interleave=1)))
    op = OnlySlice(job, 1, ring(2), dtypes)
    M = len(dtypes)
    orderings = auto_orderings(job.predicate, M, [[1.0] * M for _ in range(M)])
    for seq0 in (0, 10):
        batches = []
        for j, dt in enumerate(dtypes):
            b = np.zeros(2, dt)
            b["seq"] = [seq0 + j, seq0 + M + j]
            if M == 2:
                b["_lo"] = -(1 << 40)
            else:
                b["_los"] = -(1 << 40)
            batches.append(b)
        cuts = np.full((M, 1), -(1 << 40), np.int64)
        op.on_data(DRIVER, DataHeader(0, (0,) * M, batch_header(Entering, seq0, -1, orderings, cuts)), batches)


def _burn(seconds):
    """Keep the CPU busy (a slow operator for tests: its load is measured as CPU time)."""
    import time
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
