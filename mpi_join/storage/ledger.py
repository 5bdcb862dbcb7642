"""The committed result files of a run's checkpoints, appended to as they are committed.

A checkpoint commits the result files its workers closed at the cut. Their records (name, rows,
bytes, SHA-256) go to one append-only file beside the checkpoints, `_committed.jsonl` (a JSON
list [name, rows, bytes, sha256] a line), and the manifest records only how far the file went
at its cut: `{"entries", "bytes", "sha256"}` (the SHA-256 of that prefix). A commit then costs
the files it adds, not every file the run has written (an hour of four commits a second is
about 18,000 files, which a manifest listing them all rewrote, summed and parsed each time).

A resume reads the prefix its checkpoint recorded, checks its digest (a ledger changed or cut
short fails it, and the checkpoint is skipped like any damaged one), and starts the run's
ledger again from that prefix: lines a later, unfinished checkpoint appended are dropped.
"""
import hashlib
import json
import os

from ..errors import InputError

NAME = "_committed.jsonl"


def path_of(root):
    return os.path.join(root, NAME)


class Ledger:
    """Rank 0's ledger in checkpoint directory `root`: `start(prefix)` begins it (empty, or the
    verified bytes a resumed checkpoint recorded), `append(records)` adds a cut's files and
    returns the reference its manifest keeps."""

    def __init__(self, root):
        self.root, self.path = root, path_of(root)
        self.entries, self.size, self.sum = 0, 0, hashlib.sha256()

    def start(self, prefix=b"", entries=0):
        """Write the ledger anew holding `prefix` (whole lines), atomically."""
        os.makedirs(self.root, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(prefix)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.entries, self.size, self.sum = entries, len(prefix), hashlib.sha256(prefix)
        return self

    def append(self, records):
        """Append `records` ({name: {rows, bytes, sha256}}) durably; returns the manifest's
        reference to the ledger as it then stands."""
        text = "".join(json.dumps([n, r["rows"], r["bytes"], r["sha256"]]) + "\n"
                       for n, r in sorted(records.items())).encode()
        if text:
            with open(self.path, "r+b") as f:
                f.truncate(self.size)            # what an unfinished cut appended goes
                f.seek(self.size)
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            self.entries, self.size = self.entries + len(records), self.size + len(text)
            self.sum.update(text)
        return {"entries": self.entries, "bytes": self.size, "sha256": self.sum.hexdigest()}


def read(root, ref):
    """(records {name: {rows, bytes, sha256}}, the prefix's bytes) of the ledger in `root` as
    the reference `ref` recorded it, or InputError naming the file and what is wrong."""
    p = path_of(root)
    if not isinstance(ref, dict) or not all(isinstance(ref.get(k), int) for k in ("entries", "bytes")):
        raise InputError(f"{p}: the manifest's reference to the committed files is not one mpi-join writes")
    try:
        with open(p, "rb") as f:
            data = f.read(ref["bytes"])
    except FileNotFoundError:
        raise InputError(f"{p}: the ledger of committed result files is missing") from None
    except OSError as e:
        raise InputError(f"{p}: the ledger of committed result files cannot be read ({e.strerror})") from None
    if len(data) != ref["bytes"] or hashlib.sha256(data).hexdigest() != ref.get("sha256"):
        raise InputError(f"{p}: the ledger of committed result files is not what the checkpoint recorded (cut "
                         f"short or changed)")
    records = {}
    for line in data.splitlines():
        n, rows, size, digest = json.loads(line)
        records[n] = {"rows": rows, "bytes": size, "sha256": digest}
    if len(records) != ref["entries"]:
        raise InputError(f"{p}: the ledger holds {len(records)} committed files where the checkpoint recorded "
                         f"{ref['entries']}")
    return records, data
