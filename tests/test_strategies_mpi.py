"""Every registered strategy equals the oracle under real mpiexec, each rank its own process: the
smaller matrix of what only processes show (test_strategies_local.py runs the whole matrix on
the in-process runtime). Each strategy at its fewest ranks and two more, count windows on one
and time windows on the other, on equi (band where it has no equi); the runtime's test
strategies at one of the two, count and time in turn; parallel sources as ranks of their own. A rank SIGKILLed and resumed is in test_checkpoint.py and each strategy's file."""
import zlib

import numpy as np
import pytest

from conftest import equi_job_text, random_streams, run_mpi, write_job
from reference import assert_equals_oracle
from test_strategies_local import PREDICATES, WINDOWS, two_stream_strategies

SLOW = True


def _cases():
    out, tests = [], 0
    for name, info in two_stream_strategies():
        pred = "equi" if "equi" in info.predicates else "band"
        rows = list(zip(("count", "time"), sorted({info.min_ranks, info.min_ranks + 2})))
        if info.testing:        # the runtime's test strategies: one row each here, in turn (each
            rows = [rows[tests % 2]]    # has both in process and a SIGKILL in test_runtime_mpi.py)
            tests += 1
        for kind, n in rows:
            out.append(pytest.param(name, kind, n, pred, 1, id=f"{name}-{kind}-{n}-{pred}"))
    out += [pytest.param("hash", "time", 3, "equi", 2, id="hash-time-3-equi-k2"),
            pytest.param("splitjoin", "count", 4, "band", 3, id="splitjoin-count-4-band-k3")]
    return out


@pytest.mark.parametrize("strategy,kind,ranks,pred,k", _cases())
def test_strategy_equals_oracle_under_mpiexec(tmp_path, strategy, kind, ranks, pred, k):
    seed = zlib.crc32(f"mpi{strategy}{kind}{ranks}{pred}{k}".encode())
    run = "batch_size = 97\nmax_inflight = 2" + (f"\nsources = {k}\npart = 250" if k > 1 else "")
    text = equi_job_text(WINDOWS[kind], strategy=strategy, predicate=PREDICATES[pred], run=run)
    arrays = random_streams(np.random.default_rng(seed), 1500, key_range=8)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_mpi(ranks + k - 1, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    assert_equals_oracle(job, arrays)
