"""mpi-join never deletes what it did not write: a user's files beside and inside the output
directory survive runs and reruns; an existing non-empty directory that no run has used is
refused unless --overwrite, and even then only mpi-join's own files are replaced."""
import os

import numpy as np

from conftest import equi_job_text, random_streams, run_local, write_job
from mpi_join.storage.results import read_results
from mpi_join.join.oracle import run_oracle
from reference import assert_same_rows


def _job(tmp_path, out):
    text = equi_job_text(('"5ms"', '"5ms"')).replace('dir = "out"', f'dir = "{out}"')
    arrays = random_streams(np.random.default_rng(3), 400)
    path, job = write_job(str(tmp_path / "job"), text, arrays)
    return path, job, arrays


def test_users_files_survive_runs_into_their_directory(tmp_path):
    mine = tmp_path / "mine"
    (mine / "results").mkdir(parents=True)
    (mine / "results" / "thesis.txt").write_text("four years")
    (mine / "notes.md").write_text("keep")
    path, job, arrays = _job(tmp_path, "../mine")
    p = run_local(3, "run", path, timeout=60)
    assert p.returncode == 2
    assert "exists, is not empty and holds no mpi-join run" in p.stderr and "--overwrite" in p.stderr
    for rerun in range(2):              # first with --overwrite, then a rerun into its own directory
        p = run_local(3, "run", path, *(["--overwrite"] if rerun == 0 else []), timeout=60)
        assert p.returncode == 0, p.stderr
        assert (mine / "results" / "thesis.txt").read_text() == "four years"
        assert (mine / "notes.md").read_text() == "keep"
        got = read_results(job.output, job.stream_names)
        assert_same_rows(got, run_oracle(job, arrays))
    assert os.path.exists(mine / ".mpi-join-run")
