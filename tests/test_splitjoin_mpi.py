"""`splitjoin` under real mpiexec: 1 to 6 join cores (-n 3..8) on trees of fanout 2 and 3, both
window kinds and every predicate kind, written in strict outer order and checked by
`mpi-join verify --ordered`; the other punctuation modes; a SIGKILL of a core that merges its
children's results (results in flight in the merge tree) then --resume, exactly once and still
in order. (Every predicate x window x rank count of the shared matrix: test_strategies_local.py.)"""
import json
import os

import numpy as np
import pytest

from mpi_join.storage.verify import order_violations, writers
from conftest import cli, equi_job_text, random_streams, run_mpi, run_local, write_job
from reference import assert_equals_oracle
from test_checkpoint import kill_then_resume, paced_checkpointed_job

SLOW = True
STRATEGY = "splitjoin"   # whose time budget this file's tests count against (conftest.py)

PRED = {
    "equi": 'equi = [["R.k", "S.k"]]',
    "band": 'band = [{left = "R.v", right = "S.w", eps = 0.4}]',
    "theta": 'theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]',
    "equi+band": 'equi = [["R.k", "S.k"]]\nband = [{left = "R.v", right = "S.w", eps = 2}]',
}
WINDOWS = {"time": ('"30ms"', '"20ms"'), "count": ("40", "25")}


def _check(job, arrays, level="outer"):
    got = assert_equals_oracle(job, arrays)
    ranks = json.load(open(os.path.join(job.output, "metrics", "summary.json")))["ranks"]
    assert writers(job.output) == {len(ranks) - 1}, "only the combiner (the last rank) writes"
    if level:
        assert order_violations(got, level) == 0


@pytest.mark.parametrize("cores,fanout,kind,pred,extra", [
    (1, 2, "count", "equi", ""),
    (2, 2, "time", "band", 'local_join = "scan"'),
    (3, 3, "count", "theta", ""),
    (4, 2, "time", "equi", 'local_join = "scan"'),
    (5, 3, "count", "band", ""),
    (6, 2, "time", "equi+band", ""),
])
def test_cores_and_fanouts_equal_oracle_in_strict_outer_order(tmp_path, cores, fanout, kind, pred, extra):
    text = equi_job_text(WINDOWS[kind], strategy="splitjoin", predicate=PRED[pred],
                         extra_strategy=f"fanout = {fanout}\n{extra}", run="batch_size = 7\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(cores), 2500, key_range=8, ts_step=1)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_local(cores + 2, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    _check(job, arrays)
    v = cli("verify", job.output, "--job", path, "--ordered", "outer")
    assert v.returncode == 0 and "OK: results equal the oracle and are in order" in v.stdout, v.stdout + v.stderr


@pytest.mark.parametrize("mode,interval,level", [("comparisons", 1, "inner"), ("comparisons", 4, None),
                                                  ("tuples", 5, None), ("none", 1, None)])
def test_relaxed_and_disabled_punctuation_give_the_full_result(tmp_path, mode, interval, level):
    text = equi_job_text(WINDOWS["count"], strategy="splitjoin", predicate=PRED["band"],
                         extra_strategy=f'punctuation = "{mode}"\ninterval = {interval}\nfanout = 2',
                         run="batch_size = 5\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(9), 2000, key_range=8, ts_step=1)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_local(6, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    _check(job, arrays, level)
    s = json.load(open(os.path.join(job.output, "metrics", "summary.json")))
    comb = [r for r in s["ranks"] if r["rank"] == 5][0]
    assert (comb["stars_r"] + comb["stars_s"] > 0) == (mode != "none"), comb


def test_sigkill_a_merging_core_then_resume_is_exactly_once_and_in_order(tmp_path):
    """-n 6: cores 1..4, fanout 2, so core 1 passes input to 3 and 4 and merges their results;
    killing it after two checkpoints loses what it held and what was in flight to and from it."""
    path, job, arrays = paced_checkpointed_job(tmp_path, "splitjoin", PRED["band"])
    kill_then_resume(path, job, ranks=6, victim=1, total=16000)
    _check(job, arrays)


@pytest.mark.parametrize("mode,level,after", [("tuples", "outer", 7), ("comparisons", "inner", 4)])
def test_the_punctuated_order_holds_through_a_resume_at_another_rank_count(tmp_path, mode, level, after):
    """A crash after two checkpoints on 5 ranks, resumed on `after` ranks: the new combiner writes
    what the old mergers held first, in the punctuated order (by trigger, then the stored tuple;
    it sorted them by R's seq, which put 6 to 61 results out of order), and `verify --ordered`
    follows the combiner across the rank counts (it refused files of two ranks)."""
    from test_checkpoint import kill_local_after_checkpoints, unpaced
    path, job, arrays = paced_checkpointed_job(tmp_path, "splitjoin", PRED["equi"], total=8000,
                                               extra_strategy=f'punctuation = "{mode}"\ninterval = 1')
    p = kill_local_after_checkpoints(path, job.checkpoint.dir, 5, 2, 8000)
    assert p.returncode != 0
    r = run_local(after, "run", unpaced(path), "--resume", job.checkpoint.dir)
    assert r.returncode == 0 and "resuming from checkpoint" in r.stderr, r.stderr
    assert len(writers(job.output)) == 2, "the old and the new combiner wrote"
    v = cli("verify", job.output, "--job", path, "--ordered", level)
    assert v.returncode == 0 and "OK: results equal the oracle and are in order" in v.stdout, v.stdout + v.stderr
