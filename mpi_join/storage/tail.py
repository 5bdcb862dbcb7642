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
