"""Result part files (one column <stream>_seq per stream, emit and latency), reading and comparing."""
import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InputError


class ResultWriter:
    """Buffers results of one rank and writes Parquet part files of up to `rows_per_file` rows."""

    def __init__(self, directory, rank, stream_names, rows_per_file=1_000_000):
        self.dir, self.rank, self.names = directory, rank, list(stream_names)
        self.rows_per_file = rows_per_file
        self._buf = []
        self._n = 0
        self.files = []
        os.makedirs(directory, exist_ok=True)

    def add(self, seqs, emit_ns, latency_ns):
        """seqs: list of int64 arrays, one per stream (same length)."""
        if len(emit_ns) == 0:
            return
        self._buf.append((seqs, emit_ns, latency_ns))
        self._n += len(emit_ns)
        if self._n >= self.rows_per_file:
            self.flush()

    def flush(self):
        if not self._buf:
            return
        cols = [np.concatenate([b[0][k] for b in self._buf]) for k in range(len(self.names))]
        emit = np.concatenate([b[1] for b in self._buf])
        lat = np.concatenate([b[2] for b in self._buf])
        table = pa.Table.from_arrays(cols + [emit, lat], names=[f"{n}_seq" for n in self.names] + ["emit_ns", "latency_ns"])
        path = os.path.join(self.dir, f"part-r{self.rank:04d}-{len(self.files):05d}.parquet")
        tmp = path + ".tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, path)
        self.files.append(path)
        self._buf, self._n = [], 0

    def close(self):
        self.flush()
        return self.files


def result_files(path):
    """Part files of a results dataset: `path` is the run's output dir or its results/ dir."""
    if not os.path.exists(path):
        raise InputError(f"{path}: results not found")
    d = os.path.join(path, "results") if os.path.isdir(os.path.join(path, "results")) else path
    files = sorted(glob.glob(os.path.join(d, "*.parquet")))
    if not files and os.path.isfile(path):
        files = [path]
    return files


def read_results(path, stream_names):
    """All result rows as an (n, M) int64 array of seqs, columns in stream order."""
    cols = [f"{n}_seq" for n in stream_names]
    parts = []
    for f in result_files(path):
        try:
            t = pq.read_table(f, columns=cols)
        except Exception as e:  # noqa: BLE001
            raise InputError(f"{f}: cannot read result columns {cols}: {e}") from None
        parts.append(np.stack([t.column(c).to_numpy() for c in cols], axis=1).astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros((0, len(cols)), np.int64)


def compare(expected, got):
    """Compare result sets: (missing rows, extra rows, duplicated rows with their counts)."""
    M = expected.shape[1]
    ue = np.unique(expected, axis=0) if len(expected) else expected.reshape(0, M)
    if len(got):
        ug, cg = np.unique(got, axis=0, return_counts=True)
    else:
        ug, cg = got.reshape(0, M), np.zeros(0, np.int64)
    both = np.concatenate([ue, ug])
    if len(both):
        _, inv, cnt = np.unique(both, axis=0, return_inverse=True, return_counts=True)
        inv = inv.reshape(-1)
        missing = ue[cnt[inv[:len(ue)]] == 1]
        extra = ug[cnt[inv[len(ue):]] == 1]
    else:
        missing = extra = both
    dup = cg > 1
    return missing, extra, (ug[dup], cg[dup])
