"""`handshake` and `llhj` under real mpiexec: chains of 1 to 5 workers, time and count windows, tiny batches
and a slow worker so that batches cross in flight, equal to the oracle. (Every predicate and
window kind of the shared test: test_strategies_local.py. A chain worker SIGKILLed, then
--resume, markers and acknowledgements flowing with the data along the chain: every role of
both chains in test_checkpoint.py's parallel-sources cases, and a middle worker of 4 ranks on a
band join, resumed at 6, in its rescale chains.)"""
import os

import numpy as np
import pytest

from conftest import equi_job_text, random_streams, run_mpi, run_local, write_job
from reference import assert_equals_oracle

SLOW = True
STRATEGY = "handshake"   # whose time budget this file's tests count against (conftest.py)
# budget: about 40 s of mpiexec runs in this file

BAND = 'band = [{left = "R.v", right = "S.w", eps = 0.3}]'


_check = assert_equals_oracle


@pytest.mark.parametrize("strategy,workers,kind,extra", [
    ("handshake", 1, "time", ""), ("handshake", 2, "count", ""),
    ("handshake", 3, "time", "slow_rank = 2\nslow_delay = 0.002"),
    ("handshake", 4, "count", 'local_join = "index"'), ("handshake", 5, "time", 'weights = "1,2,1,2,1"'),
    ("llhj", 1, "count", ""), ("llhj", 3, "time", ""), ("llhj", 5, "count", 'local_join = "index"')])
def test_chain_lengths_equal_oracle(tmp_path, strategy, workers, kind, extra):
    windows = ('"40ms"', '"25ms"') if kind == "time" else ("60", "35")
    text = equi_job_text(windows, strategy=strategy, predicate=BAND, extra_strategy=extra,
                         run="batch_size = 3\nmax_inflight = 2")
    arrays = random_streams(np.random.default_rng(workers), 1500, key_range=8, ts_step=1)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_local(workers + 1, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    _check(job, arrays)


def test_a_rate_the_chain_cannot_keep_up_with_is_reported_as_overloaded(tmp_path):
    text = equi_job_text(('"40ms"', '"25ms"'), strategy="handshake", predicate=BAND,
                         extra_strategy="slow_rank = 1\nslow_delay = 0.02",
                         run='batch_size = 10\nmax_inflight = 2\nrate = 2000\noverload_after = "0.3s"')
    arrays = random_streams(np.random.default_rng(2), 1200, key_range=8, ts_step=1)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_mpi(3, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    line = [x for x in p.stderr.splitlines() if "overloaded" in x]
    assert len(line) == 1 and "at 2000 tuples/s per stream the replay fell" in line[0], p.stderr
    import json
    s = json.load(open(os.path.join(job.output, "metrics", "summary.json")))
    assert s["ranks"][0]["overloaded"]["rate_per_stream"] == 2000
    _check(job, arrays)            # late, not wrong


def test_stop_when_overloaded_ends_the_run_there_with_one_line(tmp_path):
    """The same slow chain with run.stop_when_overloaded: it stops at the overload, exit 2, the
    error naming the rate, no _SUCCESS; a rate search (bench-suite) learns it at once."""
    text = equi_job_text(('"40ms"', '"25ms"'), strategy="handshake", predicate=BAND,
                         extra_strategy="slow_rank = 1\nslow_delay = 0.02",
                         run='batch_size = 10\nmax_inflight = 2\nrate = 2000\noverload_after = "0.3s"\n'
                             'stop_when_overloaded = true')
    arrays = random_streams(np.random.default_rng(2), 6000, key_range=8, ts_step=1)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_mpi(3, "run", path)
    assert p.returncode == 2, p.stderr + p.stdout
    line = next(x for x in p.stderr.splitlines() if "stop_when_overloaded" in x)
    assert "stopped, overloaded at 2000 tuples/s per stream" in line, line
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
