"""The `hash` strategy's join module: the windows of the partition groups one slave owns.

A pure state machine (no MPI): `on_epoch(bounds, batches)` takes one distribution epoch and
returns its results, so it is tested directly. Within an epoch, all new tuples come after
every tuple in the windows (epochs are consecutive seq ranges), so the epoch's results are
new R x window S, window R x new S and new R x new S, each pair kept when its newer tuple sees
the older one (window.py). This is the paper's head-block rule at batch granularity: the new
tuples are the "fresh" tuples of the head blocks; joining them with the opposite window but
not with the opposite fresh tuples twice, and fresh-with-fresh exactly once, is what keeps
every result exactly once. Then the new tuples join the windows and expired ones leave.

Each partition group is an ExtendibleGroup. With the block nested loop and fine tuning on
(theta > 0) its windows are split into buckets kept between theta/2 and theta blocks, and each
bucket joins on its own, which bounds the loop's cost. An index join's cost does not grow with
the bucket, so with `local_join = "index"` each group is one bucket: splitting would only add a
join call per bucket per epoch (twice the CPU on the `bench --case runtime` workload).
"""
import time

import numpy as np

from ..partitioning import Partitioner, group_rows
from ..partitioning.extendible import ExtendibleGroup
from .local_join import BinaryJoin, warm_up
from .merged_store import MergedStore
from ..runtime.operator import Operator, Output
from ..join.window import POS_INF, footprint

_NONE = np.zeros(0, np.int64)
ONE_BUCKET = {"global_depth": 0, "directory": [0], "depths": [0]}    # a group's split information


class CoreModule(Operator):
    """A join module whose whole state is a HashJoinCore, `self.core` (declared as `windows`):
    warm-up, checkpoints and stats come from it (the `hash` module, and test strategies that join
    a hash share; their core is one partition with an index join unless they give one)."""

    def __init__(self, job, rank, graph, dtypes, core=None):
        super().__init__(job, rank, graph, dtypes)
        self.core = core or HashJoinCore(Partitioner(job, 1), dtypes, "index")
        self.declare(windows=self.core)

    def warm_up(self):
        warm_up(self.job.predicate, self.dtypes, self.core.local_join)

    def stats(self):
        w0, w1 = self.core.window_tuples()
        return {"window_tuples": w0 + w1, "buckets": self.core.buckets()}


class HashJoinModule(CoreModule):
    """The slave side of `hash`: the windows of the partition groups this slave owns."""

    def __init__(self, job, rank, graph, dtypes):
        prm = job.strategy.params
        theta = prm["theta"] if prm["local_join"] == "bnl" else 0      # see the module docstring
        super().__init__(job, rank, graph, dtypes, HashJoinCore(Partitioner(job, prm["partitions"]), dtypes,
                                                                prm["local_join"], theta, prm["block_size"]))
        self.slow = prm["slow_delay"] if prm["slow_rank"] == rank else 0.0
        self.buffer_capacity = prm["buffer_capacity"]

    def on_data(self, src, header, batches):
        if self.slow:                     # a slower node: extra seconds per 1000 tuples
            time.sleep(self.slow * sum(len(b) for b in batches) / 1000)
        return self._join(header.bounds, batches)

    def _join(self, bounds, batches):
        out = Output()
        sa, sb, tin = self.core.on_epoch(np.asarray(bounds, np.int64), batches)
        out.emit((sa, sb), tin)
        return out

    def on_eos(self, src):
        """The driver's link is this slave's only input (graph.star), and a moved group is in before
        it ends (mover.py: an Install is in order on that link): an outer join's lone rows go now."""
        if not self.job.predicate.outer and self.job.predicate.asof is None:
            return None
        out = Output()
        sa, sb, tin = self.core.finish()
        out.emit((sa, sb), tin)
        return out

    # -- moving a partition group (the runtime moves it: coordinator.move) ------------------------
    def unit_of(self, batch):
        return self.core.part.partitions(batch["_h"])

    def take(self, p):
        """Group p's windows (runtime rows per bucket and stream) and split information."""
        return self.core.take_group(int(p))

    def put(self, p, arrays, info):
        self.core.put_group(int(p), arrays, info)


class HashJoinCore:
    """Per-group windows and the epoch join, independent of any runtime (tested directly).

    Each bucket of a group is a local_join.BinaryJoin: its windows and its index are kept across
    epochs; the equi key is what partitions, band and theta conditions are checked on the
    candidate pairs (residual conditions)."""

    def __init__(self, partitioner, dtypes, local_join="index", theta=0, block_bytes=4096):
        self.part = partitioner
        self.dtypes = dtypes
        self.local_join = local_join
        self.theta, self.block_bytes = theta, block_bytes
        self.lone = []                   # outer joins: rows expired without a partner (BinaryJoin.expire)
        # one store for every group (below): rows come in seq order but for a moved group's held-back
        # rows, which meet only their own group's, older: a result's arrival time is its probe's
        older = not theta and local_join != "bnl"
        self.make_store = lambda: BinaryJoin(partitioner.pred, dtypes, local_join, lone=self.lone, older=older)
        self._template = self.make_store()
        self.store_dtypes = self._template.dtypes          # window rows: runtime rows + key columns
        self.state_dtypes = self._template.state_dtypes    # what a move or checkpoint carries of a row
        self.groups = {}                 # partition -> ExtendibleGroup (buckets: theta > 0)
        # with an index join every group this slave owns shares one store (merged_store.py)
        self.merged = (None if theta or local_join == "bnl" else
                       MergedStore(partitioner, self.make_store, self._template))

    def _new_group(self):
        return ExtendibleGroup(self.store_dtypes, self.theta, self.block_bytes, make_store=self.make_store)

    def _group(self, p):
        g = self.groups.get(p)
        if g is None:
            g = self.groups[p] = self._new_group()
        return g

    def on_epoch(self, bounds, batches):
        """Join one epoch. Returns (seq of stream 0, seq of stream 1, _tin of the newer tuple),
        three aligned int64 arrays with one entry per result."""
        tins = [b["_tin"] for b in batches]
        batches = [self._template.derive(b, s) for s, b in enumerate(batches)]    # once per epoch
        if self.merged is not None:
            out = self.merged.step(batches, tins, bounds)
            if out is None:
                return _NONE, _NONE, _NONE
            out += self.lone
            self.lone.clear()
            return tuple(np.concatenate([o[k] for o in out]) for k in range(3))
        by_part = [dict(group_rows(b, self.part.partitions(self._template.hashes(b, s)))) for s, b in enumerate(batches)]
        out = []
        for p in sorted(set(by_part[0]) | set(by_part[1])):
            g = self._group(p)
            new = {}
            for s in (0, 1):
                if p in by_part[s]:
                    for bucket, rows in g.route(by_part[s][p], s):
                        new.setdefault(id(bucket), [bucket, batches[0][:0], batches[1][:0]])[1 + s] = rows
            for bucket, nA, nB in new.values():
                r = bucket.store.step(nA, nB)
                if len(r[0]):
                    out.append(r)
            if self.theta:
                g.tune()
        self.expire(bounds)
        out += self.lone
        self.lone.clear()
        if not out:
            return _NONE, _NONE, _NONE
        return tuple(np.concatenate([o[k] for o in out]) for k in range(3))

    def expire(self, bounds):
        if self.merged is not None:
            self.merged.expire(bounds)
        for g in self.groups.values():
            g.expire(bounds)

    def finish(self):
        """End of input: the rows of an outer join's streams that never met a partner, as
        on_epoch's results (every window emptied)."""
        return self.on_epoch(np.full(2, POS_INF, np.int64), [np.zeros(0, dt) for dt in self.store_dtypes])

    def window_tuples(self):
        if self.merged is not None:
            return self.merged.window_tuples()
        n = [0, 0]
        for g in self.groups.values():
            for b in g.buckets():
                n[0] += len(b.windows[0])
                n[1] += len(b.windows[1])
        return n

    def buckets(self):
        if self.merged is not None:
            return 1
        return sum(len(g.buckets()) for g in self.groups.values())

    def footprint(self):
        if self.merged is not None:
            return self.merged.footprint()
        return footprint(*(b.store for g in self.groups.values() for b in g.buckets()))

    # -- moving a partition group (state migration) ------------------------------------
    def take_group(self, p):
        """Remove partition group p: (arrays, split information), empty if it holds nothing."""
        if self.merged is not None:
            return self.merged.cut(p), dict(ONE_BUCKET)
        g = self.groups.pop(p, None)
        if g is None:
            return {}, dict(ONE_BUCKET)
        return g.state()

    def put_group(self, p, arrays, info):
        if self.merged is not None:
            self.merged.merge_in(arrays)
            return
        g = self._new_group()
        g.install(arrays, info)
        self.groups[p] = g

    # -- state (operator.declare) -----------------------------------------------
    def snapshot(self):
        arrays, infos = {}, {}
        if self.merged is not None:      # by group, as with buckets: a checkpoint reads the same either way
            for p, s, rows in self.merged.by_group():
                arrays[f"group/{p}/0/{s}"] = rows
                infos[str(p)] = dict(ONE_BUCKET)
            return arrays, {"groups": infos}
        for p, g in sorted(self.groups.items()):
            a, info = g.state()
            arrays.update({f"group/{p}/{k}": v for k, v in a.items() if len(v)})
            infos[str(p)] = info
        return arrays, {"groups": infos}

    def restore(self, arrays, state):
        if self.merged is not None:      # names group/<p>/<bucket>/<stream>: every group's rows at once
            self.merged.merge_in(arrays)
            self.merged.settle()
            return
        per = {}
        for name, a in arrays.items():
            _, p, b, s = name.split("/")
            per.setdefault(int(p), {})[f"{b}/{s}"] = a
        for p, info in state["groups"].items():
            self.put_group(int(p), per.get(int(p), {}), info)

    def restore_groups(self, files, groups):
        """A restore at another rank count: the groups `groups` of every file's state (their arrays
        only are in `files`; the split information of each is in the file that held it)."""
        arrays, infos = {}, {}
        for a, attrs in files:
            arrays.update(a)
            infos.update({p: i for p, i in attrs["groups"].items() if int(p) in groups})
        self.restore(arrays, {"groups": infos})

    def state_dtype(self, name):
        """dtype a checkpointed array must have: group/<p>/<bucket>/<stream>."""
        parts = name.split("/")
        if len(parts) == 4 and parts[0] == "group" and parts[3] in ("0", "1"):
            return self.state_dtypes[int(parts[3])]
        return None
