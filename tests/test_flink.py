"""Checked against Apache Flink (the Flink tier: `make test` runs it, `make flink-test` alone;
`make fast` does not). Each case is one SQL SELECT, the form Flink users write: Flink SQL runs
it as it is (its SELECT list set to the seqs) in a local mini-cluster, as an event-time interval
join over the staged rows as CSV (tools/flink_sql.py), and mpi-join runs it as the job's
[predicate] sql on the in-process runtime (its ranks' code, as threads: what processes add is
tested in test_strategies_mpi.py and test_local_runtime.py); the two result sets must be equal,
null sides included.

The differences on purpose (README "Checked against Apache Flink"): Flink's event time is
TIMESTAMP(3), so every case here has ts_unit = "ms" (tools/flink_peer.write_csv refuses
another); Flink emits an outer row when its watermark passes (here 1 s behind event time),
mpi-join when its window lets the tuple go: the same rows, at other moments."""
import os

import numpy as np
import pytest

from mpi_join import strategies
from mpi_join.config import load_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.results import read_results
from mpi_join.storage.staged import write_staged
from mpi_join.tools.flink_peer import run_flink
from conftest import run_cli, run_local
from reference import as_set, assert_same_rows

SLOW = True
pytestmark = pytest.mark.flink


def short_lived(mp):
    """Flink's JVMs here check rows, not speed: C1 only and the serial collector
    (session.SHORT_LIVED, which pyflink's gateway takes from JVM_ARGS) set up and run the eight
    cases in 20 CPU-s instead of 33."""
    from mpi_join.storage.spark.session import SHORT_LIVED
    mp.setenv("JVM_ARGS", SHORT_LIVED)


@pytest.fixture(autouse=True)
def short_lived_jvms(monkeypatch):
    """Function-scoped: a module-scoped fixture makes its tests one xdist group (conftest)."""
    short_lived(monkeypatch)

ON = "t.sym = q.sym AND "
CASES = {   # id: (SELECT, key type, strategies that run it)
    "inner": (f"SELECT * FROM trades t JOIN quotes q ON {ON}q.ts BETWEEN t.ts - INTERVAL '5' SECOND AND t.ts",
              "int32", ["hash", "splitjoin"]),
    "shifted": (f"SELECT * FROM trades t JOIN quotes q ON {ON}"
                f"q.ts BETWEEN t.ts + INTERVAL '1' SECOND AND t.ts + INTERVAL '5' SECOND", "int32", ["llhj", "biclique"]),
    "open": (f"SELECT * FROM trades t, quotes q WHERE {ON}"
             f"q.ts > t.ts - INTERVAL '10' SECOND AND q.ts < t.ts - INTERVAL '5' SECOND", "int32", ["handshake", "matrix"]),
    "half-open": (f"SELECT * FROM trades t JOIN quotes q ON {ON}"
                  f"q.ts >= t.ts - INTERVAL '0.25' SECOND AND q.ts < t.ts + INTERVAL '2' SECOND", "int32", ["psp", "hash"]),
    "left": (f"SELECT * FROM trades t LEFT JOIN quotes q ON {ON}q.ts BETWEEN t.ts - INTERVAL '5' SECOND AND t.ts",
             "int32", ["hash", "hash@5", "matrix", "splitjoin"]),
    "full": (f"SELECT * FROM trades t FULL OUTER JOIN quotes q ON {ON}"
             f"q.ts BETWEEN t.ts + INTERVAL '1' SECOND AND t.ts + INTERVAL '3' SECOND", "int32",
             ["hash", "hash@5", "llhj", "biclique"]),
    "text-inner": (f"SELECT * FROM trades t JOIN quotes q ON {ON}"
                   f"q.ts BETWEEN t.ts - INTERVAL '2' SECOND AND t.ts + INTERVAL '2' SECOND", "char6", ["splitjoin", "llhj"]),
    "text-right": (f"SELECT * FROM trades t RIGHT JOIN quotes q ON {ON}"
                   f"q.ts > t.ts - INTERVAL '3' SECOND AND q.ts <= t.ts", "char6", ["hash", "hash@5", "handshake", "psp"]),
}


def _arrays(rng, key, n=2400, syms=24, t0=1_772_357_400_000):
    """Trades and quotes over 60 s of event time (ms), a dense seq, keys from `syms` symbols."""
    sid = rng.integers(0, 2, n)
    ts = t0 + np.sort(rng.integers(0, 60_000, n))
    kt = "i4" if key == "int32" else "S6"
    out = []
    for s, col in ((0, "px"), (1, "bid")):
        a = np.zeros(int((sid == s).sum()), [("seq", "i8"), ("ts", "i8"), ("sym", kt), (col, "f8")])
        a["seq"], a["ts"] = np.nonzero(sid == s)[0], ts[sid == s]
        k = rng.integers(0, syms, len(a))
        a["sym"] = k if key == "int32" else np.array([f"S{x:03d}".encode() for x in k])
        a[col] = rng.uniform(10, 20, len(a)).round(2)
        out.append(a)
    return out


def _job(tmp, cid, sql, key, strategy):
    d = tmp / cid
    d.mkdir(exist_ok=True)
    (d / "job.toml").write_text(
        f'[job]\nname = "tq"\nts_unit = "ms"\n[input]\nstaged = "staged"\n[output]\ndir = "out-{strategy}"\n'
        f'[streams.trades]\nschema = {{ sym = "{key}", px = "float64" }}\n'
        f'[streams.quotes]\nschema = {{ sym = "{key}", bid = "float64" }}\n'
        f"[predicate]\nsql = '''{sql}'''\n[strategy]\nname = \"{strategy}\"\n[run]\nbatch_size = 97\nmax_inflight = 2\n")
    return str(d / "job.toml"), load_job(str(d / "job.toml"))


@pytest.fixture(scope="module")
def flink(tmp_path_factory):
    """Every case once in Flink (one mini-cluster start for all): {id: (job dir, arrays, Flink's rows)}."""
    tmp = tmp_path_factory.mktemp("flink")
    cases = []
    for k, (cid, (sql, key, _)) in enumerate(CASES.items()):
        arrays = _arrays(np.random.default_rng(100 + k), key)
        _, job = _job(tmp, cid, sql, key, "hash")
        write_staged(job.staged, job.streams, arrays, job.ts_unit)
        cases.append((cid, job, arrays))
    with pytest.MonkeyPatch.context() as mp:       # built before any function-scoped fixture
        short_lived(mp)
        got = run_flink(cases, str(tmp / "work"), parallelism=2)
    return {cid: (tmp, arrays, got[cid]) for cid, _, arrays in cases}


@pytest.mark.parametrize("cid", list(CASES))
def test_flink_equals_the_oracle(flink, cid):
    tmp, arrays, want = flink[cid]
    sql, key, _ = CASES[cid]
    _, job = _job(tmp, cid, sql, key, "hash")
    got = run_oracle(job, arrays)
    assert len(want) > 0 and len(want) == len(as_set(want)), "Flink gave no rows or a row twice"
    if "JOIN" in sql and any(w in sql for w in ("LEFT", "RIGHT", "FULL")):
        assert (want < 0).any(), "an outer case whose input left no tuple without a partner checks nothing"
    assert as_set(got) == as_set(want)


@pytest.mark.parametrize("cid,strategy", [(c, s) for c, (_, _, ss) in CASES.items() for s in ss])
def test_mpi_join_equals_flink(flink, cid, strategy):
    """Outer joins on hash at two rank counts, and on the strategies whose lone rows rank 0 writes
    from the results (storage/lone_rows.py)."""
    tmp, arrays, want = flink[cid]
    sql, key, _ = CASES[cid]
    name, _, n = strategy.partition("@")
    path, job = _job(tmp, cid, sql, key, name)
    ranks = int(n) if n else strategies.get(name).min_ranks + 1
    p = run_local(ranks, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    got = read_results(job.output, job.stream_names)
    assert_same_rows(got, want)


def test_the_benchmarks_flink_peer_gives_the_oracles_checksums(tmp_path):
    """bench-suite's Flink peer (flink_peer.time_flink): the equi and band workloads, whose event
    time is in us (written one unit as one ms), as Flink SQL interval joins; the count and
    checksums Flink computes equal the oracle's, and a result dropped or added changes them."""
    from mpi_join.config import load_job
    from mpi_join.storage.staged import read_staged
    from mpi_join.tools.flink_peer import checksums, time_flink
    from mpi_join.tools.workloads import make
    cases, want = [], {}
    for w, n, rate, par in (("equi", 6000, 5000, 2), ("band", 6000, 1500, 1)):
        job = load_job(make(w, str(tmp_path / w), tuples=n, rate=rate, window="1s",
                            uniform_keys=2000 if w == "equi" else None))
        arrays = read_staged(job)
        want[w] = run_oracle(job, arrays)
        assert len(want[w]) > 10 and job.ts_unit == "us"
        cases.append((w, job, arrays, par))
    got = time_flink(cases, str(tmp_path / "work"))
    for w, pairs in want.items():
        assert got[w]["checksums"] == checksums(pairs) and got[w]["seconds"] > 0
        assert checksums(pairs[1:]) != got[w]["checksums"]
        assert checksums(np.concatenate([pairs, pairs[:1] + [0, 1]])) != got[w]["checksums"]


def test_bench_suite_puts_flink_beside_every_case(tmp_path):
    """Run without Flink, then `--peers` adds it on the same inputs (as after `make flink`)."""
    import json
    p = run_cli("bench-suite", "--out", str(tmp_path / "suite"), "--strategy", "hash", "--workload", "equi",
                "-n", "1", "--seconds", "0.5", "--steps", "0", "--no-spark", "--no-flink", timeout=900)
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "suite" / "results.json").read_text())
    assert not any("flink" in v for v in r["peers"].values()) and "vs_flink" not in r["cases"][0]
    p = run_cli("bench-suite", "--out", str(tmp_path / "suite"), "--peers", "--no-spark", timeout=900)
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "suite" / "results.json").read_text())
    (case,) = r["cases"]
    fl = r["peers"][case["input"]]["flink"]
    assert fl["equals_oracle"] and fl["parallelism"] == (os.cpu_count() or 1)
    assert case["vs_flink"] == pytest.approx(2 * case["max_rate"] / fl["tuples_per_s"], rel=1e-2)
    assert "Apache Flink SQL interval join" in p.stdout and "| vs Flink |" in p.stdout
