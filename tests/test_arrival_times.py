"""A result's arrival time, from which its production delay is measured, is its newer tuple's
(README, "Benchmarks": what a window row holds): every strategy, on both window kinds, with the windows that
hold no `_tin` (a stored row that is always a pair's older) and those that must (handshake join,
where either tuple of a pair can be the newer)."""

import numpy as np
import pytest

from mpi_join import strategies
from mpi_join.join.oracle import run_oracle
from conftest import random_streams
from reference import as_set
from sim import SIM_WINDOWS, sim_job, simulate_strategy

NAMES = [n for n in strategies.names() if not strategies.get(n).testing]


@pytest.mark.parametrize("strategy", NAMES)
@pytest.mark.parametrize("kind", list(SIM_WINDOWS))
@pytest.mark.parametrize("pred", ["equi", "band"])
def test_each_result_carries_its_newer_tuples_arrival_time(strategy, kind, pred):
    job = sim_job(strategy, pred, kind)
    arrays = random_streams(np.random.default_rng(len(strategy) + len(kind)), 300, key_range=6)
    info = strategies.get(strategy)
    workers = max(3, info.min_ranks - 1)
    trace, tins = [], []
    params = {"local_join": "index"} if strategy in ("handshake", "llhj") else {}
    got, _, _ = simulate_strategy(strategy, job, arrays, workers, seed=5, batch_size=3, trace=trace,
                                  arrivals=tins, **params)
    assert as_set(got) == as_set(run_oracle(job, arrays)) and len(got) > 0
    # what the source released: each tuple's seq and the arrival time it stamped
    arrived = {}
    for call in trace:
        if call[0] == 0 and call[1] == "data":
            for b in call[4]:
                if b is not None and len(b) and "_tin" in b.dtype.names:
                    arrived.update(zip(b["seq"].tolist(), b["_tin"].tolist()))
    assert len(arrived) == sum(len(a) for a in arrays)
    assert len(set(arrived.values())) > 10, "the tuples must arrive at distinct times for the test to tell"
    want = np.array([arrived[int(s)] for s in got.max(axis=1)], np.int64)
    wrong = np.flatnonzero(np.asarray(tins, np.int64) != want)
    assert not len(wrong), (f"{len(wrong)} of {len(got)} results carry another arrival time than their "
                            f"newer tuple's, e.g. {got[wrong[0]].tolist()}")
