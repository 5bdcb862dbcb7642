"""LEFT, RIGHT and FULL joins on every strategy (storage/lone_rows.py: where no place knows that a
tuple met no partner, rank 0 writes its lone row from the recorded results at the first
checkpoint where it is final, the rest when the input has ended): random inputs, equi keys and bands, time windows and intervals, in process and under
mpiexec, through a SIGKILL, a --resume and a rescale, each equal to the oracle (which
tests/test_oracle.py and tests/test_filters.py check against DuckDB)."""
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import equi_job_text, random_streams, run_local, run_mpi, write_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from reference import assert_same_rows

OUTER = {"LEFT": 'outer = ["R"]', "RIGHT": 'outer = ["S"]', "FULL": 'outer = ["R", "S"]'}
EQUI = 'equi = [["R.k", "S.k"]]'
BAND = 'band = [{ left = "R.v", right = "S.w", eps = 0.5, closed = true }]'
INTERVAL = 'interval = { left = "R", right = "S", lower = "-20ms", upper = "35ms", closed = "left" }'
SHIFTED = 'interval = { left = "R", right = "S", lower = "5ms", upper = "40ms", closed = "both" }'

# (strategy, ranks): each strategy at a rank count its roles need
PLACES = [("matrix", 4), ("biclique", 5), ("handshake", 3), ("llhj", 4), ("splitjoin", 4), ("psp", 3)]


def _job(tmp_path, strategy, pred, kind, windows=('"60ms"', '"45ms"'), n=3000, seed=0, run="", extra=""):
    text = equi_job_text(None if "interval" in pred else windows, strategy=strategy,
                         predicate=pred + "\n" + OUTER[kind], run=run) + extra
    arrays = random_streams(np.random.default_rng(seed), n, key_range=40, ts_step=3)
    path, job = write_job(str(tmp_path), text, arrays)
    return path, job, arrays


def _lone(job, arrays):
    expect = run_oracle(job, arrays)
    return expect, int((expect < 0).any(axis=1).sum())


CASES = [(s, n, pred, kind) for k, (s, n) in enumerate(PLACES)      # each strategy: equi keys, and a band or a shifted interval
         for pred, kind in ((EQUI, ("LEFT", "RIGHT", "FULL")[k % 3]),
                            ((BAND + "\n" + INTERVAL) if k % 2 else (EQUI + "\n" + SHIFTED), ("FULL", "LEFT", "RIGHT")[k % 3]))]


@pytest.mark.parametrize("strategy,n,pred,kind", CASES, ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_an_outer_join_equals_the_oracle_on_every_strategy(tmp_path, strategy, n, pred, kind):
    path, job, arrays = _job(tmp_path, strategy, pred, kind, seed=n + len(pred))
    expect, lone = _lone(job, arrays)
    assert lone > 10 and len(expect) > lone            # both: pairs, and rows without a partner
    r = run_local(n, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_rows(read_results(job.output, job.stream_names), expect)
    mine = [f for f in os.listdir(os.path.join(job.output, "results")) if f.startswith("part-r0000-")]
    assert sum(pq.read_metadata(os.path.join(job.output, "results", f)).num_rows for f in mine) == lone


@pytest.mark.parametrize("strategy,n,kind", [("matrix", 5, "FULL"), ("handshake", 4, "LEFT"), ("biclique", 5, "RIGHT"),
                                             ("psp", 3, "FULL"), ("llhj", 4, "RIGHT"), ("splitjoin", 4, "LEFT")])
def test_an_outer_join_under_mpiexec(tmp_path, strategy, n, kind):
    path, job, arrays = _job(tmp_path, strategy, EQUI, kind, n=4000, seed=n)
    r = run_mpi(n, "run", path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_rows(read_results(job.output, job.stream_names), run_oracle(job, arrays))


@pytest.mark.parametrize("strategy,ranks,again,kind", [("matrix", 4, 5, "FULL"), ("splitjoin", 4, 3, "RIGHT"),
                                                      ("llhj", 4, 4, "LEFT"), ("biclique", 5, 6, "LEFT"),
                                                      ("psp", 3, 4, "RIGHT"), ("handshake", 3, 3, "FULL")])
def test_an_outer_join_through_a_sigkill_a_resume_and_a_rescale(tmp_path, strategy, ranks, again, kind):
    """The job crashes (its one process SIGKILLed after two checkpoints, which committed lone
    rows) and resumes, at another rank count where `again` differs (at the same, the lone rows
    the checkpoint committed are counted by rank 0): the lone rows come once, from every
    recorded result."""
    from test_checkpoint import kill_local_after_checkpoints, unpaced
    run = 'batch_size = 40\nmax_inflight = 2\nrate = 2500\nflush_interval = "10ms"\n'
    path, job, arrays = _job(tmp_path, strategy, EQUI, kind, n=12000, seed=ranks, run=run,
                             extra='\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 1500\nkeep = 3\n')
    p = kill_local_after_checkpoints(path, job.checkpoint.dir, ranks, 2, 12000)
    assert p.returncode != 0 and not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    # lone rows came with the cuts, not only at the end: some are in what the crashed run committed
    from mpi_join.storage import checkpoint as ck
    cid, man = [c for c in ck.list_checkpoints(job.checkpoint.dir) if c[1] is not None][-1]
    assert any(n.startswith("part-r0000-") for n in ck.committed_files(job.checkpoint.dir, man)), cid
    r = run_local(again, "run", unpaced(path), "--resume", job.checkpoint.dir)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resuming from checkpoint" in r.stderr
    expect, lone = _lone(job, arrays)
    assert lone > 10
    assert_same_rows(read_results(job.output, job.stream_names), expect)


def test_an_outer_join_with_an_online_aggregate_is_refused_in_one_line(tmp_path):
    from conftest import cli
    text = equi_job_text(('"60ms"', '"45ms"'), strategy="biclique", predicate=EQUI + "\n" + OUTER["LEFT"],
                         extra_strategy='aggregate = "count(*)"')
    (tmp_path / "job.toml").write_text(text)
    path = str(tmp_path / "job.toml")
    c = cli("check", path, "-n", "5")
    assert c.returncode == 2 and "predicate.outer: an outer join's rows without a partner come after the last " \
                                  "result" in c.stderr, c.stderr
    assert len(c.stderr.strip().splitlines()) == 1


def test_the_oldest_held_seq_reads_rows_and_results_and_nothing_else():
    """What a rank holds at a cut (runtime/operator.oldest_seqs): a batch of tuples is its slot's
    stream's, results name a tuple of each stream (-1: none), other arrays (a splitjoin star,
    with a seq of its own) say nothing."""
    from mpi_join.runtime.operator import oldest_seqs
    from mpi_join.storage.results import result_dtype
    from mpi_join.splitjoin.rap import STAR
    rows = np.zeros(3, [("seq", np.int64), ("ts", np.int64)])
    rows["seq"] = [9, 4, 7]
    res = np.zeros(2, result_dtype(["R", "S"]))
    res["R_seq"], res["S_seq"] = [-1, 6], [3, 8]
    star = np.zeros(1, STAR)
    assert oldest_seqs([None, rows], 2) == [None, 4]
    assert oldest_seqs([res, star], 2, ("R", "S")) == [6, 3]
    assert oldest_seqs([rows, star], 2, ("R", "S"), into=[5, None]) == [4, None]
    assert oldest_seqs([rows[:0], res[:0]], 2, ("R", "S"), into=[5, 2]) == [5, 2]


def test_a_multiway_outer_join_is_refused_in_one_line(tmp_path):
    """psp's joins of three or more streams have no outer form (a lone row of which stream, with
    which partners?): `check` says so in one line, naming the option."""
    from conftest import cli
    streams = "".join(f'[streams.{s}]\nschema = {{ k = "int32", v = "float32" }}\nwindow = "40ms"\n' for s in "ABC")
    (tmp_path / "job.toml").write_text(
        f'[job]\nname = "m3"\nts_unit = "ms"\n[input]\nstaged = "staged"\n[output]\ndir = "out"\n{streams}'
        '[predicate]\nequi = [["A.k", "B.k"], ["B.k", "C.k"]]\nouter = ["A"]\n[strategy]\nname = "psp"\n')
    c = cli("check", str(tmp_path / "job.toml"), "-n", "4")
    assert c.returncode == 2 and len(c.stderr.strip().splitlines()) == 1, c.stderr
    assert "predicate.outer: outer joins relate two streams; this job has 3" in c.stderr, c.stderr
