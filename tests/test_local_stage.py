"""`stage` at rest in this process (storage/local_stage.py, `--engine local`, the default's
choice where it can) writes what Spark's path writes: the same rows in the same seq order, the
same quarantined rows and reasons, the same manifest (counts, ranges, finer event times,
sources, staging record), on a corpus of column orders, ISO and integer times with parts finer
than the job's unit, and rows with refused values. A file the reader cannot read as Spark does
goes to Spark under `auto` (said in one line) and is refused in one line under `local`."""
import json
import os

import pyarrow.parquet as pq
import pytest

from conftest import cli
from mpi_join.config import load_job
from mpi_join.storage.staged import read_staged

SLOW = True

JOB = """
[job]
ts_unit = "{unit}"
[input]
staged = "staged"
[output]
dir = "out"
[streams.R]
schema = {{ k = "int32", v = "float64", name = "char8" }}
window = "1s"
raw = {{ path = "raw/R", format = "csv", time = "t", time_unit = "timestamp" }}
[streams.S]
schema = {{ k = "int64", w = "float32" }}
window = "1s"
raw = {{ path = "raw/S", format = "csv", time = "t", time_unit = "us" }}
[predicate]
equi = [["R.k", "S.k"]]
[strategy]
name = "hash"
"""

R_FILES = {
    "a.csv": "t,k,v,name\n2026-03-01T09:30:00.123456Z,1,0.5,ab\n2026-03-01T09:30:00.5+05:30,2,1.5,cd\n"
             "2026-03-01 04:00:01-05:00,abc,2.5,ef\n",
    "b.csv": "name,k,t,v\nxy,3,2026-03-01T09:30:00Z,7.25\nzz,4,2026-03-01T09:30:00.000001Z,1e3\n"
             "q,99999999999,2026-03-01T09:30:02Z,1\nu,11,unknown,1.0\n",
    "c.csv": "k,v,name,t\n5,-0.0,hello,2026-03-01T09:30:00.999Z\n6,xyz,w,2026-03-01T09:30:03Z\n"
             '7,2.5,"",2026-03-01T09:30:04Z\n8,3.5,"a,b",2026-03-01T09:30:05Z\n'
             # nulls: kept in payload columns (unquoted empty, \N), refused in the key and the time
             "9,,\\N,2026-03-01T09:30:06Z\n,1.0,nk,2026-03-01T09:30:07Z\n10,1.0,x,\n",
    # a UTF-8 byte order mark and CRLF line ends (a CR inside a quoted value goes to Spark)
    "d.csv": "\ufeffk,v,name,t\r\n12,1.25,bom,2026-03-01T09:30:08Z\r\n13,2.5,\"c,d\",2026-03-01T09:30:09Z\r\n",
}
S_FILES = {
    "a.csv": "t,k,w\n1772357400000000,1,0.5\n1772357400123456,2,1.5\n1772357400500001,oops,2\n1772357400600000,5,\n",
    "b.csv": "w,k,t\n2.5,3,1772357400999999\n3.5,4,bad\n4.5,-9000000000,1772357401000000\n",
}


def _corpus(root, unit, extra_r=None):
    for s, files in (("R", dict(R_FILES, **(extra_r or {}))), ("S", S_FILES)):
        os.makedirs(root / "raw" / s, exist_ok=True)
        for name, text in files.items():
            (root / "raw" / s / name).write_text(text)
    (root / "job.toml").write_text(JOB.format(unit=unit))


def _both(tmp_path, unit, extra_r=None):
    a, b = tmp_path / "local", tmp_path / "spark"
    for d in (a, b):
        _corpus(d, unit, extra_r)
    ra = cli("stage", "--engine", "local" if extra_r is None else "auto", str(a / "job.toml"))
    rb = cli("stage", "--engine", "spark", str(b / "job.toml"))
    assert ra.returncode == 0 and rb.returncode == 0, ra.stderr[-2000:] + rb.stderr[-2000:]
    return a, b, ra, rb


def _quarantine(d, s):
    q = d / "staged" / "_quarantine" / s
    rows = pq.read_table(str(q)).to_pylist() if q.is_dir() and os.listdir(q) else []
    return sorted(repr(sorted((k, str(v).replace(str(d), "ROOT")) for k, v in r.items())) for r in rows)


@pytest.mark.parametrize("unit", ["ms", "s"])
def test_local_and_spark_stage_the_same_rows_quarantine_and_manifest(spark, tmp_path, unit):
    a, b, ra, rb = _both(tmp_path, unit)
    assert ra.stderr.startswith("stage: engine local"), ra.stderr
    for x, y in zip(read_staged(load_job(str(a / "job.toml"))), read_staged(load_job(str(b / "job.toml")))):
        assert len(x) >= 3 and x.dtype == y.dtype and x.tobytes() == y.tobytes()
    ma, mb = (json.loads((d / "staged" / "_manifest.json").read_text().replace(str(d), "ROOT")) for d in (a, b))
    for k in ("format", "ts_unit", "streams", "total", "quarantined", "sources"):
        assert ma[k] == mb[k], (k, ma[k], mb[k])
    assert ma["staging"]["settings"] == mb["staging"]["settings"]
    assert [[f, n] for f, n, _ in ma["staging"]["inputs"]["R"]] == [[f, n] for f, n, _ in mb["staging"]["inputs"]["R"]]
    assert sum(ma["quarantined"].values()) == 8 and ma["streams"]["R"]["count"] == 10 and ma["streams"]["R"]["ts_finer"] > 0 and ma["streams"]["S"]["ts_finer"] > 0
    for s in "RS":
        assert _quarantine(a, s) == _quarantine(b, s)
        ta, tb = (pq.read_table(str(d / "staged" / s)).sort_by("seq") for d in (a, b))
        nulls = [[t.column(c).is_null().to_pylist() for c in ta.column_names] for t in (ta, tb)]
        assert nulls[0] == nulls[1] and ta.column("seq").to_pylist() == tb.column("seq").to_pylist()
        assert sum(c.null_count for c in ta.columns) >= (2 if s == "R" else 1)
    assert any("k: missing (null)" in r for r in _quarantine(a, "R"))
    assert any("event time t: missing (null)" in r for r in _quarantine(a, "R"))
    # either engine finds the other's output up to date: the same staging record
    for d, other in ((a, "spark"), (b, "local")):
        r = cli("stage", "--engine", other, str(d / "job.toml"))
        assert r.returncode == 0 and "is up to date" in r.stderr, r.stderr


def test_a_file_the_reader_cannot_read_goes_to_spark_under_auto_and_is_refused_under_local(spark, tmp_path):
    a, b, ra, rb = _both(tmp_path, "ms", extra_r={"d.csv": "t,k,v,name\n2026-03-01T09:30:00Z, 7,0.5,a\n"
                                                        "2026-03-01T09:30:01Z,8,0.5,\n"})
    assert "stage: engine spark: file:" in ra.stderr and "d.csv" in ra.stderr, ra.stderr
    for x, y in zip(read_staged(load_job(str(a / "job.toml"))), read_staged(load_job(str(b / "job.toml")))):
        assert x.tobytes() == y.tobytes()
    r = cli("stage", "--engine", "local", "--force", str(a / "job.toml"))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "--engine local: file:" in lines[0] and "d.csv" in lines[0], r.stderr


def test_a_string_column_is_staged_in_process_as_wide_as_its_longest_staged_value(spark, tmp_path):
    """`string` columns (text without a declared width): both engines stage the same UTF-8 text
    and record the same width, the longest value among the rows staged (a refused row's not)."""
    text = JOB.replace('name = "char8"', 'name = "string"')
    for d in (tmp_path / "local", tmp_path / "spark"):
        _corpus(d, "ms", extra_r={"e.csv": "t,k,v,name\n2026-03-01T09:30:10Z,1,0.5,h\u00e9llo w\n"
                                           "2026-03-01T09:30:11Z,xx,0.5," + "z" * 40 + "\n"})
        (d / "job.toml").write_text(text.format(unit="ms"))
    ra = cli("stage", "--engine", "local", str(tmp_path / "local" / "job.toml"))
    rb = cli("stage", "--engine", "spark", str(tmp_path / "spark" / "job.toml"))
    assert ra.returncode == 0 and rb.returncode == 0, ra.stderr[-2000:] + rb.stderr[-2000:]
    ma, mb = (json.loads((d / "staged" / "_manifest.json").read_text()) for d in (tmp_path / "local", tmp_path / "spark"))
    assert ma["streams"]["R"]["string_bytes"] == mb["streams"]["R"]["string_bytes"] == {"name": 8}
    ta, tb = (pq.read_table(str(d / "staged" / "R")).sort_by("seq") for d in (tmp_path / "local", tmp_path / "spark"))
    assert ta.column("name").to_pylist() == tb.column("name").to_pylist()
    assert "h\u00e9llo w" in ta.column("name").to_pylist()
    for x, y in zip(read_staged(load_job(str(tmp_path / "local" / "job.toml"))),
                    read_staged(load_job(str(tmp_path / "spark" / "job.toml")))):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


# JSON lines (fast_json.py): text and numbers as written, nulls and absent keys, bad values that
# are quarantined by themselves, blank lines (no record number), a BOM and CRLF, nested values in
# a column not declared; each column's values agree in kind across files (Spark checks the
# inferred types file by file)
R_JSON = {
    "a.json": '{"t": "2026-03-01T09:30:00.123456Z", "k": "1", "v": 0.5, "name": "ab"}\n'
              '{"name": "cd", "v": 1.5, "k": "2", "t": "2026-03-01T09:30:00.5+05:30"}\n'
              '\n  \t\n'
              '{"t": "2026-03-01 04:00:01-05:00", "k": "abc", "v": 2.5, "name": "\\u00e9f"}\n'
              '{"t": "unknown", "k": "4", "v": 1e3, "name": null}\n'
              '{"t": "2026-03-01T09:30:01Z", "k": "5", "v": -0.0, "extra": [1, {"x": 2}]}\n'
              '{"t": "2026-03-01T09:30:02Z", "k": null, "v": 7, "name": "nk"}\n'
              '{"t": null, "k": "6", "v": 1, "name": "x"}\n'
              '{"t": "2026-03-01T09:30:02.5Z", "k": "7", "v": "nope", "name": "x"}\n',
    "b.json": '\ufeff{"k": "9", "t": "2026-03-01T09:30:03Z", "v": 2.25, "name": "a,b"}\r\n'
              '{"k": "10", "t": "2026-03-01T09:30:04Z", "v": 1.25e-2, "name": ""}\r\n'
              '{"k": "99999999999", "t": "2026-03-01T09:30:05Z", "v": 1, "name": "big"}\r\n'
              '{"k": "11", "t": "2026-03-01T09:30:06Z", "v": "xyz", "name": "q"}\r\n',
}
S_JSON = {
    "a.json": '{"t": 1772357400000000, "k": 1, "w": 0.5}\n{"t": 1772357400123456, "k": 2, "w": 1.5}\n'
              '{"t": 1772357400500001, "k": 3, "w": null}\n{"t": 1772357400600000, "k": 5, "w": 2}\n',
    "b.json": '{"w": 2.5, "k": 3, "t": 1772357400999999}\n{"w": 3.5, "k": 4, "t": null}\n'
              '{"w": 4.5, "k": -9000000000, "t": 1772357401000000}\n{"w": 1e-3, "k": 6, "t": 1772357401000001}\n',
}


def _json_corpus(root, s_extra=None):
    for s, files in (("R", R_JSON), ("S", dict(S_JSON, **(s_extra or {})))):
        os.makedirs(root / "raw" / s, exist_ok=True)
        for name, text in files.items():
            (root / "raw" / s / name).write_bytes(text.encode())
    (root / "job.toml").write_text(JOB.format(unit="ms").replace('format = "csv"', 'format = "json"'))


def test_json_lines_are_staged_in_process_as_spark_stages_them(spark, tmp_path):
    """JSON-lines files (fast_json.py) staged in process and by Spark: the same rows in the same
    seq order, the same nulls, the same quarantined rows (file, record, reason, raw text: a number
    as written) and the same manifest; a bad value quarantines its row only."""
    a, b = tmp_path / "local", tmp_path / "spark"
    for d in (a, b):
        _json_corpus(d)
    ra = cli("stage", "--engine", "local", str(a / "job.toml"))
    rb = cli("stage", "--engine", "spark", str(b / "job.toml"))
    assert ra.returncode == 0 and rb.returncode == 0, ra.stderr[-2000:] + rb.stderr[-2000:]
    assert ra.stderr.startswith("stage: engine local"), ra.stderr
    for x, y in zip(read_staged(load_job(str(a / "job.toml"))), read_staged(load_job(str(b / "job.toml")))):
        assert len(x) >= 5 and x.dtype == y.dtype and x.tobytes() == y.tobytes()
    ma, mb = (json.loads((d / "staged" / "_manifest.json").read_text().replace(str(d), "ROOT")) for d in (a, b))
    for k in ("format", "ts_unit", "streams", "total", "quarantined", "sources"):
        assert ma[k] == mb[k], (k, ma[k], mb[k])
    assert ma["quarantined"] == {"R": 7, "S": 1}, ma["quarantined"]
    for s in "RS":
        assert _quarantine(a, s) == _quarantine(b, s)
        ta, tb = (pq.read_table(str(d / "staged" / s)).sort_by("seq") for d in (a, b))
        assert [ta.column(c).is_null().to_pylist() for c in ta.column_names] == \
               [tb.column(c).is_null().to_pylist() for c in tb.column_names]
    q = _quarantine(a, "R")
    # records count the non-blank lines; a number's text is kept as written
    assert any("'record', '3'" in r and "k: expected an integer" in r for r in q), q
    assert any("'v', '1e3'" in r for r in q) and any("'v', 'nope'" in r for r in q), q


def test_json_files_whose_types_disagree_go_to_spark_which_refuses_them(spark, tmp_path):
    """Spark's path infers each JSON file's column types and refuses files that disagree; the
    in-process reader does not guess: such a file goes to Spark under `auto` (one line), whose
    refusal names both files, and `--engine local` refuses it in one line."""
    _json_corpus(tmp_path, s_extra={"c.json": '{"t": 1772357402000000, "k": "12", "w": 0.5}\n'})
    r = cli("stage", str(tmp_path / "job.toml"))
    assert "stage: engine spark: file:" in r.stderr and "c.json" in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "column 'k' has type string" in lines[0], r.stderr[-2000:]
    r = cli("stage", "--engine", "local", str(tmp_path / "job.toml"))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "c.json" in lines[0], r.stderr


def test_a_json_key_twice_is_refused_in_one_line_naming_the_file(spark, tmp_path):
    """A JSON object with a key twice (or keys that differ only in case): Spark's schema inference
    refuses the file; the in-process reader leaves it to Spark, and stage says which file and key
    in one line (an AnalysisException with neither before)."""
    _json_corpus(tmp_path, s_extra={"c.json": '{"t": 1772357402000000, "k": 12, "w": 0.5, "W": 1.5}\n'})
    r = cli("stage", str(tmp_path / "job.toml"))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert "c.json: key 'w' is in it twice" in lines[0] or "c.json: key 'W' is in it twice" in lines[0], lines
