"""Staging and collection on a real standalone Spark cluster (a master and two workers as
separate processes, jobs/cluster/spark-standalone.sh) give the same staged data and results as
local mode."""
import json
import os
import socket
import subprocess
import sys
import urllib.request

import numpy as np
import pyarrow.parquet as pq
import pytest

from mpi_join.config import load_job
from mpi_join.storage.spark.session import SHORT_LIVED
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from mpi_join.storage.staged import read_staged
from mpi_join.tools.workloads import make
from conftest import run_cli, run_mpi
from reference import as_set

SLOW = True
# the cluster's JVMs (daemons and executors) run small work: C1 only, the serial collector
EXECUTORS = ("--conf", f"spark.executor.extraJavaOptions={SHORT_LIVED}")
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jobs", "cluster",
                      "spark-standalone.sh")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    port, ui = _free_port(), _free_port()
    env = dict(os.environ, PYTHON=sys.executable, SPARK_STANDALONE_DIR=str(tmp_path_factory.mktemp("spark")),
               SPARK_MASTER_PORT=str(port), SPARK_MASTER_WEBUI_PORT=str(ui), SPARK_DAEMON_JAVA_OPTS=SHORT_LIVED)
    up = subprocess.run([SCRIPT, "up", "2"], capture_output=True, text=True, env=env, timeout=180)
    assert up.returncode == 0, up.stderr + up.stdout
    yield f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}/json/"
    subprocess.run([SCRIPT, "down"], capture_output=True, text=True, env=env, timeout=60)


def test_stage_and_collect_on_a_standalone_cluster_equal_local_mode(cluster, tmp_path):
    """Staged data equal to the generator's own staging (which local mode equals: test_spark.py),
    and collected results equal to the run's, with payloads that satisfy the join."""
    master, status = cluster
    path = make("equi", str(tmp_path / "raw"), tuples=6000, seed=3, window="1s", domain_bits=8, raw="csv")
    direct = load_job(make("equi", str(tmp_path / "direct"), tuples=6000, seed=3, window="1s", domain_bits=8))
    job = load_job(path)
    # the cluster stages with Spark's range partitioning (not the one-partition small-input path)
    p = run_cli("stage", path, "--master", master, "--conf", "spark.mpijoin.stage.smallInputBytes=0", *EXECUTORS,
                timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]
    assert len([f for f in os.listdir(os.path.join(job.staged, "R")) if f.endswith(".parquet")]) > 1
    for a, b in zip(read_staged(job), read_staged(direct)):
        assert a.dtype == b.dtype and len(a) == len(b) > 0
        for c in a.dtype.names:
            assert np.array_equal(a[c], b[c]), c
    assert run_mpi(3, "run", path).returncode == 0
    out = str(tmp_path / "collected")
    c = run_cli("collect", job.output, "--job", path, "--out", out, "--with-payload", "--master", master, *EXECUTORS,
                timeout=400)
    assert c.returncode == 0, c.stderr[-3000:]
    got = pq.read_table(out)
    pairs = read_results(job.output, job.stream_names)
    assert got.num_rows == len(pairs) == len(run_oracle(job, read_staged(job))) > 0
    assert as_set(np.stack([got["R_seq"].to_numpy(), got["S_seq"].to_numpy()], axis=1)) == as_set(pairs)
    assert np.array_equal(got["R_key"].to_numpy(), got["S_key"].to_numpy())      # payloads joined right
    apps = json.load(urllib.request.urlopen(status, timeout=5))
    assert len(apps["completedapps"]) >= 2 and len(apps["workers"]) == 2     # the work went to the cluster
