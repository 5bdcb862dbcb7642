"""Kafka in, for real (storage/kafka_source.py): streams read from topics of the broker the
services tier starts (conftest `services`), staged by `stage --follow` into the staged log with
each batch's partition offsets. A stager SIGKILLed mid-stream and restarted stages every record
once (the staged rows are the produced ones, row for row; each bad record quarantined by its
partition and offset); partitions added and the broker restarted during a run lose and double
nothing; an unreachable broker, a missing topic and a topic deleted mid-run are one line each."""
import json
import os
import signal
import subprocess
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import MPIEXEC, mpi_join_cmd, mpi_join_pids, run_cli, run_mpi

SLOW = True
pytestmark = [pytest.mark.services, pytest.mark.xdist_group("services")]

JOB = """\
[job]
name = "{name}"
ts_unit = "ms"
[input]
staged = "staged"
allowed_lateness = "5s"
[output]
dir = "out"
[streams.R]
schema = {{ k = "int32", v = "float32" }}
window = "1s"
raw = {{ source = "kafka", format = "json", time = "t", time_unit = "ms", options = {{ "kafka.bootstrap.servers" = "{servers}", subscribe = "{r}" }} }}
[streams.S]
schema = {{ k = "int64", w = "float64" }}
window = "1s"
raw = {{ source = "kafka", format = "csv", time = "t", time_unit = "ms", options = {{ "kafka.bootstrap.servers" = "{servers}", subscribe = "{s}" }} }}
[predicate]
equi = [["R.k", "S.k"]]
[strategy]
name = "hash"
"""


def _topics(servers, *names, parts=2):
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": servers})
    for f in a.create_topics([NewTopic(n, parts, 1) for n in names]).values():
        f.result(30)
    return a


class Producer:
    """Records of R (JSON) and S (CSV lines) in event-time order over the partitions, a few of
    them bad; what was delivered where (partition, offset), from the delivery reports."""

    def __init__(self, servers, r, s, transactional=None):
        self.servers, self.tx = servers, transactional
        self.renew()
        self.topics = {"R": r, "S": s}
        self.rows = {"R": [], "S": []}          # (t, k, v) of the good records delivered
        self.bad = set()                        # (stream, partition, offset) of the bad ones
        self.i, self.rng = 0, np.random.default_rng(7)
        self.failed = []

    def renew(self):
        """A new producer (one that knows a topic's new partitions at once)."""
        from confluent_kafka import Producer as P
        if getattr(self, "p", None) is not None:
            self.p.flush(60)
        self.p = P({"bootstrap.servers": self.servers, "linger.ms": 5, "enable.idempotence": True,
                    "queue.buffering.max.messages": 1_000_000,
                    **({"transactional.id": self.tx} if self.tx else {})})
        if self.tx:
            self.p.init_transactions(60)

    def _sent(self, stream, row):
        def cb(err, msg):
            if err is not None:
                self.failed.append(err)
            elif row is None:
                self.bad.add((stream, msg.partition(), msg.offset()))
            else:
                self.rows[stream].append(row)
        return cb

    def send(self, n, parts=2, bad_every=997, end="commit", pad=0):
        """n records of each stream; a transactional producer's in one transaction, which `end`
        commits, aborts or leaves open (what an aborted or open one holds is not counted).
        `pad`: bytes of an unread field in R's partition-0 records (fewer of them per fetch)."""
        if self.tx:
            self.p.begin_transaction()
            kept, self.rows, self.bad = (self.rows, self.bad), {"R": [], "S": []}, set()
        for _ in range(n):
            i = self.i
            self.i += 1
            t, k = 1_000_000 + 4 * i, int(self.rng.integers(0, 30))
            v = float(np.float32(self.rng.random()))
            w = float(self.rng.random())
            bad = i % bad_every == 5
            rv = b'{"t": "oops", "k": 1}' if bad and i % 2 else b"not json" if bad else \
                json.dumps({"t": t, "k": k, "v": v, **({"pad": "x" * pad} if pad and i % parts == 0 else {})}).encode()
            sv = b"1,2" if bad else f"{t + 1},{k},{w!r}".encode()
            self.p.produce(self.topics["R"], rv, partition=i % parts, on_delivery=self._sent("R", None if bad else (t, k, v)))
            self.p.produce(self.topics["S"], sv, partition=i % parts, on_delivery=self._sent("S", None if bad else (t + 1, k, w)))
            self.p.poll(0)
        self.p.flush(60)
        assert not self.failed, self.failed[:3]
        if self.tx:
            if end == "commit":
                self.p.commit_transaction(60)
            elif end == "abort":
                self.p.abort_transaction(60)
            got, (self.rows, self.bad) = (self.rows, self.bad), kept
            if end == "commit":
                for st in got[0]:
                    self.rows[st] += got[0][st]
                self.bad |= got[1]


def _job(tmp, services, name):
    servers = services.endpoints()["kafka"]
    r, s = f"{name}-R", f"{name}-S"
    (tmp / "job.toml").write_text(JOB.format(name=name, servers=servers, r=r, s=s))
    return str(tmp / "job.toml"), servers, r, s


def _staged(tmp):
    """Per stream the staged (ts, k, payload) rows, the rows quarantined as late (a partition read
    behind the others by more than the allowed lateness: README, "Kafka topics"), and the
    unparseable records' (stream, partition, offset)."""
    out, late, bad = {}, {}, set()
    q = tmp / "staged" / "_quarantine"
    for st, pay in (("R", "v"), ("S", "w")):
        t = pq.read_table(str(tmp / "staged" / st), columns=["seq", "ts", "k", pay]).sort_by("seq")
        out[st] = sorted(zip(t.column("ts").to_pylist(), t.column("k").to_pylist(), t.column(pay).to_pylist()))
        late[st] = []
        for f in sorted(os.listdir(q / st)) if (q / st).exists() else []:
            for row in pq.read_table(str(q / st / f)).to_pylist():
                assert row["file"].startswith("kafka://"), row
                if f.startswith("late-"):
                    late[st].append((row["ts"], row["k"], row[pay]))
                else:
                    bad.add((st, int(row["file"].rsplit("/", 1)[1]), row["record"]))
    return out, late, bad


def _committed(tmp):
    try:
        return json.loads((tmp / "staged" / "_manifest.json").read_text())["total"]
    except (OSError, ValueError, KeyError):
        return 0


def _check(tmp, prod, path, late_ok=False):
    """Each produced record staged once, or quarantined once (unparseable; late only with
    `late_ok`), and the run over the log equal to the oracle."""
    got, late, bad = _staged(tmp)
    for st in ("R", "S"):
        assert late_ok or not late[st], late[st][:3]
        assert sorted(got[st] + late[st]) == sorted(prod.rows[st]), (st, len(got[st]), len(late[st]), len(prod.rows[st]))
    assert bad == prod.bad and bad, (sorted(bad - prod.bad)[:5], sorted(prod.bad - bad)[:5])
    assert run_mpi(3, "run", path).returncode == 0
    v = run_cli("verify", str(tmp / "out"), "--job", path)
    assert v.returncode == 0 and "OK" in v.stdout, v.stdout + v.stderr


def test_kafka_staged_once_through_a_sigkilled_stager(services, tmp_path):
    path, servers, r, s = _job(tmp_path, services, "kill")
    _topics(servers, r, s)
    prod = Producer(servers, r, s)
    prod.send(3000)
    feed = threading.Thread(target=lambda: [prod.send(1000) or time.sleep(0.3) for _ in range(8)])
    feed.start()
    p = subprocess.Popen(mpi_join_cmd("stage", "--follow", path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    deadline = time.monotonic() + 90
    while _committed(tmp_path) < 1000 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
    assert p.poll() is None and _committed(tmp_path) >= 1000, p.stderr.read() if p.poll() is not None else ""
    os.killpg(p.pid, signal.SIGKILL)          # mid-stream: records polled after the last commit are read again
    p.wait(30)
    killed_at = _committed(tmp_path)
    feed.join(120)
    r2 = run_cli("stage", "--follow", "--until", "end", path, timeout=300)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "continuing the log" in r2.stderr and killed_at < sum(len(v) for v in prod.rows.values())
    _check(tmp_path, prod, path)


def test_kafka_transactions_read_committed_and_a_skewed_backlog_without_late_rows(services, tmp_path):
    """A transactional producer's topics, one transaction aborted and one left open: `--until
    end` ends, with exactly the committed records. R's partition 0 has records ten times the
    size of partition 1's, so a fetch brings partition 1 minutes of event time further than
    partition 0, and still no row is late: each partition holds the watermark until it is read
    to its end (kafka_source.hold)."""
    path, servers, r, s = _job(tmp_path, services, "txn")
    _topics(servers, r, s)
    prod = Producer(servers, r, s, transactional="mpi-join-test-txn")
    prod.send(60_000, pad=400)
    prod.send(500, end="abort")
    prod.send(20_000)
    prod.send(300, end="open")
    r1 = run_cli("stage", "--follow", "--until", "end", path, timeout=300)
    assert r1.returncode == 0, r1.stderr[-3000:]
    prod.p.abort_transaction(60)
    _check(tmp_path, prod, path)


def test_kafka_new_partitions_and_a_broker_restart(services, tmp_path):
    from confluent_kafka.admin import NewPartitions
    path, servers, r, s = _job(tmp_path, services, "grow")
    admin = _topics(servers, r, s)
    prod = Producer(servers, r, s)
    prod.send(2000)
    p = subprocess.Popen(mpi_join_cmd("stage", "--follow", path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while _committed(tmp_path) < 1000 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _committed(tmp_path) >= 1000
        for f in admin.create_partitions([NewPartitions(r, 3), NewPartitions(s, 3)]).values():
            f.result(30)
        time.sleep(3)                            # the stager's metadata refresh (every 2 s)
        prod.renew()
        prod.send(1500, parts=3)
        services.kill("kafka")
        time.sleep(2)
        services.start(["kafka"])
        prod.send(1500, parts=3)
        deadline = time.monotonic() + 120
        total = lambda: sum(len(v) for v in prod.rows.values())      # noqa: E731
        while _committed(tmp_path) < total() - 3000 and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(p.pid, signal.SIGTERM)         # drains: what the partitions hold now, then the log ends
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, err[-3000:]
    assert "new partition(s) 2" in err, err[-3000:]
    _check(tmp_path, prod, path, late_ok=True)


def test_kafka_unreachable_missing_and_deleted_topics(services, tmp_path):
    from confluent_kafka.admin import AdminClient
    import socket
    with socket.socket() as sk:                  # a port nothing listens on
        sk.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sk.getsockname()[1]}"
    path, servers, r, s = _job(tmp_path, services, "gone")
    text = (tmp_path / "job.toml").read_text()
    (tmp_path / "dead.toml").write_text(text.replace(servers, dead))
    t0 = time.monotonic()
    p = run_cli("stage", "--follow", "--until", "end", str(tmp_path / "dead.toml"), timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert p.returncode != 0 and len(lines) == 1 and "cannot reach Kafka at " + dead in lines[0], p.stderr
    assert time.monotonic() - t0 < 60
    p = run_cli("stage", "--follow", "--until", "end", path, timeout=120)        # the topics do not exist
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert p.returncode != 0 and len(lines) == 1 and f"Kafka topic '{r}'" in lines[0], p.stderr
    _topics(servers, r, s)
    prod = Producer(servers, r, s)
    prod.send(3000)
    f = subprocess.Popen(mpi_join_cmd("stage", "--follow", path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while _committed(tmp_path) < 500 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _committed(tmp_path) >= 500
    admin = AdminClient({"bootstrap.servers": servers})       # held: its futures need the handle
    admin.delete_topics([s])[s].result(30)
    try:
        out, err = f.communicate(timeout=60)
    finally:
        if f.poll() is None:
            os.killpg(f.pid, signal.SIGKILL)
    lines = [ln for ln in err.splitlines() if ln.startswith("mpi-join: error:")]
    assert f.returncode != 0 and len(lines) == 1 and f"Kafka topic '{s}'" in lines[0], err[-3000:]


def _consume_all(servers, topic, idle_s=4.0):
    """Every record a read_committed consumer sees on `topic`, until it is idle for `idle_s`."""
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": servers, "group.id": f"check-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe([topic])
    out, last = [], time.monotonic()
    while time.monotonic() - last < idle_s:
        for m in c.consume(10000, 0.5):
            if m.error() is None:
                out.append(json.loads(m.value()))
                last = time.monotonic()
    c.close()
    return out


def _sink_job(tmp, services, name, extra=""):
    """A Kafka-in job with [output] kafka to the topic `<name>-out` (one partition), its topics
    made and 2000 records produced: (job path, servers, producer, result topic)."""
    path, servers, r, s = _job(tmp, services, name)
    text = (tmp / "job.toml").read_text().replace(
        'dir = "out"', f'dir = "out"\ncommit_every = "200ms"\nkafka = {{ servers = "{servers}", topic = "{name}-out" }}')
    (tmp / "job.toml").write_text(text + extra)
    _topics(servers, r, s)
    _topics(servers, f"{name}-out", parts=1)
    prod = Producer(servers, r, s)
    prod.send(2000)
    return path, servers, prod, f"{name}-out"


def test_results_to_kafka_exactly_once_through_a_sigkilled_publisher(services, tmp_path):
    path, servers, prod, _ = _sink_job(tmp_path, services, "sink")
    stager = subprocess.Popen(mpi_join_cmd("stage", "--follow", path), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while _committed(tmp_path) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    runner = subprocess.Popen([MPIEXEC, "-n", "3", *mpi_join_cmd("run", "--follow", path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True,
                              env=dict(os.environ, MPI_JOIN_QUIET="1"))
    for _ in range(6):                       # the log grows while the run follows it: a commit each 200 ms
        prod.send(1000)
        time.sleep(0.5)
    os.killpg(stager.pid, signal.SIGTERM)    # drains, then ends the log; the run ends with it
    assert stager.wait(120) == 0, stager.stderr.read()[-3000:]
    out, err = runner.communicate(timeout=300)
    assert runner.returncode == 0, err[-3000:]
    commits = json.loads((tmp_path / "out" / "_COMMITTED").read_text())["commits"]
    assert commits >= 3, commits
    # the publisher killed once it has produced its first commit: the rest comes from the next one
    pub = subprocess.Popen(mpi_join_cmd("publish", path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    for line in pub.stderr:
        if line.startswith("publish: commit 1:"):
            os.killpg(pub.pid, signal.SIGKILL)
            break
    pub.wait(60)
    assert pub.returncode == -signal.SIGKILL
    again = run_cli("publish", path, timeout=300)
    assert again.returncode == 0 and "commit(s) published before" in again.stderr, again.stderr[-2000:]
    assert "1 commit(s) published before" in again.stderr or "2 commit(s) published before" in again.stderr
    got = _consume_all(servers, "sink-out")
    res = pq.read_table(str(tmp_path / "out" / "results"))
    want = sorted(zip(res.column("R_seq").to_pylist(), res.column("S_seq").to_pylist()))
    assert sorted((g["R_seq"], g["S_seq"]) for g in got) == want and len(want) > 1000
    assert all("R_k" in g and "S_w" in g and g["R_k"] == g["S_k"] for g in got[:100])
    # nothing more to produce: a third publish produces no commit
    third = run_cli("publish", path, "--no-follow", timeout=120)
    assert third.returncode == 0 and "published 0 commit(s)" in third.stdout, third.stdout + third.stderr


def _pids_of(*words):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if all(any(w.encode() == c or w.encode() in c for c in cmd) for w in words):
                out.append(int(d))
    return out


def test_live_from_kafka_to_kafka_through_sigkills(services, tmp_path):
    """`live` with Kafka topics in and [output] kafka out starts the publisher beside the stager
    and the run; the publisher, the stager and a rank, each SIGKILLed mid-run, are restarted by
    live (the run from its newest checkpoint), and after a drain the topic holds every result of
    the run once, and the run's results equal the oracle's over the final log."""
    path, servers, prod, _ = _sink_job(tmp_path, services, "live",
                                       '\n[live]\nrestart_attempts = 3\nrestart_delay = "200ms"\n')
    live = subprocess.Popen(mpi_join_cmd("live", "-n", "3", path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=dict(os.environ, MPI_JOIN_QUIET="1"))
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "out" / "_COMMITTED").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        prod.send(1000)
        pubs = _pids_of("mpi_join", "publish", path)
        assert pubs, "no publisher"
        for pid in pubs:
            os.kill(pid, signal.SIGKILL)
        prod.send(1000)
        time.sleep(1.5)
        stagers = _pids_of("mpi_join", "stage", "--follow", path)    # the stager, then a rank: live restarts both
        assert stagers, "no stager"
        for pid in stagers:
            os.kill(pid, signal.SIGKILL)
        prod.send(1000)
        time.sleep(1.5)
        ranks = mpi_join_pids([int(d) for d in os.listdir("/proc") if d.isdigit()], rank=1, marker=("run", path))
        assert ranks, "no rank 1"
        os.kill(ranks[0], signal.SIGKILL)
        for _ in range(3):
            prod.send(1000)
            time.sleep(0.4)
        time.sleep(2)
        os.killpg(live.pid, signal.SIGTERM)          # drain: the log ends, the run and the publisher finish
        out, err = live.communicate(timeout=300)
    finally:
        if live.poll() is None:
            os.killpg(live.pid, signal.SIGKILL)
    assert live.returncode == 0, err[-3000:]
    assert all(f"the {w} exited" in err for w in ("publisher", "stager", "run")), err[-3000:]
    assert "on Kafka topic 'live-out'" in err, err[-3000:]
    got = _consume_all(servers, "live-out")
    res = pq.read_table(str(tmp_path / "out" / "results"))
    want = sorted(zip(res.column("R_seq").to_pylist(), res.column("S_seq").to_pylist()))
    assert sorted((g["R_seq"], g["S_seq"]) for g in got) == want and len(want) > 1000
    v = run_cli("verify", str(tmp_path / "out"), "--job", path)
    assert v.returncode == 0 and "OK" in v.stdout, v.stdout + v.stderr


def test_bench_live_kafka_runs_both_systems_to_every_result(services, tmp_path):
    """`bench-live --kafka` on the services' broker, one short rate for mpi-join's `live` and for
    Flink SQL (its Kafka connector fetched with Maven): each trial delivers every result of its
    records to the read_committed consumer, and the report says so."""
    servers = services.endpoints()["kafka"]
    r = run_cli("bench-live", "--kafka", "--kafka-servers", servers, "--out", str(tmp_path / "b"), "--seconds", "5",
                "--rates", "2000", "--flink-rates", "2000", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((tmp_path / "b" / "kafka.json").read_text())
    for kind in ("mpi_join", "flink"):
        (t,) = rep[kind]
        assert t["complete"] and t["results"] == t["expected"] > 100, (kind, t)
        assert t["p50_ms"] > 0 and t["produced_per_s"] > 1500, (kind, t)
    assert "highest sustained rate per topic" in r.stderr or not all(t["sustained"] for t in rep["mpi_join"] + rep["flink"])


def test_a_kafka_trial_whose_system_cannot_start_stops_its_producer(services, tmp_path, monkeypatch):
    """A trial whose system under test fails to start (here Flink's Python missing) says so in
    one line and leaves no producer behind (it went on producing to the broker for good)."""
    from mpi_join.errors import JobError
    from mpi_join.tools.bench_kafka import trial
    monkeypatch.setenv("MPI_JOIN_FLINK_PYTHON", str(tmp_path / "no-python"))
    work = tmp_path / "t"
    with pytest.raises(JobError, match="Flink's Python is not at"):
        trial("flink", str(work), services.endpoints()["kafka"], 1000, 2, 2)
    spec = str(work / "producer.json")

    def producers():
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if spec.encode() in f.read():
                        found.append(pid)
            except OSError:
                pass
        return found
    deadline = time.monotonic() + 10
    while producers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert producers() == []


def test_live_to_kafka_through_a_stop_and_a_rescaled_restart(services, tmp_path):
    """`live --no-drain -n 3` from Kafka to Kafka, stopped once results are on the topic (the
    log stays open), then `live -n 5`: the run resumes at 5 ranks from its checkpoint (a
    rescaled restore) and the publisher from its mark on the topic; after the drain the topic
    holds every result of the run once, pair for pair the Parquet results."""
    path, servers, prod, _ = _sink_job(tmp_path, services, "rescale")

    def start(ranks, *extra):
        return subprocess.Popen(mpi_join_cmd("live", "-n", str(ranks), *extra, path), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env=dict(os.environ, MPI_JOIN_QUIET="1"))
    live = start(3, "--no-drain")
    try:
        deadline = time.monotonic() + 120
        while len(_consume_all(servers, "rescale-out", idle_s=0.5)) == 0 and time.monotonic() < deadline:
            prod.send(300)
        os.killpg(live.pid, signal.SIGTERM)
        out, err = live.communicate(timeout=120)
        assert live.returncode == 143 and "the log stays open" in err, err[-3000:]
        first = len(_consume_all(servers, "rescale-out", idle_s=1.0))
        assert first > 0
        prod.send(1500)
        live = start(5)
        deadline = time.monotonic() + 120
        while _committed(tmp_path) < sum(len(v) for v in prod.rows.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)
        os.killpg(live.pid, signal.SIGTERM)
        out, err = live.communicate(timeout=300)
    finally:
        if live.poll() is None:
            os.killpg(live.pid, signal.SIGKILL)
    assert live.returncode == 0 and "resuming from checkpoint" in err, err[-3000:]
    ranks = json.loads((tmp_path / "out" / "metrics" / "summary.json").read_text())["ranks"]
    assert len(ranks) == 5, ranks
    got = _consume_all(servers, "rescale-out")
    res = pq.read_table(str(tmp_path / "out" / "results"))
    want = sorted(zip(res.column("R_seq").to_pylist(), res.column("S_seq").to_pylist()))
    assert sorted((g["R_seq"], g["S_seq"]) for g in got) == want and len(want) > first
    v = run_cli("verify", str(tmp_path / "out"), "--job", path)
    assert v.returncode == 0 and "OK" in v.stdout, v.stdout + v.stderr


def test_kafka_starting_offsets_latest_only_at_a_logs_first_start(services, tmp_path):
    """startingOffsets = "latest": a log's first start skips what the topics held, stages what
    comes after; a restart after a SIGKILL goes on from the log's offsets (the records produced
    while it was down are staged), not from the end again."""
    path, servers, r, s = _job(tmp_path, services, "latest")
    text = (tmp_path / "job.toml").read_text().replace('subscribe = "', 'startingOffsets = "latest", subscribe = "')
    (tmp_path / "job.toml").write_text(text)
    _topics(servers, r, s)
    prod = Producer(servers, r, s)
    prod.send(500)
    before = {k: list(v) for k, v in prod.rows.items()}
    p = subprocess.Popen(mpi_join_cmd("stage", "--follow", path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        lines = []
        threading.Thread(target=lambda: [lines.append(x) for x in p.stderr], daemon=True).start()
        deadline = time.monotonic() + 90
        while not any("watching" in x for x in lines) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert any("watching" in x for x in lines), "".join(lines)[-2000:]
        prod.send(3000)                            # 12 s of event time: the watermark (5 s behind) passes some
        deadline = time.monotonic() + 90
        while _committed(tmp_path) < 500 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _committed(tmp_path) >= 500, "".join(lines)[-2000:]
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
    prod.send(300)                                 # while no stager runs
    r2 = run_cli("stage", "--follow", "--until", "end", path, timeout=300)
    assert r2.returncode == 0 and "continuing the log" in r2.stderr, r2.stderr[-3000:]
    got, late, bad = _staged(tmp_path)
    for st in ("R", "S"):
        after = sorted(set(prod.rows[st]) - set(before[st]))
        assert sorted(got[st] + late[st]) == after and not late[st], (st, len(got[st]), len(after))
    assert bad and all(b in prod.bad for b in bad)
