"""`mpi-join bench adaptive`: the shapes of the shared-nothing paper's Figures 5 to 10 at this
machine's scale, as a markdown table and PNG plots.

  1. average production delay (and slave CPU, idle time) against arrival rate, with and without
     fine tuning (block nested loop local join, so bucket sizes matter);
  2. communication overhead (and delay) against the distribution epoch;
  3. per-slave load imbalance (max / mean of slave CPU time) under b-model skew, with a static
     partition map and with reorganisation.
Every point is a real mpiexec run on workload `equi`, checked against the oracle by count.
"""
import json
import os
import statistics
import time

from .bench import run_mpi
from .workloads import make


def _job(workdir, name, tuples, rate, window, skew, strategy, run, domain_bits=14):
    d = os.path.join(workdir, name)
    path = make("equi", d, tuples=tuples, rate=rate, window=window, skew=skew, domain_bits=domain_bits)
    with open(path) as f:
        text = f.read()
    text = text.replace("partitions = 60\n", strategy + "\n").replace('rate = "max"\nbatch_size = 8192\n', run + "\n")
    with open(path, "w") as f:
        f.write(text)
    return path, d


def _point(nprocs, path, d):
    s = run_mpi(nprocs, path, os.path.join(d, "out"))
    slaves = [r for r in s["ranks"] if r["rank"] > 0]
    delays = [x for r in slaves for x in r.get("series", {}).get("delay_ms", []) if x is not None]
    return {
        "tuples_per_s": s["tuples_per_s"], "results": s["results"],
        "avg_delay_ms": statistics.fmean(delays) if delays else None,
        "p50_ms": s["latency_ms"]["p50"],
        "slave_cpu_s": statistics.fmean(r["cpu_s"] for r in slaves),
        "slave_idle_s": statistics.fmean(r["idle_s"] for r in slaves),
        "slave_comm_s": statistics.fmean(r["comm_s"] for r in slaves),
        "master_comm_s": next(r for r in s["ranks"] if r["rank"] == 0)["comm_s"],
        "cpu_max_over_mean": max(r["cpu_s"] for r in slaves) / statistics.fmean(r["cpu_s"] for r in slaves),
        "work_max_over_mean": _work_imbalance(slaves),
        "wall_s": s["wall_s"],
        "master": next(r for r in s["ranks"] if r["rank"] == 0),
    }


def _work_imbalance(slaves):
    """max / mean over slaves of the CPU spent in the second half of the run (after adapting)."""
    halves = []
    for r in slaves:
        cpu = r.get("series", {}).get("cpu_s", [])
        halves.append(sum(cpu[len(cpu) // 2:]))
    m = statistics.fmean(halves)
    return max(halves) / m if m > 0 else None


def run_figures(out, nprocs=4, seconds=5.0, rates=(20000, 40000, 60000, 80000),
                epochs_ms=(10, 25, 50, 100, 200), window="4s", theta=32, progress=print):
    os.makedirs(out, exist_ok=True)
    work = os.path.join(out, "runs")
    t0 = time.perf_counter()
    res = {"rate": [], "epoch": [], "imbalance": []}
    # 1. delay against arrival rate, with and without fine tuning
    for rate in rates:
        n = int(rate * 2 * seconds)
        for tuning, th in (("tuned", theta), ("untuned", 0)):
            path, d = _job(work, f"rate-{rate}-{tuning}", n, rate, window, 0.7,
                           f'partitions = 60\nlocal_join = "bnl"\ntheta = {th}\nreorganize_every = 0',
                           f'rate = {rate}\nflush_interval = "50ms"\nbatch_size = 100000')
            p = _point(nprocs, path, d)
            res["rate"].append({"rate": rate, "tuning": tuning, **{k: v for k, v in p.items() if k != "master"}})
            progress(f"rate {rate}/s {tuning}: avg delay {p['avg_delay_ms']:.1f} ms, slave cpu {p['slave_cpu_s']:.2f} s")
    # 2. communication overhead against the distribution epoch
    rate = rates[len(rates) // 2]
    for ep in epochs_ms:
        n = int(rate * 2 * seconds)
        path, d = _job(work, f"epoch-{ep}", n, rate, window, 0.7, "partitions = 60\nreorganize_every = 0",
                       f'rate = {rate}\nflush_interval = "{ep}ms"\nbatch_size = 100000')
        p = _point(nprocs, path, d)
        res["epoch"].append({"epoch_ms": ep, **{k: v for k, v in p.items() if k != "master"},
                             "messages": p["master"]["epochs"]})
        progress(f"epoch {ep} ms: slave comm {p['slave_comm_s'] * 1e3:.1f} ms, avg delay {p['avg_delay_ms']:.1f} ms")
    # 3. load imbalance under skew: static map against reorganisation. Few keys (2^7) in 12
    #    partitions make the b-model skew visible per slave; count windows keep results bounded.
    rate = rates[-1]
    for mode, strat in (("static", "reorganize_every = 0"),
                        ("reorganised", "reorganize_every = 4\ndeclustering = false\nconsumer_threshold = 0.2")):
        n = int(rate * 2 * seconds)
        path, d = _job(work, f"skew-{mode}", n, rate, window, 0.7,
                       f'partitions = 12\nlocal_join = "bnl"\ntheta = 0\n{strat}',
                       f'rate = {rate}\nflush_interval = "50ms"\nbatch_size = 100000', domain_bits=7)
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace(f'window = "{window}"', "window = 500"))
        p = _point(nprocs, path, d)
        occ = p["master"].get("occupancy", [])
        res["imbalance"].append({"mode": mode, **{k: v for k, v in p.items() if k != "master"},
                                 "migrations": len(p["master"].get("migrations", [])),
                                 "max_occupancy": max((v for o in occ for k, v in o.items() if k != "epoch"), default=None)})
        progress(f"skew b=0.7 {mode}: slave CPU max/mean {p['cpu_max_over_mean']:.2f}, "
                 f"second half {p['work_max_over_mean']:.2f}, {len(p['master'].get('migrations', []))} migrations")
    res["elapsed_s"] = time.perf_counter() - t0
    with open(os.path.join(out, "figures.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = _markdown(res)
    with open(os.path.join(out, "figures.md"), "w") as f:
        f.write(md)
    _plots(res, out)
    return md


def _f(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def _markdown(res):
    lines = ["### Average delay, CPU and idle time against arrival rate (Figures 5 to 9)", "",
             "| rate/stream | fine tuning | avg delay ms | p50 ms | slave CPU s | slave idle s | tuples/s |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in res["rate"]:
        lines.append(f"| {r['rate']} | {r['tuning']} | {_f(r['avg_delay_ms'])} | {_f(r['p50_ms'])} | "
                     f"{_f(r['slave_cpu_s'], 2)} | {_f(r['slave_idle_s'], 2)} | {r['tuples_per_s']:,.0f} |")
    lines += ["", "### Communication overhead against the distribution epoch (Figures 13, 14)", "",
              "| epoch ms | messages | slave comm ms | master comm ms | avg delay ms |", "|---:|---:|---:|---:|---:|"]
    for r in res["epoch"]:
        lines.append(f"| {r['epoch_ms']} | {r['messages']} | {_f(r['slave_comm_s'] * 1e3)} | "
                     f"{_f(r['master_comm_s'] * 1e3)} | {_f(r['avg_delay_ms'])} |")
    lines += ["", "### Load imbalance under b = 0.7 skew (slave CPU time, max / mean)", "",
              "| partition map | whole run | second half | migrations | max occupancy | avg delay ms |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in res["imbalance"]:
        lines.append(f"| {r['mode']} | {_f(r['cpu_max_over_mean'], 2)} | {_f(r['work_max_over_mean'], 2)} | "
                     f"{r['migrations']} | {_f(r.get('max_occupancy'), 3)} | {_f(r['avg_delay_ms'])} |")
    return "\n".join(lines) + "\n"


def _plots(res, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for tuning, style in (("tuned", "o-"), ("untuned", "s--")):
        rows = [r for r in res["rate"] if r["tuning"] == tuning]
        x = [r["rate"] for r in rows]
        axes[0].plot(x, [r["avg_delay_ms"] or 0 for r in rows], style, label=f"fine tuning {'on' if tuning == 'tuned' else 'off'}")
        axes[1].plot(x, [r["slave_cpu_s"] for r in rows], style, label=f"fine tuning {'on' if tuning == 'tuned' else 'off'}")
    axes[0].set(xlabel="arrival rate (tuples/s per stream)", ylabel="average delay (ms)", title="Delay vs rate")
    axes[1].set(xlabel="arrival rate (tuples/s per stream)", ylabel="slave CPU time (s)", title="CPU vs rate")
    x = [r["epoch_ms"] for r in res["epoch"]]
    axes[2].plot(x, [r["slave_comm_s"] * 1e3 for r in res["epoch"]], "o-", label="slave comm")
    axes[2].plot(x, [r["master_comm_s"] * 1e3 for r in res["epoch"]], "s--", label="master comm")
    axes[2].set(xlabel="distribution epoch (ms)", ylabel="communication time (ms)", title="Comm vs epoch", xscale="log")
    for a in axes:
        a.legend()
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "figures.png"), dpi=90)
    fig2, ax = plt.subplots(figsize=(5, 4))
    modes = [r["mode"] for r in res["imbalance"]]
    ax.bar(modes, [r["work_max_over_mean"] or 0 for r in res["imbalance"]])
    ax.axhline(1.0, color="gray", lw=1)
    ax.set(ylabel="slave CPU max / mean (second half)", title="Load imbalance, b = 0.7")
    fig2.tight_layout()
    fig2.savefig(os.path.join(out, "imbalance.png"), dpi=90)
