"""What a resume reads is verified before it is trusted, and one run at a time owns a directory
(README "Safety"). A run killed under real mpiexec after its checkpoints, then the checkpoint or
its input tampered with in each way a user or a disk might; every case is refused or announced,
and none ends with exit 0 and a wrong result. The resumes run in process (`run --local`: what a
resume verifies, rank 0 verifies before any rank starts), but for the forged checkpoint's, whose
ranks disagree (what ends that is liveness, between processes). Then two runs into one output
directory."""
import glob
import json
import os
import shutil
import subprocess
import time

import h5py
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpi_join.storage import checkpoint as ck
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from conftest import MPIEXEC, mpi_join_cmd, run_local, run_mpi
from reference import as_set
from test_checkpoint import _slow_job, kill_after_checkpoints

SLOW = True


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """A job killed (SIGKILL of rank 2) after two checkpoints; each test works on its own copy."""
    tmp = tmp_path_factory.mktemp("crashed")
    path, job, arrays = _slow_job(tmp, n=16000, every=1500)
    p = kill_after_checkpoints(path, job.checkpoint.dir, ranks=3, victim=2, checkpoints=2, total=16000)
    assert p.returncode != 0
    assert len([m for _, m in ck.list_checkpoints(job.checkpoint.dir) if m]) >= 2
    return tmp, path, job, arrays


@pytest.fixture
def copy(crashed, tmp_path):
    src, path, job, arrays = crashed
    dst = tmp_path / "job"
    shutil.copytree(src, dst, symlinks=True)
    from mpi_join.config import load_job
    job2 = load_job(str(dst / os.path.basename(path)))
    return str(dst / os.path.basename(path)), job2, arrays


def _resume(path, job, local=True):
    return (run_local if local else run_mpi)(3, "run", path, "--resume", job.checkpoint.dir)


def _exact(job, arrays):
    got = read_results(job.output, job.stream_names)
    return len(got) == len(as_set(got)) and as_set(got) == as_set(run_oracle(job, arrays))


def _newest(job):
    return max(c for c, m in ck.list_checkpoints(job.checkpoint.dir) if m)


def test_untouched_resume_is_exact(copy):
    path, job, arrays = copy
    p = _resume(path, job)
    assert p.returncode == 0, p.stderr
    assert _exact(job, arrays)
    done = json.load(open(os.path.join(job.output, "_SUCCESS")))
    assert done["results"] == len(read_results(job.output, job.stream_names))


def test_changed_input_is_refused(copy):
    """One key changed in a staged part file, same row count: refused, naming the file."""
    path, job, arrays = copy
    f = sorted(glob.glob(os.path.join(job.staged, "S", "*.parquet")))[0]
    t = pq.read_table(f)
    k = t.column("k").to_numpy().copy()
    k[len(k) // 2] += 1
    pq.write_table(t.set_column(t.schema.get_field_index("k"), "k", pa.array(k)), f)
    p = _resume(path, job)
    assert p.returncode == 2 and f in p.stderr and "cannot be resumed exactly once" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


@pytest.mark.parametrize("sources", [1, 2])
def test_a_plain_run_refuses_a_part_changed_after_staging(tmp_path, sources):
    """R's keys + 1 in a staged part file (its size and SHA-256 no longer the manifest's): a plain
    run, without --resume and with one source or two, exits 2 with one line naming the file, and
    writes no _SUCCESS (it read the file, gave 215 results of 1,985 and exit 0 before)."""
    path, job, arrays = _slow_job(tmp_path, n=3000, every=500)
    text = open(path).read().replace("rate = 4000", f'rate = "max"\nsources = {sources}\npart = 200')
    open(path, "w").write(text)
    f = sorted(glob.glob(os.path.join(job.staged, "R", "*.parquet")))[0]
    t = pq.read_table(f)
    pq.write_table(t.set_column(t.schema.get_field_index("k"), "k", pa.array(t.column("k").to_numpy() + 1)), f)
    p = run_mpi(2 + sources, "run", path)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("mpi-join: ")]
    assert p.returncode == 2, p.stderr
    assert any(f in ln and "changed" in ln and "stage again" in ln for ln in lines), p.stderr
    assert "Traceback" not in p.stderr
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_edited_hdf5_row_skips_that_checkpoint(copy):
    """A row of a window array edited in the newest checkpoint: its checksum fails; the run says
    so, resumes from the one before, and is exact."""
    path, job, arrays = copy
    newest = _newest(job)
    edited = False
    for r in (1, 2):
        with h5py.File(ck.rank_file(job.checkpoint.dir, newest, r), "r+") as f:
            def visit(name, obj):
                nonlocal edited
                if not edited and isinstance(obj, h5py.Dataset) and obj.shape and obj.shape[0] and obj.dtype.names \
                        and "seq" in obj.dtype.names:
                    row = obj[0]
                    row["seq"] += 1
                    obj[0] = row
                    edited = True
            f.visititems(visit)                  # the window's arrays are packed (checkpoint.write_rank)
    assert edited
    p = _resume(path, job)
    assert p.returncode == 0, p.stderr
    assert f"skipping checkpoint {newest}" in p.stderr and "fails its checksum" in p.stderr, p.stderr
    assert _exact(job, arrays)


def test_a_ledger_cut_short_skips_the_checkpoints_past_its_end(copy):
    """The ledger of committed files (storage/ledger.py) one byte short of what the newest
    checkpoint recorded: every checkpoint whose prefix reaches past the end is skipped, said so
    naming the ledger; one whose prefix is whole resumes exactly (with none, refused)."""
    path, job, arrays = copy
    newest = _newest(job)
    refs = {c: m["ledger"]["bytes"] for c, m in ck.list_checkpoints(job.checkpoint.dir) if m}
    assert refs[newest] > 0, "the checkpoints committed no file: nothing to cut"
    led = os.path.join(job.checkpoint.dir, "_committed.jsonl")
    with open(led, "r+b") as f:
        f.truncate(refs[newest] - 1)
    p = _resume(path, job)
    assert f"skipping checkpoint {newest}" in p.stderr and "_committed.jsonl" in p.stderr, p.stderr
    if any(b < refs[newest] for b in refs.values()):
        assert p.returncode == 0, p.stderr
        assert _exact(job, arrays)
    else:
        assert p.returncode == 2 and "no usable checkpoint" in p.stderr, p.stderr


def test_a_changed_record_in_the_ledger_refuses_every_checkpoint_that_holds_it(copy):
    """A committed file's record changed in the ledger (its rows): no checkpoint whose prefix
    holds it is used; the resume says why and, with none left, is refused."""
    path, job, arrays = copy
    led = os.path.join(job.checkpoint.dir, "_committed.jsonl")
    lines = open(led).read().splitlines(keepends=True)
    first = json.loads(lines[0])
    first[1] += 1
    lines[0] = json.dumps(first) + "\n"
    open(led, "w").write("".join(lines))
    p = _resume(path, job)
    assert "_committed.jsonl" in p.stderr and "not what the checkpoint recorded" in p.stderr, p.stderr
    assert p.returncode == 2 and "no usable checkpoint" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_truncated_committed_part_file(copy):
    """A committed result file cut short: every checkpoint committing it is skipped, said so; with
    none left the resume is refused; no _SUCCESS either way unless the result is exact."""
    path, job, arrays = copy
    newest = _newest(job)
    man, _ = ck.manifest_of(job.checkpoint.dir, newest)
    name = sorted(ck.committed_files(job.checkpoint.dir, man))[-1]
    f = os.path.join(job.output, "results", name)
    with open(f, "r+b") as h:
        h.truncate(os.path.getsize(f) // 2)
    p = _resume(path, job)
    assert "skipping checkpoint" in p.stderr and name in p.stderr, p.stderr
    if p.returncode == 0:
        assert _exact(job, arrays)
    else:
        assert p.returncode == 2 and "no usable checkpoint" in p.stderr
        assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_a_rank_file_copied_from_an_older_checkpoint_skips_that_checkpoint(copy):
    """Issue: rank-0001.h5 copied from an older checkpoint into the newest was accepted, and the
    resume hung. Checks: the newest is skipped with one line naming the file, the resume is
    exact from the one before."""
    path, job, arrays = copy
    done = sorted(c for c, m in ck.list_checkpoints(job.checkpoint.dir) if m)
    shutil.copy(ck.rank_file(job.checkpoint.dir, done[-2], 1), ck.rank_file(job.checkpoint.dir, done[-1], 1))
    p = _resume(path, job)
    assert p.returncode == 0, p.stderr
    assert f"skipping checkpoint {done[-1]}" in p.stderr, p.stderr
    assert f"rank-0001.h5: rank file of checkpoint {done[-2]}, not of checkpoint {done[-1]}" in p.stderr, p.stderr
    assert f"resuming from checkpoint {done[-2]}" in p.stderr, p.stderr
    assert _exact(job, arrays)


def test_a_forged_checkpoint_stops_instead_of_waiting_forever(copy):
    """Someone who rewrites a rank file of the newest checkpoint with an older one's state and
    recomputes every checksum (which checksums cannot catch, README "Safety") gets a resume
    whose ranks disagree. Checks: the job does not wait forever; it ends, non-zero, with one line
    from rank 0 saying why, and no _SUCCESS; or it ends exact."""
    path, job, arrays = copy
    root = job.checkpoint.dir
    done = sorted(c for c, m in ck.list_checkpoints(root) if m)
    old, new = done[-2], done[-1]
    man, _ = ck.manifest_of(root, new)
    arrays_old, attrs_old = ck.read_rank(root, old, 1)
    man["rank_files"]["1"] = ck.write_rank(root, new, 1, arrays_old, attrs_old, man["cut"])
    man = {k: v for k, v in man.items() if k not in ("sha256", "format", "checkpoint", "created")}
    ck.write_manifest(root, new, man)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("[run]\n", '[run]\nliveness_timeout = "3s"\n'))
    p = _resume(path, job, local=False)
    assert f"resuming from checkpoint {new}" in p.stderr, p.stderr
    if p.returncode == 0:
        assert _exact(job, arrays)
    else:
        assert "Traceback" not in p.stderr, p.stderr
        assert "the job cannot" in p.stderr, p.stderr
        assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_damaged_newest_manifest_is_announced(copy):
    path, job, arrays = copy
    newest = _newest(job)
    with open(os.path.join(ck.ckpt_path(job.checkpoint.dir, newest), ck.MANIFEST), "w") as f:
        f.write('{"format": "mpi-join-checkpoint/1", "truncated')
    p = _resume(path, job)
    assert p.returncode == 0, p.stderr
    assert f"skipping checkpoint {newest}" in p.stderr and "cannot be read" in p.stderr
    assert _exact(job, arrays)


def test_a_second_run_into_a_locked_directory_is_refused_at_once(tmp_path):
    path, job, arrays = _slow_job(tmp_path, n=48000, every=12000)     # 6 s of replay: the second run starts and is refused inside it
    env = dict(os.environ, MPI_JOIN_QUIET="1")
    first = subprocess.Popen([MPIEXEC, "-n", "3", *mpi_join_cmd("run", path)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        lock = os.path.join(job.output, ".mpi-join.lock")
        deadline = time.time() + 60
        while not os.path.exists(lock) and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(lock) and first.poll() is None
        second = run_mpi(3, "run", path)
        assert second.returncode == 2, second.stderr
        line = [l for l in second.stderr.splitlines() if l.startswith("mpi-join: error:")]
        assert len(line) == 1 and "is in use by another run" in line[0] and "pid" in line[0] and "started" in line[0]
        assert first.poll() is None, "the refused run disturbed the first"
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert _exact(job, arrays)
    assert not os.path.exists(lock)


def test_a_stale_lock_is_taken_over_with_one_line(tmp_path):
    path, job, arrays = _slow_job(tmp_path, n=3000, every=1000)
    os.makedirs(job.output)
    import socket
    with open(os.path.join(job.output, ".mpi-join.lock"), "w") as f:
        json.dump({"host": socket.gethostname(), "pid": 2 ** 22 + 7, "started": "long ago"}, f)
    with open(job.path) as f:
        text = f.read()
    with open(job.path, "w") as f:
        f.write(text.replace("rate = 4000", 'rate = "max"'))
    p = run_mpi(3, "run", path)
    assert p.returncode == 0, p.stderr
    assert "taking over a stale lock" in p.stderr and "is not running" in p.stderr
    assert _exact(job, arrays)


def test_a_killed_rank_is_named_with_its_host(tmp_path):
    """`mpi-join run -n 3`: rank 2 killed outright; one line names it and its host."""
    import signal
    import socket
    import sys
    from test_checkpoint import _rank_pid
    path, job, arrays = _slow_job(tmp_path, n=16000, every=4000)
    env = dict(os.environ, MPI_JOIN_QUIET="1")
    p = subprocess.Popen([sys.executable, "-m", "mpi_join", "run", "-n", "3", path], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(job.output, "results")) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        pid = _rank_pid(2, path)
        assert pid
        os.kill(pid, signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0
    line = [l for l in err.splitlines() if l.startswith("mpi-join: error:")]
    assert len(line) == 1, err
    host = socket.gethostname()
    assert (f"rank 2 on host {host} was killed (SIGKILL" in line[0] or
            (f"2 on {host}" in line[0] and "ended by SIGKILL: one was killed outright" in line[0])), err
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
