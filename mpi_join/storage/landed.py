"""What the stager read of each landing file, and what it does when one changes afterwards.

The producer contract (README "Live streams"): a file is written under a hidden name and renamed
into the landing directory when complete, and a landed file is never written again. Spark's file
source reads a name once; a file rewritten, appended to or truncated under a name already read
would otherwise be lost in silence. The stager records each file it committed rows of (size,
modification time, change time, inode, SHA-256 of what it read), looks again between micro-batches, and
quarantines the new content of a file that changed, counted in the log, with one line said.
"""
import hashlib
import json
import os

import numpy as np
import pyarrow as pa

FIELDS = ("bytes", "mtime_ns", "ino")


def local_path(p):
    """The local path of a Spark file URI (file:/a, file:///a, escaped as a URI is: `a%20b.csv`
    for `a b.csv`) or a plain path; None for a stream source (socket://, another source), which
    has no file to look at."""
    from urllib.parse import unquote
    if p.startswith("file://"):
        return unquote(p[len("file://"):])
    if p.startswith("file:"):
        return unquote(p[len("file:"):])
    return None if "://" in p else p


def staged_contents(landed):
    """{(stream, SHA-256): URI} of what the log staged from each landing file it read (the content
    first read, kept when the file changes later), so that the same bytes under another name (a
    rename, a hard link, a copy) are known."""
    return {(rec["stream"], rec.get("staged_sha256", rec["sha256"])): uri for uri, rec in landed.items()}


def _sha256(path, size=None):
    h, left = hashlib.sha256(), size
    with open(path, "rb") as f:
        while left is None or left > 0:
            chunk = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not chunk:
                break
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h.hexdigest()


def record(path, stream):
    """{bytes, mtime_ns, ino, sha256, stream} of a landing file now, or None when it is gone."""
    try:
        st = os.stat(path)
        return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "ctime_ns": st.st_ctime_ns,
                "sha256": _sha256(path), "stream": stream}
    except OSError:
        return None


def remember(landed, arrivals, paths, bad, names):
    """Add to `landed` (the log's record, kept across restarts, so a change after staging is
    noticed) what this batch read of each local landing file it has rows of: `arrivals[k]`,
    stream k's rows (`_src` indexes `paths`); `bad[k]`, its unparseable rows (or None)."""
    of = {}
    for k, a in enumerate(arrivals):
        of.update((paths[i], names[k]) for i in np.unique(a["_src"]))
        if bad and bad[k] is not None:
            of.update((p, names[k]) for p in set(bad[k].column("file").to_pylist()))
    for p, n in of.items():
        lp = local_path(p)
        if lp is not None and p not in landed:
            rec = record(lp, n)
            if rec is not None:
                landed[p] = rec


def changed(landed):
    """[(uri, what it was, what it is now, reason)] of the recorded files that changed since: a
    file deleted after staging has not changed (producers may clean up)."""
    out = []
    for uri, rec in landed.items():
        p = local_path(uri)
        try:
            st = os.stat(p)
        except OSError:
            continue
        # the change time too: a rewrite of the same size with its old mtime put back (os.utime)
        # still sets it (a record of an older log has none: size, mtime and inode alone)
        if (st.st_size, st.st_mtime_ns, st.st_ino) == tuple(rec[k] for k in FIELDS) and \
                rec.get("ctime_ns", st.st_ctime_ns) == st.st_ctime_ns:
            continue
        now = record(p, rec["stream"])
        if now is None or now["sha256"] == rec["sha256"]:
            if now is not None:
                landed[uri] = keep_staged(rec, now)         # touched or copied over with the same bytes
            continue
        grown = now["bytes"] > rec["bytes"] and _sha256(p, rec["bytes"]) == rec["sha256"]
        shrunk = now["bytes"] < rec["bytes"] and now["ino"] == rec["ino"]     # a new file renamed over it is rewritten
        reason = ("appended to after staging" if grown else
                  "truncated after staging" if shrunk else "rewritten after staging")
        out.append((uri, rec, now, reason))
    return out


def keep_staged(rec, now):
    """`now`, a file's record after it changed, keeping what was staged from it first."""
    return dict(now, staged_sha256=rec.get("staged_sha256", rec["sha256"]))


def new_content(uri, rec, now, reason, fmt, header=False):
    """The quarantine table of what a changed file holds that was not staged: the bytes appended,
    or the whole file when it was rewritten or truncated, one row per line (a CSV file's header
    left out; a Parquet file: one row per row, as JSON), with its file, record number and reason."""
    p = local_path(uri)
    with open(p, "rb") as f:
        if reason.startswith("appended"):
            f.seek(rec["bytes"])
        data = f.read(now["bytes"] - (rec["bytes"] if reason.startswith("appended") else 0))
    if fmt == "parquet":
        try:
            import pyarrow.parquet as pq
            rows = [json.dumps(r, default=str) for r in pq.read_table(p).to_pylist()]
        except Exception:  # noqa: BLE001 - a damaged file is quarantined as one record of bytes
            rows = [data.decode("utf-8", "replace")]
    else:
        rows = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
        if fmt == "csv" and header and not reason.startswith("appended"):
            rows = rows[1:]
    return pa.table({"file": pa.array([uri] * len(rows), pa.string()),
                     "record": pa.array(range(1, len(rows) + 1), pa.int64()),
                     "reason": pa.array([f"{reason} ({rec['bytes']:,} -> {now['bytes']:,} bytes)"] * len(rows)),
                     "text": pa.array(rows, pa.string())})
