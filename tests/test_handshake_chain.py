"""The handshake-join chain's workers and router driven without MPI (sim.simulate_strategy):
random delivery order across links, tiny batches so tuples cross between neighbours all the time,
equal to the oracle for chain lengths 1, 2 and 5, time and count windows, equi, band and theta
(all pairs of these values, pairwise.py, not every combination)."""

import numpy as np
import pytest

from mpi_join.join.oracle import run_oracle
from conftest import random_streams
from reference import assert_same_rows
from pairwise import all_pairs
from sim import SIM_PRED, SIM_WINDOWS, sim_job, simulate_strategy

STRATEGY = "handshake"   # whose time budget this file's tests count against (conftest.py)

PRED, WINDOWS = SIM_PRED, SIM_WINDOWS


def _job(pred, kind):
    return sim_job("handshake", pred, kind)


def _check(got, expect):
    assert len(expect) > 0
    assert_same_rows(got, expect)


@pytest.mark.parametrize("pred,kind,n,batch", all_pairs(PRED, WINDOWS, [1, 2, 5], [1, 4]))
def test_chain_equals_oracle(pred, kind, n, batch):
    """Batches of one tuple joined by a scan, or batches of four by the index."""
    job = _job(pred, kind)
    arrays = random_streams(np.random.default_rng(n * 7 + len(pred)), 300, key_range=8)
    got, mods, _ = simulate_strategy("handshake", job, arrays, n, seed=n + 10 * (batch > 1), batch_size=batch,
                                     local_join="scan" if batch == 1 else "index")
    _check(got, run_oracle(job, arrays))


def test_bursts_from_both_streams_cross_in_flight():
    """All R first then all S within each burst of equal timestamps: batches of both streams
    enter the two ends together and cross on every link."""
    job = _job("equi", "time")
    rng = np.random.default_rng(3)
    arrays = random_streams(rng, 900, key_range=5, ts_step=0)      # one timestamp: a single burst
    arrays[0]["ts"] //= 1
    got, _, _ = simulate_strategy("handshake", job, arrays, 4, seed=1, batch_size=3)
    _check(got, run_oracle(job, arrays))


@pytest.mark.parametrize("weights", ["1,3,1", "5,1,1"])
def test_weighted_segments(weights):
    job = _job("band", "count")
    arrays = random_streams(np.random.default_rng(8), 800, key_range=8)
    got, mods, _ = simulate_strategy("handshake", job, arrays, 3, seed=2, batch_size=2, weights=weights)
    _check(got, run_oracle(job, arrays))


@pytest.mark.parametrize("pred,kind,n,batch", all_pairs(PRED, WINDOWS, [1, 2, 5], [1, 5]))
def test_llhj_equals_oracle(pred, kind, n, batch):
    """Batches of one tuple or of five, joined by a scan or by the index."""
    job = _job(pred, kind)
    arrays = random_streams(np.random.default_rng(n * 5 + len(kind)), 300, key_range=8)
    seed = n if batch == 1 else n + 10
    got, mods, _ = simulate_strategy("llhj", job, arrays, n, seed=seed, batch_size=batch,
                                     local_join="index" if seed % 2 else "scan")
    _check(got, run_oracle(job, arrays))


@pytest.mark.parametrize("n", [1, 3])
def test_every_segment_is_empty_at_the_end_of_the_input(n):
    """At the end of the input each stream moves on to its exit, where the other stream's input
    has ended: what arrives there has met every partner and goes (handshake.Segment.drop_met),
    instead of the whole window piling up at the exit end."""
    job = _job("band", "time")
    arrays = random_streams(np.random.default_rng(4), 900, key_range=8)
    got, mods, _ = simulate_strategy("handshake", job, arrays, n, seed=3, batch_size=5, local_join="index")
    _check(got, run_oracle(job, arrays))
    held = {r: [len(w) for w in m.seg.join.windows] for r, m in mods.items()}
    assert all(h == [0, 0] for h in held.values()), held


def test_llhj_stamps_follow_a_plain_list_through_appends_drops_and_a_restore():
    """ring/llhj.Stamps keeps each stream's stamps in a buffer with room after them: against a
    plain list, through appends (the buffer regrown), drops at the front (moves, expiry), the
    first row stamped past a growing `done` (moved rows from a neighbour ahead), and a
    snapshot restored into a new one."""
    from mpi_join.ring.llhj import Stamps
    rng = np.random.default_rng(7)
    st, plain, done, regrown = Stamps(), [[], []], -1, set()
    for step in range(3000):
        s = int(rng.integers(2))
        op = rng.random()
        if op < 0.45:
            n, stamp = int(rng.integers(1, 40)), done + int(rng.integers(-3, 4))
            before = id(st.buf[s])
            st.append(s, n, stamp)
            plain[s] += [stamp] * n
            if id(st.buf[s]) != before:
                regrown.add(len(plain[s]))
        elif op < 0.75:
            k = int(rng.integers(-2, 30))
            st.drop(s, k)
            plain[s] = plain[s][max(k, 0):]
        else:
            done += int(rng.integers(0, 2))
        first = next((i for i, v in enumerate(plain[s]) if v > done), None)
        assert st.first_past(s, done) == first, step
        assert st[s].tolist() == plain[s], step
        if step % 500 == 499:
            from mpi_join.runtime.operator import Arrays
            arrays, _ = Arrays(st, "arrays", (np.dtype(np.int64),) * 2).snapshot()
            st = Stamps()
            Arrays(st, "arrays", (np.dtype(np.int64),) * 2).restore(arrays, {})
    assert len(regrown) > 5            # the buffers were regrown along the way, not made once
