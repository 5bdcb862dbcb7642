"""Live streams end to end: Spark stages landing directories continuously (stage --follow), a run
follows the staged log (run --follow) under mpiexec, parts are killed and restarted, and the
results equal the oracle's on the final log, late rows excluded."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq

from mpi_join.storage import checkpoint as ck
from mpi_join import strategies
from mpi_join.config import load_job
from mpi_join.storage.staged import read_staged
from mpi_join.storage.staged_log import LogWriter, waiting_dtype
import pytest

from mpi_join.storage.paths import LOCK

from conftest import cli, equi_job_text, mpi_join_cmd, mpi_join_pids, MPIEXEC, run_cli_no_spark

SLOW = True


@pytest.fixture(autouse=True)
def short_lived_stagers(monkeypatch):
    """The stagers these tests start as processes run small streams for seconds: their driver JVMs
    run C1-only with the serial collector (MPI_JOIN_SPARK_JAVA_OPTS adds session.SHORT_LIVED).
    Function-scoped: a module-scoped fixture makes its tests one xdist group (conftest)."""
    from mpi_join.storage.spark.session import SHORT_LIVED
    monkeypatch.setenv("MPI_JOIN_SPARK_JAVA_OPTS", SHORT_LIVED)

JOB = """
[job]
ts_unit = "ms"
[input]
staged = "staged"
allowed_lateness = "300ms"
[output]
dir = "out"
[streams.R]
schema = {{ k = "int32", v = "float64" }}
window = "{window}"
raw = {{ path = "raw/R", format = "csv", time = "t", time_unit = "ms" }}
[streams.S]
schema = {{ k = "int32", v = "float64" }}
window = "{window}"
raw = {{ path = "raw/S", format = "csv", time = "t", time_unit = "ms" }}
[predicate]
{predicate}
[strategy]
name = "{strategy}"
[run]
batch_size = 64
flush_interval = "10ms"
{extra}
"""

EQUI = 'equi = [["R.k", "S.k"]]'
BAND = 'band = [{ left = "R.v", right = "S.v", eps = 0.02 }]'


class Landing:
    """Writes CSV files into the landing directories as a source system would (write, then
    rename, so Spark never sees half a file), rows out of order within a file, and late rows
    on request; counts what it wrote."""

    def __init__(self, root, seed=7):
        self.root, self.rng, self.t, self.n, self.rows = root, np.random.default_rng(seed), 0, 0, {"R": [], "S": []}
        for s in "RS":
            os.makedirs(os.path.join(root, "raw", s), exist_ok=True)

    def count(self):
        return sum(len(v) for v in self.rows.values())

    def round(self, rows=150, late=0, bad=0):
        """`bad` rows per file have an event time Spark surely refuses (`oops`)."""
        for s in "RS":
            ts = self.t + np.sort(self.rng.integers(0, 400, rows))
            ts = ts + self.rng.integers(-150, 1, rows)                  # out of order, within the lateness
            ts = np.concatenate([ts, np.full(late, 1)])                  # far behind everything: late
            lines = [f"{int(t)},{int(self.rng.integers(0, 12))},{self.rng.random():.4f}" for t in ts]
            lines[1:1] = [f"oops,{int(self.rng.integers(0, 12))},0.5"] * bad
            self.rows[s] += [int(t) for t in ts]
            p = os.path.join(self.root, "raw", s, f".f{self.n:04d}.tmp")
            with open(p, "w") as f:
                f.write("t,k,v\n" + "\n".join(lines) + "\n")
            os.rename(p, os.path.join(self.root, "raw", s, f"f{self.n:04d}.csv"))
        self.t += 400
        self.n += 1


def _env():
    return dict(os.environ, MPI_JOIN_QUIET="1")


def _stager(tmp_path):
    return subprocess.Popen(mpi_join_cmd("stage", "--follow", "--trigger", "200ms", str(tmp_path / "job.toml")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=_env())


def _runner(tmp_path, *extra):
    return subprocess.Popen([MPIEXEC, "-n", "3", *mpi_join_cmd("run", "--follow", *extra, str(tmp_path / "job.toml"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=_env())


def _manifest(tmp_path):
    p = tmp_path / "staged" / "_manifest.json"
    return json.loads(p.read_text()) if p.exists() else None


@pytest.fixture(autouse=True)
def _no_process_left(monkeypatch):
    """Every process a test starts (stagers, runs, readers) is gone when it ends, failed or not:
    a stager left behind would stage on for the rest of the suite."""
    started = []

    class Tracked(subprocess.Popen):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.append(self)

    monkeypatch.setattr(subprocess, "Popen", Tracked)
    yield
    for p in started:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
            _reap(p)


def _reap(p):
    """The stderr of a killed process `p`, reaped; if children of sessions of their own still
    hold its pipes (a stager or run it started), its pipes are let go instead of waited on."""
    try:
        return p.communicate(timeout=10)[1] or ""
    except subprocess.TimeoutExpired:
        for f in (p.stdout, p.stderr):
            if f:
                f.close()
        p.wait()
        return "(its children still hold its output)"


def _wait(cond, what, timeout=120, feed=None):
    """Wait for `cond`; `feed`, if given, is called every 3 s meanwhile (more files land, as a
    source system keeps writing: a wait for the next checkpoint then never depends on how far
    the run had got before)."""
    t = time.time() + timeout
    fed = time.time()
    while not cond():
        assert time.time() < t, f"timed out waiting for {what}"
        if feed and time.time() - fed > 3:
            feed()
            fed = time.time()
        time.sleep(0.1)


def _accounted(tmp_path):
    """Rows the log has taken in: staged, late, or waiting for the watermark."""
    m = _manifest(tmp_path)
    if not m:
        return 0
    return m["total"] + sum(m["log"]["late"].values()) + ((m["log"].get("pending") or {}).get("rows") or 0)


def _batches(tmp_path):
    m = _manifest(tmp_path)
    return m["log"]["batches"] if m else 0


def _finish(p, what, timeout=180):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        raise AssertionError(f"{what} did not finish: {_reap(p)[-2000:]}")
    return p.returncode, out, err


def _check_final(tmp_path, land):
    """The log is complete (staged + late = written, nothing twice), late rows are quarantined
    with their lateness, and the run's results equal the oracle's on the final log."""
    job = load_job(str(tmp_path / "job.toml"))
    R, S = read_staged(job)
    man = _manifest(tmp_path)
    assert man["log"]["ended"]
    for name, arr in (("R", R), ("S", S)):
        qdir = tmp_path / "staged" / "_quarantine" / name
        late = pq.read_table(str(qdir)).to_pylist() if any(qdir.iterdir()) else []
        assert all(x["reason"].startswith("late by ") for x in late)
        assert man["log"]["late"][name] == len(late)
        assert sorted(arr["ts"].tolist() + [x["ts"] for x in late]) == sorted(land.rows[name])
    v = cli("verify", str(tmp_path / "out"), "--job", str(tmp_path / "job.toml"))
    assert v.returncode == 0 and "OK: results equal the oracle" in v.stdout, v.stdout + v.stderr
    return man


def test_live_equi_join_exactly_once_through_a_stager_kill_and_a_rank_kill(tmp_path):
    """The stager is SIGKILLed mid-stream and started again; a join rank is SIGKILLed and the run
    resumed from its checkpoint while the stager keeps going; then both die at once and both
    start again; late rows arrive; SIGTERM ends the log. The results equal the oracle's on the
    final log, and a reader following the commits throughout sees each result once."""
    (tmp_path / "job.toml").write_text(JOB.format(window="600ms", predicate=EQUI, strategy="hash", extra="")
                                       + '[checkpoint]\ndir = "ckpt"\nevery_tuples = 400\nkeep = 3\n')
    land = Landing(str(tmp_path))
    land.round()
    stager = _stager(tmp_path)
    _wait(lambda: _batches(tmp_path) >= 1, "the first batch")
    run = _runner(tmp_path)
    os.makedirs(tmp_path / "out", exist_ok=True)
    reader = subprocess.Popen(mpi_join_cmd("tail", str(tmp_path / "out")), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env())   # follows the commits throughout
    for _ in range(2):
        land.round()
    b = _batches(tmp_path)
    _wait(lambda: _batches(tmp_path) > b, "a batch of the new files")
    os.killpg(stager.pid, signal.SIGKILL)                  # the stager dies: no end marker
    stager.communicate()
    assert not _manifest(tmp_path)["log"]["ended"]
    land.round(late=3)
    stager = _stager(tmp_path)                            # ... and continues the log
    land.round()
    _wait(lambda: any(m for _, m in ck.list_checkpoints(str(tmp_path / "ckpt"))) if (tmp_path / "ckpt").is_dir()
          else False, "a checkpoint", feed=land.round)
    pids = mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], 1, str(tmp_path / "job.toml"))
    assert pids, "rank 1 not found"
    os.kill(pids[0], signal.SIGKILL)                      # a join rank dies; the stager goes on
    code, _, err = _finish(run, "the killed run")
    assert code != 0 and not (tmp_path / "out" / "_SUCCESS").exists()
    land.round()
    run = _runner(tmp_path, "--resume", str(tmp_path / "ckpt"))
    land.round(late=2)
    # both at once: the stager and a join rank die together; both start again
    def newest():          # by id: the count stays at `keep` once that many are kept
        return max([c for c, m in ck.list_checkpoints(str(tmp_path / "ckpt")) if m], default=-1)
    before = newest()
    _wait(lambda: newest() > before or run.poll() is not None, "a checkpoint of the resumed run", feed=land.round)
    pids = mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], 2, str(tmp_path / "job.toml"))
    assert pids and run.poll() is None, "rank 2 of the resumed run not found"
    os.killpg(stager.pid, signal.SIGKILL)
    os.kill(pids[0], signal.SIGKILL)
    stager.communicate()
    code, _, err = _finish(run, "the run killed with the stager")
    assert code != 0
    land.round()
    stager = _stager(tmp_path)
    run = _runner(tmp_path, "--resume", str(tmp_path / "ckpt"))
    land.round()
    _wait(lambda: _accounted(tmp_path) == land.count(), "every file taken in")
    os.killpg(stager.pid, signal.SIGTERM)                 # ends the log: everything waiting is committed
    code, out, err = _finish(stager, "the stager")
    assert code == 0, err[-2000:]
    assert "stopped by SIGTERM" in err and "the log has ended" in out
    code, out, err = _finish(run, "the resumed run")
    assert code == 0, err[-3000:]
    assert "resuming from checkpoint" in err
    man = _check_final(tmp_path, land)
    assert sum(man["log"]["late"].values()) >= 5 - 1     # the rows at t=1, written after the frontier passed them
    assert man["log"]["ended"]["reason"] == "stopped by SIGTERM"
    # the reader saw every result exactly once, across the rank kill and the resume
    code, out, err = _finish(reader, "the results reader", timeout=60)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "R_seq,S_seq,emit_ns,latency_ns"
    seen = [tuple(x.split(",")[:2]) for x in lines[1:]]
    assert len(seen) == len(set(seen))
    got = pq.read_table(str(tmp_path / "out" / "results"), columns=["R_seq", "S_seq"]).to_pylist()
    assert sorted(seen) == sorted((str(r["R_seq"]), str(r["S_seq"])) for r in got) and len(got) > 0


def test_live_band_join_ctrl_c_of_the_stager(tmp_path):
    (tmp_path / "job.toml").write_text(JOB.format(window="500ms", predicate=BAND, strategy="handshake", extra=""))
    land = Landing(str(tmp_path), seed=3)
    land.round()
    stager = _stager(tmp_path)
    _wait(lambda: _batches(tmp_path) >= 1, "the first batch")
    run = _runner(tmp_path)
    for k in range(3):
        land.round(late=2 if k == 1 else 0)
        time.sleep(0.5)
    _wait(lambda: _accounted(tmp_path) == land.count(), "every file taken in")
    # a careless producer writes 100 new rows under a name already staged (hidden name, rename):
    # Spark never reads a name twice; the stager quarantines them and says so (lost before)
    first = tmp_path / "raw" / "R" / "f0000.csv"
    (tmp_path / "raw" / "R" / ".again").write_text("t,k,v\n" + "".join(f"{t},3,0.5\n" for t in range(100)))
    os.rename(tmp_path / "raw" / "R" / ".again", first)
    _wait(lambda: _manifest(tmp_path)["log"]["rewritten"]["R"] == 100, "the rewritten file quarantined")
    os.killpg(stager.pid, signal.SIGINT)
    code, out, err = _finish(stager, "the stager")
    assert code == 0 and "stopped by SIGINT" in err, err[-2000:]
    said = [ln for ln in err.splitlines() if "rewritten after staging" in ln]
    assert len(said) == 1 and str(first) in said[0] and "100 row(s) not staged" in said[0], err[-2000:]
    assert pq.read_table(str(tmp_path / "staged/_quarantine/_rewritten/R")).num_rows == 100
    code, out, err = _finish(run, "the run")
    assert code == 0, err[-3000:]
    man = _check_final(tmp_path, land)
    assert man["quarantined"]["R"] == man["log"]["late"]["R"] + 100


def _cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def _settled(pids, hz, timeout=60):
    """Wait until the processes `pids` use under a tenth of a core over half a second (start-up
    or a batch done), so that what is measured next is their waiting."""
    t = time.time() + timeout
    while time.time() < t:
        before = _cpu_ticks(pids)
        time.sleep(0.5)
        if (_cpu_ticks(pids) - before) / hz < 0.05:
            return
    raise AssertionError(f"the ranks still busy after {timeout} s")


def test_a_run_waiting_on_the_log_uses_no_cpu_and_ends_with_it(tmp_path):
    """No Spark: the log is written with LogWriter. A following run started before the log
    exists waits for it and says so (it failed at once before); while no batch comes, its
    three ranks use next to no CPU; the log's batches are joined, the end marker ends the run,
    and the results equal the oracle's."""
    (tmp_path / "job.toml").write_text(JOB.format(window="50ms", predicate=EQUI, strategy="hash", extra=""))
    run = _runner(tmp_path)
    marker = str(tmp_path / "job.toml")
    _wait(lambda: len(mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], None, marker)) >= 3, "the ranks")
    pids = [p for p in mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], None, marker)]
    hz = os.sysconf("SC_CLK_TCK")
    _settled(pids, hz)                                     # started (imports, warm-up), waiting for the log
    for phase in ("no log yet", "no batch yet"):
        before, t0 = _cpu_ticks(pids), time.time()
        time.sleep(3)
        used = (_cpu_ticks(pids) - before) / hz
        wall = time.time() - t0
        assert run.poll() is None, run.communicate()[1][-2000:]
        # three ranks waiting: their heartbeats and looks at the manifest, not a core spinning
        assert used < 0.15 * wall, f"{phase}: the waiting ranks used {used:.2f} s of CPU in {wall:.1f} s"
        if phase == "no log yet":
            job, w, rng = _log_job(tmp_path, seed=1)
            _wait(lambda: (tmp_path / "out" / "_COMMITTED").exists(), "the first batch's results committed")
            _settled(pids, hz)
    w.commit(1, [_random_rows(job, 0, 1000, rng), _random_rows(job, 1, 1000, rng)], ["b.csv"])
    w.end("test")
    code, out, err = _finish(run, "the run")
    assert code == 0, err[-3000:]
    assert f"run --follow: waiting for the staged log {tmp_path / 'staged'} to appear" in err, err[-3000:]
    v = cli("verify", str(tmp_path / "out"), "--job", marker)
    assert v.returncode == 0 and "OK" in v.stdout, v.stdout + v.stderr


def test_two_sources_follow_a_log_through_a_rank_kill_and_resume(tmp_path):
    """run.sources = 2 following a log: commits come at part boundaries none of the sources has
    started; a worker SIGKILLed after one, --resume --follow goes on from it while the log
    grows, and the results on the final log equal the oracle's, each pair once."""
    job, w, rng = _log_job(tmp_path, seed=4, commit_every="100ms", batches=3, extra="sources = 2\npart = 128")
    cmd = [MPIEXEC, "-n", "4", *mpi_join_cmd("run", "--follow", str(tmp_path / "job.toml"))]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=_env())
    committed = tmp_path / "out" / "_COMMITTED"
    _wait(lambda: committed.exists() and json.loads(committed.read_text())["results"] > 0, "a commit")
    first = json.loads(committed.read_text())
    assert first["input_offset"] % 128 == 0, f"a commit at a part boundary: {first}"
    pids = mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], 1, str(tmp_path / "job.toml"))
    assert pids and run.poll() is None, "rank 1 not found"
    os.kill(pids[0], signal.SIGKILL)
    code, _, err = _finish(run, "the killed run")
    assert code != 0 and not (tmp_path / "out" / "_SUCCESS").exists()
    w.commit(3, [_random_rows(job, 0, 3000, rng), _random_rows(job, 1, 3000, rng)], ["d.csv"])
    cmd.insert(-1, "--resume")
    cmd.insert(-1, str(tmp_path / "out" / "_checkpoints"))
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=_env())
    time.sleep(1)
    w.commit(4, [_random_rows(job, 0, 4000, rng), _random_rows(job, 1, 4000, rng)], ["e.csv"])
    w.end("test")
    code, out, err = _finish(run, "the resumed run")
    assert code == 0, err[-3000:]
    assert "resuming from checkpoint" in err
    v = cli("verify", str(tmp_path / "out"), "--job", str(tmp_path / "job.toml"))
    assert v.returncode == 0 and "OK: results equal the oracle" in v.stdout, v.stdout + v.stderr
    summary = json.loads((tmp_path / "out" / "metrics" / "summary.json").read_text())
    at = summary["resumed_from"]["input_offset"]
    assert summary["sources"] == 2 and at > 0 and at % 128 == 0 and summary["tuples"] == 5 * 600 - at, summary


def test_a_followed_hash_join_rescales_from_3_to_5_ranks_and_back_while_the_log_grows(tmp_path):
    """Key groups, live: a run following the log on 3 ranks is SIGKILLed after a commit, resumed
    with --follow on 5 ranks (its slaves take the key groups from the 2 before), SIGKILLed again
    after a commit of its own, and resumed on 3, while batches keep landing: the results on the
    final log equal the oracle's, each pair once."""
    job, w, rng = _log_job(tmp_path, seed=9, commit_every="100ms", batches=3)
    committed = tmp_path / "out" / "_COMMITTED"
    ckpts = str(tmp_path / "out" / "_checkpoints")
    batch = 3
    for n, ranks in enumerate((3, 5)):
        before = json.loads(committed.read_text())["input_offset"] if committed.exists() else -1
        cmd = [MPIEXEC, "-n", str(ranks), *mpi_join_cmd("run", "--follow", *(("--resume", ckpts) if n else ()),
                                                         str(tmp_path / "job.toml"))]
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env=_env())
        w.commit(batch, [_random_rows(job, 0, batch * 1000, rng), _random_rows(job, 1, batch * 1000, rng)], ["r.csv"])
        batch += 1
        # a commit of this run's own checkpoint (a resume first commits what its checkpoint covers,
        # which moves the offset too when the run before was killed between a checkpoint and its commit)
        def newest_ranks():
            done = [m for _, m in ck.list_checkpoints(ckpts) if m] if os.path.isdir(ckpts) else []
            return done[-1]["ranks"] if done else None
        _wait(lambda: committed.exists() and json.loads(committed.read_text())["input_offset"] > before
              and newest_ranks() == ranks, f"a commit of the run on {ranks} ranks")
        pids = mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], ranks - 1, str(tmp_path / "job.toml"))
        assert pids and run.poll() is None, f"rank {ranks - 1} not found"
        os.kill(pids[0], signal.SIGKILL)
        code, _, err = _finish(run, f"the killed run on {ranks} ranks")
        assert code != 0 and not (tmp_path / "out" / "_SUCCESS").exists(), err[-2000:]
        assert [m for _, m in ck.list_checkpoints(ckpts) if m][-1]["ranks"] == ranks
    cmd = [MPIEXEC, "-n", "3", *mpi_join_cmd("run", "--follow", "--resume", ckpts, str(tmp_path / "job.toml"))]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=_env())
    time.sleep(1)
    w.commit(batch, [_random_rows(job, 0, batch * 1000, rng), _random_rows(job, 1, batch * 1000, rng)], ["z.csv"])
    w.end("test")
    code, out, err = _finish(run, "the run resumed on 3 ranks")
    assert code == 0 and "resuming from checkpoint" in err, err[-3000:]
    v = cli("verify", str(tmp_path / "out"), "--job", str(tmp_path / "job.toml"))
    assert v.returncode == 0 and "OK: results equal the oracle" in v.stdout, v.stdout + v.stderr


def test_ctrl_c_of_a_following_run(tmp_path):
    """Ctrl-C of a run waiting on the log: exit 130, one line saying what it committed stands."""
    job, w, rng = _log_job(tmp_path, seed=3, commit_every="100ms")
    launcher = subprocess.Popen([sys.executable, "-m", "mpi_join", "run", "-n", "3", "--follow", str(tmp_path / "job.toml")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    committed = tmp_path / "out" / "_COMMITTED"
    _wait(lambda: committed.exists() and json.loads(committed.read_text())["results"] > 0, "a commit")
    launcher.send_signal(signal.SIGINT)
    code, out, err = _finish(launcher, "the interrupted run", timeout=60)
    assert code == 130, err[-2000:]
    assert "interrupted by the user" in err and not (tmp_path / "out" / "_SUCCESS").exists()
    assert "results committed up to input seq" in err and "--resume" in err, err


def test_ctrl_c_when_rank_0_cannot_say_its_line_the_launcher_says_it(tmp_path):
    """Under load rank 0 may not run before mpiexec tears it down (the other ranks left at once):
    its one line was lost, and stderr held only a progress line. Rank 0 is stopped (SIGSTOP) to
    make that certain; `run -n 3` says the same line itself, and exits 130."""
    job, w, rng = _log_job(tmp_path, seed=4, commit_every="100ms")
    marker = str(tmp_path / "job.toml")
    launcher = subprocess.Popen([sys.executable, "-m", "mpi_join", "run", "-n", "3", "--follow", marker],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    committed = tmp_path / "out" / "_COMMITTED"
    _wait(lambda: committed.exists() and json.loads(committed.read_text())["results"] > 0, "a commit")
    rank0 = mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], 0, marker)
    assert rank0, "rank 0 not found"
    os.kill(rank0[0], signal.SIGSTOP)
    try:
        launcher.send_signal(signal.SIGINT)
        code, out, err = _finish(launcher, "the interrupted run", timeout=60)
    finally:
        try:
            os.kill(rank0[0], signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert code == 130, err[-2000:]
    said = [ln for ln in err.splitlines() if ln.startswith("mpi-join: interrupted by the user")]
    assert len(said) == 1 and "results committed up to input seq" in said[0] and "--resume" in said[0], err


def test_collect_of_a_running_live_run_reads_its_committed_prefix(spark, tmp_path):
    job, w, rng = _log_job(tmp_path, seed=2, commit_every="200ms", batches=2)
    run = _runner(tmp_path)
    committed = tmp_path / "out" / "_COMMITTED"
    _wait(lambda: committed.exists() and json.loads(committed.read_text())["results"] > 0, "a commit")
    rec = json.loads(committed.read_text())
    c = cli("collect", str(tmp_path / "out"), "--job", str(tmp_path / "job.toml"), "--out", str(tmp_path / "coll"))
    assert c.returncode == 0, c.stderr
    assert "has not finished: collecting its committed results" in c.stderr
    # exactly the prefix committed when collect read it (the run goes on committing meanwhile)
    summary = json.loads((tmp_path / "coll" / "_summary.json").read_text())
    n = pq.read_table(str(tmp_path / "coll")).num_rows
    assert n == summary["committed_prefix"]["results"] >= rec["results"] and not summary["partial"]
    w.end("test")
    code, out, err = _finish(run, "the run")
    assert code == 0, err[-3000:]
    assert json.loads(committed.read_text())["final"]


def _log_job(tmp_path, seed, commit_every=None, batches=1, extra=""):
    """A hash job over a staged log written without Spark, with `batches` batches committed:
    (job, its LogWriter, the random generator that made the rows)."""
    text = JOB.format(window="50ms", predicate=EQUI, strategy="hash", extra=extra)
    if commit_every:
        text = text.replace('dir = "out"', f'dir = "out"\ncommit_every = "{commit_every}"')
    (tmp_path / "job.toml").write_text(text)
    job = load_job(str(tmp_path / "job.toml"))
    w = LogWriter(job, job.staged, job.allowed_lateness, {"test": 1})
    rng = np.random.default_rng(seed)
    for b in range(batches):
        w.commit(b, [_random_rows(job, 0, b * 1000, rng), _random_rows(job, 1, b * 1000, rng)], ["a.csv"])
    return job, w, rng


def _random_rows(job, k, t0, rng, n=300):
    a = np.zeros(n, waiting_dtype(job.streams[k]))
    a["ts"] = t0 + np.sort(rng.integers(0, 1000, n))
    a["k"] = rng.integers(0, 10, n)
    a["v"] = rng.random(n)
    a["_rec"] = np.arange(1, n + 1)
    return a


AGG = 'aggregate = "sum(S.w), count(*), max(R.k2) by R.k"'
FOLLOWED = [  # (strategy, ranks, predicate, strategy parameters)
    ("hash", 3, None, ""),
    ("psp", 3, None, ""),
    ("handshake", 3, 'band = [{ left = "R.v", right = "S.w", eps = 0.05 }]', ""),
    ("llhj", 3, 'band = [{ left = "R.v", right = "S.w", eps = 0.05 }]', ""),
    ("splitjoin", 4, None, ""),
    ("matrix", 3, None, ""),
    # BiStream's elastic scaling and online aggregation, on live input
    ("biclique", 7, None, f"{AGG}\nupdate_ms = 20\nscaling = true\nspare_units = 1\nunit_capacity_mb = 0.002\n"
                          "scale_every_ms = 15\nconfirmations = 2"),
    # outer joins whose lone rows rank 0 writes from the results at each commit (storage/lone_rows.py):
    # once their windows have passed (matrix), once no rank holds them (a chain, a merge tree)
    ("matrix", 4, 'equi = [["R.k", "S.k"]]\nouter = ["R", "S"]', ""),
    ("handshake", 3, 'band = [{ left = "R.v", right = "S.w", eps = 0.005 }]\nouter = ["R"]', ""),
    ("splitjoin", 4, 'band = [{ left = "R.v", right = "S.w", eps = 0.005 }]\nouter = ["S"]', ""),
    # a filter on each stream (join/filters.py): applied to the log's rows as the run reads them
    ("hash", 3, 'equi = [["R.k", "S.k"]]\nfilter = { R = "v > 0.3 AND k2 = 1", S = "w < 0.8" }', ""),
]


def _log_rows(job, k, t0, rng, n):
    a = np.zeros(n, waiting_dtype(job.streams[k]))
    a["ts"] = t0 + np.sort(rng.integers(0, 400, n))
    a["k"] = rng.integers(0, 8, n)
    a["k2"] = rng.integers(0, 2, n)
    a["v" if k == 0 else "w"] = rng.random(n)
    a["_rec"] = np.arange(1, n + 1)
    return a


FOLLOWED_SOURCES = [  # several sources follow the log: one strategy of each rank-0 vertex kind
    pytest.param("hash", 3 + 1, None, "", 2, id="hash-k2"),
    pytest.param("psp", 3 + 2, None, 'slice_counts = "60"', 3, id="psp-counts-k3"),
    pytest.param("handshake", 3 + 1, 'band = [{ left = "R.v", right = "S.w", eps = 0.05 }]', "", 2, id="handshake-k2"),
]


@pytest.mark.parametrize("strategy,ranks,predicate,params,sources",
                         [pytest.param(*f, 1, id=f[0] + ("-outer" if f[2] and "outer" in f[2] else "") +
                                       ("-filter" if f[2] and "filter" in f[2] else ""))
                          for f in FOLLOWED] + FOLLOWED_SOURCES)
def test_every_strategy_follows_a_growing_log(tmp_path, strategy, ranks, predicate, params, sources):
    """The log grows while the run follows it (batches of varying density, one committed while the
    run waits); the results equal the oracle's on the final log, and biclique's online
    aggregate's final snapshot equals the oracle's aggregate. With several sources each releases
    whole batches of its parts as the log commits them (parts of 100 tuples here)."""
    text = equi_job_text(('"100ms"', '"100ms"'), strategy=strategy, predicate=predicate, extra_strategy=params,
                         run='batch_size = 50\nflush_interval = "5ms"' + (f"\nsources = {sources}\npart = 100"
                                                                          if sources > 1 else ""))
    (tmp_path / "job.toml").write_text(text.replace('dir = "out"', 'dir = "out"\ncommit_every = "100ms"'))
    job = load_job(str(tmp_path / "job.toml"))
    w = LogWriter(job, job.staged, 0, {"test": 1})
    rng = np.random.default_rng(len(strategy))
    sizes = [200, 40, 600, 120, 300]
    w.commit(0, [_log_rows(job, 0, 0, rng, sizes[0]), _log_rows(job, 1, 0, rng, sizes[0])], ["a.csv"])
    run = subprocess.Popen([MPIEXEC, "-n", str(ranks), *mpi_join_cmd("run", "--follow", str(tmp_path / "job.toml"))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=_env())
    for b, n in enumerate(sizes[1:], start=1):
        time.sleep(0.4)
        w.commit(b, [_log_rows(job, 0, b * 400, rng, n), _log_rows(job, 1, b * 400, rng, n)], ["a.csv"])
    w.end("test")
    code, out, err = _finish(run, "the run")
    assert code == 0, err[-3000:]
    v = cli("verify", str(tmp_path / "out"), "--job", str(tmp_path / "job.toml"))
    assert v.returncode == 0 and "OK: results equal the oracle" in v.stdout, v.stdout + v.stderr
    committed = json.loads((tmp_path / "out" / "_COMMITTED").read_text())
    assert committed["final"] and committed["commits"] >= 2
    summary = json.loads((tmp_path / "out" / "metrics" / "summary.json").read_text())
    assert summary["sources"] == sources
    own = [r.get("released_own") for r in summary["ranks"] if "released_own" in r]
    assert len(own) == sources and all(own) and sum(own) == 2 * sum(sizes), f"every source released its share: {own}"
    if predicate and "outer" in predicate:
        # lone rows come as the run goes, not only when the log ends: in a commit before the end
        early = [n for c in range(committed["commits"] - 1)
                 for n in json.loads((tmp_path / "out" / "commits" / f"commit-{c:06d}.json").read_text())["files"]
                 if n.startswith("part-r0000-")]
        assert early, "no lone rows were committed before the log ended" + err[-3000:]
    if "aggregate" in params:
        assert "the final one equals the oracle's aggregate" in v.stdout, v.stdout
        ranks = json.loads((tmp_path / "out" / "metrics" / "summary.json").read_text())["ranks"]
        events = next(r for r in ranks if r["role"] == "driver")["scaling_events"]
        assert "out" in {e["decision"] for e in events}, events     # spare units joined as the load grew


def test_socket_source_stages_lines_with_records_across_batches(tmp_path):
    """CSV lines from two sockets (Spark's socket source, for tests) are staged as the landing
    files are; a bad line is quarantined with its line number counted across micro-batches."""
    import socket
    import threading
    servers, lines = [], {"R": [], "S": []}
    for n in ("R", "S"):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        servers.append((n, srv))
    text = JOB.format(window="500ms", predicate=EQUI, strategy="hash", extra="")
    for n, srv in servers:
        text = text.replace(f'path = "raw/{n}"', f'path = "socket://127.0.0.1:{srv.getsockname()[1]}"')
    (tmp_path / "job.toml").write_text(text)
    rng = np.random.default_rng(4)

    def serve(n, srv):
        conn, _ = srv.accept()
        t = 0
        for b in range(6):
            rows = []
            for i in range(100):
                t += int(rng.integers(0, 5))
                rows.append(f"{t},{int(rng.integers(0, 6))},{rng.random():.3f}")
            if n == "R" and b == 4:
                rows[10] = "oops,1,1.0"
            lines[n] += rows
            conn.sendall(("\n".join(rows) + "\n").encode())
            time.sleep(0.6)
        time.sleep(60)
        conn.close()
    threads = [threading.Thread(target=serve, args=s, daemon=True) for s in servers]
    for th in threads:
        th.start()
    stager = _stager(tmp_path)
    _wait(lambda: _accounted(tmp_path) + (_manifest(tmp_path) or {}).get("quarantined", {}).get("R", 0) -
          sum((_manifest(tmp_path) or {"log": {"late": {}}})["log"]["late"].values()) >= 1200, "every line taken in")
    os.killpg(stager.pid, signal.SIGINT)
    code, out, err = _finish(stager, "the stager")
    assert code == 0, err[-2000:]
    man = _manifest(tmp_path)
    assert man["log"]["batches"] >= 3 and man["quarantined"]["R"] >= 1
    bad = [r for r in pq.read_table(str(tmp_path / "staged" / "_quarantine" / "R")).to_pylist()
           if not r["reason"].startswith("late")]
    assert [(r["file"].startswith("socket://"), r["record"], r["t"]) for r in bad] == [(True, 411, "oops")]
    job = load_job(str(tmp_path / "job.toml"))
    R, S = read_staged(job)
    late = sum(man["log"]["late"].values())
    assert len(R) + len(S) + late == 1199
    r = cli("check", str(tmp_path / "job.toml"))
    assert r.returncode == 0, r.stderr


def test_until_end_and_until_an_event_time_end_the_log(spark, tmp_path):
    (tmp_path / "job.toml").write_text(JOB.format(window="500ms", predicate=EQUI, strategy="hash", extra=""))
    land = Landing(str(tmp_path), seed=9)
    for _ in range(3):
        land.round()                                      # event times 0 .. 1200 ms
    r = cli("stage", "--follow", "--until", "800", str(tmp_path / "job.toml"))
    assert r.returncode == 0, r.stderr[-2000:]
    man = _manifest(tmp_path)
    ended = man["log"]["ended"]
    assert ended["reason"] == "event time 800 reached" and ended["beyond_until"] > 0
    job = load_job(str(tmp_path / "job.toml"))
    R, S = read_staged(job)
    assert max(R["ts"].max(), S["ts"].max()) <= 800
    assert len(R) + len(S) + ended["beyond_until"] + sum(man["log"]["late"].values()) == land.count()
    assert "after event time 800 not staged" in r.stderr
    r = cli("stage", "--follow", "--until", "end", str(tmp_path / "job.toml"))
    assert r.returncode == 2 and "the log has ended" in r.stderr
    r = cli("stage", "--follow", "--until", "end", "--force", str(tmp_path / "job.toml"))
    assert r.returncode == 0, r.stderr[-2000:]
    man = _manifest(tmp_path)
    assert man["log"]["ended"]["reason"] == "the files present were staged"
    assert man["total"] + sum(man["log"]["late"].values()) == land.count()
    r = cli("stage", "--follow", "--until", "soon", str(tmp_path / "job.toml"))
    assert r.returncode == 2 and "--until: 'soon' is neither 'end'" in r.stderr


def test_a_wait_longer_than_the_liveness_timeout_is_not_a_failure(tmp_path):
    """Ranks waiting on a quiet log for 3x run.liveness_timeout are alive, not stalled: the run
    goes on and ends with the log."""
    job, w, rng = _log_job(tmp_path, seed=6, extra='liveness_timeout = "1s"')
    run = _runner(tmp_path)
    committed = tmp_path / "out" / "_COMMITTED"
    _wait(lambda: committed.exists() or run.poll() is not None, "a commit")
    time.sleep(3)
    assert run.poll() is None, run.communicate()[1][-2000:]
    w.commit(1, [_random_rows(job, 0, 1000, rng), _random_rows(job, 1, 1000, rng)], ["b.csv"])
    w.end("test")
    code, out, err = _finish(run, "the run")
    assert code == 0, err[-3000:]
    v = cli("verify", str(tmp_path / "out"), "--job", str(tmp_path / "job.toml"))
    assert v.returncode == 0 and "OK" in v.stdout, v.stdout + v.stderr


def test_json_and_parquet_landing_files_and_a_named_spark_source(spark, tmp_path):
    """JSON lines land for R and Parquet for S (parsed as `stage` parses them); then a Spark
    source named in the job file (`source = "socket"` with its options, passed as they are)
    carries JSON objects. Both logs hold every row once."""
    import socket
    import threading
    import pyarrow as pa
    rng = np.random.default_rng(8)
    os.makedirs(tmp_path / "raw" / "R")
    os.makedirs(tmp_path / "raw" / "S")
    rows = {"R": [], "S": []}
    for f in range(3):
        r = [(f * 100 + i, int(rng.integers(0, 5)), float(rng.random())) for i in range(100)]
        rows["R"] += r
        with open(tmp_path / "raw" / "R" / f"f{f}.jsonl", "w") as fh:
            fh.write("\n".join(json.dumps({"t": t, "k": k, "v": v}) for t, k, v in r) + "\n")
        sv = [(f * 100 + i, int(rng.integers(0, 5)), float(rng.random())) for i in range(100)]
        rows["S"] += sv
        pq.write_table(pa.table({"t": [x[0] for x in sv], "k": [x[1] for x in sv], "v": [x[2] for x in sv]}),
                       str(tmp_path / "raw" / "S" / f"f{f}.parquet"))
    text = (JOB.format(window="200ms", predicate=EQUI, strategy="hash", extra="")
            .replace('path = "raw/R", format = "csv"', 'path = "raw/R", format = "json"')
            .replace('path = "raw/S", format = "csv"', 'path = "raw/S", format = "parquet"'))
    (tmp_path / "job.toml").write_text(text)
    r = cli("stage", "--follow", "--until", "end", str(tmp_path / "job.toml"))
    assert r.returncode == 0, r.stderr[-2000:]
    job = load_job(str(tmp_path / "job.toml"))
    R, S = read_staged(job)
    man = _manifest(tmp_path)
    assert len(R) + man["log"]["late"]["R"] == 300 and len(S) + man["log"]["late"]["S"] == 300
    assert sorted(R["v"].tolist()) == sorted(x[2] for x in rows["R"] if x[0] in set(R["ts"].tolist()))
    # a named source: JSON objects from a socket, through `source` and `options`
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(2)
    port = srv.getsockname()[1]

    def serve():
        for _ in range(2):
            conn, _ = srv.accept()
            conn.sendall(("\n".join(json.dumps({"t": i, "k": i % 3, "v": 0.5}) for i in range(50)) + "\n").encode())
            threading.Thread(target=lambda c=conn: (time.sleep(60), c.close()), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    named = (JOB.format(window="200ms", predicate=EQUI, strategy="hash", extra="")
             .replace('staged = "staged"', 'staged = "staged2"'))
    for n in ("R", "S"):
        named = named.replace(f'raw = {{ path = "raw/{n}", format = "csv", time = "t", time_unit = "ms" }}',
                              f'raw = {{ source = "socket", options = {{ host = "127.0.0.1", port = {port}, '
                              f'numPartitions = 1 }}, format = "json", time = "t", time_unit = "ms" }}')
    (tmp_path / "named.toml").write_text(named)
    stager = subprocess.Popen(mpi_join_cmd("stage", "--follow", "--trigger", "200ms", str(tmp_path / "named.toml")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                              env=_env())
    p2 = tmp_path / "staged2" / "_manifest.json"

    def taken():
        if not p2.exists():
            return 0
        m = json.loads(p2.read_text())
        return m["total"] + sum(m["log"]["late"].values()) + ((m["log"].get("pending") or {}).get("rows") or 0)
    _wait(lambda: taken() >= 100, "the named source's records")
    os.killpg(stager.pid, signal.SIGINT)
    code, out, err = _finish(stager, "the stager")
    assert code == 0, err[-2000:]
    R2, S2 = read_staged(load_job(str(tmp_path / "named.toml")))
    assert len(R2) == len(S2) == 50 and sorted(R2["ts"].tolist()) == list(range(50))
    r = cli("stage", str(tmp_path / "named.toml"))
    assert r.returncode == 2 and "is a live source; stage it with `mpi-join stage --follow JOB`" in r.stderr


ORDERS = ["t,k,v", "t,v,k", "k,t,v", "k,v,t", "v,t,k", "v,k,t"]


def _ordered_file(path, header, rows):
    """A CSV file whose columns come in the order `header` names them (write, then rename)."""
    cols = header.split(",")
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write(header + "\n" + "".join(",".join(r[c] for c in cols) + "\n" for r in rows))
    os.rename(tmp, path)


def test_live_csv_columns_are_matched_by_header_name_in_every_order(tmp_path):
    """The stager starts before any file lands (so no first file can set the columns); then files
    land whose headers give t, k, v in each of their six orders, and one without k. Every row of
    the six is staged with its own values; the rows of the file without k are quarantined with
    the reason, and one warning names it. SIGTERM to the stager's process group ends the log."""
    (tmp_path / "job.toml").write_text(JOB.format(window="200ms", predicate=EQUI, strategy="hash", extra="")
                                       .replace('allowed_lateness = "300ms"', 'allowed_lateness = "1d"'))
    for s in "RS":
        os.makedirs(tmp_path / "raw" / s)
    stager = _stager(tmp_path)
    _wait(lambda: _manifest(tmp_path) is not None, "the stager's log", timeout=240)
    time.sleep(1)                                          # it has listed the empty directories
    want = {"R": set(), "S": set()}
    for i, header in enumerate(ORDERS):
        for s in "RS":
            rows = [{"t": str(i * 1000 + j), "k": str((i * 7 + j) % 11), "v": f"{i}.{j:03d}"} for j in range(40)]
            want[s] |= {(int(r["t"]), int(r["k"]), float(r["v"])) for r in rows}
            _ordered_file(str(tmp_path / "raw" / s / f"f{i}.csv"), header, rows)
    _ordered_file(str(tmp_path / "raw" / "R" / "nok.csv"), "v,t", [{"t": "9000", "v": "1.5"}, {"t": "9001", "v": "2"}])
    _wait(lambda: _accounted(tmp_path) == 6 * 40 * 2 and _manifest(tmp_path)["quarantined"]["R"] == 2,
          "every row taken in", timeout=240)
    os.killpg(stager.pid, signal.SIGTERM)
    code, out, err = _finish(stager, "the stager")
    assert code == 0 and "stopped by SIGTERM" in err, err[-3000:]
    said = [ln for ln in err.splitlines() if "warning:" in ln]
    assert len(said) == 1 and "nok.csv: column 'k' of stream 'R' is missing (file has: v, t)" in said[0], err[-3000:]
    job = load_job(str(tmp_path / "job.toml"))
    R, S = read_staged(job)
    assert {(int(r["ts"]), int(r["k"]), float(r["v"])) for r in R} == want["R"] and len(R) == 240
    assert {(int(r["ts"]), int(r["k"]), float(r["v"])) for r in S} == want["S"] and len(S) == 240
    bad = pq.read_table(str(tmp_path / "staged" / "_quarantine" / "R")).to_pylist()
    assert sorted((b["file"].endswith("nok.csv"), b["record"], b["reason"]) for b in bad) == [
        (True, 1, "k: missing (null)"), (True, 2, "k: missing (null)")]
    assert _manifest(tmp_path)["log"]["ended"]


HOSTILE = [  # (header, rows as CSV text): values stage must parse, or quarantine with a reason
    ("t,k,v", '1,1,0.5\n2, 2 ,1e-3\n3,x,0.5\n4,5,"6.5"\n,1,1\n5,1\n6,1,2,9\n7,\\N,1\n8,"",1\n9,3,nan\n'),
    ("v,k,t", '0.25,3,10\n"1,5",4,11\n-0,2147483648,12\n1.5,-2147483648,13\n\xe9,1,14\n2,2,15.9\n'),
    ("\ufeffk,t,v", "7,20,0.125\n8,21,inf\n9,22,-1.5E2\n"),
]


# well-formed, so read by Arrow live: every value must come out as Spark's parse gives it
TRICKY = ("k,v,t", "-0,.5,007\n2147483647,5.,8\n-2147483648,1E2,9\n0012,-1.5e-3,10\n"
                   "7,123456789012345678901234567890,11\n8,0.1000000000000000055511151231257827,12\n")


def _quarantined(staged, s):
    """Stream s's quarantined rows in `staged`, comparable across readers (file:/// as file:/)."""
    rows = pq.read_table(str(staged / "_quarantine" / s)).to_pylist()
    return sorted((repr(tuple((k, x[k].replace("file:///", "file:/") if k == "file" else x[k]) for k in sorted(x)))
                   for x in rows))


def _staged_both_ways(tmp_path, text):
    """Stage `text`'s landing files at rest by Spark and live (`stage --follow --until end`):
    (the live log's batch entries, [(at rest, live) staged rows], {stream: (at rest, live)
    quarantined rows})."""
    (tmp_path / "job.toml").write_text(text)
    (tmp_path / "live.toml").write_text(text.replace('staged = "staged"', 'staged = "live"'))
    r = cli("stage", "--engine", "spark", str(tmp_path / "job.toml"))
    assert r.returncode == 0, r.stderr[-3000:]
    r = cli("stage", "--follow", "--until", "end", str(tmp_path / "live.toml"))
    assert r.returncode == 0, r.stderr[-3000:]
    entries = [json.loads(p.read_text()) for p in sorted((tmp_path / "live" / "_log").glob("batch-*.json"))]
    rest, live = load_job(str(tmp_path / "job.toml")), load_job(str(tmp_path / "live.toml"))
    rows = list(zip(read_staged(rest), read_staged(live)))
    for a, b in rows:
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()     # NaN too, bit for bit
    return entries, rows, {s: (_quarantined(tmp_path / "staged", s), _quarantined(tmp_path / "live", s)) for s in "RS"}


def _lenient(text):
    return text.replace('allowed_lateness = "300ms"', 'allowed_lateness = "1d"')


def test_live_staging_parses_as_stage_does(spark, tmp_path):
    """The same landing files, hostile values and every column order among them, staged at rest
    (`stage`) and live (`stage --follow --until end`): the staged rows and the quarantined rows
    (file, record, reason, raw text) are equal field for field. Live, the clean files are read by
    Arrow in the stager's process and the hostile ones by Spark (fast_csv.py)."""
    for s in "RS":
        os.makedirs(tmp_path / "raw" / s)
    n = 0
    for s in "RS":
        for header, body in HOSTILE:
            with open(tmp_path / "raw" / s / f"h{n}.csv", "wb") as f:
                f.write((header + "\n").encode() + body.encode("latin-1" if "\xe9" in body else "utf-8"))
            n += 1
        (tmp_path / "raw" / s / "tricky.csv").write_text(TRICKY[0] + "\n" + TRICKY[1])
        for i, header in enumerate(ORDERS):
            _ordered_file(str(tmp_path / "raw" / s / f"o{i}.csv"), header,
                          [{"t": str(100 + i * 10 + j), "k": str(j), "v": f"{j}.5"} for j in range(5)])
    entries, rows, quarantined = _staged_both_ways(tmp_path, _lenient(JOB.format(
        window="200ms", predicate=EQUI, strategy="hash", extra="")))
    # the clean files were read by Arrow in the stager's process, the hostile ones by Spark
    assert sum(e.get("arrow_files", 0) for e in entries) == 2 * (len(ORDERS) + 1), entries
    assert sum(e.get("files", 0) for e in entries) == 2 * (len(ORDERS) + len(HOSTILE) + 1), entries
    assert all(len(a) > 30 for a, _ in rows)
    for at_rest, staged_live in quarantined.values():
        assert len(at_rest) >= 8 and at_rest == staged_live


ISO_CLEAN = ["2026-03-01T09:30:00Z", "2026-03-01 09:30:00.5+05:30", "2026-03-01T09:30:00.123456-05:00",
             "2026-03-01T09:30:01.999", "1969-12-31T23:59:59.000001Z", "2024-02-29T23:59:59.9+00:00",
             "2026-03-01T04:00:00.000001+18:00", "1999-12-31 23:59:59"]
ISO_SPARK = ["2026-03-01T09:30:00.1234567Z", "2026-03-01T09:30:00+0530", "2026-02-29T09:30:00Z",
             "2026-03-01T24:00:00Z", "2026-03-01", "1700000000", "2026-3-1 9:30:00", "not a time"]


@pytest.mark.parametrize("unit", ["ms", "us"])
def test_iso_times_take_the_fast_path_and_stage_as_spark_stages_them(spark, tmp_path, unit):
    """ISO-8601 event times with and without fractions and offsets (`Z`, `+05:30`, `-05:00`, none
    as UTC, a space for the `T`, before 1970, a leap day), the time column not first, are read by
    Arrow in the stager's process (every such file went to Spark, and a live log lagged a minute
    and more); values outside that form send their file to Spark as before. Staged at rest by
    Spark and live: the staged rows and the quarantine are equal field for field."""
    for s in "RS":
        os.makedirs(tmp_path / "raw" / s)
        for i, v in enumerate(ISO_CLEAN):
            (tmp_path / "raw" / s / f"c{i}.csv").write_text(f"k,t,v\n{i},{v},0.5\n{i + 1},{ISO_CLEAN[0]},1.5\n")
        for i, v in enumerate(ISO_SPARK):
            (tmp_path / "raw" / s / f"x{i}.csv").write_text(f"k,t,v\n{i},{v},0.5\n{i + 1},{ISO_CLEAN[1]},2.5\n")
    entries, rows, quarantined = _staged_both_ways(tmp_path, _lenient(
        JOB.format(window="200ms", predicate=EQUI, strategy="hash", extra="")
        .replace('time_unit = "ms"', 'time_unit = "timestamp"').replace('ts_unit = "ms"', f'ts_unit = "{unit}"')))
    assert sum(e.get("arrow_files", 0) for e in entries) == 2 * len(ISO_CLEAN), entries
    assert all(len(a) >= 2 * len(ISO_CLEAN) for a, _ in rows)
    for at_rest, staged_live in quarantined.values():
        assert at_rest == staged_live and len(at_rest) >= 3


BAD_ONE = [  # (header, rows): one or two refused values among good rows
    ("t,k,v", "1,1,0.5\n2,abc,0.5\n3,3,1.5\n"),
    ("k,v,t", "1,0.5,4\n2,xyz,5\n3,2.5,6\n"),
    ("v,t,k", "0.5,7,1\n0.5,bad,2\n1.5,8,3\n"),
    ("t,k,v", "9,99999999999,0.5\n10,1,0.5\n"),
    ("t,k,v", "oops,nope,0.5\n11,1,0.5\n12,-7,1e3\n"),
    ("t,k,v", "13,1,NaN\n14,x,0.5\n"),                      # NaN may be a number: the file goes to Spark
]


def test_a_bad_value_is_quarantined_by_itself_and_the_rest_of_its_file_stays_on_the_fast_path(spark, tmp_path):
    """A value Spark's parse surely refuses (letters only, an integer out of its type's range)
    no longer sends its file to Spark (one bad row held every stream's watermark for a JVM's
    start and more): the row is quarantined by itself with Spark's reason, the rest is staged by
    Arrow. Staged at rest by Spark and live: the staged rows and the quarantine are equal field
    for field."""
    for s in "RS":
        os.makedirs(tmp_path / "raw" / s)
        for i, (header, body) in enumerate(BAD_ONE):
            (tmp_path / "raw" / s / f"b{i}.csv").write_text(header + "\n" + body)
    entries, rows, quarantined = _staged_both_ways(tmp_path, _lenient(JOB.format(
        window="200ms", predicate=EQUI, strategy="hash", extra="")))
    assert sum(e.get("arrow_files", 0) for e in entries) == 2 * (len(BAD_ONE) - 1), entries
    assert all(len(a) >= 10 for a, _ in rows)
    for at_rest, staged_live in quarantined.values():
        assert at_rest == staged_live and len(at_rest) == 6, (at_rest, staged_live)


def test_json_lines_take_the_fast_path_and_a_bad_value_is_quarantined_by_itself(spark, tmp_path):
    """JSON-lines landing files are read in the stager's process (fast_json.py), a bad value
    quarantined by itself and the rest of its file staged; a file Python's JSON parser and Spark's
    may read differently (single quotes) goes to Spark. Staged at rest by Spark and live: the
    staged rows and the quarantine are equal field for field."""
    for s in "RS":
        os.makedirs(tmp_path / "raw" / s)
        for i in range(4):
            rows = [{"t": str(100 + 10 * i + j), "k": str(j), "v": j + 0.5} for j in range(5)]
            rows[i] = dict(rows[i], **({"k": "abc"} if i % 2 else {"t": "oops"}))
            rows[-1]["v"] = None if i == 3 else rows[-1]["v"]
            lines = [json.dumps({c: r[c] for c in (("t", "k", "v") if j % 2 else ("v", "k", "t"))})
                     for j, r in enumerate(rows)]
            (tmp_path / "raw" / s / f"j{i}.json").write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n")
        (tmp_path / "raw" / s / "quotes.json").write_text("{'t': '200', 'k': '1', 'v': 0.5}\n")
    entries, rows, quarantined = _staged_both_ways(tmp_path, _lenient(JOB.format(
        window="200ms", predicate=EQUI, strategy="hash", extra="")).replace('format = "csv"', 'format = "json"'))
    assert sum(e.get("arrow_files", 0) for e in entries) == 2 * 4, entries
    assert sum(e.get("files", 0) for e in entries) == 2 * 5, entries
    assert all(len(a) == 4 * 4 + 1 for a, _ in rows)
    for at_rest, staged_live in quarantined.values():
        assert at_rest == staged_live and len(at_rest) == 4, (at_rest, staged_live)


def test_resume_before_the_first_commit_offsets_across_resumes_and_verify_on_an_open_log(tmp_path):
    """A LEFT join followed, no Spark. (1) Its first run dies waiting for the log: `collect` says how a
    followed run resumes (not that the job keeps no checkpoints), and `--resume` starts from the log's
    beginning with one line (it said "no checkpoint" before). (2) That run dies after a commit; the
    resumed run's commit records keep the input offset (lost before: "up to input seq 0"). (3) On the
    open log `verify` says so and checks the committed prefix, OK (DIFFERENT before: the LEFT join's
    lone rows come at the end); after the end, the whole result."""
    text = JOB.format(window="50ms", predicate=EQUI + '\nouter = ["R"]', strategy="hash", extra="").replace(
        'dir = "out"', 'dir = "out"\ncommit_every = "100ms"')
    (tmp_path / "job.toml").write_text(text)
    marker = str(tmp_path / "job.toml")
    ckpts = str(tmp_path / "out" / "_checkpoints")
    committed = tmp_path / "out" / "_COMMITTED"

    def ranks(n):
        return mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], n, marker)

    def record():
        return json.loads(committed.read_text()) if committed.exists() else {}
    run = _runner(tmp_path)
    _wait(lambda: ranks(1), "rank 1")
    # rank 0 holds the output directory just before it says it waits for the log (a busy machine
    # can take seconds to get it there)
    _wait(lambda: (tmp_path / "out" / LOCK).exists(), "rank 0 holding the output directory")
    time.sleep(1)
    os.kill(ranks(1)[0], signal.SIGKILL)
    code, _, err = _finish(run, "the run killed while waiting for the log")
    assert code != 0 and "waiting for the staged log" in err, err[-2000:]
    p, spark_modules = run_cli_no_spark(tmp_path, "collect", str(tmp_path / "out"), "--job", marker,
                                        "--out", str(tmp_path / "coll"))
    assert p.returncode == 2 and not spark_modules, p.stderr
    assert f"resume it with `mpi-join run --follow {marker} --resume {ckpts}`" in p.stderr, p.stderr
    assert "keeps no checkpoints" not in p.stderr
    job = load_job(marker)
    w = LogWriter(job, job.staged, job.allowed_lateness, {"test": 1})
    rng = np.random.default_rng(9)
    for b in range(2):
        w.commit(b, [_random_rows(job, 0, b * 1000, rng), _random_rows(job, 1, b * 1000, rng)], [f"{b}.csv"])
    run = _runner(tmp_path, "--resume", ckpts)
    _wait(lambda: record().get("results", 0) > 0, "a commit")
    os.kill(ranks(1)[0], signal.SIGKILL)
    code, _, err = _finish(run, "the run killed after a commit")
    assert code != 0 and "holds no checkpoint yet" in err and "starting from the log's beginning" in err, err[-2000:]
    run = _runner(tmp_path, "--resume", ckpts)
    w.commit(2, [_random_rows(job, 0, 2000, rng), _random_rows(job, 1, 2000, rng)], ["2.csv"])
    _wait(lambda: (record().get("input_offset") or 0) > 1200, "a commit of batch 2")
    v = cli("verify", str(tmp_path / "out"), "--job", marker)
    assert v.returncode == 0 and "OK: results equal the oracle" in v.stdout, v.stdout + v.stderr
    assert "the staged log has not ended: checked the run's" in v.stdout, v.stdout
    w.end("test")
    code, out, err = _finish(run, "the resumed run")
    assert code == 0 and "resuming from checkpoint" in err, err[-3000:]
    entries = [json.loads(f.read_text()) for f in sorted((tmp_path / "out" / "commits").iterdir())]
    assert entries and all(e.get("input_offset") is not None for e in entries), entries
    v = cli("verify", str(tmp_path / "out"), "--job", marker)
    assert v.returncode == 0 and "OK: results equal the oracle" in v.stdout and "not ended" not in v.stdout, v.stdout
    assert record()["final"]
    # tail with the tuples' columns: each result once, its R and S rows as staged (equal keys when matched)
    R, S = read_staged(job)
    t = cli("tail", tmp_path / "out", "--no-follow", "--with-payload", "--job", marker, "--format", "jsonl")
    assert t.returncode == 0, t.stderr
    got = [json.loads(x) for x in t.stdout.splitlines()]
    assert len(got) == record()["results"] and len({(g["R_seq"], g["S_seq"]) for g in got}) == len(got)
    by_seq = {int(r["seq"]): r for r in R}
    for g in got:
        r = by_seq[g["R_seq"]]
        assert (g["R_ts"], g["R_k"], g["R_v"]) == (int(r["ts"]), int(r["k"]), float(r["v"]))
        assert g["S_k"] == g["R_k"] if g["S_seq"] is not None else g["S_ts"] is None
    assert any(g["S_seq"] is None for g in got) and any(g["S_seq"] is not None for g in got)
    c = cli("tail", tmp_path / "out", "--no-follow", "--with-payload", "--job", marker)
    lines = c.stdout.splitlines()
    assert lines[0] == "R_seq,S_seq,emit_ns,latency_ns,R_ts,R_k,R_v,S_ts,S_k,S_v" and len(lines) == len(got) + 1
    bad = cli("tail", tmp_path / "out", "--with-payload")
    assert bad.returncode == 2 and "--with-payload: give the run's job file with --job JOB" in bad.stderr


def test_sigterm_to_the_stagers_group_drains_and_no_drain_leaves_the_log_open(spark, tmp_path):
    """SIGTERM to the stager's whole process group (what timeout and supervisors send; its JVM
    too) right after files land: the stager stages them (drains) and ends the log, every row
    staged or late once. With --no-drain it stops at once and the log stays open; the next
    stager continues it, and every row is in it once."""
    (tmp_path / "job.toml").write_text(JOB.format(window="200ms", predicate=EQUI, strategy="hash", extra=""))
    land = Landing(str(tmp_path), seed=11)
    land.round()
    stager = _stager(tmp_path)
    _wait(lambda: _batches(tmp_path) >= 1, "the first batch", timeout=240)
    land.round()
    land.round()
    os.killpg(stager.pid, signal.SIGTERM)
    code, out, err = _finish(stager, "the stager")
    assert code == 0 and "SIGTERM: draining" in err and "the log ended (stopped by SIGTERM)" in err, err[-3000:]
    man = _manifest(tmp_path)
    assert man["log"]["ended"] and man["total"] + sum(man["log"]["late"].values()) == land.count()
    # --no-drain: the log stays open; the next stager continues it
    land2 = Landing(str(tmp_path / "second"), seed=12)
    (tmp_path / "second" / "job.toml").write_text(JOB.format(window="200ms", predicate=EQUI, strategy="hash", extra=""))
    land2.round()
    first = subprocess.Popen(mpi_join_cmd("stage", "--follow", "--no-drain", "--trigger", "200ms",
                                          str(tmp_path / "second" / "job.toml")),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=_env())
    _wait(lambda: _batches(tmp_path / "second") >= 1, "the first batch", timeout=240)
    os.killpg(first.pid, signal.SIGTERM)
    code, out, err = _finish(first, "the --no-drain stager")
    assert code == 0 and "without draining; the log stays open" in err and "the log stays open" in out, err[-3000:]
    assert not _manifest(tmp_path / "second")["log"]["ended"]
    land2.round()
    r = cli("stage", "--follow", "--until", "end", str(tmp_path / "second" / "job.toml"))
    assert r.returncode == 0 and "continuing the log" in r.stderr, r.stderr[-3000:]
    man = _manifest(tmp_path / "second")
    assert man["log"]["ended"] and man["total"] + sum(man["log"]["late"].values()) == land2.count()
    R, S = read_staged(load_job(str(tmp_path / "second" / "job.toml")))
    assert len(R) + man["log"]["late"]["R"] == len(land2.rows["R"]) and len(np.unique(R["seq"])) == len(R)


def _stager_pid(marker):
    """The pid of the `stage --follow` process whose command line names `marker`."""
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if b"mpi_join" in cmd and b"stage" in cmd and b"--follow" in cmd and marker.encode() in cmd:
            return int(pid)
    return None


def test_mpi_join_live_recovers_from_a_stager_kill_and_a_rank_kill_and_drains_on_sigterm(tmp_path):
    """`mpi-join live -n 3`: one command starts the stager and the run. The stager is SIGKILLed
    (with its JVM) and a join rank is SIGKILLed during the run: live restarts each by itself
    (one line each, counted in OUT/metrics/live.json). SIGTERM to live's process group drains:
    files that landed are staged, the log ends with its end marker, the run commits its last
    results, exit 0; the results equal the oracle's on the final log, each once."""
    (tmp_path / "job.toml").write_text(
        JOB.format(window="300ms", predicate=EQUI, strategy="hash", extra="")
        + '[live]\nrestart_attempts = 2\nrestart_delay = "200ms"\n')
    marker = str(tmp_path / "job.toml")
    land = Landing(str(tmp_path), seed=21)
    land.round()
    errf = tmp_path / "live.err"         # read as it runs: the restarted stager's Spark session is waited for
    with open(errf, "w") as ef:
        live = subprocess.Popen(mpi_join_cmd("live", "-n", "3", "--status-every", "1", "--trigger", "200ms", marker),
                                stdout=subprocess.PIPE, stderr=ef, text=True, start_new_session=True, env=_env())
    committed = tmp_path / "out" / "_COMMITTED"

    def results():
        return json.loads(committed.read_text())["results"] if committed.exists() else 0
    _wait(lambda: results() > 0 or live.poll() is not None, "a first commit", timeout=300, feed=land.round)
    assert live.poll() is None, errf.read_text()[-3000:]
    pid = _stager_pid(marker)
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)                         # the stager and its JVM
    before = _batches(tmp_path)
    _wait(lambda: _batches(tmp_path) > before or live.poll() is not None, "the restarted stager's batch",
          timeout=300, feed=land.round)
    ranks = mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], 1, marker)
    assert ranks and live.poll() is None
    os.kill(ranks[0], signal.SIGKILL)

    def resumed():
        """Rank 1 of the run live restarted (`run --resume`; the first run had nothing to resume)."""
        return mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], 1, (marker, "--resume"))
    # a commit the killed run made as it died is not the resumed run's: wait for the restart first
    _wait(lambda: resumed() or live.poll() is not None, "the run's restart", timeout=300, feed=land.round)
    seen = results()
    _wait(lambda: results() > seen or live.poll() is not None, "a commit of the resumed run", timeout=300,
          feed=land.round)
    # --spark-start now (live's default): the restarted stager starts Spark's JVM beside its fast
    # path; a JVM's start (20 s to minutes on a loaded machine) is waited for, not assumed
    _wait(lambda: "stage --follow: Spark's session is up" in errf.read_text() or live.poll() is not None,
          "the restarted stager's Spark session", timeout=300, feed=land.round)
    land.round()
    os.killpg(live.pid, signal.SIGTERM)
    code, out, _ = _finish(live, "live", timeout=300)
    err = errf.read_text()
    assert code == 0, err[-4000:]
    assert "live: SIGTERM: draining" in err and "live: the log has ended and every result is committed" in err, err[-3000:]
    assert "live: Spark's JVM starts now" in err and err.count("stage --follow: Spark's session is up") >= 1, err[-3000:]
    assert "live: the stager exited with code" in err and "live: the run exited with code" in err, err[-3000:]
    assert any(ln.startswith("live: R +") and "watermark lag" in ln for ln in err.splitlines()), err[-3000:]
    status = json.loads((tmp_path / "out" / "metrics" / "live.json").read_text())
    assert status["restarts"] == {"stager": 1, "run": 1} and status["log_ended"], status
    man = _check_final(tmp_path, land)
    assert man["log"]["ended"]["reason"] == "stopped by SIGTERM"
    assert status["results"] == json.loads(committed.read_text())["results"] > 0
    # latency from the landing file's arrival to the result's commit, and its parts, which add up
    assert any("landing to commit p50" in ln for ln in err.splitlines()), err[-3000:]
    lat = json.loads((tmp_path / "out" / "metrics" / "summary.json").read_text())["landing_latency_ms"]
    assert lat["total"]["results"] > 0 and lat["total"]["p50"] > 0, lat
    assert all(lat[k]["p50"] >= 0 for k in ("landing_to_staged", "staged_to_released", "released_to_joined",
                                           "joined_to_committed")), lat
    assert lat["total"]["p99"] >= lat["landing_to_staged"]["p50"], lat


def test_live_no_drain_leaves_the_log_open_and_a_second_live_continues_it_exactly(tmp_path):
    """`live --no-drain`, SIGTERM to its group: both stop at once (exit 143), the log stays open
    and the committed results stand; a second `live`, on 5 ranks where the first had 3,
    continues the log and resumes the run at that rank count (a rescaled restore), and after its
    drain the results equal the oracle's on the final log, each once."""
    (tmp_path / "job.toml").write_text(JOB.format(window="300ms", predicate=EQUI, strategy="hash", extra=""))
    marker = str(tmp_path / "job.toml")
    land = Landing(str(tmp_path), seed=31)
    land.round()
    committed = tmp_path / "out" / "_COMMITTED"

    def results():
        return json.loads(committed.read_text())["results"] if committed.exists() else 0

    def start(ranks, *extra):
        return subprocess.Popen(mpi_join_cmd("live", "-n", str(ranks), "--trigger", "200ms", *extra, marker),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env=_env())
    live = start(3, "--no-drain")
    _wait(lambda: results() > 0 or live.poll() is not None, "a first commit", timeout=300, feed=land.round)
    os.killpg(live.pid, signal.SIGTERM)
    code, out, err = _finish(live, "live --no-drain", timeout=300)
    assert code == 143 and "live: stopped; the log stays open" in err, err[-3000:]
    assert not _manifest(tmp_path)["log"]["ended"] and not (tmp_path / "out" / "_SUCCESS").exists()
    first = results()
    land.round()
    land.round()
    live = start(5)
    _wait(lambda: _accounted(tmp_path) == land.count() and results() > first or live.poll() is not None,
          "the second live's commits", timeout=300)
    os.killpg(live.pid, signal.SIGTERM)
    code, out, err = _finish(live, "the second live", timeout=300)
    assert code == 0 and "continuing the log" in err and "resuming from checkpoint" in err, err[-3000:]
    ranks = json.loads((tmp_path / "out" / "metrics" / "summary.json").read_text())["ranks"]
    assert len(ranks) == 5, ranks
    _check_final(tmp_path, land)


def _live(marker, *extra):
    # --spark-start needed: these CSV files are all read in process (one test starts Spark at once)
    return subprocess.Popen(mpi_join_cmd("live", "-n", "3", "--status-every", "1", "--trigger", "200ms",
                                         *(() if "--spark-start" in extra else ("--spark-start", "needed")), *extra,
                                         marker),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=_env())


def _committed_results(tmp_path):
    c = tmp_path / "out" / "_COMMITTED"
    return json.loads(c.read_text())["results"] if c.exists() else 0


def test_live_that_gives_up_leaves_the_log_open_and_live_again_continues_it(tmp_path):
    """A run that dies with no restarts left: live exits 1 and, as its exit table says, leaves
    the log open (its draining stager ended the log before, and the next live was refused); the
    next live continues the log and the run, and after its drain the results are the oracle's."""
    (tmp_path / "job.toml").write_text(JOB.format(window="300ms", predicate=EQUI, strategy="hash", extra="")
                                       + '[live]\nrestart_attempts = 0\n')
    marker = str(tmp_path / "job.toml")
    land = Landing(str(tmp_path), seed=41)
    land.round()
    live = _live(marker)
    _wait(lambda: _committed_results(tmp_path) > 0 or live.poll() is not None, "a first commit", timeout=300,
          feed=land.round)
    ranks = mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], 1, marker)
    assert ranks and live.poll() is None, live.communicate()[1][-3000:]
    os.kill(ranks[0], signal.SIGKILL)
    code, out, err = _finish(live, "live giving up", timeout=300)
    assert code == 1 and "is not restarted" in err and "the log stays open" in err, err[-3000:]
    assert not _manifest(tmp_path)["log"]["ended"], "live gave up and ended the log"
    (tmp_path / "job.toml").write_text(JOB.format(window="300ms", predicate=EQUI, strategy="hash", extra=""))
    land.round()
    live = _live(marker)
    _wait(lambda: _accounted(tmp_path) == land.count() or live.poll() is not None, "every file taken in",
          timeout=300)
    os.killpg(live.pid, signal.SIGTERM)
    code, out, err = _finish(live, "the second live", timeout=300)
    assert code == 0 and "continuing the log" in err, err[-3000:]
    _check_final(tmp_path, land)


def test_a_stray_sigterm_to_the_stager_of_a_no_drain_live_is_noticed_and_the_stager_restarted(tmp_path):
    """`live --no-drain`: a SIGTERM to the stager alone stops it with the log open (exit 0); live
    says so and starts it again, so the files that land after are staged (before, live ran on
    with no stager, `+0/s`, in silence)."""
    (tmp_path / "job.toml").write_text(JOB.format(window="300ms", predicate=EQUI, strategy="hash", extra="")
                                       + '[live]\nrestart_delay = "100ms"\n')
    marker = str(tmp_path / "job.toml")
    land = Landing(str(tmp_path), seed=43)
    land.round()
    live = _live(marker, "--no-drain")
    _wait(lambda: _committed_results(tmp_path) > 0 or live.poll() is not None, "a first commit", timeout=300,
          feed=land.round)
    pid = _stager_pid(marker)
    assert pid is not None and live.poll() is None
    os.killpg(pid, signal.SIGTERM)
    land.round()
    land.round()
    _wait(lambda: _accounted(tmp_path) == land.count() or live.poll() is not None, "the files after the SIGTERM",
          timeout=300)
    os.killpg(live.pid, signal.SIGTERM)
    code, out, err = _finish(live, "live --no-drain", timeout=300)
    assert code == 143, err[-3000:]
    assert "live: the stager stopped (exit 0) with the log open, not asked to by live" in err, err[-3000:]
    assert "live: the stager exited with code 0; restarting it" in err, err[-3000:]
    assert not _manifest(tmp_path)["log"]["ended"]


def test_one_bad_row_per_file_is_quarantined_by_itself_and_a_kill_9_of_live_leaves_no_java_trace(tmp_path):
    """Every landing file has one row with an unreadable time: each such row is quarantined by
    itself and every file is still read in the stager's process (no batch waits on Spark, which
    is what kept a bad row from stalling the log); live's JVM is up from its start
    (--spark-start now), and a SIGKILL of live leaves no Java stack trace in its log."""
    (tmp_path / "job.toml").write_text(JOB.format(window="300ms", predicate=EQUI, strategy="hash", extra=""))
    marker = str(tmp_path / "job.toml")
    land = Landing(str(tmp_path), seed=5)
    land.round(bad=1)
    err_path = tmp_path / "live.err"
    with open(err_path, "w") as err:
        live = subprocess.Popen(mpi_join_cmd("live", "-n", "3", "--status-every", "1", "--trigger", "200ms", marker),
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, env=_env())
    try:
        _wait(lambda: "Spark's session is up" in err_path.read_text() and _committed_results(tmp_path) > 0
              or live.poll() is not None, "the JVM and a first commit", timeout=300, feed=lambda: land.round(bad=1))
        assert live.poll() is None, err_path.read_text()[-3000:]
        for _ in range(3):
            land.round(bad=1)
        _wait(lambda: len((_manifest(tmp_path) or {"log": {}})["log"].get("landed", {})) >= 2 * land.n
              or live.poll() is not None, "every file staged", timeout=120)
    finally:
        os.kill(live.pid, signal.SIGKILL)
        live.wait()
    time.sleep(3)                           # the children end with live (parent_death.py)
    text = err_path.read_text()
    assert "Exception" not in text and "\tat " not in text and "Traceback" not in text, text[-3000:]
    entries = [json.loads(p.read_text()) for p in sorted((tmp_path / "staged" / "_log").glob("batch-*.json"))]
    files = sum(e.get("files", 0) for e in entries)
    assert files >= 2 * land.n - 2 and all(e.get("arrow_files") == e.get("files") for e in entries), entries[-1]
    q = pq.read_table(str(tmp_path / "staged" / "_quarantine")).to_pylist()
    oops = [r for r in q if "got 'oops'" in r["reason"]]
    assert len(oops) >= files and len({(r["file"], r["record"]) for r in oops}) == len(oops)
    assert all(r["record"] == 2 for r in oops)             # each file's second record, by itself
