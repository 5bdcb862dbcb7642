"""Slurm for real: render scripts with `mpi-join slurm`, submit them to a single-node cluster
on localhost, and check the output against the oracle."""
import os

import pytest

from mpi_join.config import load_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from mpi_join.storage.staged import read_staged
from mpi_join.tools.workloads import make
SLOW = True

from conftest import run_cli
from reference import as_set
import slurm_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        slurm_cluster.ensure_installed()
        c = slurm_cluster.Cluster(str(tmp_path_factory.mktemp("slurm"))).start()
    except slurm_cluster.Unavailable as e:
        pytest.skip(f"no Slurm cluster here: {e}")
    yield c
    c.stop()


def _check(job_path, collected):
    job = load_job(job_path)
    expect = run_oracle(job, read_staged(job))
    assert as_set(read_results(job.output, job.stream_names)) == as_set(expect)
    import pyarrow.parquet as pq
    assert pq.read_table(collected).num_rows == len(expect) > 0


def test_one_job_stage_run_collect_with_mpiexec(cluster, tmp_path):
    path = make("equi", str(tmp_path / "w o r k"), tuples=3000, window="1s", raw="csv")   # spaces in paths
    r = run_cli("slurm", path, "--ntasks", "3", "--overcommit", "--launcher", "mpiexec", "--verify",
                "--partition", "debug", "--spark-master", "local[2]")
    assert r.returncode == 0, r.stderr
    script = r.stdout.split("submit with: sbatch ")[1].strip()
    state, err = cluster.sbatch([script])
    logs = os.path.join(os.path.dirname(path), "slurm-logs")
    log = "".join(open(os.path.join(logs, f)).read() for f in os.listdir(logs))
    assert state == "COMPLETED", state + err + log[-3000:] + cluster.log_tail()
    assert "OK: results equal the oracle" in log
    _check(path, os.path.join(os.path.dirname(path), "out-collected"))


def test_chain_of_jobs_with_srun(cluster, tmp_path):
    path = make("equi", str(tmp_path), tuples=3000, window="1s")                        # already staged
    r = run_cli("slurm", path, "--ntasks", "3", "--overcommit", "--chain", "--launcher", "srun",
                "--spark-master", "local[2]", "--submit", env=cluster.env)
    assert r.returncode == 0, r.stderr + r.stdout
    ids = r.stdout.split("job id(s)")[1].split()
    assert len(ids) == 2                                  # run, collect: nothing to stage
    states = cluster.wait(ids)
    logs = os.path.join(str(tmp_path), "slurm-logs")
    log = "".join(open(os.path.join(logs, f)).read() for f in os.listdir(logs))
    assert all(s == "COMPLETED" for s in states.values()), f"{states}\n{log[-3000:]}"
    _check(path, os.path.join(str(tmp_path), "out-collected"))


def test_rendered_script_quotes_values(tmp_path):
    from mpi_join.slurm import SlurmOptions, render
    path = make("equi", str(tmp_path / "it's $HOME"), tuples=100)
    text = next(iter(render(load_job(path), SlurmOptions(partition="a b", time="1:00:00")).values()))
    assert "#SBATCH --partition='a b'" in text
    assert "JOB=" + __import__("shlex").quote(os.path.abspath(path)) in text
    assert "$HOME" in text and "'\"'\"'" in text          # the quote and $ stay literal


def test_example_batch_script_in_jobs(cluster, tmp_path):
    import sys
    path = make("equi", str(tmp_path), tuples=2000, window="1s", raw="json")
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jobs", "slurm", "pipeline.sbatch")
    venv = os.path.dirname(os.path.dirname(sys.executable))
    state, err = cluster.sbatch(["--ntasks=3", "--overcommit", f"--output={tmp_path}/log-%j.out", script, path, venv],
                                cwd=str(tmp_path))
    log = "".join(open(os.path.join(str(tmp_path), f)).read() for f in os.listdir(str(tmp_path)) if f.startswith("log-"))
    assert state == "COMPLETED", state + err + log[-3000:]
    _check(path, os.path.join(str(tmp_path), "out-collected"))


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_run_step_spreads_ranks_over_nodes(tmp_path, nodes, launcher):
    """The run step asks for N nodes and launches on Slurm's node list with either launcher;
    stage and collect (in a chain) take one node."""
    from mpi_join.slurm import SlurmOptions, render
    job = load_job(make("equi", str(tmp_path), tuples=100, raw="csv"))
    one = next(iter(render(job, SlurmOptions(nodes=nodes, ntasks=4 * nodes, launcher=launcher)).values()))
    files = render(job, SlurmOptions(nodes=nodes, ntasks=4 * nodes, launcher=launcher, chain=True))
    run = files["equi-run.sbatch"]
    for text in (one, run):
        assert f"#SBATCH --nodes={nodes}\n" in text and f"#SBATCH --ntasks={4 * nodes}\n" in text
        assert "$SLURM_JOB_NODELIST" in text
        if launcher == "srun":
            assert 'srun --mpi=pmi2 -n "$SLURM_NTASKS" "$PY" -m mpi_join run "$JOB"' in text
        else:
            assert ' -launcher slurm -rmk slurm -n "$SLURM_NTASKS" "$PY" -m mpi_join run "$JOB"' in text
    for step in ("stage", "collect"):
        assert "#SBATCH --nodes=1\n" in files[f"equi-{step}.sbatch"]
