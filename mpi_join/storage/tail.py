"""`mpi-join tail`: follow a run's committed results (commits.py), each result once."""
import os

from .commits import read_committed


def follow(out, interval=0.2, once=False, stopped=lambda: False):
    """Yield (commit record, [new result part file paths]) as a followed run in `out` commits,
    each file once and checked against its record, until the run's final commit (or, with
    `once`, after what is committed now). A finished replay run (with _SUCCESS, no commits)
    yields its recorded parts once."""
    import time
    from .checksums import read_success, recorded_parts, verify_part
    seen = set()
    rdir = os.path.join(out, "results")
    while not stopped():
        rec = read_committed(out)
        if rec is None and os.path.exists(os.path.join(out, "_SUCCESS")):
            parts = recorded_parts(read_success(os.path.join(out, "_SUCCESS")), os.path.join(out, "_SUCCESS"))
            rec = {"files": parts, "final": True, "commits": 1, "results": sum(r["rows"] for r in parts.values())}
        if rec is not None:
            new = sorted(set(rec["files"]) - seen)
            for n in new:
                verify_part(os.path.join(rdir, n), rec["files"][n])
            seen.update(new)
            if new or rec.get("final"):
                yield rec, [os.path.join(rdir, n) for n in new]
            if rec.get("final"):
                return
        if once:
            return
        time.sleep(interval)


class Payloads:
    """The staged columns of each result's tuples (`tail --with-payload`): each stream's staged
    rows by seq, read again when a result names a tuple beyond what was read (a followed log
    grows; what a result names is committed before it)."""

    def __init__(self, job):
        self.job, self.rows, self.top = job, None, -1

    def names(self):
        return [f"{s.name}_{c}" for s in self.job.streams for c in ["ts", *s.schema]]

    def values(self, seqs):
        """Per result (rows of `seqs`: one column per stream, -1 for an outer join's missing
        side), its payload values in the order of names()."""
        import numpy as np
        from .staged import read_staged
        need = int(seqs.max()) if seqs.size else -1
        if self.rows is None or need > self.top:
            self.rows = read_staged(self.job)
            self.top = max([int(a["seq"][-1]) for a in self.rows if len(a)] + [-1])
        cols = []
        for k, s in enumerate(self.job.streams):
            a, q = self.rows[k], seqs[:, k]
            at = np.searchsorted(a["seq"], q)
            ok = (q >= 0) & (at < len(a))
            ok[ok] = a["seq"][at[ok]] == q[ok]
            for c in ["ts", *s.schema]:
                col = a[c]
                cols.append([_plain(col[i], col.dtype) if good else None for i, good in zip(at, ok)])
        return list(zip(*cols)) if cols else [() for _ in range(len(seqs))]


def _plain(v, dt):
    """A staged value as text or a number: char columns as text without their padding, arrays
    as base64 (as a CSV or JSON landing file gives them)."""
    import base64
    import numpy as np
    if dt.shape:
        return base64.b64encode(np.ascontiguousarray(v).tobytes()).decode()
    if dt.kind == "S":
        return bytes(v).rstrip(b"\0").decode("utf-8", "replace")
    return v.item() if hasattr(v, "item") else v
