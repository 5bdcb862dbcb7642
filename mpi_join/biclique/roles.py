"""The join-biclique's roles: the shuffler (`driver`), `dispatcher`s and `unit`s. See graph.py
for the layout, routing.py for ContRand.

A unit of side X keeps X tuples routed to it for storing (each X tuple is stored at exactly one
unit), and joins the tuples of the other side sent to it against them, then discards those: a
pair (x, y) is found once, when the newer of the two meets the unit that stores the older (the
unit probes only with tuples newer than what it stores: the order-consistent protocol makes
that the same order at every unit). A unit's stored window is a chained in-memory index
(slaves/chained_index.py): subindexes of one archive period each, discarded whole by the batch's
bounds (window.py); a full-history (unbounded) window is one subindex that keeps everything."""

import time

from .. import aggregate
from ..master.driver import Router
from ..partitioning import Partitioner
from ..slaves.chained_index import ChainedIndex
from ..slaves.local_join import warm_up
from ..slaves.module import JoinModule, Output
from . import routing


def check_state(join, limit_mb, who):
    """Stop with a one-line error, not an out-of-memory kill, when a unit's windows pass the
    job's `strategy.max_state_mb` (0: no limit); full-history windows only ever grow."""
    if not limit_mb:
        return
    held = join.nbytes
    if held > limit_mb * 1e6:
        raise RuntimeError(f"{who} holds {held / 1e6:.1f} MB of window state, over strategy.max_state_mb = "
                           f"{limit_mb:g} (full-history windows keep every tuple): raise the limit, add units, "
                           f"or bound the windows")


class Shuffler(Router):
    """Rank 0: deals the batches to the dispatchers in turn, each stamped with its place in the
    input (the order the units merge by)."""

    def __init__(self, job, topology, driver):
        super().__init__(job, topology, driver)
        self.part = Partitioner(job, 1)
        self.next = 0

    def annotate(self, batch, stream):
        batch["_h"] = self.part.hashes(self.part.keys(batch, stream))

    def route(self, batches, slot):
        d = self.topology.dispatchers
        self.driver.send(d[self.next % len(d)], batches, order=self.next)
        self.next += 1

    def snapshot(self):
        return {}, {"next": self.next}

    def restore(self, arrays, attrs):
        self.next = int(attrs["next"])


class Dispatcher(JoinModule):
    """Routes each batch: for every unit, the tuples of its side it stores and the tuples of the
    other side it joins; every unit gets its part of every batch, empty or not (the signal)."""

    def __init__(self, job, rank, topology, dtypes):
        super().__init__(job, rank, topology, dtypes)
        p = job.strategy.params
        self.groups = (int(p["r_groups"]), int(p["s_groups"]))
        self.units = (topology.r_units, topology.s_units)
        self.routed = 0

    def on_data(self, src, header, batches):
        out = Output()
        store = [routing.store_unit(b, len(self.units[s]), self.groups[s]) for s, b in enumerate(batches)]
        for side in (0, 1):
            other = 1 - side
            for u, rank in enumerate(self.units[side]):
                parts = [None, None]
                parts[side] = batches[side][store[side] == u]
                parts[other] = batches[other][routing.join_mask(batches[other], len(self.units[side]),
                                                                self.groups[side], u)]
                out.send(rank, parts, header.bounds, order=header.order)
        self.routed += sum(len(b) for b in batches)
        return out

    def stats(self):
        return {"window_tuples": 0, "tuples_routed": self.routed}


class Unit(JoinModule):
    """Role `unit`: stores its side's tuples routed to it, joins the other side's against them."""

    def __init__(self, job, rank, topology, dtypes):
        super().__init__(job, rank, topology, dtypes)
        self.side = topology.side(rank)
        self.method = job.strategy.params["local_join"]
        self.join = ChainedIndex(job.predicate, dtypes, self.method, self.side,
                                 archive_period(job, self.side), job.strategy.params["max_delay"])
        self.limit = float(job.strategy.params["max_state_mb"])
        self.ordered = bool(job.strategy.params["ordered"])
        self.dispatchers = tuple(topology.dispatchers) if self.ordered else ()
        self.last = -1
        self.probed = self.peak = 0
        self.views = Views(job, dtypes, len(topology.dispatchers), topology.merger)

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, self.method)

    def merged_links(self):
        return self.dispatchers

    def on_data(self, src, header, batches):
        if self.ordered and header.order != self.last + 1:
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
        self.probed += len(batches[1 - self.side])
        self.peak = max(self.peak, len(j))         # before expiry: at the end of input everything expires
        j.expire(header.bounds)
        return out

    def on_eos(self, src):
        return self.views.on_eos(src)

    def snapshot(self):
        arrays = self.join.snapshot()
        arrays.update(self.views.snapshot())
        return arrays, {"last": self.last, "probed": self.probed, "peak": self.peak}

    def restore(self, arrays, attrs):
        self.join.restore(arrays)
        self.views.restore(arrays)
        self.last, self.probed, self.peak = int(attrs["last"]), int(attrs["probed"]), int(attrs["peak"])

    def state_dtype(self, name):
        return self.views.state_dtype(name) or self.join.state_dtype(name)

    def stats(self):
        return {"window_tuples": len(self.join), "peak_window_tuples": self.peak, "tuples_probed": self.probed,
                **self.join.stats()}


def archive_period(job, side):
    """The chained index's archive period P for side `side`'s window: `archive_period`, or a
    tenth of the window (the paper's setting); 1 for a full-history window (it never closes)."""
    p = int(job.strategy.params["archive_period"])
    w = job.streams[side].window
    if p or w.kind == "unbounded":
        return max(p, 1)
    return max(1, w.size // 10)


class Views:
    """A unit's part of an online aggregate (aggregate.py): the view of the pairs it found and
    has not sent yet; sent to the merger once `update_ms` has passed since the last send (the
    paper's batch update: one message per period, not one per result), and at the end of its
    input. Does nothing for a job without `strategy.aggregate`."""

    def __init__(self, job, dtypes, upstream, merger):
        text = job.strategy.params["aggregate"]
        self.spec = aggregate.parse(text, job.streams) if text else None
        self.columns = self.spec.columns if self.spec else ()
        self.dtype = aggregate.view_dtype(self.spec, dtypes) if self.spec else None
        self.period_ns = int(float(job.strategy.params["update_ms"]) * 1e6)
        self.merger, self.upstream = merger, upstream
        self.unsent, self.sent_at, self.ended = None, time.monotonic_ns(), 0

    def add(self, values, n, out):
        if self.spec is None:
            return
        if n:
            self.unsent = aggregate.merge(self.spec, self.unsent, aggregate.view(self.spec, self.dtype, values, n))
        if self.unsent is not None and time.monotonic_ns() - self.sent_at >= self.period_ns:
            self._send(out)

    def _send(self, out):
        out.send(self.merger, [self.unsent], ())
        self.unsent, self.sent_at = None, time.monotonic_ns()

    def on_eos(self, src):
        self.ended += 1
        out = Output()
        if self.spec is not None and self.ended == self.upstream and self.unsent is not None:
            self._send(out)           # before end of stream goes on to the merger
        return out

    def snapshot(self):
        return {"views/unsent": self.unsent} if self.unsent is not None else {}

    def restore(self, arrays):
        if "views/unsent" in arrays:
            self.unsent = arrays["views/unsent"]

    def state_dtype(self, name):
        return self.dtype if name == "views/unsent" else None


class Merger(JoinModule):
    """Role `merger`: merges the units' views into the global view, and writes it, finished, as
    a timestamped snapshot at most once per `update_ms` and once more, marked final, when every
    unit has ended (the aggregate of every result, which `mpi-join verify` checks)."""

    def __init__(self, job, rank, topology, dtypes):
        super().__init__(job, rank, topology, dtypes)
        self.spec = aggregate.parse(job.strategy.params["aggregate"], job.streams)
        self.dtype = aggregate.view_dtype(self.spec, dtypes)
        self.period_ns = int(float(job.strategy.params["update_ms"]) * 1e6)
        self.units = len(topology.upstream(rank))
        self.view, self.number, self.ended, self.merged = None, 0, 0, 0
        self.written_at = time.monotonic_ns()

    def link_dtypes(self, kind):
        return [self.dtype]

    def on_data(self, src, header, batches):
        self.view = aggregate.merge(self.spec, self.view, batches[0])
        self.merged += 1
        if time.monotonic_ns() - self.written_at >= self.period_ns:
            return self._write(False)
        return None

    def on_eos(self, src):
        self.ended += 1
        return self._write(True) if self.ended == self.units else None

    def _write(self, final):
        out = Output()
        pairs = int(self.view["n"].sum()) if self.view is not None else 0
        out.snapshot(self.number, final, aggregate.finish(self.spec, self.view, self.dtypes),
                     {"aggregate": self.spec.text, "pairs": pairs, "final": final})
        self.number += 1
        self.written_at = time.monotonic_ns()
        return out

    def snapshot(self):
        return ({"view": self.view} if self.view is not None else {}), {"number": self.number, "merged": self.merged}

    def restore(self, arrays, attrs):
        self.view = arrays.get("view")
        self.number, self.merged = int(attrs["number"]), int(attrs["merged"])

    def state_dtype(self, name):
        return self.dtype if name == "view" else None

    def stats(self):
        return {"window_tuples": 0, "views_merged": self.merged, "snapshots": self.number,
                "groups": 0 if self.view is None else len(self.view)}
