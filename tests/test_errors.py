"""Bad jobs and bad input: one line naming the problem, a non-zero exit, and no rank left hanging."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import cli, equi_job_text, random_streams, rerecord, run_mpi, write_job


def _one_error_line(p):
    lines = [l for l in p.stderr.splitlines() if l.startswith("mpi-join: error:")]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.fixture
def good(tmp_path):
    text = equi_job_text(('"5ms"', '"5ms"'))
    arrays = random_streams(np.random.default_rng(0), 200)
    path, job = write_job(str(tmp_path), text, arrays)
    return tmp_path, path, job, arrays


def _expect_run_error(path, *fragments, ranks=3):
    p = run_mpi(ranks, "run", str(path), timeout=60)
    assert p.returncode != 0
    line = _one_error_line(p)
    for f in fragments:
        assert f in line, line
    return line


def test_missing_stream_file(good):
    tmp, path, job, _ = good
    for f in os.listdir(os.path.join(job.staged, "S")):
        os.remove(os.path.join(job.staged, "S", f))
    _expect_run_error(path, os.path.join(job.staged, "S"), "no Parquet part files", "'S'")


def test_missing_staged_dir(good):
    tmp, path, job, _ = good
    p = run_mpi(2, "run", path, "--staged", str(tmp / "nowhere"), timeout=60)
    assert p.returncode == 2
    assert "nowhere: staged input directory not found" in _one_error_line(p)


def test_missing_job_file(tmp_path):
    _expect_run_error(tmp_path / "nope.toml", "nope.toml: job file not found")


def test_wrong_schema(good):
    tmp, path, job, arrays = good
    f = os.path.join(job.staged, "R", "part-00000.parquet")
    t = pq.read_table(f)
    t = t.set_column(t.schema.get_field_index("k"), "k", pa.array(t.column("k").to_numpy().astype(np.float64)))
    pq.write_table(t, f)
    rerecord(job)
    _expect_run_error(path, f, "column 'k' has type double", "int32")


def test_missing_column(good):
    tmp, path, job, arrays = good
    f = os.path.join(job.staged, "S", "part-00000.parquet")
    pq.write_table(pq.read_table(f).drop(["w"]), f)
    rerecord(job)
    _expect_run_error(path, f, "column 'w' of stream 'S' is missing")


def test_ts_going_backwards(good):
    tmp, path, job, arrays = good
    R, S = arrays
    S["ts"][len(S) // 2] -= 1000
    from mpi_join.storage.staged import write_staged
    write_staged(job.staged, job.streams, [R, S], job.ts_unit)
    _expect_run_error(path, "ts goes backwards at seq", "non-decreasing")


def test_seq_not_dense(good):
    tmp, path, job, arrays = good
    R, S = arrays
    k = int(np.searchsorted(R["seq"], S["seq"][5]))       # a seq of S, placed in order within R
    R["seq"][k - 1] = S["seq"][5]
    from mpi_join.storage.staged import write_staged
    write_staged(job.staged, job.streams, [R, S], job.ts_unit)
    _expect_run_error(path, "seq must be dense", "is used twice")


def test_rows_out_of_seq_order_name_file_and_row(good):
    tmp, path, job, arrays = good
    R, S = arrays
    R["seq"][3] = S["seq"][5]
    from mpi_join.storage.staged import write_staged
    write_staged(job.staged, job.streams, [R, S], job.ts_unit)
    _expect_run_error(path, os.path.join(job.staged, "R", "part-00000.parquet"), "row 4: seq",
                      "must be in increasing seq order")


def test_nulls_in_key_column(good):
    tmp, path, job, arrays = good
    f = os.path.join(job.staged, "S", "part-00000.parquet")
    t = pq.read_table(f)
    k = t.column("k").to_pylist()
    k[7] = None
    t = t.set_column(t.schema.get_field_index("k"), "k", pa.array(k, pa.int64()))
    pq.write_table(t, f)
    rerecord(job)
    _expect_run_error(path, f, "column 'k' has 1 null value(s) (first at row 7)")


def test_window_of_zero(tmp_path):
    (tmp_path / "job.toml").write_text(equi_job_text(('"0s"', '"5ms"')))
    _expect_run_error(tmp_path / "job.toml", "streams.R.window", "longer than zero")
    (tmp_path / "job.toml").write_text(equi_job_text(('"5ms"', "0")))
    _expect_run_error(tmp_path / "job.toml", "streams.S.window", "at least 1 tuple")


def test_unknown_strategy(tmp_path):
    (tmp_path / "job.toml").write_text(equi_job_text(('"5ms"', '"5ms"'), strategy="magic"))
    _expect_run_error(tmp_path / "job.toml", "strategy.name", "unknown strategy 'magic'", "available: hash")


def test_too_few_ranks(good):
    tmp, path, job, _ = good
    _expect_run_error(path, "needs at least 2 MPI ranks", "got 1", ranks=1)


def test_non_equi_predicate_names_supporting_strategies(tmp_path):
    text = equi_job_text(('"5ms"', '"5ms"'), predicate='band = [{left = "R.v", right = "S.w", eps = 1}]')
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(1), 50))
    line = _expect_run_error(path, "strategy 'hash' needs equi conditions", "band", "hash partitioning")
    assert "mpi-join oracle" in line or "strategies that support it" in line


@pytest.mark.parametrize("snippet,fragment", [
    ("[run]\nbatch_size = 0", "run.batch_size: expected an integer in 1.."),
    ("[run]\nrate = -5", "run.rate"),
    ("[run]\nflush_interval = \"soon\"", "run.flush_interval: cannot read duration 'soon'"),
    ("[run]\ncolour = 1", "run.colour: unknown field"),
])
def test_bad_run_options(tmp_path, snippet, fragment):
    text = equi_job_text(('"5ms"', '"5ms"')).replace("[run]\n", "") + snippet + "\n"
    (tmp_path / "job.toml").write_text(text)
    p = cli("verify", str(tmp_path), "--job", str(tmp_path / "job.toml"))
    assert p.returncode == 2 and fragment in _one_error_line(p)


def test_bad_predicate_column(tmp_path):
    (tmp_path / "job.toml").write_text(equi_job_text(('"5ms"', '"5ms"'), predicate='equi = [["R.k", "S.nope"]]'))
    p = cli("verify", str(tmp_path), "--job", str(tmp_path / "job.toml"))
    assert p.returncode == 2 and "predicate.equi[0]: stream 'S' has no column 'nope'" in _one_error_line(p)


def test_failing_rank_aborts_the_job_with_rank_and_reason(tmp_path):
    text = equi_job_text(('"5ms"', '"5ms"'), run="batch_size = 10") + '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 100\n'
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(2), 500))
    p = run_mpi(4, "run", path, env={"MPI_JOIN_FAULT": "2:3"}, timeout=60)
    assert p.returncode != 0
    assert "mpi-join: rank 2 failed: RuntimeError: fault injected at batch 3" in p.stderr
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    # rank 0 was told before the abort and released its locks (the next run took them over as stale)
    assert not os.path.exists(os.path.join(job.output, ".mpi-join.lock")), "the output's lock is left behind"
    assert not os.path.exists(os.path.join(job.checkpoint.dir, ".mpi-join.lock")), "the checkpoints' lock is left behind"
    assert "rank 0 failed" not in p.stderr, p.stderr


def test_verify_reports_missing_extra_and_duplicated(good):
    tmp, path, job, _ = good
    p = run_mpi(3, "run", path)
    assert p.returncode == 0, p.stderr
    ok = cli("verify", job.output, "--job", path)
    assert ok.returncode == 0 and "OK: results equal the oracle" in ok.stdout
    rdir = os.path.join(job.output, "results")
    files = sorted(os.listdir(rdir))
    t = pq.read_table(os.path.join(rdir, files[0]))
    assert t.num_rows >= 2
    tampered = pa.concat_tables([t.slice(1), t.slice(1, 1)])          # drop one, duplicate one
    extra = pa.table({c: pa.array([10**9] if c.endswith("_seq") else [0], pa.int64()) for c in t.column_names})
    pq.write_table(pa.concat_tables([tampered, extra.cast(t.schema)]), os.path.join(rdir, files[0]))
    bad = cli("verify", job.output, "--job", path)
    assert bad.returncode == 1
    assert "missing 1   extra 1   duplicated 1" in bad.stdout
    assert "DIFFERENT" in bad.stdout


@pytest.fixture
def full_disk(tmp_path):
    """A real filesystem of 600 kB with 100 kB free (a tmpfs mounted for the test; root only): less
    than the run's results and checkpoints need."""
    import subprocess
    d = tmp_path / "full"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    (d / "filler").write_bytes(b"\0" * 500_000)
    yield d
    subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_a_full_disk_is_one_line_per_rank_without_tracebacks(tmp_path, full_disk):
    """Checkpoints and results on a disk that fills: each failing rank says one line naming the
    file and errno 28, and no rank crashes or prints a Python or HDF5 traceback (66 of them, and
    a segfault of a rank in HDF5's close, before)."""
    arrays = random_streams(np.random.default_rng(5), 20000, key_range=50)
    text = equi_job_text(('"30ms"', '"30ms"'), run="batch_size = 1000").replace(
        'dir = "out"', f'dir = "{full_disk}/out"') + f'[checkpoint]\ndir = "{full_disk}/ckpt"\nevery_tuples = 2000\n'
    path, job = write_job(str(tmp_path / "job"), text, arrays)
    p = run_mpi(4, "run", path, timeout=120)
    assert p.returncode == 1, p.stderr
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("mpi-join: rank")]
    assert said and all("No space left on device (errno 28)" in ln for ln in said), p.stderr
    assert len({ln.split(" failed")[0] for ln in said}) == len(said), "one line per rank at most"
    for noise in ("Traceback", "Exception ignored", "HDF5", "Segmentation fault", "BAD TERMINATION"):
        assert noise not in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
