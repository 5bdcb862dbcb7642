"""What a landing directory may hold besides plain files written by the producer contract, end to
end through a live stager (stage --follow) and a run of the final log, checked against DuckDB's
answer on the files that should count: a symbolic link is read (as `stage` at rest reads it), a
subdirectory is not (said once), an empty file stages nothing (said once), a junk file is
quarantined whole, names that need URI escaping are staged and watched like any other, and a
staged file renamed or hard-linked under a new name is not staged again (said once)."""
import collections
import os
import signal
import subprocess

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import run_local
from mpi_join.config import load_job
from mpi_join.storage.results import read_results
from mpi_join.storage.staged import read_staged
from test_live import JOB, EQUI, _finish, _manifest, _no_process_left, _stager, _wait, short_lived_stagers  # noqa: F401

SLOW = True
ESCAPED = ["a b.csv", "p%41.csv", "h#1.csv", "\u00e9t\u00e9.csv"]


def _csv(path, rows):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write("t,k,v\n" + "".join(f"{t},{k},{v:.4f}\n" for t, k, v in rows))
    os.rename(tmp, path)        # the producer contract: write under a hidden name, then rename


def _rows(rng, n):
    return [(int(t), int(k), float(f"{v:.4f}")) for t, k, v in
            zip(rng.integers(0, 400, n), rng.integers(0, 6, n), rng.random(n))]


def _duckdb_pairs(r_rows, s_rows, window_ms):
    duckdb = pytest.importorskip("duckdb")
    import pyarrow as pa
    con = duckdb.connect()
    for name, rows in (("r", r_rows), ("s", s_rows)):
        con.register(name, pa.table({c: [x[i] for x in rows] for i, c in enumerate("tkv")}))
    q = (f"select r.t, r.k, r.v, s.t, s.k, s.v from r join s on r.k = s.k "
         f"and r.t - s.t > -{window_ms} and r.t - s.t < {window_ms}")
    return collections.Counter(con.execute(q).fetchall())


def test_links_renames_subdirectories_empty_junk_and_escaped_names_in_a_live_log(tmp_path):
    (tmp_path / "job.toml").write_text(JOB.format(window="600ms", predicate=EQUI, strategy="hash", extra=""))
    rng = np.random.default_rng(11)
    R, S, ext = tmp_path / "raw" / "R", tmp_path / "raw" / "S", tmp_path / "ext"
    for d in (R, S, ext, R / "sub"):
        d.mkdir(parents=True)
    counted = {"R": [], "S": []}                       # the rows that should be joined
    for name, d, n in (("f0.csv", R, 40), ("f0.csv", S, 60)):
        rows = _rows(rng, n)
        _csv(str(d / name), rows)
        counted[d.name] += rows
    for name in ESCAPED:
        rows = _rows(rng, 5)
        _csv(str(R / name), rows)
        counted["R"] += rows
    linked = _rows(rng, 30)
    _csv(str(ext / "x.csv"), linked)
    os.symlink("../../ext/x.csv", R / "link.csv")      # read, as stage at rest reads it
    counted["R"] += linked
    _csv(str(R / "sub" / "y.csv"), _rows(rng, 20))     # not read, said once
    (S / "empty.csv").touch()                          # nothing to stage, said once
    (S / "junk.csv").write_bytes(b"\x00\x9f\xfe junk\nmore junk\n")    # quarantined whole
    total = sum(len(v) for v in counted.values())
    stager = _stager(tmp_path)
    _wait(lambda: (_manifest(tmp_path) or {}).get("total", 0)
          + ((_manifest(tmp_path) or {"log": {}})["log"].get("pending") or {}).get("rows", 0) == total,
          "every counted row taken in")
    # an archive step renames a staged file, another hard-links one: neither is staged again
    os.rename(S / "f0.csv", S / "f0-moved.csv")
    os.link(R / "f0.csv", R / "f0-link.csv")
    # a careless producer renames a new file over a staged one whose name needs escaping
    _csv(str(R / "a b.csv"), _rows(rng, 20))
    _wait(lambda: _manifest(tmp_path)["log"]["rewritten"].get("R") == 20, "the rewritten 'a b.csv' quarantined")
    _wait(lambda: len(_manifest(tmp_path)["log"].get("consumed", [])) >= 2 + len(ESCAPED) + 4,
          "the renamed and linked files looked at")
    os.killpg(stager.pid, signal.SIGTERM)
    code, out, err = _finish(stager, "the stager")
    assert code == 0, err[-3000:]
    said = [ln for ln in err.splitlines() if "warning:" in ln]

    def once(*parts):
        hits = [ln for ln in said if all(p in ln for p in parts)]
        assert len(hits) == 1, (parts, said)
    once(str(R / "sub"), "a subdirectory: the files in it are not read")
    once(str(S / "empty.csv"), "an empty file: nothing to stage")
    once(str(S / "junk.csv"), "quarantined")
    once(str(S / "f0-moved.csv"), "the same bytes as", "f0.csv", "not staged again")
    once(str(R / "f0-link.csv"), "the same bytes as", "not staged again")
    once("a%20b.csv", "rewritten after staging", "20 row(s) not staged")
    assert not [ln for ln in said if "link.csv" in ln and "f0-link" not in ln], said
    man = _manifest(tmp_path)
    assert man["log"]["ended"] and man["total"] == total
    assert man["quarantined"] == {"R": 20, "S": 1}           # junk with a NUL byte: one record of its bytes
    assert pq.read_table(str(tmp_path / "staged/_quarantine/S")).num_rows == 1
    # the join of the final log is DuckDB's join of the files that count
    job = load_job(str(tmp_path / "job.toml"))
    p = run_local(3, "run", str(tmp_path / "job.toml"))
    assert p.returncode == 0, p.stderr + p.stdout
    Rs, Ss = read_staged(job)
    by = [{int(a["seq"]): (int(a["ts"]), int(a["k"]), float(a["v"])) for a in arr} for arr in (Rs, Ss)]
    assert sorted(by[0].values()) == sorted(counted["R"]) and sorted(by[1].values()) == sorted(counted["S"])
    got = collections.Counter(by[0][int(r)] + by[1][int(s)] for r, s in read_results(job.output, job.stream_names))
    expect = _duckdb_pairs(counted["R"], counted["S"], 600)
    assert sum(expect.values()) > 0 and got == expect
