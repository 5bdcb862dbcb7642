"""Several sources (run.sources = k > 1): the input is dealt in parts, every kth to each source,
and what must happen at one place of the input at every source is placed at a part none of them
has started: a checkpoint's marker, moves of state, the router's changes of its routing.

Rank 0 leases parts: the other sources may start parts below the lease (two rounds ahead), and
each Lease message carries what it places (protocol.Lease). A source, before its first batch of
a part, carries out what is placed at or before it (`at`), in the order placed. A change that
moves state between workers that are not entries needs a barrier: the lease stops at its part
until rank 0 has applied it there (`hold`). Rank 0's driver and each extra source (feeder.py)
keep one `Parts`; rank 0's decides, a feeder's only records the leases it is given.
"""
from ..runtime.protocol import Lease, Marker, PartEnd


class Parts:
    def __init__(self, source, sources, rank, entries, moves, calls, control, wait, marked, cut, ckpt_dir):
        """Its collaborators, never the driver: the `source` (source.py) of this rank of the
        `sources`, the `entries`, the `moves` (moves.py), the rank-0 operator's `calls` (calls.py),
        `control(dest, msg)`, `wait(ready)`, `marked(cid)` (a marker of this source is out),
        `cut(offset)` (rank 0: a checkpoint at this input offset, checkpointer.cut), and the
        job's checkpoint directory for the markers it puts out."""
        self.source, self.sources, self.rank, self.entries = source, list(sources), rank, list(entries)
        self.moves, self.calls, self.control, self.wait = moves, calls, control, wait
        self.marked, self._cut, self.ckpt_dir = marked, cut, ckpt_dir
        self.placed = []                    # (part, "marker" | "moves" | "changes", what)
        self.changes = []                   # the router's changes to lease out (change)
        self.barrier = False                # one of them needs a barrier (change)
        self.hold = None                    # rank 0: the lease stops at this part until its barrier change
        self.at_barrier = None              # rank 0, applying a barrier change: the part it is placed at
        self.lease = 2 * len(self.sources)      # parts below this may start on every source

    def start_at(self, lease):
        """Parts below `lease` may start (a restored run's, rank 0's Go to an extra source)."""
        self.lease = lease

    # -- what rank 0's router asks, through its coordinator -----------------------------------------
    def change(self, what, barrier=False):
        """A change of rank 0's router's routing (`what`: JSON values): every source applies it
        (router.apply_change) before its first part at or past the lease, so all route alike
        from the same place of the input.

        `barrier`: rank 0's router moves state between workers that are not entries when it
        applies the change, which needs every worker to have processed the input before it (as
        with one source, where rank 0 routes nothing meanwhile). The lease then stops at the
        change's part until rank 0 has applied it there: every source has routed what comes
        before, and none goes past; `barrier_batches` says how many batches that is, and moves
        begun meanwhile start at once (moves.py)."""
        if len(self.sources) == 1:     # one source: applied once the router's call has returned
            self.calls.post("apply_change", what)
            return
        self.changes.append(what)
        self.barrier = self.barrier or barrier

    @property
    def barrier_batches(self):
        """While rank 0 applies a barrier change: the input's batches before its part (batch b
        holds seq [b B, (b + 1) B) at every source: source.py); None otherwise."""
        if self.at_barrier is None:
            return None
        s = self.source
        return -(-min(self.at_barrier * s.part_rows, s.total) // s.batch_size)

    @property
    def changing(self):
        """Has rank 0's router a change placed that it has not applied yet? (It decides on the
        routing it applies: the next decision waits.)"""
        return (bool(self.changes) or any(kind == "changes" for _, kind, _ in self.placed)
                or self.calls.pending("apply_change"))

    # -- the lifecycle ---------------------------------------------------------------------------
    def start(self, part):
        """Before this source's first batch of `part`: rank 0 lets the other sources go up to two
        rounds of parts ahead (a checkpoint or a move is placed where none has started yet), an
        extra source waits for that lease; then what is placed at or before `part` happens."""
        k = len(self.sources)
        if self.rank == self.sources[0]:
            self.at(part)
            self.grant(part + 2 * k)
        else:      # what is placed at or before `part` can go out before its lease (a marker rank 0
            self.wait(lambda: self.at(part) or part < self.lease)     # waits on at a barrier)
            self.at(part)

    def grant(self, upto, marker=None, at=0, moves=(), changes=()):
        """Rank 0: raise the lease to `upto`, with a checkpoint's marker, or moves and the
        router's changes, placed at `at`."""
        if self.hold is not None:
            upto = min(upto, self.hold)       # a barrier change is placed there (change)
        if upto > self.lease or marker is not None or moves or changes:
            self.lease = max(self.lease, upto)
            lease = (Lease(self.lease, marker.id, at, marker.epoch, marker.cut) if marker is not None
                     else Lease(self.lease, part=at, moves=tuple(tuple(m) for m in moves), changes=tuple(changes)))
            for r in self.sources[1:]:
                self.control(r, lease)

    def place(self):
        """Rank 0, after its router's epoch end: the moves it began and the changes it decided
        take effect at the lease (moves first)."""
        moves, changes = self.moves.take_planned(), self.changes
        if moves or changes:
            at, self.changes = self.lease, []
            self.placed += [x for x in ((at, "moves", moves), (at, "changes", changes)) if x[2]]
            if self.barrier:
                self.hold, self.barrier = at, False
            self.grant(at + 2 * len(self.sources), at=at, moves=moves, changes=changes)

    def end(self):
        """This source's part is all sent (the router's held rows too, with the part's bounds):
        every entry is told, then the source moves on to its next part."""
        self.calls("flush")
        part = (self.source.released - 1) // self.source.part_rows
        for e in self.entries:
            self.control(e, PartEnd(part))
        self.source.next_part()

    def cut(self):
        """Rank 0: a checkpoint at the first part no source has started (the lease); each source
        puts the marker out there (`at`), rank 0 too, with its router's state then."""
        at = self.lease
        if at * self.source.part_rows >= self.source.total or self.hold is not None:
            return          # every part has begun (nothing left to cut before), or a barrier is due
        m = self._cut(at * self.source.part_rows)     # the router's state: when rank 0's marker is out
        self.placed.append((at, "marker", m))
        self.grant(at + 2 * len(self.sources), m, at)

    def leased(self, msg):
        """An extra source: rank 0's Lease, and what it places."""
        self.lease = max(self.lease, msg.upto)
        if msg.id >= 0:
            self.placed.append((msg.part, "marker", Marker(msg.id, msg.epoch, "", msg.cut)))
        if msg.moves:
            self.placed.append((msg.part, "moves", [tuple(m) for m in msg.moves]))
        if msg.changes:
            self.placed.append((msg.part, "changes", list(msg.changes)))

    def at(self, part):
        """What is placed at or before `part` (None: the input's end), in the order it was placed:
        a checkpoint's marker on every entry link, moves (Moves.at_part), or the router's changes."""
        for at, kind, what in [x for x in self.placed if part is None or x[0] <= part]:
            self.placed.remove((at, kind, what))
            if kind == "moves":
                self.moves.at_part(at, what)
                continue
            if kind == "changes":
                self.at_barrier = at if at == self.hold else None
                for c in what:
                    self.calls("apply_change", c)
                if self.at_barrier is not None:
                    self.hold = self.at_barrier = None
                continue
            m = Marker(what.id, what.epoch, self.ckpt_dir, what.cut)
            for e in self.entries:
                self.control(e, m)
            self.marked(m.id)
