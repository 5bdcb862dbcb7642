"""Directory locks (paths.DirLock): exactly one contender takes over a stale lock, a lock file
that cannot be a lock is refused with one line, and a run locks every directory it writes."""
import json
import multiprocessing as mp
import os
import socket

import pytest

from mpi_join.errors import JobError
from mpi_join.storage.paths import LOCK, DirLock

DEAD_PID = 2 ** 22 + 12345          # above Linux's pid_max: never a running process


def _stale(d):
    with open(os.path.join(d, LOCK), "w") as f:
        json.dump({"host": socket.gethostname(), "pid": DEAD_PID, "started": "then"}, f)


def _contend(d, go, results, hold):
    go.wait()
    try:
        lock = DirLock(d, "output.dir").acquire()
    except JobError as e:
        results.put(("lost", str(e)))
        return
    results.put(("won", os.getpid()))
    hold.wait()              # hold it until every contender has answered
    lock.release()


def test_a_stale_lock_is_taken_over_by_exactly_one_of_many(tmp_path):
    """Issue: a takeover was check, unlink, create: two runs that both found the lock stale could
    both end up holding the directory. Six processes at once, 25 times over: exactly one wins
    each time, and every other is refused naming a live holder (the winner)."""
    ctx = mp.get_context("fork")
    for round_ in range(25):
        d = str(tmp_path / f"r{round_}")
        os.makedirs(d)
        _stale(d)
        go, hold, results = ctx.Event(), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_contend, args=(d, go, results, hold)) for _ in range(6)]
        for p in procs:
            p.start()
        go.set()
        got = [results.get(timeout=60) for _ in procs]
        hold.set()
        for p in procs:
            p.join(timeout=60)
        winners = [pid for what, pid in got if what == "won"]
        assert len(winners) == 1, (round_, got)
        losers = [msg for what, msg in got if what == "lost"]
        assert all("is in use by another run" in m and f"pid {winners[0]}" in m for m in losers), losers


@pytest.mark.parametrize("kind", ["symlink", "garbage", "directory", "old empty"])
def test_a_lock_file_that_cannot_be_a_lock_is_refused_with_one_line(tmp_path, kind):
    """Issue: a lock file that was a symlink or garbage was reported for two minutes as "in use by
    another run (host ?, pid ?)". Checks the line says what the file is (an old empty one, left by
    a crash between create and write, is taken over instead)."""
    path = tmp_path / LOCK
    if kind == "symlink":
        (tmp_path / "elsewhere").write_text("{}")
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "garbage":
        path.write_bytes(b"\x00\xffnot json")
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_text("")
        os.utime(path, (1, 1))
    said = []
    if kind == "old empty":
        lock = DirLock(str(tmp_path), "output.dir", say=said.append).acquire()
        assert lock.held and "taking over a stale lock" in said[0] and "empty" in said[0]
        lock.release()
        return
    with pytest.raises(JobError) as e:
        DirLock(str(tmp_path), "output.dir").acquire()
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "in use" not in msg
    assert {"symlink": "is a symbolic link", "garbage": "is not a lock record of mpi-join",
            "directory": "is not a regular file"}[kind] in msg


def test_a_resume_locks_the_checkpoints_it_reads_and_the_ones_it_writes(tmp_path):
    """Issue: `--resume DIR` locked DIR but not the job's own checkpoint directory, where its new
    checkpoints go. Checks a lock in each of the three directories while the run holds them."""
    from types import SimpleNamespace
    from mpi_join.ranks import _lock_dirs
    job = SimpleNamespace(output=str(tmp_path / "out"), checkpoint=SimpleNamespace(dir=str(tmp_path / "ckpt")))
    os.makedirs(tmp_path / "old-ckpt")
    held = _lock_dirs(job, {"resume": str(tmp_path / "old-ckpt")})
    try:
        assert {os.path.basename(lk.dir) for lk in held} == {"out", "ckpt", "old-ckpt"}
        assert all(os.path.exists(os.path.join(tmp_path, d, LOCK)) for d in ("out", "ckpt", "old-ckpt"))
        with pytest.raises(JobError, match="ckpt is in use by another run"):
            DirLock(str(tmp_path / "ckpt"), "checkpoint.dir").acquire()
    finally:
        for lk in held:
            lk.release()
