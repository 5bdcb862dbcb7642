"""What a commit writes is what it adds: the ledger of committed result files beside the
checkpoints (storage/ledger.py), the results log's commits (storage/commits.py), and the cuts
of a run, whose manifests and commit records do not grow with the files committed before."""
import json
import os

import numpy as np
import pytest

from mpi_join.errors import InputError
from mpi_join.storage import checkpoint as ck
from mpi_join.storage import ledger
from mpi_join.storage.commits import COMMITTED, Commits, read_commits, read_committed
from mpi_join.storage.tail import follow
from conftest import equi_job_text, random_streams, run_local, write_job
from reference import assert_equals_oracle

STRATEGY = "hash"


def rec(rows):
    return {"rows": rows, "bytes": 100 + rows, "sha256": f"{rows:064x}"}


def test_the_ledger_reads_back_the_prefix_a_reference_names_and_refuses_any_other(tmp_path):
    led = ledger.Ledger(str(tmp_path)).start()
    first = led.append({"part-r0001-00000.parquet": rec(5), "part-r0002-00000.parquet": rec(7)})
    second = led.append({"part-r0001-00001.parquet": rec(3)})
    assert (first["entries"], second["entries"]) == (2, 3) and second["bytes"] > first["bytes"]
    got, prefix = ledger.read(str(tmp_path), first)
    assert sorted(got) == ["part-r0001-00000.parquet", "part-r0002-00000.parquet"] and got["part-r0002-00000.parquet"] == rec(7)
    assert len(ledger.read(str(tmp_path), second)[0]) == 3
    # a resume starts it again from the prefix it trusts: what came after is dropped
    again = ledger.Ledger(str(tmp_path)).start(prefix, first["entries"])
    third = again.append({"part-r0003-00000.parquet": rec(1)})
    assert third["entries"] == 3 and ledger.read(str(tmp_path), first)[0] == got
    with pytest.raises(InputError, match=r"_committed.jsonl: the ledger of committed result files is not what"):
        ledger.read(str(tmp_path), second)              # the dropped line's place holds another now
    p = ledger.path_of(str(tmp_path))
    data = open(p, "rb").read()
    open(p, "wb").write(data.replace(b", 5,", b", 6,"))
    with pytest.raises(InputError, match="not what the checkpoint recorded"):
        ledger.read(str(tmp_path), first)
    os.remove(p)
    with pytest.raises(InputError, match="_committed.jsonl: the ledger of committed result files is missing"):
        ledger.read(str(tmp_path), first)
    with pytest.raises(InputError, match="is not one mpi-join writes"):
        ledger.read(str(tmp_path), None)


def test_an_append_after_an_unfinished_one_overwrites_its_lines(tmp_path):
    """A cut whose lines went out and whose manifest did not (rank 0 died between): the next
    run, started from the prefix, writes over them; the ledger holds each file once."""
    led = ledger.Ledger(str(tmp_path)).start()
    ref = led.append({"a": rec(1)})
    with open(ledger.path_of(str(tmp_path)), "ab") as f:
        f.write(b'["stray", 1, 2, "x"]\n')
    _, prefix = ledger.read(str(tmp_path), ref)
    led = ledger.Ledger(str(tmp_path)).start(prefix, ref["entries"])
    ref2 = led.append({"b": rec(2)})
    assert sorted(ledger.read(str(tmp_path), ref2)[0]) == ["a", "b"]
    assert b"stray" not in open(ledger.path_of(str(tmp_path)), "rb").read()


def test_a_commit_writes_only_the_files_it_adds_and_readers_see_their_union(tmp_path):
    out = str(tmp_path)
    c = Commits(out)
    c.commit(0, 10, {"f0": rec(2)}, 2)
    c.commit(1, 20, {"f1": rec(3), "f2": rec(4)}, 9)
    c.commit(2, 25, {}, 9)                                   # nothing new: no commit
    point = json.load(open(os.path.join(out, COMMITTED)))
    assert "files" not in point and point["commits"] == 2 and point["results"] == 9 and point["files_committed"] == 3
    assert [sorted(e["files"]) for e in read_commits(out, 0, 2)] == [["f0"], ["f1", "f2"]]
    whole = read_committed(out)
    assert whole["files"] == {"f0": rec(2), "f1": rec(3), "f2": rec(4)} and whole["input_offset"] == 20
    assert "files" not in read_committed(out, files=False)
    # a resume from the first checkpoint: the later commit is taken back, the union is what it kept
    r = Commits(out, resumed=("ckpt", 0))
    said = []
    r.resumed({"f0": rec(2)}, 0, said.append, offset=10)
    assert len(said) == 1 and "2 result file(s) committed after checkpoint 0" in said[0], said
    assert read_committed(out)["files"] == {"f0": rec(2)} and read_committed(out)["results"] == 2
    r.commit(1, 22, {"g1": rec(5)}, 7)
    assert sorted(read_committed(out)["files"]) == ["f0", "g1"] and read_committed(out)["results"] == 7


def test_a_resume_from_a_checkpoint_no_commit_named_commits_what_it_kept(tmp_path):
    """A checkpoint that kept files no commit entry names (the run before did not follow):
    the resume's commit adds them, so the union of the commits is what is committed."""
    out = str(tmp_path)
    r = Commits(out, resumed=("ckpt", 3))
    r.resumed({"old0": rec(1), "old1": rec(2)}, 3, lambda line: None, offset=50)
    assert read_committed(out)["files"] == {"old0": rec(1), "old1": rec(2)} and read_committed(out)["results"] == 3


def test_a_follower_reads_each_commit_once(tmp_path):
    """tail's follow reads the commits it has not read, not the whole record each look."""
    out = str(tmp_path)
    os.makedirs(os.path.join(out, "results"))
    c = Commits(out)
    c.commit(0, 10, {"f0": rec(2)}, 2)
    it = follow(out, interval=0.01, once=True)
    with pytest.raises(InputError, match="f0: result part file is missing"):
        next(it)                                           # each file is checked as it is read
    from mpi_join.storage import tail
    files, n = tail._files_since(out, read_committed(out, files=False), 0)
    assert files == {"f0": rec(2)} and n == 1
    c.commit(1, 20, {"f1": rec(3)}, 5)
    files, n = tail._files_since(out, read_committed(out, files=False), n)
    assert files == {"f1": rec(3)} and n == 2
    os.remove(os.path.join(out, "commits", "commit-000000.json"))     # read already: not read again
    assert tail._files_since(out, read_committed(out, files=False), n) == ({}, 2)


def test_a_record_of_format_1_is_still_read(tmp_path):
    out = str(tmp_path)
    with open(os.path.join(out, COMMITTED), "w") as f:
        json.dump({"format": "mpi-join-results-log/1", "files": {"f0": rec(1)}, "commits": 1, "results": 1}, f)
    assert read_committed(out)["files"] == {"f0": rec(1)}
    with open(os.path.join(out, COMMITTED), "w") as f:
        json.dump({"format": "mpi-join-results-log/2", "commits": "x"}, f)
    with pytest.raises(InputError, match="_COMMITTED: not a results commit record"):
        read_committed(out)


def test_a_runs_cuts_record_what_they_add_and_resume_from_the_ledger(tmp_path):
    """A run with a checkpoint every 300 tuples of 6,000 (in process, 4 ranks): its manifests
    name no result file and stay the same size whatever was committed before; the ledger holds
    every file the checkpoints committed, each once; a resume from the one before last (the
    newest removed) is exact and its ledger goes on from that checkpoint's prefix."""
    text = equi_job_text(('"40ms"', '"40ms"'), run='batch_size = 50\nmax_inflight = 2\n')
    text += '\n[checkpoint]\ndir = "ckpt"\nevery_tuples = 300\nkeep = 100\n'
    arrays = random_streams(np.random.default_rng(11), 6000, key_range=8, ts_step=2)
    path, job = write_job(str(tmp_path), text, arrays)
    assert run_local(4, "run", path).returncode == 0
    done = [(c, m) for c, m in ck.list_checkpoints(job.checkpoint.dir) if m]
    assert len(done) >= 5, done
    for _, m in done:
        assert "committed" not in m and "committed_files" not in m
    sizes = [os.path.getsize(os.path.join(ck.ckpt_path(job.checkpoint.dir, c), ck.MANIFEST)) for c, _ in done]
    files = [m["ledger"]["entries"] for _, m in done]
    assert files[-1] > files[0] and max(sizes) - min(sizes) < 200, (files, sizes)
    last = ck.committed_files(job.checkpoint.dir, done[-1][1])
    assert len(last) == files[-1] and sum(r["rows"] for r in last.values()) == done[-1][1]["results"]
    success = json.load(open(os.path.join(job.output, "_SUCCESS")))
    assert set(last) <= set(success["parts"]) and len(success["parts"]) >= len(last)
    # resume from the one before the newest: the newest goes, the ledger is cut back and goes on
    import shutil
    shutil.rmtree(ck.ckpt_path(job.checkpoint.dir, done[-1][0]))
    os.remove(os.path.join(job.output, "_SUCCESS"))
    assert run_local(4, "run", path, "--resume", job.checkpoint.dir).returncode == 0
    assert_equals_oracle(job, arrays)
    again = [(c, m) for c, m in ck.list_checkpoints(job.checkpoint.dir) if m]
    prev = ck.committed_files(job.checkpoint.dir, done[-2][1])      # its prefix is still whole
    assert set(prev) <= set(ck.committed_files(job.checkpoint.dir, again[-1][1]))


def test_bench_commits_times_a_commit_after_each_history(tmp_path):
    """`bench --case commits`' table, small: a row per history, the ratio to the first row's,
    and the listing of every file beside it (its figures are BENCHMARKS.md's, not asserted)."""
    from mpi_join.tools.bench import bench_commits
    said = []
    rows = bench_commits(before=(0, 500), commits=5, workdir=str(tmp_path), say=said.append)
    assert [r[0] for r in rows] == ["0", "500"] and rows[0][2] == "1.00x" and all(r[4].endswith("x") for r in rows)
    assert len(said) == 2 and "after 500 files committed" in said[1]
    assert os.listdir(tmp_path) == []                       # its work directory is removed


def test_a_resume_into_another_checkpoint_directory_carries_the_ledger_there(tmp_path):
    """`--resume A` with the job's checkpoints now going to B: B's ledger starts with the prefix
    A's checkpoint recorded, so B's own checkpoints name every committed file, and a resume
    from B is exact too."""
    import shutil
    text = equi_job_text(('"40ms"', '"40ms"'), run='batch_size = 50\nmax_inflight = 2\n')
    arrays = random_streams(np.random.default_rng(12), 6000, key_range=8, ts_step=2)
    path, job = write_job(str(tmp_path), text + '\n[checkpoint]\ndir = "a"\nevery_tuples = 300\nkeep = 100\n', arrays)
    assert run_local(4, "run", path).returncode == 0
    a = job.checkpoint.dir
    done = [(c, m) for c, m in ck.list_checkpoints(a) if m]
    for c, _ in done[len(done) // 2:]:
        shutil.rmtree(ck.ckpt_path(a, c))
    cid, man = done[len(done) // 2 - 1]
    kept = ck.committed_files(a, man)
    os.remove(os.path.join(job.output, "_SUCCESS"))
    path, job = write_job(str(tmp_path), text + '\n[checkpoint]\ndir = "b"\nevery_tuples = 300\nkeep = 100\n')
    r = run_local(4, "run", path, "--resume", a)
    assert r.returncode == 0 and f"resuming from checkpoint {cid} " in r.stderr, r.stderr
    assert_equals_oracle(job, arrays)
    b = [(c, m) for c, m in ck.list_checkpoints(job.checkpoint.dir) if m]
    assert b and b[0][0] == cid + 1
    first = ck.committed_files(job.checkpoint.dir, b[0][1])
    assert set(kept) <= set(first) and all(first[n] == kept[n] for n in kept)
    with open(ledger.path_of(job.checkpoint.dir), "rb") as f, open(ledger.path_of(a), "rb") as g:
        assert f.read(man["ledger"]["bytes"]) == g.read(man["ledger"]["bytes"])
    os.remove(os.path.join(job.output, "_SUCCESS"))
    for c, _ in b[len(b) // 2:]:
        shutil.rmtree(ck.ckpt_path(job.checkpoint.dir, c))
    assert run_local(4, "run", path, "--resume", job.checkpoint.dir).returncode == 0
    assert_equals_oracle(job, arrays)
