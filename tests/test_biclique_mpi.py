"""`biclique` under real mpiexec: random and ContRand routing with several subgroup settings, one
and two dispatchers (the order-consistent protocol through the runtime's ordered merge), time,
count and full-history windows, equi, band and theta; a SIGKILL of a unit then --resume, exactly
once. (Every predicate x window x rank count of the shared matrix: test_strategies_local.py.)"""
import json
import os

import numpy as np
import pytest

from conftest import cli, equi_job_text, random_streams, run_mpi, run_local, write_job
from reference import assert_equals_oracle
from test_checkpoint import kill_then_resume, paced_checkpointed_job

SLOW = True
STRATEGY = "biclique"   # whose time budget this file's tests count against (conftest.py)

PRED = {
    "equi": 'equi = [["R.k", "S.k"]]',
    "band": 'band = [{left = "R.v", right = "S.w", eps = 0.4}]',
    "theta": 'theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]',
}
WINDOWS = {"time": ('"30ms"', '"20ms"'), "count": ("40", "25"), "full": ('"unbounded"', '"unbounded"')}


_check = assert_equals_oracle


@pytest.mark.parametrize("ranks,kind,pred,params", [
    (4, "time", "equi", ""),
    (6, "count", "band", "dispatchers = 2"),
    (7, "time", "equi", "r_groups = 2\ns_groups = 3"),
    (8, "count", "equi", "dispatchers = 2\nr_units = 2\nr_groups = 2\ns_groups = 1"),
    (5, "full", "theta", "dispatchers = 2"),
    (6, "full", "equi", "r_groups = 2\ns_groups = 2"),
])
def test_routings_dispatchers_and_windows_equal_oracle(tmp_path, ranks, kind, pred, params):
    n = 1200 if kind == "full" else 1500
    text = equi_job_text(WINDOWS[kind], strategy="biclique", predicate=PRED[pred], extra_strategy=params,
                         run="batch_size = 7\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(ranks), n, key_range=8, ts_step=1)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_local(ranks, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    _check(job, arrays)
    ranks_ = json.load(open(os.path.join(job.output, "metrics", "summary.json")))["ranks"]
    units = [r for r in ranks_ if r["role"] == "unit"]
    assert sum(r["tuples_probed"] for r in units) > 0


def _run_checked(tmp_path, ranks, text, arrays):
    """Write the job and its input, run it on `ranks` ranks under mpiexec (2PS scaling decides by
    wall-clock load: one process per rank, as in production), check the results equal the oracle;
    returns (job path, job, the summary's rank records)."""
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_mpi(ranks, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    _check(job, arrays)
    return path, job, json.load(open(os.path.join(job.output, "metrics", "summary.json")))["ranks"]


AGG = 'aggregate = "sum(S.w), count(*), avg(R.v), min(S.w), max(R.k2) by R.k"'


def _verify_aggregate(path, job, snapshots_at_least):
    """`mpi-join verify` passes, the final snapshot equal to the oracle's aggregate."""
    p = cli("verify", job.output, "--job", path)
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("aggregate "))
    assert "the final one equals the oracle's aggregate" in line, line
    assert int(line.split(": ")[1].split()[0]) >= snapshots_at_least, line


def test_online_aggregation_snapshots_end_in_the_oracles_aggregate(tmp_path):
    """-n 7: shuffler, 2 dispatchers, 3 units, the merger (rank 6): snapshots every 5 ms while the
    input is paced, the last final and equal to the aggregate of the oracle's results."""
    text = equi_job_text(WINDOWS["time"], strategy="biclique", predicate=PRED["equi"],
                         extra_strategy=f"dispatchers = 2\n{AGG}\nupdate_ms = 5",
                         run='batch_size = 20\nrate = 20000\nflush_interval = "5ms"')
    arrays = random_streams(np.random.default_rng(9), 6000, key_range=8, ts_step=1)
    path, job, ranks = _run_checked(tmp_path, 7, text, arrays)
    _verify_aggregate(path, job, snapshots_at_least=5)
    merger = next(r for r in ranks if r["role"] == "merger")
    assert merger["views_merged"] > 5


def test_sigkill_a_unit_then_resume_is_exactly_once(tmp_path):
    """-n 7 with two dispatchers and an aggregate: units 3..5, the merger 6; killing unit 4 loses
    its stored tuples, its unsent view and the batches in flight to it from both dispatchers."""
    path, job, arrays = paced_checkpointed_job(tmp_path, "biclique", PRED["equi"],
                                               extra_strategy=f"dispatchers = 2\n{AGG}\nupdate_ms = 20")
    kill_then_resume(path, job, ranks=7, victim=4, total=16000)
    _check(job, arrays)
    _verify_aggregate(path, job, snapshots_at_least=2)


@pytest.fixture(scope="module")
def crashed_aggregate(tmp_path_factory):
    """A biclique run with an aggregate, killed (a unit) after two checkpoints: snapshots written."""
    from test_checkpoint import kill_after_checkpoints
    tmp = tmp_path_factory.mktemp("agg")
    path, job, arrays = paced_checkpointed_job(tmp, "biclique", PRED["equi"], extra_strategy=f"{AGG}\nupdate_ms = 20")
    p = kill_after_checkpoints(path, job.checkpoint.dir, ranks=6, victim=3, checkpoints=2, total=16000)
    assert p.returncode != 0
    return tmp, os.path.basename(path)


def _agg_copy(crashed_aggregate, tmp_path):
    import shutil
    from mpi_join.config import load_job
    src, name = crashed_aggregate
    shutil.copytree(src, tmp_path / "j", symlinks=True)
    path = str(tmp_path / "j" / name)
    job = load_job(path)
    snaps = sorted(f for f in os.listdir(os.path.join(job.output, "aggregate")) if f.startswith("snapshot-"))
    assert len(snaps) >= 2, snaps
    return path, job, os.path.join(job.output, "aggregate"), snaps


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_damaged_snapshots_are_not_resumed_over(crashed_aggregate, tmp_path, damage):
    """Issue: snapshots truncated before --resume: the resume exited 0 and wrote _SUCCESS with
    them in place; every snapshot deleted: numbers 0-19 missing and verify said OK. Snapshots are
    recorded in each checkpoint like result files. Checks: no checkpoint recording them is used
    (one line naming a snapshot), no _SUCCESS."""
    path, job, d, snaps = _agg_copy(crashed_aggregate, tmp_path)
    for f in snaps:
        if damage == "truncated":
            with open(os.path.join(d, f), "r+b") as h:
                h.truncate(os.path.getsize(os.path.join(d, f)) // 2)
        else:
            os.remove(os.path.join(d, f))
    p = run_local(6, "run", path, "--resume", job.checkpoint.dir)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "no usable checkpoint" in p.stderr and "aggregate snapshot" in p.stderr and "snapshot-0000" in p.stderr
    assert "Traceback" not in p.stderr
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


def test_a_resumed_aggregate_is_verified_and_a_gap_is_an_error(crashed_aggregate, tmp_path):
    """After an untouched resume verify passes; then one snapshot deleted: verify refuses with
    one line naming it (exit 2); with _SUCCESS gone too, the gap in the numbering still fails
    verify (exit 1)."""
    path, job, d, _ = _agg_copy(crashed_aggregate, tmp_path)
    p = run_local(6, "run", path, "--resume", job.checkpoint.dir)
    assert p.returncode == 0, p.stderr[-3000:]
    _verify_aggregate(path, job, snapshots_at_least=2)
    done = json.load(open(os.path.join(job.output, "_SUCCESS")))
    assert len(done["snapshots"]) >= 2
    victim = sorted(done["snapshots"])[1]
    os.remove(os.path.join(d, victim))
    v = cli("verify", job.output, "--job", path)
    lines = [ln for ln in v.stderr.splitlines() if ln.strip()]
    assert v.returncode == 2 and len(lines) == 1 and victim in lines[0] and "is missing" in lines[0], v.stderr
    os.remove(os.path.join(job.output, "_SUCCESS"))
    v = cli("verify", job.output, "--job", path)
    assert v.returncode == 1 and "aggregate snapshot 1 is missing" in v.stdout + v.stderr, v.stdout + v.stderr


def test_bench_fig6a_matrix_cells_hold_about_twice_what_biclique_units_hold(tmp_path, capsys):
    """4 join units: a 2 x 2 matrix cell holds half the volume, a biclique unit a quarter."""
    from mpi_join.biclique.bench_memory import run
    rows = run(units=4, volumes=(3000,), workdir=str(tmp_path))
    assert "results equal the oracle in every run" in capsys.readouterr().out
    ratio = float(rows[0][3])
    assert 1.6 < ratio < 2.4, rows


@pytest.mark.parametrize("strategy,ranks", [("biclique", 5), ("matrix", 4)])
@pytest.mark.parametrize("window", ["full", "time"])
def test_windows_past_the_state_limit_stop_with_one_line(tmp_path, strategy, ranks, window):
    """Issue: past max_state_mb every rank printed a traceback, and a 2 s window was told that
    "full-history windows keep every tuple" about "0.0 MB". Checks: exit 2, no traceback, each
    line the documented one, with the size held and what bounds the windows."""
    windows = WINDOWS["full"] if window == "full" else ('"2s"', '"2s"')
    text = equi_job_text(windows, strategy=strategy, predicate=PRED["equi"],
                         extra_strategy="max_state_mb = 0.02", run="batch_size = 50")
    arrays = random_streams(np.random.default_rng(3), 4000, key_range=8, ts_step=1)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_mpi(ranks, "run", path, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "failed:" not in p.stderr, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert lines and all("strategy.max_state_mb:" in ln and "of window state, over the limit of 20.0 kB" in ln
                         for ln in lines), lines
    assert ("unbounded window of R, S keeps every tuple" in lines[0]) == (window == "full"), lines[0]
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))


def _phased_streams(rng, n, steps):
    """random_streams whose ts advance by a step drawn from 0..steps[p] in phase p (equal thirds
    of the input): dense phases fill the windows, sparse ones empty them."""
    arrays = random_streams(rng, n, key_range=8, ts_step=1)
    phase = np.minimum(np.arange(n) * len(steps) // n, len(steps) - 1)
    ts = np.cumsum(rng.integers(0, np.array(steps)[phase] + 1)).astype(np.int64)
    for a in arrays:
        a["ts"] = ts[a["seq"]]
    return arrays


@pytest.mark.alone      # its decisions follow the measured window load over wall time
@pytest.mark.parametrize("sources", [1, 2])
def test_2ps_scales_out_and_down_with_the_window_load_without_losing_a_result(tmp_path, sources):
    """Dense, sparse, dense input: a subgroup's windows fill past T_h, spare units join; they
    empty below T_l, units drain and leave; they fill again. Results equal the oracle. With
    run.sources = 2 each decision (a spare unit joins, a unit drains, a drained unit is released)
    is a change of the Members table placed in the input, which both sources apply at the same
    part: the table every batch carries is the same as from one source there."""
    text = equi_job_text(('"200ms"', '"200ms"'), strategy="biclique", predicate=PRED["equi"],
                         extra_strategy="scaling = true\nspare_units = 1\nunit_capacity_mb = 0.006\n"
                                        "scale_every_ms = 15\nconfirmations = 2",
                         run=f'batch_size = 25\nrate = 4000\nflush_interval = "5ms"\nsources = {sources}\npart = 500')
    arrays = _phased_streams(np.random.default_rng(11), 15000, (1, 60, 1))
    _, _, ranks = _run_checked(tmp_path, 6 + sources, text, arrays)
    events = next(r for r in ranks if r["role"] == "driver")["scaling_events"]
    assert {e["decision"] for e in events} == {"out", "down"}, events
    assert all(r["released_own"] > 5000 for r in ranks if r["role"] == "source")


@pytest.mark.alone      # its decisions follow the measured window load over wall time
@pytest.mark.parametrize("sources", [1, 2])
def test_2ps_full_history_moves_a_leaving_units_state_with_the_runtime(tmp_path, sources):
    """Full history: a unit leaving its subgroup hands its state to one that stays (the
    runtime's move, after both have processed every batch before the decision's place in the
    input); later the growing state brings units back. With run.sources = 2 the scale-down is
    a barrier change: no source routes past its part until rank 0 has moved the state there.
    Results equal the oracle."""
    text = equi_job_text(WINDOWS["full"], strategy="biclique", predicate=PRED["equi"],
                         extra_strategy="scaling = true\nunit_capacity_mb = 0.06\nscale_every_ms = 15\n"
                                        "confirmations = 2",
                         run=f'batch_size = 20\nrate = 2500\nflush_interval = "5ms"\nsources = {sources}\npart = 500')
    arrays = random_streams(np.random.default_rng(12), 5000, key_range=40, ts_step=1)
    _, _, ranks = _run_checked(tmp_path, 6 + sources, text, arrays)
    events = next(r for r in ranks if r["role"] == "driver")["scaling_events"]
    assert {e["decision"] for e in events} == {"out", "down"}, events
    units = [r for r in ranks if r["role"] == "unit"]
    moved = sum(r["tuples_moved_out"] for r in units)
    assert moved > 100 and sum(r["tuples_moved_in"] for r in units) == moved


def test_bench_fig8_and_fig12_run_and_show_their_figures(tmp_path, capsys):
    """Small sizes: fig8's table has random, ContRand and matrix for q5, every run checked against
    the oracle; fig12's trace scales out and back down and writes its plot."""
    from mpi_join.tools import tpch
    from mpi_join.biclique.bench_figures import fig8, fig12
    tables = tpch.generate_tables(0.01, str(tmp_path / "tpch"))
    rows = fig8(units=4, workdir=str(tmp_path / "f8"), queries=("q5",), tables=tables, limit=4000)
    assert [r[1] for r in rows] == ["biclique random", "biclique ContRand 2", "matrix"] and rows[0][3] == "1.00"
    rows, events = fig12(workdir=str(tmp_path / "f12"), tuples=14000, replay=2800.0, capacity_mb=0.1)
    assert {e["decision"] for e in events} == {"out", "down"}, events
    assert os.path.getsize(tmp_path / "f12" / "fig12.png") > 10000
    out = capsys.readouterr().out
    assert "throughput by routing" in out and "the 2PS trace" in out


def test_sigkill_while_scaling_then_resume_is_exactly_once(tmp_path):
    """2PS on, with spare units: the shuffler's Members table and drains are in its checkpoint;
    a unit killed mid-run, then --resume from the last checkpoint: every result once."""
    path, job, arrays = paced_checkpointed_job(
        tmp_path, "biclique", PRED["equi"],
        extra_strategy="scaling = true\nspare_units = 1\nunit_capacity_mb = 0.001\nscale_every_ms = 20\n"
                       "confirmations = 2")
    kill_then_resume(path, job, ranks=7, victim=4, total=16000, paced_resume=True)
    _check(job, arrays)
    ranks = json.load(open(os.path.join(job.output, "metrics", "summary.json")))["ranks"]
    assert next(r for r in ranks if r["role"] == "driver")["active_units"] == [2, 3]   # the spares joined


def test_sigkill_while_scaling_with_two_sources_then_resume_is_exactly_once(tmp_path):
    """As above with run.sources = 2: the Members table is in rank 0's checkpoint as it was when its
    marker went out, and both sources start from it."""
    path, job, arrays = paced_checkpointed_job(
        tmp_path, "biclique", PRED["equi"],
        extra_strategy="scaling = true\nspare_units = 1\nunit_capacity_mb = 0.001\nscale_every_ms = 20\n"
                       "confirmations = 2", run="sources = 2\npart = 400")
    kill_then_resume(path, job, ranks=8, victim=7, total=16000, paced_resume=True)
    _check(job, arrays)
    ranks = json.load(open(os.path.join(job.output, "metrics", "summary.json")))["ranks"]
    assert next(r for r in ranks if r["role"] == "driver")["active_units"] == [2, 3]


@pytest.mark.parametrize("sources,victim", [(1, 4), (2, 7)])
def test_sigkill_while_full_history_scales_then_resume_is_exactly_once(tmp_path, sources, victim):
    """Full history, no spare units: units leave their subgroups (their state moves: with two
    sources at a barrier change, and no checkpoint is cut until it has; a move waits for a cut
    in progress, whose marker reaches a unit from the dispatchers), then the growing state
    brings them back. A unit (one source) or the second source is killed after two
    checkpoints, and --resume from the newest completes the run with every result once."""
    path, job, arrays = paced_checkpointed_job(
        tmp_path, "biclique", PRED["equi"], windows=WINDOWS["full"],
        extra_strategy="scaling = true\nunit_capacity_mb = 0.2\nscale_every_ms = 20\nconfirmations = 2",
        run=f"sources = {sources}\npart = 400")
    kill_then_resume(path, job, ranks=6 + sources, victim=victim, total=16000)
    _check(job, arrays)
    ranks = json.load(open(os.path.join(job.output, "metrics", "summary.json")))["ranks"]
    units = [r for r in ranks if r["role"] == "unit"]
    assert sum(r["tuples_moved_in"] for r in units) == sum(r["tuples_moved_out"] for r in units)
