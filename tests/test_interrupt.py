"""Ctrl-C is a clean stop: one line from rank 0, exit code 130, no traceback or MPI_Abort noise
from any rank, and no _SUCCESS (so collect will not take the partial results for whole)."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import MPIEXEC, equi_job_text, mpi_join_cmd, random_streams, write_job

SLOW = True

# signals to a run and Hydra's cleanup race on a loaded machine (once, a SIGTERM to the
# wrapper left a lock beside a full first phase): these run alone, in make test's third phase
ALONE = True


def signal_while_running(cmd, job, send):
    """Start `cmd` in a session of its own, call send(its pid) once its ranks have replayed for
    2 s, and return (the finished process, its stderr)."""
    env = dict(os.environ, MPI_JOIN_QUIET="1")
    p = subprocess.Popen(cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    try:
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(job.output, ".mpi-join-run")) and time.time() < deadline:
            assert p.poll() is None, p.communicate()
            time.sleep(0.1)
        time.sleep(2.0)                               # ranks are replaying and joining
        assert p.poll() is None, "the run ended before it could be stopped"
        send(p.pid)
        err = p.communicate(timeout=60)[1]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    return p, err


def test_ctrl_c_stops_every_rank_with_one_line(tmp_path):
    text = equi_job_text(('"50ms"', '"50ms"'), run='rate = 400\nflush_interval = "10ms"')
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(1), 20000))
    p, err = signal_while_running([MPIEXEC, "-n", "3", *mpi_join_cmd("run", path)], job,
                                  lambda pid: os.killpg(pid, signal.SIGINT))     # what a terminal sends on Ctrl-C
    assert p.returncode == 130, err
    assert not any(w in err for w in ("Traceback", "Abort", "failed")), err
    lines = [l for l in err.splitlines() if l.startswith("mpi-join")]
    assert lines == ["mpi-join: interrupted by the user; no _SUCCESS written; no result part file had been "
                     "written yet"], err       # results are buffered up to a part file's size
    assert not os.listdir(os.path.join(job.output, "results"))
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


@pytest.mark.parametrize("how,sig", [("wrapper", signal.SIGINT), ("wrapper", signal.SIGTERM),
                                     ("every process", signal.SIGTERM)],
                         ids=["SIGINT-to-wrapper", "SIGTERM-to-wrapper", "SIGTERM-to-all"])
def test_a_signal_as_a_scheduler_sends_it_stops_every_rank_with_one_line(tmp_path, how, sig):
    """Issue: SIGINT to the `mpi-join run -n N` wrapper's pid alone let the ranks finish and write
    _SUCCESS, then exit 130 with no line; SIGTERM to every process of a run (what scancel does)
    exited 143 with no line and left its locks behind. Checks: exit 128 + the signal, one line
    from rank 0 saying what stopped it, no _SUCCESS, no lock left, no traceback."""
    text = equi_job_text(('"50ms"', '"50ms"'), run='rate = 400\nflush_interval = "10ms"')
    text += '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 100000\n'
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(1), 20000))
    p, err = signal_while_running(mpi_join_cmd("run", "-n", "3", path), job,
                                  lambda pid: os.kill(pid, sig) if how == "wrapper" else os.killpg(pid, sig))
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert not any(w in err for w in ("Traceback", "Abort", "failed", "[mpiexec@")), err
    lines = [ln for ln in err.splitlines() if ln.startswith("mpi-join")]
    why = "interrupted by the user" if sig == signal.SIGINT else "stopped by SIGTERM"
    assert lines == [f"mpi-join: {why}; no _SUCCESS written; no result part file had been written yet"], err
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    for d in (job.output, job.checkpoint.dir):
        assert not os.path.exists(os.path.join(d, ".mpi-join.lock")), f"a lock was left in {d}"


RANK_LEAVES_EARLY = """
import os, sys, time
from mpi4py import MPI
from mpi_join.runtime.hydra import finalize_pmi
rank = MPI.COMM_WORLD.Get_rank()
MPI.COMM_WORLD.Barrier()
if rank == 1:                                   # a stopped worker: leaves at once with 130
    said = finalize_pmi() if sys.argv[1] == "finalize" else None
    print(f"rank 1 finalize_pmi {said}", flush=True)
    os._exit(130)
time.sleep(1.5)                                 # the others still in their handlers
open(os.path.join(sys.argv[2], f"alive.{rank}"), "w").close()
os._exit(130)
"""


@pytest.mark.parametrize("leaves", ["finalize", "plain"])
def test_a_rank_that_finalizes_pmi_leaves_the_others_running(tmp_path, leaves):
    """Under mpiexec a rank that exits without PMI finalize makes Hydra SIGKILL the others (the
    launch then exits 9 when it reaps one of them first, not 130); runtime/hydra.finalize_pmi is
    what a stopped worker says first, so the others finish their handlers and the launch exits
    130. The plain exit is checked too, so this test sees the difference it relies on."""
    script = tmp_path / "leave.py"
    script.write_text(RANK_LEAVES_EARLY)
    p = subprocess.run([MPIEXEC, "-n", "3", sys.executable, str(script), leaves, str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    alive = sorted(f for f in os.listdir(tmp_path) if f.startswith("alive."))
    if leaves == "finalize":
        assert "rank 1 finalize_pmi True" in p.stdout, (p.stdout, p.stderr)
        assert (p.returncode, alive) == (130, ["alive.0", "alive.2"]), (p.returncode, p.stdout, p.stderr)
    else:
        assert alive == [], (p.returncode, p.stdout, p.stderr)     # Hydra ended ranks 0 and 2


def test_finalize_pmi_does_nothing_outside_hydra():
    """A run in process or under srun has no Hydra proxy for a parent: nothing is written to
    any descriptor."""
    from mpi_join.runtime.hydra import finalize_pmi, under_hydra
    assert under_hydra() is None and finalize_pmi() is False
