"""Results committed as they come (README "Live streams"): a followed run makes its results
visible at each completed checkpoint, so a reader never sees a result that a resume could take
back and compute again.

    OUTPUT/_COMMITTED                the commit point, replaced atomically: every committed result
                                     part file (rows, bytes, SHA-256), the input offset they cover
    OUTPUT/commits/commit-NNNNNN.json  one per commit: the files it added

A checkpoint's cut closes every worker's result file: the files it records hold every result of
the input before its offset and none after. A followed run cuts at least every
`output.commit_every` and after `output.commit_rows` results; without a [checkpoint] table it
keeps its checkpoints in OUTPUT/_checkpoints (two of them), from which `--resume` restarts it.
"""
import json
import os
import re

from .durable import write_json
from ..errors import InputError

COMMITTED = "_COMMITTED"
DIR = "commits"
ENTRY = re.compile(r"commit-\d{6}\.json(\.tmp)?$")
FORMAT = "mpi-join-results-log/1"
IMPLICIT = "_checkpoints"


def read_committed(out):
    """The committed results of a run in `out` ({"files": {...}, ...}), or None if it has none."""
    p = os.path.join(out, COMMITTED)
    if not os.path.exists(p):
        return None
    try:
        with open(p, "rb") as f:
            rec = json.loads(f.read(64 << 20))
    except (OSError, ValueError) as e:
        raise InputError(f"{p}: the results commit record cannot be read ({str(e)[:100]})") from None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT or not isinstance(rec.get("files"), dict):
        raise InputError(f"{p}: not a results commit record of this mpi-join (format {FORMAT})")
    return rec


class Commits:
    """Rank 0's side: write a commit when a checkpoint completes, and the last one at the end."""

    def __init__(self, out, resumed=None):
        self.out = out
        self.d = os.path.join(out, DIR)
        os.makedirs(self.d, exist_ok=True)
        prev = read_committed(out)
        self.n = prev["commits"] if prev and resumed is not None else 0
        self.files = dict(prev["files"]) if prev and resumed is not None else {}

    def resumed(self, kept, cid, say, offset=None):
        """After a resume from checkpoint `cid`: what is committed is what it kept. Commits a
        reader saw after it (only when a newer checkpoint was damaged and skipped) are said."""
        from .paths import remove_file
        later = sorted(set(self.files) - set(kept))
        if later:
            say(f"mpi-join: warning: {len(later)} result file(s) committed after checkpoint {cid} (which a reader "
                f"may have read) are recomputed; a newer checkpoint was not usable")
        for f in os.listdir(self.d):
            if ENTRY.fullmatch(f):
                with open(os.path.join(self.d, f)) as fh:
                    try:
                        e = json.load(fh)
                    except ValueError:
                        e = {}
                if e.get("checkpoint", -1) > cid or f.endswith(".tmp"):
                    remove_file(self.out, os.path.join(self.d, f))
        self.files = dict(kept)
        self.n = len([f for f in os.listdir(self.d) if ENTRY.fullmatch(f)])
        self._write({"checkpoint": cid, "input_offset": offset}, final=False, new={})

    def commit(self, cid, offset, records, results, final=False):
        """Commit the result files `records` ({name: {rows, bytes, sha256}}) covering the input
        before `offset` (checkpoint `cid`, or None for the run's end)."""
        new = {k: v for k, v in records.items() if k not in self.files}
        if not new and not final:
            return                       # nothing joined since the last commit
        self.files.update(new)
        self._write({"checkpoint": cid, "input_offset": offset, "results": results}, final, new)

    def _write(self, meta, final, new):
        import time
        entry = dict(meta, commit=self.n, committed_ns=time.time_ns(), files=new)
        write_json(os.path.join(self.d, f"commit-{self.n:06d}.json"), entry)
        self.n += 1
        write_json(os.path.join(self.out, COMMITTED), dict(
            meta, format=FORMAT, commits=self.n, final=final, committed_ns=entry["committed_ns"],
            results=sum(r["rows"] for r in self.files.values()), files=self.files))


