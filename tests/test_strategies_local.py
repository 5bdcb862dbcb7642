"""Every registered strategy equals the oracle: strategy x window kind x rank count (2 to 6) x
predicate kind it supports, on random inputs, on the in-process runtime (`run --local`: the
same driver, workers and routing as under mpiexec, every rank a thread). A strategy is checked
here the moment it is registered (the test-only strategies of relay_strategy.py and the others
conftest registers included). What only processes show (mpiexec, a rank killed, hosts) has its
smaller matrix in test_strategies_mpi.py."""
import os
import zlib

import numpy as np
import pytest

from mpi_join import strategies
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from conftest import equi_job_text, random_streams, run_local, write_job
from reference import assert_equals_oracle, assert_same_rows

WINDOWS = {"time": ('"6ms"', '"2ms"'), "count": ("5", "17")}
PREDICATES = {
    "equi": 'equi = [["R.k", "S.k"]]',
    "equi+band": 'equi = [["R.k", "S.k"]]\nband = [{left = "R.v", right = "S.w", eps = 5}]',
    "equi+theta": 'equi = [["R.k", "S.k"]]\ntheta = [{udf = "udf_fixtures:sum_small", streams = ["R", "S"]}]',
    "band": 'band = [{left = "R.v", right = "S.w", eps = 0.5}]',
    "theta": 'theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]',
}
# Each strategy runs every predicate kind it supports on both window kinds, and its rank counts
# from its fewest to 6 (two more at least) in turn. Not the whole cross product: the window kinds
# are one implementation (join/window.py) and the rank count changes the routing, so the runs
# take the (window kind, rank count) pairs in turn, and a strategy of every predicate kind (10
# runs) meets every pair. About 0.3 s a run in process.
# The strategies the tests register check the runtime's links and graph, not a join (theirs is
# hash's core, which hash's rows cover): they run equi only and skip the per-join tests, 2 runs.
def _runtime_only(name):
    return strategies.get(name).testing


def _kinds(pred):
    return {"equi", "band", "theta"} & set(pred.split("+"))


def rank_counts(info):
    """The rank counts a strategy's matrix takes in turn: its fewest to 6, two more at least."""
    return list(range(info.min_ranks, max(info.min_ranks + 2, 6) + 1))


def two_stream_strategies():
    """(name, info) of every registered strategy that joins two streams (the matrices' rows)."""
    return [(n, strategies.get(n)) for n in strategies.names() if strategies.get(n).streams[0] <= 2]


def _cases():
    out = []
    for name, info in two_stream_strategies():
        counts, i = rank_counts(info), 0
        for pred, text in PREDICATES.items():
            if _runtime_only(name) and pred != "equi" and not info.requires:    # a test strategy: its own kinds
                continue
            kinds = _kinds(pred)
            if kinds <= info.predicates and info.requires <= kinds:
                for kind in ("count", "time"):
                    n = counts[i % len(counts)]
                    out.append(pytest.param(name, kind, n, pred, id=f"{name}-{kind}-{n}-{pred}"))
                    i += 1
    return out


def _equals_oracle(tmp_path, ranks, text, arrays):
    """Run `text` on `arrays` on `ranks` ranks: the oracle's pairs, each once, and _SUCCESS.
    Returns (the process, the job)."""
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_local(ranks, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    assert_equals_oracle(job, arrays)
    assert os.path.exists(os.path.join(job.output, "_SUCCESS"))
    return p, job


@pytest.mark.parametrize("strategy,kind,ranks,pred", _cases())
def test_strategy_equals_oracle(tmp_path, strategy, kind, ranks, pred):
    seed = zlib.crc32(f"{strategy}{kind}{ranks}{pred}".encode())
    text = equi_job_text(WINDOWS[kind], strategy=strategy, predicate=PREDICATES[pred],
                         run="batch_size = 97\nmax_inflight = 2")
    _equals_oracle(tmp_path, ranks, text, random_streams(np.random.default_rng(seed), 1500, key_range=8))


@pytest.mark.parametrize("strategy", [n for n in strategies.names() if "equi" in strategies.get(n).predicates
                                      and strategies.get(n).streams[0] <= 2 and not _runtime_only(n)])
def test_text_keys_equal_oracle(tmp_path, strategy):
    """Text (charN) equi keys of different widths, compared by value on every strategy."""
    from mpi_join.storage.staged import write_staged
    from test_local_join import _text_streams
    from test_local_join import text_job_text
    _, arrays = _text_streams(np.random.default_rng(11), 1200)
    path, job = write_job(str(tmp_path), text_job_text(strategy, run="batch_size = 97\nmax_inflight = 2"))
    write_staged(job.staged, job.streams, arrays, job.ts_unit)
    info = strategies.get(strategy)
    p = run_local(info.min_ranks + 1, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    assert len(expect) > 0
    assert_same_rows(got, expect)


@pytest.mark.parametrize("strategy", [n for n in strategies.names() if "band" in strategies.get(n).predicates
                                      and strategies.get(n).streams[0] <= 2 and not _runtime_only(n)])
def test_nan_infinities_and_decimal_grid_bands_equal_oracle(tmp_path, strategy):
    """README "Exact semantics": NaN and infinities are within no band, and a closed band on values
    of a decimal grid is never narrowed by rounding, on every strategy (with its index join where
    it has one)."""
    info = strategies.get(strategy)
    pred = ('equi = [["R.k", "S.k"]]\n' if "equi" in info.requires else "") + \
        'band = [{left = "R.v", right = "S.w", eps = 0.7, closed = true}]'
    extra = 'local_join = "index"' if "local_join" in info.params and info.params["local_join"].check("index") is None else ""
    text = equi_job_text(('"6ms"', '"4ms"'), strategy=strategy, predicate=pred, extra_strategy=extra,
                         run="batch_size = 97\nmax_inflight = 2")
    rng = np.random.default_rng(5)
    arrays = random_streams(rng, 1500, key_range=3)
    arrays[0]["v"] = rng.integers(0, 40, len(arrays[0])) * 0.1
    arrays[1]["w"] = rng.integers(0, 40, len(arrays[1])) * 0.1
    arrays[0]["v"][rng.random(len(arrays[0])) < 0.03] = np.nan
    arrays[1]["w"][rng.random(len(arrays[1])) < 0.03] = np.nan
    arrays[0]["v"][::50] = np.inf
    arrays[1]["w"][::70] = np.inf
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_local(info.min_ranks + 1, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    R = dict(zip(arrays[0]["seq"].tolist(), arrays[0]["v"].tolist()))
    assert len(expect) > 0 and not any(np.isnan(R[int(a)]) or np.isinf(R[int(a)]) for a, _ in expect)
    assert_same_rows(got, expect)


SHIFTED = [("both", "2ms", "9ms"), ("neither", "-8ms", "-1ms")]


@pytest.mark.parametrize("strategy,turn", [(n, t) for n in strategies.names() if strategies.get(n).streams[0] <= 2
                                           and not _runtime_only(n) for t in (0, 1)])
def test_shifted_intervals_equal_oracle(tmp_path, strategy, turn):
    """A shifted interval (0 outside it: S 2 to 9 ms after R, or 1 to 8 ms before it, open) on
    every two-stream strategy, on two rank counts: its windows are the interval's hull and the
    pairs inside the hull but outside the interval are left out by the shared join modules."""
    info = strategies.get(strategy)
    closed, lower, upper = SHIFTED[turn]
    on = 'equi = [["R.k", "S.k"]]' if "equi" in info.predicates else 'band = [{left = "R.v", right = "S.w", eps = 2}]'
    pred = f'{on}\ninterval = {{ left = "R", right = "S", lower = "{lower}", upper = "{upper}", closed = "{closed}" }}'
    text = equi_job_text(None, strategy=strategy, predicate=pred, run="batch_size = 97\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(40 + turn), 1500, key_range=5)
    path, job = write_job(str(tmp_path), text, arrays)
    assert job.predicate.interval and [s.window.size for s in job.streams] == ([10, 1] if turn == 0 else [1, 8])
    p = run_local(sorted({info.min_ranks, info.min_ranks + 2})[turn], "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    R, S = (dict(zip(a["seq"].tolist(), a["ts"].tolist())) for a in arrays)
    lo, up = (2, 9) if turn == 0 else (-7, -2)
    assert len(expect) > 0 and all(lo <= S[int(b)] - R[int(a)] <= up for a, b in expect)
    assert_same_rows(got, expect)


@pytest.mark.parametrize("outer,interval,ranks", [
    ('["R"]', ("both", "-5ms", "0ms"), 3), ('["R", "S"]', ("neither", "2ms", "9ms"), 4), ('["S"]', ("left", "-3ms", "3ms"), 3)])
def test_outer_interval_joins_equal_oracle(tmp_path, outer, interval, ranks):
    """LEFT, FULL and RIGHT outer interval joins on hash (the strategy that runs them): every
    tuple of an outer stream without a partner is one row with null (-1) for the other side,
    written as null in the part files; with migrations at every reorganisation, so rows move
    with whether they have met a partner."""
    closed, lower, upper = interval
    pred = (f'equi = [["R.k", "S.k"]]\nouter = {outer}\n'
            f'interval = {{ left = "R", right = "S", lower = "{lower}", upper = "{upper}", closed = "{closed}" }}')
    text = equi_job_text(None, strategy="hash", predicate=pred, extra_strategy='reorganize_every = 1\nforce = "migrate"',
                         run="batch_size = 97\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(len(outer) + ranks), 1500, key_range=12)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_local(ranks, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    kept = [0, 1] if outer == '["R", "S"]' else [0] if outer == '["R"]' else [1]
    for k in (0, 1):
        lone = expect[expect[:, 1 - k] < 0][:, k]
        assert (len(lone) > 0) == (k in kept)
        paired = set(expect[(expect >= 0).all(axis=1)][:, k].tolist())
        assert not paired & set(lone.tolist()) and paired | set(lone.tolist()) <= set(arrays[k]["seq"].tolist())
        if k in kept:
            assert paired | set(lone.tolist()) == set(arrays[k]["seq"].tolist())
    assert_same_rows(got, expect)
    import pyarrow.parquet as pq
    from mpi_join.storage.results import result_files
    t = pq.read_table(result_files(job.output)[0])
    assert sum(t.column(f"{n}_seq").null_count for n in job.stream_names) > 0 or len(t) == 0


@pytest.mark.parametrize("strategy", [n for n in strategies.names() if not strategies.get(n).outer
                                      and strategies.get(n).streams[0] <= 2 and not _runtime_only(n)])
def test_strategies_whose_places_cannot_tell_a_lone_tuple_take_outer_joins_from_rank_0(tmp_path, strategy):
    """They run outer joins too (tests/test_outer_everywhere.py); `explain` says when their lone
    rows come: at each checkpoint where a cut holds every pair before it, else at the end."""
    from conftest import cli
    pred = ('equi = [["R.k", "S.k"]]\nouter = ["R"]\n'
            'interval = { left = "R", right = "S", lower = "-5ms", upper = "0ms" }')
    path, _ = write_job(str(tmp_path), equi_job_text(None, strategy=strategy, predicate=pred),
                        random_streams(np.random.default_rng(1), 50))
    n = str(max(5, strategies.get(strategy).min_ranks))
    assert cli("check", path, "-n", n).returncode == 0
    e = cli("explain", path, "-n", n)
    assert e.returncode == 0 and "outer: each R tuple without a partner is a result" in e.stdout, e.stdout + e.stderr
    assert ("at each checkpoint" if strategies.get(strategy).cut_complete else "when the input has ended") in e.stdout


def _source_cases():
    out = []
    for name in strategies.names():
        info = strategies.get(name)
        if info.streams[0] > 2 or _runtime_only(name):
            continue
        second = "band" if "band" in info.predicates and not info.requires - {"band"} else "equi"
        out += [pytest.param(name, "time", 2, info.min_ranks, "equi", id=f"{name}-time-k2-equi"),
                pytest.param(name, "count", 3, info.min_ranks + 1, second, id=f"{name}-count-k3-{second}")]
    return out


@pytest.mark.parametrize("strategy,kind,k,workers,pred", _source_cases())
def test_parallel_sources_equal_oracle(tmp_path, strategy, kind, k, workers, pred):
    """run.sources = k: k - 1 more ranks read and route their parts of the input (small parts, so
    every source deals many), and every strategy's result still equals the oracle's."""
    seed = zlib.crc32(f"sources{strategy}{kind}{k}".encode())
    text = equi_job_text(WINDOWS[kind], strategy=strategy, predicate=PREDICATES[pred],
                         run=f"batch_size = 97\nmax_inflight = 2\nsources = {k}\npart = 250")
    p, job = _equals_oracle(tmp_path, workers + k - 1, text,
                            random_streams(np.random.default_rng(seed), 2000, key_range=8))
    import json
    ranks = [json.load(open(os.path.join(job.output, "metrics", f"rank-{r:04d}.json"))) for r in range(workers + k - 1)]
    assert "routing stays as it starts" not in p.stderr, "hash's default reorganisation runs with several sources"
    own = [r.get("released_own") for r in [ranks[0]] + ranks[workers:]]
    assert all(n and n > 0 for n in own) and sum(own) == 2000, f"every source routed its share: {own}"


@pytest.mark.parametrize("k,kind,workers", [(2, "time", 3), (3, "count", 2)])
def test_parallel_sources_with_migrations_equal_oracle(tmp_path, k, kind, workers):
    """hash moves a partition group at every reorganisation: with several sources rank 0 places
    each move at a part none of them has started, every source routes the group to its new
    holder from there on, and both holders take it out and put it in where their input reaches
    that part."""
    import json
    text = equi_job_text(WINDOWS[kind], strategy="hash", extra_strategy='reorganize_every = 1\nforce = "migrate"',
                         run=f"batch_size = 97\nmax_inflight = 2\nsources = {k}\npart = 250")
    _, job = _equals_oracle(tmp_path, workers + k, text, random_streams(np.random.default_rng(k), 8000, key_range=8))
    moved = json.load(open(os.path.join(job.output, "metrics", "rank-0000.json")))["migrations"]
    assert len(moved) >= 2, moved


@pytest.mark.parametrize("k,mode", [(2, "passive"), (3, "aggressive")])
def test_psp_relocates_with_several_sources(tmp_path, k, mode):
    """A relocation is a change placed in the input: every source's slicer takes the new shares
    at the same part, and the head keeps the cuts from going back (each slicer sees only its own
    parts). The head's slice goes to 0 mid-run; results equal the oracle."""
    import json
    text = equi_job_text(('"300ms"', '"200ms"'), strategy="psp", extra_strategy=f'force_relocate = "6:0,1,3:{mode}"',
                         run=f"batch_size = 97\nmax_inflight = 2\nsources = {k}\npart = 250")
    p, job = _equals_oracle(tmp_path, 3 + k, text, random_streams(np.random.default_rng(k), 3000, key_range=8))
    assert "warning: run.sources" not in p.stderr, p.stderr
    ranks = json.load(open(os.path.join(job.output, "metrics", "summary.json")))["ranks"]
    assert ranks[0]["relocations"] == [[6, [0.0, 1.0, 3.0], mode]]
    held = {r["rank"]: r["window_tuples"] for r in ranks if r["role"] in ("head", "ring", "tail")}
    assert held[1] < held[3], f"the head's slice went to 0 and the tail's grew threefold (without it the head holds more): {held}"


@pytest.mark.parametrize("k,counts", [(2, "60"), (3, "balanced")])
def test_psp_count_bounded_slices_with_several_sources(tmp_path, k, counts):
    """Count-bounded slices follow every tuple, and each source sees only its parts: the head,
    where all input enters in seq order, sets the cuts. Results equal the oracle's, and each
    operator holds what its count says (time slices, the default, would give the head a third)."""
    import json
    text = equi_job_text(('"3s"', '"3s"'), strategy="psp", extra_strategy=f'slice_counts = "{counts}"',
                         run=f"batch_size = 37\nmax_inflight = 2\nsources = {k}\npart = 111")
    _, job = _equals_oracle(tmp_path, 3 + k, text, random_streams(np.random.default_rng(k), 3000, key_range=8))
    ranks = json.load(open(os.path.join(job.output, "metrics", "summary.json")))["ranks"]
    held = [r["window_tuples"] for r in sorted(ranks, key=lambda r: r["rank"]) if r["role"] in ("head", "ring", "tail")]
    if counts == "balanced":
        assert max(held) - min(held) <= sum(held) // 6, f"each operator holds about a third: {held}"
    else:       # both streams: 60 each, plus a batch the head inserts before it purges, and ties of ts
        assert held[0] <= 2 * (60 + 37 + 4) and held[1] <= 2 * (60 + 37 + 4), held
        assert held[2] > 2 * (held[0] + held[1]), f"the tail holds the rest of the windows: {held}"
