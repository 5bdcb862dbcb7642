"""`hash` equals the oracle: P = 2, 3, 5; time and count windows; 1 and 2 keys, on the in-process
runtime (`run --local`; hash under mpiexec: test_strategies_mpi.py and the runs below)."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
SLOW = True
STRATEGY = "hash"   # whose time budget this file's tests count against (conftest.py)

from conftest import equi_job_text, random_streams, run_mpi, run_local, write_job
from reference import as_set, assert_same_rows

WINDOWS = {"time": ['"6ms"', '"2ms"', '"20ms"'], "count": ["5", "1", "17"]}


@pytest.mark.parametrize("ranks", [2, 3, 5])
@pytest.mark.parametrize("kind", ["time", "count"])
@pytest.mark.parametrize("keys", [1, 2])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(50, 3000), wi=st.integers(0, 2), wj=st.integers(0, 2),
       batch=st.sampled_from([1, 16, 256, 8192]), local_join=st.sampled_from(["index", "bnl"]),
       partitions=st.sampled_from([1, 7, 60]))
def test_hash_equals_oracle(tmp_path_factory, ranks, kind, keys, seed, n, wi, wj, batch, local_join, partitions):
    tmp = str(tmp_path_factory.mktemp("hash"))
    text = equi_job_text((WINDOWS[kind][wi], WINDOWS[kind][wj]), keys=keys,
                         extra_strategy=f'partitions = {partitions}\nlocal_join = "{local_join}"',
                         run=f"batch_size = {batch}\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(seed), n, key_range=12)
    path, job = write_job(tmp, text, arrays)
    p = run_local(ranks, "run", path)
    assert p.returncode == 0, p.stderr
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    assert_same_rows(got, expect)
    assert os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_demo_sized_run_with_rate_and_metrics(tmp_path):
    """A rate-limited run: production delay is measured and metrics are written per rank."""
    import json
    from mpi_join.tools.workloads import make
    path = make("equi", str(tmp_path), tuples=6000, rate=20000, window="50ms")
    with open(path) as f:
        text = f.read().replace('rate = "max"', "rate = 5000\nflush_interval = \"20ms\"")
    with open(path, "w") as f:
        f.write(text)
    p = run_mpi(3, "run", path)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out" / "metrics"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tuples"] == 6000
    assert summary["wall_s"] >= 0.5          # 6000 tuples at 2 x 5000/s take 0.6 s to replay
    assert summary["latency_ms"]["p50"] is not None and summary["latency_ms"]["p50"] < 5000
    assert {r["rank"] for r in summary["ranks"]} == {0, 1, 2}
    assert sum(r["results"] for r in summary["ranks"]) == summary["results"] > 0
    v = __import__("conftest").cli("verify", str(tmp_path / "out"), "--job", path)
    assert v.returncode == 0, v.stdout + v.stderr


def test_slow_slave_gets_backpressure_not_a_growing_queue(tmp_path):
    """With one slave made slow, the master never has more than max_inflight epochs unacknowledged
    to any slave, and the results are still exact."""
    import json
    text = equi_job_text(('"8ms"', "6"), extra_strategy="slow_rank = 2\nslow_delay = 1.0\nreorganize_every = 0",
                         run="batch_size = 40\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(11), 2000, key_range=10)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_mpi(3, "run", path)
    assert p.returncode == 0, p.stderr
    ranks = json.loads((tmp_path / "out" / "metrics" / "summary.json").read_text())["ranks"]
    master = next(r for r in ranks if r["rank"] == 0)
    assert master["epochs"] == 50
    assert master["peak_inflight"] == 2        # reached the bound, never beyond it
    assert as_set(read_results(job.output, job.stream_names)) == as_set(run_oracle(job, arrays))


def test_waiting_ranks_do_not_spin(tmp_path):
    """A slow replay leaves the slaves waiting most of the time; waiting must not burn CPU."""
    import json
    text = equi_job_text(('"8ms"', '"8ms"'), run='rate = 400\nflush_interval = "20ms"')
    arrays = random_streams(np.random.default_rng(5), 2400, key_range=10)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_mpi(5, "run", path)
    assert p.returncode == 0, p.stderr
    ranks = json.loads((tmp_path / "out" / "metrics" / "summary.json").read_text())["ranks"]
    for r in ranks:
        assert r["wall_s"] > 2.5                      # 2400 tuples at 2 x 400/s: 3 s of replay
        assert r["cpu_s"] < 0.5 * r["wall_s"], r      # mostly asleep, not polling
