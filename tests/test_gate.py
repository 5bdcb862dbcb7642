"""The gate (mpi_join/gate.py): `pipeline` starts its ranks beside staging, and they wait at the
gate for "go" before they read the job, or leave quietly when the launcher stops them."""
import io
import os
import subprocess
import sys
import time

from mpi_join import gate
from mpi_join.launch import Launch, mpiexec_cmd
from mpi_join.tools.workloads import make

from conftest import mpi_join_pids, run_cli


def test_rank0_passes_the_gate_on_go_only():
    assert gate.opened(io.StringIO("go\n"))
    assert not gate.opened(io.StringIO(""))             # the launcher closed it (stopped, or died)
    assert not gate.opened(io.StringIO("stop\n"))


def _env():
    return dict(os.environ, MPI_JOIN_QUIET="1")


def test_gated_ranks_leave_quietly_when_stopped_and_run_the_job_after_go(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("MPI_JOIN_QUIET", "1")
    path = make("equi", str(tmp_path), tuples=3000)
    out = tmp_path / "out"
    stopped = Launch(mpiexec_cmd(3, ["run", path]), gated=True)
    time.sleep(1.0)                     # the ranks are at the gate, or on their way to it
    assert stopped.stop() == 2
    err = capfd.readouterr().err
    assert "error" not in err and "failed" not in err, err
    assert not out.exists()             # rank 0 read nothing of the job: no output directory, no lock

    started = Launch(mpiexec_cmd(3, ["run", path]), gated=True)
    started.go()
    assert started.wait() == 0
    v = run_cli("verify", str(out), "--job", path, env=_env())
    assert v.returncode == 0 and "OK" in v.stdout + v.stderr, v.stdout + v.stderr


def test_a_pipeline_whose_staging_fails_stops_its_ranks(tmp_path):
    """Staging refuses the input (every row unparseable): the one-line error, and none of the
    ranks started beside it is left behind."""
    path = make("equi", str(tmp_path), tuples=2000, raw="csv")
    for d, _, files in os.walk(tmp_path / "raw"):
        for f in files:
            p = os.path.join(d, f)
            with open(p) as fh:
                head, *rows = fh.read().splitlines()
            t = head.split(",").index('"event_time"')
            rows = [",".join("x" if i == t else v for i, v in enumerate(r.split(","))) for r in rows]
            with open(p, "w") as fh:
                fh.write("\n".join([head] + rows) + "\n")
    p = subprocess.run([sys.executable, "-m", "mpi_join", "pipeline", path, "-n", "3"], capture_output=True,
                       text=True, timeout=300, env=_env())
    assert p.returncode == 2, p.stderr[-2000:]
    assert "nothing staged" in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert mpi_join_pids(os.listdir("/proc"), marker=path) == []
    assert not os.path.exists(os.path.join(str(tmp_path), "out"))


def test_a_job_refused_after_the_gate_is_said_in_one_line(tmp_path, capfd):
    """The workers' guess at their kernels before the gate (ranks.warm_ahead) reads the job too:
    a job it cannot read is said once, by rank 0, after "go", as any run says it."""
    path = make("equi", str(tmp_path), tuples=2000)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('name = "hash"', 'name = "no-such-strategy"'))
    launch = Launch(mpiexec_cmd(3, ["run", path]), gated=True)
    launch.go()
    assert launch.wait() == 2
    err = capfd.readouterr().err
    assert err.count("mpi-join: error:") == 1 and "no-such-strategy" in err and "Traceback" not in err, err


def test_a_pipeline_of_a_job_it_refuses_stops_the_ranks_it_started(tmp_path):
    """`pipeline` starts its ranks before it reads the job: a job refused stops them."""
    path = make("equi", str(tmp_path), tuples=2000, raw="csv")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("[predicate]", "[predicate]\nbogus = 1"))
    p = subprocess.run([sys.executable, "-m", "mpi_join", "pipeline", path, "-n", "3"], capture_output=True,
                       text=True, timeout=300, env=_env())
    assert p.returncode == 2 and "bogus" in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert mpi_join_pids(os.listdir("/proc"), marker=path) == []
