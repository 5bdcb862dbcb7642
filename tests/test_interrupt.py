"""Ctrl-C is a clean stop: one line from rank 0, exit code 130, no traceback or MPI_Abort noise
from any rank, and no _SUCCESS (so collect will not take the partial results for whole)."""
import os
import signal
import subprocess
import time

import numpy as np

from conftest import MPIEXEC, equi_job_text, mpi_join_cmd, random_streams, write_job

SLOW = True


def test_ctrl_c_stops_every_rank_with_one_line(tmp_path):
    text = equi_job_text(('"50ms"', '"50ms"'), run='rate = 400\nflush_interval = "10ms"')
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(1), 20000))
    env = dict(os.environ, MPI_JOIN_QUIET="1")
    p = subprocess.Popen([MPIEXEC, "-n", "3", *mpi_join_cmd("run", path)], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(job.output, ".mpi-join-run")) and time.time() < deadline:
            assert p.poll() is None, p.communicate()
            time.sleep(0.1)
        time.sleep(2.0)                               # ranks are replaying and joining
        assert p.poll() is None, "the run ended before it could be interrupted"
        os.killpg(p.pid, signal.SIGINT)               # what a terminal sends on Ctrl-C
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    assert not any(w in err for w in ("Traceback", "Abort", "failed")), err
    lines = [l for l in err.splitlines() if l.startswith("mpi-join")]
    assert lines == ["mpi-join: interrupted by the user; no _SUCCESS written; no result part file had been "
                     "written yet"], err       # results are buffered up to a part file's size
    assert not os.listdir(os.path.join(job.output, "results"))
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
