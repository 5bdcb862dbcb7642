"""`mpi-join report RUN_DIR`: one self-contained HTML page of a run's metrics, or of a bench suite.

A run directory holds metrics/summary.json and metrics/rank-NNNN.json (metrics.py). The page shows
- the summary table (tuples, results, wall time, tuples/s, delays, start-up);
- rate over time: tuples released by the driver and results produced by the workers, per second;
- production delay over time, per worker batch;
- per-rank load and state: tuples in, CPU and idle time, window tuples over time, window state
  against the raw bytes of the tuples held, peak RSS;
- what the strategy did: the run's notes and every figure a rank reports beyond the common ones
  (hash reorganisations and migrations, psp relocations, biclique scaling events, overload...),
  read generically: the report knows no strategy by name.
A bench-suite directory (results.json) gets its tables and its rate and p99 plots.
Plots are PNGs inlined as data: URIs, so the page is one file that opens anywhere."""
import base64
import html
import io
import json
import os

from ..errors import InputError
from ..runtime.metrics import load_run, read_json

# the figures every rank reports (metrics.py, slaves/worker.py, master/driver.py); anything else a
# rank reports is the strategy's own and is listed under "what the strategy did"
COMMON = {"rank", "role", "tuples_in", "tuples_out", "results", "epochs", "wall_s", "cpu_s", "latency_ms",
          "peak_rss_mb", "latency_hist", "clock_start_unix", "idle_s", "comm_s", "bytes_in", "bytes_out", "result_files", "result_parts",
          "compiled_during_replay", "gc_collections", "gc_pause_ms", "gc_pause_max_ms", "series", "window_tuples",
          "peak_state_bytes", "raw_bytes_at_peak", "host", "topology", "released_at", "peak_inflight",
          "peak_buffer_bytes", "max_lag_s"}


def _png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _table(head, rows):
    h = "".join(f"<th>{html.escape(str(x))}</th>" for x in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _f(x, fmt="{:,.1f}"):
    return "-" if x is None else fmt.format(x)


def _workers(ranks):
    return [r for r in ranks if r.get("series") and r["series"].get("t")]


def aligned(ranks):
    """The ranks with their times on one clock: seconds since the driver's replay began. Each rank
    times its series from its own start (a worker's starts when its first message arrives), so
    unshifted a worker's first results could sit before the first input was released."""
    starts = [r["clock_start_unix"] for r in ranks if r.get("released_at") and "clock_start_unix" in r]
    if not starts:
        return ranks
    out = []
    for r in ranks:
        shift = r.get("clock_start_unix", starts[0]) - starts[0]
        r = dict(r)
        if r.get("series") and r["series"].get("t"):
            r["series"] = dict(r["series"], t=[round(t + shift, 4) for t in r["series"]["t"]])
        if r.get("released_at"):
            r["released_at"] = [(n, round(t + shift, 4)) for n, t in r["released_at"]]
        out.append(r)
    return out


def rate_plot(ranks):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for r in ranks:
        marks = r.get("released_at") or []
        if len(marks) > 1:
            n = [m[0] for m in marks]
            t = [m[1] for m in marks]
            ax.plot(t[1:], [(n[k] - n[k - 1]) / max(t[k] - t[k - 1], 1e-9) for k in range(1, len(t))],
                    marker=".", label=f"rank {r['rank']}: tuples released /s")
    for r in _workers(ranks):
        t, res = r["series"]["t"], r["series"]["results"]
        xs, ys = _per_second(t, res)
        if xs:
            ax.plot(xs, ys, lw=1, label=f"rank {r['rank']}: results /s")
    ax.set_xlabel("seconds into the replay")
    ax.set_ylabel("per second")
    ax.set_title("rate over time")
    _legend(ax)
    fig.tight_layout()
    return _png(fig)


def _legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _per_second(t, counts, bins=40):
    if not t:
        return [], []
    end = max(t) or 1e-9
    width = end / bins
    acc = [0.0] * bins
    for x, c in zip(t, counts):
        acc[min(bins - 1, int(x / width))] += c
    return [(k + 0.5) * width for k in range(bins)], [a / width for a in acc]


def delay_plot(ranks):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for r in _workers(ranks):
        pts = [(t, d) for t, d in zip(r["series"]["t"], r["series"]["delay_ms"]) if d is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", ms=2, label=f"rank {r['rank']} ({r.get('role')})")
    ax.set_xlabel("seconds into the replay")
    ax.set_ylabel("production delay, ms (batch mean)")
    ax.set_title("delay over time")
    _legend(ax)
    fig.tight_layout()
    return _png(fig)


def load_plot(ranks):
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    names = [str(r["rank"]) for r in ranks]
    cpu = [r.get("cpu_s", 0) for r in ranks]
    idle = [r.get("idle_s", 0) for r in ranks]
    a.bar(names, cpu, label="CPU s")
    a.bar(names, idle, bottom=cpu, label="idle s")
    a.set_xlabel("rank")
    a.set_title("per-rank load")
    a.legend(fontsize=7)
    for r in _workers(ranks):
        b.plot(r["series"]["t"], r["series"]["window_tuples"], lw=1, label=f"rank {r['rank']}")
    b.set_xlabel("seconds into the replay")
    b.set_title("window tuples held")
    _legend(b)
    fig.tight_layout()
    return _png(fig)


def _strategy_rows(ranks):
    rows = []
    for r in ranks:
        for k, v in r.items():
            if k in COMMON or v in (None, [], {}, 0):
                continue
            if isinstance(v, list):
                shown = f"{len(v)} entries" + (f"; first: {json.dumps(v[0])[:160]}" if v else "")
            elif isinstance(v, dict):
                shown = json.dumps(v)[:200]
            else:
                shown = v
            rows.append((r["rank"], r.get("role", ""), k, shown))
    return rows


def run_page(run_dir):
    s, ranks = load_run(run_dir)
    ranks = aligned(ranks)
    lat = s.get("latency_ms") or {}
    summary = [("job", s.get("job")), ("strategy", s.get("strategy")), ("ranks", s.get("ranks_n", len(ranks))),
               ("topology", s.get("topology")), ("tuples", _f(s.get("tuples"), "{:,}")),
               ("results", _f(s.get("results"), "{:,}")), ("wall s", _f(s.get("wall_s"), "{:.3f}")),
               ("tuples/s", _f(s.get("tuples_per_s"), "{:,.0f}")), ("start-up s", _f(s.get("startup_s"), "{:.2f}")),
               ("delay p50 ms", _f(lat.get("p50"), "{:.2f}")), ("delay p99 ms", _f(lat.get("p99"), "{:.2f}")),
               ("resumed from", s.get("resumed_from") or "-")]
    per_rank = []
    for r in ranks:
        held, raw = r.get("peak_state_bytes"), r.get("raw_bytes_at_peak")
        per_rank.append((r["rank"], r.get("role", ""), _f(r.get("tuples_in"), "{:,}"), _f(r.get("results"), "{:,}"),
                         _f(r.get("cpu_s"), "{:.2f}"), _f(r.get("idle_s"), "{:.2f}"),
                         _f(held / 2**20 if held else None, "{:.2f}"), _f(held / raw if raw else None, "{:.2f}"),
                         _f(r.get("peak_rss_mb"), "{:.0f}"), _f((r.get("latency_ms") or {}).get("p99"), "{:.2f}")))
    notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in s.get("notes") or [])
    return _page(f"mpi-join run: {s.get('job')} ({s.get('strategy')})", [
        ("Summary", _table(("", ""), summary)),
        ("Rate over time", rate_plot(ranks)),
        ("Delay over time", delay_plot(ranks)),
        ("Per-rank load and state", load_plot(ranks) + _table(
            ("rank", "role", "tuples in", "results", "CPU s", "idle s", "state MB", "state / raw", "peak RSS MB",
             "p99 ms"), per_rank)),
        ("What the strategy did", (f"<ul>{notes}</ul>" if notes else "")
         + _table(("rank", "role", "figure", "value"), _strategy_rows(ranks))),
    ])


def suite_page(suite_dir):
    res = read_json(os.path.join(suite_dir, "results.json"), "the suite's results")
    from .bench_suite import markdown
    imgs = ""
    for w in res.get("baselines", {}):            # the plots the suite wrote beside results.json
        for kind in ("rate", "p99"):
            p = os.path.join(suite_dir, f"{w}-{kind}.png")
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    imgs += f'<img alt="{w} {kind}" src="data:image/png;base64,{base64.b64encode(f.read()).decode()}">'
            else:
                imgs += (f"<p>{html.escape(p)} is missing: `mpi-join bench-suite --out DIR --rerender` "
                         f"draws it again</p>")
    md = markdown(res)
    return _page("mpi-join bench-suite", [("Plots", imgs), ("Tables", _markdown_html(md))])


def _markdown_html(md):
    """The suite's markdown (tables, headings, paragraphs) as HTML."""
    out, rows = [], []

    def flush():
        if rows:
            out.append(_table(rows[0], rows[2:]))
            rows.clear()
    for line in md.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
            continue
        flush()
        if line.startswith("### "):
            out.append(f"<h3>{html.escape(line[4:])}</h3>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    flush()
    return "".join(out)


def _page(title, sections):
    body = "".join(f"<section><h2>{html.escape(h)}</h2>{c}</section>" for h, c in sections)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
            "body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:.5em 0}"
            "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:right}img{max-width:100%}"
            f"</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def write_report(run_dir, out=None):
    """Render RUN_DIR (a run's output or a bench-suite directory) to `out` (default
    RUN_DIR/report.html); returns the path written."""
    from ..storage.paths import inside
    if not os.path.isdir(run_dir):
        raise InputError(f"{run_dir}: no such directory")
    page = suite_page(run_dir) if os.path.isfile(os.path.join(run_dir, "results.json")) else run_page(run_dir)
    out = out or os.path.join(run_dir, "report.html")
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out) or not os.path.isdir(parent):
        raise InputError(f"{out}: --out must be a file in an existing directory")
    path = inside(parent, out, "--out")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(page)
    os.replace(tmp, path)
    return path
