"""The master's side of checkpoints: when to cut, the markers, and the manifest (checkpoint.py)."""
import time

from .. import checkpoint as ck
from ..transport import Tag, pack_obj


class Checkpointer:
    def __init__(self, job, tx, peers, nranks, first_id=0):
        self.cfg = job.checkpoint
        self.tx, self.peers, self.nranks = tx, list(peers), nranks
        self.fp = ck.fingerprint(job)
        self.next_id = first_id
        self.pending = {}
        self.completed = []
        self._last_offset = None
        self._last_t = time.perf_counter()

    @property
    def enabled(self):
        return self.cfg is not None

    def start_clock(self, offset):
        self._last_offset = offset
        self._last_t = time.perf_counter()

    def due(self, offset):
        if not self.enabled:
            return False
        c = self.cfg
        return ((c.every_tuples is not None and offset - self._last_offset >= c.every_tuples) or
                (c.every_ns is not None and (time.perf_counter() - self._last_t) * 1e9 >= c.every_ns))

    def cut(self, epoch, offset, arrays, attrs):
        """Send a checkpoint marker after `epoch` to every peer; the master's own state at the cut
        (`arrays`, `attrs`) is written when every peer has saved its part."""
        cid = self.next_id
        self.next_id += 1
        msg = pack_obj({"kind": "checkpoint", "id": cid, "epoch": epoch, "dir": self.cfg.dir})
        for p in self.peers:
            self.tx.send(p, Tag.CTRL, msg)
        self.pending[cid] = {"epoch": epoch, "offset": offset, "arrays": arrays, "attrs": attrs, "acks": {}}
        self.start_clock(offset)

    def on_ack(self, src, msg):
        cid = msg["id"]
        p = self.pending[cid]
        p["acks"][src] = msg
        if len(p["acks"]) == len(self.peers):
            self._finish(cid, self.pending.pop(cid))

    def _finish(self, cid, p):
        ck.write_rank(self.cfg.dir, cid, 0, p["arrays"], dict(p["attrs"], epoch=p["epoch"], input_offset=p["offset"]))
        files = sorted(f for a in p["acks"].values() for f in a["files"])
        ck.write_manifest(self.cfg.dir, cid, {
            "epoch": p["epoch"], "input_offset": p["offset"], "ranks": self.nranks, "fingerprint": self.fp,
            "committed_files": files, "results": sum(a["results"] for a in p["acks"].values()),
        })
        self.completed.append(cid)
        ck.prune(self.cfg.dir, self.cfg.keep)
