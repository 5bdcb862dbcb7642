"""Workload generators: deterministic, in the staged layout, with the papers' shapes."""
import json
import os

import numpy as np

from mpi_join.config import load_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.staged import read_staged
from mpi_join.tools.workloads import bmodel_keys, make


def test_same_seed_same_data(tmp_path):
    a = load_job(make("equi", str(tmp_path / "a"), tuples=3000, seed=7))
    b = load_job(make("equi", str(tmp_path / "b"), tuples=3000, seed=7))
    c = load_job(make("equi", str(tmp_path / "c"), tuples=3000, seed=8))
    ra, rb, rc = read_staged(a), read_staged(b), read_staged(c)
    assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
    assert not np.array_equal(ra[0]["key"], rc[0]["key"])
    man = json.loads(open(os.path.join(a.staged, "_manifest.json")).read())
    assert man["total"] == 3000 and man["streams"]["R"]["schema"]["pad"] == "char36"
    assert ra[0].dtype.itemsize == 64                      # 64-byte tuples, as in the paper


def test_bmodel_skew():
    rng = np.random.default_rng(0)
    k = bmodel_keys(200_000, 0.7, 10, rng)
    counts = np.sort(np.bincount(k))[::-1]
    top20 = counts[: len(counts) // 5].sum() / counts.sum()
    assert 0.6 < top20 < 0.9                               # about "80/20"
    flat = np.sort(np.bincount(bmodel_keys(200_000, 0.5, 10, rng)))[::-1]
    assert flat[: len(flat) // 5].sum() / flat.sum() < 0.3


def test_band_workload_selectivity(tmp_path):
    job = load_job(make("band", str(tmp_path), tuples=8000, window="unbounded"))
    arrays = read_staged(job)
    res = run_oracle(job, arrays)
    pairs = len(arrays[0]) * len(arrays[1])
    sel = len(res) / pairs
    assert 1 / 1_000_000 < sel < 1 / 60_000                # about 1:250,000
    assert arrays[0].dtype["z"].itemsize == 20 and arrays[1].dtype["d"].kind == "b"


def test_images_workload_multiway(tmp_path):
    job = load_job(make("images", str(tmp_path / "s"), tuples=60, streams=3, rate=10, window="2s"))
    arrays = read_staged(job)
    assert arrays[0]["pix"].shape[1:] == (5000, 3)
    res = run_oracle(job, arrays)
    assert res.shape[1] == 3 and len(res) > 0
    # similar images come from the same prototype: every result chains similar pictures
    from mpi_join.udfs import image_similar
    for a, b, c in res[:20]:
        row = {int(r["seq"]): r for arr in arrays for r in arr}
        assert image_similar(row[a], row[b]) and image_similar(row[b], row[c])
    job2 = load_job(make("images", str(tmp_path / "p"), tuples=60, streams=3, rate=10, window="unbounded",
                         predicate="probabilistic", selectivity=0.2))
    arr2 = read_staged(job2)
    n = len(run_oracle(job2, arr2))
    full = np.prod([len(a) for a in arr2])
    assert 0.01 < n / full < 0.1                            # two coins of 0.2: about 0.04


def test_generate_picks_or_names_a_strategy_that_runs_the_workload(tmp_path):
    from conftest import cli
    from mpi_join import strategies
    from mpi_join.config import load_job
    for w, extra, runs in (("equi", [], True), ("band", [], True), ("images", [], True),
                           ("band", ["--strategy", "hash"], False)):
        out = tmp_path / (w + "".join(extra))
        p = cli("generate", w, "--out", str(out), "--tuples", "60", *extra)
        assert p.returncode == 0, p.stderr
        job = load_job(str(out / "job.toml"))
        assert (job.strategy.name in strategies.runnable(job)) == runs
        assert ("cannot run this workload" in p.stderr) != runs, p.stderr
        if not runs:       # the note names strategies that can
            assert "use --strategy psp (or: psp, handshake" in p.stderr, p.stderr

def test_bench_job_edits_replace_a_key_in_its_own_table_only(tmp_path):
    from mpi_join.tools.bench import set_option, set_param
    p = tmp_path / "job.toml"
    p.write_text('[strategy]\nname = "hash"\nrate = 3\n[run]\nrate = 10\nbatch_size = 7\n')
    set_option(str(p), "run", "rate", '"max"')
    set_param(str(p), "ordered", False)
    set_param(str(p), "local_join", "scan")
    set_option(str(p), "checkpoint", "every_tuples", "5")
    import tomllib
    d = tomllib.loads(p.read_text())
    assert d["run"] == {"rate": "max", "batch_size": 7}
    assert d["strategy"] == {"name": "hash", "rate": 3, "ordered": False, "local_join": "scan"}
    assert d["checkpoint"] == {"every_tuples": 5}


def test_a_repeated_bench_takes_medians_and_rates_each_run_by_the_oracle_timed_beside_it():
    from mpi_join.tools.bench import median_rows

    def run(n, r, tps, oracle_s):
        lat = {"p50": 1.0, "p90": 2.0, "p99": 3.0}
        return {"nprocs": n, "round": r, "tuples_per_s": tps, "wall_s": 1000 / tps, "results": 7,
                "latency_ms": lat, "oracle_s": oracle_s}
    out = {"runs": {}, "rounds": [run(2, 1, 300.0, 2.0), run(3, 1, 500.0, 4.0), run(2, 2, 200.0, 1.0),
                                  run(3, 2, 400.0, 2.0), run(2, 3, 250.0, 5.0), run(3, 3, 450.0, 2.5)]}
    # the oracle took 2, 4, 1, 2, 5, 2.5 s after the runs and 2 s before them: median 2 s, 500 tuples/s
    rows = {r[0]: r for r in median_rows("hash", [2, 3], out, [2.0, 2.0, 4.0, 1.0, 2.0, 5.0, 2.5], 1000, 7)}
    assert rows["oracle (1 core), median"][1] == "500"
    assert rows["hash (2 ranks), median"][1] == "250" and rows["hash (2 ranks), median"][-1] == "0.50"
    assert rows["hash (3 ranks), median"][1] == "450" and rows["hash (3 ranks), median"][-1] == "0.90"
    # each run against the oracle timed right after it: 300 x 2 / 1000 = 0.60, 200 x 1 / 1000, 250 x 5 / 1000
    assert rows["hash (2 ranks), round 1"][-1] == "0.60"
    assert rows["hash (2 ranks), range"][-1] == "0.20-1.25"
    assert rows["hash (3 ranks), range"][-1] == "0.80-2.00"
    assert out["runs"][2]["tuples_per_s"] == 250.0 and out["runs"][3]["tuples_per_s"] == 450.0
