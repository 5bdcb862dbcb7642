"""The PSP ring's operators and router, driven without MPI (sim.py: the real runtime in one process): equal to the oracle
for M = 2, 3, 4, ring lengths 1 to 4, basic PSP and PSP-I, time and count windows, equi, band
and UDF predicates, count-bounded slices and relocations forced mid-run; state never stored twice.
The ring matrices take all pairs of their factors' values (pairwise.py), not every combination."""
import tomllib

import numpy as np
import pytest

from mpi_join.config import parse_job
from mpi_join.join.oracle import run_oracle
from mpi_join.ring.psp_router import auto_orderings, parse_ordering
from mpi_join.ring.slicing import Slicer
from conftest import equi_job_text, random_streams
from reference import assert_same_rows
from pairwise import all_pairs
from sim import simulate_psp as simulate

STRATEGY = "psp"   # whose time budget this file's tests count against (conftest.py)

BINARY = {
    "equi": 'equi = [["R.k", "S.k"]]',
    "band": 'band = [{left = "R.v", right = "S.w", eps = 0.5}]',
    "theta": 'theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]',
}
WINDOWS = {"time": ('"9ms"', '"4ms"'), "count": ("11", "23")}
MULTI = {
    # equi A~B, band B~C, UDF C~D (the 4-way adds D); 3-way is A, B, C
    3: 'equi = [["A.k", "B.k"]]\nband = [{ left = "B.v", right = "C.v", eps = 3 }]',
    4: ('equi = [["A.k", "B.k"]]\nband = [{ left = "B.v", right = "C.v", eps = 4 }, { left = "D.w", right = "A.w", eps = 6 }]\n'
        'theta = [{ udf = "udf_fixtures:close_values", streams = ["C", "D"] }]'),
}


def _binary(pred, kind):
    return parse_job(tomllib.loads(equi_job_text(WINDOWS[kind], strategy="psp", predicate=BINARY[pred])), "t.toml")


def multiway_job(m, windows):
    streams = "".join(f'[streams.{s}]\nschema = {{ k = "int32", v = "float32", w = "float32" }}\nwindow = {x}\n'
                      for s, x in zip("ABCD", windows))
    text = f'[input]\nstaged = "s"\n[output]\ndir = "o"\n{streams}[predicate]\n{MULTI[m]}\n[strategy]\nname = "psp"\n'
    return parse_job(tomllib.loads(text), "m.toml")


def multiway_streams(rng, m, n, key_range=3):
    sid = rng.integers(0, m, n)
    ts = np.cumsum(rng.integers(0, 3, n))
    out = []
    for s in range(m):
        a = np.zeros(int((sid == s).sum()), [("seq", "i8"), ("ts", "i8"), ("k", "i4"), ("v", "f4"), ("w", "f4")])
        a["seq"], a["ts"] = np.nonzero(sid == s)[0], ts[sid == s]
        a["k"] = rng.integers(0, key_range, len(a))
        a["v"], a["w"] = rng.uniform(0, 20, len(a)), rng.uniform(0, 20, len(a))
        out.append(a)
    return out


def _check(got, expect):
    assert len(expect) > 0
    assert_same_rows(got, expect)


@pytest.mark.parametrize("pred,kind,n,interleave", all_pairs(BINARY, WINDOWS, [1, 2, 3, 4], [1, 3]))
def test_binary_ring_equals_oracle(pred, kind, n, interleave):
    job = _binary(pred, kind)
    arrays = random_streams(np.random.default_rng(n * 10 + interleave), 300, key_range=8)
    got, _, _ = simulate(job, arrays, n, seed=n + interleave, batch_size=5, interleave=interleave)
    _check(got, run_oracle(job, arrays))


@pytest.mark.parametrize("m,n,interleave,kind", all_pairs([3, 4], [1, 2, 3, 4], [1, 4], ["time", "count"]))
def test_multiway_ring_equals_oracle(m, n, interleave, kind):
    windows = ['"12ms"', '"7ms"', '"20ms"', '"9ms"'] if kind == "time" else ["9", "14", "6", "11"]
    job = multiway_job(m, windows[:m])
    arrays = multiway_streams(np.random.default_rng(m * 100 + n), m, 250)
    got, ops, _ = simulate(job, arrays, n, seed=n, batch_size=6, interleave=interleave)
    _check(got, run_oracle(job, arrays))


@pytest.mark.parametrize("ordering", ["A>C>B,B>C>A,C>A>B", "A>B>C,B>A>C,C>B>A"])
def test_given_orderings_give_the_same_results(ordering):
    job = multiway_job(3, ['"10ms"', '"10ms"', '"10ms"'])
    job = parse_job(tomllib.loads(open(job.path).read()) if False else _with_c_a(), "m.toml")
    arrays = multiway_streams(np.random.default_rng(5), 3, 500)
    got, _, router = simulate(job, arrays, 3, batch_size=4, ordering=ordering)
    assert router.orderings == parse_ordering(ordering, ["A", "B", "C"])
    _check(got, run_oracle(job, arrays))


def _with_c_a():
    """A 3-way job where every pair of streams has a condition (any ordering is valid)."""
    streams = "".join(f'[streams.{s}]\nschema = {{ k = "int32", v = "float32", w = "float32" }}\nwindow = "10ms"\n'
                      for s in "ABC")
    return tomllib.loads(f'[input]\nstaged = "s"\n[output]\ndir = "o"\n{streams}[predicate]\n'
                         'equi = [["A.k", "B.k"]]\nband = [{ left = "B.v", right = "C.v", eps = 3 }, '
                         '{ left = "C.w", right = "A.w", eps = 8 }]\n[strategy]\nname = "psp"\n')


def test_auto_ordering_probes_the_most_selective_stream_first():
    job = parse_job(_with_c_a(), "m.toml")
    sel = [[1, 0.5, 0.01], [0.5, 1, 0.2], [0.01, 0.2, 1]]
    assert auto_orderings(job.predicate, 3, sel) == {0: [2, 1], 1: [2, 0], 2: [0, 1]}


@pytest.mark.parametrize("mode,weights,interleave", all_pairs(["passive", "aggressive"], ["0,0,1", "1,0,3", "3,1,0"],
                                                             [1, 3]))
def test_relocation_mid_run_equals_oracle_and_never_duplicates_state(mode, weights, interleave):
    """Slices change at batch 40 (an operator leaves or joins the ring's state); at every batch,
    each stored tuple is held by exactly one operator and, once the ring is quiet, nothing else
    is kept anywhere."""
    job = multiway_job(3, ['"90ms"', '"80ms"', '"100ms"'])
    arrays = multiway_streams(np.random.default_rng(7), 3, 700, key_range=6)

    def check_state(epoch, ops, router):
        held = [np.concatenate([op.slice.held(j)["seq"] for op in ops.values()]) for j in range(3)]
        assert all(len(h) == len(np.unique(h)) for h in held), f"a tuple held twice at batch {epoch}"

    got, ops, router = simulate(job, arrays, 3, seed=3, batch_size=5, interleave=interleave,
                                force_relocate=f"40:{weights}:{mode}", on_epoch=check_state)
    _check(got, run_oracle(job, arrays))
    assert router.relocations
    held = [sum(len(op.slice.held(j)) for j in range(3)) for op in ops.values()]
    w = [float(x) for x in weights.split(",")]
    for k in range(3):
        if w[k] == 0:       # what is left: at most the tuples of the newest ts (the head's last batch)
            assert held[k] <= 5, (held, weights)
        else:
            assert held[k] > 5, (held, weights)
    check_state("the end", ops, router)


@pytest.mark.parametrize("counts", ["20", "5,40", "balanced"])
def test_count_bounded_slices_hold_their_bound_and_equal_oracle(counts):
    job = multiway_job(3, ['"60ms"', '"60ms"', '"60ms"'])
    arrays = multiway_streams(np.random.default_rng(9), 3, 500, key_range=6)
    most = []

    def check(epoch, ops, router):
        most.append([len(ops[k].slice.held(0)) for k in (1, 2)])

    got, ops, _ = simulate(job, arrays, 3, batch_size=4, slice_counts=counts, on_epoch=check)
    _check(got, run_oracle(job, arrays))
    if counts == "balanced":       # at the end each operator holds about a third of each window
        held = [len(ops[k].slice.held(0)) for k in (1, 2, 3)]
        assert max(held) - min(held) <= max(8, sum(held) // 4), held
        return
    bound = [int(c) for c in counts.split(",")]
    limit = [bound[0], bound[-1]]
    # a slice may exceed its count by one batch (the head inserts before it purges) and ties of ts
    assert all(m[k] <= limit[k] + 12 for m in most for k in (0, 1)), max(map(tuple, most))
    assert max(m[1] for m in most) > 0


def test_slicer_cuts_abut_and_never_move_back():
    job = multiway_job(3, ['"50ms"', '"20ms"', '"35ms"'])
    arrays = multiway_streams(np.random.default_rng(1), 3, 400)
    from mpi_join.master.source import Source
    from dataclasses import replace
    src = Source(replace(job, run=replace(job.run, batch_size=9, rate=None)), arrays=arrays)
    sl = Slicer([s.window for s in job.streams], 4, weights=[1, 2, 0, 1])
    prev = None
    for _ in range(30):
        cuts = sl.next(src.next_epoch())
        assert (np.diff(cuts, axis=1) <= 0).all(), "slices must abut, newest first"
        assert (cuts[:, 1] == cuts[:, 2]).all(), "an operator of weight 0 holds nothing"
        if prev is not None:
            assert (cuts >= prev).all()
        prev = cuts


def test_rebalance_adds_removes_and_smooths_by_measured_load():
    from mpi_join.ring.adapt import rebalance
    assert rebalance([1, 1, 0], [0.9, 0.95, 0.0]) == [1, 1, 1.0]                # all busy: a node joins
    assert rebalance([1, 1, 1], [0.05, 0.1, 0.02]) == [1, 1, 0.0]               # all idle: the last leaves
    assert rebalance([1, 1, 1], [0.05, 0.1, 0.02], windows_full=False) is None  # not before windows fill
    w = rebalance([1, 1, 1], [0.9, 0.3, 0.3])                                   # smoothing
    assert w[0] < 1 < w[1] and abs(sum(w) - 3) < 1e-9
    assert rebalance([1, 1], [0.5, 0.55]) is None                               # balanced: keep
    assert rebalance([2, 0, 1], [0.9, 0.0, 0.1])[1] == 0                        # an idle slot stays out


@pytest.mark.parametrize("interleave", [1, 3])
def test_per_stream_ring_lengths_keep_each_stream_on_its_first_operators(interleave):
    job = multiway_job(3, ['"60ms"', '"40ms"', '"80ms"'])
    arrays = multiway_streams(np.random.default_rng(4), 3, 400, key_range=4)
    got, ops, _ = simulate(job, arrays, 4, batch_size=5, interleave=interleave, lengths="A=1,C=2")
    _check(got, run_oracle(job, arrays))
    held = {j: [len(ops[k].slice.held(j)) for k in (1, 2, 3, 4)] for j in range(3)}
    assert held[0][1:] == [0, 0, 0] and held[0][0] > 0
    assert held[2][2:] == [0, 0] and held[2][1] > 0
    assert held[1][3] > 0


def test_plan_prints_the_model_for_each_ring_length_and_the_scaling_model_for_others(tmp_path):
    from conftest import cli
    d = str(tmp_path / "img")
    p = cli("generate", "images", "--out", d, "--tuples", "600", "--rate", "50", "--window", "1s",
                "--predicate", "costly", "--selectivity", "0.1")
    assert p.returncode == 0, p.stderr
    p = cli("plan", f"{d}/job.toml", "-n", "5", "--tn", "100")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "A~B: selectivity" in out and "T_j" in out and "T_n 100 us" in out
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit() and len(line.split()) >= 5]
    assert [r[0] for r in rows] == ["1", "2", "3", "4"]
    lat = [float(r[3]) for r in rows]
    assert "recommended ring length: N = " in out and "bandwidth bound (6)" in out
    best = int(out.split("recommended ring length: N = ")[1].split()[0])
    assert lat[best - 1] == min(lat)
    assert "ring length per stream " in out and "A = " in out.split("ring length per stream ")[1]
    q = cli("plan", f"{d}/job.toml", "-n", "5")
    assert q.returncode == 0
    cli("generate", "equi", "--out", str(tmp_path / "eq"), "--tuples", "60")
    r = cli("plan", str(tmp_path / "eq" / "job.toml"))      # hash: the scaling model alone
    assert r.returncode == 0, r.stderr
    assert "recommended: " in r.stdout and "ring length" not in r.stdout


def test_psp_config_errors_name_the_parameter(tmp_path):
    from conftest import cli
    streams = "".join(f'[streams.{s}]\nschema = {{ k = "int32", v = "float32", w = "float32" }}\nwindow = "5ms"\n'
                      for s in "ABC")
    base = (f'[job]\nname = "m"\nts_unit = "ms"\n[input]\nstaged = "staged"\n[output]\ndir = "out"\n{streams}'
            f'[predicate]\n{MULTI[3]}\n[strategy]\nname = "psp"\n')
    cases = [('ordering = "A>C>B"', "strategy.ordering: in A's ordering, C has no condition with the streams before it"),
             ('ordering = "A>B"', "must name every stream once"),
             ('weights = "1,2"', "strategy.weights: expected 3 non-negative numbers"),
             ('lengths = "A=9"', "strategy.lengths: expected STREAM=N pairs with N in 1..3"),
             ('force_relocate = "x"', "strategy.force_relocate: expected EPOCH:W1,...,W3"),
             ("interleave = 0", "strategy.interleave: expected an integer in 1..1,024")]
    for k, (line, msg) in enumerate(cases):
        d = tmp_path / f"c{k}"
        d.mkdir()
        (d / "job.toml").write_text(base + line + "\n")
        p = cli("check", str(d / "job.toml"), "-n", "4")
        assert p.returncode != 0 and msg in p.stderr, (line, p.stderr)


def test_the_planners_selectivity_finds_the_matches_of_a_rare_band_join(tmp_path):
    """Issue: `plan` reported "selectivity 0" for a band join with 11,130 results: it tried 48 x 48
    random pairs. It now draws pairs until enough match (or says how many it tried): the
    estimate is within a few standard errors of the fraction over every pair of the sample."""
    from dataclasses import replace
    from mpi_join.config import load_job
    from mpi_join.join.range_join import pair_mask
    from mpi_join.master.source import Source
    from mpi_join.ring.planner import measure
    from mpi_join.ring.selectivity import estimate_selectivity, measure_selectivity
    from mpi_join.tools.workloads import make
    job = load_job(make("band", str(tmp_path / "b"), tuples=4000, strategy="psp"))
    batches = Source(replace(job, run=replace(job.run, batch_size=2000, rate=None))).next_epoch()
    A, B = batches
    ia, ib = np.repeat(np.arange(len(A)), len(B)), np.tile(np.arange(len(B)), len(A))
    truth = float(pair_mask(job.predicate, 0, 1, A, B, ia, ib).mean())
    assert 0 < truth < 1 / 48 ** 2                           # rarer than the old sample could see
    assert measure_selectivity(job.predicate, batches, sample=48)[0][1] == 0.0
    sel, tried = estimate_selectivity(job.predicate, batches, budget_s=30, enough=100)
    n = tried[0][1]
    print(f"truth {truth:.3g}, estimate {sel[0][1]:.3g} from {n:,} pairs")
    assert sel[0][1] > 0 and abs(sel[0][1] - truth) < 5 * (truth / n) ** 0.5, (sel[0][1], truth, n)
    meas = measure(job)                                      # what plan prints: how many pairs it tried
    assert meas["tried"][0][1] >= 1024 and meas["sel"][0][1] == pytest.approx(meas["sel"][1][0])


@pytest.mark.parametrize("pred,kind,held", [("equi", "time", (["seq", "ts", "k"], ["seq", "ts", "k"])),
                                            ("band", "count", (["seq", "ts", "v", "_coord"], ["seq", "ts", "w", "_coord"])),
                                            ("theta", "time", None)])
def test_slice_rows_hold_what_a_probe_reads_and_a_snapshot_holds_runtime_rows(pred, kind, held):
    """A slice row keeps seq, ts and its conditions' columns (`_coord` only when it is not ts);
    not `_lo`, `_tin`, `_h` or payload columns, which only probe copies are read for; a stream
    under a UDF keeps runtime rows. A snapshot holds runtime rows (coordinate filled in, unheld
    columns 0), and a restored slice holds what it held. The ring equals the oracle."""
    job = _binary(pred, kind)
    arrays = random_streams(np.random.default_rng(5), 450, key_range=8)
    seen = []

    def on_epoch(epoch, mods, router):
        for m in mods.values():
            if sum(len(m.slice.held(j)) for j in range(m.M)) and len(seen) < 40:
                seen.append((m, m.snapshot(), [m.slice.held(j).copy() for j in range(m.M)]))

    got, mods, _ = simulate(job, arrays, 3, seed=1, batch_size=6, on_epoch=on_epoch)
    _check(got, run_oracle(job, arrays))
    assert len(seen) > 5
    for m, (snap, attrs), rows in seen:
        for j in range(m.M):
            names = list(m.slice.windows[j].dtype.names)
            assert names == (list(m.dtypes[j].names) if held is None else held[j])
            state = snap[f"slice/{j}"]
            assert state.dtype == m.state_dtype(f"slice/{j}") == m.dtypes[j]
            assert np.array_equal(state["seq"], rows[j]["seq"]) and np.array_equal(state["_coord"], rows[j][m.slice.coords[j]])
            if held is not None:
                assert not state["_tin"].any() and not state["_h"].any()
        fresh = type(m)(m.job, m.rank, m.graph, m.dtypes)
        fresh.restore(snap, attrs)
        for j in range(m.M):
            assert fresh.slice.windows[j].dtype == m.slice.windows[j].dtype
            assert np.array_equal(fresh.slice.held(j), rows[j])
