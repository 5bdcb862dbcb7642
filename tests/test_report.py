"""`mpi-join report`: a real run's metrics rendered as one HTML page, opened in a real headless
Chromium, which must decode every plot; a directory that is not a run is refused in one line."""
import os
import shutil
import subprocess

import pytest

from mpi_join.tools.workloads import make
from conftest import cli, run_mpi

STRATEGY = "hash"   # whose time budget this file's tests count against (conftest.py)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# the probe the test adds to a copy of the page: how many images the browser decoded
PROBE = ('<script>addEventListener("load",()=>{const ok=[...document.images].filter(i=>i.complete&&'
         'i.naturalWidth>300);document.body.setAttribute("data-plots",ok.length+"/"+document.images.length)})'
         '</script></body>')


def _browser_decoded(page, tmp_path):
    if not CHROMIUM:
        if os.environ.get("MPI_JOIN_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed (CI installs it: .ci/run)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE))
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
                        probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    import re
    m = re.search(r'data-plots="(\d+)/(\d+)"', p.stdout)
    assert m, "the page did not finish loading in the browser"
    return int(m.group(1)), int(m.group(2))


def test_report_of_a_run_shows_its_plots_in_a_browser(tmp_path):
    path = make("equi", str(tmp_path / "w"), tuples=30000, rate=10000, window="1s", uniform_keys=3000,
                strategy="hash")
    out = tmp_path / "w" / "out"
    p = run_mpi(3, "run", path, "--output", str(out))
    assert p.returncode == 0, p.stderr
    r = cli("report", str(out))
    assert r.returncode == 0, r.stderr
    page = out / "report.html"
    assert r.stdout.strip() == str(page)
    text = page.read_text()
    for section in ("Rate over time", "Delay over time", "Per-rank load and state", "What the strategy did"):
        assert f"<h2>{section}</h2>" in text
    assert "reorganisations" in text and "state / raw" in text
    decoded, images = _browser_decoded(page, tmp_path)
    assert images == 3 and decoded == images            # rate, delay, per-rank load beside window tuples
    # one clock: a worker's clock starts at its first message, after the driver's replay began, so
    # aligned its series lies after the first release (the chart once showed results before input)
    from mpi_join.runtime.metrics import load_run
    from mpi_join.tools.report import aligned
    _, ranks = load_run(str(out))
    driver = next(r for r in ranks if r.get("released_at"))
    assert driver["released_at"][0] == [0, 0.0]
    workers = [r for r in aligned(ranks) if r.get("series", {}).get("t")]
    assert workers and all(r["clock_start_unix"] >= driver["clock_start_unix"] for r in workers)
    for r in workers:
        shift = r["clock_start_unix"] - driver["clock_start_unix"]
        assert r["series"]["t"][0] >= shift >= 0


def test_aligned_puts_every_rank_on_the_drivers_clock():
    from mpi_join.tools.report import aligned
    driver = {"rank": 0, "clock_start_unix": 100.0, "released_at": [[0, 0.0], [50, 1.0]]}
    worker = {"rank": 1, "clock_start_unix": 100.25, "series": {"t": [0.0, 0.5], "results": [3, 4]}}
    d, w = aligned([driver, worker])
    assert d["released_at"] == [(0, 0.0), (50, 1.0)] and w["series"]["t"] == [0.25, 0.75]
    assert worker["series"]["t"] == [0.0, 0.5]                      # the input is left as it was
    assert aligned([{"rank": 1, "series": {"t": [1.0]}}]) == [{"rank": 1, "series": {"t": [1.0]}}]


def test_report_refuses_a_directory_that_is_not_a_run(tmp_path):
    r = cli("report", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "metrics/summary.json" in r.stderr
