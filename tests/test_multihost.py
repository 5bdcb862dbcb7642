"""Runs across hosts: three Linux network namespaces joined by a bridge act as hosts
(jobs/cluster/netns-hosts.sh), mpiexec starts ranks in them, MPI traffic goes over TCP between
them. A cut link, a stopped rank and a killed host each abort the job with a one-line error
within the liveness timeout, and --resume then gives exactly the oracle's results.
Skipped, with the reason, where network namespaces cannot be made (not root, no `ip`)."""
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from conftest import MPIEXEC, equi_job_text, mpi_join_cmd, mpi_join_pids, random_streams, write_job
from reference import assert_same_rows
from test_checkpoint import CKPT, fault_after_checkpoints

SLOW = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "jobs", "cluster", "netns-hosts.sh")
PREFIX = "mjt"                     # namespaces of these tests (the script's default is mjh)
HOSTS = [f"{PREFIX}{i}" for i in (1, 2, 3)]
TIMEOUT_S = 4                      # run.liveness_timeout of these jobs


# read by netns-hosts.sh, in every launch of this module (fault_after_checkpoints included)
os.environ.update(MPI_JOIN_NETNS_PREFIX=PREFIX, MPIEXEC=MPIEXEC)


def _sh(*args, check=True):
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, check=check, timeout=60)


@pytest.fixture(scope="module")
def hosts():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        pytest.skip("multi-host tests need root, ip and unshare (network namespaces)")
    _sh("down", check=False)
    up = _sh("up", "3", check=False)
    if up.returncode != 0:
        _sh("down", check=False)
        pytest.skip(f"cannot make network namespaces here: {up.stderr.strip().splitlines()[-1:]}")
    yield HOSTS
    _sh("down", check=False)


def _cmd(n, *args):
    return [SCRIPT, "mpiexec", "-n", str(n), *mpi_join_cmd(*args)]


def _bytes(host):
    out = subprocess.run(["ip", "-n", host, "-s", "-j", "link", "show", f"v{host}"], capture_output=True,
                         text=True, check=True).stdout
    st = json.loads(out)[0]["stats64"]
    return st["rx"]["bytes"] + st["tx"]["bytes"]


def _job(tmp_path, n=24000, rate=None, every=None):
    run = f'liveness_timeout = "{TIMEOUT_S}s"'
    if rate:
        run += f'\nbatch_size = 400\nrate = {rate}\nflush_interval = "20ms"'
    text = equi_job_text(('"30ms"', "40"), run=run) + (CKPT.format(n=every) if every else "")
    arrays = random_streams(np.random.default_rng(5), n, key_range=30, ts_step=2)
    path, job = write_job(str(tmp_path), text, arrays)
    return path, job, arrays


def _exact(job, arrays):
    got = read_results(job.output, job.stream_names)
    assert_same_rows(got, run_oracle(job, arrays))


def test_a_run_across_three_hosts_over_tcp_equals_the_oracle(hosts, tmp_path):
    path, job, arrays = _job(tmp_path, n=40000)
    before = {h: _bytes(h) for h in hosts}
    p = subprocess.run(_cmd(3, "run", path), capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    _exact(job, arrays)
    moved = {h: _bytes(h) - before[h] for h in hosts}
    data = sum(a.nbytes for a in arrays)
    assert all(m > data / 4 for m in moved.values()), f"MPI traffic did not cross the veths: {moved} bytes"
    summary = json.load(open(os.path.join(job.output, "metrics", "summary.json")))
    assert summary["hosts"] == hosts
    assert [r["host"] for r in summary["ranks"]] == hosts
    table = p.stdout
    assert all(h in table for h in hosts)


def _pids_on(host, rank=None):
    return mpi_join_pids(subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout.split(),
                         rank)


def _cut_link():
    subprocess.run(["ip", "-n", f"{PREFIX}br", "link", "set", f"b{PREFIX}3", "down"], check=True)


def _stop_rank():
    pids = _pids_on(HOSTS[2], rank=2)
    assert pids, "rank 2 not found on its host"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def _kill_host():
    pids = _pids_on(HOSTS[2])
    assert pids, "no rank found on the host"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("fault,silent", [(_cut_link, True), (_stop_rank, True), (_kill_host, False)],
                         ids=["link-cut", "sigstop", "host-killed"])
def test_a_fault_aborts_with_one_line_then_resume_is_exactly_once(hosts, tmp_path, fault, silent):
    path, job, arrays = _job(tmp_path, n=12000, rate=1500, every=2000)
    root = job.checkpoint.dir
    try:
        p, took, err = fault_after_checkpoints(_cmd(3, "run", path), root, 1, 12000, fault,
                                          timeout=TIMEOUT_S + 30)
    finally:
        subprocess.run(["ip", "-n", f"{PREFIX}br", "link", "set", f"b{PREFIX}3", "up"])
    assert p.returncode != 0
    # (it ended at all, within fault_after_checkpoints' bound: the silence was noticed; no wall-clock assert)
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    errors = [ln for ln in err.splitlines() if ln.startswith("mpi-join: error:")]
    print(f"aborted {took:.1f} s after the fault, exit {p.returncode}: {errors[:1]}")
    if silent:
        assert errors and f"rank 2 on host {HOSTS[2]} has been silent for" in errors[0], err[-3000:]
        assert "last heard from it:" in errors[0]
    time.sleep(0.5)
    assert not _pids_on(HOSTS[2]), "a rank of the aborted job is still running on the cut host"
    r = subprocess.run(_cmd(3, "run", path, "--resume", root), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming from checkpoint" in r.stderr
    _exact(job, arrays)
