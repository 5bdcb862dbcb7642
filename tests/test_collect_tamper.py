"""`collect` reads only the part files a finished run recorded in _SUCCESS, each checked against
its rows, size and SHA-256, before Spark is imported; and one collect at a time writes an OUT.

Issue: after _SUCCESS, halving a part file, deleting one or copying one under a new name each
gave `collect` exit 0 with a wrong count (204 duplicates in one case); a truncated file gave 246
lines of traceback; two collects into one OUT were not refused."""
import json
import os
import shutil
import subprocess
import time

import pyarrow.parquet as pq
import pytest

from mpi_join.config import load_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.staged import read_staged
from mpi_join.tools.workloads import make
from conftest import mpi_join_cmd, run_cli_no_spark, run_local

SLOW = True


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 3-rank run, in process (two writers, so a part file can go and others stay)."""
    tmp = tmp_path_factory.mktemp("run")
    path = make("equi", str(tmp), tuples=3000, window="1s", domain_bits=8)
    p = run_local(3, "run", path)
    assert p.returncode == 0, p.stderr
    return tmp, path


@pytest.fixture
def run(finished, tmp_path):
    src, path = finished
    shutil.copytree(src, tmp_path / "w", symlinks=True)
    path = str(tmp_path / "w" / os.path.basename(path))
    job = load_job(path)
    parts = sorted(os.listdir(os.path.join(job.output, "results")))
    assert len([p for p in parts if p.endswith(".parquet")]) >= 2, parts
    return path, job, os.path.join(job.output, "results"), [p for p in parts if p.endswith(".parquet")]


def _shorten(d, parts):
    t = pq.read_table(os.path.join(d, parts[0]))
    pq.write_table(t.slice(0, t.num_rows // 2), os.path.join(d, parts[0]))
    return parts[0], "holds"


def _delete(d, parts):
    os.remove(os.path.join(d, parts[0]))
    return parts[0], "the run recorded is missing"


def _add(d, parts):
    t = pq.read_table(os.path.join(d, parts[0]))
    pq.write_table(t.slice(0, 5), os.path.join(d, "extra.parquet"))
    return "extra.parquet", "the run did not record"


def _copy_renamed(d, parts):
    new = parts[0].replace("-00000", "-00042")
    shutil.copy(os.path.join(d, parts[0]), os.path.join(d, new))
    return new, "the run did not record"


def _truncate(d, parts):
    f = os.path.join(d, parts[-1])
    with open(f, "r+b") as h:
        h.truncate(os.path.getsize(f) // 2)
    return parts[-1], "cannot be read"


def _no_success(d, parts):
    os.remove(os.path.join(os.path.dirname(d), "_SUCCESS"))
    return "", "no _SUCCESS"


def _linked(d, parts):
    """results/ moved away and a symbolic link left in its place (the README: a link is refused)."""
    away = os.path.join(os.path.dirname(os.path.dirname(d)), "elsewhere")
    os.rename(d, away)
    os.symlink(away, d)
    return "results", "is a symbolic link"


@pytest.mark.parametrize("tamper", [_shorten, _delete, _add, _copy_renamed, _truncate, _no_success, _linked],
                         ids=["shortened", "deleted", "added", "copied-renamed", "truncated", "no-success", "linked"])
def test_a_tampered_run_is_refused_with_one_line_before_spark(run, tmp_path, tamper):
    """Checks: exit 2; one line naming the file and what is wrong; Spark never imported; nothing
    written to OUT."""
    path, job, rdir, parts = run
    name, what = tamper(rdir, parts)
    out = tmp_path / "collected"
    p, spark_modules = run_cli_no_spark(tmp_path, "collect", job.output, "--job", path, "--out", str(out))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-3000:]
    assert name in lines[0] and what in lines[0], lines[0]
    assert spark_modules == [], spark_modules[:3]
    assert not out.exists() and not any(n.startswith(".collected") for n in os.listdir(tmp_path))


def test_two_collects_into_one_out_one_is_refused(run, tmp_path):
    """The first holds OUT while Spark works; a second into the same OUT is refused with one line
    naming the holder, before Spark; the first completes with every result."""
    path, job, rdir, parts = run
    out = tmp_path / "collected"
    lock = tmp_path / ".collected.mpi-join-collect.lock"
    first = subprocess.Popen(mpi_join_cmd("collect", job.output, "--job", path, "--out", str(out), "--master",
                                          "local[1]"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not lock.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert lock.exists(), first.communicate()[1][-2000:]
        p, spark_modules = run_cli_no_spark(tmp_path, "collect", job.output, "--job", path, "--out", str(out))
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and f"--out: {out} is in use by another run" in lines[0], p.stderr
        assert str(lock) in lines[0] and spark_modules == []
        o, e = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, e[-3000:]
    n = len(run_oracle(job, read_staged(job)))
    assert f"collected {n:,} results" in o
    assert json.loads((out / "_summary.json").read_text())["results"] == n
    assert not lock.exists(), "the lock outlived its collect"
