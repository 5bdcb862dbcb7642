"""What rank 0 (and an extra source: feeder.py) sends on its entry links: DATA messages with
credits (at most `limit` unacknowledged per link; while a link has none, `pump` handles what
workers send), a fan-out packed once, the rows of units that are moving held back (moves.py),
and the control records of the lifecycle. `apply` sends an operator's Output in order."""
import numpy as np

from ..runtime.protocol import DataHeader, Tag
from ..runtime.wire import Credits, pack


class Outlet:
    def __init__(self, tx, entries, limit, moves, source, metrics, pump):
        self.tx, self.moves, self.source, self.metrics, self.pump = tx, moves, source, metrics, pump
        self.credits = Credits(entries, limit)
        self.msg_no = 0                    # DATA messages made (a fan-out is one)
        self.sent = 0                      # DATA messages sent (termination counts)

    def send_many(self, dests, batches, body=None, bounds=None, order=-1):
        """One DATA message to each of `dests`, packed once: every copy is the same buffer. While
        units move, their rows are held back (moves.py), and a unit's new holder gets bounds no
        later than those the move began with (its held rows may still need what they keep)."""
        stray = [d for d in dests if d not in self.credits.out]
        if stray:
            raise RuntimeError(f"rank 0: no edge of the graph leads to rank {stray[0]} (rank 0's edges lead to "
                               f"{sorted(self.credits.out)})")
        batches, b = self.moves.outgoing(dests, batches, np.asarray(self.source.bounds() if bounds is None else bounds,
                                                                    np.int64))
        buf = pack(DataHeader(self.msg_no, tuple(int(x) for x in b), body, order, self.moves.epoch).encode(), batches)
        self.msg_no += 1
        n = sum(len(x) for x in batches)
        for dest in dests:
            while self.credits.full(dest):
                self.pump()
            self.tx.send(dest, Tag.DATA, buf)
            self.sent += 1
            self.metrics.count(tuples_out=n)
            self.credits.sent(dest)

    def resumed(self, sent):
        """DATA messages sent before a restored cut (termination counts on from there)."""
        self.sent = sent

    def control(self, dest, msg):
        self.tx.send(dest, Tag.CTRL, msg.encode())

    def apply(self, out):
        """Send what rank 0's operator returned, in order (results are never emitted here)."""
        if out is not None:
            assert not out.results and not out.snapshots, "rank 0's operator emits no results"
            for dests, batches, bounds, body, order in out.forward:
                self.send_many(dests, batches, body, bounds, order)
            for dest, msg in out.control:
                self.control(dest, msg)
