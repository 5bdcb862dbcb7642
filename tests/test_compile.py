"""Compile time is not latency: every numba kernel a run uses is compiled on every rank before
the replay clock starts; with a cold compile cache the run says so in one line, and a second
run loads them. Checked by numba's own compile events, counted per rank."""
import json
import os
import re

import numpy as np

from conftest import equi_job_text, random_streams, run_mpi, write_job
from test_strategies_local import PREDICATES


def test_no_kernel_compiles_during_the_replay(tmp_path):
    """An equi job on a cold numba cache, then warm; then with a theta UDF twice (one numba
    cache for all four runs, so one cold compile of the common kernels)."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    compiled = []
    for n, pred in enumerate(["equi", "equi", "equi+theta", "equi+theta"]):
        text = equi_job_text(('"20ms"', '"20ms"'), predicate=PREDICATES[pred], run="batch_size = 200")
        path, job = write_job(str(tmp_path / f"j{n}"), text, random_streams(np.random.default_rng(2), 3000))
        p = run_mpi(2, "run", path, env=env, timeout=120)     # every rank compiles: the fewest that run
        assert p.returncode == 0, p.stderr
        said = re.findall(r"mpi-join: compiled (\d+) numba kernels for this job before the replay", p.stderr)
        compiled.append(int(said[0]) if said else 0)
        assert len(said) <= 1, p.stderr
        s = json.loads(open(os.path.join(job.output, "metrics", "summary.json")).read())
        assert [r["compiled_during_replay"] for r in s["ranks"]] == [0, 0], p.stderr
    # the first run compiled and said so; the second loaded everything from the cache; a theta
    # UDF's kernels cannot be cached: compiled on every run, and only they once the rest is cached
    assert compiled[0] > 0 and compiled[1] == 0, compiled
    assert compiled[2] >= compiled[3] > 0 and compiled[3] < compiled[0], compiled


def test_compiles_and_gc_pauses_are_counted_per_rank_thread():
    """Under `run --local` every rank is a thread of one process: each rank's compile count and
    garbage-collector pauses are its own thread's, not the process's (jit.py)."""
    import gc
    import threading
    import numba
    from mpi_join.join.jit import Compiles, GcPauses
    Compiles.install()
    seen = {}

    def rank(name, work):
        GcPauses.install()
        before = Compiles.mine()[0]
        work()
        seen[name] = (Compiles.mine()[0] - before, GcPauses.stats()["gc_collections"])

    def compile_and_collect():
        numba.njit(lambda x: x + 1)(np.int64(1))      # a new function: compiled, never cached
        gc.collect()
        gc.collect()

    for name, work in (("compiles", compile_and_collect), ("idle", lambda: None)):
        t = threading.Thread(target=rank, args=(name, work))
        t.start()
        t.join()
    assert seen["compiles"][0] >= 1 and seen["compiles"][1] >= 2, seen      # compiling collects too
    assert seen["idle"] == (0, 0), seen
