"""The chained in-memory index (slaves/chained_index.py) without MPI: an R store and an S store,
each probed by the other side's batches as a biclique unit does, together find exactly the
oracle's pairs whatever the archive period and slack; whole subindexes are discarded, those
inside every probe's window are joined unchecked, partly expired ones checked; the chain does
not depend on how rows are batched, and a snapshot restores it."""
from dataclasses import replace

import numpy as np
import pytest

from mpi_join.master.source import Source
from mpi_join.join.oracle import run_oracle
from mpi_join.slaves.chained_index import ChainedIndex
from conftest import random_streams
from reference import as_set
from sim import sim_job

STRATEGY = "biclique"


def _epochs(job, arrays, batch_size):
    job = replace(job, run=replace(job.run, batch_size=batch_size, rate=None))
    src = Source(job, arrays=arrays)
    while not src.done:
        batches = src.next_epoch()
        yield batches, src.bounds(), src.dtypes


def _run(job, arrays, period, delay, batch_size=5):
    stores, found = None, []
    for batches, bounds, dtypes in _epochs(job, arrays, batch_size):
        if stores is None:
            stores = [ChainedIndex(job.predicate, dtypes, "index", s, period, delay) for s in (0, 1)]
        for s, store in enumerate(stores):
            store.append(batches[s])
            (a, b, _), _ = store.probe(batches[1 - s])
            found.append(np.stack([a, b], axis=1))
            store.expire(bounds)
    return np.concatenate(found), stores


@pytest.mark.parametrize("pred", ["equi", "band", "theta"])
@pytest.mark.parametrize("kind", ["time", "count"])
@pytest.mark.parametrize("period,delay", [(1, 0), (3, 0), (4, 7), (1000, 0)])
def test_two_chained_stores_find_the_oracle_pairs(pred, kind, period, delay):
    job = sim_job(STRATEGY, pred, kind)
    arrays = random_streams(np.random.default_rng(period + delay), 400, key_range=6)
    got, stores = _run(job, arrays, period, delay)
    expect = run_oracle(job, arrays)
    assert len(expect) and len(got) == len(as_set(got)) and as_set(got) == as_set(expect)
    stats = [s.stats() for s in stores]
    if period < 1000:       # a period longer than the run: one subindex, never discarded
        assert all(st["subindexes_discarded"] > 0 for st in stats)
        assert sum(st["subindex_probes_unchecked"] for st in stats) > 0
    assert sum(st["subindex_probes_checked"] for st in stats) > 0


def test_discarding_is_whole_subindexes_and_waits_for_the_slack():
    job = sim_job(STRATEGY, "equi", "time")
    arrays = random_streams(np.random.default_rng(3), 300, key_range=6)
    held = {}
    for delay in (0, 20):
        _, stores = _run(job, arrays, 3, delay)
        for st in stores:
            assert all(sub.hi - sub.lo <= 3 or sub.closed for sub in st.subs)
            assert all(sub.closed for sub in list(st.subs)[:-1])
        held[delay] = stores[0].discarded
    assert held[20] <= held[0]       # a slack keeps subindexes longer


def test_the_chain_is_the_same_however_rows_are_batched_and_a_snapshot_restores_it():
    job = sim_job(STRATEGY, "band", "time")
    arrays = random_streams(np.random.default_rng(5), 300, key_range=6)
    shapes = []
    for bs in (1, 4, 50):
        stores = None
        for batches, _, dtypes in _epochs(job, arrays, bs):
            if stores is None:
                stores = ChainedIndex(job.predicate, dtypes, "index", 0, 2)
            stores.append(batches[0])
        shapes.append([(s.lo, s.hi, len(s.join)) for s in stores.subs])
        back = ChainedIndex(job.predicate, dtypes, "index", 0, 2)
        back.restore(stores.snapshot())
        assert [(s.lo, s.hi, len(s.join)) for s in back.subs] == shapes[-1]
    assert shapes[0] == shapes[1] == shapes[2] and len(shapes[0]) > 3
