"""`psp` under real mpiexec: M = 2, 3 and 4 on rings of 1 to 4 operators, basic PSP and PSP-I,
equi, band and UDF predicates, a relocation forced mid-run; checkpoints hold each stored tuple on
exactly one operator, and a SIGKILL then --resume gives exactly the oracle's result. (Every
window kind and predicate of the binary case: test_strategies_local.py.)"""
import os

import numpy as np
import pytest

from mpi_join.storage import checkpoint as ck
from mpi_join.storage.staged import write_staged
from conftest import run_mpi, run_local, text_columns, write_job
from reference import assert_equals_oracle
from test_checkpoint import kill_after_checkpoints, unpaced
from test_psp_ring import MULTI, multiway_streams

SLOW = True
STRATEGY = "psp"   # whose time budget this file's tests count against (conftest.py)
# budget: about 45 s of mpiexec runs in this file


def _job(tmp, m, n=3000, strategy="", run="batch_size = 40\nmax_inflight = 2", ckpt="", windows=None, text=False):
    """With `text`, each stream has a text column `tag` (char5)."""
    windows = windows or ['"40ms"', '"25ms"', '"60ms"', '"30ms"'][:m]
    tag = ', tag = "char5"' if text else ""
    streams = "".join(f'[streams.{s}]\nschema = {{ k = "int32", v = "float32", w = "float32"{tag} }}\nwindow = {x}\n'
                      for s, x in zip("ABCD", windows))
    pred = MULTI[m] if m > 2 else 'equi = [["A.k", "B.k"]]'
    text = (f'[job]\nname = "m{m}"\nts_unit = "ms"\n[input]\nstaged = "staged"\n[output]\ndir = "out"\n{streams}'
            f'[predicate]\n{pred}\n'
            f'[strategy]\nname = "psp"\n{strategy}\n[run]\n{run}\n{ckpt}')
    rng = np.random.default_rng(m * 7 + n)
    arrays = multiway_streams(rng, m, n, key_range=5)
    if text:
        arrays = text_columns(arrays, rng, [("tag", 5)] * m)
    path, job = write_job(str(tmp), text)
    write_staged(job.staged, job.streams, arrays, job.ts_unit)
    return path, job, arrays


def _check(job, arrays):
    assert_equals_oracle(job, arrays)
    assert os.path.exists(os.path.join(job.output, "_SUCCESS"))


@pytest.mark.parametrize("m,ops,interleave", [(2, 3, 1), (3, 1, 1), (3, 2, 4), (3, 4, 1), (4, 3, 4), (4, 4, 1)])
def test_multiway_ring_equals_oracle(tmp_path, m, ops, interleave):
    path, job, arrays = _job(tmp_path, m, strategy=f"interleave = {interleave}")
    p = run_local(ops + 1, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    _check(job, arrays)


@pytest.mark.parametrize("mode", ["passive", "aggressive"])
def test_relocation_forced_mid_run_equals_oracle(tmp_path, mode):
    """At epoch 20 the head's slice goes to 0 and the tail's grows (an operator leaves the
    ring's state; the other way round it would join it)."""
    path, job, arrays = _job(tmp_path, 3, strategy=f'interleave = 2\nforce_relocate = "20:0,1,3:{mode}"')
    p = run_local(4, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    _check(job, arrays)
    import json
    s = json.load(open(os.path.join(job.output, "metrics", "summary.json")))
    assert s["ranks"][0]["relocations"] == [[20, [0.0, 1.0, 3.0], mode]]


def _held(root, cid, ranks, M):
    out = {j: [] for j in range(M)}
    for r in range(1, ranks):
        arrays, _ = ck.read_rank(root, cid, r)
        for j in range(M):
            out[j].append(arrays[f"module/slice/{j}"]["seq"])
    return out


def test_checkpoints_hold_each_tuple_once_and_sigkill_resume_is_exact(tmp_path):
    """With a text column on every stream (a resume reads them back from HDF5)."""
    run = 'batch_size = 60\nmax_inflight = 2\nrate = 3000\nflush_interval = "10ms"'
    ckpt = '[checkpoint]\ndir = "ckpt"\nevery_tuples = 1500\nkeep = 10'
    path, job, arrays = _job(tmp_path, 3, n=15000, strategy="interleave = 3", run=run, ckpt=ckpt,
                             windows=['"80ms"', '"60ms"', '"100ms"'], text=True)
    root = job.checkpoint.dir
    p = kill_after_checkpoints(path, root, ranks=4, victim=2, checkpoints=2, total=15000)
    assert p.returncode != 0
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    done = [(c, m) for c, m in ck.list_checkpoints(root) if m]
    assert done
    for cid, man in done:
        held = _held(root, cid, 4, 3)
        for j, parts in held.items():
            seqs = np.concatenate(parts)
            assert len(seqs) == len(np.unique(seqs)), f"checkpoint {cid}: a tuple of stream {j} is stored twice"
        assert sum(len(x) for x in held[0][1:]) > 0, "the tail's slices hold nothing: the test proves little"
    r = run_local(4, "run", unpaced(path), "--resume", root)
    assert r.returncode == 0, r.stderr
    assert "resuming from checkpoint" in r.stderr
    _check(job, arrays)


@pytest.mark.alone      # the decision follows measured load, which does not hold beside another run
def test_measured_load_moves_state_off_a_slow_operator(tmp_path):
    """The head burns CPU for every probe x held pair; with adapt_every, the driver reads the
    operators' loads and narrows the head's slice (smoothing), and the result stays exact."""
    path, job, arrays = _job(tmp_path, 3, n=4000, windows=['"200ms"', '"150ms"', '"250ms"'],
                             strategy='adapt_every = 4\nslow_rank = 1\nslow_cpu = 2.0\nrelocation = "aggressive"')
    p = run_mpi(4, "run", path)
    assert p.returncode == 0, p.stderr + p.stdout
    _check(job, arrays)
    import json
    s = json.load(open(os.path.join(job.output, "metrics", "summary.json")))
    rel = s["ranks"][0]["relocations"]
    assert rel, "no relocation although the head was the busiest operator"
    first = rel[0][1]
    assert first[0] < min(first[1:]), rel[:3]
    held = {r["rank"]: r["window_tuples"] for r in s["ranks"] if r["rank"] > 0}
    assert held[1] < held[3], held
