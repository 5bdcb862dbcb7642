"""The end-of-run summary says where the results and metrics are and what the strategy did, and
per-rank times are over the replay (no rank idles longer than the run)."""
import json
import os

import numpy as np

from conftest import equi_job_text, random_streams, run_mpi, write_job


def test_summary_says_where_and_what_happened(tmp_path):
    text = equi_job_text(('"40ms"', '"40ms"'), run="batch_size = 100",
                         extra_strategy='reorganize_every = 2\nforce = "decluster"\npartitions = 8')
    path, job = write_job(str(tmp_path), text, random_streams(np.random.default_rng(5), 4000))
    p = run_mpi(4, "run", path, env={"MPI_JOIN_QUIET": ""}, timeout=90)
    assert p.returncode == 0, p.stderr
    s = json.loads(open(os.path.join(job.output, "metrics", "summary.json")).read())
    assert all(r["idle_s"] <= s["wall_s"] for r in s["ranks"]), [(r["idle_s"], s["wall_s"]) for r in s["ranks"]]
    out = p.stdout
    assert f"results: {os.path.join(job.output, 'results')} (" in out
    assert f"metrics: {os.path.join(job.output, 'metrics', 'summary.json')}" in out
    assert "slaves taken out none" not in out and "slaves taken out" in out      # forced declustering shows
    share = [l for l in out.splitlines() if l.startswith("share of tuples per slave:")]
    assert share and all(f"{w}: " in share[0] for w in (1, 2, 3)), out
