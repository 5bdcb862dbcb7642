"""`mpi-join check` and `mpi-join explain` (fast tier: no mpiexec)."""
import numpy as np

from conftest import cli, equi_job_text, random_streams, write_job


def _job(tmp_path, **kw):
    text = equi_job_text(('"40ms"', "25"), **kw)
    return write_job(str(tmp_path), text, random_streams(np.random.default_rng(0), 2000))


def test_check_passes_a_good_job_and_names_the_problem_otherwise(tmp_path):
    path, job = _job(tmp_path)
    p = cli("check", path, "-n", "3")
    assert p.returncode == 0 and p.stdout.startswith(f"ok: {path}: strategy hash on 3 ranks, 2,000 staged"), p.stderr
    p = cli("check", path, "-n", "1")
    assert p.returncode == 2 and "mpi-join: error:" in p.stderr and "ranks" in p.stderr
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('ts_unit = "ms"', 'ts_unit = "s"'))
    p = cli("check", path)
    assert p.returncode == 2 and 'staged with ts_unit = "ms"' in p.stderr


def test_explain_prints_roles_windows_state_and_local_joins(tmp_path):
    path, job = _job(tmp_path, predicate='equi = [["R.k", "S.k"]]\nband = [{left = "R.v", right = "S.w", eps = 5}]')
    p = cli("explain", path, "-n", "4")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "ranks: 4 in a star graph" in out and "rank 3: worker" in out
    assert "S: about 25 tuples (count window)" in out
    assert "R: about " in out and "tuples/s staged" in out
    assert "MB per worker if the windows spread evenly over 3 workers" in out
    assert "R x S: index on equi keys" in out and "checked on the candidate pairs" in out
    assert "R.k = S.k" in out and "|R.v - S.w| < 5" in out
