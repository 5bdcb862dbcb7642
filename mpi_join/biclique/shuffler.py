"""The join-biclique's routing roles: the shuffler (rank 0, `driver`) and the `dispatcher`s. They
only route, so this module imports no join code (and no numba): a rank that routes starts
without compiling or loading a kernel (the units: roles.py). See graph.py for the layout,
routing.py for ContRand and the Members table, scaling.py for 2PS."""

import dataclasses
import time

import numpy as np

from ..runtime.headers import Header
from ..partitioning import Partitioner
from ..runtime.protocol import Control
from ..runtime.operator import Fields, Operator, Output
from ..join.window import NEG_INF
from . import rescale, routing, scaling
from .graph import SIDES


@dataclasses.dataclass(frozen=True)
class Upto(Control):
    """Shuffler -> unit: answer At once every batch up to `order` is processed."""
    order: int


@dataclasses.dataclass(frozen=True)
class At(Control):
    """Unit -> shuffler: every batch up to `order` is processed."""
    order: int


@dataclasses.dataclass(frozen=True)
class Members(Header):
    """A batch's routing table (routing.Membership.code): what every unit does for it."""
    version: int
    units: tuple


class Shuffler(Operator):
    """Rank 0: deals the batches to the dispatchers in turn, each stamped with its place in the
    input (the order the units merge by). With `scaling`, also the 2PS resource manager
    (scaling.py): it asks the units for their memory load, and changes which units store and
    join (the Members table every batch carries), at a batch boundary every unit sees alike."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.part = Partitioner(job, 1)
        self.next = 0
        p = job.strategy.params
        self.members = None
        if p["scaling"]:
            self.members = rescale.start_members(graph, p)
            self.scaler = scaling.Scaler(scaling.Policy.of(p))
            self.period = float(p["scale_every_ms"]) / 1e3
        self.version = 0
        self.body = None                        # the Members header of the current version
        self.full = [s.window.kind == "unbounded" for s in job.streams]
        self.delay = int(p["max_delay"])
        self.last_coord = [NEG_INF, NEG_INF]     # of the last tuple of each side routed
        self.draining = {}                      # (side, unit) -> the first coord of its side routed after
        # it began to drain (None until one is): the unit stores none from there on
        self.mlv = {}                           # the loads the last scaling decision was made on
        self.asked = self.last_ask = None
        self.trace, self.events, self.t0 = [], [], None
        self.declare(route=Fields(self, "next", "version", "last_coord", members=(
            lambda m: None if m is None else [int(x) for x in m.flat()],
            lambda v: None if v is None else routing.Membership.of(self.members.units, self.members.groups, v)),
            draining=(lambda d: [[s, u, c] for (s, u), c in d.items()], lambda v: {(s, u): c for s, u, c in v})))

    def annotate(self, batch, stream):
        batch["_h"] = self.part.hashes(self.part.keys(batch, stream))

    def on_data(self, src, header, batches):
        d = self.graph.ranks("dispatcher")
        body = None
        if self.members is not None:
            for s, b in enumerate(batches):
                if len(b):
                    self.last_coord[s] = int(b["_coord"][-1])
            for key, c in self.draining.items():
                if c is None and len(batches[key[0]]):
                    self.draining[key] = int(batches[key[0]]["_coord"][-1])
            if self.body is None or self.body.version != self.version:
                self.body = Members(self.version, self.members.flat())     # rebuilt only when the table changed
            body = self.body
        self.next = self.number(header, self.next) + 1
        return Output.sending((self.to(d[(self.next - 1) % len(d)]),), batches, header.bounds, body, self.next - 1)

    def rescale(self, root, cid):
        """Restored at another rank count: the units took their rows by the table of a start
        (rescale.py), and 2PS begins again from it."""
        if self.members is not None:
            self.members, self.body, self.draining = rescale.start_members(self.graph, self.job.strategy.params), None, {}

    # -- 2PS ----------------------------------------------------------------------------------
    def adapts(self):
        return self.members is not None

    def end_of_epoch(self, epoch):
        """2PS's phases, at rank 0; each decision is a change of the Members table placed in the
        input (coordinator.change), and the next waits until it is applied here."""
        if self.members is None or self.coordinator.changing:
            return
        now = time.perf_counter()
        self.t0 = self.t0 or now
        self.release_drained()
        units = [r for g in SIDES for r in self.graph.ranks(g)]
        if self.asked is not None:
            loads = self.coordinator.loads(units)
            if loads is None:
                return                           # the requesting phase goes on
            self.asked = None
            mlv = {(s, u): loads[r].state_bytes for s in (0, 1) for u, r in enumerate(self.graph.ranks(SIDES[s]))}
            actions, seen = self.scaler.decide(self.members, mlv, [self.members.spare(0), self.members.spare(1)])
            t = round(now - self.t0, 3)
            self.trace += [dict(o, t_s=t, released=self.coordinator.released,
                                mlv_mb=round(sum(mlv[(o["side"], u)] for u in
                                                          self.members.active(o["side"], o["group"])) / 1e6, 3))
                           for o in seen]
            self.mlv = mlv
            for a in actions:        # a full-history unit leaving moves its state: at a barrier
                self.coordinator.change(["scale", a[0], a[1], a[2], [int(u) for u in a[3]]],
                                    barrier=a[0] == "down" and self.full[a[1]])
                self.events.append({"t_s": t, "decision": a[0], "side": a[1], "group": a[2], "units": list(a[3]),
                                    "order": self.next})
        elif self.last_ask is None or now - self.last_ask >= self.period:
            self.coordinator.ask_loads(units)
            self.asked = self.last_ask = now

    def apply_change(self, what):
        if what[0] == "scale":
            self.apply(*what[1:], mlv=self.mlv)
        else:                                    # ["release", side, units]
            self.members.release(what[1], what[2])
            self.version += 1

    def apply(self, decision, side, g, units, mlv=None):
        """The scaling phase, before batch `self.next`: spare units join subgroup g ("out"), or
        units leave it ("down"): with a window they drain (join, store nothing) until nothing
        they hold can be seen; with full history their state moves to the units that stay."""
        if decision == "out":
            self.members.add(side, g, units)
        elif not self.full[side]:
            self.members.drain(side, units)
            for u in units:
                self.draining[(side, u)] = None
        else:
            self._move_away(side, g, units, mlv or {})
        self.version += 1

    def release_drained(self):
        """Draining units whose every tuple is out of every future window become spare (a change
        placed in the input: later batches have later bounds)."""
        bounds = self.coordinator.bounds()
        done = [(s, u) for (s, u), c in self.draining.items() if c is not None and c < int(bounds[s]) - self.delay]
        for s, u in done:
            del self.draining[(s, u)]
            self.coordinator.change(["release", s, [u]])

    def _move_away(self, side, g, units, mlv):
        """Full history: once the leaving units and their heirs have processed every batch
        before this place of the input (nothing else is routed meanwhile: with several sources
        this is a barrier change, coordinator.change), the runtime moves each leaving unit's state to
        the least loaded unit that stays in the subgroup. Another source only changes its table."""
        stay = [u for u in self.members.active(side, g) if u not in units]
        ranks = self.graph.ranks(SIDES[side])
        if self.coordinator.decides:
            self._hand_over(side, units, stay, ranks, mlv)
        self.members.drain(side, units)
        self.members.release(side, units)

    def _hand_over(self, side, units, stay, ranks, mlv):
        before = self.coordinator.barrier_batches
        upto = (self.next if before is None else before) - 1
        asked = [ranks[u] for u in units + stay]
        self.coordinator.ask(asked, Upto(upto), At)
        self.coordinator.wait(lambda: all(self.coordinator.answered(At).get(r, At(-2)).order >= upto for r in asked))
        load = {u: mlv.get((side, u), 0) for u in stay}
        for u in units:
            heir = min(stay, key=lambda x: (load[x], x))
            load[heir] += mlv.get((side, u), 0)
            self.coordinator.move(ranks[u], ranks[u], ranks[heir])
        self.coordinator.settle()

    def unit_of(self, batch):
        return np.full(len(batch), -1, np.int64)     # the shuffler routes no row to a unit directly

    def stats(self):
        if self.members is None:
            return {}
        return {"scaling_events": self.events, "scaling_trace": self.trace,
                "active_units": [sum(len(self.members.active(s, g)) for g in range(self.members.groups[s]))
                                 for s in (0, 1)]}


class Dispatcher(Operator):
    """Routes each batch: for every unit, the tuples of its side it stores and the tuples of the
    other side it joins; every unit gets its part of every batch, empty or not (the signal)."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        p = job.strategy.params
        self.groups = (int(p["r_groups"]), int(p["s_groups"]))
        self.units = tuple(graph.ranks(g) for g in SIDES)
        self.n = tuple(len(u) for u in self.units)
        self.members = routing.Membership(self.n, self.groups)      # without scaling: every unit, fixed
        self.routed = 0

    def on_data(self, src, header, batches):
        m = self.members if header.body is None else routing.Membership.of(self.n, self.groups, header.body.units)
        out = Output()
        store = [m.store_units(b, s) for s, b in enumerate(batches)]
        for side in (0, 1):
            other = 1 - side
            at = m.joined_at(batches[other], side)
            for u, rank in enumerate(self.units[side]):
                parts = [None, None]
                parts[side] = batches[side][store[side] == u]
                g = m.group(side, u)
                parts[other] = batches[other][at == g] if g >= 0 else batches[other][:0]
                out.send(self.to(rank), parts, header.bounds, order=header.order)
        self.routed += sum(len(b) for b in batches)
        return out

    def stats(self):
        return {"window_tuples": 0, "tuples_routed": self.routed}
