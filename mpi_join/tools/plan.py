"""`mpi-join check` and `mpi-join explain`: what a user can learn about a job before a long run.

`check` validates everything a run would validate before it starts (the job file, the strategy
against the rank count, the staged input's manifest, unit and schema, each Parquet file's
schema and row counts) without starting MPI. `explain` prints the plan: the strategy and its
parameters, every rank's role and links, each window in tuples at the staged arrival rate, the
state a worker holds if the windows spread evenly, and which local join decides which condition.
"""
from .. import strategies
from ..storage.staged import StreamReader, staged_files, staged_manifest
from ..units import ts_unit_ns
from ..join.window import runtime_dtype


def not_staged_yet(job):
    """Has the job raw input for every stream and nothing staged yet? (check and explain then
    judge the job alone and say what they could not check.)"""
    import os
    from ..storage.staged import MANIFEST
    return all(s.raw is not None for s in job.streams) and not os.path.exists(os.path.join(job.staged, MANIFEST)) \
        and (not os.path.isdir(job.staged) or not os.listdir(job.staged))


def check(job, nranks):
    """Raise JobError on the first problem; returns the staged manifest (None: nothing is staged
    yet, the job has raw input, and only the job was checked)."""
    strategies.check_runnable(job, nranks)
    if not_staged_yet(job):
        return None
    man = staged_manifest(job)
    staged_files(job, man)                         # part files present, none extra, sizes as staged
    for s in job.streams:
        r = StreamReader(job.staged, s)            # opens every file and checks its schema
        want = man["streams"][s.name]["count"]
        if r.count != want:
            from ..errors import InputError
            raise InputError(f"{job.staged}: the manifest counts {want:,} tuples of stream '{s.name}', its "
                             f"Parquet files hold {r.count:,}; stage the input again")
    return man


def explain(job, nranks):
    """The plan as lines of text (after `check`)."""
    man = check(job, nranks)
    info = strategies.get(job.strategy.name)
    auto = None
    if job.run.sources_auto:          # what run would choose with one core per rank
        from dataclasses import replace
        from .scaling_model import auto_sources
        k, why = auto_sources(job, nranks, nranks)
        job = replace(job, run=replace(job.run, sources=k))
        auto = f"run.sources = \"auto\": {k} ({why}; a run decides on the cores its ranks have)"
    graph = info.build_graph(nranks, job.strategy.params, job.run.sources)
    staged = (f"{man['total']:,} staged tuples" if man is not None else
              f"nothing staged yet in {job.staged} (the plan from the job alone; `mpi-join stage JOB` stages it)")
    out = [f"job {job.name}: {len(job.streams)} streams, {staged}, ts in {job.ts_unit}",
           f"strategy {info.name}: {info.summary}"]
    out += [f"  {k} = {v!r}" + ("" if v != info.params[k].default else " (default)")
            for k, v in job.strategy.params.items() if not info.params[k].testing]
    out.append(f"ranks: {nranks} in a {graph.name} graph"
               + (f", {len(graph.sources)} sources (ranks {', '.join(map(str, graph.sources))}), each routing one "
                  f"part of the input in {len(graph.sources)}; the routing's changes are placed in the input, where "
                  f"every source applies them" if len(graph.sources) > 1
                  else ""))
    if auto:
        out.append(f"  {auto}")
    for r, d in graph.describe().items():
        kinds = sorted({k for k in d["carries"].values() if k != "input"})
        out.append(f"  rank {r}: {d['role']:<7} receives from {d['up'] or '-'}, sends to {d['down'] or '-'}"
                   + (f" ({', '.join(kinds)})" if kinds else ""))
    said = graph.explain()
    if said:
        out += [f"what the ranks do ({job.strategy.name}):"] + ["  " + line for line in said]
    workers = max(1, len(graph.workers))
    state = 0
    out.append("windows:")
    for k, s in enumerate(job.streams):
        w, row = s.window, runtime_dtype(s.dtype, len(job.streams)).itemsize
        if man is None:                  # no arrival rate yet: a count window's size, a time window's span
            state += (w.size if w.kind == "count" else 0) * row
            out.append(f"  {s.name}: {w.size:,} tuples (count window)" if w.kind == "count" else
                       f"  {s.name}: {w.text} (its tuples follow the arrival rate, known once staged), "
                       f"{row} bytes a row")
            continue
        st = man["streams"][s.name]
        span = (st["ts_max"] - st["ts_min"]) if st["count"] > 1 and st["ts_max"] is not None else 0
        rate = (st["count"] - 1) / span if span > 0 else 0.0
        if w.kind == "time":
            tuples = min(st["count"], int(round(w.size * rate)))
            how = f"{w.text} x {rate * 1e9 / ts_unit_ns(job.ts_unit):,.0f} tuples/s staged"
        elif w.kind == "count":
            tuples, how = min(st["count"], w.size), "count window"
        else:
            tuples, how = st["count"], "unbounded: every tuple"
        state += tuples * row
        out.append(f"  {s.name}: about {tuples:,} tuples ({how}), {row} bytes a row")
    if man is None and any(s.window.kind != "count" for s in job.streams):
        out.append("state: follows the arrival rate of the windows' streams, known once the input is staged")
    else:
        out.append(f"state: about {state / workers / 2**20:,.1f} MB per worker if the windows spread evenly over "
                   f"{workers} workers ({state / 2**20:,.1f} MB in all)")
    sql = ((job.raw or {}).get("predicate") or {}).get("sql")
    if sql:
        from ..join.sql import as_toml
        out.append("join, as given in SQL: " + " ".join(sql.split()))
        out += ["  read as the TOML form: [predicate] " + "; ".join(as_toml(job.raw["predicate"]))]
    for st in job.streams:
        if st.filter:
            out.append(f"filter {st.name}: {st.filter} (a row that fails it meets no partner"
                       + (", and is kept without one" if job.streams.index(st) in job.predicate.outer else "") + ")")
    if job.select:
        out.append("result columns: " + ", ".join(f"{n} ({job.streams[i].name}.{c})" for n, i, c in job.select)
                   + " (collect --with-payload, tail --with-payload)")
    out.append("time conditions (event time, " + job.ts_unit + "):")
    out += ["  " + line for line in time_conditions(job)]
    out.append("local joins:")
    out += ["  " + line for line in _local_joins(job)]
    return out


def _local_joins(job):
    from ..slaves.local_join import BinaryJoin
    method = job.strategy.params.get("local_join", "index")
    lines = []
    m = len(job.streams)
    for i in range(m):
        for j in range(i + 1, m):
            conds = job.predicate.between(i, j)
            if not conds:
                continue
            dts = [runtime_dtype(job.streams[k].dtype, m) for k in (i, j)]
            bj = BinaryJoin(job.predicate, dts, method if m == 2 else "index", i, j)
            decided = {"equi": "equi keys (hash index kept across batches)",
                       "band": "the first band (sorted index kept across batches)",
                       "bnl": "equi keys (block nested loop)", "scan": "nothing (nested loop over the window)"}
            rest = " ; the other conditions are checked on the candidate pairs" if bj.residual else ""
            names = f"{job.streams[i].name} x {job.streams[j].name}"
            lines.append(f"{names}: index on {decided[bj.method]}{rest}; conditions: "
                         + ", ".join(_show(c, job) for c in conds))
    return lines


def _show(c, job):
    from ..join.predicate import Band, Equi, Interval
    col = lambda side: f"{job.streams[side[0]].name}.{side[1]}"  # noqa: E731
    if isinstance(c, Equi):
        return f"{col(c.left)} = {col(c.right)}"
    if isinstance(c, Band):
        return f"|{col(c.left)} - {col(c.right)}| {'<=' if c.closed else '<'} {c.eps:g}"
    if isinstance(c, Interval):
        return f"{col(c.right)} - {col(c.left)} in [{c.lo}, {c.up}] {job.ts_unit}"
    return f"theta {c.udf}"


def time_conditions(job):
    """The effective time condition of every pair of streams, however it was written (windows or
    an interval), e.g. `quotes.ts in [trades.ts - 5 s, trades.ts]`, and how long each side is
    kept for it. With integer event times the semantics' open bounds -W_a < a.ts - b.ts < W_b
    are the closed [a.ts - (W_b - 1), a.ts + (W_a - 1)]; a shifted interval narrows that to its
    own bounds (config.Interval), the windows being its hull."""
    from ..join.predicate import Interval
    from ..storage.input_warnings import duration
    per = ts_unit_ns(job.ts_unit)

    def off(w):
        return "" if w == 0 else f" {'-' if w < 0 else '+'} {duration(abs(w) * per, exact=True)}"
    lines = []
    m = len(job.streams)
    a = job.predicate.asof
    if a is not None:                  # an ASOF join says its own condition (join/asof.py)
        L, R = job.streams[a.left].name, job.streams[a.right].name
        side = {"backward": f"{R}.ts <{'=' if a.closed else ''} {L}.ts, the latest",
                "forward": f"{R}.ts >{'=' if a.closed else ''} {L}.ts, the earliest",
                "nearest": f"the nearest {R}.ts to {L}.ts (the earlier on a tie{'' if a.closed else ', not equal'})"}
        within = "" if a.tolerance is None else f", at most {duration(a.tolerance * per, exact=True)} apart"
        wait = job.streams[a.left].window
        return [f"asof: each {L} tuple joins the one {R} tuple with equal keys and {side[a.direction]}{within} (of "
                f"equal times, the last to arrive){'; without one it is a result alone' if a.keep else ''}; it is "
                f"matched once no {R} tuple can change its match (after {duration(wait.size * per, exact=True)} of "
                f"event time); kept: each {R} tuple {_kept(job.streams[a.right], per)}"]
    for i in range(m):
        for j in range(i + 1, m):
            a, b = job.streams[i], job.streams[j]
            if a.window.kind == "time" and b.window.kind == "time":
                iv = [c for c in job.predicate.between(i, j) if isinstance(c, Interval)]
                if iv:                  # an interval's bounds, closed in whole ts units
                    (lo, lc), (up, uc) = (off(iv[0].lo), True), (off(iv[0].up), True)
                else:                   # windows: open bounds W, or closed W - 1, whichever reads shorter
                    lo, lc = _edge(-b.window.size, off)
                    up, uc = _edge(a.window.size, off)
                cond = (f"{b.name}.ts in {'[' if lc else '('}{a.name}.ts{lo}, {a.name}.ts{up}{']' if uc else ')'}; "
                        f"kept: each {a.name} tuple {_kept(a, per)}, each {b.name} tuple {_kept(b, per)}")
            else:
                def one(x, y):
                    w = x.window
                    return (f"each {y.name} tuple joins the last {w.size:,} {x.name} tuples before it" if w.kind == "count"
                            else f"each {y.name} tuple joins every earlier {x.name} tuple" if w.kind == "unbounded"
                            else f"each {y.name} tuple joins {x.name} tuples less than {duration(w.size * per)} older")
                cond = f"{one(b, a)}; {one(a, b)}"
            if m > 2:
                cond += " (and every tuple of a combination within its window of the newest)"
            lines.append(cond)
    names = [s.name for s in job.streams]
    from .. import strategies
    info = strategies.get(job.strategy.name)
    when = ("once no partner can still come" if info.outer else
            f"written by rank 0 from the results at each checkpoint once event time has passed its window, and "
            f"at the end ({info.name} finds a tuple's partners in several places)" if info.cut_complete else
            f"written by rank 0 from the results when the input has ended ({info.name} finds a tuple's partners in "
            f"several places, some after a checkpoint that holds both tuples)")
    for k in job.predicate.outer:
        lines.append(f"outer: each {names[k]} tuple without a partner is a result {when}, "
                     f"with null {names[1 - k]} columns")
    return lines


def _edge(w, off):
    """One side of the time condition of a pair of windows, as (text, closed): with integer event
    times the open bound W is the closed W - 1; the one that reads exactly in fewer characters
    (`- 5 s]` for a window of 5001 ms, `+ 30 s)` for one of 30 s, not `+ 29999999 us]`)."""
    step = 1 if w > 0 else -1
    closed, opened = off(w - step), off(w)
    return (closed, True) if len(closed) <= len(opened) else (opened, False)


def _kept(s, per):
    """How long a tuple of a time window stays for later tuples to join: W - 1 units past its own
    event time, or less than W (whichever reads shorter; W = 1: only for tuples with the same
    event time)."""
    from ..storage.input_warnings import duration
    w = s.window.size
    if w == 1:
        return "only for tuples of the same event time"
    closed, opened = duration((w - 1) * per, exact=True), duration(w * per, exact=True)
    return f"{closed} past its event time" if len(closed) <= len(opened) else f"less than {opened} past its event time"
