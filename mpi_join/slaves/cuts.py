"""A worker's checkpoints (Chandy-Lamport, no pause) and its restore.

The first copy of a marker cuts the rank's state: the caller flushes results into committed
files and gives the module's snapshot and the counters; the marker then goes out on every
downstream link. DATA that arrives on an upstream link before that link's own copy is recorded as
channel state. When every upstream link has delivered its copy, the rank file is written and the
driver told. A restore reads the rank file back (every array checked against its digest) and
replays the channel state, unacknowledged (it was acknowledged before the cut)."""
import numpy as np

from ..errors import InputError
from ..storage import checkpoint as ck
from ..storage.checksums import as_rows
from ..storage.lone_rows import finality
from ..storage.results import part_of
from ..runtime.operator import Output, oldest, oldest_seqs
from ..runtime.graph import DRIVER, RESULTS
from ..runtime.protocol import DataHeader, MarkerDone


class Cut:
    """A checkpoint in progress on this rank: the open rank file and the links still recording."""

    def __init__(self, marker, waiting, arrays, attrs):
        self.marker = marker
        self.waiting = set(waiting)
        self.channel = []                  # (src, header ints, batches) recorded after the cut
        self.arrays, self.attrs = arrays, attrs


class Cuts:
    def __init__(self, rank, up, link_dtypes, module):
        self.rank, self.up, self.link_dtypes, self.module = rank, up, link_dtypes, module
        self.cut = None

    def record(self, src, header, batches):
        """DATA handed over: channel state if `src` has not yet delivered its marker copy."""
        if self.cut is not None and src in self.cut.waiting:
            self.cut.channel.append((src, header.encode(), [b.copy() for b in batches]))

    def marker(self, src, m, state, input_part=None):
        """A marker copy from `src`. Returns True when it begins a cut (the caller forwards the
        marker); `state()` -> (module arrays, module attrs, counters) is called then. Returns
        the MarkerDone to send the driver once every upstream copy is in, else None, as the
        second element. `input_part`: with the input's copy (several sources), the part of the
        input it stands at, where the sources resume: a cut begun on a neighbour's copy records
        the input up to there as channel state, so the restored inbox continues from that part."""
        began = False
        if self.cut is None or self.cut.marker.id != m.id:
            if self.cut is not None:
                raise RuntimeError(f"worker {self.rank}: checkpoint {m.id} began before {self.cut.marker.id} ended")
            arrays, attrs, counters = state()
            self.cut = Cut(m, [u for u in self.up if u != src],
                           {f"module/{k}": np.array(v, copy=True) for k, v in arrays.items()},
                           {"module": attrs, "epoch": m.epoch, **counters})
            began = True
        else:
            self.cut.waiting.discard(src)
        if input_part is not None:
            self.cut.attrs["input_part"] = input_part
        return began, (self._finish() if not self.cut.waiting else None)

    def _finish(self):
        c, self.cut = self.cut, None
        arrays = dict(c.arrays)
        chan = []
        for k, (src, header, batches) in enumerate(c.channel):
            arrays[f"channel/{k}/header"] = np.asarray(header, np.int64)
            for s, b in enumerate(batches):
                arrays[f"channel/{k}/{s}"] = b
            chan.append(src)
        digest = ck.write_rank(c.marker.dir, c.marker.id, self.rank, arrays, dict(c.attrs, channel=chan), c.marker.cut)
        held = c.attrs.get("oldest")
        if held is not None:                # the tuples in channel state are held too
            for _, _, batches in c.channel:
                held = oldest_seqs(batches, len(held), self.module.job.stream_names, into=held)
            held = tuple(-1 if v is None else v for v in held)
        return MarkerDone(c.marker.id, tuple(c.attrs["new_files"]), digest, tuple(c.attrs["snapshot_records"]), held)

    def state_dtype(self, name, attrs):
        parts = name.split("/")
        if parts[0] == "module":
            return self.module.state_dtype("/".join(parts[1:]))
        if parts[0] == "channel" and len(parts) == 3:
            if parts[2] == "header":
                return np.dtype(np.int64)
            dts = self.link_dtypes.get(attrs["channel"][int(parts[1])], ())
            return dts[int(parts[2])] if int(parts[2]) < len(dts) else None
        return None

    def restore(self, root, cid):
        """Read this rank's file of checkpoint `cid`, restore the module; returns (its attrs, the
        channel state as [(src, header, batches)])."""
        arrays, attrs = ck.read_rank(root, cid, self.rank, self.state_dtype, manifest="auto")
        self.module.restore({k[7:]: v for k, v in arrays.items() if k.startswith("module/")}, attrs["module"])
        channel = []
        for k, src in enumerate(attrs.get("channel", [])):
            header = DataHeader.decode(arrays[f"channel/{k}/header"])
            batches = [arrays.get(f"channel/{k}/{s}", np.zeros(0, dt)) for s, dt in enumerate(self.link_dtypes[src])]
            channel.append((src, header, batches))
        return attrs, channel


def worker_state(w):
    """What a worker's cut holds: its module's state and the lifecycle's counts (results up to
    the cut in committed files, on disk, first)."""
    w.writer.flush(wait=True)
    arrays, attrs = w.module.snapshot()
    return arrays, attrs, {"results": w.metrics.results, "tuples_in": w.metrics.tuples_in,
                           "sent": w.outbox.sent, "received": w.received, "input_part": w.inbox.part,
                           "marked": w.inbox.marked, "new_files": w.writer.new_records(),
                           "next_part": w.writer.next_number,
                           "snapshot_records": w.writer.snapshot_records(),
                           # where an outer join's lone rows are final once no rank holds them (lone_rows.py)
                           "oldest": oldest(w.module) if finality(w.job) == "held" else None}


def restore_worker(w, root, cid, part=0):
    """A worker from checkpoint `cid`: its module, counts and writer as at the cut, and the
    channel state replayed into its inbox (unacknowledged: the senders counted them already).
    `part`: with several sources, the part of the input they resume at (rank 0's Start). Returns
    the DATA messages the worker had handled at the cut (its termination count goes on from there),
    and an Output of results its module made as it restored (or None)."""
    man = ck.manifest_of(root, cid)[0]
    if man is not None and ck.rescaled(man, w.tx.size, len(w.graph.sources)):
        out = restore_rescaled(w, root, cid, man)
        w.inbox.resume_at(part)
        return 0, out
    attrs, channel = w.cuts.restore(root, cid)
    w.metrics.record(results=attrs["results"], tuples_in=attrs["tuples_in"])
    w.outbox.resumed(attrs["sent"])
    w.inbox.resume_at(attrs.get("input_part", 0), attrs.get("marked", -1))
    w.writer.resume(attrs.get("file_records", ()), attrs["snapshot_records"], after=attrs.get("next_part", 0) - 1)
    for src, header, batches in channel:
        w.inbox.data(src, header, batches, ack=False)
    return attrs["received"], None


def restore_rescaled(w, root, cid, man):
    """A worker of a run on another rank count than checkpoint `cid`'s (a strategy whose
    registry entry says `rescale`, one source: checkpoint._rescalable): its module's state out of
    the old workers' files (Operator.restore_rescaled: by default the key groups the plan gives
    it; only the arrays it takes are read and checked, rank 0 verified every file whole before
    the start), and the result files the checkpoint committed under its rank's name (the last
    worker also takes those of ranks this run does not have), so every committed result is
    counted once. Its links are new: nothing sent or received on them yet. Results the module
    makes as it restores (an old worker's channel state joined against the rows it holds now)
    are written after the committed ones."""
    def read(r, keep, channel=None, state=None):
        """Old worker r's module arrays that `keep(name)` accepts and its module attrs; with
        `channel` (the dtypes of a message's batches on the links into r, or a function of the
        sending rank that gives them), also its channel state [(src, header, batches)], which is
        refused without. `state(name)`: the dtype of a module array, for a file of another kind
        of operator than this worker's."""
        def link(src):
            return channel(src) if callable(channel) else channel

        def expected(name, attrs):
            parts = name.split("/")
            if channel is not None and parts[0] == "channel" and len(parts) == 3:
                dts = link(attrs["channel"][int(parts[1])])
                return np.dtype(np.int64) if parts[2] == "header" else \
                    (dts[int(parts[2])] if int(parts[2]) < len(dts) else None)
            if state is not None and parts[0] == "module":
                return state("/".join(parts[1:]))
            return w.cuts.state_dtype(name, attrs)
        arrays, attrs = ck.read_rank(root, cid, r, expected, manifest=man,
                                     keep=lambda n: (n.startswith("module/") and keep(n[7:]))
                                     or (channel is not None and n.startswith("channel/")))
        module = {k[7:]: v for k, v in arrays.items() if k.startswith("module/")}
        if channel is None:
            if attrs.get("channel"):
                raise InputError(f"{ck.rank_file(root, cid, r)}: channel state in a checkpoint of one source; "
                                 f"it cannot be restored at another rank count")
            return module, attrs["module"]
        pending = [(src, DataHeader.decode(arrays[f"channel/{k}/header"]),
                    [arrays.get(f"channel/{k}/{s}", np.zeros(0, dt)) for s, dt in enumerate(link(src))])
                   for k, src in enumerate(attrs.get("channel", []))]
        return module, attrs["module"], pending
    from .drain import drained, reader
    k = int(man.get("sources", 1))
    old = list(range(1, int(man["ranks"]) - (k - 1)))     # the extra sources (the last ranks) write no file
    made = None
    if k > 1 or _in_flight(w, root, cid, man, old):     # rows in flight at the cut: carried to rest first
        _, mods, made = drained(w.module, read, old, type(w), sources=k)
        read = reader(mods)
    out = w.module.restore_rescaled(read, old, root, cid)
    if made is not None:         # the drain's results by the first worker, its snapshots by the last
        mine = Output(results=made.results if w.rank == min(w.graph.workers) else [],
                      snapshots=made.snapshots if w.rank == max(w.graph.workers) else [])
        out = mine.extend(out)
    last = max(w.graph.workers)
    committed = ck.committed_files(root, man)
    # rank 0's own (an outer join's lone rows) it counts itself (storage/lone_rows.py)
    taken = {n: rec for n, rec in committed.items()
             if part_of(n)[0] == w.rank or (w.rank == last and part_of(n)[0] not in (DRIVER, *w.graph.workers))}
    snaps = (man.get("snapshots") or {}) if w.rank == last else {}
    # numbered past every committed file, whoever wrote it: a writer's files after a rescale
    # come after all before it in the numbers too (verify --ordered reads the write order so)
    after = max([part_of(n)[1] for n in committed if part_of(n)] + [-1])
    w.writer.resume((), as_rows(snaps), after=after)
    w.metrics.record(results=sum(r["rows"] for r in taken.values()), tuples_in=0)
    assert out is None or (not out.forward and not out.control), "a restore sends nothing: the links are not up yet"
    return out


def _in_flight(w, root, cid, man, old):
    """Does checkpoint `cid` hold rows in flight on a link that carries no results (a vertex fed
    by several senders recorded what came after its first marker copy), unless a role of the
    strategy reads its channel state itself (Operator.in_flight = "own")? Then the old
    workers are drained first (drain.py): their rows replayed where the cut left them, in the
    order of each one's inbox, so every window is dealt whole and in seq order; replaying them
    into the new vertices instead would put rows into windows merged from several old ones
    after rows newer than they are. Every worker decides alike: all drain, or none does."""
    from ..runtime.operator import old_graph
    from ..strategies import get
    info = get(w.job.strategy.name)           # every worker decides alike: by the strategy's roles
    if any(info.load_role(role).in_flight == "own" for role in {w.graph.role(r) for r in w.graph.workers}):
        return False
    graph = old_graph(w.module, old)
    for r in old:
        _, attrs = ck.read_rank(root, cid, r, None, manifest=man, keep=lambda n: False)
        if any(graph.carries(src, r) != RESULTS for src in attrs.get("channel", [])):
            return True
    return False
