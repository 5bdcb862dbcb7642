"""The scaling model without MPI: fitted on rank costs that a known machine would produce, it
finds that machine's costs again and predicts its rates; `plan` recommends only strategies that
can run the job and keep up with it, and refuses a calibration that holds no model."""
import json

import pytest

from mpi_join.tools import scaling_model as sm
from mpi_join.config import load_job
from mpi_join.errors import InputError
from mpi_join.tools.workloads import make
from conftest import cli


def _cases(name, shape, t, c, d, cores=2, workload="band", W=1.0, kappa=1.0):
    """The suite's cases as a machine with costs (t, c, d) and the given shape would measure them."""
    costs = {"shape": shape, "t_us": t * 1e6, "c_ns": c * 1e9, "d_us": d * 1e6, "window_s": W, "kappa": kappa}
    share, scope, hops = sm.SHAPES[shape]
    out = []
    for k in (1, 2, 3, 4):
        lam = sm.rate(costs, k, cores)
        n = int(2 * 0.8 * lam * 2)                                 # 2 s of input at 80%
        per = t + c * 0.8 * lam * W * scope(k)
        ranks = [{"role": "driver", "tuples_in": n, "cpu_s": n * d, "wall_s": 2.0}]
        ranks += [{"role": "worker", "tuples_in": int(n * share(k)), "cpu_s": n * share(k) * per, "wall_s": 2.0}
                  for _ in range(k)]
        out.append({"strategy": name, "workload": workload, "workers": k, "max_rate": round(lam),
                    "p50_ms": 5.0 + 2.0 * hops(k), "ranks_at80": ranks})
    return out


@pytest.mark.parametrize("name,shape", [("handshake", "chain"), ("hash", "partition"), ("biclique", "biclique")])
def test_the_fit_recovers_the_costs_and_predicts_the_rates(name, shape):
    cases = _cases(name, shape, t=4e-6, c=1.5e-9, d=0.5e-6)
    result = {"machine": {"cores": 2}, "cases": cases}
    [m] = sm.fit(result, lambda s: shape, {"band": 1.0, "equi": 1.0})
    assert m["t_us"] == pytest.approx(4.0, rel=0.02) and m["c_ns"] == pytest.approx(1.5, rel=0.02)
    assert m["d_us"] == pytest.approx(0.5, rel=0.02) and m["kappa"] == pytest.approx(1.0, rel=0.02)
    assert m["mean_error"] < 0.02 and len(m["check"]) == 4
    assert m["p50_per_hop_ms"] == pytest.approx(2.0, rel=0.02) or shape in ("partition", "biclique")
    assert [p["cores"] for p in m["predicted"]] == list(sm.EXTRAPOLATE)
    assert all(p["rate"] > 0 for p in m["predicted"])


def test_sources_lift_the_rank_0_ceiling():
    """With one source, a partitioned join stops growing where rank 0's d per tuple binds; with
    the cores split between workers and sources it grows about linearly to 256 cores."""
    costs = {"shape": "partition", "t_us": 2.0, "c_ns": 0.0, "d_us": 0.5, "window_s": 1.0, "kappa": 1.0}
    one = [sm.rate(costs, n - 1, n) for n in (16, 256)]
    assert one[1] == pytest.approx(one[0]) and one[0] == pytest.approx(1 / (2 * 0.5e-6)), "rank 0's ceiling"
    split = {n: sm.best_split(costs, n) for n in (4, 16, 256)}
    assert all(w + s == n and s >= 1 for n, (w, s) in split.items())
    rates = {n: sm.rate(costs, w, n, s) for n, (w, s) in split.items()}
    assert rates[256] / rates[4] == pytest.approx(256 / 4, rel=0.2), "within 20% of linear from 4 to 256 cores"
    assert sm.rate(costs, 200, 256, 4) == pytest.approx(4 * sm.rate(costs, 200, 256, 1)), "4 sources: 4x the bound"
    [p] = [x for x in sm.fit({"machine": {"cores": 2}, "cases": _cases("hash", "partition", 2e-6, 0.0, 0.5e-6)},
                             lambda s: "partition", {"band": 1.0, "equi": 1.0})[0]["predicted"] if x["cores"] == 256]
    assert p["sources"] > 1 and p["rate_sources"] > 5 * p["rate"]


def test_a_machine_that_misses_the_model_shows_as_error():
    cases = _cases("hash", "partition", t=4e-6, c=0.0, d=0.2e-6)
    for c in cases[1:]:
        c["max_rate"] = cases[0]["max_rate"]                       # flat: something the model does not have
    [m] = sm.fit({"machine": {"cores": 2}, "cases": cases}, lambda s: "partition", {"band": 1.0, "equi": 1.0})
    assert m["mean_error"] > 0.2


def test_plan_recommends_what_keeps_up_and_can_run_the_job(tmp_path):
    path = make("band", str(tmp_path / "w"), tuples=4000, rate=20000, window="1s", strategy="handshake")
    job = load_job(path)
    models = sm.fit({"machine": {"cores": 2}, "cases": _cases("handshake", "chain", 4e-6, 1.5e-9, 0.5e-6)
                     + _cases("psp", "chain", 40e-6, 15e-9, 5e-6) + _cases("hash", "partition", 4e-6, 0, 0.5e-6)},
                    lambda s: {"hash": "partition"}.get(s, "chain"), {"band": 1.0, "equi": 1.0})
    lines, best = sm.recommend(job, 8, models, 20000, 1.0)
    text = "\n".join(lines)
    assert "hash" not in text                                          # hash needs an equi condition
    assert best[0] == "handshake" and "recommended: handshake" in text
    lines, best = sm.recommend(job, 8, models, 10 ** 7, 1.0)           # nobody keeps up: the closest
    assert "no strategy keeps up" in lines[-1] and best[0] == "handshake"
    (tmp_path / "results.json").write_text(json.dumps({"machine": {"cores": 2}, "model": models}))
    p = cli("plan", path, "-n", "8", "--calibration", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "recommended: handshake" in p.stdout
    (tmp_path / "results.json").write_text(json.dumps({"cases": []}))
    p = cli("plan", path, "-n", "8", "--calibration", str(tmp_path / "results.json"))
    assert p.returncode == 2 and "no fitted scaling model" in p.stderr and p.stderr.count("\n") == 1
    with pytest.raises(InputError):
        sm.load_models(str(tmp_path / "results.json"))


def test_plan_ranks_by_the_goal_at_the_rate_it_says_it_plans_for(tmp_path):
    """Issue: plan modelled the event-time rate of an hour of data (56 tuples/s), so every
    strategy "kept up", and always ranked by delay. It now plans for --rate (default: the job's
    [run] rate, else as fast as the input replays) and says so, and ranks by --goal."""
    path = make("equi", str(tmp_path / "w"), tuples=4000, rate=50, window="1s")
    job = load_job(path)
    fast, slow = "matrix", "hash"          # matrix: lower delay, but sqrt(k) copies of each window tuple
    models = sm.fit({"machine": {"cores": 2}, "cases": _cases(slow, "partition", 8e-6, 0, 0.5e-6, workload="equi")
                     + _cases(fast, "matrix", 2e-6, 0, 0.2e-6, workload="equi")},
                    lambda s: {"hash": "partition"}.get(s, "matrix"), {"equi": 1.0})
    for m in models:                        # matrix the lower delay, hash the lower rate
        m["p50_base_ms"], m["p50_per_hop_ms"] = (1.0, 0.0) if m["strategy"] == fast else (50.0, 0.0)
    assert sm.window_bytes(job, [50.0, 50.0], [1.0, 1.0]) == 50 * (job.streams[0].dtype.itemsize
                                                                   + job.streams[1].dtype.itemsize)
    state = 100 << 20
    _, best = sm.recommend(job, 8, models, None, 1.0, goal=None, state_bytes=state)
    assert best[0] == fast                                                  # max: throughput
    lines, best = sm.recommend(job, 8, models, None, 1.0, goal="memory", state_bytes=state)
    assert best[0] == slow and "the least window state" in lines[-1]
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.startswith("  ") and ln.split()[0] in (fast, slow)}
    assert float(rows[fast][3]) > float(rows[slow][3])                     # matrix keeps more copies
    lines, best = sm.recommend(job, 8, models, 1000.0, 1.0, goal="latency", state_bytes=state)
    assert best[0] == fast and "planned for 1,000 tuples/s per stream" in lines[0] and "goal: latency" in lines[0]
    (tmp_path / "results.json").write_text(json.dumps({"machine": {"cores": 2}, "model": models}))
    p = cli("plan", path, "-n", "8", "--calibration", str(tmp_path))
    assert p.returncode == 0 and "planned for as fast as the input can be replayed" in p.stdout, p.stdout
    assert "goal: throughput" in p.stdout and f"recommended: {fast}" in p.stdout
    p = cli("plan", path, "-n", "8", "--calibration", str(tmp_path), "--rate", "staged", "--goal", "memory")
    from mpi_join.storage.input_stats import rates_and_windows
    staged = max(rates_and_windows(job)[0])                       # the event-time rate: about 50 tuples/s
    assert p.returncode == 0 and "goal: memory" in p.stdout and "the least window state" in p.stdout, p.stdout
    assert 40 < staged < 60 and f"planned for {staged:,.0f} tuples/s per stream" in p.stdout, p.stdout
    p = cli("plan", path, "--rate", "fast")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--rate: expected tuples/s per stream" in p.stderr


@pytest.mark.parametrize("field,value,says", [
    ("shape", "spiral", "model[0].shape: 'spiral' is not a shape"),
    ("t_us", float("nan"), "model[0].t_us: nan; expected a finite number at least 0"),
    ("t_us", -0.5, "model[0].t_us: -0.5; expected a finite number at least 0"),
    ("d_us", float("inf"), "model[0].d_us: inf"),
    ("kappa", 0, "model[0].kappa: 0; expected a finite number above 0"),
    ("c_ns", -1.0, "model[0].c_ns: -1.0; expected a finite number at least 0"),
    ("strategy", "warp", "model[0].strategy: 'warp' is not a strategy"),
    ("p50_base_ms", "fast", "model[0].p50_base_ms: 'fast'"),
])
def test_plan_refuses_a_calibration_it_cannot_use_with_one_line(tmp_path, field, value, says):
    """Issue: an unknown shape raised a KeyError; NaN, infinite, zero and negative costs were
    accepted and printed `nan` rates and a recommendation. Checks exit 2 and one line naming the
    model's field."""
    path = make("band", str(tmp_path / "w"), tuples=400, rate=20000, window="1s", strategy="handshake")
    models = sm.fit({"machine": {"cores": 2}, "cases": _cases("handshake", "chain", 4e-6, 1.5e-9, 0.5e-6)},
                    lambda s: "chain", {"band": 1.0, "equi": 1.0})
    models[0][field] = value
    (tmp_path / "results.json").write_text(json.dumps({"machine": {"cores": 2}, "model": models}))
    p = cli("plan", path, "-n", "8", "--calibration", str(tmp_path / "results.json"))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and says in lines[0], p.stderr
    assert "recommended" not in p.stdout


def test_plan_chooses_run_sources_where_rank_0_bounds_the_rate(tmp_path):
    """The planner's run.sources: with a driver cost that caps one source, the recommendation on
    many ranks says how many sources, and on few ranks (workers bound it) says none."""
    path = make("equi", str(tmp_path / "w"), tuples=4000, rate=50, window="1s", strategy="hash")
    job = load_job(path)
    models = sm.fit({"machine": {"cores": 2}, "cases": _cases("hash", "partition", 4e-6, 0, 0.5e-6, workload="equi")},
                    lambda s: "partition", {"equi": 1.0})
    lines, _ = sm.recommend(job, 64, models, None, 1.0)
    rec = next(ln for ln in lines if ln.startswith("recommended:"))
    w, s = sm.best_split(next(m for m in models), 64)
    assert s > 1 and f'run.sources = "auto" takes it: {s} of the 64 ranks' in rec, rec
    lines, _ = sm.recommend(job, 3, models, None, 1.0)
    assert "sources =" not in next(ln for ln in lines if ln.startswith("recommended:"))
    from mpi_join.tools.bench import set_option
    set_option(path, "run", "sources", "1")           # a job that sets it is told what to set
    lines, _ = sm.recommend(load_job(path), 64, models, None, 1.0)
    rec = next(ln for ln in lines if ln.startswith("recommended:"))
    assert f"[run] sources = {s}:" in rec and "x run.sources = 1" in rec, rec


def test_auto_sources_are_the_planners_choice(tmp_path):
    """run.sources = "auto" (the default): one source on the ranks and cores of a small run, the
    model's split where rank 0 bounds the rate (hash on 64 ranks with the shipped calibration),
    and one where no model covers the job or its windows are unbounded."""
    path = make("equi", str(tmp_path / "w"), tuples=4000, rate=50, window="1s", strategy="hash")
    job = load_job(path)
    assert job.run.sources_auto and job.run.sources == 1
    assert sm.choose_sources(job, 5, 2, 1.0)[0] == 1
    k, why = sm.choose_sources(job, 64, 64, 1.0)
    w, s = sm.best_split(next(m for m in sm.load_models()[0] if m["strategy"] == "hash" and m["workload"] == "equi"),
                         64)
    assert k == s > 1 and "x one source on 64 ranks and 64 cores" in why
    assert sm.choose_sources(job, 64, 64, float("inf")) == (1, "unbounded windows")
    models = [m for m in sm.load_models()[0] if m["strategy"] != "hash"]
    assert sm.choose_sources(job, 64, 64, 1.0, models) == (1, "no calibrated model of hash on equi")
    from mpi_join.tools.bench import set_option
    set_option(path, "run", "sources", "1")
    assert not load_job(path).run.sources_auto
