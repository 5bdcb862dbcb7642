"""A strategy of a new shape written from the README alone (tests/stripe_strategy.py: a band join
over key stripes, rank 0 copying each tuple to every core its band touches): it equals the
oracle in process at several rank counts and both window kinds, and resumes at other rank counts
with no restore code of its own (its placement deals the stored rows; the sink's rows in flight
go to the new sink). Under mpiexec, through SIGKILLs: tests/test_checkpoint.py."""
import os
import shutil

import numpy as np
import pytest

from conftest import equi_job_text, random_streams, run_local, write_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage import checkpoint as ck
from mpi_join.storage.results import read_results
from reference import assert_same_rows

BAND = 'band = [{left = "R.v", right = "S.w", eps = 0.05}]'


def _code_lines(path):
    """Lines of code: no blank line, comment or docstring."""
    import ast
    tree = ast.parse(open(path).read())
    docs = {n.body[0].lineno for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    spans = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and n.lineno in docs:
            spans |= set(range(n.lineno, n.end_lineno + 1))
    return [ln for i, ln in enumerate(open(path).read().splitlines(), 1)
            if ln.strip() and not ln.strip().startswith("#") and i not in spans]


def test_the_strategy_is_small():
    assert len(_code_lines(os.path.join(os.path.dirname(__file__), "stripe_strategy.py"))) <= 35


@pytest.mark.parametrize("ranks", [3, 4, 6])
@pytest.mark.parametrize("kind", ["time", "count"])
def test_stripes_equal_the_oracle_in_process(tmp_path, ranks, kind):
    windows = ('"60ms"', '"40ms"') if kind == "time" else ("50", "70")
    path, job = write_job(str(tmp_path), equi_job_text(windows, strategy="stripes", run="batch_size = 20",
                                                       predicate=BAND),
                          arrays := random_streams(np.random.default_rng(ranks), 3000, key_range=20))
    r = run_local(ranks, "run", path)
    assert r.returncode == 0, r.stderr
    expect = run_oracle(job, arrays)
    assert len(expect) > 100
    assert_same_rows(read_results(job.output, job.stream_names), expect)


def test_stripes_resume_in_process_at_more_and_then_fewer_ranks(tmp_path):
    text = equi_job_text(('"60ms"', '"40ms"'), strategy="stripes", run="batch_size = 20", predicate=BAND) + \
        '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 400\nkeep = 50\n'
    arrays = random_streams(np.random.default_rng(7), 4000, key_range=20)
    path, job = write_job(str(tmp_path), text, arrays)
    assert run_local(4, "run", path).returncode == 0
    root = job.checkpoint.dir
    for c in [c for c, m in ck.list_checkpoints(root) if m][2:]:
        shutil.rmtree(ck.ckpt_path(root, c))
    expect = run_oracle(job, arrays)
    for ranks, was in ((6, 4), (3, 6)):
        newest, man = [(c, m) for c, m in ck.list_checkpoints(root) if m][-1]
        assert man["ranks"] == was
        r = run_local(ranks, "run", path, "--resume", root)
        assert r.returncode == 0 and f"resuming from checkpoint {newest} " in r.stderr, r.stderr
        assert_same_rows(read_results(job.output, job.stream_names), expect)
