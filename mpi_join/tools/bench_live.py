"""`mpi-join bench live`: generator, live stager and following run together, against Spark
Structured Streaming's own stream-stream join on the same input and cores.

For each rate (tuples/s per stream) a trial generates landing files for `seconds`, stages them
with `stage --follow`, joins them with `run --follow` and checks the results against the oracle
on the final log. A result's end-to-end latency runs from its later input row's file landing
(the row's `landed` column) to the commit of the result file that holds it, in four parts:
staging (landing -> the log batch committed), replay (-> rank 0 released the row), join (->
the result emitted) and commit (-> its file committed). A rate is sustained when the lag does
not grow: the median latency of the last quarter of the rows (by landing time) is at most 1.5x
that of the first quarter plus 0.5 s. Spark's join is measured the same way, from landing to
the end of the micro-batch that emits the result. A rate whose p99 passes 10 s is not
sustained either: a pipeline whose micro-batches grow to tens of seconds is stable, not live.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from ..errors import JobError
from .live_workload import STREAMS, Generator, job_text

LATENESS_MS = 500
WARMUP_S = 4
P99_BOUND_NS = 10_000_000_000


def _spawn(cmd, env=None):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=dict(os.environ, MPI_JOIN_QUIET="1", **(env or {})))
    lines = []
    for stream in (p.stdout, p.stderr):
        threading.Thread(target=lambda s=stream: [lines.append(x.rstrip()) for x in s], daemon=True).start()
    return p, lines


def _wait(cond, what, timeout=180):
    t = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > t:
            raise JobError(f"bench live: timed out waiting for {what}")
        time.sleep(0.05)


def _cmd(*args):
    return [sys.executable, "-m", "mpi_join", *args]


def tree_cpu_s(pid):
    """CPU seconds (user + system) used so far by process `pid` and every live descendant, from
    /proc: what the stager or the run (mpiexec, its proxies and ranks, a JVM) costs, counted
    while it runs. Reaped descendants count in their parents' cutime/cstime."""
    tick, kids, cpu = os.sysconf("SC_CLK_TCK"), {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(d))
        cpu[int(d)] = sum(int(x) for x in fields[11:15]) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo += kids.get(p, [])
    return total


ISO_RATE, ISO_BAD = 20_000, 0.001      # the ISO workload: rows/s per stream, share of unreadable times


def trial(work, rate, seconds, ranks, window="1s", keys=10_000, say=print, iso=False, bad=0.0):
    """One mpi-join trial at `rate`; returns its figures (see module docstring), with the CPU
    seconds the generator, the stager and the run used while the measured rows landed."""
    from ..config import load_job
    from ..launch import mpiexec_path
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "job.toml")
    with open(path, "w") as f:
        f.write(job_text(rate, window, f"{LATENESS_MS}ms", keys, iso=iso))
    gen = Generator(work, rate, lateness_ms=LATENESS_MS, keys=keys, iso=iso, bad=bad)
    stager, slog = _spawn(_cmd("stage", "--follow", "--trigger", "200ms", path))
    try:
        _wait(lambda: any("watching" in x for x in slog) or stager.poll() is not None, "the stager")
        if stager.poll() is not None:
            raise JobError("bench live: the stager failed: " + " | ".join(slog[-3:]))
        run, rlog = _spawn([mpiexec_path(), "-n", str(ranks), *_cmd("run", "--follow", path)])
        _wait(lambda: os.path.exists(os.path.join(work, "out", ".mpi-join-run")) or run.poll() is not None, "the run")
        # warm-up: Spark's first micro-batches and the ranks' first batches are slow; the
        # figures count rows that land after every warm-up row has been taken into the log
        gen.run(WARMUP_S)
        _wait(lambda: _taken(job_staged(path)) >= sum(gen.rows.values()), "the warm-up rows staged")
        t_start = time.time_ns()
        say(f"bench live: mpi-join at {rate:,.0f} tuples/s per stream for {seconds} s ...")
        rows0, cpu0 = sum(gen.rows.values()), (time.process_time(), tree_cpu_s(stager.pid), tree_cpu_s(run.pid))
        gen.run(seconds)
        t_end = time.time_ns()
        cpu1 = (time.process_time(), tree_cpu_s(stager.pid), tree_cpu_s(run.pid))
        rows = sum(gen.rows.values()) - rows0
        stager.send_signal(signal.SIGINT)
        stager.wait(timeout=120)
        run.wait(timeout=300)
        if stager.returncode != 0 or run.returncode != 0:
            raise JobError("bench live: " + " | ".join((slog + rlog)[-4:]))
    finally:
        for p in (stager,) + ((run,) if "run" in locals() else ()):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    job = load_job(path)
    v = subprocess.run(_cmd("verify", job.output, "--job", path), capture_output=True, text=True)
    out = _latencies(job, t_start)
    out.update(rate=rate, seconds=seconds, ranks=ranks, rows=sum(gen.rows.values()), exact=v.returncode == 0,
               drain_s=round((out.pop("last_commit_ns") - t_end) / 1e9, 2))
    wall = (t_end - t_start) / 1e9
    used = {k: b - a for k, a, b in zip(("generator", "stager", "run"), cpu0, cpu1)}
    out["cores_used"] = {k: round(v / wall, 2) for k, v in used.items()}
    out["stager_cpu_us_per_row"] = round(used["stager"] / max(rows, 1) * 1e6, 2)
    return out


def start_trial(work, ranks, rate=5000, window="1s", keys=10_000, say=print, timeout=300):
    """`mpi-join live` from its start, with files landing at `rate` per stream: the seconds until
    the stager has written its log (staging is up) and until the first result is committed;
    then SIGTERM drains it, and the results are verified."""
    from ..config import load_job
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "job.toml")
    with open(path, "w") as f:
        f.write(job_text(rate, window, f"{LATENESS_MS}ms", keys))
    gen, stop = Generator(work, rate, lateness_ms=LATENESS_MS, keys=keys), threading.Event()
    feeder = threading.Thread(target=gen.run, args=(None, stop.is_set), daemon=True)
    feeder.start()
    say(f"bench live: `mpi-join live -n {ranks}` from its start, {rate:,.0f} tuples/s per stream landing ...")
    t0 = time.monotonic()
    live, llog = _spawn(_cmd("live", path, "-n", str(ranks), "--status-every", "2"))
    try:
        manifest, commits = os.path.join(work, "staged", "_manifest.json"), os.path.join(work, "out", "commits")
        _wait(lambda: os.path.exists(manifest) or live.poll() is not None, "the stager's log", timeout)
        staged_s = time.monotonic() - t0
        _wait(lambda: glob.glob(os.path.join(commits, "commit-*.json")) or live.poll() is not None,
              "the first committed result", timeout)
        first_s = time.monotonic() - t0
        if live.poll() is not None:
            raise JobError("bench live: `live` stopped early: " + " | ".join(llog[-3:]))
        stop.set()
        feeder.join()
        live.send_signal(signal.SIGTERM)
        live.wait(timeout=timeout)
        if live.returncode != 0:
            raise JobError(f"bench live: `live` exited {live.returncode}: " + " | ".join(llog[-3:]))
    finally:
        stop.set()
        if live.poll() is None:
            os.killpg(live.pid, signal.SIGKILL)
    job = load_job(path)
    v = subprocess.run(_cmd("verify", job.output, "--job", path), capture_output=True, text=True)
    return {"rate": rate, "ranks": ranks, "log_up_s": round(staged_s, 2), "first_result_s": round(first_s, 2),
            "exact": v.returncode == 0}


def job_staged(path):
    return os.path.join(os.path.dirname(path), "staged")


def _taken(staged):
    """Rows the log has taken in: staged, quarantined (late ones among them) or waiting."""
    try:
        with open(os.path.join(staged, "_manifest.json")) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return 0
    return m["total"] + sum(m["quarantined"].values()) + ((m["log"].get("pending") or {}).get("rows") or 0)


def _latencies(job, since_ns):
    """Per result whose later input row landed after `since_ns`: end-to-end latency and its four
    parts (ns), from the log's and the commits' records."""
    import pyarrow.parquet as pq
    from ..storage.staged import read_staged
    arrays = read_staged(job)
    landed = [a["landed"] * 1_000_000 for a in arrays]
    seqs = [a["seq"] for a in arrays]
    from ..storage.staged import read_manifest
    from ..storage.staged_log import batch_records
    batches = sorted(batch_records(job.staged, read_manifest(job.staged)), key=lambda e: e["batch"])
    b_lo = np.array([e["seq"][0] for e in batches if e["seq"][1] > e["seq"][0]], np.int64)
    b_ns = np.array([e["committed_ns"] for e in batches if e["seq"][1] > e["seq"][0]], np.int64)
    commits = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(job.output, "commits", "commit-*.json")))]
    e2e, parts = [], {k: [] for k in ("staging", "replay", "join", "commit")}
    land_of = []
    for c in commits:
        for name in c["files"]:
            t = pq.read_table(os.path.join(job.output, "results", name))
            r, s = t.column(f"{STREAMS[0]}_seq").to_numpy(), t.column(f"{STREAMS[1]}_seq").to_numpy()
            emit, lat = t.column("emit_ns").to_numpy(), t.column("latency_ns").to_numpy()
            later_r = r > s
            lr = landed[0][np.searchsorted(seqs[0], r)]
            ls = landed[1][np.searchsorted(seqs[1], s)]
            land = np.where(later_r, lr, ls)
            later = np.maximum(r, s)
            logged = b_ns[np.searchsorted(b_lo, later, side="right") - 1]
            tin = emit - lat
            m = land >= since_ns
            e2e.append(c["committed_ns"] - land[m])
            land_of.append(land[m])
            parts["staging"].append((logged - land)[m])
            parts["replay"].append((tin - logged)[m])
            parts["join"].append(lat[m])
            parts["commit"].append((c["committed_ns"] - emit)[m])
    e2e, land = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in (e2e, land_of))
    if not len(e2e):
        raise JobError("bench live: the run committed no results after the warm-up")
    out = _summary(e2e, land)
    out["parts_ms"] = {k: round(float(np.median(np.concatenate(v))) / 1e6, 1) for k, v in parts.items()}
    out["results"] = int(len(e2e))
    out["last_commit_ns"] = max(c["committed_ns"] for c in commits)
    return out


def _summary(e2e, land):
    """p50/p99 (ms) and whether the lag grows (the rule in the module docstring)."""
    o = np.argsort(land, kind="stable")
    q = max(1, len(o) // 4)
    first, last = float(np.median(e2e[o[:q]])), float(np.median(e2e[o[-q:]]))
    return {"p50_ms": round(float(np.percentile(e2e, 50)) / 1e6, 1), "p99_ms": round(float(np.percentile(e2e, 99)) / 1e6, 1),
            "max_ms": round(float(e2e.max()) / 1e6, 1),
            "first_quarter_ms": round(first / 1e6, 1), "last_quarter_ms": round(last / 1e6, 1),
            "sustained": last <= 1.5 * first + 5e8 and float(np.percentile(e2e, 99)) <= P99_BOUND_NS}


def spark_trial(work, rate, seconds, window="1s", keys=10_000, say=print, master="local[2]"):
    """Spark Structured Streaming's stream-stream join of the same live workload: watermark at the
    same lateness, the same equi condition and time bound; latency from landing to the end of the
    micro-batch that emits each result."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StructField, StructType
    from ..storage.spark.session import spark_session
    from ..units import parse_duration_ns
    os.makedirs(work, exist_ok=True)
    gen = Generator(work, rate, lateness_ms=LATENESS_MS, keys=keys)
    spark = spark_session(master, "mpi-join bench live (Spark peer)",
                          ("spark.sql.shuffle.partitions=2", "spark.sql.streaming.noDataMicroBatches.enabled=false"))
    schema = StructType([StructField("t", LongType()), StructField("k", IntegerType()), StructField("v", DoubleType()),
                         StructField("landed", LongType())])
    sides = []
    for n, tag in zip(STREAMS, ("r", "s")):
        df = spark.readStream.option("header", True).schema(schema).csv(os.path.join(work, "raw", n))
        df = df.withColumn("et", F.timestamp_millis("t"))
        sides.append(df.select(*[F.col(c).alias(f"{tag}_{c}") for c in df.columns])
                     .withWatermark(f"{tag}_et", f"{LATENESS_MS} milliseconds"))
    r, s = sides
    w = F.expr(f"INTERVAL {parse_duration_ns(window, 'window') // 1_000_000} MILLISECONDS")
    joined = r.join(s, (r["r_k"] == s["s_k"]) & (s["s_et"] >= r["r_et"] - w) & (s["s_et"] <= r["r_et"] + w))
    got = []

    def on_batch(df, _id):
        t = df.select(F.greatest("r_landed", "s_landed").alias("l")).toArrow()
        done = time.time_ns()
        if t.num_rows:
            got.append(done - t.column("l").to_numpy() * 1_000_000)
            got.append(t.column("l").to_numpy() * 1_000_000)
    q = (joined.writeStream.foreachBatch(on_batch).option("checkpointLocation", os.path.join(work, "ckpt"))
         .trigger(processingTime="200 milliseconds").start())
    gen.run(WARMUP_S)
    _drained(q)
    t_start = time.time_ns()
    say(f"bench live: Spark at {rate:,.0f} tuples/s per stream for {seconds} s ...")
    gen.run(seconds)
    t_end = time.time_ns()
    drained = _drained(q)
    q.stop()
    if not drained:
        say(f"bench live: Spark had not caught up {600} s after the input ended; counted what it emitted")
    e2e, land = np.concatenate(got[0::2]), np.concatenate(got[1::2])
    e2e, land = e2e[land >= t_start], land[land >= t_start]
    if not len(e2e):
        raise JobError("bench live: Spark's join emitted no results after the warm-up")
    out = _summary(e2e, land)
    out.update(rate=rate, seconds=seconds, rows=sum(gen.rows.values()), results=int(len(e2e)),
               drain_s=round((time.time_ns() - t_end) / 1e9 - 1.0, 2))
    return out


def _drained(q, timeout=600):
    """Wait until a streaming query has read every file (no data available, no micro-batch
    running) for a second. Returns False when it has not within `timeout` s."""
    t_stop, quiet_since = time.monotonic() + timeout, None
    while time.monotonic() < t_stop:
        st = q.status
        if st.get("isDataAvailable") or st.get("isTriggerActive"):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 1.0:
            return True
        time.sleep(0.1)
    return False


def bench_live(out, rates, seconds, ranks, spark=True, say=print, spark_rates=None):
    """The ladder: each rate until one is not sustained, for mpi-join and for Spark; then mpi-join
    at 80% of its best rate. Writes OUT/live.json and prints a table; returns the report."""
    os.makedirs(out, exist_ok=True)
    report = {"seconds": seconds, "ranks": ranks, "lateness_ms": LATENESS_MS, "mpi_join": [], "spark": []}

    def ladder(kind, fn, rates=rates):
        best = None
        for r in rates:
            res = fn(os.path.join(out, f"{kind}-{int(r)}"), r)
            report[kind].append(res)
            say(f"  {kind}: {r:,.0f}/s per stream: p50 {res['p50_ms']:,} ms, p99 {res['p99_ms']:,} ms, "
                f"quarters {res['first_quarter_ms']:,} -> {res['last_quarter_ms']:,} ms"
                + ("" if res["sustained"] else "  (not sustained: " + (
                    "p99 over 10 s" if res["p99_ms"] > P99_BOUND_NS / 1e6 else "the lag grows") + ")")
                + (", exact" if res.get("exact") else ""))
            if not res["sustained"]:
                break
            best = r
        return best

    best = ladder("mpi_join", lambda d, r: trial(d, r, seconds, ranks, say=say))
    report["mpi_join_best"] = best
    if best:
        at = trial(os.path.join(out, "mpi_join-80pct"), 0.8 * best, seconds, ranks, say=say)
        report["at_80pct"] = at
        say(f"  mpi-join at 80% ({0.8 * best:,.0f}/s): p50 {at['p50_ms']:,} ms, p99 {at['p99_ms']:,} ms; median parts "
            + ", ".join(f"{k} {v:,} ms" for k, v in at["parts_ms"].items()))
    if report["mpi_join"]:
        say(f"  stager CPU per row: " + ", ".join(f"{r['stager_cpu_us_per_row']:,} us at {r['rate']:,.0f}/s"
                                                   for r in report["mpi_join"])
            + "; cores used (generator, stager, run) at the last rate: "
            + ", ".join(f"{v:g}" for v in report["mpi_join"][-1]["cores_used"].values()))
    iso = trial(os.path.join(out, "mpi_join-iso"), ISO_RATE, seconds, ranks, say=say, iso=True, bad=ISO_BAD)
    report["iso_bad_rows"] = iso
    say(f"  mpi-join with ISO-8601 times and {ISO_BAD:.1%} unreadable rows at {ISO_RATE:,}/s per stream: p50 "
        f"{iso['p50_ms']:,} ms, p99 {iso['p99_ms']:,} ms, max {iso.get('max_ms', '?')} ms"
        + (", exact" if iso["exact"] else ", NOT exact"))
    st = start_trial(os.path.join(out, "live-start"), ranks, say=say)
    report["live_start"] = st
    say(f"  live from its start: the log up in {st['log_up_s']} s, the first result committed in "
        f"{st['first_result_s']} s" + (", exact" if st["exact"] else ", NOT exact"))
    if spark:
        report["spark_best"] = ladder("spark", lambda d, r: spark_trial(d, r, seconds, say=say),
                                      rates=spark_rates or rates)
    with open(os.path.join(out, "live.json"), "w") as f:
        json.dump(report, f, indent=1)
    sb = report.get("spark_best")
    if best and sb:
        say(f"bench live: highest sustained rate: mpi-join {best:,.0f}/s per stream, Spark {sb:,.0f}/s per stream "
            f"({best / sb:.1f}x)")
    elif best:
        say(f"bench live: highest sustained rate: mpi-join {best:,.0f}/s per stream"
            + ("; Spark sustained none of the rates" if spark else ""))
    return report
