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


# -- what a truncated file still holds ------------------------------------------------------
# A file cut short after it was staged (same inode, fewer bytes) holds either a prefix of what was
# staged (nothing new: its rows stand) or new bytes written in place (quarantined as rewritten).
# To tell them apart without keeping the file, the log keeps a ladder per staged file: at every
# line end, a hash of the bytes before it, H(L) = sum (b_j + 1) P^j mod 2^64 over j < L, built in
# numpy a few MB at a time; the cut file's prefix up to its last line end is hashed the same way.
LINES = "lines"                                    # <log>/lines/<sha256>.npy
_P = 0x9E3779B97F4A7C15
_M = (1 << 64) - 1
_LADDER = np.dtype([("end", np.int64), ("hash", np.uint64)])


_CHUNK = 1 << 20
_POWERS = []                                       # P^i mod 2^64, i < _CHUNK, made once


def _powers():
    if not _POWERS:
        p = np.full(_CHUNK, _P, np.uint64)
        p[0] = 1
        with np.errstate(over="ignore"):
            _POWERS.append(np.cumprod(p))
    return _POWERS[0]


def _hashes(path, limit=None):
    """(ladder of every line end and the file's end, the hash of the first `limit` bytes)."""
    rungs, off, carry, pw = [], 0, np.uint64(0), 1
    with open(path, "rb") as f:
        while limit is None or off < limit:
            chunk = f.read(_CHUNK if limit is None else min(_CHUNK, limit - off))
            if not chunk:
                break
            b = np.frombuffer(chunk, np.uint8)
            with np.errstate(over="ignore"):
                acc = np.cumsum((b.astype(np.uint64) + np.uint64(1)) * (_powers()[:len(b)] * np.uint64(pw))) + carry
            nl = np.flatnonzero(b == 10)
            part = np.empty(len(nl), _LADDER)
            part["end"], part["hash"] = off + nl + 1, acc[nl]
            rungs.append(part)
            carry, pw, off = acc[-1], (pw * pow(_P, len(b), 1 << 64)) & _M, off + len(b)
    last = np.array([(off, carry)], _LADDER)
    ladder = np.concatenate(rungs + [last]) if rungs else last
    return ladder[np.r_[np.diff(ladder["end"]) > 0, True]], carry


def keep_ladder(lines_dir, rec, path):
    """Write the ladder of the staged file `path` (record `rec`) under `lines_dir`, once per content."""
    dest = os.path.join(lines_dir, f"{rec['sha256']}.npy")
    if os.path.exists(dest):
        return
    os.makedirs(lines_dir, exist_ok=True)
    ladder, _ = _hashes(path)
    tmp = os.path.join(lines_dir, f".{rec['sha256']}.npy")
    with open(tmp, "wb") as f:
        np.save(f, ladder, allow_pickle=False)
    os.replace(tmp, dest)


def staged_prefix(lines_dir, rec, path, size):
    """Is the file at `path`, cut to `size` bytes, a prefix of what was staged from it (`rec`), up
    to its last whole line? None when the log has no ladder for it (an older log)."""
    p = os.path.join(lines_dir or "", f"{rec.get('staged_sha256', rec['sha256'])}.npy")
    if not lines_dir or not os.path.isfile(p):
        return None
    ladder = np.load(p, allow_pickle=False)
    i = int(np.searchsorted(ladder["end"], size, side="right")) - 1      # the last rung at or below the cut
    if i < 0:
        return True                              # cut inside the first line: no whole row is left
    end = int(ladder["end"][i])
    return bool(_hashes(path, end)[1] == ladder["hash"][i])


def record(path, stream):
    """{bytes, mtime_ns, ino, sha256, stream} of a landing file now, or None when it is gone."""
    try:
        st = os.stat(path)
        return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "ctime_ns": st.st_ctime_ns,
                "sha256": _sha256(path), "stream": stream}
    except OSError:
        return None


def remember(landed, arrivals, paths, bad, names, lines_dir=None, known=None):
    """Add to `landed` (the log's record, kept across restarts, so a change after staging is
    noticed) what this batch read of each local landing file it has rows of: `arrivals[k]`,
    stream k's rows (`_src` indexes `paths`); `bad[k]`, its unparseable rows (or None). With
    `lines_dir`, each new file's ladder is kept there (a truncation later is then told apart);
    `known`: {local path: record} the caller took of files as it chose them (not hashed again)."""
    of = {}
    for k, a in enumerate(arrivals):
        of.update((paths[i], names[k]) for i in np.unique(a["_src"]))
        if bad and bad[k] is not None:
            of.update((p, names[k]) for p in set(bad[k].column("file").to_pylist()))
    for p, n in of.items():
        lp = local_path(p)
        if lp is not None and p not in landed:
            rec = (known or {}).get(lp) or record(lp, n)
            if rec is not None:
                landed[p] = rec
                if lines_dir is not None:
                    keep_ladder(lines_dir, rec, lp)


TRUNCATED = "truncated after staging"
CUT = "cut short after staging"          # a prefix of what was staged: nothing new in it


def changed(landed, lines_dir=None):
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
        prefix = staged_prefix(lines_dir, rec, p, now["bytes"]) if shrunk else None
        reason = ("appended to after staging" if grown else CUT if prefix else
                  TRUNCATED if shrunk and prefix is None else "rewritten after staging")
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
