"""range_join's row indexes, kept across a window's appends and expiries, give the range probes
exactly the pairs of the per-probe paths: KeyIndex those of the exact key codes (one-word keys,
text keys of several words, keys with NULL rows), CellIndex those of the band grid and the scan
(values on cell edges, NaN, infinities, NULL rows, and values too large for a cell, where it
steps aside); and a probe of another key layout is refused."""
import numpy as np
import pytest

from mpi_join.join.predicate import Band, Equi, Predicate
from mpi_join.join.range_join import KeyIndex, probe_ranges, row_index
from mpi_join.join.window import Window
from mpi_join.schema import NULL

ONE = (np.dtype([("seq", "<i8"), ("ts", "<i8"), ("k", "<i8")]),) * 2
TEXT = (np.dtype([("seq", "<i8"), ("ts", "<i8"), ("k", "<i4"), ("t", "S12")]),
        np.dtype([("seq", "<i8"), ("ts", "<i8"), ("k", "<i8"), ("t", "S20")]))
NULLS = (np.dtype([("seq", "<i8"), ("ts", "<i8"), ("k", "<i8"), (NULL, "u1")]),) * 2
BAND = (np.dtype([("seq", "<i8"), ("ts", "<i8"), ("k", "<i8"), ("v", "<f8"), (NULL, "u1")]),
        np.dtype([("seq", "<i8"), ("ts", "<i8"), ("k", "<i8"), ("w", "<f4"), (NULL, "u1")]))


def _rows(rng, dt, n, seq0, keys, huge=False):
    r = np.zeros(n, dt)
    r["seq"] = np.arange(seq0, seq0 + n)
    r["ts"] = r["seq"]
    r["k"] = rng.integers(0, keys, n)
    if "t" in dt.names:
        r["t"] = [b"x" * int(v % 3) + b"%d" % (v % 5) for v in rng.integers(0, 100, n)]
    for c in ("v", "w"):
        if c in dt.names:      # on a grid of eps's steps (values on band and cell edges), some special
            r[c] = rng.integers(-40, 40, n) * 0.25
            special = rng.random(n) < 0.03
            r[c][special] = rng.choice([np.nan, np.inf, -np.inf] + [1e30] * huge, int(special.sum()))
    if NULL in dt.names:
        r[NULL] = rng.random(n) < 0.2
    return r


def _pairs(ia, ib):
    return sorted(zip(ia.tolist(), ib.tolist()))


@pytest.mark.parametrize("dtypes,cols", [(ONE, ("k",)), (TEXT, ("k", "t")), (NULLS, ("k",)), (BAND, ()),
                                         (BAND, ("k",))], ids=["one-word", "text", "nulls", "band", "equi-band"])
@pytest.mark.parametrize("seed", [1, 2])
def test_row_index_probes_equal_the_per_probe_paths_through_appends_and_expiries(dtypes, cols, seed):
    rng = np.random.default_rng(seed)
    bands = (Band((0, "v"), (1, "w"), 0.5, bool(seed % 2)),) if "v" in dtypes[0].names else ()
    pred = Predicate(equi=tuple(Equi((0, c), (1, c)) for c in cols), band=bands)
    w = Window(dtypes[1], coord="ts")
    ix = row_index(pred, 0, 1, dtypes[0], w)
    assert type(ix).__name__ == ("KeyIndex" if cols else "CellIndex")
    seq, checked, found = 0, 0, 0
    for step in range(60):
        n = int(rng.integers(0, 400))
        rows = _rows(rng, dtypes[1], n, seq, 40, huge=step >= 50)
        if step == 50:
            assert getattr(ix, "usable", True)
        seq += n
        first = w.base + len(w)
        w.append(rows)
        ix.add(rows, first)
        if step % 3 == 2 and len(w):             # the oldest rows leave; entries go at a merge
            if w.expire(int(w.view()["ts"][int(rng.integers(0, len(w)))])):
                ix.settle()
        A = _rows(rng, dtypes[0], int(rng.integers(1, 200)), 10 ** 9 + seq, 40)
        B = w.view()
        sub = rng.integers(0, len(A), int(rng.integers(1, 50)))       # probes through `rows`
        for rows_ in (None, sub):
            c = len(A) if rows_ is None else len(sub)
            lo_ = rng.integers(0, len(B) + 1, c)
            hi_ = np.minimum(lo_ + rng.integers(0, len(B) + 1, c), len(B))
            want = probe_ranges(pred, 0, 1, A, B, lo_, hi_, rows=rows_)
            got = probe_ranges(pred, 0, 1, A, B, lo_, hi_, rows=rows_, index=ix)
            assert _pairs(*got) == _pairs(*want), step
            checked += 1
            found += len(want[0])
    assert checked == 120 and found > 500
    assert getattr(ix, "usable", True) == (not bands or bool(cols))     # 1e30 came: no cell of 0.5 holds it exactly
    assert sum(len(r[0]) for r in ix.runs.runs()) <= 2 * len(w) + 4096 + 400     # entries of rows gone dropped


def test_a_probe_of_another_key_layout_is_refused():
    pred = Predicate(equi=(Equi((0, "k"), (1, "k")), Equi((0, "t"), (1, "t"))))
    w = Window(TEXT[1], coord="ts")
    ix = KeyIndex(pred, 0, 1, TEXT[0], w)
    with pytest.raises(ValueError, match="probes an index"):
        ix.probe(np.zeros((1, 2), np.int64), [1, 1], None, np.zeros(1, np.int64), np.ones(1, np.int64), 16)
