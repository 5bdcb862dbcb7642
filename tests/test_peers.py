"""The bench suite's pieces without MPI: DuckDB's window join at rest equals the oracle on the
band and equi workloads (time windows of different sizes on the two streams); the rate search
brackets and bisects to the largest sustained rate; the suite's plan skips what a strategy
cannot run."""
import numpy as np
import pytest

from mpi_join.tools.bench_suite import max_rate, plan
from mpi_join.strategies import label, parse_label
from mpi_join.config import load_job
from mpi_join.join.oracle import run_oracle
from mpi_join.errors import JobError
from mpi_join.tools.peers import duckdb_join, spark_stream_join, stream_join_condition, window_join_sql
from mpi_join.storage.results import compare
from mpi_join.storage.staged import read_staged, write_staged
from mpi_join.tools.workloads import make


@pytest.mark.parametrize("workload,window", [("band", "2s"), ("equi", "500ms")])
def test_duckdb_at_rest_equals_the_oracle(tmp_path, workload, window):
    path = make(workload, str(tmp_path), tuples=8000, rate=1500, window=window, uniform_keys=300)
    job = load_job(path)
    text = open(path).read().replace(f'window = "{window}"', 'window = "300ms"', 1)   # unequal windows
    open(path, "w").write(text)
    job = load_job(path)
    got, _ = duckdb_join(job)
    expect = run_oracle(job, read_staged(job))
    missing, extra, (dups, _) = compare(expect, got)
    assert len(expect) > 20 and not len(missing) and not len(extra) and not len(dups)
    assert "s.ts - r.ts < 300" in window_join_sql(job)


@pytest.mark.parametrize("limit,start", [(37000, 2000), (900, 2000), (150000, 1000), (10 ** 9, 1000)])
def test_rate_search_finds_the_largest_sustained_rate(limit, start):
    rate, seen = max_rate(lambda r: r <= limit, start, 200, 400000, steps=6)
    assert rate <= limit and (rate >= limit * 0.9 or rate == 400000)
    assert all(ok == (r <= limit) for r, ok in seen)
    assert max_rate(lambda r: False, 2000, 200, 400000, 3)[0] == 0.0


@pytest.mark.parametrize("limit", [100000, 130000, 75000, 150000, 210000, 60000])
def test_a_later_case_steps_by_sqrt2_to_the_same_precision_in_fewer_probes(limit):
    """From a close start (the last case's maximum), steps of sqrt(2) then one bisection bracket
    the rate as narrowly as doubling then two bisections, and never take more probes."""
    by = {f: max_rate(lambda r: r <= limit, 100000, 200, 400000, steps=2, factor=f) for f in (2.0, 2 ** 0.5)}
    for f, (rate, seen) in by.items():
        assert rate <= limit and limit / rate < 2 ** 0.25 * 1.0001, (f, rate, seen)
        assert all(ok == (r <= limit) for r, ok in seen)
    assert len(by[2 ** 0.5][1]) <= len(by[2.0][1])
    if 100000 / 2 ** 0.5 <= limit < 100000 * 2 ** 0.5:           # within a step of the start: one probe fewer
        assert len(by[2 ** 0.5][1]) == len(by[2.0][1]) - 1


def test_the_plan_runs_what_each_strategy_can():
    cases = plan(["hash", "biclique", "handshake"], ["band", "equi"], [1, 2, 3])
    assert ("hash", "band", 1, 2) not in cases                        # hash needs an equi condition
    assert ("hash", "equi", 1, 2) in cases and ("handshake", "band", 3, 4) in cases
    assert ("biclique", "equi", 2, 3) not in cases and ("biclique", "equi", 3, 4) in cases   # at least 4 ranks
    # handshake's indexed local join runs beside its nested loop, on band only
    assert ("handshake[local_join=index]", "band", 2, 3) in cases
    assert not any(c[0].startswith("handshake[") and c[1] == "equi" for c in cases)
    assert parse_label("handshake[local_join=index]") == ("handshake", {"local_join": "index"})
    assert parse_label(label("a", {"x": "1", "y": "2"})) == ("a", {"x": "1", "y": "2"})


def test_spark_structured_streaming_equals_the_oracle(tmp_path):
    """The Spark peer: a stream-stream join with watermarks over the staged equi input, in
    micro-batches of one chunk per stream, finds exactly the oracle's pairs."""
    path = make("equi", str(tmp_path), tuples=6000, rate=1500, window="1s", uniform_keys=200)
    job = load_job(path)
    arrays = read_staged(job)
    # R's first tuple at ts 0 (the epoch, where Spark's watermark starts), with the key of an S
    # tuple 0.7 s later, in a later micro-batch: only the join's state can pair them
    r, s_ = arrays
    r["ts"][0] = 0
    r["key"][0] = s_["key"][np.searchsorted(s_["ts"], 700_000)]
    write_staged(job.staged, job.streams, arrays, job.ts_unit)
    got, st = spark_stream_join(job, str(tmp_path / "spark"), chunks=4)
    expect = run_oracle(job, arrays)
    missing, extra, (dups, _) = compare(expect, got)
    assert len(expect) > 20 and not len(missing) and not len(extra) and not len(dups)
    # among them, pairs of a tuple at ts 0 (Spark's initial watermark: a row at it is late) with
    # a partner in a later micro-batch, which only the join's state can find
    ts = {int(q): int(t) for a in arrays for q, t in zip(a["seq"], a["ts"])}
    first_chunk_end = np.quantile(np.concatenate([a["ts"] for a in arrays]), 0.25)
    assert any(min(ts[a], ts[b]) == 0 and max(ts[a], ts[b]) > first_chunk_end for a, b in expect.tolist())
    assert st["batches"] == 4 and st["tuples_per_s"] > 0 and st["batch_ms_p99"] >= st["batch_ms_p50"] > 0
    # Spark takes files oldest first: the chunks' modification times must follow their event time
    # (equal times come in any order, and a later chunk first drops an earlier one's rows as late)
    for stream in ("R", "S"):
        chunks = sorted((tmp_path / "spark" / "input" / stream).glob("chunk-*.parquet"))
        times = [c.stat().st_mtime for c in chunks]
        assert len(chunks) == 4 and all(a < b for a, b in zip(times, times[1:]))


def test_spark_peer_refuses_what_its_range_condition_cannot_express(tmp_path):
    path = make("equi", str(tmp_path), tuples=500, rate=1500, window="500ms", uniform_keys=200)
    text = open(path).read().replace('window = "500ms"', 'window = "300ms"', 1)
    open(path, "w").write(text)
    with pytest.raises(JobError, match="equal time windows"):
        stream_join_condition(load_job(path))
