"""The driver's side of checkpoints: when to cut, the markers, and the manifest (checkpoint.py)."""
import secrets
import time
from dataclasses import dataclass

from ..storage import checkpoint as ck
from ..storage.checksums import as_records
from ..runtime.protocol import Marker, Tag


class Checkpointer:
    """Markers go to the entry workers (they forward them along the graph); every worker
    reports when its rank file is written; the driver's own state and then the manifest follow.

    With several sources (run.sources = k) a cut is at a part boundary: each source puts the
    marker on its entry links itself, before its first part at or past it (driver.py), and says
    how many DATA messages it had sent then (`marked`); the cut completes with all k counts and
    every worker's file."""

    def __init__(self, job, tx, entries, workers, nranks, first_id=0, sources=(0,), part_rows=None, decides=True):
        """`decides`: rank 0's; an extra source cuts nothing of its own, it puts out the markers
        rank 0 leases to it (feeder.py)."""
        self.cfg = job.checkpoint if decides else None
        self.tx, self.entries, self.workers, self.nranks = tx, list(entries), list(workers), nranks
        self.sources, self.part_rows = list(sources), part_rows
        self.fp = ck.fingerprint(job)
        self.next_id = first_id
        self.pending = {}
        self.completed = []
        self.input = None                  # the staged input's file records (set by the driver)
        self.commits = None                # a followed run's results log (commits.py), set by runtime
        self.commit_rows = job.commit_rows
        self.cut_at = (0, 0)               # (input offset, results) at the last cut
        self.ledger = None                 # the committed result files (ledger.py), begun at the first cut
        self.committed = (0, 0)            # (files, results) committed so far
        self._last_offset = None
        self._last_t = time.perf_counter()
        self.lone = None                   # an outer join's lone rows, counted at each cut (storage/lone_rows.py)

    def record_input(self, records):
        """The staged input's file records as the next cut holds them (a followed log's grow)."""
        self.input = records

    def count_lone_rows(self, lone):
        """An outer join whose lone rows rank 0 writes (storage/lone_rows.py): each cut counts them."""
        self.lone = lone

    def commit_with(self, commits):
        """A followed run: its cuts commit results (commits.Commits)."""
        self.commits = commits

    def resumed(self, cid, root=None):
        """A run resumed from checkpoint `cid` (of directory `root`): its next one is cid + 1, and
        its ledger goes on from the files that checkpoint committed."""
        self.next_id = cid + 1
        if self.cfg is not None and root is not None:
            from ..storage import ledger
            man = ck.manifest_of(root, cid)[0]
            if isinstance(man.get("ledger"), dict):
                _, prefix = ledger.read(root, man["ledger"])
                self.ledger = ledger.Ledger(self.cfg.dir).start(prefix, man["ledger"]["entries"])
            else:                        # a checkpoint written before the ledger: its manifest lists them
                recs = ck.committed_files(root, man)
                self.ledger = ledger.Ledger(self.cfg.dir).start()
                self.ledger.append(recs)
            self.committed = (self.ledger.entries, int(man.get("results") or 0))

    @property
    def enabled(self):
        return self.cfg is not None

    def start_clock(self, offset):
        self._last_offset = offset
        self._last_t = time.perf_counter()

    def due(self, offset, results=0):
        """A cut is due by its schedule, or (a followed run) by the results not yet committed."""
        if self.commits is not None and not self.pending and results - self.cut_at[1] >= self.commit_rows:
            return True
        if not self.enabled or self.pending:      # one cut at a time: a marker may still be circling
            return False
        c = self.cfg
        return ((c.every_tuples is not None and offset - self._last_offset >= c.every_tuples) or
                (c.every_ns is not None and (time.perf_counter() - self._last_t) * 1e9 >= c.every_ns))

    def commit_due(self, offset, results):
        """A followed run with nothing new to read commits what was joined since the last cut."""
        return self.commits is not None and self.due(offset, results) and self.cut_at != (offset, results)

    def cut(self, epoch, offset, arrays, attrs, results=0):
        """A checkpoint after `epoch` at input `offset`: with one source its marker goes on every
        entry link now; with several, each source sends it at the offset (driver.py). The
        driver's own state at the cut (`arrays`, `attrs`) is written when every worker has saved
        its part. Returns the Marker."""
        self.cut_at = (offset, results)
        cid = self.next_id
        self.next_id += 1
        marker = Marker(cid, epoch, self.cfg.dir, secrets.token_hex(8))
        if len(self.sources) == 1:
            msg = marker.encode()
            for p in self.entries:
                self.tx.send(p, Tag.CTRL, msg)
        self.pending[cid] = {"epoch": epoch, "offset": offset, "arrays": arrays, "attrs": attrs, "acks": {},
                             "cut": marker.cut, "sent": {} if len(self.sources) > 1 else {0: attrs.get("sent")}}
        self.start_clock(offset)
        return marker

    def marked(self, cid, src, sent):
        """Source `src` has put checkpoint `cid`'s marker out after `sent` DATA messages."""
        p = self.pending[cid]
        p["sent"][src] = sent
        self._maybe_finish(cid)

    def on_ack(self, src, msg):
        p = self.pending[msg.id]
        p["acks"][src] = msg
        self._maybe_finish(msg.id)

    def _maybe_finish(self, cid):
        p = self.pending[cid]
        if len(p["acks"]) == len(self.workers) and len(p["sent"]) == len(self.sources):
            self._finish(cid, self.pending.pop(cid))

    def _finish(self, cid, p):
        attrs = dict(p["attrs"], epoch=p["epoch"], input_offset=p["offset"], sent=p["sent"][0],
                     sources_sent={str(r): n for r, n in p["sent"].items() if r != 0})
        new = as_records(row for a in p["acks"].values() for row in a.files)   # closed since the last cut
        arrays = p["arrays"]
        if self.lone is not None:          # the tuples this cut made final: their lone rows go with it
            new = dict(new, **self.lone.cut(p["offset"], new, [a.oldest for a in p["acks"].values()]))
            state, attrs["lone"] = self.lone.state()
            arrays = dict(arrays, **state)
        digest = ck.write_rank(self.cfg.dir, cid, 0, arrays, attrs, p["cut"])
        digests = {"0": digest, **{str(src): a.digest for src, a in p["acks"].items()}}
        snaps = as_records(row for a in p["acks"].values() for row in a.snapshots)
        if self.ledger is None:
            from ..storage.ledger import Ledger
            self.ledger = Ledger(self.cfg.dir).start()
        ref = self.ledger.append(new)
        results = self.committed[1] + sum(r["rows"] for r in new.values())
        self.committed = (ref["entries"], results)
        ck.write_manifest(self.cfg.dir, cid, {
            "epoch": p["epoch"], "input_offset": p["offset"], "ranks": self.nranks, "fingerprint": self.fp,
            "sources": len(self.sources), "part_rows": self.part_rows,
            "cut": p["cut"], "rank_files": digests, "ledger": ref, "snapshots": snaps,
            "results": results, "input": self.input,
        })
        self.completed.append(cid)
        ck.prune(self.cfg.dir, self.cfg.keep)
        if self.commits is not None:
            self.commits.commit(cid, p["offset"], new, results)


def restore_router(router, root, cid):
    """Rank 0's router state at checkpoint `cid` into `router` (with several sources every
    source's router routes alike at the cut: each takes rank 0's); returns the rank file's
    attributes."""
    arrays, attrs = ck.read_rank(root, cid, 0, lambda n, _: router.state_dtype(n[7:]) if n.startswith("router/")
                                 else None, manifest="auto", keep=lambda n: n.startswith("router/"))
    router.restore({k[7:]: v for k, v in arrays.items()}, attrs["router"])
    return attrs


def restore_lone(lone, root, cid):
    """An outer join's open tuples at checkpoint `cid` (storage/lone_rows.py) into `lone`; the
    result files it committed were counted before it."""
    from ..storage.lone_rows import LoneRows
    arrays, attrs = ck.read_rank(root, cid, 0, lambda n, _: LoneRows.dtype(n) if n.startswith("lone/") else None,
                                 manifest="auto", keep=lambda n: n.startswith("lone/"))
    lone.restore(arrays, attrs["lone"], ck.committed_files(root, ck.manifest_of(root, cid)[0]))


@dataclass(frozen=True)
class Resumed:
    """What rank 0 goes on from at a restored cut: its DATA sent (on this run's links), each
    extra source's, the next epoch, the tuples it had sent, the lease (several sources)."""
    sent: int
    sources_sent: dict
    epoch: int
    tuples_out: int
    lease: int
    resumed_from: dict


def resume_driver(router, source, graph, nranks, root, cid):
    """Rank 0's part of checkpoint `cid`: the router's state (dealt anew at another rank
    count), the source at the cut's offset; returns the counts it goes on from (Resumed)."""
    attrs = restore_router(router, root, cid)
    source.resume_at(attrs["input_offset"])
    sent, sources_sent = attrs["sent"], attrs.get("sources_sent", {})
    if ck.rescaled(ck.manifest_of(root, cid)[0], nranks, len(graph.sources)):     # onto another graph
        router.rescale(root, cid)
        sent, sources_sent = 0, {}                         # new links: nothing sent on them yet
    return Resumed(sent, sources_sent, attrs["epoch"] + 1, attrs["tuples_out"],
                   source.origin // (source.part_rows or 1) + 2 * len(graph.sources),
                   {"checkpoint": cid, "input_offset": attrs["input_offset"]})
