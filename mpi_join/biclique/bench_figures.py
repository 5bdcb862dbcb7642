"""`mpi-join bench biclique --case fig8` and `--case fig12`: two of the paper's figures at this
machine's scale, every run checked against the oracle.

fig8: throughput of random routing against ContRand on the TPC-H equi joins (tpch.py: q5, q7),
for the same join units (`-n`, default 4: 2 R-units and 2 S-units), with the join-matrix on
the same units beside them. Under random routing every tuple is joined at every unit of the
other side; ContRand sends it only to its key's subgroup, so each unit compares fewer pairs.

fig12: an elasticity trace. The equi workload with an input rate (in event time) that rises
and falls, a time window, and 2PS scaling on: as the windows fill, the memory load of a side's
units passes T_h and spare units join; as they empty, units leave. The table and fig12.png show
the input rate, each side's memory load (MLV) and active units over the run."""
import json
import os
import tempfile

import numpy as np

from .. import strategies
from ..tools.bench import run_verified, oracle_rate, print_table, set_option, set_param
from ..config import load_job
from ..errors import JobError
from ..units import ts_unit_ns


def _workdir(workdir, prefix):
    if workdir is not None:
        return workdir, None
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    return tmp.name, tmp


def fig8(units=4, workdir=None, sf=0.01, queries=("q5", "q7"), tables=None, limit=0):
    from ..tools import tpch
    workdir, tmp = _workdir(workdir, "mpi-join-bench-fig8-")
    half = units // 2
    if half < 2:
        raise JobError(f"fig8 needs at least 4 join units (ContRand with 2 subgroups per side), got {units}")
    tables = tables or tpch.generate_tables(sf, os.path.join(workdir, "tpch"))
    settings = [("biclique random", "biclique", {"r_units": half}),
                (f"biclique ContRand {half}", "biclique", {"r_units": half, "r_groups": half, "s_groups": half}),
                ("matrix", "matrix", {})]
    print(f"random routing against ContRand on TPC-H (sf {sf:g}) with {units} join units; biclique on {units + 2} "
          f"ranks ({half} R-units, {units - half} S-units), matrix on {units + 1}; unpaced replay", flush=True)
    rows = []
    for q in queries:
        base = None
        for label, strategy, params in settings:
            d = os.path.join(workdir, f"{q}-{label.replace(' ', '-')}")
            path, n = tpch.make(q, d, tables=tables, window="10s", strategy=strategy, raw=False, limit=limit)
            for k, v in params.items():
                set_param(path, k, v)
            if "aggregate" in strategies.get(strategy).params:
                set_param(path, "aggregate", "")          # throughput of the join alone
            job = load_job(path)
            o_rate, _, expect_n = oracle_rate(job)
            info = strategies.get(strategy)      # the driver, its dispatchers (biclique's), the units
            ranks = units + 1 + (params.get("dispatchers") or info.params["dispatchers"].default
                                 if "dispatchers" in info.params else 0)
            print(f"bench: {q}, {label}, {sum(n.values()):,} tuples on {ranks} ranks", flush=True)
            s = run_verified(path, d, job, ranks, None, expect_n)
            base = base or s["tuples_per_s"]
            lat = s["latency_ms"]
            rows.append((q, label, f"{s['tuples_per_s']:,.0f}", f"{s['tuples_per_s'] / base:.2f}",
                         f"{s['tuples_per_s'] / o_rate:.2f}", f"{s['results']:,}", f"{lat['p50']:.1f}",
                         f"{lat['p99']:.1f}"))
    print("\nthroughput by routing (every run equal to the oracle)")
    print_table(("query", "setting", "tuples/s", "vs random", "vs oracle", "results", "p50 ms", "p99 ms"), rows)
    if tmp:
        tmp.cleanup()
    return rows


PROFILE = (1000, 3000, 6000, 6000, 3000, 1000, 1000)    # event-time tuples/s, one phase each


def phased_ts(n, profile, unit_ms=1.0):
    """Event times (ms) of n tuples whose rate follows `profile` (tuples/s) in equal phases."""
    phase = np.minimum(np.arange(n) * len(profile) // n, len(profile) - 1)
    gaps = 1e3 / np.asarray(profile, float)[phase] / unit_ms
    return np.floor(np.cumsum(gaps)).astype(np.int64), phase


def fig12(workdir=None, tuples=60000, units=8, window="2s", profile=PROFILE, replay=3000.0, capacity_mb=0.25):
    """-n: join units (default 8: 4 per side, 2 of them spare at the start)."""
    from ..storage.staged import read_staged, write_staged
    from ..tools.workloads import make
    workdir, tmp = _workdir(workdir, "mpi-join-bench-fig12-")
    d = os.path.join(workdir, "fig12")
    path = make("equi", d, tuples=tuples, window=window, strategy="biclique", uniform_keys=5000)
    job = load_job(path)
    arrays = read_staged(job)
    ts, phase = phased_ts(tuples, profile, ts_unit_ns(job.ts_unit) / 1e6)
    for a in arrays:                 # seq order kept: the new event time rises with seq
        a["ts"] = ts[a["seq"]]
    write_staged(job.staged, job.streams, arrays, job.ts_unit, extra={"workload": "fig12"})
    per_side = units // 2
    spare = per_side // 2
    for k, v in (("r_units", per_side), ("scaling", True), ("spare_units", spare), ("unit_capacity_mb", capacity_mb),
                 ("scale_every_ms", 200.0), ("confirmations", 2)):
        set_param(path, k, v)
    set_option(path, "run", "rate", f"{replay / 2:.1f}")
    set_option(path, "run", "batch_size", "100")
    job = load_job(path)
    _, _, expect_n = oracle_rate(job)
    print(f"elasticity: equi workload, {tuples:,} tuples, {window} windows, event-time input rate "
          f"{' -> '.join(f'{r:,}' for r in profile)} tuples/s in equal phases, replayed at {replay:,.0f} tuples/s; "
          f"{units} join units ({per_side} per side, {spare} spare at the start), C = {capacity_mb:g} MB, "
          f"T_h 0.8, T_l 0.3, Psi 0.6, 2 confirmations, a load request every 200 ms", flush=True)
    s = run_verified(path, d, job, units + 2, None, expect_n)
    driver = next(r for r in s["ranks"] if r["role"] == "driver")
    trace, events = driver["scaling_trace"], driver["scaling_events"]
    rounds = {}
    for o in trace:
        r = rounds.setdefault(o["t_s"], {"released": o["released"], "mlv": [0.0, 0.0], "units": [0, 0]})
        r["mlv"][o["side"]] += o["mlv_mb"]
        r["units"][o["side"]] += o["units"]
    changed = {e["t_s"] for e in events}
    rows, last = [], None
    for k, t in enumerate(sorted(rounds)):
        r = rounds[t]
        rate = profile[int(phase[min(r["released"], tuples - 1)])]
        if t in changed or last is None or r["units"] != last or k % 5 == 0:
            what = "; ".join(f"{e['decision']} {'RS'[e['side']]} {len(e['units'])}" for e in events if e["t_s"] == t)
            rows.append((f"{t:.1f}", f"{rate:,}", f"{r['mlv'][0]:.3f}", f"{r['mlv'][1]:.3f}", r["units"][0],
                         r["units"][1], what))
        last = r["units"]
    print("\nthe 2PS trace (a row per change, and every fifth round)")
    print_table(("t s", "input rate", "MLV R MB", "MLV S MB", "R units", "S units", "scaling"), rows)
    outs = [e for e in events if e["decision"] == "out"]
    downs = [e for e in events if e["decision"] == "down"]
    print(f"{len(outs)} scale-outs ({sum(len(e['units']) for e in outs)} units), {len(downs)} scale-downs "
          f"({sum(len(e['units']) for e in downs)} units); results equal the oracle")
    _plot(rounds, profile, phase, tuples, events, os.path.join(workdir, "fig12.png"))
    with open(os.path.join(workdir, "fig12.json"), "w") as f:
        json.dump({"trace": trace, "events": events}, f)
    print(f"plot: {os.path.join(workdir, 'fig12.png')}; trace: {os.path.join(workdir, 'fig12.json')}")
    if tmp:
        print("(the work directory is temporary: pass --dir to keep them)")
        tmp.cleanup()
    return rows, events


def _plot(rounds, profile, phase, tuples, events, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = sorted(rounds)
    fig, ax = plt.subplots(3, 1, figsize=(7, 6), sharex=True)
    ax[0].step(t, [profile[int(phase[min(rounds[x]["released"], tuples - 1)])] for x in t], where="post")
    ax[0].set_ylabel("input tuples/s")
    for side, name in ((0, "R"), (1, "S")):
        ax[1].plot(t, [rounds[x]["mlv"][side] for x in t], label=name)
        ax[2].step(t, [rounds[x]["units"][side] for x in t], where="post", label=name)
    ax[1].set_ylabel("MLV (MB)")
    ax[2].set_ylabel("active units")
    ax[2].set_xlabel("time (s)")
    ax[1].legend()
    ax[2].legend()
    fig.suptitle("biclique 2PS elasticity (the paper's Figure 12, this machine's scale)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_fig8(nprocs, workdir, **_):
    """-n values are join units here (the first is used)."""
    return fig8(tuple(nprocs)[0] if nprocs else 4, workdir=workdir)


def run_fig12(nprocs, workdir, **_):
    """-n values are join units here (the first is used)."""
    return fig12(workdir=workdir, units=tuple(nprocs)[0] if nprocs else 8)
