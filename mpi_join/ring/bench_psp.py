"""`mpi-join bench psp --case fig8a`: response time against ring length, measured beside the cost
model's prediction (the PSP design's Figure 8(a), at this machine's scale).

A 3-way join of image streams (A~B, B~C) whose predicate costs a full comparison of two
5000-pixel images and passes a set fraction of pairs (selectivity 0.05, 0.1, 0.5), replayed in
real time one tuple at a time. The design's experiment has 50 tuples/s per stream and 10 s
windows (500 tuples a window): on two cores that is 60 times too much work at selectivity 0.5,
so here each stream brings 10 tuples/s and windows are 5 s (50 tuples a window: each probe still
compares with whole windows, and the work per tuple grows with the selectivity as there). Each
run is checked against the oracle. The prediction is equation (5) with T_j, T_s and the
selectivities measured on the same input (ring/planner.py) and T_n measured by a ping-pong
through the runtime's transport between two idle ranks (measure_hop).
"""
import os
import tempfile

from ..tools.bench import run_verified, set_param, print_table
from ..config import load_job
from ..errors import JobError
from ..strategies import check_strategy
from ..tools.workloads import make
from . import cost_model as cm
from .planner import measure, model


def fig8a(ranks=(2, 3, 4), seconds=30.0, rate=10.0, window="5s", selectivities=(0.05, 0.1, 0.5), pixels=5000,
          workdir=None, Tn=None, interleave=1):
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="mpi-join-fig8a-")
        workdir = tmp.name
    n = int(3 * rate * seconds)
    print(f"PSP response time against ring length: 3-way join (A~B, B~C), {pixels}-pixel images, a predicate "
          f"that compares every pixel and passes a set fraction of pairs; {rate:g} tuples/s per stream in real "
          f"time for {seconds:g} s, windows {window}; interleave = {interleave}; ring lengths "
          f"{', '.join(str(r - 1) for r in ranks)}", flush=True)
    if Tn is None:
        Tn = measure_hop()
        print(f"T_n, one hop between idle ranks through the transport (median ping-pong / 2): {Tn * 1e3:.3f} ms",
              flush=True)
    rows = []
    for sel in selectivities:
        d = os.path.join(workdir, f"sel-{sel:g}")
        path = make("images", d, tuples=n, rate=rate, window=window, streams=3, pixels=pixels, predicate="costly",
                    selectivity=sel, strategy="psp")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("[run]\n", '[run]\nbatch_size = 1\nflush_interval = "1ms"\n', 1))
        set_param(path, "interleave", interleave)
        job = check_strategy(load_job(path))
        meas = measure(job)
        md = model(meas, Tn)
        for r in ranks:
            N = r - 1
            s = run_verified(path, d, job, r, rate, None)
            pred = cm.latency(md["Lc"], md["lam"], md["W"], md["Tj"], meas["Ts"], Tn, N, md["M"])
            lat = s["latency_ms"]
            rows.append((f"{sel:g}", str(N), f"{lat['mean']:.2f}", f"{lat['p50']:.2f}", f"{lat['p99']:.2f}",
                         f"{pred * 1e3:.2f}", f"{s['results']:,}"))
            print(f"  selectivity {sel:g}, ring of {N}: mean response {lat['mean']:.2f} ms (model {pred * 1e3:.2f} ms)",
                  flush=True)
    print_table(("selectivity", "ring N", "mean ms", "p50 ms", "p99 ms", "model (5) ms", "results"), rows,
                label=False)
    print("results equal the oracle in every run")
    if tmp:
        tmp.cleanup()
    return rows


def interleave(ranks=(3, 4), tuples=1800, rate=50.0, window="2s", sel=0.1, limits=(1, 4), batch=30, workdir=None):
    """Throughput of basic PSP (interleave 1) against PSP-I on the same input at the maximum
    rate, beside the single-core oracle measured in the same run."""
    from ..tools.bench import oracle_rate
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="mpi-join-psp-i-")
        workdir = tmp.name
    path = make("images", workdir, tuples=tuples, rate=rate, window=window, streams=3, pixels=5000,
                predicate="costly", selectivity=sel, strategy="psp")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("[run]\n", f"[run]\nbatch_size = {batch}\n", 1))
    print(f"basic PSP against PSP-I: 3-way costly image join, {tuples:,} tuples ({rate:g}/s per stream in event "
          f"time, windows {window}, selectivity {sel:g}) in batches of {batch}, replayed as fast as the ring "
          f"takes them", flush=True)
    job = check_strategy(load_job(path))
    o_rate, o_s, o_n = oracle_rate(job)
    rows = [("oracle (1 core)", f"{o_rate:,.0f}", f"{o_s:.2f}", f"{o_n:,}", "-", "-", "1.00")]
    base = {}
    for r in ranks:
        for lim in limits:
            with open(path) as f:
                text = f.read()
            import re
            text = re.sub(r"(?m)^interleave = .*\n", "", text)
            with open(path, "w") as f:
                f.write(text)
            set_param(path, "interleave", lim)
            job = check_strategy(load_job(path))
            s = run_verified(path, os.path.join(workdir, f"i{lim}"), job, r, None, None)
            base.setdefault(r, s["tuples_per_s"])
            rows.append((f"psp, ring of {r - 1}, interleave {lim}", f"{s['tuples_per_s']:,.0f}", f"{s['wall_s']:.2f}",
                         f"{s['results']:,}", f"{s['latency_ms']['p50']:.1f}", f"{s['tuples_per_s'] / base[r]:.2f}",
                         f"{s['tuples_per_s'] / o_rate:.2f}"))
            print(f"  ring of {r - 1}, interleave {lim}: {s['tuples_per_s']:,.0f} tuples/s", flush=True)
    print_table(("", "tuples/s", "seconds", "results", "p50 ms", "vs interleave 1", "vs oracle"), rows)
    print("results equal the oracle in every run")
    if tmp:
        tmp.cleanup()
    return rows


def run_case(nprocs, workdir, **_):
    try:
        return fig8a(ranks=tuple(nprocs) or (2, 3, 4), workdir=workdir)
    except ValueError as e:
        raise JobError(f"bench psp fig8a: {e}") from None


def run_interleave(nprocs, workdir, **_):
    try:
        return interleave(ranks=tuple(nprocs) or (3, 4), workdir=workdir)
    except ValueError as e:
        raise JobError(f"bench psp fig8a: {e}") from None


_HOP = """
import sys, time, json
import numpy as np
from mpi_join.runtime.transport import Transport
from mpi_join.runtime.wire import pack
from mpi_join.runtime.protocol import Tag
tx = Transport()
buf = pack([0], [np.zeros(64, np.uint8)])
out = []
for k in range(int(sys.argv[1])):
    if tx.rank == 0:
        time.sleep(0.004)                 # idle between messages, as a ring at a moderate rate is
        t = time.perf_counter()
        tx.send(1, Tag.DATA, buf)
        tx.recv(source=1)
        out.append((time.perf_counter() - t) / 2)
    else:
        tx.recv(source=0)
        tx.send(0, Tag.DATA, buf)
tx.flush()
if tx.rank == 0:
    print(json.dumps(sorted(out)[len(out) // 2]))
"""


def measure_hop(rounds=200):
    """One hop's latency through the runtime's transport between two idle ranks (median of
    ping-pongs, half the round trip): T_n as this machine and its waits give it."""
    import json
    import subprocess
    import sys
    from ..launch import mpiexec_path
    p = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-c", _HOP, str(rounds)], capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        raise JobError(f"bench psp: the hop-latency ping-pong failed: {p.stderr.strip()[-300:]}")
    return float(json.loads(p.stdout.strip().splitlines()[-1]))
