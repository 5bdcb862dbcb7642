"""The shared runtime under real mpiexec, through the test-only relay strategies: batches, markers
and end-of-stream travel around a ring of 4 workers and along a chain of 4; checkpoints cut
consistently (the ring's tail -> head link carries channel state) and a SIGKILL then --resume is
exactly once."""
import json
import os

import numpy as np
import pytest

from mpi_join.storage import checkpoint as ck
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from conftest import equi_job_text, random_streams, run_local, run_mpi, write_job
from reference import assert_same_rows
from test_checkpoint import kill_after_checkpoints, unpaced

SLOW = True
STRATEGY = "runtime"   # whose time budget this file's tests count against (conftest.py)
CKPT = '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = {n}\nkeep = 3\n'


def _job(tmp, strategy, n=6000, every=600, rate=None, batch=50, extra=""):
    run = f"batch_size = {batch}\nmax_inflight = 2" + (f'\nrate = {rate}\nflush_interval = "10ms"' if rate else "")
    text = equi_job_text(('"30ms"', "40"), strategy=strategy, run=run, extra_strategy=extra) + CKPT.format(n=every)
    arrays = random_streams(np.random.default_rng(7), n, key_range=20, ts_step=2)
    return write_job(str(tmp), text, arrays) + (arrays,)


def _check(job, arrays):
    got = read_results(job.output, job.stream_names)
    assert_same_rows(got, run_oracle(job, arrays))


@pytest.mark.parametrize("strategy", ["relay-ring", "relay-chain"])
def test_batches_markers_and_eos_travel_the_topology(tmp_path, strategy):
    path, job, arrays = _job(tmp_path, strategy, extra="hop_delay = 0.002")
    p = run_mpi(5, "run", path)
    assert p.returncode == 0, p.stderr
    _check(job, arrays)
    s = json.loads(open(os.path.join(job.output, "metrics", "summary.json")).read())
    assert len(s["checkpoints"]) >= 1        # one cut at a time: how many fit depends on speed
    workers = [r for r in s["ranks"] if r["rank"] > 0]
    # every worker forwarded what it received (the last one on the path drops it)
    assert all(r["tuples_in"] == 6000 for r in workers if r["rank"] > 1 or strategy == "relay-chain")
    eos = {r["rank"]: r["eos_seen"] for r in workers}
    if strategy == "relay-ring":      # the head sees the end twice: from the driver and back from the tail
        assert eos == {1: 2, 2: 1, 3: 1, 4: 1}, eos
        assert [r["role"] for r in workers] == ["head", "ring", "ring", "tail"]
    else:
        assert eos == {1: 1, 2: 1, 3: 1, 4: 1}, eos
    # every complete checkpoint has a file per rank and the results it committed
    channel = 0
    for cid, man in ck.list_checkpoints(job.checkpoint.dir):
        assert man and man["ranks"] == 5
        for r in range(5):
            _, attrs = ck.read_rank(job.checkpoint.dir, cid, r)
            channel += len(attrs.get("channel", []))
    # batches are in flight on every link (hop_delay), so the ring's head records the tail -> head
    # link's state at least once; a one-way chain has no link a marker does not precede
    assert (channel > 0) == (strategy == "relay-ring"), channel


def test_sigkill_then_resume_is_exactly_once(tmp_path):
    """A ring, whose links carry channel state (a chain's do not: psp's and handshake's files
    kill their own)."""
    path, job, arrays = _job(tmp_path, "relay-ring", n=16000, every=1500, rate=2500, batch=100)
    root = job.checkpoint.dir
    p = kill_after_checkpoints(path, root, ranks=5, victim=3, checkpoints=2, total=16000)
    assert p.returncode != 0
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    r = run_local(5, "run", unpaced(path), "--resume", root)
    assert r.returncode == 0, r.stderr
    assert "resuming from checkpoint" in r.stderr
    _check(job, arrays)


def test_liveness_does_not_fire_on_busy_ranks_under_backpressure_or_a_long_checkpoint(tmp_path):
    """liveness_timeout 1 s, and every worker after the first spends 1.5 s on each batch away
    from its message loop (hop_delay): the driver and the first worker wait on credits, a
    checkpoint waits on the slow ranks, and still no one is reported silent (heartbeats come
    from a thread), and a rank that was away does not count its own absence against others."""
    path, job, arrays = _job(tmp_path, "relay-chain", n=1600, every=800, batch=400,
                             extra="hop_delay = 1.5")
    text = open(path).read().replace("[run]\n", '[run]\nliveness_timeout = "1s"\n')
    open(path, "w").write(text)
    p = run_mpi(3, "run", path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "silent" not in p.stderr
    _check(job, arrays)
    s = json.loads(open(os.path.join(job.output, "metrics", "summary.json")).read())
    assert s["liveness_timeout_s"] == 1.0 and len(s["checkpoints"]) >= 1


def _parts_by_rank(job):
    return sorted({int(f[6:10]) for f in os.listdir(os.path.join(job.output, "results")) if f.startswith("part-r")})


def test_results_travel_result_edges_through_mergers_to_the_sink(tmp_path):
    """merge-tree (graph_strategies.py) on 7 ranks: the sink (rank 1), 2 mergers, 4 cores. Each
    rank runs its role's class; cores send results on result edges, only the sink writes them,
    and checkpoints record results in flight on result edges as channel state."""
    path, job, arrays = _job(tmp_path, "merge-tree", n=8000, every=800, extra="merge_delay = 0.003")
    p = run_mpi(7, "run", path)
    assert p.returncode == 0, p.stderr
    _check(job, arrays)
    assert _parts_by_rank(job) == [1]
    s = json.loads(open(os.path.join(job.output, "metrics", "summary.json")).read())
    roles = {r["rank"]: r["role"] for r in s["ranks"]}
    assert roles == {0: "driver", 1: "sink", 2: "merger", 3: "merger", 4: "core", 5: "core", 6: "core"}
    by = {r["rank"]: r for r in s["ranks"]}
    assert by[1]["results_received"] == s["results"] == by[2]["passed"] + by[3]["passed"]
    channel = {}
    for cid, man in ck.list_checkpoints(job.checkpoint.dir):
        for r in range(7):
            _, attrs = ck.read_rank(job.checkpoint.dir, cid, r)
            channel[r] = channel.get(r, 0) + len(attrs.get("channel", []))
    assert channel.get(1, 0) + channel.get(2, 0) > 0, channel      # fed by two links each


@pytest.mark.parametrize("strategy,victim", [("merge-tree", 2), ("fan-tree", 2), ("dispatch", 4), ("grow", 2),
                                             ("broadcast-store", 3)])
def test_graph_sigkill_then_resume_is_exactly_once(tmp_path, strategy, victim):
    """merge-tree: a merger (2) killed after two checkpoints; the resumed run writes every result
    once, whether it was at a core, in flight on a result edge, or at the sink.
    fan-tree: an inner node of the distribution tree (fanout 2: 1 -> 3, 4; 2 -> 5) killed.
    dispatch: a unit (4), fed by both dispatchers through the ordered merge.
    grow: worker 2, which held nothing until units moved to it mid-run.
    broadcast-store (broadcast_strategy.py, a shape of its own, rank 0 routing by its edges): core 3 of 4."""
    extra = {"merge-tree": "merge_delay = 0.002", "fan-tree": "join_delay = 0.001",
             "grow": "partitions = 12\ngrow_at = 4"}.get(strategy, "")
    path, job, arrays = _job(tmp_path, strategy, n=16000, every=1500, rate=2500, batch=100, extra=extra)
    root = job.checkpoint.dir
    p = kill_after_checkpoints(path, root, ranks=6, victim=victim, checkpoints=2, total=16000)
    assert p.returncode != 0
    r = run_local(6, "run", unpaced(path), "--resume", root)
    assert r.returncode == 0, r.stderr
    assert "resuming from checkpoint" in r.stderr
    _check(job, arrays)
    if strategy in ("merge-tree", "broadcast-store"):
        assert _parts_by_rank(job) == [1 if strategy == "merge-tree" else 5]       # only the sink writes


def test_units_move_mid_run_to_workers_that_held_nothing(tmp_path):
    """grow: every unit starts on worker 1; half move to worker 2 and a quarter to worker 3 while
    the job runs, through the runtime's move; results equal the oracle, the moves are counted,
    and every worker ends up holding window state."""
    path, job, arrays = _job(tmp_path, "grow", n=8000, every=800, extra="partitions = 12\ngrow_at = 3")
    p = run_mpi(4, "run", path)
    assert p.returncode == 0, p.stderr
    _check(job, arrays)
    s = json.loads(open(os.path.join(job.output, "metrics", "summary.json")).read())
    driver = next(r for r in s["ranks"] if r["rank"] == 0)
    assert driver["units_moved"] == 6 + 3, driver.get("units_moved")
    assert all(r["results"] > 0 for r in s["ranks"] if r["rank"] > 0), [r["results"] for r in s["ranks"]]
