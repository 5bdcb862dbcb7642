"""The staged log's own files in its directory (storage/staged_log.py): each written whole
(a hidden temporary name, fsync, then an atomic rename), the rows waiting for the watermark
saved and loaded with their checksum, and what a stager killed before its commit left behind
swept away (never a committed file); landing files that changed after staging quarantined.
Every path is under the log's directory."""
import os

import numpy as np
import pyarrow.parquet as pq

from ..errors import InputError
from .checksums import file_sha256
from .durable import write_json
from .staged import MANIFEST

LOG = "_log"


class LogFiles:
    def __init__(self, out, names):
        self.out, self.names = out, names

    def load_pending(self, rec, dtypes):
        """The rows waiting after the last commit (`rec`: the log's "pending" record), checked
        against the checksum committed with them."""
        empty = [np.zeros(0, dt) for dt in dtypes]
        if not rec:
            return empty
        p = os.path.join(self.out, LOG, rec["file"])
        if not os.path.isfile(p) or file_sha256(p) != rec["sha256"]:
            raise InputError(f"{p}: the rows waiting for the watermark are missing or changed since they were "
                             f"committed; the log cannot continue exactly once; pass --force to start a new log")
        with np.load(p, allow_pickle=False) as z:
            return [z[n].astype(dt) if n in z else e for n, dt, e in zip(self.names, dtypes, empty)]

    def save_pending(self, b, keep):
        name = f"pending-{b:06d}.npz"
        d = os.path.join(self.out, LOG)
        tmp = os.path.join(d, f".{name}")
        with open(tmp, "wb") as f:
            np.savez(f, **{n: p for n, p in zip(self.names, keep)})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(d, name))
        return {"file": name, "rows": int(sum(len(p) for p in keep)), "sha256": file_sha256(os.path.join(d, name))}

    def sweep(self, man):
        """Remove what a batch killed before its commit left behind (never a committed file)."""
        from .paths import remove_file
        log = man["log"]
        keep_q = {f for v in log["quarantine_files"].values() for f in v}
        pend = (log.get("pending") or {}).get("file")
        for n in self.names:
            d = os.path.join(self.out, n)
            for f in os.listdir(d):
                if f.startswith((".part-", "part-b")) and f not in man["files"].get(n, {}):
                    remove_file(self.out, os.path.join(d, f))
            q = os.path.join(self.out, "_quarantine", n)
            for f in os.listdir(q):
                if f.startswith((".", "late-b", "bad-b")) and f"{n}/{f}" not in keep_q:
                    remove_file(self.out, os.path.join(q, f))
        d = os.path.join(self.out, LOG)
        for f in os.listdir(d):
            stale = (f.startswith("pending-") and f != pend) or f.startswith(".") or (
                f.startswith("batch-") and f[6:12].isdigit() and int(f[6:12]) >= log["batches"])
            if stale:
                remove_file(self.out, os.path.join(d, f))

    def quarantine(self, stream, name, table):
        self.parquet(os.path.join(self.out, "_quarantine", stream), name, table)
        return f"{stream}/{name}"

    def parquet(self, d, name, table):
        tmp = os.path.join(d, f".{name}.tmp")
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(d, name))

    def json(self, d, name, obj):
        write_json(os.path.join(d, name), obj, tmp=os.path.join(d, f".{name}.tmp"))

    def manifest(self, man):
        self.json(self.out, MANIFEST, man)


def quarantine_changed(w, say):
    """Landing files that changed after they were staged (landed.changed): the content not
    staged goes to _quarantine/_rewritten/<stream>/, counted as quarantined, with one line
    said per file; the manifest is written when any did. Returns how many files changed."""
    from .landed import CUT, LINES, changed, keep_staged, new_content
    from .paths import inside, plain_dir
    found = changed(w.log["landed"], os.path.join(w.out, LOG, LINES))
    streams = {s.name: s for s in w.job.streams}
    for uri, rec, now, reason in found:
        if reason == CUT:              # what is left was staged: its rows stand, nothing is new
            w.log["landed"][uri] = keep_staged(rec, now)
            say(f"stage --follow: warning: {uri}: {reason} ({rec['bytes']:,} -> {now['bytes']:,} bytes): what is "
                f"left of it was staged before; nothing to quarantine (a landed file must not change)")
            continue
        n, s = rec["stream"], streams.get(rec["stream"])
        t = new_content(uri, rec, now, reason, s.raw.format if s and s.raw else "csv",
                        bool(s and s.raw and s.raw.header))
        d = os.path.join(w.out, "_quarantine", "_rewritten", n)
        plain_dir(d, "a folder the log writes")
        os.makedirs(inside(w.out, d), exist_ok=True)
        name = f"rewritten-{len([f for f in os.listdir(d) if f.startswith('rewritten-')]):06d}.parquet"
        w.files.parquet(d, name, t)
        w.log["landed"][uri] = keep_staged(rec, now)
        w.log["rewritten"][n] = w.log["rewritten"].get(n, 0) + t.num_rows
        w.man["quarantined"][n] += t.num_rows
        say(f"stage --follow: warning: {uri}: {reason} ({rec['bytes']:,} -> {now['bytes']:,} bytes): "
            f"{t.num_rows:,} row(s) not staged, quarantined in {os.path.join(d, name)}; a landed file must "
            f"not change (write under a hidden name, then rename)")
    if found:
        w.files.manifest(w.man)
    return len(found)

