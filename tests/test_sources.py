"""Parallel sources (run.sources = k), without MPI: the k shares of the input, put back together in
part order, are the batches one source releases, with the same coordinates, bounds and numbers;
an entry's inbox takes k sources' links as that one flow; the graph, the config and the checks
that refuse what several sources do not run yet."""
import tomllib

import numpy as np
import pytest

from mpi_join import strategies
from mpi_join.config import parse_job
from mpi_join.errors import ConfigError
from mpi_join.master.source import Source
from mpi_join.runtime.graph import DRIVER, SOURCE_ROLE, star
from mpi_join.runtime.protocol import DataHeader, Eos, Fin, PartEnd
from mpi_join.slaves.inbox import Inbox
from conftest import equi_job_text, random_streams


def _job(window, batch, k=1, part=1, checkpoint=""):
    text = equi_job_text(window, run=f"batch_size = {batch}\nsources = {k}\npart = {part}") + checkpoint
    return parse_job(tomllib.loads(text), "job.toml")


def _released(src):
    """Every batch a source releases: (batch_no, batches, bounds after it, part ends seen)."""
    out = []
    while not src.done:
        b = src.next_epoch()
        out.append((src.batch_no, b, tuple(src.bounds())))
        if src.part_done():
            src.next_part()
    return out


@pytest.mark.parametrize("window", [('"6ms"', '"2ms"'), ("5", "17")], ids=["time", "count"])
@pytest.mark.parametrize("k,part,batch", [(2, 100, 30), (3, 64, 16), (4, 1, 7), (2, 5000, 50)])
def test_shares_put_together_are_one_source(window, k, part, batch):
    arrays = random_streams(np.random.default_rng(k * part + batch), 1200, key_range=8)
    one = _released(Source(_job(window, batch), arrays=arrays))
    shares = [_released(Source(_job(window, batch, k, part), arrays=arrays, share=(i, k))) for i in range(k)]
    merged = sorted((x for s in shares for x in s), key=lambda x: x[0])
    assert [n for n, _, _ in merged] == list(range(len(one))), "batch numbers dense from 0, each once"
    assert len(merged) == len(one)
    for (_, b1, bounds1), (_, bk, boundsk) in zip(one, merged):
        for s in range(2):
            for name in ("seq", "ts", "k", "_lo") + (("_coord",) if "_coord" in b1[s].dtype.names else ()):
                assert np.array_equal(b1[s][name], bk[s][name]), name
        assert bounds1 == boundsk
    total = sum(len(a) for a in arrays)
    per_part = batch * -(-part // batch)
    for i, s in enumerate(shares):       # source i released exactly its parts
        seqs = np.concatenate([np.concatenate([x["seq"] for x in b]) for _, b, _ in s]) if s else np.zeros(0)
        assert set((seqs // per_part) % k) <= {i}
        assert len(seqs) == sum(min(per_part, total - p * per_part) for p in range(i, -(-total // per_part), k))


def _data(order=-1, n=1):
    return DataHeader(0, (0, 0), None, order), [np.zeros(n, [("seq", "i8")]), np.zeros(0, [("seq", "i8")])]


def test_inbox_takes_sources_in_part_order():
    """Sources 0 and 5 deal parts 0, 1, 2, 3 in turn; their links arrive in any interleaving."""
    box = Inbox(1, (), (DRIVER, 5))
    take = lambda item: True        # noqa: E731
    box.data(5, *_data(n=3))        # part 1, before part 0 is in
    box.ctrl(5, PartEnd(1))
    box.data(5, *_data(n=4))        # part 3
    assert box.next(take, lambda: None, set()) is None, "part 0's source has sent nothing yet"
    box.data(DRIVER, *_data(n=1))
    box.ctrl(DRIVER, PartEnd(0))
    box.data(DRIVER, *_data(n=2))   # part 2
    box.ctrl(DRIVER, PartEnd(2))
    box.ctrl(DRIVER, Eos())
    got = []
    while (item := box.next(take, lambda: None, set())) is not None:
        src, it = item
        got.append((src, len(it[2][0]) if it[0] == "data" else type(it[1]).__name__))
        if it[0] == "data":
            box.handled(src, len(it[2][0]))
    assert got == [(DRIVER, 1), (5, 3), (DRIVER, 2), (5, 4)]
    box.ctrl(5, PartEnd(3))
    assert box.next(take, lambda: None, set()) is None, "source 5's end of stream is still to come"
    box.ctrl(5, Eos())
    assert box.next(take, lambda: None, set()) == (DRIVER, ("ctrl", Eos())), "one end of stream, the driver's"
    assert box.next(take, lambda: None, set()) is None
    box.ctrl(DRIVER, Fin())                    # rank 0's own control records pass in order
    assert box.next(take, lambda: None, set()) == (DRIVER, ("ctrl", Fin()))
    assert box.buffered == 0


def test_a_restored_inbox_replays_the_inputs_channel_state_first():
    """A rank that cut on a neighbour's marker copy recorded the input that came before the
    input's own copy as channel state, and resumes at that copy's part (3, source 5's turn): the
    replay goes first, whichever source's turn it is, then the sources' parts from part 3 on."""
    box = Inbox(1, (), (DRIVER, 5))
    take = lambda item: True        # noqa: E731
    box.part = 3
    box.data(DRIVER, *_data(n=6), ack=False)      # replayed: parts 1 and 2, handed over after the cut
    box.data(DRIVER, *_data(n=7), ack=False)
    box.data(5, *_data(n=3))                      # part 3, after the resume
    box.ctrl(5, PartEnd(3))
    box.data(DRIVER, *_data(n=2))                 # part 4
    got = []
    while (item := box.next(take, lambda: None, set())) is not None:
        src, it = item
        got.append((src, len(it[2][0]), it[3]))
        box.handled(src, len(it[2][0]))
    assert got == [(DRIVER, 6, False), (DRIVER, 7, False), (5, 3, True), (DRIVER, 2, True)]
    assert box.buffered == 0


def test_parts_are_sized_for_the_checkpoints_asked_for():
    """With several sources a checkpoint is cut at a part boundary 2k parts ahead: run.part unset
    and a checkpoint every 800 tuples makes parts of 800 / (4k + 4) = 66, 80 in whole batches
    (not 65,536, which on 6,000 tuples took no checkpoint at all, nor 800, which took a sixth of
    them); a part set larger is told at start in one line."""
    from mpi_join.ranks import _few_parts
    arrays = random_streams(np.random.default_rng(4), 6000)
    ckpt = '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 800\n'
    src = Source(_job(('"6ms"', '"2ms"'), 40, k=2, part=0, checkpoint=ckpt), arrays=arrays, share=(0, 2))
    assert src.part_rows == 80
    assert _few_parts(src.job, src, 0) is None
    src = Source(_job(('"6ms"', '"2ms"'), 40, k=2, part=65536, checkpoint=ckpt), arrays=arrays, share=(0, 2))
    assert "takes no checkpoint; set run.part to 66 or less" in _few_parts(src.job, src, 0)
    src = Source(_job(('"6ms"', '"2ms"'), 40, k=2, part=0), arrays=arrays, share=(0, 2))
    assert src.part_rows == 65560 and _few_parts(src.job, src, 0) is None, "65,536 in whole batches; no checkpoints"


def test_inbox_refuses_a_part_out_of_turn_and_input_after_the_end():
    box = Inbox(1, (), (DRIVER, 5))
    box.ctrl(DRIVER, PartEnd(1))
    with pytest.raises(RuntimeError, match="source rank 0 ended part 1, the input is at part 0"):
        box.next(lambda item: True, lambda: None, set())
    box = Inbox(1, (), (DRIVER, 5))
    box.ctrl(DRIVER, Eos())
    box.data(5, *_data())
    with pytest.raises(RuntimeError, match="source rank 5 sent input after the input's end"):
        box.next(lambda item: True, lambda: None, set())


def test_backpressure_holds_the_sources_input():
    box = Inbox(1, (), (DRIVER, 5))
    box.data(DRIVER, *_data(n=2))
    assert box.next(lambda item: False, lambda: None, set()) is None
    assert box.next(lambda item: True, lambda: None, set())[0] == DRIVER


def test_graph_with_sources():
    g = star(4).with_sources(3)
    assert g.size == 6 and g.workers == [1, 2, 3] and g.sources == [0, 4, 5] and g.others == [1, 2, 3, 4, 5]
    assert [g.role(r) for r in (4, 5)] == [SOURCE_ROLE, SOURCE_ROLE]
    assert g.entries() == [1, 2, 3], "the strategy's edges stand for every source's"
    assert "ranks 4..5: sources 2..3 of 3 (rank 0 is source 1)" in g.explain()[-1]
    g.check(lambda role: role == "worker" or role == "driver")
    assert star(4).with_sources(1).size == 4


def test_build_graph_counts_the_extra_sources():
    info = strategies.get("hash")
    g = info.build_graph(5, {k: p.default for k, p in info.params.items()}, sources=2)
    assert g.workers == [1, 2, 3] and g.sources == [0, 4]


def test_config_sources():
    job = _job(('"6ms"', '"2ms"'), 64, k=3, part=1000)
    assert job.run.sources == 3 and job.run.part == 1000
    assert _job(('"6ms"', '"2ms"'), 64).run.sources == 1
    default = Source(_job(('"6ms"', '"2ms"'), 64, k=2, part=0), arrays=random_streams(np.random.default_rng(1), 50),
                     share=(0, 2))
    assert default.part_rows == 4 * 8192 * 2, "four row groups of each stream"
    with pytest.raises(ConfigError, match=r'run.sources: expected an integer in 1..64 or "auto", got 0'):
        _job(('"6ms"', '"2ms"'), 64, k=0)
    auto = _job(('"6ms"', '"2ms"'), 64, k='"auto"')
    assert auto.run.sources_auto and auto.run.sources == 1 and not job.run.sources_auto


def test_check_runnable_with_sources():
    job = _job(('"6ms"', '"2ms"'), 64, k=3)
    with pytest.raises(ConfigError, match=r"plus 2 extra source ranks \(run.sources = 3\), got 3; launch with "
                                          r"mpiexec -n 4 or more"):
        strategies.check_runnable(job, 3)
    strategies.check_runnable(job, 4)


def test_a_source_decodes_little_more_than_its_share(tmp_path, monkeypatch):
    """Staged files have ROW_GROUP-row row groups, and a source skips the row groups of other
    sources' parts: of two sources, each decodes well under all of the input (half, plus the row
    groups its parts' edges share), and the shares put together are the input."""
    from conftest import write_job
    import mpi_join.storage.staged as staged
    from mpi_join.storage.staged import ROW_GROUP, staged_manifest
    n = 64 * ROW_GROUP
    arrays = random_streams(np.random.default_rng(9), n, key_range=8)
    _, job = write_job(str(tmp_path), equi_job_text(('"6ms"', '"2ms"'), run="batch_size = 4096\nsources = 2"), arrays)
    decoded, calls = [0], [0]
    real = staged.from_arrow

    def counting(table, *a, **kw):
        decoded[0] += table.num_rows
        calls[0] += 1
        return real(table, *a, **kw)
    monkeypatch.setattr(staged, "from_arrow", counting)
    seqs = []
    for i in range(2):
        decoded[0] = calls[0] = 0
        got = _released(Source(job, man=staged_manifest(job), share=(i, 2)))
        seqs += [np.concatenate([b["seq"] for b in x[1]]) for x in got]
        assert sum(sum(len(b) for b in x[1]) for x in got) == n // 2
        assert decoded[0] < 0.7 * n, f"source {i} decoded {decoded[0]:,} of {n:,} rows"
        # a part's row groups of a stream are decoded in one chunk, not one per group (was 41, 40)
        assert calls[0] <= decoded[0] / ROW_GROUP / 2, f"source {i}: {calls[0]} decodes of {decoded[0]:,} rows"
    assert np.array_equal(np.sort(np.concatenate(seqs)), np.arange(n))


def _log_rows(job, k, t0, rng, n):
    from mpi_join.storage.staged_log import waiting_dtype
    a = np.zeros(n, waiting_dtype(job.streams[k]))
    a["ts"] = t0 + np.sort(rng.integers(0, 100, n))
    a["k"] = rng.integers(0, 8, n)
    a["_rec"] = np.arange(1, n + 1)
    return a


def _grown_log(d, text, sizes, seed):
    """A staged log in d with its first commit made; returns (job, a function that makes the next
    commit, or ends the log after the last: False when nothing is left)."""
    from conftest import write_job
    from mpi_join.storage.staged_log import LogWriter
    _, job = write_job(str(d), text)
    w = LogWriter(job, job.staged, 0, {"test": 1})
    rng = np.random.default_rng(seed)
    steps = [lambda b=b, n=n: w.commit(b, [_log_rows(job, s, b * 100, rng, n) for s in range(2)], ["a.csv"])
             for b, n in enumerate(sizes)] + [lambda: w.end("test")]
    steps.pop(0)()

    def grow():
        if steps:
            steps.pop(0)()
            return True
        return False
    return job, grow


@pytest.mark.parametrize("window", [('"60ms"', '"20ms"'), ("5", "17")], ids=["time", "count"])
def test_shares_of_a_followed_log_put_together_are_one_source(tmp_path, window):
    """Sources following a log that grows by commits of any size (here while each waits): each
    releases only whole batches of its parts (the last of the log excepted), and their batches put
    together are one source's over the final log at rest: numbers, seqs, coordinates, lo."""
    from mpi_join.storage.staged import staged_manifest
    k, part, batch, sizes = 3, 40, 16, [37, 5, 90, 1, 64, 23]
    job, grow = _grown_log(tmp_path / "one", equi_job_text(window, run=f"batch_size = {batch}"), sizes, 7)
    while grow():
        pass
    one = _released(Source(job, man=staged_manifest(job)))
    merged, waits = [], 0
    for i in range(k):
        text = equi_job_text(window, run=f"batch_size = {batch}\nsources = {k}\npart = {part}")
        job, grow = _grown_log(tmp_path / f"s{i}", text, sizes, 7)
        src = Source(job, man=staged_manifest(job), follow=True, share=(i, k))

        def idle():
            nonlocal waits
            waits += 1
            grow()
        while not src.done:
            if not src.wait_for_input(idle):
                continue
            b = src.next_epoch()
            n = sum(len(x) for x in b)
            assert n == batch or src.released == src.total == 2 * sum(sizes), (i, n)
            merged.append((src.batch_no, b))
            if src.part_done():
                src.next_part()
    assert waits >= k * len(sizes) // 2, "the sources waited on the log as it grew"
    merged.sort(key=lambda x: x[0])
    assert [n for n, _ in merged] == list(range(len(one))), "batch numbers dense from 0, each once"
    for (_, b1, _), (_, bk) in zip(one, merged):
        for s in range(2):
            for name in ("seq", "ts", "k", "_lo") + (("_coord",) if "_coord" in b1[s].dtype.names else ()):
                assert np.array_equal(b1[s][name], bk[s][name]), name
