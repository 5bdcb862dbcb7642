"""What a strategy's worker supplies: a join module, a pure state machine with no MPI in it.

Calling contract (slaves/worker.py is the only caller):
- `warm_up()` once, before READY: compile every kernel the run will use.
- `on_data(src, header, batches)` once per DATA message, in the order each link delivered them
  (links are FIFO; messages of different links interleave). `batches[k]` is stream k's rows
  (runtime dtype, seq order), `header.bounds[k]` stream k's expiry bound after this message,
  `header.body` the strategy's typed header (headers.Header) the sender gave, or None.
  Returns an Output: results to emit, batches to forward to named ranks, control records.
- `on_control(src, msg, ctx)` for the strategy's own control records, in order with DATA on the
  link; ops listed in `urgent_ops` are handed over on arrival instead (before queued DATA, never
  before a queued checkpoint marker).
- `unit_of(batch)`, `take(unit)` -> (arrays, attrs) and `put(unit, arrays, attrs)` for a
  strategy whose driver moves state (driver.move): which unit each row belongs to, the unit's
  state taken out, and put in (on a worker that may have held nothing so far). The runtime
  moves the state, and the unit's rows queued at the old holder, and joins those at the new one.
- `accepts_input()` before each DATA message from the driver is handed over: False leaves it
  queued, unacknowledged (so the driver's credits stop the source), until the module accepts
  (a module that must finish what is in flight before new input enters: the PSP ring's head).
- `on_eos(src)` when the end of the input has passed link `src`.
- `snapshot()` -> (arrays, attrs) and `restore(arrays, attrs)`: the module's whole state; the
  worker writes it into the checkpoint and moves nothing else. `state_dtype(name)` validates.
- `stats()` -> {"window_tuples": n, ...} for metrics.
"""
from dataclasses import dataclass, field

import numpy as np

from ..checkpoint import Checkpointed


@dataclass
class Output:
    """What handling one message produced."""
    results: list = field(default_factory=list)     # (tuple of seq arrays, one per stream; tin array)
    forward: list = field(default_factory=list)     # (dests, batches, bounds, body, order): one message, packed once
    control: list = field(default_factory=list)     # (dest, Control)
    snapshots: list = field(default_factory=list)   # (number, final, rows, meta): an aggregate's snapshots

    def emit(self, seqs, tin):
        if len(tin):
            self.results.append((tuple(seqs), tin))

    def send(self, dest, batches, bounds, body=None, order=-1):
        """Forward `batches` to rank `dest`; `body`: the strategy's typed header (headers.Header);
        `order`: the batch's place for the receiver's ordered merge (DataHeader.order)."""
        self.send_many((dest,), batches, bounds, body, order)

    def send_many(self, dests, batches, bounds, body=None, order=-1):
        """`send` to every rank of `dests`: the message is packed once and the same buffer goes to
        each (a fan-out costs one copy, not one per destination)."""
        self.forward.append((tuple(dests), batches, tuple(int(b) for b in bounds), body, int(order)))

    def tell(self, dest, msg):
        self.control.append((dest, msg))

    def send_results(self, dest, rows, body=None):
        """Send result rows (results.result_dtype: each stream's seq and `_tin`) on the result edge
        to rank `dest`, to be written there (or sent on) instead of here."""
        self.forward.append(((dest,), [rows], (), body, -1))

    def snapshot(self, number, final, rows, meta):
        """Write `rows` (a finished aggregate, aggregate.finish) as snapshot `number` of the run's
        aggregate/ directory; `meta` goes into the file's metadata."""
        self.snapshots.append((int(number), bool(final), rows, dict(meta)))

    def extend(self, other):
        if other is not None:
            self.results += other.results
            self.forward += other.forward
            self.control += other.control
            self.snapshots += other.snapshots
        return self


class JoinModule(Checkpointed):
    """Defaults for the optional hooks; a strategy overrides what it needs."""
    urgent_ops = frozenset()
    buffer_capacity = 0          # tuples, for the load metric (0: the worker's share of what may be in flight)

    def __init__(self, job, rank, graph, dtypes):
        self.job, self.rank, self.graph, self.dtypes = job, rank, graph, dtypes

    def warm_up(self):
        pass

    def on_data(self, src, header, batches):
        raise NotImplementedError

    def accepts_input(self):
        return True

    def next_order(self):
        """The order the module takes next from its merged links (graph.Edge.merge: the worker
        hands over the batch with the least order among the links' next batches once no link can
        still bring a lesser one) when their orders are dense
        (0, 1, 2, ... across the links, none missing), so the batch bearing it goes at once,
        without waiting for the other links to pass it; None (the default): not known."""
        return None

    def on_control(self, src, msg, ctx):
        raise RuntimeError(f"rank {self.rank}: unexpected control record {msg.op!r} from rank {src}")

    def unit_of(self, batch):
        raise RuntimeError(f"rank {self.rank}: this strategy does not move state between workers")

    def take(self, unit):
        raise RuntimeError(f"rank {self.rank}: this strategy does not move state between workers")

    def put(self, unit, arrays, attrs):
        raise RuntimeError(f"rank {self.rank}: this strategy does not move state between workers")

    def on_eos(self, src):
        return None

    def stats(self):
        return {"window_tuples": 0}

    def footprint(self):
        """(bytes the window state holds, spare capacity and indexes included; raw bytes of the
        tuples in it): sampled by the worker for the memory figures of the benchmarks."""
        return 0, 0

    def link_dtypes(self, kind):
        """dtypes of the arrays on a link that carries the strategy's own kind of rows
        (graph.carries returned `kind`)."""
        raise RuntimeError(f"rank {self.rank}: links carrying {kind!r} are not declared by this strategy")


def empty(dtype):
    return np.zeros(0, dtype)
