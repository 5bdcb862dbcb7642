"""`mpi-join run --local --seed N` (mpi_join/stepped.py): every rank in one thread, messages
delivered in the seed's order. Equal to the oracle for every shipped strategy's shape, the same
seed gives the same run (the same rows in the same order in every part file), a checkpoint of it
resumes under threads (a failing rank is named: tests/test_local_runtime.py)."""
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import cli, equi_job_text, random_streams, run_local, write_job
from reference import assert_equals_oracle
from mpi_join import strategies

BAND = 'band = [{left = "R.v", right = "S.w", eps = 0.5}]'


def _seeded(n, path, seed, *more, env=None):
    return run_local(n, "run", path, "--seed", str(seed), *more, env=env)


def _parts(out):
    """Each result part file's rows, in the order written."""
    rdir = os.path.join(out, "results")
    return {f: pq.read_table(os.path.join(rdir, f)).drop_columns(["emit_ns", "latency_ns"]).to_pylist()
            for f in sorted(os.listdir(rdir)) if f.endswith(".parquet")}


def _shipped():
    """Every shipped strategy, each with a predicate it takes (band where it needs one)."""
    for name in strategies.names():
        info = strategies.get(name)
        if not info.testing:
            yield name, BAND if "band" in info.requires or "equi" not in info.predicates else 'equi = [["R.k", "S.k"]]'


@pytest.mark.parametrize("strategy,pred", list(_shipped()))
def test_a_seeded_run_equals_the_oracle(tmp_path, strategy, pred):
    arrays = random_streams(np.random.default_rng(11), 1500, key_range=7)
    path, job = write_job(str(tmp_path), equi_job_text(('"6ms"', "17"), strategy=strategy, predicate=pred,
                                                       run="batch_size = 53\nmax_inflight = 2"), arrays)
    p = _seeded(5, path, 3)
    assert p.returncode == 0, p.stderr + p.stdout
    assert_equals_oracle(job, arrays)


def _runs(tmp_path, strategy, pred, seeds):
    arrays = random_streams(np.random.default_rng(5), 1200, key_range=5)
    text = equi_job_text(('"6ms"', "17"), strategy=strategy, predicate=pred, run="batch_size = 31\nmax_inflight = 2")
    runs = []
    for k, seed in enumerate(seeds):
        path, job = write_job(str(tmp_path / f"{k}"), text, arrays)
        p = _seeded(5, path, seed)
        assert p.returncode == 0, p.stderr + p.stdout
        assert_equals_oracle(job, arrays)
        runs.append(_parts(job.output))
    return runs


def test_the_same_seed_gives_the_same_run_and_other_seeds_others(tmp_path):
    """A handshake core hears both of its neighbours: the order it writes results in follows the
    interleaving. One seed twice gives every part file row for row; other seeds move the order (a
    seed that changed nothing would replay nothing), never the set of results (the oracle's)."""
    a, b, c, d = _runs(tmp_path, "handshake", BAND, (7, 7, 8, 9))
    assert a == b
    assert a != c and a != d and c != d


def test_splitjoins_ordered_merge_writes_one_order_under_every_interleaving(tmp_path):
    """SplitJoin's combiner merges its cores' flows in punctuated order: the same rows in the same
    order whatever the schedule."""
    first, *others = _runs(tmp_path, "splitjoin", BAND, (7, 8, 9, 10))
    assert all(o == first for o in others)


def test_a_seeded_runs_checkpoint_resumes_under_threads(tmp_path):
    """A seeded run cuts the same checkpoints as any other: one resumed by `run --local` is exact."""
    arrays = random_streams(np.random.default_rng(6), 3000, key_range=6)
    text = equi_job_text(('"6ms"', "17"), strategy="handshake", predicate=BAND, run="batch_size = 64") + \
        '[checkpoint]\ndir = "ckpt"\nevery_tuples = 700\nkeep = 10\n'
    path, job = write_job(str(tmp_path), text, arrays)
    p = _seeded(4, path, 1)
    assert p.returncode == 0, p.stderr + p.stdout
    ckpts = sorted(d for d in os.listdir(job.checkpoint.dir) if d.startswith("ckpt-"))
    assert len(ckpts) >= 3, ckpts
    r = run_local(4, "run", path, "--resume", job.checkpoint.dir)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "resuming from checkpoint" in r.stderr
    assert_equals_oracle(job, arrays)


def test_seed_refusals_are_one_line(tmp_path):
    arrays = random_streams(np.random.default_rng(4), 300)
    path, _ = write_job(str(tmp_path), equi_job_text(('"6ms"', "17")), arrays)
    p = cli("run", path, "--seed", "3")
    assert p.returncode == 2 and "--seed" in p.stderr and "--local" in p.stderr, p.stderr
    p = _seeded(3, path, 3, "--follow")
    assert p.returncode == 2 and "--follow" in p.stderr and "--seed" in p.stderr, p.stderr
    two, _ = write_job(str(tmp_path / "two"), equi_job_text(('"6ms"', "17"), run="sources = 2"), arrays)
    p = _seeded(4, two, 3)
    assert p.returncode == 2 and "run.sources" in p.stderr and "rank 3" in p.stderr, p.stderr
