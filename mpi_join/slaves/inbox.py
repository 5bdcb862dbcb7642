"""A worker's inbox: one FIFO queue per sending rank of what arrived and is not handled yet, and
the ordered merge of the links the graph marks `merge` (graph.Edge.merge).

Items are ("data", DataHeader, batches, ack) and ("ctrl", Control). Which item goes next:
other workers' first (never held back, so a ring or a chain cannot deadlock on credits), merged
links through the merge, and the input's only when the worker says it may take them (its
outboxes are empty, the module accepts input, a unit's state is in before its Install).

The input comes from the driver, or with several sources (run.sources = k) from each of them:
part p of the input (master/source.py) from source p mod k, closed by a PartEnd. The inbox takes
the sources' links as one flow in part order, so the module sees the input exactly as one source
would send it, from the driver; end of stream passes once every source has sent its own. What
every source places at a part boundary (a checkpoint's marker; a unit's MoveOut or Install)
passes once, as the driver's, when the flow reaches it (its first copy; the others are dropped)."""
from collections import deque

import numpy as np

from ..runtime.graph import DRIVER
from ..runtime.protocol import Eos, Install, Marker, MoveOut, PartEnd

NO_ORDER = -(1 << 62)


class Inbox:
    def __init__(self, rank, merged, sources=(DRIVER,)):
        self.rank, self.merged = rank, tuple(merged)
        self.sources = tuple(sources)                  # the input's senders, in part order
        self.queues = {}                               # src -> deque of items
        self.watermark = {src: NO_ORDER for src in self.merged}   # last order each merged link brought
        self.buffered = 0                              # the input's tuples waiting here
        self.part = 0                                  # the part of the input taken next (several sources)
        self.ended = set()                             # sources whose end of stream is in
        self.marked = -1                               # the last checkpoint whose marker passed
        self.moved = set()                             # (kind, unit, epoch) of placed moves passed
        self.replayed = deque()                        # the input's channel state, replayed first (restore)
        self.settled = False                           # no link brings more than is queued (a drain at rest)

    def resume_at(self, part, marked=-1):
        """A restored cut: the part of the input taken next, the last checkpoint whose marker passed."""
        self.part, self.marked = part, marked

    def data(self, src, header, batches, ack=True):
        """Queue a DATA message (ack False: replayed channel state, acknowledged before the cut)."""
        if src in self.merged and ack:
            if header.order < self.watermark[src]:
                raise RuntimeError(f"worker {self.rank}: link from rank {src} went back in order "
                                   f"({header.order} after {self.watermark[src]}); a merged link's "
                                   f"order must not decrease")
            self.watermark[src] = header.order
        if src in self.sources:
            self.buffered += sum(len(b) for b in batches)
        if src == DRIVER and not ack and len(self.sources) > 1:
            self.replayed.append(("data", header, batches, ack))
            return
        self.queues.setdefault(src, deque()).append(("data", header, batches, ack))

    def ctrl(self, src, msg):
        self.queues.setdefault(src, deque()).append(("ctrl", msg))

    def handled(self, src, n):
        """`n` tuples of a DATA message from `src` have been handled."""
        if src in self.sources:
            self.buffered -= n

    def marker_queued(self, src):
        """Is a checkpoint marker from `src` still queued? An urgent operation (moving state away)
        must not overtake it: the state would leave before the cut records it and arrive after the
        receiver's cut, in neither snapshot. Behind a marker it waits its turn."""
        return any(item[0] == "ctrl" and isinstance(item[1], Marker) for item in self.queues.get(src, ()))

    def next(self, take_driver, next_order, ended):
        """(src, item) to handle next, or None. `take_driver(item)`: may the input's next item go
        now; `next_order()`: the module's next order when dense (Operator.next_order);
        `ended`: upstream ranks whose end-of-stream has been handled. An input item's `src` is
        the source that sent it (its acknowledgement goes there); the end of the input's is the
        driver's."""
        for src, q in self.queues.items():
            if q and src not in self.sources and src not in self.merged:
                return src, q.popleft()
        if self.merged:
            item = self._merged_next(next_order, ended)
            if item is not None:
                return item
        if len(self.sources) > 1:
            return self._input_next(take_driver)
        q = self.queues.get(DRIVER)
        if q and take_driver(q[0]):
            return DRIVER, q.popleft()
        return None

    def _input_next(self, take_driver):
        """Several sources: a control record of the driver's passes at once; the input goes part
        by part, each from its source until its PartEnd; the end of stream once all have sent it.
        The input's channel state of a restored cut goes first: it is the flow from the part the
        rank was at when it cut (on a neighbour's marker copy) to the part of the input's own copy,
        where the sources resume, and `part` is that one (Cuts.marker)."""
        if self.replayed:
            return (DRIVER, self.replayed.popleft()) if take_driver(self.replayed[0]) else None
        for src in self.sources:
            q = self.queues.get(src)
            if q and q[0][0] == "ctrl" and not isinstance(q[0][1], (PartEnd, Eos)) and not placed(q[0][1]) \
                    and take_driver(q[0]):
                return src, q.popleft()
        while len(self.ended) < len(self.sources):
            over = bool(self.ended)             # a source's end of stream in its turn: no part is left
            owner = self.sources[self.part % len(self.sources)]
            for src in (s for s in self.sources if s not in self.ended) if over else (owner,):
                q = self.queues.get(src)
                if not q:
                    if not over:
                        return None
                    continue
                kind, msg = q[0][0], q[0][1]
                if kind == "ctrl" and isinstance(msg, PartEnd):
                    if msg.part != self.part or over:
                        raise RuntimeError(f"worker {self.rank}: source rank {src} ended part {msg.part}, the "
                                           f"input is at part {self.part}")
                    q.popleft()
                    self.part += 1
                elif kind == "ctrl" and isinstance(msg, Eos):
                    q.popleft()
                    self.ended.add(src)
                elif kind == "ctrl" and placed(msg):
                    key = None if isinstance(msg, Marker) else (type(msg).__name__, msg.unit, msg.epoch)
                    if (msg.id > self.marked) if key is None else (key not in self.moved):   # the first copy
                        if not take_driver(q[0]):
                            return None
                        if key is None:
                            self.marked = msg.id
                        else:
                            self.moved.add(key)
                        return DRIVER, q.popleft()
                    q.popleft()
                elif over:
                    raise RuntimeError(f"worker {self.rank}: source rank {src} sent input after the input's end")
                else:
                    return (src, q.popleft()) if take_driver(q[0]) else None
                break
            else:
                return None
        if len(self.ended) == len(self.sources):
            self.ended.add(None)                # the flow's end of stream, given once
            return DRIVER, ("ctrl", Eos())
        return None

    def _merged_next(self, next_order, ended):
        """The batch of least order among the merged links' heads, once no link can still bring a
        lesser one (a link's watermark is the last order it brought; an ended link has none);
        control records on those links pass at once."""
        heads = {}
        for src in self.merged:
            q = self.queues.get(src)
            if q:
                if q[0][0] != "data":
                    return src, q.popleft()
                heads[src] = q[0][1].order
        if not heads:
            return None
        src = min(heads, key=lambda s: (heads[s], s))
        if heads[src] == next_order():
            return src, self.queues[src].popleft()     # dense orders: nothing can come before it
        for other in self.merged:
            if other not in heads and other not in ended and not self.settled and self.watermark[other] < heads[src]:
                return None                 # `other` may still bring a batch that comes first
        return src, self.queues[src].popleft()

    def at_rest(self, work):
        """`work()` with every merged link at rest (the drain: nothing more is in flight, so no
        link brings a lesser order than the batches queued here, which then go in order)."""
        self.settled = True
        try:
            return work()
        finally:
            self.settled = False

    def holds_merged(self):
        """Is a batch of a merged link waiting here (for a link that may bring a lesser order)?"""
        return any(item[0] == "data" for src in self.merged for item in self.queues.get(src, ()))

    def take_unit(self, unit, unit_of, dtypes):
        """Remove the rows of `unit` from the driver's queued DATA (a unit moving away); one array
        per stream, in seq order."""
        taken = [[] for _ in dtypes]
        q = self.queues.get(DRIVER, ())
        for k, item in enumerate(q):
            if item[0] != "data":
                continue
            _, header, batches, ack = item
            keep = []
            for s, b in enumerate(batches):
                mine = unit_of(b) == unit if len(b) else np.zeros(0, bool)
                taken[s].append(b[mine])
                keep.append(b[~mine])
                self.buffered -= int(mine.sum())
            q[k] = ("data", header, keep, ack)
        return [np.concatenate(t) if t else np.zeros(0, dt) for t, dt in zip(taken, dtypes)]


def placed(msg):
    """Is `msg` placed in the input by every source (several sources): a checkpoint marker, or a
    move at a part (MoveOut, Install)?"""
    return isinstance(msg, Marker) or (isinstance(msg, (MoveOut, Install)) and msg.part >= 0)
