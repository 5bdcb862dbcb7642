"""A vertex fed by several senders (tests/broadcast_strategy.py's `fan-in`: two distributors,
each routing to every core by the key's hash, the cores merging the two flows in rank 0's order)
resumes at another rank count with no restore code: its rows are placed by the partitioner the
senders share (placement._fan_in), and the rows in flight to a core at the cut (recorded as its
channel state on the flow whose marker copy came second) are carried to rest by the drain
before the state is dealt (slaves/cuts._in_flight). Before, the restore refused them."""
import json
import shutil

import numpy as np
import pytest

from conftest import equi_job_text, random_streams, run_local, write_job
from mpi_join import strategies
from mpi_join.join.oracle import run_oracle
from mpi_join.runtime.graph import RESULTS
from mpi_join.runtime.placement import home
from mpi_join.storage import checkpoint as ck
from mpi_join.storage.results import read_results
from reference import assert_same_rows

STRATEGY = "fan-in"


def _job(tmp_path, kind="time", every=None):
    windows = ('"60ms"', '"40ms"') if kind == "time" else ("50", "70")
    text = equi_job_text(windows, strategy="fan-in", run="batch_size = 20\nmax_inflight = 2\n")
    if every:
        text += f'\n[checkpoint]\ndir = "ckpt"\nevery_tuples = {every}\nkeep = 100\n'
    arrays = random_streams(np.random.default_rng(3), 4000, key_range=12)
    return (*write_job(str(tmp_path), text, arrays), arrays)


def test_a_core_fed_by_two_senders_is_placed_by_the_hash_they_share(tmp_path):
    path, job, arrays = _job(tmp_path)
    job = strategies.check_strategy(job)
    graph = strategies.get("fan-in").build_graph(7, job.strategy.params)
    cores = graph.ranks("core")
    assert len(cores) == 3 and all(len(graph.in_edges(c)) == 2 for c in cores)
    from mpi_join.join.window import runtime_dtype
    rows = [np.zeros(len(a), runtime_dtype(s.dtype, 2)) for a, s in zip(arrays, job.streams)]
    for r, a in zip(rows, arrays):
        for n in a.dtype.names:
            r[n] = a[n]
    for s in (0, 1):
        where = np.stack([home(job, graph, c)(rows[s], s) for c in cores])
        assert (where.sum(axis=0) == 1).all()              # each row lives at exactly one core


@pytest.mark.parametrize("kind", ["time", "count"])
def test_fan_in_equals_the_oracle_in_process(tmp_path, kind):
    path, job, arrays = _job(tmp_path, kind)
    for ranks in (5, 7):
        r = run_local(ranks, "run", path, "--overwrite")
        assert r.returncode == 0, r.stderr
        assert_same_rows(read_results(job.output, job.stream_names), run_oracle(job, arrays))


def _in_flight_input(root, cid, man):
    """(rank, sender) of the input rows in flight at checkpoint `cid`'s cut."""
    graph = strategies.get("fan-in").build_graph(man["ranks"], {})
    got = []
    for r in graph.workers:
        _, attrs = ck.read_rank(root, cid, r, None, manifest=man, keep=lambda n: False)
        got += [(r, src) for src in attrs.get("channel", []) if graph.carries(src, r) != RESULTS]
    return got


def test_fan_in_resumes_at_more_and_then_fewer_ranks_with_rows_in_flight(tmp_path):
    """A checkpoint whose cores hold input rows in flight (asserted: else this proves nothing),
    resumed at 7 ranks from 5, and the newest of that run at 6 from 7: exact each time."""
    path, job, arrays = _job(tmp_path, every=300)
    assert run_local(5, "run", path).returncode == 0
    root = job.checkpoint.dir
    done = [(c, m) for c, m in ck.list_checkpoints(root) if m]
    flying = [c for c, m in done if _in_flight_input(root, c, m)]
    assert flying, "no checkpoint caught rows in flight to a core"
    for c, _ in done:
        if c > flying[0]:
            shutil.rmtree(ck.ckpt_path(root, c))
    expect = run_oracle(job, arrays)
    for ranks, was in ((7, 5), (6, 7)):
        newest, man = [(c, m) for c, m in ck.list_checkpoints(root) if m][-1]
        assert man["ranks"] == was
        r = run_local(ranks, "run", path, "--resume", root)
        assert r.returncode == 0 and f"resuming from checkpoint {newest} " in r.stderr, r.stderr
        assert_same_rows(read_results(job.output, job.stream_names), expect)
        summary = json.load(open(f"{job.output}/_SUCCESS"))
        assert summary["results"] == len(expect)
        if ranks == 7:                          # the next resume starts from a cut of this run
            later = [(c, m) for c, m in ck.list_checkpoints(root) if m and m["ranks"] == 7]
            assert later, "the resumed run took no checkpoint"
            for c, m in ck.list_checkpoints(root):
                if m and m["ranks"] != 7:
                    shutil.rmtree(ck.ckpt_path(root, c))
