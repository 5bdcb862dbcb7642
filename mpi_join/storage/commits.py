"""Results committed as they come (README "Live streams"): a followed run makes its results
visible at each completed checkpoint, so a reader never sees a result that a resume could take
back and compute again.

    OUTPUT/_COMMITTED                the commit point, replaced atomically: how many commits there
                                     are, the results they hold, the input offset they cover
    OUTPUT/commits/commit-NNNNNN.json  one per commit: the files it added (rows, bytes, SHA-256),
                                     written before the commit point names it

The committed files are the union of commits 0 to `commits` - 1, so a commit writes what it
adds and a follower reads only the commits it has not seen (read_commits): neither grows with
the files committed before (format /1 listed every file in _COMMITTED each time).

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
FORMAT = "mpi-join-results-log/2"
FORMATS = ("mpi-join-results-log/1", FORMAT)      # /1: every committed file in _COMMITTED
IMPLICIT = "_checkpoints"


def read_committed(out, files=True):
    """The committed results of a run in `out` ({"commits", "results", "input_offset", ...,
    with `files` also "files": {name: record} of every commit}), or None if it has none."""
    p = os.path.join(out, COMMITTED)
    for attempt in range(3):
        if not os.path.exists(p):
            return None
        try:
            with open(p, "rb") as f:
                rec = json.loads(f.read(64 << 20))
        except (OSError, ValueError) as e:
            raise InputError(f"{p}: the results commit record cannot be read ({str(e)[:100]})") from None
        if not isinstance(rec, dict) or rec.get("format") not in FORMATS or not isinstance(rec.get("commits"), int) \
                or (rec["format"] != FORMAT and not isinstance(rec.get("files"), dict)):
            raise InputError(f"{p}: not a results commit record of this mpi-join (format {FORMAT})")
        if not files or "files" in rec:
            return rec
        try:
            got = {}
            for e in read_commits(out, 0, rec["commits"]):
                got.update(e["files"])
            return dict(rec, files=got)
        except FileNotFoundError:         # a resume took later commits back as it was read: again
            continue
    raise InputError(f"{p}: the results commit record kept changing while it was read (a run resuming?); try again")


def read_commits(out, first, end):
    """The commit entries numbered first .. end - 1 of a run in `out`, each {"files": {...}, ...};
    FileNotFoundError where one is gone (a resume took it back), InputError where one is damaged."""
    got = []
    for i in range(first, end):
        p = os.path.join(out, DIR, f"commit-{i:06d}.json")
        with open(p, "rb") as f:
            try:
                e = json.loads(f.read())
            except ValueError as err:
                raise InputError(f"{p}: the commit entry cannot be read ({str(err)[:100]})") from None
        if not isinstance(e, dict) or not isinstance(e.get("files"), dict):
            raise InputError(f"{p}: not a commit entry of this mpi-join")
        got.append(e)
    return got


class Commits:
    """Rank 0's side: write a commit when a checkpoint completes, and the last one at the end."""

    def __init__(self, out, resumed=None):
        self.out = out
        self.d = os.path.join(out, DIR)
        os.makedirs(self.d, exist_ok=True)
        prev = read_committed(out) if resumed is not None else None
        self.n = prev["commits"] if prev else 0
        self.files = set(prev["files"]) if prev else set()     # names: what a commit adds is new
        self.results = prev["results"] if prev else 0

    def resumed(self, kept, cid, say, offset=None):
        """After a resume from checkpoint `cid`: what is committed is what it kept. Commits a
        reader saw after it (only when a newer checkpoint was damaged and skipped) are said."""
        from .paths import remove_file
        later = sorted(self.files - set(kept))
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
                if f.endswith(".tmp") or ("checkpoint" in e and (e["checkpoint"] is None or e["checkpoint"] > cid)):
                    remove_file(self.out, os.path.join(self.d, f))       # later, or the end of a run
        self.n = len([f for f in os.listdir(self.d) if ENTRY.fullmatch(f)])
        held = set()
        for e in read_commits(self.out, 0, self.n):
            held.update(e["files"])
        # what the checkpoint kept and no commit left names (a run before that did not commit):
        # this commit adds it, so the commits' union is what is committed
        self.files = set(kept)
        self.results = sum(r["rows"] for r in kept.values())
        self._write({"checkpoint": cid, "input_offset": offset}, final=False,
                    new={n: r for n, r in kept.items() if n not in held})

    def commit(self, cid, offset, records, results, final=False):
        """Commit the result files of `records` ({name: {rows, bytes, sha256}}) not committed yet,
        which with those before hold `results` results, covering the input before `offset`
        (checkpoint `cid`, or None for the run's end)."""
        new = {k: v for k, v in records.items() if k not in self.files}
        if not new and not final:
            return                       # nothing joined since the last commit
        self.files.update(new)
        self.results = results
        self._write({"checkpoint": cid, "input_offset": offset, "results": results}, final, new)

    def _write(self, meta, final, new):
        import time
        entry = dict(meta, commit=self.n, committed_ns=time.time_ns(), files=new)
        write_json(os.path.join(self.d, f"commit-{self.n:06d}.json"), entry)
        self.n += 1
        write_json(os.path.join(self.out, COMMITTED), dict(
            meta, format=FORMAT, commits=self.n, final=final, committed_ns=entry["committed_ns"],
            results=self.results, files_committed=len(self.files)))


