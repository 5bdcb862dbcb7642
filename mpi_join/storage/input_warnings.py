"""Warnings about staged input that is valid but probably not what the user meant: streams whose
event times never come within a window of each other (an empty answer, exit 0), event times
with a part finer than the job's ts_unit (dropped when staged), and event times that look like
they were read in the wrong unit (a float-seconds column read as "ms" lands in
January 1970). `check`, `explain` and `run` print them, one line each; they never stop a run."""
import datetime

from ..units import ts_unit_ns

_DAY_NS = 86_400 * 10**9
_YEAR_NS = 365 * _DAY_NS
MAX_RATE = 1e8          # tuples/s per stream beyond which an event-time unit is implausible


def human(ts, unit):
    """An event time as UTC date and time (ts counted from the Unix epoch in `unit`)."""
    ns = int(ts) * ts_unit_ns(unit)
    try:
        t = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=ns // 1000)
    except OverflowError:
        return f"{ts} {unit} (beyond year 9999)"
    return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{(ns // 1_000_000) % 1000:03d}" if ns % 10**9 else "")


def duration(ns, exact=False):
    """`ns` in words ("5 s", "1.5 min"); `exact`: in the largest unit it is a whole number of
    ("5001 ms", not "5 s"), for a condition the join keeps to the unit."""
    for unit, per in (("d", _DAY_NS), ("h", 3_600 * 10**9), ("min", 60 * 10**9), ("s", 10**9), ("ms", 10**6),
                      ("us", 10**3)):
        if exact and ns % per:
            continue
        if exact and abs(ns) >= per:
            return f"{ns // per} {unit}"
        if abs(ns) >= per:
            v = ns / per
            return f"{v:g} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{ns} ns"


def warnings(job, man):
    """Lines (without the "mpi-join: warning: " prefix) about `job`'s staged input (`man`; None:
    nothing staged yet, only the job's own)."""
    out = []
    unit = job.ts_unit
    per = ts_unit_ns(unit)
    for b in job.predicate.band:
        if b.eps < 0 or (b.eps == 0 and not b.closed):
            l, r = (f"{job.streams[i].name}.{c}" for i, c in (b.left, b.right))
            out.append(f"predicate: the band |{l} - {r}| {'<=' if b.closed else '<'} {b.eps:g} holds for no pair "
                       f"(an absolute difference is never below 0): the answer is empty")
    if man is None:                     # nothing staged yet: what the job alone says
        return out
    st = {s.name: man["streams"].get(s.name, {}) for s in job.streams}
    for s in job.streams:
        m = st[s.name]
        n, lo, hi = m.get("count", 0), m.get("ts_min"), m.get("ts_max")
        finer = m.get("ts_finer") or 0
        if finer:
            out.append(f"stream {s.name}: {finer:,} of its event times had a part finer than ts_unit = \"{unit}\", "
                       f"dropped when staged (such as the milliseconds of ISO timestamps): tuples closer than a "
                       f"{unit} apart now have equal event times; set job.ts_unit finer and stage again")
        if not n or lo is None:
            out.append(f"stream {s.name} has no staged tuples: every result needs one of each stream, so the "
                       f"answer is empty")
            continue
        lo_ns, span_ns = lo * per, (hi - lo) * per
        if _DAY_NS < lo_ns < 30 * _YEAR_NS or lo_ns > 230 * _YEAR_NS:
            out.append(f"stream {s.name}'s event times start at {human(lo, unit)} UTC: "
                       f"{'before 2000' if lo_ns < 30 * _YEAR_NS else 'after 2200'}; if the raw time column is "
                       f"in another unit than its time_unit says, stage again with the right one")
        if n > 100 and span_ns > 0 and n / (span_ns / 1e9) > MAX_RATE:
            out.append(f"stream {s.name} has {n:,} tuples within {duration(span_ns)} of event time "
                       f"({n / (span_ns / 1e9):,.0f} tuples/s): are its event times in another unit than {unit!r}?")
        if span_ns > 100 * _YEAR_NS:
            out.append(f"stream {s.name}'s event times span {duration(span_ns)}: are they in another unit than {unit!r}?")
    names = [s.name for s in job.streams]
    for i, a in enumerate(job.streams):
        for b in job.streams[i + 1:]:
            ma, mb = st[a.name], st[b.name]
            if not ma.get("count") or not mb.get("count") or ma.get("ts_min") is None or mb.get("ts_min") is None:
                continue
            if not job.predicate.between(names.index(a.name), names.index(b.name)):
                continue
            gap = _gap(a, ma, b, mb)
            if gap is not None:
                out.append(f"streams {a.name} ({human(ma['ts_min'], unit)} .. {human(ma['ts_max'], unit)} UTC) and "
                           f"{b.name} ({human(mb['ts_min'], unit)} .. {human(mb['ts_max'], unit)} UTC) never come "
                           f"within their windows of each other ({duration(gap * per)} apart): no pair of them can "
                           f"join")
    return out


def _gap(a, ma, b, mb):
    """How far apart two streams' time ranges are beyond their windows, or None when a pair of
    their tuples can be close enough (count and unbounded windows always can)."""
    if a.window.kind != "time" or b.window.kind != "time":
        return None
    # a pair (x of a, y of b) can join only if -W_a < x.ts - y.ts < W_b
    if ma["ts_min"] - mb["ts_max"] >= b.window.size:        # every a after every b, by more than b's window
        return ma["ts_min"] - mb["ts_max"]
    if mb["ts_min"] - ma["ts_max"] >= a.window.size:
        return mb["ts_min"] - ma["ts_max"]
    return None
