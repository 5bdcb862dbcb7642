"""The join-biclique's `unit`s (the routing roles, shuffler and dispatchers: shuffler.py; the
merger: merger.py). See graph.py for the layout, routing.py for ContRand and the Members table,
scaling.py for 2PS.

A unit of side X keeps X tuples routed to it for storing (each X tuple is stored at exactly one
unit), and joins the tuples of the other side sent to it against them, then discards those: a
pair (x, y) is found once, when the newer of the two meets the unit that stores the older (the
unit probes only with tuples newer than what it stores: the order-consistent protocol makes
that the same order at every unit). A unit's stored window is a chained in-memory index
(slaves/chained_index.py): subindexes of one archive period each, discarded whole by the batch's
bounds (window.py); a full-history (unbounded) window is one subindex that keeps everything."""

import numpy as np

from ..slaves.chained_index import ChainedIndex
from ..slaves.local_join import warm_up
from ..runtime.operator import Array, Fields, Operator, Output, Rows
from ..errors import JobError
from ..runtime.graph import DRIVER
from . import rescale
from .graph import merger_of, side as side_of
from .merger import Views
from .shuffler import At, Upto


def state_limit(job):
    """(strategy.max_state_mb, what bounds the windows, for the line check_state writes)."""
    unbounded = [s.name for s in job.streams if s.window.kind == "unbounded"]
    hint = (f"the unbounded window of {', '.join(unbounded)} keeps every tuple: raise the limit, add units, or bound "
            f"the window" if unbounded else
            f"windows of {', '.join(f'{s.name} {s.window.describe()}' for s in job.streams)}: raise the limit, add "
            f"units, or shorten the windows")
    return float(job.strategy.params["max_state_mb"]), hint


def check_state(join, limit, who):
    """Stop with a one-line error, not an out-of-memory kill, when a unit's windows pass the
    job's `strategy.max_state_mb` (0: no limit). `limit`: what state_limit gives."""
    limit_mb, hint = limit
    if not limit_mb:
        return
    held = join.nbytes
    if held > limit_mb * 1e6:
        raise JobError(f"strategy.max_state_mb: {who} holds {_size(held)} of window state, over the limit of "
                       f"{_size(limit_mb * 1e6)} ({hint})")


def _size(n):
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB" if n >= 100 else f"{n:.0f} bytes"


class Unit(Operator):
    """Role `unit`: stores its side's tuples routed to it, joins the other side's against them."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.side = side_of(graph, rank)
        self.method = job.strategy.params["local_join"]
        merger = merger_of(graph)
        self.views = Views(job, dtypes, len(graph.ranks("dispatcher")), None if merger is None else self.to(merger))
        self.join = ChainedIndex(job.predicate, dtypes, self.method, self.side,
                                 archive_period(job, self.side), job.strategy.params["max_delay"], self.views.columns)
        self.limit = state_limit(job)
        self.ordered = bool(job.strategy.params["ordered"])
        self.last = -1
        self.probed = self.peak = 0
        self.want = None                             # the shuffler waits for this order (Upto)
        self.moved_in = self.moved_out = 0           # tuples, by the runtime's move
        # at another rank count: rows dealt by the start's table, the views not sent yet taken
        # by the merger (rescale.py), the counts this unit's alone
        self.declare(windows=Rows(self, home=rescale.stored_at(self)),
                     views=Array(self.views, "unsent", self.views.dtype, rescale="fresh"),
                     counts=Fields(self, "last", "probed", "peak", rescale="fresh"))

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, self.method)

    def restore_rescaled(self, read, old, root, cid):
        out = super().restore_rescaled(read, old, root, cid)
        self.last = None          # the new run's numbering (its sources') starts at its first batch
        return out

    def next_order(self):
        """The shuffler numbers batches 0, 1, 2, ... and every unit gets every one: the next is
        known, so it need not wait for the other dispatchers to pass it (nor does a pause in the
        input hold the last batches back)."""
        return self.last + 1 if self.ordered and self.last is not None else None

    def on_data(self, src, header, batches):
        if header.order < 0:                        # rows queued at a unit whose state moved: none here
            assert not any(len(b) for b in batches), "a biclique unit's moved state carries no queued rows"
            return None
        if self.ordered and self.last is not None and header.order != self.last + 1:
            raise RuntimeError(f"unit {self.rank}: batch {header.order} after batch {self.last}: the "
                               f"dispatchers' flows were not merged in order")
        self.last = header.order
        j = self.join
        j.append(batches[self.side])
        check_state(j, self.limit, f"unit {self.rank}")
        res, values = j.probe(batches[1 - self.side], self.views.columns)   # pairs whose newer tuple is the probe's
        out = Output()
        out.emit(res[:2], res[2])
        self.views.add(values, len(res[0]), out)
        if self.want is not None and self.last >= self.want:
            out.tell(DRIVER, At(self.last))
            self.want = None
        self.probed += len(batches[1 - self.side])
        self.peak = max(self.peak, len(j))         # before expiry: at the end of input everything expires
        j.expire(header.bounds)
        return out

    def on_eos(self, src):
        return self.views.on_eos(src)

    def on_control(self, src, msg):
        if not isinstance(msg, Upto):
            return super().on_control(src, msg)
        out = Output()
        if self.last is not None and self.last >= msg.order:
            out.tell(DRIVER, At(self.last))
        else:
            self.want = msg.order
        return out

    # -- the runtime's move (a full-history unit leaving its subgroup): the whole store -------
    def unit_of(self, batch):
        return np.full(len(batch), -1, np.int64)

    def take(self, unit):
        arrays = self.join.snapshot()
        self.moved_out += len(self.join)
        self.join = self.join.emptied()
        return arrays, {}

    def put(self, unit, arrays, attrs):
        before = len(self.join)
        self.join.restore(arrays)
        self.moved_in += len(self.join) - before

    def stats(self):
        return {"window_tuples": len(self.join), "peak_window_tuples": self.peak, "tuples_probed": self.probed,
                "state_bytes": self.join.nbytes, "tuples_moved_in": self.moved_in, "tuples_moved_out": self.moved_out,
                **self.join.stats()}


def archive_period(job, side):
    """The chained index's archive period P for side `side`'s window: `archive_period`, or a
    tenth of the window (the paper's setting); 1 for a full-history window (it never closes)."""
    p = int(job.strategy.params["archive_period"])
    w = job.streams[side].window
    if p or w.kind == "unbounded":
        return max(p, 1)
    return max(1, w.size // 10)
