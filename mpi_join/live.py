"""`mpi-join live JOB -n N`: a live join as one supervised job (README "Live streams").

The supervisor starts the stager (`stage --follow`) and the following run (`run -n N
--follow`) as children in sessions of their own, so that a signal to its own process group
reaches it alone and it decides how they stop. It restarts a child that dies by the job's
`[live]` restart strategy: a stager continues its log (Spark's checkpoint and the log's
manifest), a run resumes from its newest checkpoint, or from the log's beginning when it had
none yet (ranks.py). Every few seconds it prints one status line and writes the same figures
to OUT/metrics/live.json.

Stopping (Ctrl-C or SIGTERM): by default it drains: the stager stages every file that has
landed and ends the log, the run joins to the end marker and commits its last results; exit 0.
With `--no-drain` both stop at once; the log stays open and the results committed so far stand;
the next `live` continues both; exit 128 + the signal.
"""
import collections
import json
import os
import signal
import subprocess
import sys
import time

from .errors import JobError
from .parent_death import child_env
from .storage.commits import IMPLICIT, read_committed
from .storage.durable import write_json
from .storage.staged import MANIFEST

STATUS_EVERY_S = 5.0


def _cmd(*args):
    return [sys.executable, "-m", "mpi_join", *args]


class Restarts:
    """The restart strategy as a state machine (no processes): may a child that died be started
    again now, and when."""

    def __init__(self, policy):
        self.policy, self.times, self.count = policy, collections.deque(), 0

    def allow(self, now_s):
        """True, counting it, when another restart is within the strategy at `now_s`."""
        p = self.policy
        if p.interval_ns is not None:
            while self.times and now_s - self.times[0] > p.interval_ns / 1e9:
                self.times.popleft()
        if len(self.times) >= p.attempts:
            return False
        self.times.append(now_s)
        self.count += 1
        return True

    def why_not(self):
        p = self.policy
        return (f"{p.attempts} restart(s)" + (f" within {p.interval_ns / 1e9:g} s" if p.interval_ns else "")
                + " already ([live] restart_attempts" + (", restart_interval" if p.interval_ns else "") + ")")


class Status:
    """The figures of the status line and live.json, from the log's manifest and the run's
    commit record, as rates over the interval since the last look."""

    def __init__(self, job):
        from .storage.latency import Clock
        self.job, self.last, self.t0, self.clock = job, None, time.time(), Clock(job)

    def sample(self, restarts):
        now = time.time()
        man = _read_json(os.path.join(self.job.staged, MANIFEST)) or {}
        rec = read_committed(self.job.output) if os.path.isdir(self.job.output) else None
        log = man.get("log") or {}
        cur = {"t": now,
               "staged": {n: (man.get("streams") or {}).get(n, {}).get("count", 0) for n in self.job.stream_names},
               "quarantined": {n: (man.get("quarantined") or {}).get(n, 0) for n in self.job.stream_names},
               "results": (rec or {}).get("results", 0)}
        prev, self.last = self.last or dict(cur, t=self.t0), cur
        dt = max(now - prev["t"], 1e-9)
        wm = log.get("watermark")
        from .units import ts_unit_ns
        lag = None if wm is None else round(now - wm * ts_unit_ns(self.job.ts_unit) / 1e9, 3)
        return {
            "time_ns": time.time_ns(), "uptime_s": round(now - self.t0, 1),
            "streams": {n: {"staged": cur["staged"][n], "quarantined": cur["quarantined"][n],
                            "staged_per_s": round((cur["staged"][n] - prev["staged"][n]) / dt, 1),
                            "quarantined_per_s": round((cur["quarantined"][n] - prev["quarantined"][n]) / dt, 1)}
                        for n in self.job.stream_names},
            "watermark": wm, "watermark_lag_s": lag, "log_batches": log.get("batches", 0),
            "log_ended": bool(log.get("ended")),
            "results": cur["results"], "results_per_s": round((cur["results"] - prev["results"]) / dt, 1),
            "commits": (rec or {}).get("commits", 0), "input_offset": (rec or {}).get("input_offset"),
            "restarts": restarts,
            "landing_latency_ms": self._latency(),
        }

    def _latency(self):
        """Landing to commit, and its parts, of the results committed since the last look."""
        from .storage.latency import percentiles
        try:
            return percentiles(self.clock.new_results(self.job.output))
        except OSError:
            return None


def line(st):
    per = ", ".join(f"{n} +{v['staged_per_s']:,.0f}/s" + (f" ({v['quarantined_per_s']:,.0f}/s quarantined)"
                                                          if v["quarantined_per_s"] else "")
                    for n, v in st["streams"].items())
    lag = "-" if st["watermark_lag_s"] is None else f"{st['watermark_lag_s']:.1f} s"
    r, lat = st["restarts"], st.get("landing_latency_ms")
    t = "" if not lat else f"; landing to commit p50 {lat['total']['p50']:,.0f} ms, p99 {lat['total']['p99']:,.0f} ms"
    return (f"live: {per}; watermark lag {lag}; results {st['results']:,} (+{st['results_per_s']:,.0f}/s) in "
            f"{st['commits']} commit(s){t}; restarts: stager {r['stager']}, run {r['run']}")


def _read_json(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Exporter:
    """The status figures as Prometheus gauges on `port` (prometheus_client's own registry and
    HTTP server, in a thread), updated at each status."""

    def __init__(self, job, port, addr="0.0.0.0"):
        from prometheus_client import CollectorRegistry, Gauge, start_http_server
        self.reg = CollectorRegistry()
        g = lambda name, doc, labels=(): Gauge(f"mpi_join_live_{name}", doc, labels, registry=self.reg)  # noqa: E731
        self.staged = g("staged_rows", "Rows staged into the log", ["stream"])
        self.quarantined = g("quarantined_rows", "Rows quarantined (late or unparseable)", ["stream"])
        self.staged_rate = g("staged_rows_per_second", "Rows staged per second over the last interval", ["stream"])
        self.lag = g("watermark_lag_seconds", "Wall time less the log's watermark")
        self.results = g("results", "Results committed")
        self.results_rate = g("results_per_second", "Results committed per second over the last interval")
        self.latency = g("landing_to_commit_seconds", "Landing to commit over the last interval", ["quantile"])
        self.restarts = g("restarts", "Restarts of the stager and of the run", ["child"])
        self.server = start_http_server(port, addr=addr, registry=self.reg)

    def update(self, st):
        for n, v in st["streams"].items():
            self.staged.labels(n).set(v["staged"])
            self.quarantined.labels(n).set(v["quarantined"])
            self.staged_rate.labels(n).set(v["staged_per_s"])
        if st["watermark_lag_s"] is not None:
            self.lag.set(st["watermark_lag_s"])
        self.results.set(st["results"])
        self.results_rate.set(st["results_per_s"])
        lat = st.get("landing_latency_ms")
        if lat:
            self.latency.labels("0.5").set(lat["total"]["p50"] / 1e3)
            self.latency.labels("0.99").set(lat["total"]["p99"] / 1e3)
        for k, v in st["restarts"].items():
            self.restarts.labels(k).set(v)


def decide(which, rc, sig, drain, log_ended):
    """What live does when its child `which` ends with `rc` (`sig`: the signal live was given, or
    None; `drain`: whether it drains; `log_ended`: a stager that exited 0 with no signal ended
    the log). Returns (lines to say, action, the exit code live now ends with or None), the
    action one of "none", "restart" (live gives up with 1 when the restart policy refuses),
    "give up" (both children stopped, the log left open) and "stop now" (the other child too,
    without a drain). A pure function: tests/test_live_supervisor.py gives it the events."""
    if rc == 0 and which in ("run", "publisher"):
        return [], "none", 0 if which == "run" else None  # the publisher's end: the run's final commit is out
    if rc == 0:                                           # the stager
        if sig is None and not log_ended:                 # stopped by a signal not live's (--no-drain)
            return (["live: the stager stopped (exit 0) with the log open, not asked to by live (a signal to it "
                     "alone?)"], "restart", None)
        if sig is None:
            return (["live: the stager ended the log, not asked to by live (a signal to it alone?); the run joins "
                     "to its end"], "none", None)
        return [], "none", None
    if sig is not None and not drain:                     # (a drain restarts a child that died: the log
        return [], "none", 128 + sig if which == "run" else None   # must end and the run commit the rest)
    if sig is not None and rc == 2:
        # a signal to every process of the job at once (a cgroup stop) also reached the stager's
        # JVM or the run's ranks: what is committed stands, the log stays open
        return ([f"live: the {which} stopped too (exit {rc}, above) while live was stopping; the other is stopped "
                 f"at once"], "stop now", 128 + sig)
    if rc == 2:                                           # a one-line refusal: it would only come again
        return [f"live: error: the {which} stopped with a one-line error (exit 2, above); it is not restarted"], \
            "give up", 2
    return [], "restart", None


class Supervisor:
    """Starts, watches, restarts and stops the stager and the run of one live job, and its
    publisher (`mpi-join publish`) when the job has [output] kafka."""

    def __init__(self, job, nprocs, say, drain=True, trigger="500ms", batch_mb=64, status_every=STATUS_EVERY_S,
                 env=None, exporter=None, spark_start="now"):
        self.job, self.n, self.say, self.drain = job, nprocs, say, drain
        self.spark_start = spark_start
        self.trigger, self.batch_mb, self.every, self.env = trigger, batch_mb, status_every, env
        self.ckpt = job.checkpoint.dir if job.checkpoint else os.path.join(job.output, IMPLICIT)
        self.roles = ("stager", "run") + (("publisher",) if job.kafka_out is not None else ())
        self.restarts = {r: Restarts(job.restart) for r in self.roles}
        self.children, self.signal, self.status, self.ended = {}, None, Status(job), set()
        self.exporter = exporter

    # -- children ------------------------------------------------------------------------
    def _resumable(self):
        """Has a followed run of this output stopped without finishing? Then it resumes."""
        out = self.job.output
        return (not os.path.exists(os.path.join(out, "_SUCCESS"))
                and (os.path.isdir(os.path.join(out, "commits")) or os.path.isdir(self.ckpt)))

    def _args(self, which):
        """The child's command line. A stager started during a drain (the first one died) stages
        what has landed and ends the log (`--until end`), as the SIGTERM it missed would have."""
        if which == "stager":
            return _cmd("stage", "--follow", "--trigger", self.trigger, "--batch-mb", str(self.batch_mb),
                        "--spark-start", self.spark_start,
                        *([] if self.drain else ["--no-drain"]),
                        *(["--until", "end"] if self.signal is not None and self.drain else []), self.job.path)
        if which == "publisher":              # exactly once across its restarts (storage/kafka_sink.py)
            return _cmd("publish", self.job.path)
        return _cmd("run", "-n", str(self.n), "--follow",
                    *(["--resume", self.ckpt] if self._resumable() else []), self.job.path)

    def _start(self, which):
        # each in a session of its own, and ended if this process is SIGKILLed (parent_death.py)
        sig = signal.SIGKILL if which == "stager" else signal.SIGTERM
        self.children[which] = subprocess.Popen(self._args(which), start_new_session=True,
                                                env=child_env(self.env, sig))

    def _stop(self, which, sig):
        p = self.children.get(which)
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass

    # -- the loop ------------------------------------------------------------------------
    def run(self):
        """Supervise until the log has ended and the run has finished, or a stop. Returns the
        exit code."""
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._loop()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            for which in self.roles:
                self._stop(which, signal.SIGKILL)
                if which in self.children:
                    self.children[which].wait()

    def _on_signal(self, signum, frame):
        if self.signal is not None:           # a second one: stop at once
            self.drain = False
        self.signal = signum

    def _loop(self):
        for which in self.roles:
            self._start(which)
        next_status, asked = time.monotonic() + self.every, None
        code = None
        while True:
            if self.signal is not None and asked != (self.signal, self.drain):
                asked = (self.signal, self.drain)
                how = "draining: staging what has landed, ending the log" if self.drain else "stopping at once"
                self.say(f"live: {signal.Signals(self.signal).name}: {how}")
                self._stop("stager", signal.SIGTERM)  # the stager drains and ends the log, or leaves it open
                if not self.drain:
                    self._stop("run", signal.SIGTERM)
                    self._stop("publisher", signal.SIGTERM)
            for which in self.roles:
                p = self.children[which]
                rc = p.poll()
                if rc is None or p in self.ended:         # (the object, not its id: a freed one's id is reused)
                    continue
                self.ended.add(p)
                ended_log = which == "stager" and rc == 0 and self.signal is None and self._log_ended()
                lines, action, now = decide(which, rc, self.signal, self.drain, ended_log)
                for ln in lines:
                    self.say(ln)
                code = now if now is not None else code
                if action == "restart" and not self._restart(which, rc):
                    return self._give_up(1)
                if action == "give up":
                    return self._give_up(now)
                if action == "stop now":
                    self.drain, asked = False, None
            if code is not None and all(c.poll() is not None for c in self.children.values()):
                self._write_status()
                if code == 0:
                    self.say("live: the log has ended and every result is committed"
                             + (f" and on Kafka topic {self.job.kafka_out.topic!r}" if self.job.kafka_out else ""))
                else:
                    self.say("live: stopped; the log stays open and the committed results stand; `mpi-join live` "
                             "continues both")
                return code
            if self.signal is not None and not self.drain and all(c.poll() is not None
                                                                   for c in self.children.values()):
                self._write_status()
                self.say("live: stopped; the log stays open and the committed results stand; `mpi-join live` "
                         "continues both")
                return 128 + self.signal
            if time.monotonic() >= next_status:
                self.say(line(self._write_status()))
                next_status = time.monotonic() + self.every
            time.sleep(0.2)

    def _restart(self, which, rc):
        if not self.restarts[which].allow(time.monotonic()):
            self.say(f"live: error: the {which} exited with code {rc} and is not restarted: "
                     f"{self.restarts[which].why_not()}")
            return False
        delay = self.job.restart.delay_ns / 1e9
        self.say(f"live: the {which} exited with code {rc}; restarting it in {delay:g} s (restart "
                 f"{self.restarts[which].count} of {self.job.restart.attempts})"
                 + (" from its newest checkpoint" if which == "run" else
                    ", going on after the last commit on the topic" if which == "publisher" else ", continuing the log"))
        end = time.monotonic() + delay
        while time.monotonic() < end and (self.signal is None or self.drain):
            time.sleep(0.05)
        if self.signal is None or self.drain:         # a drain needs both to finish the log
            self._start(which)
        return True

    def _give_up(self, code):
        """Stop both children at once, the log left open (SIGUSR1 stops a stager so), so that
        `live` again continues both; wait, say the figures."""
        p = self.children.get("stager")
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGUSR1)             # the stager alone: not to its JVM
        self._stop("run", signal.SIGTERM)
        self._stop("publisher", signal.SIGTERM)
        self._wait_all()
        self._write_status()
        self.say("live: the log stays open and the committed results stand; `mpi-join live` continues both")
        return code

    def _log_ended(self):
        man = _read_json(os.path.join(self.job.staged, MANIFEST)) or {}
        return bool((man.get("log") or {}).get("ended"))

    def _wait_all(self):
        for p in self.children.values():
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)

    def _write_status(self):
        st = self.status.sample({k: r.count for k, r in self.restarts.items()})
        d = os.path.join(self.job.output, "metrics")
        if os.path.isdir(d):
            write_json(os.path.join(d, "live.json"), st, tmp=os.path.join(d, ".live.json.tmp"))
        if self.exporter is not None:
            self.exporter.update(st)
        return st


def expected_paths(job):
    """One line per stream: which reader its landing files are expected to take (the stager's
    own process by Arrow, or Spark, whose JVM takes seconds to start: storage/fast_csv.py)."""
    from .storage.fast_csv import expected_reader
    return [f"live: stream {s.name}: {expected_reader(s)}" for s in job.streams]


def precheck(job, nprocs=None):
    """What `live` refuses before any child or JVM starts: a job without live input, what a live
    log cannot hold, a landing directory that does not exist, a staged, output or checkpoint
    directory another process holds. Returns `live`'s own lock (beside the output directory),
    held until it ends, so that a second `live` of the same output is refused at once."""
    from .storage.paths import DirLock, LOCK
    from .storage.spark.follow import landing_dir
    from .storage.staged_log import refuse_live
    for s in job.streams:
        if s.raw is None:
            raise JobError(f"{job.path}: streams.{s.name}.raw: required to stage (path, format, time, time_unit)")
        landing_dir(s)
    refuse_live(job)
    if nprocs is not None:
        from .strategies import check_runnable
        check_runnable(job, nprocs)
    out = os.path.abspath(job.output)
    lock = DirLock(os.path.dirname(out), "live", name=f".{os.path.basename(out)}.mpi-join-live.lock",
                   subject=out).acquire()
    try:
        ckpt = job.checkpoint.dir if job.checkpoint else os.path.join(out, IMPLICIT)
        for d, what in ((job.staged, "the staged directory"), (out, "output.dir"), (ckpt, "the checkpoints")):
            if os.path.exists(os.path.join(d, LOCK)):
                holder, stale = DirLock(d, what).holder()
                if stale is None:
                    raise JobError(f"{what}: {d} is in use by another process (pid {(holder or {}).get('pid', '?')}); "
                                   f"stop it first, or give this job other directories")
    except JobError:
        lock.release()
        raise
    return lock
