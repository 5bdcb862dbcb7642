"""Moving a unit of state between workers, the driver's side (rank 0's operator asks for it
through its coordinator: master/coordinator.py).

`src` takes the unit out of its module with its queued input rows and sends them to `dst`,
which puts them in before its next DATA; rows of the unit routed meanwhile are held here and
handed to the router's `on_moved` once both sides are done. Each move begins a new routing epoch
(DataHeader.epoch). No checkpoint is cut while a move is on (it would not capture the state in
flight).

With several sources a move is at a place in the input instead: rank 0 leases it to every source
at a part none has started (driver.py), and each source, before that part, hands its router
`on_moved` (routing the unit to its new holder from there on) and sends both holders the move in
order with its input. The old holder takes the unit out when its input reaches that part, the
new one puts it in there before it goes on: no rows are held anywhere. A move rank 0's router
begins while it applies a barrier change (driver.change) starts at once, as with one source:
every source is stopped at the change's place.

A holder that is not an entry worker gets a checkpoint's marker from other workers, where a
MoveOut could overtake it (the state would be in neither snapshot): its move waits until the
cut in progress is complete."""
import numpy as np

from ..join.window import NEG_INF
from ..runtime.protocol import Install, MoveOut


class Moves:
    def __init__(self, graph, source, calls, unit_of, control, wait, cut_pending):
        """Its collaborators, never the driver: the `graph` (who may move to whom, the sources and
        entries), the `source` (bounds, dtypes), rank 0's operator's `calls` (calls.py) and
        `unit_of(rows)`, `control(dest, msg)`, `wait(ready)`, `cut_pending()` (a checkpoint is in
        progress)."""
        self.graph, self.source, self.calls, self.unit_of = graph, source, calls, unit_of
        self.control, self.wait, self.cut_pending, self.entries = control, wait, cut_pending, graph.entries()
        self.epoch = 0                     # one more per move begun (DataHeader.epoch)
        self.on = {}                       # unit -> the move in progress
        self.finished = []                 # units whose move both sides have finished
        self.planned = []                  # several sources: (unit, src, dst) to lease out

    def begin(self, unit, src, dst, now=False):
        """`now`: with several sources, a move rank 0 begins while it applies a barrier change
        (parts.py), which starts at once, as with one source."""
        g = self.graph
        if unit in self.on:
            raise RuntimeError(f"driver: unit {unit} is already moving")
        if dst not in g.move_targets(src):
            raise RuntimeError(f"driver: unit {unit} cannot move from rank {src} ({g.role(src)}) to rank "
                               f"{dst}: state moves within a group of the graph ({g.move_targets(src)})")
        if len(g.sources) > 1 and not now:
            self.on[unit] = {"src": src, "dst": dst, "acks": set(), "held": None}
            self.planned.append((unit, src, dst))
            return
        if src not in self.entries:      # its marker comes from other workers, not behind a MoveOut
            self.wait(lambda: not self.cut_pending())
        self.epoch += 1
        bounds = np.array(self.source.bounds(), np.int64)
        self.on[unit] = {"src": src, "dst": dst, "acks": set(), "bounds": bounds,
                         "held": [[] for _ in self.source.dtypes]}
        self.control(src, MoveOut(unit, dst, self.epoch))
        self.control(dst, Install(unit, src, self.epoch, tuple(int(x) for x in bounds)))

    def at_part(self, part, moves):
        """Several sources: this source is about to start `part`, where `moves` take effect: the
        router routes each unit to its new holder from here on, and both holders are told."""
        for unit, src, dst in moves:
            self.epoch += 1
            self.calls("on_moved", unit, src, dst, [np.zeros(0, dt) for dt in self.source.dtypes])
            self.control(src, MoveOut(unit, dst, self.epoch, part))
            self.control(dst, Install(unit, src, self.epoch, tuple(int(NEG_INF) for _ in self.source.dtypes), part))

    def take_planned(self):
        """Several sources: the moves begun since the last call, to lease out (parts.place)."""
        planned, self.planned = self.planned, []
        return planned

    def settle(self):
        """Handle messages until every move begun is done (the router's on_moved called)."""
        self.wait(lambda: self.finish() or not self.on)

    def acked(self, msg):
        """A side's Moved record."""
        m = self.on[msg.unit]
        m["acks"].add(msg.side)
        if m["acks"] == {"out", "in"}:
            self.finished.append(msg.unit)

    def outgoing(self, dests, batches, bounds):
        """What a send to `dests` carries while units move: their rows held back here, and bounds
        no later than those a move to one of `dests` began with (its held rows may still need
        what they keep)."""
        if not any(m["held"] is not None for m in self.on.values()):
            return batches, bounds
        out = []
        for s, b in enumerate(batches):
            if len(b):
                units = self.unit_of(b)
                keep = np.ones(len(b), bool)
                for u, m in self.on.items():
                    if m["held"] is None:
                        continue
                    mine = units == u
                    if mine.any():
                        m["held"][s].append(b[mine])
                        keep &= ~mine
                b = b if keep.all() else b[keep]
            out.append(b)
        for m in self.on.values():
            if m["dst"] in dests and m["held"] is not None:
                bounds = np.minimum(bounds, m["bounds"])
        return out, bounds

    def finish(self):
        """Hand the router each move both sides have finished (called between sends only: a
        message still waiting for credit must not be overtaken by what assumes it arrived)."""
        while self.finished:
            u = self.finished.pop(0)
            m = self.on.pop(u)
            if m["held"] is None:          # several sources: routed anew where the move is (at_part)
                continue
            held = [np.concatenate(h) if h else np.zeros(0, dt) for h, dt in zip(m["held"], self.source.dtypes)]
            self.calls.post("on_moved", u, m["src"], m["dst"], held)    # after a call that waits on it
