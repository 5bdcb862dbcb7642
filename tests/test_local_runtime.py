"""`mpi-join run --local`: every rank a thread of one process (runtime/local.py). The same
driver, workers and output as under mpiexec: results equal to the mpiexec run's and the
oracle's, and a checkpoint of either resumes on the other."""
import os
import signal
import subprocess

import numpy as np
import pytest

from conftest import equi_job_text, random_streams, run_cli, run_local, run_mpi, write_job
from reference import as_set, assert_equals_oracle
from test_checkpoint import kill_after_checkpoints, kill_local_after_checkpoints, paced_checkpointed_job


def _exact(job, arrays):
    got = assert_equals_oracle(job, arrays)
    assert os.path.exists(os.path.join(job.output, "_SUCCESS"))
    return as_set(got)


@pytest.mark.parametrize("strategy,pred", [("hash", 'equi = [["R.k", "S.k"]]'),
                                           ("splitjoin", 'band = [{left = "R.v", right = "S.w", eps = 0.5}]')])
def test_local_run_equals_the_mpiexec_run_and_the_oracle(tmp_path, strategy, pred):
    arrays = random_streams(np.random.default_rng(3), 2000, key_range=8)
    text = equi_job_text(('"6ms"', "17"), strategy=strategy, predicate=pred, run="batch_size = 97\nmax_inflight = 2")
    seen = []
    for how in ("local", "mpiexec"):
        path, job = write_job(str(tmp_path / how), text, arrays)
        p = (run_local if how == "local" else run_mpi)(4, "run", path)
        assert p.returncode == 0, p.stderr + p.stdout
        seen.append(_exact(job, arrays))
        v = run_cli("verify", job.output, "--job", path)
        assert v.returncode == 0, v.stderr + v.stdout
    assert seen[0] == seen[1]


@pytest.mark.parametrize("seed", [(), ("--seed", "2")], ids=["threads", "seeded"])
def test_a_failing_rank_stops_the_local_run_with_its_rank_and_reason(tmp_path, seed):
    """As threads and stepped in one thread (`--seed`, mpi_join/stepped.py): the rank is named."""
    arrays = random_streams(np.random.default_rng(4), 3000, key_range=8)
    path, job = write_job(str(tmp_path), equi_job_text(('"6ms"', "17"), run="batch_size = 50"), arrays)
    p = run_local(3, "run", path, *seed, env={"MPI_JOIN_FAULT": "2:3"})
    assert p.returncode == 1, p.stderr + p.stdout
    assert "rank 2 failed" in p.stderr and "injected" in p.stderr.lower(), p.stderr
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_local_refuses_mpiexec(tmp_path):
    arrays = random_streams(np.random.default_rng(4), 100)
    path, _ = write_job(str(tmp_path), equi_job_text(('"6ms"', "17")), arrays)
    p = run_mpi(2, "run", "--local", path)
    assert p.returncode != 0
    assert "--local runs every rank in this one process" in p.stderr


@pytest.mark.parametrize("strategy,pred", [("hash", 'equi = [["R.k", "S.k"]]'),
                                           ("handshake", 'band = [{left = "R.v", right = "S.w", eps = 0.5}]')])
def test_checkpoints_of_a_local_run_resume_under_mpiexec_and_back(tmp_path, strategy, pred):
    """A local run killed after two checkpoints resumes under mpiexec; an mpiexec run whose rank
    is killed after two checkpoints resumes with --local; both equal the oracle, each result once."""
    total = 16000
    path, job, arrays = paced_checkpointed_job(tmp_path / "a", strategy, pred, total=total)
    p = kill_local_after_checkpoints(path, job.checkpoint.dir, 3, 2, total)
    assert p.returncode == -signal.SIGKILL
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    r = run_mpi(3, "run", path, "--resume", job.checkpoint.dir)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "resuming from checkpoint" in r.stderr
    _exact(job, arrays)

    path, job, arrays = paced_checkpointed_job(tmp_path / "b", strategy, pred, total=total)
    p = kill_after_checkpoints(path, job.checkpoint.dir, ranks=3, victim=2, checkpoints=2, total=total)
    assert p.returncode != 0
    r = run_local(3, "run", path, "--resume", job.checkpoint.dir)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "resuming from checkpoint" in r.stderr
    _exact(job, arrays)


def test_run_n_without_mpiexec_runs_the_ranks_in_process(tmp_path):
    """Where there is no mpiexec (none beside the interpreter, none on PATH), `run -n N` runs the
    N ranks in this process, says so in one line, and gives the oracle's results."""
    import sys
    root = tmp_path / "py"          # this venv, seen through an interpreter with no mpiexec beside it
    (root / "bin").mkdir(parents=True)
    os.symlink(sys.executable, root / "bin" / "python")
    os.symlink(os.path.join(sys.prefix, "lib"), root / "lib")
    with open(os.path.join(sys.prefix, "pyvenv.cfg")) as src, open(root / "pyvenv.cfg", "w") as dst:
        dst.write(src.read())
    arrays = random_streams(np.random.default_rng(6), 600, key_range=8)
    path, job = write_job(str(tmp_path / "job"), equi_job_text(('"6ms"', "17")), arrays)
    env = dict(os.environ, PATH=f"{root / 'bin'}:/usr/bin:/bin", MPI_JOIN_QUIET="1")
    p = subprocess.run([str(root / "bin" / "python"), "-m", "mpi_join", "run", "-n", "3", path],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr + p.stdout
    assert "no mpiexec here" in p.stderr and "running the 3 ranks in this process" in p.stderr, p.stderr
    _exact(job, arrays)
