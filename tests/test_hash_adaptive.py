"""Adaptive `hash`: migrations, declustering, sub-groups and fine tuning keep the results exactly
the oracle's (forced, on the in-process runtime); under real mpiexec, a slow slave loses
partition groups, a light load takes slaves out of service, sub-groups lower the master's peak."""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
SLOW = True
STRATEGY = "hash"   # whose time budget this file's tests count against (conftest.py)

from conftest import equi_job_text, random_streams, run_local, run_mpi, write_job
from reference import assert_same_rows


def _run(tmp, windows, strategy, run, n=3000, ranks=4, seed=1, keys=1, key_range=20, local=False):
    """Run on `ranks` ranks (in process with `local`: a forced reorganisation's exactness needs no
    processes; what measures load, pace or memory runs under mpiexec) and check the oracle's
    results; returns rank 0's metrics."""
    text = equi_job_text(windows, keys=keys, extra_strategy=strategy, run=run)
    arrays = random_streams(np.random.default_rng(seed), n, key_range=key_range)
    path, job = write_job(str(tmp), text, arrays)
    p = (run_local if local else run_mpi)(ranks, "run", path)
    assert p.returncode == 0, p.stderr
    got = read_results(job.output, job.stream_names)
    assert_same_rows(got, run_oracle(job, arrays))
    return json.loads(open(f"{job.output}/metrics/rank-0000.json").read())


@pytest.mark.parametrize("ranks", [3, 4, 5])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(["time", "count"]), keys=st.sampled_from([1, 2]),
       theta=st.sampled_from([0, 2]), local_join=st.sampled_from(["index", "bnl"]))
def test_migrations_at_every_epoch_equal_oracle(tmp_path_factory, ranks, seed, kind, keys, theta, local_join):
    w = ('"15ms"', '"4ms"') if kind == "time" else ("12", "30")
    m = _run(tmp_path_factory.mktemp("mig"), w,
             f'partitions = 9\nreorganize_every = 1\nforce = "migrate"\ntheta = {theta}\nblock_size = 256\n'
             f'local_join = "{local_join}"\nseed = {seed % 100}',
             "batch_size = 60\nmax_inflight = 2", ranks=ranks, seed=seed, keys=keys, local=True)
    assert len(m["migrations"]) >= 5


@pytest.mark.parametrize("kind", ["time", "count"])
def test_declustering_changes_active_slaves_and_stays_exact(tmp_path, kind):
    w = ('"10ms"', '"10ms"') if kind == "time" else ("20", "20")
    m = _run(tmp_path, w, 'partitions = 12\nreorganize_every = 2\nforce = "decluster"',
             "batch_size = 80", n=4000, ranks=4, local=True)
    assert m["deactivated"] and m["activated"]
    moved_out = {d["slave"] for d in m["deactivated"]}
    assert all(any(x["from"] == s for x in m["migrations"]) for s in moved_out)


def test_light_load_takes_slaves_out_of_service(tmp_path):
    """No slave is ever a supplier at a low rate: the master reduces the degree of declustering."""
    m = _run(tmp_path, ('"10ms"', '"10ms"'), "partitions = 12\nreorganize_every = 2",
             'batch_size = 100\nrate = 2000\nflush_interval = "20ms"', n=3000, ranks=5)
    assert len(m["deactivated"]) >= 2
    assert len(m["active_slaves"]) <= 2
    owners = {int(k): v for k, v in m["final_partitions"].items()}
    assert sum(owners[s] for s in m["active_slaves"]) == 12


def test_slow_slave_loses_partition_groups(tmp_path):
    """Slave 2 needs 1.5 s per 1000 tuples but gets about 1700 tuples/s: its buffer fills, it
    becomes a supplier and yields groups to the idle consumers."""
    m = _run(tmp_path, ('"10ms"', '"10ms"'),
             "partitions = 24\nreorganize_every = 5\ndeclustering = false\nslow_rank = 2\nslow_delay = 1.5\n"
             "buffer_capacity = 400\nconsumer_threshold = 0.3",
             'rate = 2500\nflush_interval = "20ms"\nbatch_size = 1000', n=12000, ranks=4)
    assert any(x["from"] == 2 for x in m["migrations"])
    assert all(x["from"] == 2 for x in m["migrations"])
    assert m["final_partitions"]["2"] < 8                      # started with 24 / 3 slaves
    assert max(o["2"] for o in m["occupancy"]) > 0.5


@pytest.mark.parametrize("g", [2, 3])
def test_sub_groups_equal_oracle(tmp_path, g):
    m = _run(tmp_path, ('"8ms"', "15"), f"partitions = 12\nsubgroups = {g}\nreorganize_every = 2\nforce = \"migrate\"",
             "batch_size = 90", n=3000, ranks=4, local=True)
    assert m["subgroups"] == g


def test_sub_groups_lower_the_masters_peak_buffer(tmp_path):
    peaks = {}
    for g in (1, 4):
        m = _run(tmp_path / str(g), ('"8ms"', '"8ms"'), f"partitions = 60\nsubgroups = {g}\nreorganize_every = 0",
                 "batch_size = 800", n=8000, ranks=5)
        peaks[g] = m["peak_buffer_bytes"]
    # one epoch's tuples at once, against (g + 1) / 2g of them: 5/8 for g = 4
    assert 0.5 < peaks[4] / peaks[1] < 0.75, peaks
