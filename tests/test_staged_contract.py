"""Staged input is read only under the settings it was staged with: a job whose time unit or
schema changed after staging is refused by every step that reads it (exit code 2, one line
naming the manifest), instead of giving a wrong answer that the oracle would share."""
import os

import numpy as np
import pytest

from conftest import cli, equi_job_text, random_streams, run_mpi, write_job


def _staged_then_edited(tmp_path, old, new):
    text = equi_job_text(('"5ms"', '"5ms"'))
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(0), 300))
    with open(path, "w") as f:
        assert old in text
        f.write(text.replace(old, new))
    return path, job


def _refused(p, *fragments):
    assert p.returncode == 2, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.startswith("mpi-join: error:")]
    assert len(lines) == 1, p.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_oracle_and_verify_refuse_a_changed_time_unit(tmp_path):
    path, job = _staged_then_edited(tmp_path, 'ts_unit = "ms"', 'ts_unit = "us"')
    os.makedirs(job.output, exist_ok=True)
    for args in (("oracle", path), ("verify", job.output, "--job", path)):
        _refused(cli(*args), "_manifest.json", 'staged with ts_unit = "ms"', 'the job says "us"')


def test_a_changed_column_type_is_refused(tmp_path):
    path, job = _staged_then_edited(tmp_path, 'k = "int64"', 'k = "int32"')
    _refused(cli("oracle", path), "stream 'S' column 'k' was staged as int64", "declares int32")


def test_a_missing_manifest_is_refused(tmp_path):
    path, job = _staged_then_edited(tmp_path, "[job]", "[job]")
    os.remove(os.path.join(job.staged, "_manifest.json"))
    _refused(cli("oracle", path), "_manifest.json: missing", "mpi-join stage JOB")


@pytest.mark.parametrize("ranks", [3])
def test_run_refuses_a_changed_time_unit(tmp_path, ranks):
    path, job = _staged_then_edited(tmp_path, 'ts_unit = "ms"', 'ts_unit = "us"')
    p = run_mpi(ranks, "run", path, timeout=60)
    _refused(p, "_manifest.json", 'staged with ts_unit = "ms"')
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
