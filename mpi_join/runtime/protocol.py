"""The wire protocol every strategy shares: a few generic tags, a data header, typed control records.

Tags name the kind of message, never a strategy. DATA carries a batch: a `DataHeader` (message
number, the expiry bounds of all M streams, the strategy's typed header) and one structured array
per stream, packed by `transport.pack` into one buffer. CTRL carries a small typed record
(`Control` subclasses: named fields, the class's name as `op`, JSON on the wire, never on the data
path). CTRL travels on the same link as DATA, so a marker sent after a batch is received after
it (MPI's non-overtaking order between one sender and one receiver).
"""
import json
from dataclasses import asdict, dataclass, fields
from enum import IntEnum
from typing import ClassVar

import numpy as np

from .headers import Header


class Tag(IntEnum):
    START = 1     # rank 0 -> all: go, or the startup error to exit with
    READY = 2     # worker -> rank 0: kernels compiled, the replay clock may start
    DATA = 3      # a batch: DataHeader + one array per stream
    ACK = 4       # a DATA message was processed: a credit back to its sender, and counters
    CTRL = 5      # a typed control record (markers, probes, strategy control), in order with DATA
    STATE = 6     # a piece of join state moved between workers (migration, scaling)
    DONE = 7      # worker -> rank 0: final metrics
    ALIVE = 8     # heartbeat of an idle link (liveness.py); consumed by the transport
    FAILED = 9    # a failing rank -> rank 0: release the run's locks, the job is being aborted


@dataclass(frozen=True)
class DataHeader:
    """Header of a DATA message. `bounds[j]` is stream j's expiry bound: no tuple still to come
    can see a tuple of j whose coord is below it (window.py). `body` is the strategy's typed
    header (headers.Header: what the batch is, in the strategy's words), or None. `order`: the
    batch's place in an order that several links share (non-decreasing on each link; -1: none),
    by which a receiver's ordered merge releases them (graph.Edge.merge). `epoch`: the
    driver's routing epoch when the batch was routed (one more per state move begun)."""
    msg_no: int
    bounds: tuple
    body: object = None
    order: int = -1
    epoch: int = 0

    def encode(self):
        return [self.msg_no, self.order, self.epoch, len(self.bounds), *self.bounds,
                *(self.body.words() if self.body is not None else ())]

    @classmethod
    def decode(cls, h):
        m = int(h[3])
        body = Header.read(h[4 + m:]) if len(h) > 4 + m else None
        return cls(int(h[0]), tuple(int(x) for x in h[4:4 + m]), body, int(h[1]), int(h[2]))


_OPS = {}


@dataclass(frozen=True)
class Control:
    """Base of typed control records: subclasses declare named fields. A record's `op`, its name
    on the wire, is its class's "module:Class"."""
    op: ClassVar[str] = ""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.op = f"{cls.__module__}:{cls.__qualname__}"
        if cls.op in _OPS and _OPS[cls.op] is not cls:
            raise TypeError(f"control op {cls.op!r} declared twice")
        _OPS[cls.op] = cls

    def encode(self):
        return np.frombuffer(json.dumps({"op": self.op, **asdict(self)}).encode(), np.uint8).copy()


def decode_control(buf):
    d = json.loads(bytes(buf).decode())
    op = d.pop("op", None)
    cls = _OPS.get(op)
    if cls is None:
        raise RuntimeError(f"unknown control record {op!r}")
    names = {f.name for f in fields(cls)}
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names})


# -- records of the shared lifecycle ---------------------------------------------------------
@dataclass(frozen=True)
class Start(Control):
    """Rank 0 -> every worker: go (restoring checkpoint `resume_id` from `resume_dir` if set), with
    run.sources as rank 0 resolved it (an "auto" job's: ranks.py), or the startup error to exit
    with."""
    error: str | None = None
    resume_dir: str | None = None
    resume_id: int = -1
    sources: int = 1
    part: int = 0            # several sources: the part of the input they start at (a resume's)


@dataclass(frozen=True)
class Marker(Control):
    """Checkpoint marker: forwarded along every downstream link; a rank's state is cut when the
    first copy arrives, and the messages that arrive on a link before its own copy are saved with
    it (channel state), so a ring or a chain is cut consistently without pausing."""
    id: int = 0
    epoch: int = 0
    dir: str = ""
    cut: str = ""          # the cut's identity, bound into every rank file of it (checkpoint.py)


@dataclass(frozen=True)
class MarkerDone(Control):
    """A rank's part of checkpoint `id` is written; `files`: [[name, rows, bytes, sha256]] of
    the result files it commits (the results up to the cut are their rows); `digest`: its rank
    file's, which the manifest records."""
    id: int = 0
    files: tuple = ()
    digest: str = ""
    snapshots: tuple = ()  # [[name, rows, bytes, sha256]] of the aggregate snapshots it has written
    oldest: object = None  # an outer join's: per stream, the oldest seq the rank held at the cut (-1: none;
                           # None: not told), in its state or channel state (storage/lone_rows.py)


@dataclass(frozen=True)
class Eos(Control):
    """End of stream on one link: its sender will send no more DATA on it."""


@dataclass(frozen=True)
class PartEnd(Control):
    """A source -> an entry (run.sources > 1): part `part` of the input is all sent; the entry's
    next part comes from the next source (slaves/inbox.py)."""
    part: int = 0


@dataclass(frozen=True)
class Go(Control):
    """Rank 0 -> an extra source: every rank is ready, start the replay (at input offset `offset`,
    a resumed run's, with `sent` DATA messages counted before it), and start no part >= `upto`
    before a Lease says so."""
    offset: int = 0
    sent: int = 0
    upto: int = 0


@dataclass(frozen=True)
class Lease(Control):
    """Rank 0 -> an extra source: parts below `upto` may start. With a checkpoint (`id` >= 0):
    put its marker on every entry link before the first part >= `part` (every source cuts at the
    same place of the input, one that no source has passed: the lease held them all below it).
    With `moves`: route each unit to its new holder from `part` on, and tell both holders where
    in the input the move is (MoveOut and Install with that part). With `changes`: the router's
    changes of its routing (Operator.apply_change), applied before the first part >= `part`."""
    upto: int = 0
    id: int = -1
    part: int = 0
    epoch: int = 0
    cut: str = ""
    moves: tuple = ()      # (unit, from, to) moves every source applies before its first part >= `part`
    changes: tuple = ()    # the router's changes every source applies there, after the moves


@dataclass(frozen=True)
class CutSent(Control):
    """An extra source -> rank 0: its marker of checkpoint `id` is out, after `sent` DATA messages
    (rank 0 keeps the count with the checkpoint, for a resumed run's termination counts)."""
    id: int = 0
    sent: int = 0


@dataclass(frozen=True)
class Probe(Control):
    """Termination probe (four-counter method): a worker answers with its data message counts."""
    wave: int = 0


@dataclass(frozen=True)
class ProbeReply(Control):
    """A worker's answer to a Probe: its DATA message counts."""
    wave: int = 0
    sent: int = 0          # DATA messages sent to other workers
    received: int = 0      # DATA messages received from other workers


@dataclass(frozen=True)
class Fin(Control):
    """Everything is processed everywhere: flush, report and stop."""


@dataclass(frozen=True)
class LoadRequest(Control):
    """Rank 0 asks a worker for its load (answered with a LoadReport, at once)."""


@dataclass(frozen=True)
class LoadReport(Control):
    """A worker's load since its last report: buffer occupancy (tuples waiting / capacity,
    averaged over batches), CPU busy fraction (CPU seconds / wall seconds), and the bytes of
    state it holds now."""
    occupancy: float = 0.0
    busy: float = 0.0
    tuples: int = 0
    window_full: bool = False
    state_bytes: int = 0          # window state held (the module's stats()["state_bytes"]): its memory load


# -- moving a unit of state between workers (runtime-owned; see slaves/worker.py) -------------
@dataclass(frozen=True)
class MoveOut(Control):
    """driver -> the unit's holder, handled on arrival (never before a queued marker): take unit
    `unit` out of the module, with the queued input rows that belong to it, and send them to
    rank `to` as one STATE message. `epoch`: the routing epoch the move begins."""
    unit: int = 0
    to: int = 0
    epoch: int = 0
    part: int = -1         # several sources: in order with the input, at the start of this part


@dataclass(frozen=True)
class Install(Control):
    """driver -> the unit's new holder, in order with its DATA: put the state that rank `src`
    sends into the module, then join its queued input under `bounds` (the expiry bounds when
    the move began); the driver's DATA behind this record waits until then."""
    unit: int = 0
    src: int = 0
    epoch: int = 0
    bounds: tuple = ()
    part: int = -1         # several sources: at the start of this part of the input


@dataclass(frozen=True)
class Moved(Control):
    """worker -> driver: its half (`side` "out" or "in") of moving `unit` is done."""
    unit: int = 0
    side: str = ""
