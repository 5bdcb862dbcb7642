"""The staged log without Spark: the watermark step, atomic commits, restarts and what readers see."""
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from mpi_join.config import load_job
from mpi_join.errors import JobError
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.staged import LogTail, read_staged
from mpi_join.storage.staged_log import LOG, LogWriter, advance, order, waiting_dtype

JOB = """
[job]
ts_unit = "ms"
[input]
staged = "staged"
allowed_lateness = "{lateness}"
[output]
dir = "out"
[streams.R]
schema = {{ k = "int32", v = "float64" }}
window = "50ms"
[streams.S]
schema = {{ k = "int32", v = "float64" }}
window = "50ms"
[predicate]
equi = [["R.k", "S.k"]]
[strategy]
name = "hash"
"""


def _job(tmp_path, lateness="10ms"):
    p = tmp_path / "job.toml"
    p.write_text(JOB.format(lateness=lateness))
    return load_job(str(p))


def _rows(job, k, ts, src=0, rec0=1):
    w = np.zeros(len(ts), waiting_dtype(job.streams[k]))
    w["ts"] = ts
    w["k"] = np.arange(len(ts)) % 3
    w["v"] = np.arange(len(ts), dtype=float)
    w["_src"] = src
    w["_rec"] = np.arange(rec0, rec0 + len(ts))
    return w


def test_advance_holds_rows_until_every_streams_watermark_passes_them(tmp_path):
    job = _job(tmp_path)
    empty = [np.zeros(0, waiting_dtype(s)) for s in job.streams]
    # only R has spoken: S may still send anything, so nothing is released
    rel, late, keep, seen, front, bound = advance(empty, [_rows(job, 0, [5, 30, 12]), empty[1]], [None, None],
                                                  None, 10)
    assert [len(r) for r in rel] == [0, 0] and len(keep[0]) == 3 and seen == [30, None] and front is None
    # S up to 25: the watermark is min(30, 25) - 10 = 15
    rel, late, keep, seen, front, bound = advance(keep, [empty[0], _rows(job, 1, [25, 8])], seen, front, 10)
    assert bound == 15 and sorted(rel[0]["ts"]) == [5, 12] and rel[1]["ts"].tolist() == [8] and front == 12
    assert keep[0]["ts"].tolist() == [30] and keep[1]["ts"].tolist() == [25]
    # a row older than the frontier is late; one at the frontier is not
    rel, late, keep, seen, front, bound = advance(keep, [_rows(job, 0, [11, 12, 40]), empty[1]], seen, front, 10)
    assert late[0]["ts"].tolist() == [11] and rel[0]["ts"].tolist() == [12]   # bound min(40, 25) - 10 = 15
    assert sorted(keep[0]["ts"]) == [30, 40] and front == 12
    # `until` caps the release; flush releases everything
    rel, late, keep, seen, front, bound = advance(keep, [empty[0], _rows(job, 1, [90])], seen, front, 10, until=28)
    assert bound == 28 and rel[0]["ts"].tolist() == [] and rel[1]["ts"].tolist() == [25]   # not min(40, 90) - 10
    rel, late, keep, seen, front, bound = advance(keep, empty, seen, front, 0, flush=True)
    assert sorted(np.concatenate([rel[0]["ts"], rel[1]["ts"]]).tolist()) == [30, 40, 90] and not any(map(len, keep))


def test_a_hold_caps_a_streams_watermark_until_its_slow_partition_catches_up(tmp_path):
    """A Kafka stream whose partition 0 is read behind partition 1 (kafka_source.hold): the
    stream counts as seen up to partition 0's largest event time, so partition 0's next rows
    are not late; NOTHING (a behind partition with no row yet) releases nothing."""
    from mpi_join.storage.staged_log import NOTHING
    job = _job(tmp_path)
    empty = [np.zeros(0, waiting_dtype(s)) for s in job.streams]
    rel, late, keep, seen, front, bound = advance(empty, [_rows(job, 0, [100, 200, 300]), _rows(job, 1, [400])],
                                                  [None, None], None, 10, hold=[NOTHING, None])
    assert bound is None and not any(map(len, rel)) and seen == [300, 400]
    rel, late, keep, seen, front, bound = advance(keep, [_rows(job, 0, [50]), empty[1]], seen, front, 10,
                                                  hold=[50, None])
    assert bound == 40 and not any(map(len, rel)) and not any(map(len, late))
    rel, late, keep, seen, front, bound = advance(keep, [_rows(job, 0, [60]), empty[1]], seen, front, 10,
                                                  hold=[None, None])          # caught up: min(300, 400) - 10
    assert bound == 290 and sorted(rel[0]["ts"]) == [50, 60, 100, 200] and not any(map(len, late))
    # an idle stream's hold does not count
    rel, late, keep, seen, front, bound = advance(keep, [empty[0], _rows(job, 1, [500])], seen, front, 10,
                                                  hold=[NOTHING, None], idle=[True, False])
    assert bound == 490 and rel[0]["ts"].tolist() == [300] and rel[1]["ts"].tolist() == [400]


def test_order_numbers_by_event_time_stream_file_record(tmp_path):
    job = _job(tmp_path)
    r = _rows(job, 0, [5, 5, 3])
    r["_src"] = [1, 0, 0]
    r["_rec"] = [1, 9, 2]
    s = _rows(job, 1, [5, 3])
    out = order([r, s], ["b.csv", "a.csv"], 100)
    # ts 3: R (b.csv rec 2) then S; ts 5: R a.csv rec 1 (v 0; a.csv < b.csv), R b.csv rec 9 (v 1), then S
    assert out[0]["seq"].tolist() == [100, 102, 103] and out[0]["ts"].tolist() == [3, 5, 5]
    assert out[0]["v"].tolist() == [2.0, 0.0, 1.0]
    assert out[1]["seq"].tolist() == [101, 104]
    assert "_src" not in out[0].dtype.names


def _commit(w, job, b, r_ts, s_ts, src="f.csv"):
    return w.commit(b, [_rows(job, 0, r_ts), _rows(job, 1, s_ts)], [src])


def test_log_commits_a_valid_prefix_each_batch_and_quarantines_late_rows(tmp_path):
    job = _job(tmp_path)
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    rng = np.random.default_rng(3)
    sent = {0: [], 1: []}
    for b in range(6):
        r = (b * 40 + rng.integers(0, 40, 30)).tolist()
        s = (b * 40 + rng.integers(0, 40, 25)).tolist()
        if b == 3:
            r.append(5)                            # far behind what was written: late
        sent[0] += r
        sent[1] += s
        _commit(w, job, b, r, s)
        R, S = read_staged(job)                    # every committed prefix passes the staged checks
        man = json.loads((tmp_path / "staged/_manifest.json").read_text())
        assert len(R) + len(S) == man["total"]
    w.end("test")
    R, S = read_staged(job)
    man = json.loads((tmp_path / "staged/_manifest.json").read_text())
    late = pq.read_table(str(tmp_path / "staged/_quarantine/R")).to_pylist()
    assert man["log"]["late"] == {"R": len(late), "S": 0} and len(late) >= 1
    assert any(x["ts"] == 5 and x["reason"].startswith("late by ") and x["file"] == "f.csv" for x in late)
    # nothing lost, nothing twice: staged + late = sent
    assert sorted(R["ts"].tolist() + [x["ts"] for x in late]) == sorted(sent[0])
    assert sorted(S["ts"].tolist()) == sorted(sent[1])
    assert man["log"]["ended"]["reason"] == "test" and os.path.exists(tmp_path / "staged" / LOG / "end.json")
    # the oracle reads it as it reads a staged directory
    assert len(run_oracle(job, [R, S])) > 0


def test_restart_continues_skips_a_replayed_batch_and_sweeps_a_half_written_one(tmp_path):
    job = _job(tmp_path)
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    _commit(w, job, 0, [1, 2, 30], [3, 40])
    waiting = sum(len(p) for p in w.pending)
    assert waiting == 2                             # 30 and 40 are above the watermark min(30, 40) - 10
    # a batch killed before its commit: its part file is on disk, not in the manifest
    stray = tmp_path / "staged/R/part-b000001.parquet"
    stray.write_bytes(b"half")
    assert len(read_staged(job)[0]) == 2            # readers do not see it
    w2 = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    assert not stray.exists() and sum(len(p) for p in w2.pending) == waiting
    assert _commit(w2, job, 0, [1, 2, 30], [3, 40]) is None      # Spark replays batch 0: already in the log
    _commit(w2, job, 1, [50], [60])
    w2.end("done")
    R, S = read_staged(job)
    assert sorted(R["ts"].tolist()) == [1, 2, 30, 50] and sorted(S["ts"].tolist()) == [3, 40, 60]
    with pytest.raises(JobError, match="the log has ended"):
        LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    with pytest.raises(JobError, match="other settings"):
        (tmp_path / "staged/_manifest.json").write_text(
            (tmp_path / "staged/_manifest.json").read_text().replace('"ended": {', '"ended_": {'))
        LogWriter(job, job.staged, job.allowed_lateness, {"x": 2})


def _rewrite_keys(path):
    """A committed part file rewritten with every key + 1 (same rows, new bytes)."""
    import pyarrow as pa
    t = pq.read_table(path)
    pq.write_table(t.set_column(t.schema.get_field_index("k"), "k", pa.array(t.column("k").to_numpy() + 1)), path)


def test_a_restarted_stager_and_a_follower_refuse_a_committed_part_that_changed(tmp_path):
    """The committed parts a stager continues from, and those a following source reads as the
    log grows, must be the files the manifest records (size and SHA-256): one changed after its
    commit is refused with one line naming it, not continued from or joined."""
    from mpi_join.errors import InputError
    from mpi_join.master.source import Source
    job = _job(tmp_path)
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    _commit(w, job, 0, [1, 2, 30], [3, 40])
    man = json.loads((tmp_path / "staged/_manifest.json").read_text())
    src = Source(job, man=man, follow=True)
    while src.released < src.total:                # what the first commit holds
        src.next_epoch()
    _commit(w, job, 1, [50, 60], [55, 70])
    part = sorted((tmp_path / "staged/R").glob("part-*.parquet"))[-1]
    _rewrite_keys(str(part))
    with pytest.raises(InputError, match=f"{part}: staged part file .*stage again"):
        src.wait_for_input(lambda: None)
    with pytest.raises(InputError, match=f"{part}: staged part file .*stage again"):
        LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})


def test_an_edited_batch_record_is_noticed(tmp_path):
    """The manifest covers each batch record (_log/batch-*.json) with its SHA-256: one edited
    after its commit is refused by a restarted stager and by what reads the records."""
    from mpi_join.errors import InputError
    from mpi_join.storage.staged import read_manifest
    from mpi_join.storage.staged_log import batch_records
    job = _job(tmp_path)
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    _commit(w, job, 0, [1, 2, 30], [3, 40])
    _commit(w, job, 1, [50, 60], [55, 70])
    assert [e["batch"] for e in batch_records(job.staged, read_manifest(job.staged))] == [0, 1]
    rec = tmp_path / "staged" / LOG / "batch-000001.json"
    rec.write_text(rec.read_text().replace('"batch": 1', '"batch": 7'))
    with pytest.raises(InputError, match=f"{rec}: the log's batch record is missing or changed"):
        batch_records(job.staged, read_manifest(job.staged))
    with pytest.raises(InputError, match="batch-000001.json: the log's batch record"):
        LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})


def test_tail_sees_new_commits_and_the_end(tmp_path):
    job = _job(tmp_path)
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    _commit(w, job, 0, [1, 2], [3])
    man = json.loads((tmp_path / "staged/_manifest.json").read_text())
    tail = LogTail(job.staged, man, ["R", "S"])
    assert tail.poll() is not None or True          # the first look reads the manifest
    assert tail.poll() is None                      # unchanged: no read
    _commit(w, job, 1, [30, 40], [35])
    new = tail.poll()
    assert new is not None and not tail.ended
    w.end("done")
    new2 = tail.poll()
    assert tail.ended and sum(len(x) for x in new + new2) >= 2
    assert tail.frontier == 40


def test_one_writer_per_staged_directory_and_no_stage_over_a_live_log(tmp_path, monkeypatch):
    """Every command that writes a staged directory takes its lock before any JVM starts: a
    second `stage --follow` (with --force too) and a `stage` at rest on a directory another
    process holds are refused at once with one line. A `stage` at rest on a log that has not
    ended is refused even with --force (it deleted the log's committed part files, then crashed);
    on an ended log it needs --force."""
    import subprocess
    import sys
    from conftest import cli
    from mpi_join.storage.spark import session
    text = JOB.format(lateness="10ms")
    for n in ("R", "S"):
        text = text.replace(f'[streams.{n}]\n', f'[streams.{n}]\nraw = {{ path = "raw/{n}", format = "csv", time = "t", '
                                                 f'time_unit = "ms" }}\n')
        os.makedirs(tmp_path / "raw" / n)
        (tmp_path / "raw" / n / "a.csv").write_text("t,k,v\n1,1,1.0\n")
    (tmp_path / "job.toml").write_text(text)
    job = load_job(str(tmp_path / "job.toml"))
    os.makedirs(job.staged)

    def no_jvm(*a, **k):
        raise AssertionError("a JVM was started before the staged directory's lock was taken")
    monkeypatch.setattr(session, "spark_session", no_jvm)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from mpi_join.storage.paths import DirLock; "
                               f"DirLock({job.staged!r}, 'x').acquire(); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for args in (["--follow"], ["--follow", "--force"], [], ["--force"]):
            r = cli("stage", *args, tmp_path / "job.toml")
            assert r.returncode == 2 and "the staged directory: " in r.stderr and "is in use by another run" in r.stderr \
                and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    finally:
        holder.kill()
        holder.wait()
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    _commit(w, job, 0, [1, 2, 30], [3, 40])
    parts = sorted(os.listdir(tmp_path / "staged" / "R"))
    for args in ([], ["--force"]):
        r = cli("stage", *args, tmp_path / "job.toml")
        assert r.returncode == 2 and "holds a staged log" in r.stderr and "has not ended" in r.stderr \
            and "would delete its committed part files" in r.stderr and "--out DIR" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path / "staged" / "R")) == parts, "the log's part files are untouched"
    w.end("done")
    r = cli("stage", tmp_path / "job.toml")
    assert r.returncode == 2 and "pass --force" in r.stderr, r.stderr
    r = cli("stage", "--follow", "--until", "end", tmp_path / "job.toml")     # refused before a JVM (65 s busy)
    assert r.returncode == 2 and "the log has ended (done); pass --force to start a new log" in r.stderr, r.stderr
    r = cli("stage", "--follow", "--force", "--until", str(2 ** 64), tmp_path / "job.toml")
    assert r.returncode == 2 and f"--until: {2 ** 64} is out of range" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(job.staged, ".mpi-join.lock")), "each refusal released its lock"


def _staged_landing_file(tmp_path, ts):
    """A job whose stream R lands in tmp/landing, its file a.csv holding rows at times `ts`,
    committed by a LogWriter as read: (the job, the file, the writer)."""
    text = JOB.format(lateness="10ms").replace(
        '[streams.R]\n', '[streams.R]\nraw = { path = "landing", format = "csv", time = "t", time_unit = "ms" }\n')
    (tmp_path / "job.toml").write_text(text)
    job = load_job(str(tmp_path / "job.toml"))
    (tmp_path / "landing").mkdir()
    f = tmp_path / "landing" / "a.csv"
    f.write_text("t,k,v\n" + "".join(f"{t},1,1.0\n" for t in ts))
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    w.commit(0, [_rows(job, 0, list(ts)), _rows(job, 1, [])], [f"file:{f}"])
    return job, f, w


@pytest.mark.parametrize("change", ["rewrite", "append", "shorter-rewrite"])
def test_a_landing_file_changed_after_staging_is_quarantined_not_lost(tmp_path, change):
    """A landing file rewritten (same name, new rows), appended to or rewritten in place shorter
    after the stager read it: its content that was not staged is quarantined as changed after
    staging, counted in the log's quarantined rows, said in one line naming the file; never
    dropped in silence (the rewritten file's 100 rows were lost, exit 0, before). Noticed again
    after a restart too."""
    job, f, w = _staged_landing_file(tmp_path, (1, 2, 30))
    said = []
    assert w.quarantine_changed(said.append) == 0 and not said, "nothing changed yet"
    if change == "rewrite":
        f.write_text("t,k,v\n" + "".join(f"{t},2,2.0\n" for t in range(100, 200)))
        rows, reason = 100, "rewritten after staging"
    elif change == "append":
        with open(f, "a") as h:
            h.write("40,1,1.0\n41,1,1.0\n")
        rows, reason = 2, "appended to after staging"
    else:                                        # the same inode, fewer bytes, but not a prefix
        f.write_text("t,k,v\n9,9,9.0\n")
        rows, reason = 1, "rewritten after staging"
    os.utime(f, ns=(0, 0)) if change == "rewrite" else None      # a restored mtime does not hide it
    w2 = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})   # a restart keeps what was read
    assert w2.quarantine_changed(said.append) == 1
    assert len(said) == 1 and str(f) in said[0] and reason in said[0] and f"{rows:,} row(s) not staged" in said[0]
    q = pq.read_table(str(tmp_path / "staged/_quarantine/_rewritten/R")).to_pylist()
    assert len(q) == rows and all(x["file"] == f"file:{f}" and x["reason"].startswith(reason) for x in q)
    if change == "append":
        assert [x["text"] for x in q] == ["40,1,1.0", "41,1,1.0"]
    man = json.loads((tmp_path / "staged/_manifest.json").read_text())
    assert man["quarantined"]["R"] == rows and man["log"]["rewritten"]["R"] == rows
    assert w2.quarantine_changed(said.append) == 0 and len(said) == 1, "each change is reported once"
    assert sum(len(p) for p in w2.pending) == 3, "what was read stays in the log (waiting for the watermark)"


def test_a_string_column_is_refused_by_live_staging_before_a_jvm(tmp_path, monkeypatch):
    """A live log holds text at a fixed width: `stage --follow` on a job with a `string` column is
    refused in one line naming the column, before any JVM starts (and before the lock)."""
    from conftest import cli
    from mpi_join.storage.spark import session
    text = JOB.format(lateness="10ms").replace('v = "float64"', 'v = "float64", name = "string"', 1)
    for n in ("R", "S"):
        text = text.replace(f'[streams.{n}]\n', f'[streams.{n}]\nraw = {{ path = "raw/{n}", format = "csv", time = "t", '
                                                 f'time_unit = "ms" }}\n')
        os.makedirs(tmp_path / "raw" / n)
    (tmp_path / "job.toml").write_text(text)

    def no_jvm(*a, **k):
        raise AssertionError("a JVM was started before the job was refused")
    monkeypatch.setattr(session, "spark_session", no_jvm)
    r = cli("stage", "--follow", tmp_path / "job.toml")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "streams.R.schema.name: a live log holds text at a fixed width; declare it char(N)" in r.stderr, r.stderr
    assert not (tmp_path / "staged").exists()


def test_an_idle_stream_stops_holding_the_watermark_back_and_its_late_rows_are_quarantined(tmp_path):
    """[input] idle_timeout: S sends nothing for longer than it, so R's rows are released on R's
    watermark alone (without it they wait forever); when S wakes, its rows behind what was
    released are late, quarantined with the reason, and the rest go on as before."""
    p = tmp_path / "job.toml"
    p.write_text(JOB.format(lateness="10ms").replace('allowed_lateness = "10ms"',
                                                     'allowed_lateness = "10ms"\nidle_timeout = "2s"'))
    job = load_job(str(p))
    assert job.idle_timeout_ns == 2_000_000_000
    empty = [np.zeros(0, waiting_dtype(s)) for s in job.streams]
    # advance: an idle stream is left out of the bound; every stream idle releases nothing
    rel, late, keep, seen, front, bound = advance(empty, [_rows(job, 0, [5, 30]), empty[1]], [None, None], None, 10,
                                                  idle=[False, True])
    assert bound == 20 and rel[0]["ts"].tolist() == [5] and keep[0]["ts"].tolist() == [30]
    rel, late, keep, seen, front, bound = advance(keep, empty, seen, front, 10, idle=[True, True])
    assert bound is None and not any(map(len, rel)) and keep[0]["ts"].tolist() == [30]
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    _commit(w, job, 0, [1, 2], [3])
    e = _commit(w, job, 1, [50, 100], [])
    assert e["watermark"] == -7 and e["seq"] == [0, 0] and "idle" not in e     # S (at 3) holds it back
    w.log["heard_ns"]["S"] -= 3_000_000_000                                     # S silent for 3 s
    e = _commit(w, job, 2, [120], [])
    assert e["idle"] == ["S"] and e["watermark"] == 110 and e["seq"] == [0, 5]    # all but R's 120
    e = _commit(w, job, 3, [], [60, 115])                                        # S wakes: 60 is late
    assert "idle" not in e and e["streams"]["S"]["late"] == 1 and e["streams"]["S"]["rows"] == 0
    late = pq.read_table(str(tmp_path / "staged" / "_quarantine" / "S")).to_pylist()
    assert [x["ts"] for x in late] == [60] and late[0]["reason"].startswith("late by ")
    w.end("test")
    R, S = read_staged(job)
    assert R["ts"].tolist() == [1, 2, 50, 100, 120] and S["ts"].tolist() == [3, 115]


def test_a_rewrite_of_the_same_size_with_its_mtime_put_back_is_noticed(tmp_path):
    """Same size, same inode, the old modification time restored with os.utime: the change time
    still moves, so the file is hashed again and its new content quarantined (unnoticed before)."""
    job, f, w = _staged_landing_file(tmp_path, (1, 2))
    st = os.stat(f)
    import time
    time.sleep(0.01)
    with open(f, "r+") as h:                     # in place: same inode, same size
        h.write("t,k,v\n7,2,2.0\n8,2,2.0\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(f).st_size == st.st_size and os.stat(f).st_mtime_ns == st.st_mtime_ns
    said = []
    assert w.quarantine_changed(said.append) == 1 and "rewritten after staging" in said[0], said


def test_a_landing_file_truncated_after_staging_quarantines_nothing_that_was_staged(tmp_path):
    """Cut short (the same inode, a prefix of what was staged, here in the middle of a line): what
    is left was staged, so nothing is quarantined or counted (its staged rows were quarantined
    again and the warning said "not staged", before); one line says it. The log's ladder of line
    hashes (landed.py) tells it from a rewrite in place, also after a restart."""
    job, f, w = _staged_landing_file(tmp_path, range(1, 200))
    body = f.read_text()
    with open(f, "r+") as h:
        h.truncate(len(body) // 2 + 3)
    said = []
    w2 = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})   # a restart keeps the ladder
    assert w2.quarantine_changed(said.append) == 1
    assert len(said) == 1 and "cut short after staging" in said[0] and "nothing to quarantine" in said[0], said
    man = json.loads((tmp_path / "staged/_manifest.json").read_text())
    assert man["quarantined"]["R"] == 0 and not man["log"]["rewritten"].get("R")
    assert not (tmp_path / "staged/_quarantine/_rewritten").exists()
    assert w2.quarantine_changed(said.append) == 0 and len(said) == 1, "each change is reported once"


def test_the_line_ladder_hashes_every_prefix_across_chunks(tmp_path):
    """landed._hashes: the ladder's hash at a line end is the hash of the bytes before it (read a
    MB at a time), and equals the sum written out by hand on a small file."""
    from mpi_join.storage import landed
    rng = np.random.default_rng(3)
    b = rng.integers(32, 127, 3 * landed._CHUNK + 12345, dtype=np.uint8)
    b[rng.integers(0, len(b), 5000)] = 10
    p = tmp_path / "f.csv"
    p.write_bytes(b.tobytes())
    ladder, whole = landed._hashes(str(p))
    assert ladder["end"][-1] == len(b) and ladder["hash"][-1] == whole
    for i in (0, 1, len(ladder) // 3, len(ladder) // 2, len(ladder) - 2):
        assert landed._hashes(str(p), int(ladder["end"][i]))[1] == ladder["hash"][i], i
    small = b[:700].tobytes()
    (tmp_path / "s").write_bytes(small)
    want = sum((x + 1) * pow(landed._P, j, 1 << 64) for j, x in enumerate(small)) % (1 << 64)
    assert int(landed._hashes(str(tmp_path / "s"))[1]) == want


def test_payloads_read_each_new_part_once_and_an_old_tuple_again(tmp_path):
    """tail.Payloads (publish, tail --with-payload) against the whole log read at once: after
    each commit, results naming the newest and the oldest tuples give the staged rows' values;
    with `keep` small, a tuple no longer held is read again by seek."""
    from mpi_join.storage.staged import read_staged
    from mpi_join.storage.tail import Payloads
    job = _job(tmp_path)
    w = LogWriter(job, job.staged, job.allowed_lateness, {"x": 1})
    pay, rng = Payloads(job, keep=25), np.random.default_rng(5)
    for b in range(5):
        _commit(w, job, b, (b * 40 + rng.integers(0, 40, 30)).tolist(), (b * 40 + rng.integers(0, 40, 20)).tolist())
        R, S = read_staged(job)
        if not len(R) or not len(S):
            continue
        seqs = np.array([[R["seq"][-1], S["seq"][0]], [R["seq"][0], -1], [R["seq"][len(R) // 2], S["seq"][-1]]])
        got = pay.values(seqs)
        for row, (r, s) in zip(got, seqs):
            rr = R[R["seq"] == r][0]
            assert row[:3] == (int(rr["ts"]), int(rr["k"]), float(rr["v"]))
            if s < 0:
                assert row[3:] == (None,) * 3
            else:
                ss = S[S["seq"] == s][0]
                assert row[3:] == (int(ss["ts"]), int(ss["k"]), float(ss["v"]))
        assert all(len(a) <= 25 for a in pay.rows)


def test_result_values_are_json_and_csv_as_the_standard_writers_give_them():
    """kafka_sink._lines formats a column at a time: each line is what json.dumps of the row's
    object and csv.writer of the row give (nulls, booleans, NaN, quotes, commas, line breaks)."""
    import csv
    import io
    from mpi_join.storage.kafka_sink import _lines
    names = ["R_seq", "ok", "name", "x"]
    cols = [[1, None, 3, 2 ** 62], [True, False, None, True], ['a"b', "é,z", None, "l1\nl2"],
            [0.1, float("nan"), 1e300, float("-inf")]]
    rows = [[c[i] for c in cols] for i in range(4)]
    assert _lines(names, cols, "json") == [json.dumps(dict(zip(names, r)), separators=(",", ":")).encode() for r in rows]
    want = []
    for r in rows:
        b = io.StringIO()
        csv.writer(b, lineterminator="\r\n").writerow(["" if v is None else v for v in r])
        want.append(b.getvalue()[:-2].encode())
    assert _lines(names, cols, "csv") == want


def test_bench_kafkas_expected_count_is_the_pairs_of_its_records():
    """bench_kafka.expected_results (what a Kafka trial must deliver) against a count pair by
    pair: equal k, |R.t - S.t| < the window."""
    from mpi_join.tools.bench_kafka import WINDOW_MS, expected_results
    rng = np.random.default_rng(3)
    n = 600
    rec = np.stack([rng.integers(0, 2, n), 1_796_000_000_000 + rng.integers(0, 5000, n), rng.integers(0, 7, n)], axis=1)
    r, s = rec[rec[:, 0] == 0], rec[rec[:, 0] == 1]
    want = sum(int(((s[:, 2] == k) & (np.abs(s[:, 1] - t) < WINDOW_MS)).sum()) for _, t, k in r)
    assert expected_results(rec) == want and want > 100


def test_result_values_from_arrow_integer_columns_are_those_of_their_lists():
    """publish passes a result file's seq, emit_ns and latency_ns columns to _lines as Arrow
    arrays (cast to text by Arrow): each line equals the one their Python values give."""
    import pyarrow as pa
    from mpi_join.storage.kafka_sink import _lines
    names = ["R_seq", "S_seq", "emit_ns", "x"]
    ints = [[1, None, -3, 2 ** 62], [0, 5, None, -(2 ** 63)], [7, 8, 9, 10]]
    x = [0.5, None, "t", True]
    for fmt in ("json", "csv"):
        want = _lines(names, ints + [x], fmt)
        got = _lines(names, [pa.array(c, pa.int64()) for c in ints] + [x], fmt)
        assert got == want and len(got) == 4
    assert _lines(names, [pa.array([], pa.int64())] * 3 + [[]], "json") == []


def test_recent_rows_are_the_newest_keep_of_all_appended():
    """tail.Recent (Payloads' rows held) against concatenating everything appended and keeping
    the last `keep`, over chunks smaller and larger than `keep`, and none."""
    from mpi_join.storage.tail import Recent
    rng = np.random.default_rng(3)
    for keep in (1, 7, 1000):
        r, every, nxt, most = Recent(np.dtype([("seq", "i8")]), keep), [], 0, 0
        for _ in range(60):
            chunks = []
            for n in rng.integers(0, 2 * keep + 3, rng.integers(0, 3)).tolist():
                c = np.zeros(n, [("seq", "i8")])
                c["seq"] = np.arange(nxt, nxt + n)
                nxt += n
                chunks.append(c)
            every += chunks
            most = max(most, sum(map(len, chunks)))
            got = r.add(chunks)
            want = np.concatenate(every)[-keep:] if every else np.zeros(0, [("seq", "i8")])
            assert got["seq"].tolist() == want["seq"].tolist()
            assert len(r.buf) <= max(2 * (keep + most), 1024)      # bounded by keep and the largest append
