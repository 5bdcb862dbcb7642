"""The M staged streams as the source reads them: one reader per stream (a Parquet file read a
chunk at a time, or an in-memory array) and the rows read but not released yet, so that rank
0's memory does not grow with the input. Rows come out by seq range (`take`), the next row of
each stream is at hand for the expiry bounds (`next_ts`), and ranges are gone past without
reading their row groups (`skip_to`: other sources' parts; `seek`: a resume)."""
import numpy as np

from ..schema import SEQ, TS


class Streams:
    def __init__(self, readers, dtypes):
        self.readers, self.dtypes = readers, dtypes
        self.cursor = [0] * len(readers)          # tuples of each stream released so far
        self._reset()

    def _reset(self):
        self._buf = [np.zeros(0, dt) for dt in self.dtypes]
        self._eof = [False] * len(self.readers)

    @property
    def count(self):
        return sum(r.count for r in self.readers)

    def _fill(self, k, end):
        """Make stream k's buffer hold every row with seq < end, plus one row beyond (the next
        tuple, for the bounds), unless the stream ends first."""
        while not self._eof[k] and (not len(self._buf[k]) or self._buf[k][SEQ][-1] < end):
            c = self.readers[k].next_chunk()
            if c is None:
                self._eof[k] = True
            else:
                self._buf[k] = np.concatenate([self._buf[k], c]) if len(self._buf[k]) else c

    def take(self, end):
        """Each stream's rows with seq below `end` not taken yet (the cursor moves on: `advance`)."""
        out = []
        for k in range(len(self.readers)):
            self._fill(k, end)
            b = self._buf[k]
            n = int(np.searchsorted(b[SEQ], end))
            out.append(b[:n])
            self._buf[k] = b[n:]
        return out

    def advance(self, raw):
        for k, a in enumerate(raw):
            self.cursor[k] += len(a)

    def next_ts(self, released):
        """Each stream's next tuple's ts, or None where none is read (it has ended, or a
        followed log has not committed it yet)."""
        out = []
        for k in range(len(self.readers)):
            self._fill(k, released)
            out.append(int(self._buf[k][TS][0]) if len(self._buf[k]) else None)
        return out

    def heads(self, released):
        """The tuple with seq `released` where it is read already (at most one stream has it)."""
        return [b[:1] if len(b) and b[SEQ][0] == released else b[:0] for b in self._buf]

    def skip_to(self, end, upto):
        """Go past every tuple with seq < `end`: row groups wholly before it are not read, the
        counts come from the files' statistics; no reading ahead past `upto` after."""
        for k, r in enumerate(self.readers):
            b = self._buf[k]
            self._buf[k] = b[int(np.searchsorted(b[SEQ], end)):]
            if not len(self._buf[k]) and not self._eof[k]:
                r.skip_to(end)
            self.cursor[k] = r.count_before(end)
            r.limit(upto)

    def grown(self, files, records, names):
        """A followed log committed more: each stream's new files."""
        for r, f, name in zip(self.readers, files, names):
            r.add(f, records[name])
        self._eof = [False] * len(self.readers)

    def seek(self, offset):
        """Continue after the first `offset` tuples: row groups before it are skipped without
        reading; the rest of the prefix is read and dropped."""
        for r in self.readers:
            r.seek(offset)
        self._reset()
        # per-stream counts before the offset: what the count windows' coordinates continue from
        self.cursor = [r.count_before(offset) for r in self.readers]
