"""The shared incremental local joins (slaves/local_join.py), without MPI: every predicate kind and
method, both window kinds, driven batch by batch through the production source, equal the oracle;
and the windows' indexes are kept, never rebuilt."""
import tomllib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpi_join.config import parse_job
from mpi_join.master.source import Source
from mpi_join.join.oracle import run_oracle
from mpi_join.join.predicate import key_hash, key_matrix
from mpi_join.slaves.local_join import BinaryJoin, SortedRuns
from conftest import equi_job_text, random_streams
from reference import as_set

PREDICATES = {
    "equi": 'equi = [["R.k", "S.k"]]',
    "equi2": 'equi = [["R.k", "S.k"], ["R.k2", "S.k2"]]',
    "equi+band": 'equi = [["R.k", "S.k"]]\nband = [{left = "R.v", right = "S.w", eps = 5}]',
    "equi+theta": 'equi = [["R.k", "S.k"]]\ntheta = [{udf = "udf_fixtures:sum_small", streams = ["R", "S"]}]',
    "band": 'band = [{left = "R.v", right = "S.w", eps = 0.5}]',
    "band2": 'band = [{left = "R.v", right = "S.w", eps = 2, closed = true}, {left = "R.k", right = "S.k", eps = 1}]',
    "theta": 'theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]',
    "theta_flipped": 'theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]',
}
WINDOWS = ['"5ms"', '"1ms"', "4", "1", '"unbounded"']


def _drive(job, arrays, method, batch):
    import dataclasses
    job = dataclasses.replace(job, run=dataclasses.replace(job.run, batch_size=batch))
    src = Source(job, arrays=arrays)
    j = BinaryJoin(job.predicate, src.dtypes, method)
    out = []
    while not src.done:
        b = src.next_epoch()
        s0, s1, tin = j.step(b[0], b[1], src.bounds())
        assert len(tin) == len(s0)
        out.append(np.stack([s0, s1], axis=1))
    return (np.concatenate(out) if out else np.zeros((0, 2), np.int64)), j


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(0, 400), wr=st.sampled_from(WINDOWS), ws=st.sampled_from(WINDOWS),
       pred=st.sampled_from(sorted(PREDICATES)), method=st.sampled_from(["index", "bnl", "scan"]),
       batch=st.sampled_from([1, 7, 64, 4096]))
def test_binary_join_equals_oracle(seed, n, wr, ws, pred, method, batch):
    job = parse_job(tomllib.loads(equi_job_text((wr, ws), predicate=PREDICATES[pred])), "t.toml")
    arrays = random_streams(np.random.default_rng(seed), n, key_range=5)
    got, _ = _drive(job, arrays, method, batch)
    assert len(got) == len(as_set(got)), "a result was produced twice"
    assert as_set(got) == as_set(run_oracle(job, arrays))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(0, 400), wr=st.sampled_from(WINDOWS), ws=st.sampled_from(WINDOWS),
       pred=st.sampled_from(["equi", "equi2", "equi+band", "band"]), batch=st.sampled_from([1, 7, 64]),
       first=st.sampled_from([0, 1]))
def test_probing_a_store_equals_oracle_whether_or_not_its_rows_are_all_older(seed, n, wr, ws, pred, batch, first):
    """Store-then-probe (probe_newer, a biclique unit's or a splitjoin core's: both streams'
    rows stored, then each probes, keeping the pairs whose probe is the newer; the window probed
    holds only older rows when the other stream brought none this epoch, as with batches of
    one, and the position test runs) and probe (a chain's: stream `first` probes the other's
    window of older rows, the position test, and is stored; then the other probes a window that
    holds this epoch's rows too, the row test). Either way the pairs are the oracle's, each once."""
    import dataclasses
    job = parse_job(tomllib.loads(equi_job_text((wr, ws), predicate=PREDICATES[pred])), "t.toml")
    job = dataclasses.replace(job, run=dataclasses.replace(job.run, batch_size=batch))
    arrays = random_streams(np.random.default_rng(seed), n, key_range=5)
    src = Source(job, arrays=arrays)
    stores = [BinaryJoin(job.predicate, src.dtypes, "index", older=o) for o in (True, False)]
    got = [[], []]
    while not src.done:
        b = src.next_epoch()
        for s in (0, 1):
            stores[0].append(stores[0].derive(b[s], s), s)
        for s in (first, 1 - first):
            got[0].append(np.stack(stores[0].probe_newer(b[s], s)[:2], axis=1))
            r = stores[1].probe(b[s], s)         # every visible pair, the stored row newer or not
            got[1].append(np.stack(r[:2], axis=1))
            stores[1].append(stores[1].derive(b[s], s), s)
        for j in stores:
            j.expire(src.bounds())
    expect = as_set(run_oracle(job, arrays))
    for g in got:
        g = np.concatenate(g) if g else np.zeros((0, 2), np.int64)
        assert len(g) == len(as_set(g)), "a result was produced twice"
        assert as_set(g) == expect


@pytest.mark.parametrize("pred,kind", [("equi", "equi"), ("band", "band"), ("theta", "scan"), ("equi+band", "equi")])
def test_index_kind_follows_the_predicate(pred, kind):
    job = parse_job(tomllib.loads(equi_job_text(('"5ms"', '"5ms"'), predicate=PREDICATES[pred])), "t.toml")
    assert BinaryJoin(job.predicate, [s.dtype for s in job.streams]).method == kind


def test_index_is_kept_across_batches_and_expired_entries_leave():
    """Runs grow by merging, not rebuilding: after many batches the large run holds about the live
    window, and the small run stays small."""
    job = parse_job(tomllib.loads(equi_job_text(('"50ms"', '"50ms"'))), "t.toml")
    arrays = random_streams(np.random.default_rng(1), 20000, key_range=50, ts_step=1)
    got, j = _drive(job, arrays, "index", 200)
    assert as_set(got) == as_set(run_oracle(job, arrays))
    for s in (0, 1):
        live = len(j.windows[s])
        big, small = j.runs[s].big[0], j.runs[s].small[0]
        assert live <= len(big) + len(small) <= 2 * live + 2048
        assert len(small) <= len(big) // 4 + 1024


def test_sorted_runs_merge_drops_expired_rows():
    r = SortedRuns(np.uint64)
    r.add(np.array([5, 1, 3], np.uint64), 0, 0)
    r.add(np.array([2, 1], np.uint64), 3, 2)        # rows 0 and 1 expired
    keys, offsets, base, values = r.small
    assert base == 2 and list(offsets + base) == [4, 3, 2] and list(keys) == [1, 2, 3]
    assert offsets.dtype == np.uint32                # 12 bytes an entry: rows are offsets from base
    assert len(values) == 0                          # none carried


def test_sorted_runs_carry_each_rows_value_through_merges():
    """A run that carries values (the rows' seqs) keeps each beside its entry through a merge that
    sorts and drops entries (the property test below: through merges into the big run too)."""
    r = SortedRuns(np.uint64, carry=True)
    r.add(np.array([5, 1, 3], np.uint64), 0, 0, values=np.array([50, 10, 30]))
    r.add(np.array([2, 1], np.uint64), 3, 2, values=np.array([20, 11]))        # rows 0 and 1 expired
    keys, offsets, base, values = r.small
    assert list(keys) == [1, 2, 3] and list(offsets + base) == [4, 3, 2] and list(values) == [11, 20, 30]


def test_sorted_runs_refuse_a_span_past_32_bits():
    """An offset that would not fit in 32 bits stops the run with a message, never wraps."""
    r = SortedRuns(np.uint64)
    r.add(np.array([1], np.uint64), 0, 0)
    with pytest.raises(RuntimeError, match="spans more than"):
        r.add(np.array([2], np.uint64), 1 << 32, 0)


SYMBOLS = [b"GOOG", b"GOO", b"GOOGL", b"AAPL", b"A", b"", b"BRK.B", b"LONGERTHAN8", b"LONGERTHAN9"]


def text_job_text(strategy="hash", run=""):
    """R.sym char8 against S.sym char12 (keys longer than 8 bytes on one side only)."""
    text = equi_job_text(('"4ms"', "6"), predicate='equi = [["R.sym", "S.sym"]]', strategy=strategy, run=run)
    return text.replace('k = "int32"', 'k = "int32", sym = "char8"').replace('k = "int64"', 'k = "int64", sym = "char12"')


def _text_streams(rng, n):
    job = parse_job(tomllib.loads(text_job_text()), "t.toml")
    arrays = random_streams(rng, n, key_range=5)
    out = []
    for k, a in enumerate(arrays):
        b = np.zeros(len(a), job.streams[k].dtype)
        for c in a.dtype.names:
            b[c] = a[c]
        b["sym"] = rng.choice(SYMBOLS, len(a))     # char8 truncates the long ones on R: they differ
        out.append(b)
    return job, out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(0, 300), method=st.sampled_from(["index", "bnl"]),
       batch=st.sampled_from([1, 16, 4096]))
def test_text_keys_join_by_value(seed, n, method, batch):
    job, arrays = _text_streams(np.random.default_rng(seed), n)
    got, _ = _drive(job, arrays, method, batch)
    want = run_oracle(job, arrays)
    assert as_set(got) == as_set(want)
    R, S = arrays
    rows = {tuple(r) for r in want}
    for r, s in rows:                          # the oracle itself compares the text, not a hash
        assert R["sym"][np.searchsorted(R["seq"], r)] == S["sym"][np.searchsorted(S["seq"], s)]


def test_equal_hashes_never_join_different_text():
    """Force every key's hash to one value: candidates then share a hash, and only equal text joins."""
    job, arrays = _text_streams(np.random.default_rng(9), 300)
    src = Source(job, arrays=arrays)
    j = BinaryJoin(job.predicate, src.dtypes, "index")
    j.hashes = lambda rows, s: np.full(len(rows), 7, np.uint64)   # what the index sorts and probes by
    got = []
    while not src.done:
        b = src.next_epoch()
        s0, s1, _ = j.step(b[0], b[1], src.bounds())
        got.append(np.stack([s0, s1], axis=1))
    assert as_set(np.concatenate(got)) == as_set(run_oracle(job, arrays))


def test_footprint_counts_capacity_and_index_against_raw_bytes():
    """The memory figures: bytes held include spare capacity and the sorted-run index; raw bytes
    are the staged columns of the rows held, and they fall to 0 when the windows empty."""
    import dataclasses
    from mpi_join.join.window import raw_itemsize
    job = parse_job(tomllib.loads(equi_job_text(('"50ms"', '"50ms"'))), "t.toml")
    job = dataclasses.replace(job, run=dataclasses.replace(job.run, batch_size=200))
    src = Source(job, arrays=random_streams(np.random.default_rng(2), 5000, key_range=50, ts_step=1))
    j = BinaryJoin(job.predicate, src.dtypes, "index")
    assert 0 < raw_itemsize(j.windows[0].dtype) < raw_itemsize(src.dtypes[0])    # R.k2 and R.v are not held
    checked = 0
    while not src.done:
        b = src.next_epoch()
        j.step(b[0], b[1], src.bounds())
        held, raw = j.footprint()
        n = [len(w) for w in j.windows]
        assert raw == sum(k * raw_itemsize(dt) for k, dt in zip(n, src.dtypes))     # the staged bytes
        assert held == sum(w._buf.nbytes for w in j.windows) + sum(r.nbytes for r in j.runs)
        if sum(n):
            rows = sum(k * w.dtype.itemsize for k, w in zip(n, j.windows))
            assert held >= rows + 12 * sum(n) and raw > 0            # every live row has an index entry
            checked += 1
    assert checked > 5 and j.footprint()[1] == 0


def _snapshots(job, method, seed):
    """Drive a join batch by batch; after each step, (join, [(snapshot rows, the source's runtime
    rows of the same tuples)] per stream)."""
    import dataclasses
    job = dataclasses.replace(job, run=dataclasses.replace(job.run, batch_size=5))
    src = Source(job, arrays=random_streams(np.random.default_rng(seed), 120, key_range=4))
    j = BinaryJoin(job.predicate, src.dtypes, method)
    sent, held = [[], []], 0
    while not src.done:
        b = src.next_epoch()
        for s in (0, 1):
            sent[s].append(b[s])
        j.step(b[0], b[1], src.bounds())
        held = max(held, len(j))
        out = []
        for s in (0, 1):
            rows, every = j.snapshot()[f"window/{s}"], np.concatenate(sent[s])
            # the runtime columns, without the payload no condition reads (held_columns)
            assert rows.dtype == j.state_dtypes[s] and len(rows) == len(j.windows[s])
            assert [n for n in src.dtypes[s].names if n in rows.dtype.names] == list(rows.dtype.names)
            out.append((rows, every[np.isin(every["seq"], rows["seq"])]))
        yield j, out
    assert held >= 5                       # the snapshots compared were not all empty


@pytest.mark.parametrize("windows,stored", [
    (('"40ms"', '"25ms"'), {0: set(), 1: set()}),            # time: coord and lo are ts
    (("4", '"25ms"'), {0: {"_coord"}, 1: {"_lo"}}),           # a count window's coordinates are stored
    (("4", "6"), {0: {"_coord", "_lo"}, 1: {"_coord", "_lo"}}),
])
@pytest.mark.parametrize("method", ["index", "bnl", "scan"])
def test_window_rows_store_only_what_cannot_be_derived_and_give_back_the_runtime_rows(windows, stored, method):
    """A window row leaves out the runtime columns its join derives (coordinate and lo under time
    windows, the key hash under the equi index, the key matrix of one int64 key: S.k is int64,
    R.k int32), and a snapshot gives back exactly the runtime rows the source made."""
    job = parse_job(tomllib.loads(equi_job_text(windows)), "t.toml")
    for j, streams in _snapshots(job, method, 3):
        for s, (rows, want) in enumerate(streams):
            names = set(j.dtypes[s].names)
            assert {"_coord", "_lo"} & names == stored[s]
            assert not names & {"k2", "v", "w"}, "payload columns no condition reads are not held"
            assert ("_h" in names) == (method != "index") and ("_key" in names) == (s == 0)
            for name in rows.dtype.names:
                if name != "_h":
                    assert np.array_equal(rows[name], want[name]), name
            # the key hash is the join's own (a router stamps the same one: partitioning.hashing)
            assert np.array_equal(rows["_h"], key_hash(key_matrix(want, ["k"])))


def test_a_band_window_row_keeps_no_key_hash_and_gives_back_every_runtime_column():
    job = parse_job(tomllib.loads(equi_job_text(('"5ms"', "4"), predicate=PREDICATES["band"])), "t.toml")
    for j, streams in _snapshots(job, "index", 5):
        assert all("_h" not in dt.names for dt in j.dtypes)
        for rows, want in streams:
            assert all(np.array_equal(rows[n], want[n]) for n in rows.dtype.names)


@pytest.mark.parametrize("pred,keep,held", [
    ("equi", (), ({"k"}, {"k"})),
    ("equi2", (), ({"k", "k2"}, {"k", "k2"})),
    ("equi+band", (), ({"k", "v"}, {"k", "w"})),
    ("band", ((1, "k2"),), (set(), {"k2"})),     # R.v, S.w held as _band alone; an aggregate's column kept
    ("band2", (), (set(), {"k"})),                # S.k is int64: float64 does not hold it exactly
    ("equi+theta", (), ({"k", "k2", "v"}, {"k", "k2", "w"})),   # a UDF reads whole records
])
def test_window_rows_hold_the_columns_the_join_reads_and_no_payload(pred, keep, held):
    """A result is a pair of seqs: a window row holds seq, ts, what the conditions and the caller
    read, and nothing else (the join still equals the oracle: the matrix tests above)."""
    job = parse_job(tomllib.loads(equi_job_text(('"5ms"', '"5ms"'), predicate=PREDICATES[pred])), "t.toml")
    src = Source(job, arrays=random_streams(np.random.default_rng(1), 40, key_range=4))
    j = BinaryJoin(job.predicate, src.dtypes, "index", keep=keep)
    for s in (0, 1):
        payload = {n for n in j.dtypes[s].names if not n.startswith("_")}
        assert payload == {"seq", "ts"} | held[s], (s, payload)
        # a snapshot or a move carries the band columns back (from _band)
        assert {n for n in j.state_dtypes[s].names if not n.startswith("_")} == payload | set(j.in_band[s])


@pytest.mark.parametrize("pred", ["equi", "band", "band2"])
@pytest.mark.parametrize("windows", [('"5ms"', '"3ms"'), ("4", "6")])
def test_a_window_of_older_rows_holds_no_arrival_time_and_gives_the_same_results(pred, windows):
    """`older`: rows come in seq order, so a result's arrival time is its probe's (the newer
    tuple's): a window row holds no `_tin`, and the results, arrival times included, are those of
    a join whose rows hold it, by step and by probe_newer."""
    import dataclasses
    job = parse_job(tomllib.loads(equi_job_text(windows, predicate=PREDICATES[pred])), "t.toml")
    job = dataclasses.replace(job, run=dataclasses.replace(job.run, batch_size=7))
    src = Source(job, arrays=random_streams(np.random.default_rng(3), 600, key_range=4))
    both = [BinaryJoin(job.predicate, src.dtypes, "index", older=o) for o in (False, True)]
    stores = [BinaryJoin(job.predicate, src.dtypes, "index", older=o) for o in (False, True)]
    assert "_tin" in both[0].dtypes[0].names and "_tin" not in both[1].dtypes[0].names
    got = [[], []]
    found = [[], []]
    while not src.done:
        b = src.next_epoch()
        for k in (0, 1):
            got[k].append(np.stack(both[k].step(b[0], b[1], src.bounds())))
            for s in (0, 1):          # store-then-probe: probe with s, then store it
                found[k].append(np.stack(stores[k].probe_newer(b[s], s)))
                stores[k].append(stores[k].derive(b[s], s), s)
            stores[k].expire(src.bounds())
    for res in (got, found):
        a, b = (np.concatenate(r, axis=1) for r in res)
        assert a.shape[1] > 20 and np.array_equal(a, b)
    snap = both[1].snapshot()["window/0"]          # a snapshot's rows hold a tin of 0
    assert "_tin" in snap.dtype.names and not snap["_tin"].any()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n_run=st.integers(0, 300), n_probe=st.integers(1, 120),
       domain=st.integers(1, 40), order=st.sampled_from(["ascending", "random", "descending"]),
       newer=st.booleans(), by_pos=st.booleans(), one_word=st.booleans(), shuffle=st.booleans())
def test_equi_run_finds_every_pair_whatever_the_probe_order(seed, n_run, n_probe, domain, order, newer, by_pos,
                                                            one_word, shuffle):
    """equi_run gallops from the last probe's entry while hashes ascend and searches anew when
    one goes down: the pairs are those of a brute-force comparison (duplicate keys, probes in
    any order; `newer`: only stored rows older than the probe; `by_pos`: the rows before a
    split are older than every probe, which sees those from first[i] on, by position alone;
    `one_word`: equal hashes taken as equal keys, which a one-word key's are; `shuffle`: the
    probes taken in a given order)."""
    from mpi_join.join.index_kernels import equi_run
    rng = np.random.default_rng(seed)
    xk = rng.integers(0, domain, n_run).astype(np.int64)
    pk = rng.integers(0, domain, n_probe).astype(np.int64)
    xh, ph = key_hash(xk[:, None]), key_hash(pk[:, None])
    if order != "random":
        o = np.argsort(ph, kind="stable")
        o = o if order == "ascending" else o[::-1]
        pk, ph = pk[o], ph[o]
    seqs = rng.permutation(2 * (n_run + n_probe)).astype(np.int64)     # distinct, as seqs are
    xs, ps = seqs[:n_run], seqs[n_run:n_run + n_probe]
    run = SortedRuns.of(xh, values=xs).big             # carrying each row's seq
    z = np.zeros
    oa, ob, ov = (np.empty(n_run * n_probe + 1, np.int64) for _ in range(3))
    first = rng.integers(0, n_run + 1, n_probe).astype(np.int64) if by_pos else np.zeros(0, np.int64)
    split = int(rng.integers(0, n_run + 1)) if by_pos else 0
    n = equi_run(pk[:, None], ph, ps, z(n_probe, np.int64), z(n_probe, np.int64), 0, run[0], run[1], run[3], 0,
                 xk[:, None], xs, z(n_run, np.int64), z(n_run, np.int64), 0, False, newer, first, split, one_word,
                 rng.permutation(n_probe) if shuffle else np.zeros(0, np.int64), oa, ob, ov)
    got = sorted(zip(oa[:n].tolist(), ob[:n].tolist()))
    assert (ov[:n] == xs[ob[:n]]).all()                # each pair's row's seq, read from the run
    want = sorted((i, j) for i in range(n_probe) for j in range(n_run)       # rows before split: by position
                  if pk[i] == xk[j] and (j >= first[i] if j < split else (not newer or xs[j] < ps[i])))
    assert got == want


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n_run=st.integers(0, 300), n_probe=st.integers(1, 120),
       domain=st.integers(1, 40), eps=st.sampled_from([0.0, 0.5, 1.0, 3.0]), closed=st.booleans(),
       order=st.sampled_from(["none", "ascending", "shuffled"]), odd=st.booleans())
def test_band_run_finds_every_pair_whatever_the_probe_order(seed, n_run, n_probe, domain, eps, closed, order, odd):
    """band_run gallops from the last probe's place while the probes' first band values ascend
    (`order`: the probes to take in turn; "shuffled" gives a random order, where it searches anew
    whenever a value goes down): the pairs are those of a brute-force test of both bands (values
    on a small grid, so many sit exactly on a band's edge; `odd`: NaN and infinities too, within
    no band)."""
    from mpi_join.join.index_kernels import band_run
    rng = np.random.default_rng(seed)

    def values(n):
        v = rng.integers(0, domain, (n, 2)).astype(np.float64) / 2
        if odd and n:
            v[rng.random((n, 2)) < 0.1] = rng.choice([np.nan, np.inf, -np.inf])
        return v
    xb, pb = values(n_run), values(n_probe)
    run = SortedRuns.of(np.nan_to_num(xb[:, 0], nan=np.inf, posinf=np.inf, neginf=-np.inf)).big
    o = {"none": np.zeros(0, np.int64), "ascending": np.argsort(pb[:, 0], kind="stable"),
         "shuffled": rng.permutation(n_probe)}[order]
    z = np.zeros
    oa, ob = np.empty(n_run * n_probe + 1, np.int64), np.empty(n_run * n_probe + 1, np.int64)
    e, c = np.array([eps, eps + 0.5]), np.array([closed, not closed])
    n = band_run(pb, z(n_probe, np.int64), z(n_probe, np.int64), z(n_probe, np.int64), 0, run[0], run[1], 0,
                 xb, z(n_run, np.int64), z(n_run, np.int64), z(n_run, np.int64), 0, e, c, False, o, oa, ob)
    got = sorted(zip(oa[:n].tolist(), ob[:n].tolist()))
    with np.errstate(invalid="ignore"):
        d = np.abs(pb[:, None, :] - xb[None, :, :])
        ok = np.where(c, d <= e, d < e).all(axis=2)
    assert got == sorted(zip(*map(np.ndarray.tolist, np.nonzero(ok))))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "expire", "drop"]), st.integers(0, 9000)), min_size=1,
                max_size=40))
def test_a_window_keeps_its_rows_in_order_and_no_large_buffer_under_a_quarter_full(ops):
    """Window (join/window.py) against a list: appends, expiries and drops in any order leave the
    rows a list would hold, with their absolute numbers (`base`); after an expiry or a drop a
    buffer of more than 4,096 rows is at least a quarter full (a chain's end segment that empties
    does not keep its peak's buffer), and after an append it has room for the rows."""
    from mpi_join.join.window import Window
    dt = np.dtype([("_coord", np.int64), ("v", np.int32)])
    w, ref, base, nxt = Window(dt), [], 0, 0
    for op, k in ops:
        if op == "append":
            b = np.zeros(k, dt)
            b["_coord"] = np.arange(nxt, nxt + k)
            b["v"] = b["_coord"] % 1000
            w.append(b)
            ref += b["_coord"].tolist()
            nxt += k
            assert len(w._buf) >= len(ref)
        else:
            before = w.view()
            gone = w.expire(ref[0] + k if ref else 0) if op == "expire" else w.drop(k)
            assert gone == min(len(ref), k if op == "drop" else sum(c < (ref[0] + k) for c in ref))
            assert before[:gone]["_coord"].tolist() == ref[:gone]        # a view taken before keeps its rows
            ref, base = ref[gone:], base + gone
            assert len(w._buf) <= 4096 or len(ref) >= len(w._buf) // 4
        assert w.view()["_coord"].tolist() == ref and w.base == base and len(w) == len(ref)
        assert (w.view()["v"] == w.view()["_coord"] % 1000).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "expire"]), st.integers(0, 20000)), min_size=1, max_size=24),
       st.integers(0, 2**32))
def test_sorted_runs_hold_every_live_row_once_in_key_order(ops, seed):
    """SortedRuns against a dict of live rows: adds (small runs merged into the big one at their
    threshold), expiry (`settle`) in any order; each run stays sorted by (key, row), every live
    row has exactly one entry, and the memory counted covers every entry kept."""
    rng = np.random.default_rng(seed)
    r, live, nxt, live_from = SortedRuns(np.uint64, carry=True), {}, 0, 0
    for op, k in ops:
        if op == "add":
            keys = rng.integers(0, 50, k).astype(np.uint64)
            r.add(keys, nxt, live_from, values=3 * np.arange(nxt, nxt + k))        # a value of its row's
            live.update(zip(range(nxt, nxt + k), keys.tolist()))
            nxt += k
        else:
            live_from = min(nxt, live_from + k)
            live = {row: key for row, key in live.items() if row >= live_from}
            r.settle(live_from, len(live))
        got = {}
        for keys, offs, base, values in r.runs():
            rows = offs.astype(np.int64) + base
            assert (values == 3 * rows).all()
            pairs = list(zip(keys.tolist(), rows.tolist()))
            assert pairs == sorted(pairs)
            for key, row in pairs:
                if row >= live_from:
                    assert row not in got
                    got[row] = key
        assert got == live
        entries = sum(len(keys) for keys, _, _, _ in r.runs())
        assert r.nbytes >= 20 * entries
        assert op == "add" or entries <= 2 * len(live) + 4096          # settled: few entries of rows gone


@pytest.mark.parametrize("pred", ["equi", "equi2", "band", "equi+band", "equi+theta"])
@pytest.mark.parametrize("method", ["index", "bnl", "scan"])
def test_a_row_layout_alone_derives_window_rows_and_gives_back_the_runtime_rows(pred, method):
    """slaves/join_rows.RowLayout without a join: runtime rows derived to window rows and back
    equal what the source made in every column a snapshot holds, and derived rows are not
    derived twice."""
    from mpi_join.slaves.join_rows import RowLayout
    job = parse_job(tomllib.loads(equi_job_text(("4", '"5ms"'), predicate=PREDICATES[pred])), "t.toml")
    src = Source(job, arrays=random_streams(np.random.default_rng(2), 60, key_range=4))
    layout = RowLayout(job.predicate, src.dtypes, method)
    batches = src.next_epoch()
    for s, b in enumerate(batches):
        rows = layout.derive(b, s)
        assert rows.dtype == layout.dtypes[s] and len(rows) == len(b)
        assert layout.derive(rows, s) is rows or layout.dtypes[s] == layout.runtime_dtypes[s]
        back = layout.runtime_rows(rows, s)
        assert back.dtype == layout.state_dtypes[s]
        for name in set(back.dtype.names) - {"_h"}:     # the hash is the join's own (a router stamps the same)
            assert np.array_equal(back[name], b[name], equal_nan=back[name].dtype.kind == "f"), (s, name)


def test_search_in_a_strided_window_column_is_numpys_searchsorted():
    """kernels.search (a window column searched where it lies, not copied) against
    np.searchsorted: both sides, scalars and arrays, empty columns and values, duplicates, a
    column of structured rows and a contiguous one."""
    from mpi_join.join.kernels import search
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = np.sort(rng.integers(0, 20, rng.integers(0, 30)))
        rows = np.zeros(len(a), [("seq", "i8"), ("c", "i8"), ("x", "f4")])
        rows["c"] = a
        v = rng.integers(-2, 23, rng.integers(0, 10))
        for col in (rows["c"], a):
            for side in ("left", "right"):
                assert search(col, v, side).tolist() == np.searchsorted(a, v, side).tolist()
                for x in v.tolist():
                    got = search(col, x, side)
                    assert isinstance(got, int) and got == int(np.searchsorted(a, x, side))


def test_bench_window_makes_as_many_results_a_batch_whatever_the_window(capsys):
    """`bench --case window` at a tiny size: its key domain grows with the window, so each window
    length's batches find about as many partners, in the local join and in a psp slice (what
    makes its per-batch times comparable)."""
    from mpi_join.tools.bench import bench_window
    rows = bench_window(seconds=(1, 4), rate=4000, batch=256, batches=6, say=lambda m: None)
    for col in (2, 5):                  # the local join's results a batch, a psp slice's
        found = [float(r[col].replace(",", "")) for r in rows]
        assert len(rows) == 2 and rows[0][col + 2] == "1.00x" and all(f > 0 for f in found)
        assert 0.5 < found[1] / found[0] < 2
    assert "psp slice: results" in capsys.readouterr().out


def test_a_scan_filters_each_block_so_an_equi_scan_stays_small():
    """The nested loop's candidates are every visible pair (a batch times the window); an equi
    join by `scan` (handshake's and llhj's default) filters each block of them by the key before
    the next, so 4,000 probes against 20,000 rows (80 M visible pairs, 1.3 GB as index pairs)
    stay within a few blocks' memory, and find exactly the index join's pairs."""
    import tracemalloc
    from mpi_join.join.window import runtime_dtype
    from mpi_join.slaves.local_join import find_pairs
    job = parse_job({"job": {"name": "scan", "ts_unit": "ms"}, "input": {"staged": "staged"},
                     "output": {"dir": "out"}, "predicate": {"equi": [["R.k", "S.k"]]},
                     "strategy": {"name": "llhj"},
                     "streams": {n: {"schema": {"k": "int64"}, "window": "1000s"} for n in ("R", "S")}}, "scan.toml")
    dts = [runtime_dtype(s.dtype) for s in job.streams]
    rng = np.random.default_rng(5)

    def rows(s, n, first):
        r = np.zeros(n, dts[s])
        r["seq"] = np.arange(first, first + n)
        r["ts"] = r["seq"]
        r["k"] = rng.integers(0, 5000, n)
        r["_coord"], r["_lo"] = r["ts"], r["ts"] - 10 ** 6
        return r
    X, P = rows(1, 20000, 0), rows(0, 4000, 20000)
    found = {}
    for method in ("scan", "index"):
        j = BinaryJoin(job.predicate, dts, method)
        j.append(j.layout.derive(X, 1), 1)
        Pd = j.layout.derive(P, 0)
        tracemalloc.start()
        _, a, _, b = find_pairs(j.layout, Pd, 0, j.windows[1].view(), j.windows[1].base, j.runs[1])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        found[method] = as_set(np.stack([P["seq"][a], X["seq"][b]], axis=1))
        if method == "scan":
            assert j.layout.method == "scan" and peak < 300e6, f"{peak / 1e6:.0f} MB"
    assert found["scan"] == found["index"] and len(found["scan"]) > 10000
