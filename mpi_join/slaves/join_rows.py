"""What a binary join holds of a row (slaves/local_join.BinaryJoin): the window row's layout
derived from the predicate and the windows. A window row keeps seq, ts, the columns its
conditions read (held_columns), its equi key as int64 words and band columns as float64; what
can be derived again is not stored (a time window's coordinate and lo are the ts; an index
join's key hash is in its index; a column only bands read is its `_band` value). `derive` makes
window rows of runtime rows, `runtime_rows` gives the runtime rows back (the wire, a move, a
checkpoint)."""
import numpy as np

from ..join.predicate import Band, Equi, Interval, Predicate, band_matrix, binary_parts, key_hash, key_matrix, key_widths
from ..schema import NULL, TS

def derived_dtype(dtype, n_keys, n_bands, hit=False, drop=()):
    """A window row: the runtime row plus its equi key as int64 words (predicate.key_matrix) and
    band columns as float64; `hit` (a stream of an outer join): whether it has met a partner;
    `drop`: runtime columns the join derives instead of storing (BinaryJoin.coord_lo)."""
    extra = ([("_key", np.int64, (n_keys,))] if n_keys else []) + ([("_band", np.float64, (n_bands,))] if n_bands else [])
    return np.dtype([d for d in dtype.descr if d[0] not in drop] + extra + ([(HIT, np.uint8)] if hit else []))


def coord_lo(windows, s, o):
    """How window rows of stream s give their coordinate and their lo over stream o:
    (coord column, lo column, shift added to lo). A time window's coordinate is the tuple's ts,
    and lo over a time window is ts - (W - 1) (window.py), so neither is stored then: 16 bytes a
    row. Without the windows (a predicate built by hand) both are the runtime columns."""
    coord = TS if windows and windows[s].kind == "time" else "_coord"
    if windows and windows[o].kind == "time":
        return coord, TS, -(int(windows[o].size) - 1)
    return coord, "_lo", 0


HIT = "_hit"


def _exact_in_float64(dt):
    """Does float64 hold every value of this column type exactly (a band column kept as `_band` alone)?"""
    return dt.kind == "f" or (dt.kind in "iu" and dt.itemsize <= 4)


def held_columns(pred, dtypes, i, j, keep=()):
    """Per side (streams i and j), the staged columns a window row holds: seq and ts, the columns
    of the conditions between i and j, every column of a stream a UDF reads (it takes whole
    records), and `keep` ((stream, column): what the caller reads of the rows, an aggregate's
    columns). A result is a pair of seqs, so nothing else is needed: a payload column is not
    stored (it is 0 in a snapshot)."""
    sides = (i, j)
    held = [{"seq", "ts"}, {"seq", "ts"}]
    for c in pred.between(i, j):
        if hasattr(c, "left"):
            held[0].add(c.left[1])
            held[1].add(c.right[1])
        else:
            held = [set(dt.names) for dt in dtypes]
    for stream, col in keep:
        if stream in sides:
            held[sides.index(stream)].add(col)
    return held


def runtime_rows(rows, dtype):
    """The columns of `dtype` that window rows hold, copied (BinaryJoin.runtime_rows fills the
    derived ones; a payload column the rows do not hold is 0)."""
    held = rows.dtype.names
    out = (np.empty if all(n in held or n.startswith("_") for n in dtype.names) else np.zeros)(len(rows), dtype)
    for name in dtype.names:
        if name in rows.dtype.names:
            out[name] = rows[name]
    return out



class RowLayout:
    """Window rows of streams i and j of a binary predicate: their dtypes (`dtypes`, and
    `state_dtypes` for a snapshot), the method's index keys, and the conversions both ways."""

    def __init__(self, pred, dtypes, method="index", i=0, j=1, hashed=None, keep=(), older=False):
        """`keep`: (stream, column) the caller reads of window rows besides the predicate's
        (held_columns). `older`: every window row is older than the rows that probe it (they come
        in seq order: `step`; or only pairs whose probe is the newer are kept: `probe_newer`), so a
        result's arrival time is its probe's and a window row holds no `_tin` (an outer join's
        still does: a row that expires alone is a result)."""
        self.pred, self.i, self.j = pred, i, j
        wins = pred.windows
        self.vis = [coord_lo(wins, i, j), coord_lo(wins, j, i)]     # per side: coord, lo, lo shift
        self.outer = [s for s, k in enumerate((i, j)) if k in pred.outer]
        # an ASOF join (join/asof.py): its left side's rows are matched as they leave the window
        self.asof_left = (i, j).index(pred.asof.left) if pred.asof is not None and {i, j} == {
            pred.asof.left, pred.asof.right} else None
        eq_i, eq_j, bands, thetas = binary_parts(pred, i, j)
        self.key_cols = (eq_i, eq_j)
        self.band_cols = ([b.left[1] for b in bands], [b.right[1] for b in bands])
        self.eps = np.array([b.eps for b in bands], np.float64)
        self.closed = np.array([b.closed for b in bands], np.bool_)
        if method == "index":
            method = "equi" if eq_i else ("band" if bands else "scan")
        if method == "bnl" and not eq_i:
            method = "scan"
        self.method = method
        conds = pred.between(i, j)
        # a scan over band conditions only checks them inline (no candidate list to filter); a
        # shifted interval's time condition is checked on the pairs it finds (residual)
        self.band_scan = method == "scan" and bool(bands) and all(isinstance(c, (Band, Interval)) for c in conds)
        decided = {"equi": {Equi}, "bnl": {Equi}, "band": {Band}, "scan": {Band} if self.band_scan else set()}[method]
        self.residual = any(type(c) not in decided for c in conds)
        self.widths = key_widths(dtypes[0], eq_i, dtypes[1], eq_j)
        self.one_word = sum(self.widths) == 1
        self.runtime_dtypes = list(dtypes)
        # a single int64 key is its own key matrix: read in place (a (n, 1) view), not copied
        self.key_view = [len(self.widths) == 1 and dt.fields[c[0]][0] == np.dtype(np.int64)
                         for c, dt in zip(self.key_cols, dtypes)]
        # the equi index holds each row's key hash, so a row does not (hashes() recomputes it); a
        # join without an equi key has none to keep (its routers stamp 0)
        # payload columns no condition reads are not held (held_columns); a column only bands
        # read, when float64 holds it exactly, is held as its `_band` column alone
        self.keep = tuple(keep)
        held = held_columns(pred, dtypes, i, j, keep)
        unread = [{n for n in dt.names if not n.startswith("_")} - h for dt, h in zip(dtypes, held)]
        others = held_columns(Predicate(equi=pred.equi, theta=pred.theta, interval=pred.interval), dtypes, i, j, keep)
        self.in_band = [{} if self.residual or NULL in dt.names else    # a null row's `_band` is NaN
                        {c: self.band_cols[s].index(c) for c in self.band_cols[s] if c not in others[s] and
                         _exact_in_float64(dt.fields[c][0])} for s, dt in enumerate(dtypes)]
        self.older = older and not self.outer and self.asof_left is None
        drops = [{"_coord", "_lo"} - {v[0], v[1]} | ({"_h"} if method == "equi" or not eq_i else set()) | u | set(b)
                 | ({"_tin"} if self.older else set()) for v, u, b in zip(self.vis, unread, self.in_band)]
        self.dtypes = [derived_dtype(dt, 0 if self.key_view[s] else sum(self.widths), len(bands), s in self.outer,
                                     drops[s]) for s, dt in enumerate(dtypes)]
        # hashes() of the last rows asked about, per stream (`hashed`: shared by joins that probe
        # with the same rows, a chained index's subindexes)
        self._hashed = hashed if hashed is not None else ([], [])
        self._ordered = ([], [])
        # what a snapshot holds: the runtime rows, and whether each row of an outer stream has met a partner
        self.state_dtypes = [derived_dtype(dt, 0, 0, s in self.outer, u) for s, (dt, u) in enumerate(zip(dtypes, unread))]

    def derive(self, batch, s):
        """A batch of runtime rows as window rows (the key and band columns filled in)."""
        if batch.dtype == self.dtypes[s] and (self.dtypes[s] != self.runtime_dtypes[s] or not self.key_cols[0]):
            return batch            # derived already (a window row that is a runtime row still needs its key hash)
        out = np.empty(len(batch), self.dtypes[s])
        for name in self.dtypes[s].names:
            if name in batch.dtype.names:
                out[name] = batch[name]
        if self.key_cols[0]:
            keys = key_matrix(batch, self.key_cols[s], self.widths)
            if not self.key_view[s]:
                out["_key"] = keys
            h = key_hash(keys)
            if "_h" in out.dtype.names:
                out["_h"] = h
            self._remember(out, s, h)
        if len(self.eps):
            out["_band"] = band_matrix(batch, self.band_cols[s])
        if s in self.outer and HIT not in batch.dtype.names:
            out[HIT] = 0
        return out

    def keys(self, rows, s):
        """Stream s's equi keys of window rows as an (n, words) int64 matrix (a view)."""
        return rows[self.key_cols[s][0]][:, None] if self.key_view[s] else rows["_key"]

    def hashes(self, rows, s):
        """Stream s's equi key hash of each (derived) row: the `_h` a row of an index join does
        not store. The last rows asked about are remembered: a batch is derived, probed and
        appended, one hash."""
        if "_h" in rows.dtype.names:
            return rows["_h"]
        if not self.key_cols[0]:
            return np.zeros(len(rows), np.uint64)
        h = _recall(self._hashed[s], rows)
        if h is None:
            h = key_hash(self.keys(rows, s))
            self._remember(rows, s, h)
        return h

    def _remember(self, rows, s, h):
        _keep(self._hashed[s], rows, h)

    def coord(self, rows, s):
        """Stream s's coordinate of each window row (a view)."""
        return rows[self.vis[s][0]]

    def lo(self, rows, s):
        """lo over the other stream of each of stream s's window rows."""
        _, col, shift = self.vis[s]
        return rows[col] + shift if shift else rows[col]

    def sorted_keys(self, rows, s):
        """(index keys, their stable order) of derived rows, (None, None) without an index;
        remembered as the hashes are: a batch is probed in that order (equi), joined with the
        other stream's batch through a run of it, and appended to its window's index by it,
        one sort (and one set of keys) for the three."""
        got = _recall(self._ordered[s], rows)
        if got is None:
            key = self.index_keys(rows, s)
            got = (key, None if key is None else np.argsort(key, kind="stable"))
            _keep(self._ordered[s], rows, got)
        return got

    def index_keys(self, rows, s):
        """The keys stream s's index sorts derived rows by (None: no index)."""
        if self.method == "equi":
            return self.hashes(rows, s)
        if self.method == "band":   # NaN never matches: sorted as +inf, so the runs stay totally ordered
            return np.nan_to_num(rows["_band"][:, 0], nan=np.inf, posinf=np.inf, neginf=-np.inf)
        return None

    def runtime_rows(self, rows, s, dtype=None):
        """Window rows of stream s back to runtime rows (the state dtype unless `dtype`): what the
        wire, a move or a checkpoint carries; the columns this join derives are filled in."""
        dtype = dtype or self.state_dtypes[s]
        out = runtime_rows(rows, dtype)
        if "_coord" not in rows.dtype.names and "_coord" in dtype.names:
            out["_coord"] = self.coord(rows, s)
        if "_lo" not in rows.dtype.names and "_lo" in dtype.names:
            out["_lo"] = self.lo(rows, s)
        if "_h" not in rows.dtype.names and "_h" in dtype.names:
            out["_h"] = self.hashes(rows, s)
        if "_tin" not in rows.dtype.names and "_tin" in dtype.names:
            out["_tin"] = 0                       # `older`: a stored row's arrival time is never read again
        for c, k in self.in_band[s].items():
            if c not in rows.dtype.names and c in dtype.names:
                out[c] = rows["_band"][:, k]          # exact: _exact_in_float64
        return out


def _recall(memo, rows):
    """What `memo` holds for these very rows (not equal ones), or None."""
    for r, v in memo:
        if r is rows:
            return v
    return None


def _keep(memo, rows, value):
    """Remember `value` for `rows`, the last two batches asked about."""
    memo.append((rows, value))
    if len(memo) > 2:
        del memo[0]
