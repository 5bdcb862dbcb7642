"""HDF5 checkpoints: state round trips, validation, and exactly-once restart after SIGKILL."""
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
from mpi_join import strategies
import pytest

from mpi_join.storage import checkpoint as ck
from mpi_join.errors import ConfigError, InputError
from mpi_join.master.hash_router import route
from mpi_join.master.source import Source
from mpi_join.join.oracle import run_oracle
from mpi_join.master.hash_router import PartitionMap
from mpi_join.partitioning import Partitioner
from mpi_join.storage.results import read_results
from mpi_join.slaves.hash_join import HashJoinCore
from mpi_join.join.window import runtime_dtype
from conftest import cli, equi_job_text, mpi_join_cmd, mpi_join_pids, MPIEXEC, random_streams, run_local, run_mpi, with_text_columns, write_job
from reference import assert_same_rows

STRATEGY = "hash"   # whose time budget this file's tests count against (conftest.py)
CKPT = '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = {n}\nkeep = 2\n'


def test_module_state_survives_hdf5_round_trip(tmp_path):
    """Stop after some epochs, save every slave's module to HDF5, load into new modules, go on:
    the union of results equals the oracle (nothing lost or repeated across the cut)."""
    text = equi_job_text(('"6ms"', "5"), keys=2, run="batch_size = 37")
    arrays = random_streams(np.random.default_rng(9), 1500, key_range=5)
    path, job = write_job(str(tmp_path), text, arrays)
    part = Partitioner(job, 13)
    pmap = PartitionMap(13, [1, 2, 3])
    src = Source(job, arrays=arrays, annotate=lambda b, i: b.__setitem__("_h", part.hashes(part.keys(b, i))))
    dts = [runtime_dtype(s.dtype) for s in job.streams]
    mods = {s: HashJoinCore(part, dts, "index", theta=2, block_bytes=256) for s in pmap.slaves}
    out, epoch = [], 0
    while not src.done:
        if epoch == 17:
            assert sum(m.buckets() for m in mods.values()) > 13     # fine tuning has split groups
            for s, m in mods.items():
                snap, state = m.snapshot()
                ck.write_rank(str(tmp_path / "c"), 0, s, snap, dict(state, epoch=epoch))
            mods = {s: HashJoinCore(part, dts, "bnl", theta=2, block_bytes=256) for s in pmap.slaves}
            for s, m in mods.items():
                arr, attrs = ck.read_rank(str(tmp_path / "c"), 0, s, lambda n, _: m.state_dtype(n))
                assert attrs["epoch"] == 17
                m.restore(arr, attrs)
                for g in m.groups.values():
                    g.check()
        b = src.next_epoch()
        for s, parts in route(b, part, pmap).items():
            sa, sb, _ = mods[s].on_epoch(src.bounds(), parts)
            out.append(np.stack([sa, sb], axis=1))
        epoch += 1
    got = np.concatenate(out)
    assert_same_rows(got, run_oracle(job, arrays))


def test_read_rank_refuses_wrong_dtype_and_damage(tmp_path):
    root = str(tmp_path)
    ck.write_rank(root, 3, 1, {"window/0/5": np.zeros(4, [("seq", "i8"), ("x", "f4")])}, {"a": 1})
    with pytest.raises(InputError, match=r"array 'window/0/5' has dtype .* this job needs"):
        ck.read_rank(root, 3, 1, lambda n, _: np.dtype([("seq", "i8"), ("x", "f8")]) if n.startswith("window/") else None)
    with pytest.raises(InputError, match="unexpected array 'window/0/5'"):
        ck.read_rank(root, 3, 1, lambda n, _: np.dtype("i8") if n == "other" else None)
    f = ck.rank_file(root, 3, 1)
    with open(f, "r+b") as h:
        h.truncate(os.path.getsize(f) // 2)
    with pytest.raises(InputError, match=r"rank-0001.h5: damaged checkpoint file"):
        ck.read_rank(root, 3, 1)
    with pytest.raises(InputError, match="checkpoint file of rank 2 is missing"):
        ck.read_rank(root, 3, 2)


# every column type a job file accepts (schema.py), array columns included
EVERY_TYPE = {"i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16",
              "u32": "uint32", "u64": "uint64", "f32": "float32", "f64": "float64", "b": "bool",
              "c": "char36", "s": "string", "a": "uint8[5,3]", "v": "float64[4]"}


def test_every_column_type_survives_a_checkpoint_round_trip(tmp_path):
    """Issue: h5py reads a fixed-width bytes field back with metadata in its dtype, and the
    checksum over the dtype's description never matched: no job with a text column could be
    resumed. Checks every column type the job file accepts, as a stream's window rows (with the
    runtime columns), as read back through the dtype check a restore applies."""
    from mpi_join.schema import stream_dtype
    dt = runtime_dtype(stream_dtype(EVERY_TYPE, "streams.R", {"s": 7}))
    rng = np.random.default_rng(3)
    a = np.zeros(50, dt)
    for name in dt.names:
        raw = rng.integers(0, 256, len(a) * dt[name].itemsize, dtype=np.uint8)
        a[name] = raw.view(dt[name].base).reshape(a[name].shape) if dt[name].kind != "S" else \
            [bytes(rng.integers(97, 123, dt[name].itemsize, dtype=np.uint8)) for _ in a]
    a["b"] = rng.integers(0, 2, len(a)).astype(bool)
    a["c"][3] = b"x\xffy"          # any bytes, as staged
    a["f64"][4] = np.nan
    ck.write_rank(str(tmp_path), 0, 1, {"window/0": a, "empty": a[:0]}, {"k": "v"})
    got, attrs = ck.read_rank(str(tmp_path), 0, 1, lambda n, _: dt)
    assert attrs == {"k": "v"}
    assert got["window/0"].dtype == dt and len(got["empty"]) == 0
    assert got["window/0"].tobytes() == a.tobytes()


def _two_checkpoints(root):
    """Checkpoints 0 and 1 of two ranks, each complete with a manifest, as a run writes them."""
    for cid in (0, 1):
        cut = f"cut{cid}"
        digests = {str(r): ck.write_rank(root, cid, r, {"w": np.arange(cid + 3)}, {"c": cid}, cut) for r in (0, 1)}
        ck.write_manifest(root, cid, {"cut": cut, "rank_files": digests})


def test_a_rank_file_belongs_to_its_checkpoint(tmp_path):
    """Issue: rank-0001.h5 copied from checkpoint 0 into checkpoint 1 was accepted (the resume
    then hung), and an edited `checkpoint` attribute went unnoticed. Checks the copy, the edit,
    and a file written for another cut with the right id, each refused naming the file."""
    import h5py
    root = str(tmp_path)
    _two_checkpoints(root)
    assert ck.read_rank(root, 1, 1, manifest="auto")[1] == {"c": 1}
    shutil.copy(ck.rank_file(root, 0, 1), ck.rank_file(root, 1, 1))
    with pytest.raises(InputError, match=r"ckpt-000001/rank-0001.h5: rank file of checkpoint 0, not of checkpoint 1"):
        ck.read_rank(root, 1, 1, manifest="auto")
    with h5py.File(ck.rank_file(root, 1, 1), "r+") as f:
        f.attrs["checkpoint"] = 1
    with pytest.raises(InputError, match=r"rank-0001.h5: its checkpoint id, rank or cut fails its checksum"):
        ck.read_rank(root, 1, 1, manifest="auto")
    ck.write_rank(root, 1, 1, {"w": np.arange(4)}, {"c": 1}, "another cut")
    with pytest.raises(InputError, match=r"rank-0001.h5: not the rank file checkpoint 1's manifest recorded"):
        ck.read_rank(root, 1, 1, manifest="auto")


def _slow_job(tmp_path, n=24000, every=2000, extra=""):
    text = equi_job_text(('"30ms"', "40"), run='batch_size = 400\nrate = 4000\nflush_interval = "20ms"',
                         extra_strategy=extra)
    text += CKPT.format(n=every)
    arrays = random_streams(np.random.default_rng(21), n, key_range=30, ts_step=2)
    return write_job(str(tmp_path), text, arrays) + (arrays,)


def _rank_pid(rank, marker):
    pids = mpi_join_pids([d for d in os.listdir("/proc") if d.isdigit()], rank, marker)
    return pids[0] if pids else None


def kill_local_after_checkpoints(path, root, ranks, checkpoints, total, args=()):
    """`mpi-join run --local -n ranks` (with `args`) as its own process, SIGKILLed once
    `checkpoints` more checkpoints are complete (before the input's end), as a crash of the
    machine or of the process would end it; returns the finished process. Where which rank
    dies does not matter (what a checkpoint holds, what a resume reads), the in-process runtime
    shows it with one process instead of a process per rank."""
    return fault_after_checkpoints(mpi_join_cmd("run", "--local", "-n", str(ranks), path, *args), root,
                                   checkpoints, total, None)[0]


def crash_then_resume(path, job, ranks, total):
    """kill_then_resume's in-process twin: the whole job crashes after two checkpoints (its one
    process SIGKILLed), then `--resume` runs it to the end in process."""
    p = kill_local_after_checkpoints(path, job.checkpoint.dir, ranks, 2, total)
    assert p.returncode == -signal.SIGKILL and not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    r = run_local(ranks, "run", unpaced(path), "--resume", job.checkpoint.dir)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "resuming from checkpoint" in r.stderr


def kill_after_checkpoints(path, root, ranks, victim, checkpoints, total, args=()):
    """Run the job under mpiexec (with `args`, such as a --resume), SIGKILL rank `victim` once
    `checkpoints` more checkpoints are complete (before the input's end), and return the
    finished mpiexec process."""
    def kill():
        pid = _rank_pid(victim, path)
        assert pid, f"rank {victim} not found"
        os.kill(pid, signal.SIGKILL)
    return fault_after_checkpoints([MPIEXEC, "-n", str(ranks), *mpi_join_cmd("run", path, *args)], root, checkpoints,
                                   total, kill)[0]


def paced_checkpointed_job(tmp_path, strategy, predicate, total=16000, extra_strategy="", windows=('"60ms"', "50"),
                           run=""):
    """A job paced at 2,500 tuples/s per stream with a checkpoint every 1,500 tuples (so a kill
    lands mid-run, with work in flight), with a text column on each stream (a resume must read
    them back): (path, job, arrays)."""
    text = equi_job_text(windows, strategy=strategy, predicate=predicate, extra_strategy=extra_strategy,
                         run='batch_size = 40\nmax_inflight = 2\nrate = 2500\nflush_interval = "10ms"\n' + run)
    text += '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 1500\nkeep = 3\n'
    rng = np.random.default_rng(5)
    text, arrays = with_text_columns(text, random_streams(rng, total, key_range=20, ts_step=2), rng)
    return (*write_job(str(tmp_path), text, arrays), arrays)


def unpaced(path):
    """A copy of the job file beside it with rate = "max": the pace is there so that a kill lands
    mid-run, and a resume need not wait for it (the replay rate is not part of what a
    checkpoint belongs to, so resuming at another rate is allowed)."""
    import re
    other = os.path.join(os.path.dirname(path), "job-unpaced.toml")
    with open(path) as f, open(other, "w") as g:
        g.write(re.sub(r"(?m)^(\s*)rate = \d+$", r'\1rate = "max"', f.read()))
    return other


def kill_then_resume(path, job, ranks, victim, total, checkpoints=2, paced_resume=False):
    """SIGKILL rank `victim` after `checkpoints` checkpoints: the run fails and writes no
    _SUCCESS; `--resume` from the newest checkpoint then completes it (the caller checks the
    results), as fast as it can unless `paced_resume` (a test of what the pace decides, such as
    scaling by load, keeps it)."""
    p = kill_after_checkpoints(path, job.checkpoint.dir, ranks, victim, checkpoints, total)
    assert p.returncode != 0
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    # the resume in process (conftest.run_local: the same ranks' code; the kill under mpiexec is
    # what only processes show), under mpiexec where its pace decides what is tested
    r = (run_mpi if paced_resume else run_local)(ranks, "run", path if paced_resume else unpaced(path), "--resume",
                                                   job.checkpoint.dir)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "resuming from checkpoint" in r.stderr


def fault_after_checkpoints(cmd, root, checkpoints, total, fault, timeout=60, env=None):
    """Launch the command line `cmd`, call `fault()` (None: SIGKILL the launched process) once
    `checkpoints` checkpoints more than `root` held are complete (before the input's end), and return (the finished process,
    seconds from the fault to its end, its stderr). A launch still running `timeout` s after the
    fault is killed."""
    def complete():
        return [(c, m) for c, m in ck.list_checkpoints(root) if m] if os.path.isdir(root) else []
    before = max([c for c, _ in complete()], default=0)       # a resumed run numbers on from its checkpoint
    env = dict(env or os.environ, MPI_JOIN_QUIET="1")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        done = []
        while len(done) < checkpoints and time.time() < deadline:
            assert p.poll() is None, f"the run ended before its checkpoint number {checkpoints}: {p.communicate()[1][-2000:]}"
            time.sleep(0.05)
            done = [m for c, m in complete() if c > before]
        assert done and done[-1]["input_offset"] < total, "no checkpoint in the middle of the run"
        fault() if fault is not None else p.send_signal(signal.SIGKILL)
        t = time.time()
        err = p.communicate(timeout=timeout)[1]
        return p, time.time() - t, err
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()


@pytest.mark.parametrize("extra", ["", 'reorganize_every = 1\nforce = "migrate"'], ids=["plain", "migrating"])
def test_sigkill_a_slave_then_resume_exactly_once(tmp_path, extra):
    """Also with a migration at every reorganisation, so moves start right after cuts (a
    supplier's urgent move must not overtake a queued marker: worker._marker_queued)."""
    path, job, arrays = _slow_job(tmp_path, extra=extra)
    root = job.checkpoint.dir
    p = kill_after_checkpoints(path, root, ranks=3, victim=2, checkpoints=1, total=24000)
    assert p.returncode != 0
    assert not os.path.exists(os.path.join(job.output, "_SUCCESS"))
    before = len(read_results(job.output, job.stream_names))
    r = run_local(3, "run", unpaced(path), "--resume", root)
    assert r.returncode == 0, r.stderr
    assert "resuming from checkpoint" in r.stderr
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    assert_same_rows(got, expect)
    summary = json.loads(open(os.path.join(job.output, "metrics", "summary.json")).read())
    assert summary["resumed_from"]["input_offset"] > 0
    assert before > 0


@pytest.mark.parametrize("strategy,ranks", [("hash", 3), ("matrix", 5)])
def test_a_crash_then_resume_with_text_columns(tmp_path, strategy, ranks):
    """Issue: no job with a text column could be resumed (every rank file failed its checksum).
    A text column on each stream, the job crashed after two checkpoints, --resume: exact. (What
    the rank files hold does not depend on which rank dies: in process; the other strategies
    kill a rank under mpiexec with text columns in their own files.)"""
    path, job, arrays = paced_checkpointed_job(tmp_path, strategy, None)
    crash_then_resume(path, job, ranks, total=16000)
    got = read_results(job.output, job.stream_names)
    assert_same_rows(got, run_oracle(job, arrays))


@pytest.mark.parametrize("strategy,ranks,outer", [("hash", 3, ""), ("llhj", 4, ""), ("hash", 4, 'outer = ["R", "S"]')])
def test_a_crash_then_resume_of_a_shifted_interval(tmp_path, strategy, ranks, outer):
    """A shifted interval (S 5 to 40 ms after R): its residual condition is part of the job a
    checkpoint belongs to, and a resumed run gives exactly the oracle's pairs; as a full outer
    join, whether each window row has met a partner is part of the checkpoint (in process, as
    what a checkpoint holds does not depend on which rank dies)."""
    pred = ('equi = [["R.k", "S.k"]]\n'
            'interval = { left = "R", right = "S", lower = "5ms", upper = "40ms", closed = "both" }\n' + outer)
    path, job, arrays = paced_checkpointed_job(tmp_path, strategy, pred, windows=None)
    assert job.predicate.interval and bool(job.predicate.outer) == bool(outer)
    crash_then_resume(path, job, ranks, total=16000)
    got = read_results(job.output, job.stream_names)
    expect = run_oracle(job, arrays)
    assert len(expect)
    assert_same_rows(got, expect)


def _parallel_cases():
    """Every strategy of two streams, k = 2 and 3, time and count windows, each role killed in turn."""
    cases = []
    for n in strategies.names():
        info = strategies.get(n)
        if info.testing or info.streams[0] > 2:
            continue
        workers = max(info.min_ranks - 1, 3 if info.shape == "chain" else 1)     # a chain's three roles
        for i, k in enumerate((2, 3)):
            cases.append((n, k, workers, "time" if i == 0 else "count"))
    return cases


@pytest.mark.parametrize("strategy,k,workers,kind", _parallel_cases())
def test_parallel_sources_sigkill_each_role_then_resume(tmp_path, strategy, k, workers, kind):
    """run.sources = k: a checkpoint is cut at a part boundary every source puts its marker at; a
    rank that gets a neighbour's marker copy first cuts there and records the input up to its own
    copy as channel state, resuming at that copy's part. Each role in turn (an extra source, every
    worker role: a chain's ends and its middle, a dispatcher, a merger) killed after two
    checkpoints, --resume with the same k: exactly the oracle's pairs, each once, time and count
    windows (another k: tests/test_key_groups.py). The kills are a chain: each resume (paced) is
    the run the next victim is killed in, one checkpoint after it starts, and only the last runs
    to the end, so a checkpoint of a resumed run is resumed too."""
    ranks = 1 + workers + k - 1
    windows = ('"60ms"', '"40ms"') if kind == "time" else ("50", "70")
    path, job, arrays = paced_checkpointed_job(tmp_path, strategy, None, run=f"sources = {k}\npart = 300",
                                               windows=windows, total=12000)
    expect = run_oracle(job, arrays)
    graph = strategies.get(strategy).build_graph(ranks, job.strategy.params, k)
    roles = {}
    for v in graph.vertices:
        if v.role != "driver":
            roles.setdefault(v.role, []).append(v.rank)
    victims = sorted({f"{role}@{r}" for role, rs in roles.items() for r in ([rs[-1]] if role == "source" else rs)})
    assert len(victims) >= 2 and any(v.startswith("source@") for v in victims), roles
    victims = victims[k % 2::2]                           # the two cases of a strategy kill every role between them
    offsets = []
    for n, victim in enumerate(victims):
        resume = ("--resume", job.checkpoint.dir) if n else ()
        p = kill_after_checkpoints(path, job.checkpoint.dir, ranks, int(victim.split("@")[1]), 1 if n else 2, 12000,
                                   resume)
        assert p.returncode != 0 and not os.path.exists(os.path.join(job.output, "_SUCCESS")), victim
        man = [m for _, m in ck.list_checkpoints(job.checkpoint.dir) if m][-1]
        assert man["sources"] == k and man["part_rows"] == 320, "parts of 300 tuples, rounded up to batches of 40"
        assert man["input_offset"] % 320 == 0 and man["input_offset"] > 0, "cut at a part boundary"
        offsets.append(man["input_offset"])
    assert offsets == sorted(set(offsets)), f"each resumed run went past its checkpoint before its kill: {offsets}"
    r = run_local(ranks, "run", unpaced(path), "--resume", job.checkpoint.dir)
    assert r.returncode == 0 and "resuming from checkpoint" in r.stderr, f"{victims}: " + r.stderr
    got = read_results(job.output, job.stream_names)
    assert_same_rows(got, expect, f"{victims}: ")


BAND = 'equi = [["R.k", "S.k"]]\nband = [{left = "R.v", right = "S.w", eps = 0.3}]'


@pytest.mark.parametrize("strategy,kind,predicate,extra,chain", [
    ("hash", "count", BAND, "", ((4, 2), (6, 5), 2)),
    ("matrix", "time", None, "", ((4, 2), (6, 5), 2)),
    ("biclique", "time", BAND, "dispatchers = 2", ((6, 4), (8, 7), 5)),
    ("splitjoin", "count", None, 'punctuation = "comparisons"\ninterval = 2', ((5, 3), (7, 6), 3)),
    ("handshake", "time", BAND, "", ((4, 2), (6, 3), 2)),
    ("llhj", "count", None, "", ((4, 3), (6, 2), 2)),
    ("psp", "time", BAND, "", ((4, 2), (6, 4), 2))],
    ids=["hash-count-band", "matrix-time-equi", "biclique-time-band", "splitjoin-count-equi", "handshake-time-band",
         "llhj-count-equi", "psp-time-band"])
def test_a_checkpoint_resumes_at_other_rank_counts_exactly_once(tmp_path, strategy, kind, predicate, extra, chain):
    """A run on P ranks SIGKILLed after two checkpoints, resumed at P+2 and SIGKILLed after a
    checkpoint of its own, then resumed from that one at P-2 in process (biclique: P-1, its fewest with two
    dispatchers) to the end: every restore takes the state out of the files of the rank count
    before (hash: whole key groups, partitioning/key_groups.py; matrix: each stored tuple to its
    row or column of the new grid; biclique: each stored tuple to its unit by the routing of a
    start, a unit's channel state joined as it restores; splitjoin: each stored tuple to the
    core its count gives, the flows the mergers held written as the combiner restores;
    handshake and llhj: the old chain carried to rest in process, its segments laid along the
    new one, handshake's that fall together joined; psp: every stored tuple to the new head,
    the first batch's purges carrying each to its slice); the result is the oracle's, each pair once. (P+1 and P-1: tests/test_key_groups.py, in process; live, 3 to 5 to 3:
    tests/test_live.py.)"""
    windows = ('"60ms"', '"40ms"') if kind == "time" else ("50", "70")
    path, job, arrays = paced_checkpointed_job(tmp_path, strategy, predicate, windows=windows, total=20000,
                                               extra_strategy=extra)
    assert bool(job.predicate.band) == bool(predicate)
    root, offsets = job.checkpoint.dir, []
    for n, (ranks, victim) in enumerate(chain[:2]):
        p = kill_after_checkpoints(path, root, ranks, victim, 1 if n else 2, 20000, ("--resume", root) if n else ())
        assert p.returncode != 0 and not os.path.exists(os.path.join(job.output, "_SUCCESS"))
        man = [m for _, m in ck.list_checkpoints(root) if m][-1]
        assert man["ranks"] == ranks
        offsets.append(man["input_offset"])
        if n == 1 and strategy == "hash":     # the plan of the next restore, as the map at this cut gives it
            from mpi_join.partitioning.key_groups import reassign
            from mpi_join.partitioning.restore_plan import layout
            owner = layout(root, max(c for c, m in ck.list_checkpoints(root) if m))[2]
            moved = int((reassign(owner, [1]) != owner).sum())
            plan = cli("checkpoint", "inspect", root, "-n", "2")
            assert f"at 2 ranks (1 worker): would move {moved} of 60 key groups" in plan.stdout, plan.stdout
    assert offsets == sorted(set(offsets)), f"each resumed run went past its checkpoint before its kill: {offsets}"
    # the last resume in process (the same ranks' code): the one before it rescaled under mpiexec
    r = run_local(chain[2], "run", unpaced(path), "--resume", root)
    assert r.returncode == 0 and "resuming from checkpoint" in r.stderr, r.stderr
    expect = run_oracle(job, arrays)
    assert len(expect) > 500
    assert_same_rows(read_results(job.output, job.stream_names), expect)


def _test_strategies_that_rescale():
    """The registry's test strategies that resume at another rank count, each on a predicate it
    takes (a band for one that requires it)."""
    return [pytest.param(n, 'band = [{left = "R.v", right = "S.w", eps = 0.3}]' if "band" in strategies.get(n).requires
                         else None, id=n) for n in strategies.names()
            if strategies.get(n).testing and strategies.get(n).rescale]


@pytest.mark.parametrize("strategy,predicate", _test_strategies_that_rescale())
def test_a_test_strategy_with_no_restore_code_resumes_at_other_rank_counts(tmp_path, strategy, predicate):
    """A strategy whose edges route by their placement and whose cores end in the runtime's sink
    (tests/broadcast_strategy.py, tests/stripe_strategy.py), with no restore code: SIGKILLed after
    checkpoints on P + 1 ranks (P its fewest; the victim its sink), resumed at P + 3 and killed
    again (rank 2), resumed at P to the end (in process): the oracle's result, each pair once."""
    path, job, arrays = paced_checkpointed_job(tmp_path, strategy, predicate, windows=('"60ms"', '"40ms"'),
                                               total=12000)
    root, fewest = job.checkpoint.dir, strategies.get(strategy).min_ranks
    for n, (ranks, victim) in enumerate(((fewest + 1, fewest), (fewest + 3, 2))):
        p = kill_after_checkpoints(path, root, ranks, victim, 1 if n else 2, 12000, ("--resume", root) if n else ())
        assert p.returncode != 0 and not os.path.exists(os.path.join(job.output, "_SUCCESS"))
        assert [m for _, m in ck.list_checkpoints(root) if m][-1]["ranks"] == ranks
    r = run_local(fewest, "run", unpaced(path), "--resume", root)    # the rescale under mpiexec: the one before
    assert r.returncode == 0 and "resuming from checkpoint" in r.stderr and "Traceback" not in r.stderr, r.stderr
    expect = run_oracle(job, arrays)
    assert len(expect) > 500
    assert_same_rows(read_results(job.output, job.stream_names), expect)


def test_a_checkpoint_resumes_at_other_run_sources_exactly_once(tmp_path):
    """hash, count windows, a band: run.sources = 2 on 5 ranks, the extra source SIGKILLed after
    two checkpoints; resumed with 3 sources on 6 ranks (the old graph carried to rest first,
    slaves/drain.py), a worker SIGKILLed after a checkpoint of its own; then finished with one
    source on 4 ranks: the oracle's result, each pair once."""
    windows = ("50", "70")
    path, job, arrays = paced_checkpointed_job(tmp_path, "hash", BAND, windows=windows, total=10000,
                                               run="sources = 2\npart = 320")
    root, offsets = job.checkpoint.dir, []
    for n, (k, ranks, victim) in enumerate(((2, 5, 4), (3, 6, 2))):
        path_k = path.replace("job.toml", f"job-{k}.toml")
        open(path_k, "w").write(open(path).read().replace("sources = 2", f"sources = {k}"))
        p = kill_after_checkpoints(path_k, root, ranks, victim, 1 if n else 2, 10000, ("--resume", root) if n else ())
        assert p.returncode != 0 and not os.path.exists(os.path.join(job.output, "_SUCCESS"))
        man = [m for _, m in ck.list_checkpoints(root) if m][-1]
        assert man["sources"] == k and man["ranks"] == ranks
        offsets.append(man["input_offset"])
    assert offsets == sorted(set(offsets)), f"each resumed run went past its checkpoint before its kill: {offsets}"
    one = path.replace("job.toml", "job-1.toml")
    open(one, "w").write(open(unpaced(path)).read().replace("sources = 2", "sources = 1"))
    r = run_mpi(4, "run", one, "--resume", root)
    assert r.returncode == 0 and "resuming from checkpoint" in r.stderr, r.stderr
    expect = run_oracle(job, arrays)
    assert len(expect) > 500
    assert_same_rows(read_results(job.output, job.stream_names), expect)


@pytest.mark.parametrize("strategy,extra,victim,moves", [
    ("hash", 'reorganize_every = 1\nforce = "migrate"', 2, True),
    ("psp", 'slice_counts = "40"', 1, False)], ids=["hash-moves", "psp-count-slices"])
def test_parallel_sources_sigkill_with_routing_state_then_resume(tmp_path, strategy, extra, victim, moves):
    """Two sources and routing state a resume must take from the checkpoint, a worker killed after
    two checkpoints, --resume: the result is the oracle's, each pair once.
    - hash, a move placed at every reorganisation: every source routes by the partition map at
      the cut (rank 0's router state, taken when its marker went out);
    - psp, count-bounded slices: the head sets their cuts (it sees every tuple; each source sees
      its parts), and its slicer is part of its checkpoint; the head is the one killed."""
    path, job, arrays = paced_checkpointed_job(tmp_path, strategy, None, run="sources = 2\npart = 300",
                                               extra_strategy=extra)
    kill_then_resume(path, job, ranks=5, victim=victim, total=16000)
    got = read_results(job.output, job.stream_names)
    assert_same_rows(got, run_oracle(job, arrays))
    if moves:
        moved = json.load(open(os.path.join(job.output, "metrics", "rank-0000.json")))["migrations"]
        assert moved, "moves after the resume too"


def test_resume_refuses_other_config_and_damage(tmp_path):
    """The refusals at start run in process (run_local): they come before any rank would. (Another
    rank count: tests/test_key_groups.py.)"""
    path, job, arrays = _slow_job(tmp_path, n=3000, every=500)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("rate = 4000", 'rate = "max"'))
    assert run_mpi(3, "run", path).returncode == 0
    root = job.checkpoint.dir
    listing = cli("checkpoint", "inspect", root)
    assert listing.returncode == 0 and listing.stdout.count(" yes ") == 2, listing.stdout
    with open(path, "w") as f:
        f.write(text.replace('rate = 4000', 'rate = "max"').replace('window = "30ms"', 'window = "31ms"'))
    p = run_local(3, "run", path, "--resume", root)
    assert p.returncode == 2 and "checkpoint was written by a different job configuration" in p.stderr
    with open(path, "w") as f:
        f.write(text.replace('rate = 4000', 'rate = "max"'))
    newest = max(c for c, m in ck.list_checkpoints(root) if m)
    with open(ck.rank_file(root, newest, 1), "wb") as h:
        h.write(b"not hdf5")
    p = run_mpi(3, "run", path, "--resume", root)      # the damaged newest one is skipped, and said so
    assert p.returncode == 0, p.stderr
    assert f"skipping checkpoint {newest} in {root}" in p.stderr and "damaged checkpoint file" in p.stderr
    got = read_results(job.output, job.stream_names)
    assert_same_rows(got, run_oracle(job, arrays))
    for c, m in ck.list_checkpoints(root):
        with open(ck.rank_file(root, c, 1), "wb") as h:
            h.write(b"not hdf5")
    p = run_local(3, "run", path, "--resume", root)      # none left: refused
    assert p.returncode == 2 and "no usable checkpoint" in p.stderr and "damaged checkpoint file" in p.stderr
    p = run_local(3, "run", path, "--resume", str(tmp_path / "nowhere"))
    assert p.returncode == 2 and "nowhere: checkpoint directory not found" in p.stderr


def test_checkpoint_config_errors(tmp_path):
    from mpi_join.config import load_job
    base = equi_job_text(('"5ms"', '"5ms"'))
    for snippet, msg in [('[checkpoint]\ndir = "c"', "give every_tuples, every"),
                         ('[checkpoint]\ndir = "c"\nevery_tuples = 0', "checkpoint.every_tuples: expected an integer in 1.."),
                         ('[checkpoint]\ndir = "c"\nevery = "never"', "checkpoint.every: cannot read duration")]:
        (tmp_path / "j.toml").write_text(base + snippet + "\n")
        with pytest.raises(ConfigError, match=msg):
            load_job(str(tmp_path / "j.toml"))


def test_two_sources_take_the_checkpoints_asked_for_and_inspect_and_the_summary_know_them(tmp_path):
    """run.sources = 2, a checkpoint every 1,500 tuples of 16,000 (paced): the cuts are spaced by
    every_tuples where they are placed (the first part no source has started), with parts small
    enough (every_tuples / (4k + 4)) for the 2k parts ahead and the cut's round trip: about 10
    taken (1 of 10 before, with parts of 1,500). `checkpoint inspect -n 6` plans for the 4 workers
    of 6 ranks with 2 sources (it planned for 5), and hash's summary lists no source as a slave."""
    from mpi_join.partitioning.restore_plan import plan
    from reference import assert_equals_oracle
    text = equi_job_text(('"60ms"', '"60ms"'), run='batch_size = 40\nmax_inflight = 2\nrate = 2500\n'
                                                   'flush_interval = "10ms"\nsources = 2\n')
    text += '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 1500\nkeep = 100\n'
    arrays = random_streams(np.random.default_rng(5), 16000, key_range=20, ts_step=2)
    path, job = write_job(str(tmp_path), text, arrays)
    p = run_mpi(6, "run", path, env={"MPI_JOIN_QUIET": ""})     # the summary printed too
    assert p.returncode == 0, p.stderr
    offsets = [ck.manifest_of(job.checkpoint.dir, c)[0]["input_offset"]
               for c, m in ck.list_checkpoints(job.checkpoint.dir) if m]
    assert len(offsets) >= 6, offsets                     # 10 asked for; a loaded machine may lose a few
    assert all(b - a >= 1500 for a, b in zip(offsets, offsets[1:])), offsets
    assert_equals_oracle(job, arrays)
    assert plan(job.checkpoint.dir, 6)["workers"] == 4 and plan(job.checkpoint.dir, 6, sources=1)["workers"] == 5
    share = [ln for ln in p.stdout.splitlines() + p.stderr.splitlines() if ln.startswith("share of tuples per slave")]
    assert share and "5:" not in share[0], share


def test_packed_arrays_read_back_by_name_and_a_changed_one_is_refused(tmp_path):
    """write_rank packs the 1-d arrays of one dtype into one dataset: each comes back by name
    (with `keep`, only those kept), a 2-d one stays a dataset of its own, entries() lists them
    all without reading, and a row edited inside the packed dataset fails that array's checksum."""
    import h5py
    root = str(tmp_path)
    rows = np.dtype([("seq", "<i8"), ("v", "<f8")])
    arrays = {f"module/g{i}": np.array([(i, 0.5), (i + 10, 1.5)], rows)[: i % 3] for i in range(7)}
    arrays.update({"module/n": np.arange(5), "module/grid": np.ones((2, 3))})
    ck.write_rank(root, 0, 1, arrays, {"c": 0}, "cut")
    got, attrs = ck.read_rank(root, 0, 1)
    assert attrs == {"c": 0} and sorted(got) == sorted(arrays)
    assert all(got[k].dtype == a.dtype and np.array_equal(got[k], a) for k, a in arrays.items())
    some, _ = ck.read_rank(root, 0, 1, keep=lambda n: n.endswith("g4"))
    assert list(some) == ["module/g4"] and np.array_equal(some["module/g4"], arrays["module/g4"])
    with h5py.File(ck.rank_file(root, 0, 1), "r") as f:
        assert {n: r for n, _, r in ck.entries(f)} == {k: len(a) for k, a in arrays.items()}
        assert np.array_equal(ck.one_array(f, "module/g2"), arrays["module/g2"])
        assert len(f["packed"]) == 2                    # one dataset per dtype, the 2-d array apart
    with h5py.File(ck.rank_file(root, 0, 1), "r+") as f:
        d = next(f["packed"][k] for k in f["packed"] if f["packed"][k].dtype.names)
        row = d[0]
        row["seq"] += 1
        d[0] = row
    with pytest.raises(InputError, match=r"array 'module/g1' fails its checksum"):
        ck.read_rank(root, 0, 1)
