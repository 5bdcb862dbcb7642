"""A worker's outbox: one FIFO queue per downstream link, sent as credits allow.

A DATA message is packed once and the same buffer queued for each destination (a fan-out costs
one copy). Control records to a downstream rank queue behind its DATA (a marker or end-of-stream
must not overtake the batches before it); to any other rank they go at once. While any queue
waits for credit the worker takes nothing new from the driver, so backpressure reaches the
source."""
from collections import deque

from ..runtime.protocol import DataHeader, Tag
from ..runtime.wire import Credits, pack


class Outbox:
    def __init__(self, tx, rank, graph_name, down, max_inflight, metrics):
        self.tx, self.rank, self.graph_name, self.metrics = tx, rank, graph_name, metrics
        self.queues = {d: deque() for d in down}
        self.credits = Credits(down, max_inflight)
        self.msg_no = 0                             # DATA messages this rank made (a fan-out is one)
        self.sent = 0                               # DATA to other workers (termination counts)

    @property
    def waiting(self):
        return any(self.queues.values())

    def data(self, dests, bounds, body, order, batches):
        """Queue one DATA message for each of `dests`, packed once."""
        for dest in dests:
            if dest not in self.queues:
                raise RuntimeError(f"worker {self.rank}: rank {dest} is not downstream of it in the "
                                   f"{self.graph_name} graph (downstream: {list(self.queues)})")
        buf = pack(DataHeader(self.msg_no, tuple(bounds), body, order).encode(), batches)
        self.msg_no += 1
        n = sum(len(b) for b in batches)
        for dest in dests:
            self.queues[dest].append(("data", buf))
            self.sent += 1
            self.metrics.count(tuples_out=n)

    def resumed(self, sent):
        """DATA messages sent to workers before a restored cut (termination counts on from there)."""
        self.sent = sent

    def ctrl(self, dest, msg):
        if dest in self.queues:
            self.queues[dest].append(("ctrl", msg))
        else:
            self.tx.send(dest, Tag.CTRL, msg.encode())

    def everywhere(self, msg):
        """A control record on every downstream link (a checkpoint marker)."""
        for q in self.queues.values():
            q.append(("ctrl", msg))

    def pump(self):
        """Send what the queues hold, in order, as far as credits allow."""
        for dest, q in self.queues.items():
            while q:
                kind, item = q[0]
                if kind == "data":
                    if self.credits.full(dest):
                        break
                    self.tx.send(dest, Tag.DATA, item)
                    self.credits.sent(dest)
                else:
                    self.tx.send(dest, Tag.CTRL, item.encode())
                q.popleft()

    def acked(self, src):
        self.credits.acked(src)

    def in_flight(self):
        return any(self.credits.out.values())
