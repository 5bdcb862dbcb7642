"""Local binary window joins, maintained incrementally: what every strategy's worker joins with.

`BinaryJoin` holds the windows of two streams (window.Window, rows keep absolute numbers) and
the index its predicate needs, kept across batches: entries are appended on arrival and dropped
with expiry, never rebuilt per batch. A batch step joins new R x window S, window R x new S and
new R x new S, keeping a pair only when its newer tuple sees the older one (window.py), then
appends the new tuples and expires by the bounds. Index kinds, chosen from the predicate:

- equi: the hash of the equi key (`_h`) in sorted runs (join/sorted_runs.py): one key's entries
  are contiguous in each run, so a probe is two binary searches and a short scan. Keys are
  compared exactly.
- band: the same two runs over the first band column (float64); a probe scans [x - eps, x + eps].
- scan: a nested loop over the visible part of the window (theta and anything else).
- bnl: the shared-nothing paper's block nested loop for equi keys.
Conditions the index does not decide (a band or theta next to an equi key) are evaluated on the
candidate pairs only.
"""
import copy

import numpy as np

from ..join import kernels as K
from ..join.index_kernels import band_run, equi_run, result_rows, scan_band, visible_pairs
from ..join.sorted_runs import SortedRuns, merge
from ..join.predicate import no_null
from ..join.window import Window, footprint
from .join_rows import HIT, RowLayout

_E = np.zeros(0, np.int64)


def find_pairs(layout, P, p, X, xbase, run, check=True, newer=False, split=0, seqs=False):
    """How a binary join finds the pairs of two sets of window rows (`layout`: its RowLayout):
    its method's kernel (index_kernels.py, kernels.py), the window test, then the conditions the
    method does not decide (range_join.pair_mask). P is stream p's rows, X the other's; returns
    (rows of stream 0, idx, rows of stream 1, idx) oriented by stream. `check=False` leaves out
    the per-pair window test (the caller knows every row of X is visible; bnl tests it all the
    same); `newer`: only the pairs whose P row is the newer (by seq); `split`: the rows of X
    before it are older than every P row, so a P row sees those from the first whose coordinate
    reaches its lo (a window's coordinates are in order: window.py). `seqs`: also each pair's
    seq of stream 0 and of stream 1 (two more arrays), X's from the index where it carries them
    (read in run order, not at a random window row each: a cache miss a result)."""
    ip, ix, sx = _probe(layout, P, p, X, xbase, run, check, newer, split)
    if layout.residual and len(ip) and not _scans(layout):     # a scan filters each block itself
        keep = _residual(layout, P, p, X, ip, ix)
        ip, ix, sx = ip[keep], ix[keep], (sx[keep] if sx is not None else None)
    out = (P, ip, X, ix) if p == 0 else (X, ix, P, ip)
    if not seqs:
        return out
    sp = P["seq"][ip].astype(np.int64, copy=False)
    sx = X["seq"][ix].astype(np.int64, copy=False) if sx is None else sx
    return out + ((sp, sx) if p == 0 else (sx, sp))


def _scans(layout):
    """Whether the layout's pairs come from the plain nested loop (_scan)."""
    return layout.method not in ("equi", "band", "bnl") and not layout.band_scan


def _residual(layout, P, p, X, ip, ix):
    """Which candidate pairs (rows of P, rows of X) satisfy the conditions the method does not
    decide (range_join.pair_mask): a mask."""
    from ..join.range_join import pair_mask
    A, B, ia, ib = (P, X, ip, ix) if p == 0 else (X, P, ix, ip)
    return pair_mask(layout.pred, layout.i, layout.j, A, B, ia, ib)


def _probe(layout, P, p, X, xbase, run, check=True, newer=False, split=0):
    """find_pairs' candidates by the layout's method, as (rows of P, rows of X, seqs of those X
    rows where the run carries them, else None)."""
    (cp, lp, dp), (cx, lx, dx) = layout.vis[p], layout.vis[1 - p]
    vis_p = (P["seq"], P[cp], P[lp], dp)
    vis_x = (X["seq"], X[cx], X[lx], dx)
    guess = 16 * len(P) + 64
    if layout.method == "equi":      # the kernel keeps the newer-probe pairs itself: one visit per row
        pk, xk = layout.keys(P, p), layout.keys(X, 1 - p)
        # the X rows before `split` are older than every probe: a probe sees those from the
        # first whose coordinate reaches its lo, so the kernel tests their positions, not the
        # rows (a cache miss per pair otherwise); a one-word key's hash is a bijection
        # (mix64), so equal hashes are equal keys
        first = K.search(X[cx], P[lp] + dp if dp else P[lp]) if split and check else _E
        h = layout.hashes(P, p)
        # probes in hash order gallop through a large run instead of searching it from its
        # middle, each a few cache misses
        order = layout.sorted_keys(P, p)[1] if split and len(X) > 4096 else _E
        res = [K.collect(equi_run, pk, h, *vis_p, rk, rp, rv, xbase - rb, xk, *vis_x, check,
                         newer, first, int(split), layout.one_word, order, guess=guess, outs=3)
               for rk, rp, rb, rv in run.runs() if len(rk)]
        newer = False
        if not run.carry:
            res = [r[:2] for r in res]
    elif layout.method == "band":
        eps = layout.eps
        # probes in order of their first band value gallop through a large run (as equi's)
        v = P["_band"][:, 0]
        order = np.argsort(v, kind="stable") if len(X) > 4096 and not (v[1:] >= v[:-1]).all() else _E
        res = [K.collect(band_run, P["_band"], *vis_p, rk, rp, xbase - rb, X["_band"], *vis_x, eps, layout.closed,
                         check, order, guess=guess) for rk, rp, rb, _ in run.runs() if len(rk)]
    elif layout.method == "bnl":
        res = [K.collect(K.equi_bnl, layout.keys(P, p), *vis_p, layout.keys(X, 1 - p), *vis_x, guess=guess)]
    elif layout.band_scan:
        # the band columns as contiguous copies: in a window row they are 16 of ~90 bytes, and
        # the nested loop would otherwise read a cache line per comparison
        res = [K.collect(scan_band, np.ascontiguousarray(P["_band"]), *vis_p, np.ascontiguousarray(X["_band"]),
                         *vis_x, layout.eps, layout.closed, check, guess=guess)]
    else:
        res = [_scan(P, X, vis_p, vis_x, check,
                     (lambda ip, ix: _residual(layout, P, p, X, ip, ix)) if layout.residual else None)]
    if not res:
        return _E, _E, None
    out = res[0] if len(res) == 1 else tuple(np.concatenate([r[c] for r in res]) for c in range(len(res[0])))
    ip, ix, sx = out if len(out) == 3 else (*out, None)
    if newer:
        keep = P["seq"][ip] > X["seq"][ix]
        ip, ix, sx = ip[keep], ix[keep], (sx[keep] if sx is not None else None)
    return ip, ix, sx


class BinaryJoin:
    """Windows of streams i=0 and j=1 of a binary predicate, with an incremental index.

    `method`: "index" (equi hash index if there is an equi condition, else a band index if there
    is a band, else scan), "bnl" (block nested loop on the equi key) or "scan".

    Outer joins (pred.outer, `step` only: the hash strategy's epochs): a window row of an outer
    stream carries `_hit`, set when a pair holds it; when it expires without one, (its seq, -1)
    and its _tin go to `lone` (a list the owner drains), and `expire` at +inf flushes the rest."""

    def __init__(self, pred, dtypes, method="index", i=0, j=1, lone=None, hashed=None, keep=(), older=False):
        """`lone`: the list an outer join's rows that expire alone go to; the rest: its layout's."""
        self.layout = RowLayout(pred, dtypes, method, i, j, hashed, keep, older)
        self._empty(lone)

    def __getattr__(self, name):
        """Its layout's attributes and methods (join_rows.RowLayout: dtypes, derive, runtime_rows...)."""
        if "layout" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["layout"], name)

    def _empty(self, lone=None):
        """The state: empty windows and index (what does not change is its layout, RowLayout)."""
        self.lone = lone if lone is not None else []
        lay = self.layout
        self.windows = [Window(dt, coord=lay.vis[s][0], raw=lay.runtime_dtypes[s]) for s, dt in enumerate(lay.dtypes)]
        # an equi index carries its rows' seqs (a band probe reads its candidate rows anyway)
        self.runs = [SortedRuns(np.uint64, carry=True) if lay.method == "equi" else SortedRuns(np.float64)
                     for _ in (0, 1)]
        self.newest = [-1, -1]        # the largest seq appended to each window (seqs are >= 0)
        self.in_order = [True, True]  # have each window's rows come in seq order (so far, always)

    def empty_like(self):
        """An empty join of this layout, sharing its hash memo (a chained index's next subindex)."""
        j = copy.copy(self)
        j._empty()
        return j

    # -- the batch step ---------------------------------------------------------------------
    def step(self, new0, new1, bounds=None, tins=None):
        """Join one batch of each stream with the windows and with each other, then append them
        (and expire, when `bounds` is given). Returns (seq 0, seq 1, tin of the newer tuple).
        `tins`: the batches' arrival times, when they are derived already (and `older`: derived
        rows hold none)."""
        if not self.layout.older:
            tins = None                              # the window rows hold theirs
        elif tins is None:
            tins = (new0["_tin"], new1["_tin"])
        n0, n1 = self.layout.derive(new0, 0), self.layout.derive(new1, 1)
        out = []
        w0, w1 = self.windows[0].view(), self.windows[1].view()
        if self.layout.asof_left is None:          # (an ASOF join's matches come at expiry: expire_stream)
            if len(n0) and len(w1):
                out.append(find_pairs(self.layout, n0, 0, w1, self.windows[1].base, self.runs[1],
                                      split=len(w1) if self.layout.older else 0, seqs=True))
            if len(n1) and len(w0):
                out.append(find_pairs(self.layout, n1, 1, w0, self.windows[0].base, self.runs[0],
                                      split=len(w0) if self.layout.older else 0, seqs=True))
            if len(n0) and len(n1):
                key, order = self.layout.sorted_keys(n1, 1)
                run = SortedRuns.of(key, order) if key is not None else None
                out.append(find_pairs(self.layout, n0, 0, n1, 0, run, seqs=True))
        if self.layout.outer:
            for A, a, B, b, _, _ in out:
                for s, rows, idx in ((0, A, a), (1, B, b)):
                    if s in self.layout.outer and len(idx):
                        rows[HIT][idx] = 1
        # results are read out before appending: an append may compact the window under its views
        n = sum(len(o[1]) for o in out)
        res = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)) if n else (_E, _E, _E)
        off = 0
        for A, a, B, b, sa, sb in out:
            if len(a):
                if tins is None:
                    result_rows(sa, A["_tin"], sb, B["_tin"], a, b, *res, off, -1)
                else:      # a window row is older than its probe: the new row's tin (both new: the newer's)
                    side = -1 if (A is n0 and B is n1) else (0 if A is n0 else 1)
                    ta, tb = tins[0] if A is n0 else tins[1], tins[1] if B is n1 else tins[0]
                    result_rows(sa, ta, sb, tb, a, b, *res, off, side)
                off += len(a)
        self.append(n0, 0)
        self.append(n1, 1)
        if bounds is not None:
            self.expire(bounds)
        return res

    def probe(self, new, s, skip=0, check=True):
        """Join new rows of stream s with the other stream's window from its row `skip` on (the
        rows before it left out: a chain's tuples already sent on), without appending. Returns
        (seq 0, seq 1, tin of the newer tuple)."""
        n = self.layout.derive(new, s)
        o = 1 - s
        X = self.windows[o].view()
        if not len(n) or len(X) <= skip:
            return _E, _E, _E
        A, a, B, b, sa, sb = find_pairs(self.layout, n, s, X, self.windows[o].base, self.runs[o], check,
                                        split=self._older(n, o, X), seqs=True)
        if skip:
            keep = (b if s == 0 else a) >= skip
            a, b, sa, sb = a[keep], b[keep], sa[keep], sb[keep]
        if not len(a):
            return _E, _E, _E
        res = (np.empty(len(a), np.int64), np.empty(len(a), np.int64), np.empty(len(a), np.int64))
        result_rows(sa, A["_tin"], sb, B["_tin"], a, b, *res, 0, -1)
        return res

    def probe_newer(self, new, s, check=True):
        """probe(), keeping only the pairs whose probing tuple is the newer: the store-then-probe
        joins (splitjoin cores, biclique units) find a pair when its newer tuple arrives, so a
        pair with a stored tuple newer than its probe is the other tuple's to find. `new`: runtime
        rows (a result's arrival time is its probe's)."""
        return probe_results(self.probe_pairs(new, s, check, seqs=True), s, new["_tin"])

    def probe_pairs(self, new, s, check=True, seqs=False):
        """The pairs probe_newer() keeps, as (rows of stream 0, idx, rows of stream 1, idx), and
        with `seqs` their seqs (find_pairs): for a caller that reads more of each pair than its
        seqs (an aggregate's columns)."""
        n = self.layout.derive(new, s)
        X = self.windows[1 - s].view()
        if not len(n) or not len(X):
            return (n[:0], _E, n[:0], _E) + ((_E, _E) if seqs else ())
        return find_pairs(self.layout, n, s, X, self.windows[1 - s].base, self.runs[1 - s], check, newer=True,
                          split=self._older(n, 1 - s, X), seqs=seqs)

    def _older(self, rows, o, X):
        """How many of the first rows of X, stream o's window, are older (by seq) than every one
        of `rows`: all when the window's newest is, else those before the oldest of `rows` when
        the window's rows came in seq order, else none."""
        if not len(rows) or not len(X):
            return 0
        oldest = int(rows["seq"].min())
        if self.newest[o] < oldest:
            return len(X)
        return K.search(X["seq"], oldest) if self.in_order[o] else 0

    # -- window maintenance -----------------------------------------------------------------
    def append(self, rows, s, key=None):
        """Append derived rows of stream s (`key`: their index keys, when the caller has them)."""
        w = self.windows[s]
        first = w.base + len(w)
        w.append(rows)
        if len(rows):
            seq = rows["seq"]
            self.in_order[s] = self.in_order[s] and int(seq[0]) > self.newest[s] and bool((seq[1:] > seq[:-1]).all())
            self.newest[s] = max(self.newest[s], int(seq.max()))
        key, order = self.layout.sorted_keys(rows, s) if key is None else (key, None)
        if key is not None:
            self.runs[s].add(key, first, w.base, order, rows["seq"])

    def warm_up(self):
        """Compile this join's kernels before data arrives (warm_up, below)."""
        warm_up(self.layout.pred, self.layout.runtime_dtypes, self.layout.method)

    def expire(self, bounds):
        b = [bounds[(self.layout.i, self.layout.j)[s]] if len(bounds) > 2 else bounds[s] for s in (0, 1)]
        left = self.layout.asof_left
        if left is None:
            for s in (0, 1):
                self.expire_stream(s, b[s])
            return
        # an ASOF join: its left rows first, while the right rows they may match are in their
        # window; and a right row stays while a left row still there may match it (its bound
        # comes from the left stream's next tuples, which may be far ahead of the left rows held)
        self.expire_stream(left, b[left])
        w, a = self.windows[left], self.layout.pred.asof
        if len(w):                     # the right rows at or after its oldest row's reach stay
            oldest = int(w.view()["ts"][0])
            reach = oldest if a.direction == "forward" else -(1 << 62) if a.tolerance is None else oldest - a.tolerance
            b[1 - left] = min(b[1 - left], reach)
        self.expire_stream(1 - left, b[1 - left])

    def expire_stream(self, s, bound):
        """Expire stream s's window by its bound (window.py); returns how many rows left."""
        w = self.windows[s]
        v = w.view()                     # v still holds what left (window.py)
        k = w.expire(bound)
        if s == self.layout.asof_left and k:
            self._asof_matches(v[:k], s)
        if s in self.layout.outer and k:
            lone = v[:k][v[HIT][:k] == 0]
            if len(lone):
                seqs = [lone["seq"].astype(np.int64), np.full(len(lone), -1, np.int64)]
                self.lone.append((seqs[s], seqs[1 - s], lone["_tin"].astype(np.int64)))
        if k:
            self.runs[s].settle(w.base, len(w))
        return k

    def _asof_matches(self, rows, s):
        """An ASOF join's left rows `rows` (of stream s) leave their window: no right row that
        could be a match can still come, and every one that could is in the right window (the
        windows config._asof gives). Each one's match (join/asof.best) goes to `lone` as a
        result, or, in an ASOF LEFT JOIN, the row alone."""
        from ..join.asof import best
        a, o = self.layout.pred.asof, 1 - s
        X = self.windows[o].view()
        if len(X):
            A, ia, B, ib = find_pairs(self.layout, rows, s, X, self.windows[o].base, self.runs[o], check=False)
            keep = no_null(A, B, ia, ib)             # (keys exclude such rows themselves; a keyless join does not)
            if keep is not None:
                ia, ib = ia[keep], ib[keep]
            il, ir = (ia, ib) if s == 0 else (ib, ia)
            il, ir = best(a, rows["ts"], X["ts"], X["seq"], il, ir)
        else:
            il = ir = _E
        if a.keep:
            lone = np.ones(len(rows), bool)
            lone[il] = False
            il = np.concatenate([il, np.flatnonzero(lone)])
            ir = np.concatenate([ir, np.full(int(lone.sum()), -1, np.int64)])
        if not len(il):
            return
        right = np.full(len(ir), -1, np.int64)
        right[ir >= 0] = X["seq"][ir[ir >= 0]]
        seqs = [rows["seq"][il].astype(np.int64), right]
        self.lone.append((seqs[s], seqs[1 - s], rows["_tin"][il].astype(np.int64)))

    def drop(self, s, k):
        """Drop the oldest k rows of stream s without expiring them (a chain's acknowledged
        forwards, a ring buffer's overwrite); returns how many left."""
        w = self.windows[s]
        k = w.drop(k)
        if k:
            self.runs[s].settle(w.base, len(w))
        return k

    def __len__(self):
        return len(self.windows[0]) + len(self.windows[1])

    @property
    def nbytes(self):
        """Bytes of window rows held (derived columns included, spare capacity not)."""
        return self.windows[0].nbytes + self.windows[1].nbytes

    def footprint(self):
        """(bytes held: windows with spare capacity and their sorted-run indexes; raw bytes)."""
        held, raw = footprint(*self.windows)
        return held + sum(r.nbytes for r in self.runs), raw

    # -- state: the windows' rows; indexes are rebuilt from them on restore -----------------
    def load(self, rows0, rows1):
        """Append rows (in seq order) without joining them: installing moved or restored state."""
        for s, rows in enumerate((rows0, rows1)):
            if len(rows):
                self.append(self.layout.derive(rows, s), s)

    def snapshot(self, prefix="window"):
        """{"<prefix>/<s>": stream s's window rows in the runtime dtype}: what a checkpoint
        writes or a move carries; the derived columns and the index are rebuilt by restore."""
        return {f"{prefix}/{s}": self.layout.runtime_rows(w.view(), s) for s, w in enumerate(self.windows)}

    def restore(self, arrays, prefix="window"):
        """Fill this (new) join with snapshot()'s rows."""
        self.load(*[arrays.get(f"{prefix}/{s}", np.zeros(0, dt)) for s, dt in enumerate(self.layout.state_dtypes)])

    def state_dtype(self, name, prefix="window"):
        """dtype of a snapshot array, None for a name that is not one."""
        p, _, s = name.rpartition("/")
        return self.layout.state_dtypes[int(s)] if p == prefix and s in ("0", "1") else None


def probe_results(pairs, s, tin):
    """Pairs (find_pairs with `seqs`: rows of stream 0, idx, rows of stream 1, idx, seqs of each)
    whose probe, of stream s, is the newer, as (seq 0, seq 1, the probe's tin); `tin`: the
    probing rows' arrival times."""
    _, a, _, b, sa, sb = pairs
    if not len(a):
        return _E, _E, _E
    return sa, sb, tin[a if s == 0 else b].astype(np.int64)


def _scan(P, X, vis_p, vis_x, check=True, residual=None, pairs_per_block=1 << 22):
    """Nested loop in blocks of probe rows, each block's visible pairs filtered by `residual`
    (every condition, for a scan) before the next: the candidates are every visible pair, a
    batch times the window, which whole took a worker of llhj's default scan past 10 GB on an
    equi join (40,000 tuples, 30 s windows at 20,000/s); a block's are at most pairs_per_block."""
    step = max(1, pairs_per_block // max(1, len(X)))
    res = []
    for i0 in range(0, len(P), step):
        ip, ix = K.collect(visible_pairs, *vis_p, *vis_x, i0, min(i0 + step, len(P)), check, guess=1024)
        if residual is not None and len(ip):
            keep = residual(ip, ix)
            ip, ix = ip[keep], ix[keep]
        res.append((ip, ix))
    if not res:
        return _E, _E
    return np.concatenate([r[0] for r in res]), np.concatenate([r[1] for r in res])


def warm_up(pred, dtypes, method):
    """Compile (or load from numba's cache) the kernels of this join before data arrives, so the
    first batch's production delay is not a compiler's."""
    # numba compiles one version per array layout, and a strided column of one row is
    # contiguous: batches and windows of 1 and of 3 rows, on both sides, reach every version
    # (an `older` join passes the probe's arrival times beside the window's seqs: its own versions)
    for a, b, older in ((1, 1, False), (1, 3, False), (3, 1, False), (3, 3, False),
                        (1, 1, True), (1, 3, True), (3, 1, True), (3, 3, True)):
        j = BinaryJoin(pred, dtypes, method, older=older)
        for _ in range(2):          # new x new, then new x the windows they left
            j.step(np.zeros(a, dtypes[0]), np.zeros(b, dtypes[1]))
    merge(*j.runs[0].big, *j.runs[0].big, 0)          # compiled here, not at the first merge
