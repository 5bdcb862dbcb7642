"""`hash` under real mpiexec equals the oracle: P = 2, 3, 5; time and count windows; 1 and 2 keys."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpi_join.oracle import run_oracle
from mpi_join.results import read_results
from conftest import equi_job_text, random_streams, run_mpi, write_job
from reference import as_set

WINDOWS = {"time": ['"6ms"', '"2ms"', '"20ms"'], "count": ["5", "1", "17"]}


@pytest.mark.parametrize("ranks", [2, 3, 5])
@pytest.mark.parametrize("kind", ["time", "count"])
@pytest.mark.parametrize("keys", [1, 2])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(50, 3000), wi=st.integers(0, 2), wj=st.integers(0, 2),
       batch=st.sampled_from([1, 16, 256, 8192]), local_join=st.sampled_from(["index", "bnl"]),
       partitions=st.sampled_from([1, 7, 60]))
def test_hash_equals_oracle_under_mpiexec(tmp_path_factory, ranks, kind, keys, seed, n, wi, wj, batch,
                                          local_join, partitions):
    tmp = str(tmp_path_factory.mktemp("hash"))
    text = equi_job_text((WINDOWS[kind][wi], WINDOWS[kind][wj]), keys=keys,
                         extra_strategy=f'partitions = {partitions}\nlocal_join = "{local_join}"',
                         run=f"batch_size = {batch}\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(seed), n, key_range=12)
    path, job = write_job(tmp, text, arrays)
    p = run_mpi(ranks, "run", path)
    assert p.returncode == 0, p.stderr
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    assert len(got) == len(as_set(got)), "duplicated results"
    assert as_set(got) == as_set(expect)
    assert os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_demo_sized_run_with_rate_and_metrics(tmp_path):
    """A rate-limited run: production delay is measured and metrics are written per rank."""
    import json
    from mpi_join.workloads import make
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
    v = __import__("conftest").run_cli("verify", str(tmp_path / "out"), "--job", path)
    assert v.returncode == 0, v.stdout + v.stderr
