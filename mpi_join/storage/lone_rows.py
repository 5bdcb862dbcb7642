"""An outer join's rows without a partner, for the strategies whose places cannot tell alone.

`hash` finds every partner of a tuple on the one rank its key goes to, so that rank emits the
tuple's lone row when it leaves the window (slaves/local_join.py). The other strategies store
a tuple in one place and probe it from others (a matrix row's cells, a biclique unit and the
units of the other side, a chain's segments, the join cores of a tree), so no place knows that
a tuple met no partner. Their places agree through the results themselves: a tuple met a
partner exactly when a result names it, and every result is in a part file the run records.

Rank 0 keeps the count (LoneRows). At each completed checkpoint (a followed run's commits) it
reads the seq columns of the kept streams in the result files the cut closed, and the staged rows
up to the cut's offset (seq and ts); the kept tuples final at the cut that no result named are
written as lone rows (the other side null) into part files of rank 0's own (`part-r0000-*`),
committed with the cut. A tuple is final at a cut when no result naming it can come after it:
- where the strategy finds every pair of the input before a cut by the cut
  (StrategyInfo.cut_complete: matrix, biclique, psp), once its window has passed the newest
  event time read (ts + window < it: no tuple still to come can be its partner);
- elsewhere (handshake and llhj: a chain's tuples meet as they move along it, so a pair may be
  found after the cut that holds both; splitjoin: results merge up its tree after the cut), once
  no rank holds it: every rank says with its part of the cut the oldest seq of each stream it
  still holds (windows, retained batches, queued results, channel state: runtime/operator.oldest), and
  a tuple older than all of them has left every window after meeting every partner (a tuple
  leaves a chain at its end, a core's window when nothing still to come sees it), so each of
  its results was written before the cut (the cut is consistent).
Its open tuples go into rank 0's checkpoint file, so a resume (at any rank count) goes on from
the cut. When the input has ended every tuple is final: the rest are written after the last
result. Exactly once: each tuple is final at one cut, and what a cut wrote is committed with it
or taken back with it. Their `emit_ns` is when they were written; their `latency_ns` is null (no
probe made them).
"""
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..schema import SEQ, TS
from .results import _write, part_name

ROWS_PER_FILE = 1_000_000
_E = np.zeros(0, np.int64)


def finality(job):
    """How rank 0 tells that an outer join's kept tuple is final (LoneRows): "time" where a cut
    holds every pair before it (StrategyInfo.cut_complete), else "held" (its ranks then say at
    each cut what they hold: operator.oldest); None where rank 0 writes no lone rows (no outer
    join, or a strategy whose ranks emit them: StrategyInfo.outer)."""
    from .. import strategies
    info = strategies.get(job.strategy.name)
    if not job.predicate.outer or info.outer:
        return None
    return "time" if info.cut_complete else "held"


class LoneRows:
    def __init__(self, job, by_time=False, rows_per_file=ROWS_PER_FILE):
        """`by_time`: the strategy finds every pair of the input before a cut by the cut
        (StrategyInfo.cut_complete), so a tuple is final once its window has passed; else once no
        rank holds it (the module docstring)."""
        self.job, self.rows_per_file, self.by_time = job, rows_per_file, by_time
        self.names = job.stream_names
        self.kept = tuple(job.predicate.outer)
        self.reach = [s.window.size if s.window.kind == "time" else None for s in job.streams]
        self.rdir = os.path.join(job.output, "results")
        self.read_to = 0                 # the staged rows before this seq have been read
        self.last_ts = None              # the newest event time read
        self.open = {k: (_E, _E, np.zeros(0, bool)) for k in self.kept}   # kept rows not final: seq, ts, met
        self.number = 0                  # rank 0's next part file
        self.absorbed = set()            # result files whose seqs are counted
        self.written = {}                # this run's lone files: {name: record}
        self.before = 0                  # lone rows the checkpoint this run resumed from had committed
        self._readers = None
        self._held = {}                  # per stream: rows read past the last offset

    # -- a checkpoint's state (rank 0's file) ------------------------------------------------
    def state(self):
        """(arrays, attrs) of rank 0's checkpoint file."""
        arrays = {}
        for k, (seq, ts, met) in self.open.items():
            arrays.update({f"lone/seq{k}": seq, f"lone/ts{k}": ts, f"lone/met{k}": met.astype(np.uint8)})
        return arrays, {"read_to": self.read_to, "last_ts": self.last_ts, "number": self.number, "rows": self.rows}

    @property
    def rows(self):
        """Lone rows written so far, those of the runs before a resume's checkpoint included."""
        return self.before + sum(r["rows"] for r in self.written.values())

    @staticmethod
    def dtype(name):
        """The dtype of a state array (checkpoint.read_rank's check)."""
        return np.dtype(np.uint8) if name.startswith("lone/met") else np.dtype(np.int64)

    def restore(self, arrays, attrs, committed):
        """Go on from a checkpoint's state; `committed`: the result files it committed (their
        seqs were counted before it)."""
        for k in self.kept:
            self.open[k] = (arrays[f"lone/seq{k}"].astype(np.int64), arrays[f"lone/ts{k}"].astype(np.int64),
                            arrays[f"lone/met{k}"].astype(bool))
        self.read_to, self.last_ts, self.number = int(attrs["read_to"]), attrs["last_ts"], int(attrs["number"])
        self.before = int(attrs.get("rows", 0))
        self.absorbed = set(committed)

    # -- at a cut, and at the end ----------------------------------------------------------
    def cut(self, offset, records, held=()):
        """A checkpoint at input `offset` completed; `records`: the result files it closed; `held`:
        each rank's oldest seq per stream at the cut (protocol.MarkerDone.oldest). Returns the
        records of the lone-row files written for the tuples it made final."""
        self._read(offset)
        self._absorb(records)
        if self.last_ts is None:
            return {}
        floor = None if self.by_time else self._floor(held)
        out = {}
        for k in self.kept:
            seq, ts, met = self.open[k]
            if not self.by_time:
                final = np.zeros(len(seq), bool) if floor is None else seq < floor[k]
            else:
                final = np.zeros(len(seq), bool) if self.reach[k] is None else ts + self.reach[k] < self.last_ts
            out.update(self._emit(k, seq[final & ~met]))
            self.open[k] = (seq[~final], ts[~final], met[~final])
        return out

    def _floor(self, held):
        """Per stream, the oldest seq any rank holds (no rank holds one: past every seq); None
        when a rank could not tell."""
        if any(h is None for h in held):
            return None
        n = len(self.names)
        return [min([int(h[k]) for h in held if int(h[k]) >= 0], default=np.iinfo(np.int64).max) for k in range(n)]

    def finish(self, total, records):
        """The input (`total` tuples) has ended and `records` are every result file of the run:
        every tuple is final; returns the records of the lone-row files written."""
        records = {n: r for n, r in records.items() if n not in self.absorbed}
        met_rest = np.zeros(max(0, total - self.read_to), bool)      # the rows not read yet, by seq
        for name in sorted(records):
            for k, got in self._seqs(name).items():
                self._mark(k, got)
                rest = got[got >= self.read_to] - self.read_to
                met_rest[rest[rest < len(met_rest)]] = True
        out = {}
        for k in self.kept:
            seq, _, met = self.open[k]
            out.update(self._emit(k, seq[~met]))
            self.open[k] = (_E, _E, np.zeros(0, bool))
            for chunk in self._staged_seqs(k):
                chunk = chunk[(chunk >= self.read_to) & (chunk < total)]
                out.update(self._emit(k, chunk[~met_rest[chunk - self.read_to]]))
        self.read_to = total
        return out

    # -- the parts ----------------------------------------------------------------------------
    def _seqs(self, name):
        """{kept stream: the seqs results of file `name` give it (nulls left out)}."""
        t = pq.read_table(os.path.join(self.rdir, name), columns=[f"{self.names[k]}_seq" for k in self.kept])
        return {k: t.column(f"{self.names[k]}_seq").drop_null().to_numpy().astype(np.int64) for k in self.kept}

    def _mark(self, k, got):
        seq, ts, met = self.open[k]
        if len(seq) and len(got):
            at = np.searchsorted(seq, got)
            ok = at < len(seq)
            ok[ok] = seq[at[ok]] == got[ok]
            met[at[ok]] = True

    def _absorb(self, records):
        for name in sorted(records):
            if name in self.absorbed:
                continue
            for k, got in self._seqs(name).items():
                self._mark(k, got)
            self.absorbed.add(name)

    def _read(self, offset):
        """Read every stream's staged rows with seq below `offset` (seq and ts): the kept ones'
        go to the open rows, and the newest event time is kept."""
        from .staged import StreamReader, staged_manifest, stream_files
        man = staged_manifest(self.job)
        if self._readers is None:
            self._readers = [StreamReader(self.job.staged, s, man=man, bare=True) for s in self.job.streams]
            for r in self._readers:
                r.seek(self.read_to)
        else:                              # a followed log: the parts committed since
            for s, r in zip(self.job.streams, self._readers):
                had = {p[0] for p in r.parts}
                r.add([f for f in stream_files(self.job.staged, s.name, man) if f not in had],
                      (man.get("files") or {}).get(s.name))
        for i, r in enumerate(self._readers):
            got = []
            while True:
                c = self._held.pop(i, None)
                if c is None:
                    c = r.next_chunk()
                if c is None:
                    break
                if len(c) and c[SEQ][-1] >= offset:
                    cut = int(np.searchsorted(c[SEQ], offset))
                    if cut < len(c):
                        self._held[i] = c[cut:]
                    got.append(c[:cut])
                    break
                got.append(c)
            rows = np.concatenate(got) if got else None
            if rows is None or not len(rows):
                continue
            top = int(rows[TS][-1])
            self.last_ts = top if self.last_ts is None else max(self.last_ts, top)
            if i in self.open:
                seq, ts, met = self.open[i]
                self.open[i] = (np.concatenate([seq, rows[SEQ].astype(np.int64)]),
                                np.concatenate([ts, rows[TS].astype(np.int64)]),
                                np.concatenate([met, np.zeros(len(rows), bool)]))
        self.read_to = max(self.read_to, int(offset))

    def _staged_seqs(self, k):
        """Stream k's staged seqs, a file at a time."""
        from .staged import staged_manifest, stream_files
        for f in stream_files(self.job.staged, self.names[k], staged_manifest(self.job)):
            yield pq.read_table(f, columns=[SEQ]).column(SEQ).to_numpy().astype(np.int64)

    def _emit(self, k, seq):
        """Lone rows of stream k's tuples `seq` into rank 0's part files; their records."""
        out = {}
        names = [f"{n}_seq" for n in self.names] + ["emit_ns", "latency_ns"]
        for i in range(0, len(seq), self.rows_per_file):
            part = np.sort(seq[i:i + self.rows_per_file]).astype(np.int64)
            seqs = [part if j == k else np.full(len(part), -1, np.int64) for j in range(len(self.names))]
            chunk = (seqs, np.full(len(part), time.time_ns(), np.int64), pa.nulls(len(part), pa.int64()))
            name, rec = _write([chunk], names, os.path.join(self.rdir, part_name(0, self.number)))
            self.number += 1
            out[name] = rec
        self.written.update(out)
        self.absorbed.update(out)
        return out
