"""`mpi-join live`'s parts that need no ranks or Spark: the restart strategy, the status figures,
the refusals before anything starts, its children ending with it."""
import json
import os
import signal
import subprocess
import sys
import time

from mpi_join.config import Restart, load_job
from mpi_join.live import Restarts, Status, line
from mpi_join.parent_death import ENV
from mpi_join.storage.paths import _proc_start

from conftest import cli


def test_fixed_delay_allows_the_attempts_in_all_and_failure_rate_within_its_interval():
    fixed = Restarts(Restart(attempts=2))
    assert [fixed.allow(t) for t in (0, 100, 10_000)] == [True, True, False] and fixed.count == 2
    assert "2 restart(s) already" in fixed.why_not()
    rate = Restarts(Restart(attempts=2, interval_ns=60 * 10**9))
    assert [rate.allow(t) for t in (0, 10, 20, 65, 69, 200)] == [True, True, False, True, False, True]
    assert rate.count == 4 and "within 60 s" in rate.why_not()
    assert Restarts(Restart(attempts=0)).allow(0) is False


JOB = """
[job]
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.R]
schema = { k = "int32" }
window = "1s"
raw = { path = "raw/R", format = "csv", time = "t", time_unit = "ms" }
[streams.S]
schema = { k = "int32" }
window = "1s"
raw = { path = "raw/S", format = "csv", time = "t", time_unit = "ms" }
[predicate]
equi = [["R.k", "S.k"]]
[strategy]
name = "hash"
"""


def test_status_rates_come_from_the_log_and_the_commits(tmp_path):
    (tmp_path / "job.toml").write_text(JOB + '[live]\nrestart_attempts = 5\nrestart_delay = "0s"\n'
                                             'restart_interval = "1min"\n')
    job = load_job(str(tmp_path / "job.toml"))
    assert job.restart == Restart(5, 0, 60 * 10**9)
    st = Status(job)
    first = st.sample({"stager": 0, "run": 0})
    assert first["results"] == 0 and first["watermark"] is None and "watermark lag -" in line(first)
    os.makedirs(tmp_path / "staged")
    os.makedirs(tmp_path / "out")
    (tmp_path / "staged" / "_manifest.json").write_text(json.dumps(
        {"streams": {"R": {"count": 500}, "S": {"count": 300}}, "quarantined": {"R": 2, "S": 0},
         "log": {"watermark": 1000, "batches": 4, "ended": None}}))
    (tmp_path / "out" / "_COMMITTED").write_text(json.dumps(
        {"format": "mpi-join-results-log/1", "files": {}, "results": 900, "commits": 3, "input_offset": 700}))
    st.last["t"] -= 1.0                                   # one second since the last look
    s = st.sample({"stager": 1, "run": 0})
    assert 450 < s["streams"]["R"]["staged_per_s"] <= 500 and s["streams"]["R"]["quarantined"] == 2
    assert s["results"] == 900 and 800 < s["results_per_s"] <= 900 and s["commits"] == 3
    assert s["watermark_lag_s"] > 1e9                      # event time 1 s after the epoch
    assert "restarts: stager 1, run 0" in line(s) and "results 900" in line(s)


def test_live_refuses_before_anything_starts(tmp_path):
    (tmp_path / "job.toml").write_text(JOB)
    r = cli("live", "-n", "3", tmp_path / "job.toml")
    assert r.returncode == 2 and "the landing directory of stream 'R' does not exist" in r.stderr, r.stderr
    for s in "RS":
        os.makedirs(tmp_path / "raw" / s)
    (tmp_path / "job.toml").write_text(JOB.replace('schema = { k = "int32" }', 'schema = { k = "int32", n = "string" }', 1))
    r = cli("live", "-n", "3", tmp_path / "job.toml")
    assert r.returncode == 2 and "streams.R.schema.n: a live log holds text at a fixed width" in r.stderr, r.stderr
    (tmp_path / "job.toml").write_text(JOB + "[live]\nrestart_attempts = -1\n")
    r = cli("live", "-n", "3", tmp_path / "job.toml")
    assert r.returncode == 2 and "live.restart_attempts" in r.stderr, r.stderr
    (tmp_path / "job.toml").write_text(JOB)
    r = cli("live", "-n", "1", tmp_path / "job.toml")       # hash needs a router and a slave
    assert r.returncode == 2 and "needs at least" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "staged").exists() and not (tmp_path / "out").exists()


def test_the_status_figures_are_served_to_prometheus(tmp_path):
    """--metrics-port: the figures of a status, scraped over HTTP in Prometheus' text format."""
    import socket
    import urllib.request
    from mpi_join.live import Exporter
    (tmp_path / "job.toml").write_text(JOB)
    job = load_job(str(tmp_path / "job.toml"))
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ex = Exporter(job, port, addr="127.0.0.1")
    st = Status(job).sample({"stager": 1, "run": 2})
    st["landing_latency_ms"] = {"total": {"p50": 1500.0, "p99": 4000.0, "results": 10}}
    st["streams"]["R"]["staged"] = 123
    ex.update(st)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'mpi_join_live_staged_rows{stream="R"} 123.0' in text
    assert 'mpi_join_live_restarts{child="run"} 2.0' in text
    assert 'mpi_join_live_landing_to_commit_seconds{quantile="0.99"} 4.0' in text
    ex.server[0].shutdown()
    r = cli("live", "-n", "3", "--metrics-port", "0", tmp_path / "job.toml")
    assert r.returncode == 2 and "--metrics-port" in r.stderr


def test_a_second_live_of_the_same_output_and_a_held_directory_are_refused_at_once(tmp_path):
    """`live` holds a lock beside its output directory for its life: a second `live` of the same
    job is refused with one line; so is a job whose staged directory another process holds."""
    from mpi_join.live import precheck
    (tmp_path / "job.toml").write_text(JOB)
    for s in "RS":
        os.makedirs(tmp_path / "raw" / s)
    job = load_job(str(tmp_path / "job.toml"))
    lock = precheck(job)
    try:
        r = cli("live", "-n", "3", tmp_path / "job.toml")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"live: {tmp_path / 'out'} is in use by another run" in r.stderr, r.stderr
    finally:
        lock.release()
    os.makedirs(tmp_path / "staged")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from mpi_join.storage.paths import DirLock; "
                               f"DirLock({str(tmp_path / 'staged')!r}, 'x').acquire(); print('held', flush=True); "
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = cli("live", "-n", "3", tmp_path / "job.toml")
        assert r.returncode == 2 and "the staged directory: " in r.stderr and "is in use by another process" in r.stderr
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / f".out.mpi-join-live.lock").exists(), "each refusal released live's lock"


def _supervise(sup):
    """The supervisor's loop (the signal handlers of `run` left out: set `sup.signal`); its
    children are killed afterwards whatever happened. Returns the loop's exit code."""
    try:
        return sup._loop()
    finally:
        for p in sup.children.values():
            p.kill()
            p.wait()


def test_a_run_that_dies_during_a_drain_is_restarted_to_finish_the_log(tmp_path):
    """Issue: a SIGTERM drain that met a run dying (a rank killed a moment before) ended live with
    143 and "the log stays open", though the stager had ended the log: the run was not restarted
    to commit the rest. The children here are real processes standing in for the two: a stager
    that ends when told to, a run that dies the first time and finishes the second."""
    from mpi_join.live import Supervisor
    (tmp_path / "job.toml").write_text(JOB + '[live]\nrestart_attempts = 2\nrestart_delay = "0.1s"\n')
    job = load_job(str(tmp_path / "job.toml"))
    os.makedirs(job.output)
    stager = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
              "time.sleep(60)\nsys.exit(1)")
    runs = []

    class Children(Supervisor):
        def _start(self, which):
            if which == "run":
                runs.append(len(runs))
                code = f"import sys; sys.exit({1 if len(runs) == 1 else 0})"
            else:                                   # told to end the log (`--until end`): it does
                code = "pass" if "--until" in self._args(which) else stager
            self.children[which] = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)

    said = []
    sup = Children(job, 3, said.append, status_every=100)
    sup.signal = signal.SIGTERM                 # asked to drain as the run dies
    assert _supervise(sup) == 0, said
    assert len(runs) == 2, said
    assert any("live: the run exited with code 1; restarting it" in s for s in said), said
    assert said[-1] == "live: the log has ended and every result is committed", said
    sup.drain, sup.signal, runs[:] = False, signal.SIGTERM, []       # stopping at once: no restart
    sup.children, sup.ended = {}, set()
    assert _supervise(sup) == 128 + signal.SIGTERM, said


def test_a_stager_that_dies_during_a_drain_is_restarted_to_end_the_log(tmp_path):
    """The drain's other half: the stager dies instead of ending the log (it would have left the
    run following a log that never ends). It is restarted with `--until end`: it stages what has
    landed and ends the log, as the SIGTERM it missed would have; then the run finishes."""
    from mpi_join.live import Supervisor
    (tmp_path / "job.toml").write_text(JOB + '[live]\nrestart_attempts = 2\nrestart_delay = "0.1s"\n')
    job = load_job(str(tmp_path / "job.toml"))
    os.makedirs(job.output)
    flag = tmp_path / "log-ended"
    stagers = []

    class Children(Supervisor):
        def _start(self, which):
            args = self._args(which)
            if which == "stager":
                stagers.append(args)
                ends = "--until" in args            # a stager told to end the log does, and exits 0
                code = f"open({str(flag)!r}, 'w').close()" if ends else "import sys; sys.exit(1)"
            else:                                   # a run that finishes once the log has ended
                code = f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)"
            self.children[which] = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
            if which == "run" and self.signal is None:
                self.signal = signal.SIGTERM        # asked to drain once both are up

    said = []
    sup = Children(job, 3, said.append, status_every=100)
    assert _supervise(sup) == 0, said
    assert len(stagers) == 2 and "--until" not in stagers[0], stagers
    assert stagers[1][stagers[1].index("--until") + 1] == "end", stagers
    assert any(s.startswith("live: the stager exited with code") and "restarting it" in s for s in said), said
    assert said[-1] == "live: the log has ended and every result is committed", said


_PARENT = """
import signal, subprocess, sys, time
from mpi_join.parent_death import child_env
child = subprocess.Popen([sys.executable, "-c", "from mpi_join.parent_death import arm\\n"
                          "import os, time\\narm()\\nprint(sorted(k for k in os.environ if 'PARENT_DEATH' in k), flush=True)\\n"
                          "time.sleep(60)"], start_new_session=True, env=child_env(None, signal.SIGTERM))
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_child_of_live_ends_when_live_is_sigkilled():
    """The supervisor's children run in sessions of their own; SIGKILL the supervisor and each is
    sent its signal by the kernel (parent_death.py), and hides the variable from its own children."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "[]"        # armed, and the variable is gone
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    end = time.monotonic() + 30
    while time.monotonic() < end and _proc_start(child) is not None:      # gone, or a zombie
        time.sleep(0.05)
    assert _proc_start(child) is None, "the child outlived its SIGKILLed parent"


def test_a_child_whose_parent_is_gone_already_ends_at_once():
    """`python -m mpi_join` arms first thing: started with a parent pid that is not its parent
    (that parent died before the child could ask), it sends itself the signal."""
    p = subprocess.run([sys.executable, "-m", "mpi_join", "--version"], capture_output=True, text=True,
                       env={**os.environ, ENV: "1:9"})
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    p = subprocess.run([sys.executable, "-m", "mpi_join", "--version"], capture_output=True, text=True,
                       env={**os.environ, ENV: "not-a-pid"})
    assert p.returncode == 0 and "version" in p.stdout, p.stdout + p.stderr


def test_a_signal_to_every_process_of_the_job_at_once_is_a_stop_not_an_error(tmp_path):
    """A cgroup stop sends SIGTERM to live, the stager (and its JVM) and the ranks together: the
    stager that loses its JVM exits 2, which live reported as `live: error: the stager stopped
    with a one-line error`. While live is stopping, that is part of the stop: the run is stopped
    at once, the log stays open, exit 128 + the signal, and no error is said."""
    from mpi_join.live import Supervisor
    (tmp_path / "job.toml").write_text(JOB)
    job = load_job(str(tmp_path / "job.toml"))
    os.makedirs(job.output)
    stopped = tmp_path / "run-stopped"

    class Children(Supervisor):
        def _start(self, which):
            if which == "stager":                   # its JVM is gone: a one-line error, exit 2
                code = "import sys, time; time.sleep(0.3); sys.exit(2)"
            else:                                   # a run that stops when told to
                code = (f"import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (open({str(stopped)!r}, "
                        f"'w').close(), sys.exit(143)))\ntime.sleep(60)")
            self.children[which] = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
            if which == "run":
                self.signal = signal.SIGTERM        # live got it too

    said = []
    sup = Children(job, 3, said.append, status_every=100)
    assert _supervise(sup) == 128 + signal.SIGTERM, said
    assert stopped.exists(), said
    assert not any("error" in s for s in said), said
    assert any("live: the stager stopped too (exit 2, above) while live was stopping" in s for s in said), said
    assert said[-1].startswith("live: stopped; the log stays open"), said


def test_live_says_at_its_start_which_reader_each_streams_files_take(tmp_path):
    """A job whose time format sends every file to Spark (a JVM start, seconds of latency) said
    nothing of it at live's start."""
    from mpi_join.live import expected_paths
    text = JOB.replace('format = "csv", time = "t", time_unit = "ms" }', 'format = "csv", time = "t", time_unit = "timestamp" }', 1)
    (tmp_path / "job.toml").write_text(text.replace('raw/S", format = "csv"', 'raw/S", format = "parquet"'))
    lines = expected_paths(load_job(str(tmp_path / "job.toml")))
    assert len(lines) == 2 and "ISO-8601 times" in lines[0] and "in the stager's process" in lines[0], lines
    assert "parquet files: read by Spark" in lines[1], lines
    (tmp_path / "job.toml").write_text(text.replace('raw/S", format = "csv"', 'raw/S", format = "json"'))
    lines = expected_paths(load_job(str(tmp_path / "job.toml")))
    assert "JSON lines with integer times in ms: read in the stager's process" in lines[1], lines


def test_live_decides_from_each_childs_end_alone():
    """The Supervisor's decision on a child's end is a pure function of the event (live.decide):
    each case of the exit table, with no process."""
    from signal import SIGTERM
    from mpi_join.live import decide
    assert decide("run", 0, None, True, False) == ([], "none", 0)                     # done
    assert decide("publisher", 0, None, True, False) == ([], "none", None)
    lines, action, code = decide("stager", 0, None, True, False)                    # a signal to it alone
    assert action == "restart" and code is None and "with the log open" in lines[0]
    lines, action, code = decide("stager", 0, None, True, True)
    assert action == "none" and "ended the log" in lines[0]
    assert decide("stager", 0, SIGTERM, True, False) == ([], "none", None)           # live's own drain
    assert decide("run", 143, SIGTERM, False, False) == ([], "none", 128 + SIGTERM)  # stopping at once
    assert decide("stager", 1, SIGTERM, False, False) == ([], "none", None)
    lines, action, code = decide("run", 2, SIGTERM, True, False)                     # a cgroup stop
    assert action == "stop now" and code == 128 + SIGTERM and "stopped too" in lines[0]
    lines, action, code = decide("stager", 2, None, True, False)                     # a one-line refusal
    assert (action, code) == ("give up", 2) and "not restarted" in lines[0]
    assert decide("run", 1, None, True, False) == ([], "restart", None)              # a crash
    assert decide("run", 137, SIGTERM, True, False) == ([], "restart", None)         # a drain needs the run
