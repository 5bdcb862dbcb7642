"""The master's live progress line and final summary table."""
import sys
import time


class Progress:
    """Tuples, rate and results on one line: redrawn on a terminal, a line every 5 s otherwise."""

    def __init__(self, total, enabled=True, stream=None):
        self.total = total
        self.enabled = enabled
        self.out = stream or sys.stderr
        self.tty = self.out.isatty()
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._every = 0.25 if self.tty else 5.0
        self.start = 0            # tuples released before this process began (a resumed run's offset)

    def expect(self, total):
        """The input's length as it stands (a followed log grows)."""
        self.total = total

    def restart(self, start=0):
        """The replay begins now, at input offset `start`: the rate counts what this run released."""
        self.t0 = time.perf_counter()
        self.start = start

    def update(self, tuples, results, force=False):
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < self._every:
            return
        self._last = now
        el = max(now - self.t0, 1e-9)
        pct = 100.0 * tuples / self.total if self.total else 100.0
        line = (f"[mpi-join] {tuples:,}/{self.total:,} tuples ({pct:5.1f}%)  "
                f"{(tuples - self.start) / el / 1e3:8.1f}k tuples/s  {results:,} results  {el:6.1f}s")
        if self.tty:
            self.out.write("\r" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def close(self):
        if self.enabled and self.tty:
            self.out.write("\n")
            self.out.flush()


def summary_table(summary):
    """Plain-text table of a run's summary (job-wide line, then one line per rank)."""
    lat = summary["latency_ms"]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    hw = max([4] + [len(str(r.get("host", "?"))) for r in summary["ranks"]])
    lines = [
        f"tuples {summary['tuples']:,}   results {summary['results']:,}   wall {summary['wall_s']:.2f} s   "
        f"throughput {summary['tuples_per_s'] or 0:,.0f} tuples/s   (start-up {summary.get('startup_s') or 0:.1f} s before)",
        f"latency ms: p50 {fmt(lat['p50'])}  p90 {fmt(lat['p90'])}  p99 {fmt(lat['p99'])}  p99.9 {fmt(lat['p99.9'])}",
        "",
        f"{'rank':>4} {'role':<7} {'host':<{hw}} {'tuples in':>11} {'tuples out':>11} {'results':>11} {'cpu s':>7} {'idle s':>7} {'comm s':>7} {'p50 ms':>8} {'p99 ms':>8}",
    ]
    for r in summary["ranks"]:
        lines.append(
            f"{r['rank']:>4} {r['role']:<7} {r.get('host', '?'):<{hw}} {r['tuples_in']:>11,} {r['tuples_out']:>11,} {r['results']:>11,} "
            f"{r['cpu_s']:>7.2f} {r.get('idle_s', 0):>7.2f} {r.get('comm_s', 0):>7.2f} "
            f"{fmt(r['latency_ms']['p50']):>8} {fmt(r['latency_ms']['p99']):>8}")
    lines += [""] + summary.get("notes", [])
    return "\n".join(lines)
