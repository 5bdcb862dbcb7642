"""What the source computes from the rows it releases, as functions of the windows (window.py):
the runtime columns each tuple is stamped with, each stream's expiry bound, and whether the
windows have filled up (load measured before is not steady-state load)."""
import numpy as np

from ..schema import SEQ
from ..join.window import NEG_INF, POS_INF, coords, lows


def stamp(raw, windows, dtypes, cursor, tin):
    """Runtime batches of one release: each stream's rows (`raw[k]`, seq order) with `_coord`,
    `lo` over every other stream (`_lo` for M = 2, `_los[:, j]` for M > 2) and `_tin` (`tin(seq)`,
    or the time now); `cursor[k]`: stream k's tuples released before."""
    M, out = len(raw), []
    for k, a in enumerate(raw):
        b = np.zeros(len(a), dtypes[k])
        for name in a.dtype.names:
            b[name] = a[name]
        b["_coord"] = coords(windows[k], a, cursor[k])
        los = [lows(windows[j], a, raw[j], cursor[j]) if j != k else None for j in range(M)]
        if M == 2:
            b["_lo"] = los[1 - k]
        else:
            for j in range(M):
                b["_los"][:, j] = NEG_INF if j == k else los[j]
        b["_tin"] = tin(b[SEQ])
        out.append(b)
    return out


def expiry_bounds(windows, nxt, cursor):
    """Each stream's expiry bound, the smallest lo any tuple still to come can have over it:
    `nxt[k]`, the ts of stream k's next tuple (None: none comes); `cursor[k]`, its tuples so far."""
    out = []
    for j, w in enumerate(windows):
        others = [t for k, t in enumerate(nxt) if k != j and t is not None]
        if not others:
            out.append(int(POS_INF))
        elif w.kind == "time":
            out.append(min(others) - (w.size - 1))
        elif w.kind == "count":
            out.append(cursor[j] - w.size)
        else:
            out.append(int(NEG_INF))
    return out


def windows_full(windows, cursor, first_ts, last_ts):
    """Time windows: the replayed event time (`first_ts` to `last_ts`) spans the largest window;
    count windows: each stream has released its window's worth; unbounded windows never fill."""
    for k, w in enumerate(windows):
        if w.kind == "unbounded":
            return False
        if w.kind == "count" and cursor[k] < w.size:
            return False
    spans = [w.size for w in windows if w.kind == "time"]
    if spans:
        if last_ts is None or first_ts is None:
            return False
        return last_ts - first_ts >= max(spans)
    return True
