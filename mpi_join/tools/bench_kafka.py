"""`mpi-join bench-live --kafka`: Kafka -> join -> Kafka, mpi-join's `live` against Flink SQL's
interval join (tools/flink_kafka.py), on the same broker, generator, join and cores.

Each trial has topics of its own: R and S (two partitions each) and the result topic (one).
A producer process writes `t,k,v` CSV records to R and S at a set rate per topic, `t` the
wall-clock ms at which it produced them (event time is produce time), keys uniform; it lingers
20 ms for a batch (the broker, which shares the cores, answered batches of a few records with
0.54 cores at 60,000/s per topic and 5 ms, 0.37 at 20 ms). The system
under test joins R and S (equal k, |R.t - S.t| < 1 s, 500 ms allowed lateness, the same for
both) and produces each result, exactly once, to the result topic: mpi-join's through `live`
(stager, following run, publisher; one Kafka transaction per result commit, every 250 ms),
Flink's through its exactly-once Kafka sink (one transaction per checkpoint, every 250 ms). A
`read_committed` consumer in this process reads the result topic; a result's latency runs
from the later of its two input records' produce time to the moment the consumer has it.

A trial warms up at 1,000 records/s per topic until the first result is visible (so that a
system's start is not counted), produces at the trial's rate for `seconds`, then at 1,000/s
again (a live stream goes on) until the result topic holds every result of the records up to
the end of the timed phase (their count computed here from the records) or stops growing for
20 s. A rate is sustained when every result arrived, the lag does not grow
(bench_live._summary: the last quarter's median latency at most 1.5x the first's plus 0.5 s)
and p99 is under 10 s.
"""
import json
import os
import signal
import sys
import time

import numpy as np

from ..errors import JobError
from .bench_live import _cmd, _spawn, _summary, tree_cpu_s

WINDOW_MS, LATENESS_MS, COMMIT_MS, WARM_RATE, PARTITIONS = 1000, 500, 250, 1000, 2
QUIET_S = 20


def produce(spec_path):
    """The producer process: WARM_RATE per topic until the file `go` exists, then `rate` for
    `seconds`, then writes every record's (topic index, t, k) so far to `produced.npy` and goes
    on at WARM_RATE until the file `stop` exists: a live stream goes on, and its watermark with
    it, so the timed records' last results are released as they would be."""
    from confluent_kafka import Producer
    from ..parent_death import arm
    arm()
    with open(spec_path) as f:
        spec = json.load(f)
    p = Producer({"bootstrap.servers": spec["servers"], "linger.ms": 20, "queue.buffering.max.messages": 2_000_000,
                  "log_level": 0})
    rng, topics = np.random.default_rng(spec["seed"]), (spec["r"], spec["s"])
    d = os.path.dirname(spec_path)
    log, sent, go, stop = [], 0, os.path.join(d, "go"), os.path.join(d, "stop")
    t_phase, rate, t_end = time.monotonic(), WARM_RATE, None
    while not os.path.exists(stop):
        if t_end is None and os.path.exists(go):
            t_phase, rate, sent = time.monotonic(), spec["rate"], 0
            t_end = t_phase + spec["seconds"]
        elif t_end is not None and time.monotonic() >= t_end and log is not None:
            p.flush(120)
            np.save(os.path.join(d, "produced.partial.npy"), np.concatenate(log))
            os.replace(os.path.join(d, "produced.partial.npy"), os.path.join(d, "produced.npy"))
            t_phase, rate, sent, log = time.monotonic(), WARM_RATE, 0, None
        n = int((time.monotonic() - t_phase) * rate) - sent
        if n > 0:
            now = time.time_ns() // 1_000_000
            keys = rng.integers(0, spec["keys"], (2, n))
            for i, topic in enumerate(topics):
                for j, k in enumerate(keys[i].tolist()):
                    p.produce(topic, f"{now},{k},{j % 97 / 97}".encode(), partition=j % PARTITIONS)
                if log is not None:
                    log.append(np.stack([np.full(n, i), np.full(n, now), keys[i]], axis=1))
            sent += n
            p.poll(0)
        time.sleep(0.002)
    p.flush(120)


def expected_results(produced):
    """How many pairs the produced records make: equal k, |R.t - S.t| < WINDOW_MS."""
    r, s = produced[produced[:, 0] == 0], produced[produced[:, 0] == 1]
    key = lambda k, t: k.astype(np.int64) * (1 << 42) + t    # noqa: E731 - t (ms) < 2^42
    sk = np.sort(key(s[:, 2], s[:, 1]))
    lo = np.searchsorted(sk, key(r[:, 2], r[:, 1] - (WINDOW_MS - 1)), side="left")
    hi = np.searchsorted(sk, key(r[:, 2], r[:, 1] + (WINDOW_MS - 1)), side="right")
    return int((hi - lo).sum())


def _job(work, servers, topics, ranks):
    streams = "".join(
        f'[streams.{n}]\nschema = {{ k = "int64", v = "float64" }}\nwindow = "{WINDOW_MS}ms"\n'
        f'raw = {{ source = "kafka", format = "csv", time = "t", time_unit = "ms", options = '
        f'{{ "kafka.bootstrap.servers" = "{servers}", subscribe = "{topics[n.lower()]}" }} }}\n' for n in ("R", "S"))
    path = os.path.join(work, "job.toml")
    with open(path, "w") as f:
        f.write(f'[job]\nname = "kafka"\nts_unit = "ms"\n[input]\nstaged = "staged"\n'
                f'allowed_lateness = "{LATENESS_MS}ms"\n[output]\ndir = "out"\ncommit_every = "{COMMIT_MS}ms"\n'
                f'kafka = {{ servers = "{servers}", topic = "{topics["out"]}", format = "json" }}\n{streams}'
                f'[predicate]\nequi = [["R.k", "S.k"]]\n[strategy]\nname = "hash"\n'
                f'[run]\nbatch_size = 4096\nflush_interval = "5ms"\nprogress = false\n')
    return path


def _system(kind, work, servers, topics, ranks):
    """Start the system under test; returns (process, its output lines, a result's later input
    time from its JSON value)."""
    if kind == "mpi_join":
        from ..parent_death import child_env
        p, lines = _spawn(_cmd("live", _job(work, servers, topics, ranks), "-n", str(ranks), "--status-every", "5"),
                          env=child_env({}, signal.SIGKILL))           # it ends with the bench (its children with it)
        return p, lines, lambda v: max(v["R_ts"], v["S_ts"])
    from ..services.maven import classpath
    from .flink_peer import flink_python
    spec = os.path.join(work, "flink.json")
    with open(spec, "w") as f:
        json.dump({"servers": servers, **topics, "jar": classpath("flink-kafka")[0], "parallelism": 2,
                   "checkpoint_ms": COMMIT_MS, "checkpoints": os.path.join(os.path.realpath(work), "flink-checkpoints"), "window_ms": WINDOW_MS, "lateness_ms": LATENESS_MS,
                   "group": f"flink-{os.path.basename(work)}"}, f)
    p, lines = _spawn([flink_python(), os.path.join(os.path.dirname(os.path.abspath(__file__)), "flink_kafka.py"),
                       spec])
    return p, lines, lambda v: max(v["r_t"], v["s_t"])


def trial(kind, work, servers, rate, seconds, ranks, keys=200_000, say=print, timeout=300):
    """One system at one rate: the latency summary, the results against the produced records'
    count, and the CPU the system used per thousand input records."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic
    os.makedirs(work, exist_ok=True)
    tag = f"{kind}-{int(rate)}-{time.time_ns() // 1_000_000}"
    topics = {"r": f"{tag}-R", "s": f"{tag}-S", "out": f"{tag}-out"}
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    for f in admin.create_topics([NewTopic(topics["r"], PARTITIONS, 1), NewTopic(topics["s"], PARTITIONS, 1),
                                  NewTopic(topics["out"], 1, 1)]).values():
        f.result(30)
    spec = os.path.join(work, "producer.json")
    with open(spec, "w") as f:
        json.dump({"servers": servers, **topics, "rate": rate, "seconds": seconds, "keys": keys, "seed": 11}, f)
    consumer = Consumer({"bootstrap.servers": servers, "group.id": tag, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0})
    consumer.subscribe([topics["out"]])
    from ..parent_death import child_env
    producer, plines = _spawn([sys.executable, "-c", f"from mpi_join.tools.bench_kafka import produce; produce({spec!r})"],
                              env=child_env({}, signal.SIGKILL))      # it ends with the bench, however that ends
    system, slines, got_at, later_t = None, [], [], []
    try:                       # the producer is stopped whatever happens from here (a peer that cannot start)
        system, slines, later = _system(kind, work, servers, topics, ranks)
        deadline, t_go, expected, last_new = time.monotonic() + timeout, None, None, time.monotonic()
        n_got, t_end = 0, None          # results of the timed records (t_end: known once they are produced)
        while True:
            msgs = [m for m in consumer.consume(20_000, 0.2) if m.error() is None]
            now = time.time_ns() / 1e6
            if msgs:                           # one parse for the batch: this process shares the cores
                got_at += [now] * len(msgs)
                new = list(map(later, json.loads(b"[" + b",".join(m.value() for m in msgs) + b"]")))
                later_t += new
                n_got += sum(t <= t_end for t in new) if expected is not None else 0
            last_new = time.monotonic() if msgs else last_new
            if system.poll() is not None:
                raise JobError(f"bench kafka: {kind} ended early (exit {system.returncode}): " + " | ".join(slines[-3:]))
            if t_go is None:
                if got_at:                     # the system is up end to end: the timed phase
                    open(os.path.join(work, "go"), "w").close()
                    t_go, cpu0 = time.time_ns() / 1e6, tree_cpu_s(system.pid)
                    say(f"bench kafka: {kind} up; {rate:,.0f} records/s per topic for {seconds} s ...")
                elif time.monotonic() > deadline:
                    raise JobError(f"bench kafka: {kind} gave no result within {timeout} s: " + " | ".join(slines[-3:]))
                continue
            if producer.poll() is not None:
                raise JobError("bench kafka: the producer ended early: " + " | ".join(plines[-3:]))
            if expected is None and os.path.exists(os.path.join(work, "produced.npy")):
                timed = np.load(os.path.join(work, "produced.npy"))
                expected, t_end, t_done = expected_results(timed), float(timed[:, 1].max()), time.monotonic()
                n_got = sum(t <= t_end for t in later_t)         # then counted as they come
                n_in = int((timed[:, 1] >= t_go).sum())      # the timed records, both topics
                cpu1 = tree_cpu_s(system.pid)
            if expected is not None and (n_got >= expected or time.monotonic() - last_new > QUIET_S):
                break
    finally:
        open(os.path.join(work, "stop"), "w").close()
        consumer.close()
        for p in (producer, system):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        with open(os.path.join(work, f"{kind}.log"), "w") as f:       # what the system said, to look at
            f.write("\n".join(slines) + "\n")
    at, lt = np.array(got_at), np.array(later_t, np.float64)
    m = (lt >= t_go) & (lt <= t_end)
    if not m.any():
        raise JobError(f"bench kafka: {kind} gave no result for the timed records")
    out = _summary(((at - lt)[m] * 1e6).astype(np.int64), lt[m])
    out.update(rate=rate, seconds=seconds, produced_per_s=round(n_in / 2 / ((t_end - t_go) / 1e3)), results=n_got, expected=expected, complete=n_got == expected,
               drain_s=round(time.monotonic() - t_done, 1), cpu_s=round(cpu1 - cpu0, 1),
               cpu_ms_per_1k=round((cpu1 - cpu0) / n_in * 1e6, 2))
    out["sustained"] = out["sustained"] and out["complete"]
    return out


def bench_kafka(out, rates, seconds, ranks, flink=True, say=print, flink_rates=None, servers=None):
    """The ladder for mpi-join, then Flink: each rate until one is not sustained. A Kafka broker
    of its own (dev-services, in OUT/services) unless `servers` is given. Writes OUT/kafka.json."""
    os.makedirs(out, exist_ok=True)
    services = None
    if servers is None:
        from ..services.daemons import DevServices
        services = DevServices(os.path.join(os.path.realpath(out), "services"), progress=say)
        services.start(["kafka"])
        servers = services.endpoints()["kafka"]
    report = {"seconds": seconds, "ranks": ranks, "window_ms": WINDOW_MS, "lateness_ms": LATENESS_MS,
              "commit_ms": COMMIT_MS, "mpi_join": [], "flink": []}
    try:
        for kind, ladder in (("mpi_join", rates), ("flink", flink_rates if flink else [])):
            for r in ladder:
                res = trial(kind, os.path.join(out, f"{kind}-{int(r)}"), servers, r, seconds, ranks, say=say)
                report[kind].append(res)
                say(f"  {kind}: {r:,.0f}/s per topic: p50 {res['p50_ms']:,} ms, p99 {res['p99_ms']:,} ms, quarters "
                    f"{res['first_quarter_ms']:,} -> {res['last_quarter_ms']:,} ms, results {res['results']:,} of "
                    f"{res['expected']:,}, {res['cpu_ms_per_1k']} CPU ms per 1k records, produced "
                    f"{res['produced_per_s']:,}/s"
                    + ("" if res["sustained"] else "  (not sustained)"))
                if not res["sustained"]:
                    break
    finally:
        if services is not None:
            services.stop()
    best = {k: max([x["rate"] for x in report[k] if x["sustained"]], default=None) for k in ("mpi_join", "flink")}
    report["best"] = best
    if best["mpi_join"] and best["flink"]:
        report["rate_ratio"] = round(best["mpi_join"] / best["flink"], 2)
        say(f"bench kafka: highest sustained rate per topic: mpi-join {best['mpi_join']:,.0f}, Flink "
            f"{best['flink']:,.0f}: {report['rate_ratio']}x")
    with open(os.path.join(out, "kafka.json"), "w") as f:
        json.dump(report, f, indent=1)
    return report
