"""What a job's input asks of any join, read from the input alone: each stream's arrival rate and
window in seconds (plan, the cost models, the benches), and the pairs a nested-loop window join
compares (the benches' comparisons per second)."""
from .staged import staged_manifest
from ..units import ts_unit_ns
from ..join.window import index_ranges


def rates_and_windows(job):
    """Each stream's arrival rate (tuples per event-time second, from the staged manifest) and
    window in seconds (a count window: its tuples over the stream's rate)."""
    man = staged_manifest(job)
    unit_s = ts_unit_ns(job.ts_unit) / 1e9
    lam, W = [], []
    for s in job.streams:
        st = man["streams"][s.name]
        span = max(1, int(st["ts_max"]) - int(st["ts_min"])) * unit_s if st.get("ts_max") is not None else None
        rate = st["count"] / span if span else 1.0
        lam.append(rate)
        w = s.window
        W.append(w.size * unit_s if w.kind == "time" else (w.size / rate if w.kind == "count" else float("inf")))
    return lam, W


def comparisons(job, arrays):
    """Pairs a nested-loop window join compares: every tuple against the other stream's window."""
    total = 0
    for i, j in ((0, 1), (1, 0)):
        lo, hi = index_ranges(job.streams[j].window, arrays[i], arrays[j])
        total += int((hi - lo).sum())
    return total
