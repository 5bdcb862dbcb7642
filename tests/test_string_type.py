"""The `string` column type: text without a declared width, staged as Parquet UTF-8 strings,
held in memory as wide as the staged input's longest value (recorded by staging)."""
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import cli, job_toml, stream_toml, write_job
from mpi_join.config import load_job
from mpi_join.join.oracle import run_oracle
from mpi_join.storage.staged import read_staged

WORDS = ["AAPL", "é", "日本語", "BRK.B", "A", "a much longer symbol than the others"]


def _job(tmp_path, r_key="string", s_key="string"):
    text = job_toml(stream_toml("R", f'k = "{r_key}", v = "int32"', '"20ms"')
                    + stream_toml("S", f'k = "{s_key}", note = "string"', '"20ms"'),
                    'equi = [["R.k", "S.k"]]')
    rng = np.random.default_rng(4)
    n = 400
    seq = np.arange(2 * n)
    owner = rng.permutation(np.repeat([0, 1], n))
    arrays = []
    for side, extra in ((0, ("v", "i4")), (1, ("note", "S64"))):
        key = (r_key, s_key)[side]
        a = np.zeros(n, [("seq", "i8"), ("ts", "i8"), ("k", f"S{key[4:]}" if key.startswith("char") else "S64"), extra])
        a["seq"] = seq[owner == side]
        a["ts"] = a["seq"] // 4
        a["k"] = [WORDS[i].encode() for i in rng.integers(0, len(WORDS) - 1, n)]   # never the longest
        if side == 1:
            a["note"] = [("x" * int(i)).encode() for i in rng.integers(0, 9, n)]
        arrays.append(a)
    arrays[0]["k"][7] = WORDS[-1].encode()                                           # one long outlier
    path, _ = write_job(str(tmp_path), text, None)
    job = load_job(path)
    from mpi_join.storage.staged import write_staged
    write_staged(job.staged, job.streams, arrays, "ms")
    return path, arrays


def test_string_columns_are_staged_as_utf8_text_and_held_at_their_longest_value(tmp_path):
    import duckdb
    path, arrays = _job(tmp_path)
    job = load_job(path)
    staged = os.path.join(job.staged, "R", "part-00000.parquet")
    assert pa.types.is_string(pq.read_schema(staged).field("k").type)
    assert duckdb.sql(f"SELECT k FROM '{staged}'").types == ["VARCHAR"]
    assert all(isinstance(v, str) for v in pq.read_table(staged).column("k").to_pylist())
    man = json.load(open(os.path.join(job.staged, "_manifest.json")))
    longest = len(WORDS[-1].encode())
    assert man["streams"]["R"]["schema"]["k"] == "string"
    assert man["streams"]["R"]["string_bytes"] == {"k": longest}
    assert man["streams"]["S"]["string_bytes"] == {"k": len("日本語".encode()), "note": 8}
    assert job.streams[0].dtype["k"].itemsize == longest
    r, s = read_staged(job)
    assert [x.decode() for x in r["k"]] == [x.decode() for x in arrays[0]["k"]]


def test_a_string_key_joins_by_value_against_string_and_char_keys(tmp_path):
    for r_key in ("string", "char40"):
        path, arrays = _job(tmp_path / r_key, r_key=r_key)
        job = load_job(path)
        got = {(int(a), int(b)) for a, b in run_oracle(job, read_staged(job))[:, :2]}
        r, s = arrays
        want = {(int(x["seq"]), int(y["seq"])) for x in r for y in s
                if x["k"] == y["k"] and abs(int(x["ts"]) - int(y["ts"])) < 20}
        assert got == want and len(want) > 100


def test_a_job_that_changed_char_to_string_after_staging_is_refused(tmp_path):
    path, _ = _job(tmp_path, r_key="char40")
    text = open(path).read().replace('k = "char40"', 'k = "string"')
    open(path, "w").write(text)
    p = cli("oracle", path)
    assert p.returncode == 2, p.stderr
    assert "column 'k' was staged as char40, the job declares string" in p.stderr


def test_a_manifest_without_the_width_of_a_string_column_is_refused(tmp_path):
    path, _ = _job(tmp_path)
    job = load_job(path)
    mp = os.path.join(job.staged, "_manifest.json")
    man = json.load(open(mp))
    del man["streams"]["S"]["string_bytes"]["note"]
    json.dump(man, open(mp, "w"))
    p = cli("oracle", path)
    assert p.returncode == 2, p.stderr
    assert "streams.S.string_bytes: no width recorded for string column 'note'" in p.stderr
