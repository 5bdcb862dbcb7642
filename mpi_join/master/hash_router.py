"""The `hash` strategy's routing on the driver: hash-partitioned mini-buffers drained to slaves
every epoch, reorganised by load (IV-B, IV-C, V).

Each released tuple is hashed on its equi keys into a partition (a partition group, the unit
that moves); every slave receives, per epoch, one message with the tuples of the groups it owns
from both streams. With sub-groups, the epoch is cut into `subgroups` slots and each slot serves
one sub-group of slaves, so the driver holds about half as much at its peak.

Every `reorganize_every` epochs the controller reads each slave's load (buffer occupancy and CPU
busy fraction), moves one group from each supplier to a consumer (the supplier sends the group's
windows, buffered tuples and split information straight to the consumer; the driver holds the
group's new tuples until both have acknowledged) and adjusts the degree of declustering.
"""
import numpy as np

from ..errors import InputError
from ..partitioning import Partitioner, group_rows
from . import controller
from ..runtime.operator import Fields, Operator, Output


class PartitionMap:
    """Which slave owns each partition (partitions dealt round-robin at start)."""

    def __init__(self, n_partitions, slaves):
        self.slaves = list(slaves)
        self.owner = np.array([self.slaves[p % len(self.slaves)] for p in range(n_partitions)], np.int64)

    def reassign(self, owner):
        """Every partition's owner anew (a restore at another rank count)."""
        self.owner = np.asarray(owner, np.int64)

    def partitions_of(self, slave):
        return np.nonzero(self.owner == slave)[0]

    # -- state (operator.declare) ---------------------------------------------------------
    def snapshot(self):
        return {"owner": self.owner.copy()}, {}

    def restore(self, arrays, attrs):
        owner = arrays["owner"]
        if len(owner) != len(self.owner):
            raise InputError(f"checkpoint: partition map has {len(owner)} partitions, the job has {len(self.owner)}")
        self.owner = owner.astype(np.int64)

    def state_dtype(self, name):
        return np.dtype(np.int64) if name == "owner" else None


class HashRouter(Operator):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.params = prm = job.strategy.params
        self.part = Partitioner(job, prm["partitions"])
        self.slaves = graph.workers
        self.slots = self.g = max(1, min(prm["subgroups"], len(self.slaves)))
        self.map = PartitionMap(self.part.n_partitions, self.slaves)
        self.active = list(self.slaves)
        self.acc = {s: ([], []) for s in self.slaves}      # routed, not yet sent (per slave)
        self.peak_buffer = 0
        self.rng = np.random.default_rng(prm["seed"])
        self.reorgs = 0
        self.asked = None                                  # slaves asked for their load, not yet heard
        self.log = {"migrations": [], "deactivated": [], "activated": [], "occupancy": [], "busy": []}
        self.declare(partitions=self.map, active=Fields(self, "active"))

    def annotate(self, batch, stream):
        batch["_h"] = self.part.hashes(self.part.keys(batch, stream))

    # -- distribution ---------------------------------------------------------------------
    def on_data(self, src, header, batches):
        """Append each released tuple to its owner's mini-buffer, then drain this slot's
        sub-group (the rows of a group that is moving are held by the driver meanwhile)."""
        for s_idx, b in enumerate(batches):
            for o, rows in group_rows(b, self.map.owner[self.part.partitions(b["_h"])]):
                self.acc[o][s_idx].append(rows)
        self.peak_buffer = max(self.peak_buffer, self._buffered_bytes())
        return self._flush(self.active[header.order::self.g])       # header.order: the slot in the epoch

    def flush(self):
        return self._flush(self.slaves)

    def unit_of(self, batch):
        return self.part.partitions(batch["_h"])

    def _buffered_bytes(self):
        return sum(x.nbytes for a in self.acc.values() for side in a for x in side)

    def _flush(self, slaves):
        out = Output()
        for s in slaves:
            parts = [_cat(side, dt) for side, dt in zip(self.acc[s], self.dtypes)]
            self.acc[s] = ([], [])
            out.send(self.to(s), parts, self.coordinator.bounds())
        return out

    # -- reorganisation -------------------------------------------------------------------
    def adapts(self):
        return self.params["reorganize_every"] > 0

    def end_of_epoch(self, epoch):
        """Every `reorganize_every` epochs ask the active slaves for their load; reorganise at
        the first epoch end after all have answered (the replay goes on meanwhile)."""
        every = self.params["reorganize_every"]
        if self.asked is not None:
            loads = self.coordinator.loads(self.asked)
            if loads is not None and not self.coordinator.moving and not self.coordinator.done:
                self.asked = None
                self.coordinator.send(self.flush())    # moves start from a state where everything routed is sent
                self._reorganise(epoch, loads)
        elif every and epoch % every == 0 and not self.coordinator.moving and not self.coordinator.done:
            self.asked = list(self.active)
            self.coordinator.ask_loads(self.asked)

    def _reorganise(self, epoch, loads):
        self.reorgs += 1
        occ = {s: r.occupancy for s, r in loads.items()}
        busy = {s: r.busy for s, r in loads.items()}
        self.log["occupancy"].append({"epoch": epoch, **{str(s): round(o, 4) for s, o in occ.items()}})
        self.log["busy"].append({"epoch": epoch, **{str(s): round(o, 3) for s, o in busy.items()}})
        groups_of = {s: [int(p) for p in self.map.partitions_of(s)] for s in self.active}
        inactive = [s for s in self.slaves if s not in self.active]
        prm = self.params
        if prm["force"]:
            pl = controller.forced_plan(groups_of, self.active, inactive, self.rng, prm["force"], self.reorgs)
        else:
            pl = controller.plan(occ, groups_of, self.active, inactive, self.rng, prm["supply_threshold"],
                                 prm["consumer_threshold"], prm["rho"], prm["declustering"], busy=busy,
                                 idle_busy=prm["idle_busy"], windows_full=self.coordinator.windows_full())
        for s in pl.activate:
            self.active.append(s)
            self.active.sort()
            self.log["activated"].append({"epoch": epoch, "slave": s})
        for p, src, dst in pl.moves:
            self._migrate(p, src, dst, epoch)
        for s in pl.deactivate:
            self.active.remove(s)
            self.log["deactivated"].append({"epoch": epoch, "slave": s})

    def _migrate(self, p, src, dst, epoch):
        """Move partition group p from slave src to slave dst (the runtime's move)."""
        self.coordinator.move(p, src, dst)
        self.log["migrations"].append({"epoch": epoch, "group": p, "from": src, "to": dst})

    def rescale(self, root, cid):
        """Restored onto other slaves: their new groups (restore_plan.owners_after, as each slave
        computes them), every slave in service (the controller takes slaves out again if the load
        is light)."""
        from ..partitioning.restore_plan import owners_after
        self.map.reassign(owners_after(root, cid, self.slaves))
        self.active = list(self.slaves)

    def on_moved(self, p, src, dst, held):
        """Group p now lives at dst. The rows of it the driver held go out with dst's next send,
        followed by those routed to src since and not sent yet (an inactive slave is not
        drained every slot), which are newer."""
        self.map.owner[p] = dst
        for s, rows in enumerate(held):
            later, keep = [], []
            for c in self.acc[src][s]:
                mine = self.unit_of(c) == p
                later.append(c[mine])
                keep.append(c[~mine])
            self.acc[src][s][:] = [c for c in keep if len(c)]
            self.acc[dst][s].extend(c for c in [rows] + later if len(c))

    def report(self, workers):
        log = self.log
        out = [f"rebalancing: {self.reorgs} reorganisations, {len(log['migrations'])} partition groups moved, "
               f"slaves taken out {_epochs(log['deactivated'])}, brought back {_epochs(log['activated'])}"]
        total = sum(w["tuples_in"] for w in workers) or 1
        share = ", ".join(f"{w['rank']}: {w['tuples_in'] / total:.1%}" for w in workers)
        return out + [f"share of tuples per slave: {share}"]

    def stats(self):
        return dict(peak_buffer_bytes=self.peak_buffer, subgroups=self.g, reorganisations=self.reorgs,
                    active_slaves=self.active,
                    final_partitions={str(s): int((self.map.owner == s).sum()) for s in self.slaves}, **self.log)


def _epochs(events):
    return ", ".join(f"{e['slave']} (epoch {e['epoch']})" for e in events) or "none"


def _cat(chunks, dtype):
    if not chunks:
        return np.zeros(0, dtype)
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def route(batches, part, pmap):
    """Split one epoch's batches by owning slave: {slave: [batch of stream 0, batch of stream 1]},
    each batch still in seq order (the per-partition mini-buffers, merged per slave)."""
    out = {s: [b[:0] for b in batches] for s in pmap.slaves}
    for k, b in enumerate(batches):
        for s, rows in group_rows(b, pmap.owner[part.partitions(b["_h"])]):
            out[s][k] = rows
    return out


def check_job(job, nranks):
    """The `hash` strategy's own job checks (named in its registry entry)."""
    slow = job.strategy.params.get("slow_rank", -1)
    if slow != -1 and slow >= nranks:
        return f"{job.path}: strategy.slow_rank: rank {slow} does not exist (ranks 0..{nranks - 1})"
    return None
