"""Latency from landing (README "Live streams"): for each committed result of a followed run,
from the moment the stager first saw the landing file of its newest tuple (the log part's
_landed_ns column, staged_log.LANDED) to the commit that made the result visible, and its
parts: landing to staged (the log batch's commit), staged to released (rank 0 releasing the
tuple), released to joined (the result's latency_ns), joined to committed (the run's commit).

`Clock` reads the log's parts and the run's commits incrementally, so that `mpi-join live`
asks it every few seconds for the results committed since it last asked."""
import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq

from .staged_log import LANDED, LOG

PARTS = ("landing_to_staged", "staged_to_released", "released_to_joined", "joined_to_committed")


class Clock:
    """When each tuple of a log landed and was staged (by seq), and when each result file of a
    run was committed; what is read once is not read again."""

    def __init__(self, job):
        self.job = job
        self.landed = np.zeros(0, np.int64)
        self.staged = np.zeros(0, np.int64)
        self.parts_read, self.batches_read, self.files_done = set(), set(), set()
        self.commits_read = 0          # commit entries read (each is read once)
        self.part_commit = {}            # (stream, part) -> the log batch's committed_ns

    def _grow(self, n):
        if n > len(self.landed):
            m = max(n, 2 * len(self.landed))
            self.landed = np.concatenate([self.landed, np.zeros(m - len(self.landed), np.int64)])
            self.staged = np.concatenate([self.staged, np.zeros(m - len(self.staged), np.int64)])

    def _read_log(self):
        d = os.path.join(self.job.staged, LOG)
        for p in sorted(glob.glob(os.path.join(d, "batch-*.json"))):
            if p in self.batches_read:
                continue
            try:
                with open(p) as f:
                    e = json.load(f)
            except (OSError, ValueError):
                continue
            self.batches_read.add(p)
            for n, st in (e.get("streams") or {}).items():
                for part in st.get("files") or {}:
                    self.part_commit[(n, part)] = e["committed_ns"]
        for (n, part), ns in list(self.part_commit.items()):
            if (n, part) in self.parts_read:
                continue
            f = os.path.join(self.job.staged, n, part)
            try:
                t = pq.read_table(f, columns=["seq", LANDED])
            except Exception:  # noqa: BLE001 - a log written before LANDED: no landing times
                self.parts_read.add((n, part))
                continue
            seq = t.column("seq").to_numpy()
            if len(seq):
                self._grow(int(seq.max()) + 1)
                self.landed[seq] = t.column(LANDED).to_numpy()
                self.staged[seq] = ns
            self.parts_read.add((n, part))

    def new_results(self, out):
        """Per result committed in `out` since the last call: {"total": ns array, part: ns
        array...} from landing to commit (results whose tuple has no landing time are left out)."""
        from .commits import read_commits, read_committed
        rec = read_committed(out, files=False)
        if rec is None:
            return None
        first = self.commits_read if rec["commits"] >= self.commits_read else 0    # a resume took some back
        try:
            entries = read_commits(out, first, rec["commits"])
        except FileNotFoundError:           # taken back as it was read: the next look
            return None
        self.commits_read = rec["commits"]
        files = [(n, e["committed_ns"]) for e in entries for n in (e.get("files") or {})
                 if n not in self.files_done]
        if not files:
            return None
        self._read_log()
        cols = [f"{s}_seq" for s in self.job.stream_names]
        got = {k: [] for k in ("total",) + PARTS}
        for name, commit_ns in files:
            self.files_done.add(name)
            try:
                t = pq.read_table(os.path.join(out, "results", name), columns=cols + ["emit_ns", "latency_ns"])
            except Exception:  # noqa: BLE001 - a file the run's recovery removed
                continue
            trig = np.max(np.stack([t.column(c).fill_null(-1).to_numpy() for c in cols], axis=1), axis=1)
            ok = (trig >= 0) & (trig < len(self.landed))
            trig = trig[ok]
            landed, staged = self.landed[trig], self.staged[trig]
            ok2 = landed > 0
            emit = t.column("emit_ns").to_numpy()[ok][ok2]
            lat = t.column("latency_ns").to_numpy()[ok][ok2]
            landed, staged = landed[ok2], staged[ok2]
            got["total"].append(commit_ns - landed)
            got["landing_to_staged"].append(staged - landed)
            got["staged_to_released"].append(emit - lat - staged)
            got["released_to_joined"].append(lat)
            got["joined_to_committed"].append(commit_ns - emit)
        return {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in got.items()}


def percentiles(lat, qs=(50, 99)):
    """{"p50": ms, "p99": ms, "results": n} of each kind in `lat` (Clock.new_results), or None."""
    if lat is None or not len(lat["total"]):
        return None
    return {k: {**{f"p{q}": round(float(np.percentile(v, q)) / 1e6, 1) for q in qs}, "results": int(len(v))}
            for k, v in lat.items()}
