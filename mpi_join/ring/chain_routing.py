"""The routers of the two chain strategies, `handshake` (handshake.py) and `llhj` (llhj.py), the
headers they send and the job checks both share: what rank 0 and every extra source run. No
join code (and no numba) is imported here, so a rank that routes starts without loading a
kernel."""
from dataclasses import dataclass

from ..runtime.graph import DRIVER
from ..runtime.headers import Header
from ..runtime.operator import Fields, Operator, Output
from ..strategies import numbers


def beside(graph, rank):
    """(left, right): the ranks beside a chain worker, the driver beyond either end (it feeds R at
    the left end and S at the right)."""
    w = graph.workers
    i = w.index(rank)
    return (w[i - 1] if i else DRIVER), (w[i + 1] if i + 1 < len(w) else DRIVER)


@dataclass(frozen=True)
class Arriving(Header):
    """Tuples of one stream (`side` 0: R, flowing right; 1: S, flowing left) entering a segment."""
    side: int


@dataclass(frozen=True)
class New(Header):
    """Batch `batch` of new tuples, fast-forwarded by the driver to every worker."""
    batch: int


class HandshakeRouter(Operator):
    """R batches to the left end, S batches to the right end."""

    def on_data(self, src, header, batches):
        R, S = batches
        n = len(self.graph.workers)
        out = Output()
        if len(R):
            out.send(self.to(1), [R, S[:0]], header.bounds, Arriving(0))
        if len(S):
            out.send(self.to(n), [R[:0], S], header.bounds, Arriving(1))
        return out


class LowLatencyRouter(Operator):
    """Every batch, numbered, to every worker at once."""

    def rescale(self, root, cid):
        """Restored at another rank count (chain_rescale.py): every worker of this run gets every batch."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.next_id = 0
        self.declare(order=Fields(self, "next_id"))

    def on_data(self, src, header, batches):
        if not any(len(b) for b in batches):
            return
        self.next_id = self.number(header, self.next_id) + 1
        return Output.sending([self.to(w) for w in self.graph.workers], batches, header.bounds, New(self.next_id - 1))


def check_job(job, nranks):
    """`handshake` and `llhj` job checks (named in their registry entries)."""
    p, where = job.strategy.params, f"{job.path}: strategy"
    unb = [s.name for s in job.streams if s.window.kind == "unbounded"]
    if unb:
        return (f"{job.path}: streams.{unb[0]}.window: {job.strategy.name} moves tuples along the chain as they "
                f"age out of their window; give a time or count window")
    if p["weights"]:
        try:
            vals = numbers(p["weights"], "weights")
        except ValueError:
            vals = []
        if len(vals) != nranks - 1 or min(vals) <= 0:
            return (f"{where}.weights: expected {nranks - 1} positive numbers (one segment per worker on "
                    f"{nranks} ranks), got {p['weights']!r}")
    slow = p.get("slow_rank", -1)
    if slow != -1 and slow >= nranks:
        return f"{where}.slow_rank: rank {slow} does not exist (ranks 0..{nranks - 1})"
    return None
