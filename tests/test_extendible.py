"""Extendible hashing of a partition group: invariants, buddy merging, no tuple lost or doubled."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mpi_join.partitioning.extendible import ExtendibleGroup

DT = np.dtype([("seq", "i8"), ("_coord", "i8"), ("_h", "u8"), ("pad", "S40")])


def _rows(seqs, keys):
    a = np.zeros(len(seqs), DT)
    a["seq"], a["_coord"], a["_h"] = seqs, seqs, keys
    return a


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "expire"]), st.integers(1, 120), st.integers(1, 40)),
                    min_size=1, max_size=25),
       theta=st.integers(2, 12), block=st.sampled_from([64, 128, 512]), seed=st.integers(0, 1000))
def test_invariants_hold_and_nothing_is_lost(ops, theta, block, seed):
    rng = np.random.default_rng(seed)
    g = ExtendibleGroup([DT, DT], theta=theta, block_bytes=block, max_depth=8)
    live = [set(), set()]
    seq = 0
    for op, n, k in ops:
        if op == "add":
            for s in (0, 1):
                seqs = np.arange(seq, seq + n)
                seq += n
                batch = _rows(seqs, rng.integers(0, k, n).astype(np.uint64))
                for b, rows in g.route(batch):
                    b.windows[s].append(rows)
                live[s] |= set(seqs.tolist())
        else:
            bound = seq - n
            g.expire([bound, bound])
            live = [{x for x in l if x >= bound} for l in live]
        g.tune()
        g.check()                                   # directory size, depths, entries, routing
        held = [sorted(int(x) for b in g.buckets() for x in b.windows[s].view()["seq"]) for s in (0, 1)]
        assert held == [sorted(l) for l in live]    # no tuple lost, none doubled
        for b in g.buckets():
            if g.blocks(b) > theta:                 # only when the directory cannot grow further
                assert b.depth == g.max_depth
            if g.blocks(b) < theta / 2 and b.depth > 0:
                other = g.buddy_of(b)               # a mergeable buddy would have been merged
                assert other.depth != b.depth or g.blocks(b) + g.blocks(other) >= theta


def test_split_doubles_directory_and_merge_restores_it():
    g = ExtendibleGroup([DT, DT], theta=4, block_bytes=DT.itemsize * 4)   # 4 tuples per block
    batch = _rows(np.arange(200), np.arange(200).astype(np.uint64))
    for b, rows in g.route(batch):
        b.windows[0].append(rows)
    g.tune()
    g.check()
    assert g.global_depth >= 3 and len(g.buckets()) > 4
    assert all(g.blocks(b) <= 4 for b in g.buckets())
    g.expire([10**9, 10**9])                        # everything expires
    g.tune()
    g.check()
    assert g.global_depth == 0 and len(g.buckets()) == 1


def test_state_round_trip_keeps_split_information():
    g = ExtendibleGroup([DT, DT], theta=3, block_bytes=DT.itemsize * 4)
    batch = _rows(np.arange(100), (np.arange(100) * 7).astype(np.uint64))
    for b, rows in g.route(batch):
        b.windows[1].append(rows)
    g.tune()
    arrays, info = g.state()
    h = ExtendibleGroup([DT, DT], theta=3, block_bytes=DT.itemsize * 4)
    h.install(arrays, info)
    h.check()
    assert h.global_depth == g.global_depth and [b.depth for b in h.buckets()] == [b.depth for b in g.buckets()]
    assert sorted(x for b in h.buckets() for x in b.windows[1].view()["seq"]) == list(range(100))
