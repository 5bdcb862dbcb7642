"""Key groups (partitioning/key_groups.py): a restore's reassignment of whole groups to another
number of workers, and the plan `checkpoint inspect --ranks N` prints from a real checkpoint."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpi_join.partitioning.key_groups import group_of, moves, reassign
from conftest import cli, equi_job_text, random_streams, run_local, write_job


def _fewest_moves(owner, workers):
    """The fewest groups any even reassignment moves: each worker keeps at most its share, and
    the larger shares are best given to those holding the most."""
    g, w = len(owner), len(workers)
    base, extra = divmod(g, w)
    held = sorted((int((np.asarray(owner) == x).sum()) for x in workers), reverse=True)
    return g - sum(min(h, base + (k < extra)) for k, h in enumerate(held))


@settings(max_examples=200, deadline=None)
@given(groups=st.integers(1, 90), old=st.integers(1, 9), new=st.integers(1, 9), seed=st.integers(0, 1000))
def test_reassign_is_even_moves_the_fewest_groups_and_keeps_the_rest(groups, old, new, seed):
    rng = np.random.default_rng(seed)
    owner = rng.integers(1, old + 1, groups)              # any map a migration can leave behind
    workers = list(range(1, new + 1))
    got = reassign(owner, workers)
    counts = [int((got == w).sum()) for w in workers]
    assert set(got.tolist()) <= set(workers) and max(counts) - min(counts) <= 1
    assert int((got != owner).sum()) == _fewest_moves(owner, workers)
    assert np.array_equal(reassign(owner, workers), got)  # every rank computes the same plan
    gone = ~np.isin(owner, workers)
    assert (got[gone] != owner[gone]).all()               # a group whose owner left moves


def test_reassign_at_the_same_count_moves_nothing_and_scale_out_takes_an_even_share_from_each():
    owner = np.array([1 + p % 3 for p in range(60)])     # dealt round-robin at start
    assert np.array_equal(reassign(owner, [1, 2, 3]), owner)
    got = reassign(owner, [1, 2, 3, 4, 5])
    assert [int((got == w).sum()) for w in range(1, 6)] == [12] * 5
    assert int((got != owner).sum()) == 24 and all(int(((got != owner) & (owner == w)).sum()) == 8 for w in (1, 2, 3))
    down = reassign(owner, [1, 2])
    assert np.array_equal(down[owner != 3], owner[owner != 3]) and int((down != owner).sum()) == 20
    with pytest.raises(ValueError):
        reassign(owner, [])


def test_moves_counts_rows_and_bytes_of_the_groups_that_change_owner():
    assert group_of("module/windows/group/17/0/1") == 17 and group_of("module/windows/x") is None
    m = moves([1, 1, 2], [1, 2, 2], {0: (5, 50), 1: (3, 30), 2: (7, 70)})
    assert m == {"groups": 1, "of_groups": 3, "rows": 3, "bytes": 30, "of_rows": 15, "of_bytes": 150}


def test_checkpoint_inspect_plans_a_restore_at_other_rank_counts(tmp_path):
    """A real checkpoint of hash (in process): the plan's rows are those of the rank files'
    groups whose owner changes; at the checkpoint's own rank count nothing moves."""
    text = equi_job_text(('"40ms"', '"40ms"'), run="batch_size = 20") + \
        '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 400\nkeep = 2\n'
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(2), 2000, key_range=50))
    assert run_local(4, "run", path).returncode == 0
    from mpi_join.partitioning.restore_plan import layout, plan
    ckpt = job.checkpoint.dir
    same = plan(ckpt, 4)
    assert same["keyed"] and same["groups"] == 0 and same["rows"] == 0 and same["of_rows"] > 0
    sizes, held, owner, _ = layout(ckpt, same["checkpoint"])
    assert len(owner) == 60 and all(owner[g] == r for g, r in held.items())
    out = reassign(owner, [1, 2, 3, 4, 5])
    p = plan(ckpt, 6)
    # 24 from the even layout; a reorganisation during the run (the router measures load, which a
    # busy machine changes) leaves another layout, whose moves are counted the same way
    moved = sum(1 for g in range(len(owner)) if out[g] != owner[g])
    assert p["groups"] == moved > 0 and p["rows"] == sum(sizes[g][0] for g in held if out[g] != owner[g]) > 0
    r = cli("checkpoint", "inspect", ckpt, "-n", "6", "-n", "4")
    assert r.returncode == 0, r.stderr
    assert f"at 6 ranks (5 workers): would move {moved} of 60 key groups, {p['rows']:,} of {p['of_rows']:,} rows" \
        in r.stdout
    assert "at 4 ranks (3 workers): would move 0 of 60 key groups" in r.stdout


def test_state_without_key_groups_is_planned_as_dealt_again_whole(tmp_path):
    text = equi_job_text(('"40ms"', '"40ms"'), strategy="splitjoin", run="batch_size = 20") + \
        '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 400\nkeep = 2\n'
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(2), 1000, key_range=50))
    assert run_local(4, "run", path).returncode == 0
    r = cli("checkpoint", "inspect", job.checkpoint.dir, "-n", "5", "-n", "4")
    assert r.returncode == 0, r.stderr
    from mpi_join.partitioning.restore_plan import plan
    p = plan(job.checkpoint.dir, 5)
    assert p["other_rows"] > 0 and p["ranks"] == 4
    assert (f"at 5 ranks (4 workers): its state holds no key groups; its strategy deals all of it again, "
            f"{p['other_rows']:,} stored tuples, {p['other_bytes'] / 1e6:.2f} MB") in r.stdout, r.stdout
    assert "at 4 ranks (3 workers): its state holds no key groups; its own rank count" in r.stdout, r.stdout


def test_a_restore_at_another_rank_count_is_refused_where_a_strategy_cannot_deal_its_state(tmp_path):
    """A strategy whose entry does not say `rescale` (the tests' broadcast-store: every shipped
    one does) resumes at its own rank count only, and with its own run.sources. One line each,
    before any rank starts."""
    for strategy, run, at in (("broadcast-store", "", 5), ("broadcast-store", "", 4)):
        d = tmp_path / strategy
        text = equi_job_text(('"40ms"', '"40ms"'), strategy=strategy, run="batch_size = 20\n" + run) + \
            '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 400\nkeep = 2\n'
        path, job = write_job(str(d / str(at)), text, random_streams(np.random.default_rng(2), 1500, key_range=50))
        assert run_local(4, "run", path).returncode == 0
        if at == 4:          # as many ranks, one of them another source
            text = open(path).read().replace("[run]\n", "[run]\nsources = 2\npart = 100\n")
            open(path, "w").write(text)
        r = run_local(at, "run", path, "--resume", job.checkpoint.dir)
        assert r.returncode == 2, r.stderr
        line = [x for x in r.stderr.splitlines() if "error" in x]
        if at == 4:
            assert len(line) == 1 and "was cut with run.sources = 1, this run has 2; 'broadcast-store' resumes only " \
                "with the same run.sources" in line[0], r.stderr
            continue
        assert len(line) == 1 and f"checkpoint holds 4 ranks, this run has {at}" in line[0], r.stderr
        assert ("'broadcast-store' resumes only at its checkpoint's rank count (its state is not dealt again at a "
                "restore; " in line[0] and "resume at another); resume with mpiexec -n 4" in line[0]), line
        named = line[0].split("at a restore; ")[1].split(" resume at another")[0].split(", ")
        assert sorted(named) == sorted(RESCALE), line


def _rescalable(testing=False):
    """The strategies whose registry entry says they resume at another rank count."""
    from mpi_join import strategies
    return tuple(n for n in strategies.names() if strategies.get(n).rescale and (testing or not strategies.get(n).testing))


RESCALE = _rescalable()
AGG = 'aggregate = "count(*), sum(S.w), max(R.v) by R.k"\nupdate_ms = 5'


BAND = 'band = [{left = "R.v", right = "S.w", eps = 0.05}]'


@pytest.mark.parametrize("strategy,windows,extra,p,predicate", [
    ("hash", ('"60ms"', '"60ms"'), "", 4, None), ("matrix", ("50", "70"), "", 5, BAND),
    ("biclique", ('"60ms"', '"40ms"'), "dispatchers = 2\n" + AGG, 7, None),
    ("biclique", ("50", "70"), 's_groups = 2\nr_units = 1', 6, None),
    ("splitjoin", ('"60ms"', '"40ms"'), "", 6, BAND),
    ("splitjoin", ("50", "70"), 'punctuation = "comparisons"\ninterval = 3\nfanout = 3', 7, None),
    ("handshake", ('"60ms"', '"40ms"'), "", 5, None),
    ("handshake", ("50", "70"), 'local_join = "index"', 4, None),
    ("llhj", ('"60ms"', '"40ms"'), "", 4, BAND),
    ("llhj", ("50", "70"), 'local_join = "index"', 5, None),
    ("psp", ('"60ms"', '"40ms"'), "", 4, None),
    ("psp", ("50", "70"), 'slice_counts = "balanced"\ninterleave = 3', 5, None)],
    ids=["hash", "matrix-band", "biclique-agg", "biclique-groups", "splitjoin-time-band", "splitjoin-count",
         "handshake-time", "handshake-count", "llhj-time-band", "llhj-count", "psp-time", "psp-count"])
def test_a_run_resumes_in_process_at_more_and_then_fewer_ranks(tmp_path, strategy, windows, extra, p, predicate):
    """The rescaled resume end to end on the in-process runtime (the same ranks' code as under
    mpiexec: tests/test_checkpoint.py kills and resumes there at P+2 and P-2): from a checkpoint
    of P ranks at P+1, then from that run's own newest checkpoint at P-1; each result once, and
    the files a worker took over are numbered past by its own. hash hands over key groups;
    matrix deals each stored tuple to its row or column of the new grid (2 x 2 cells, then 1 x 5,
    then 1 x 3); biclique deals stored tuples to the units of their side by the routing of a
    start (biclique/rescale.py): with two dispatchers and an aggregate (a unit's channel state
    joined as it restores; the merger's view and the units' unsent views merged: `verify`
    checks the final aggregate against the oracle's), and with S's units in two subgroups;
    every strategy meets both window kinds and, with its mpiexec case (test_checkpoint), equi
    and band joins;
    splitjoin deals each stored tuple to the core its count gives in the new tree, and the
    flows its mergers held are written as the combiner restores (splitjoin/rescale.py); the
    chains are carried to rest, then laid along the new chain (ring/chain_rescale.py); psp's
    head takes every stored tuple and the first batch's purges carry each to its slice
    (ring/psp_rescale.py)."""
    import os
    from mpi_join.join.oracle import run_oracle
    from mpi_join.storage import checkpoint as ck
    from mpi_join.storage.results import read_results
    from reference import assert_same_rows
    text = equi_job_text(windows, strategy=strategy, run="batch_size = 25", extra_strategy=extra, predicate=predicate) + \
        '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 500\nkeep = 50\n'
    arrays = random_streams(np.random.default_rng(4), 4000, key_range=40)
    path, job = write_job(str(tmp_path), text, arrays)
    assert run_local(p, "run", path).returncode == 0     # P
    expect = run_oracle(job, arrays)
    assert len(expect) > 100
    root = job.checkpoint.dir
    done = [c for c, m in ck.list_checkpoints(root) if m]
    for c in done[2:]:                           # resume from the middle: later checkpoints go
        import shutil
        shutil.rmtree(ck.ckpt_path(root, c))
    for ranks, was in ((p + 1, p), (p - 1, p + 1)):
        newest, man = [(c, m) for c, m in ck.list_checkpoints(root) if m][-1]
        assert man["ranks"] == was
        r = run_local(ranks, "run", path, "--resume", root)
        assert r.returncode == 0 and f"resuming from checkpoint {newest} " in r.stderr, r.stderr
        assert_same_rows(read_results(job.output, job.stream_names), expect)
        names = sorted(os.listdir(os.path.join(job.output, "results")))
        assert len(names) == len(set(names)) and all(n.startswith("part-r000") for n in names)
        if "aggregate" in extra:
            v = cli("verify", job.output, "--job", path)
            assert v.returncode == 0 and "the final one equals the oracle's aggregate" in v.stdout, v.stdout + v.stderr


def test_a_writer_numbers_past_its_own_files_among_those_it_took_over(tmp_path):
    """After rescaled restores a rank may hold its own part files with gaps (some numbers went to
    files it held then) and others' files: its next file is past its highest own number."""
    from mpi_join.storage.results import ResultWriter
    w = ResultWriter(str(tmp_path), 1, ["R", "S"])
    w.resume([["part-r0001-00000.parquet", 1, 1, "x"], ["part-r0001-00005.parquet", 1, 1, "x"],
              ["part-r0003-00007.parquet", 1, 1, "x"]])
    w.add([np.array([1]), np.array([2])], np.array([10]), np.array([1]))
    w.close()
    assert (tmp_path / "part-r0001-00006.parquet").exists()


def test_strategies_says_which_resume_at_another_rank_count():
    out = cli("strategies").stdout
    lines = {ln.split(":")[0]: ln for ln in out.splitlines() if ln and not ln.startswith(" ")}
    heads = {n: out.split(n + ":", 1)[1].split("\n", 2)[1] for n in lines}
    can = _rescalable(testing=True)
    assert set(RESCALE) < set(can) and all("resumes at another rank count" in heads[n] for n in can)
    assert not any("resumes at another" in h for n, h in heads.items() if n not in can)


@pytest.mark.parametrize("strategy,workers,extra", [
    ("hash", 4, ""), ("handshake", 3, ""), ("biclique", 4, ""), ("biclique", 6, "dispatchers = 2\n" + AGG),
    ("splitjoin", 4, ""), ("psp", 3, ""), ("matrix", 4, ""), ("llhj", 3, "")])
def test_a_run_resumes_in_process_at_other_run_sources(tmp_path, strategy, workers, extra):
    """A checkpoint of run.sources = 2 resumed with 1 source on as many ranks (one more worker:
    the extra source's rank joins), then that run's own newest checkpoint with 3 sources: the
    other sources' input a worker had recorded as channel state is carried to rest first
    (slaves/drain.py; biclique's two dispatchers' batches reach each unit in order there), the
    sources start at the checkpoint's offset (the part holding it first), and each result is once."""
    import os
    import shutil
    from mpi_join.join.oracle import run_oracle
    from mpi_join.storage import checkpoint as ck
    from mpi_join.storage.results import read_results
    from reference import assert_same_rows

    def job_file(k):
        text = equi_job_text(('"60ms"', '"40ms"'), strategy=strategy, extra_strategy=extra,
                             run=f"batch_size = 25\nsources = {k}\npart = 200") + \
            '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 600\nkeep = 50\n'
        return text
    arrays = random_streams(np.random.default_rng(7), 4000, key_range=40)
    path, job = write_job(str(tmp_path), job_file(2), arrays)
    assert run_local(workers + 2, "run", path).returncode == 0
    expect = run_oracle(job, arrays)
    root = job.checkpoint.dir
    for c in [c for c, m in ck.list_checkpoints(root) if m][1:]:     # resume early: the run after cuts its own
        shutil.rmtree(ck.ckpt_path(root, c))
    for k, ranks, was in ((1, workers + 2, 2), (3, workers + 3, 1)):
        newest, man = [(c, m) for c, m in ck.list_checkpoints(root) if m][-1]
        assert man["sources"] == was, f"the run before took no checkpoint of its own: {man}"
        other = os.path.join(str(tmp_path), f"job-{k}.toml")
        open(other, "w").write(job_file(k))
        r = run_local(ranks, "run", other, "--resume", root)
        assert r.returncode == 0 and f"resuming from checkpoint {newest} " in r.stderr, r.stderr
        assert_same_rows(read_results(job.output, job.stream_names), expect)
        if "aggregate" in extra:
            v = cli("verify", job.output, "--job", other)
            assert v.returncode == 0 and "the final one equals the oracle's aggregate" in v.stdout, v.stdout
        for c in [c for c, m in ck.list_checkpoints(root) if m and c > newest][1:]:
            shutil.rmtree(ck.ckpt_path(root, c))


def _in_flight_at_sink(root, cid, sink):
    """How many result messages the sink's rank file holds in flight (its channel state)."""
    from mpi_join.storage import checkpoint as ck
    _, attrs = ck.read_rank(root, cid, sink, lambda name, attrs: None, keep=lambda n: False)
    return len(attrs.get("channel", []))


@pytest.mark.parametrize("strategy,p,at", [("hash-store", 5, 7), ("hash-store", 6, 4), ("mod-store", 5, 7),
                                           ("mod-store", 6, 4), ("mod-store", 5, 3)])
def test_an_edge_routed_strategy_with_results_in_flight_resumes_at_another_rank_count(tmp_path, strategy, p, at):
    """A strategy of the README's shape with no restore code and no rank-0 operator (rank 0 routes
    by its edges' partitioner, the cores send their results to the runtime's sink): resumed from a
    checkpoint whose sink had result rows in flight, at more and at fewer ranks. Each result once,
    none lost: the sink's in-flight rows are written by the new sink (dropped in silence before),
    the cores' stored rows dealt by the partitioner that routes (rank 0 refused to route before)."""
    import shutil
    from mpi_join.join.oracle import run_oracle
    from mpi_join.storage import checkpoint as ck
    from mpi_join.storage.results import read_results
    from reference import assert_same_rows
    text = equi_job_text(('"40ms"', '"40ms"'), strategy=strategy, run="batch_size = 10") + \
        '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 100\nkeep = 100\n'
    for seed in range(5):        # a cut with results in flight at the sink (the threads' timing decides)
        arrays = random_streams(np.random.default_rng(seed), 3000, key_range=8)
        path, job = write_job(str(tmp_path / str(seed)), text, arrays)
        r = run_local(p, "run", path)
        assert r.returncode == 0, r.stderr
        root = job.checkpoint.dir
        held = [(c, _in_flight_at_sink(root, c, p - 1)) for c, m in ck.list_checkpoints(root) if m]
        chosen = [c for c, n in held[:-1] if n]
        if chosen:
            break
    assert chosen, f"no checkpoint had results in flight at the sink: {held}"
    for c, _ in held:
        if c > chosen[0]:
            shutil.rmtree(ck.ckpt_path(root, c))
    r = run_local(at, "run", path, "--resume", root)
    assert r.returncode == 0 and f"resuming from checkpoint {chosen[0]} " in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert_same_rows(read_results(job.output, job.stream_names), run_oracle(job, arrays))
