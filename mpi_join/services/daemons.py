"""Real HDFS, YARN and Kafka on this machine for tests and a first try (`mpi-join dev-services`):
each daemon its own JVM (NameNode, DataNode, ResourceManager, NodeManager, a KRaft Kafka
broker) from the jars maven.py fetched, on 127.0.0.1 at free ports chosen at the first start
and kept (ports.json), with its data, configuration and log under one folder. A start waits
until each service answers (the NameNode out of safe mode with a live DataNode, a NodeManager
registered with the ResourceManager, the broker started) and says where each listens; a stop
ends exactly the processes its start recorded (services.json: pid and start time, so that a
reused pid is never signalled)."""
import base64
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid

from ..errors import JobError
from ..storage.paths import _proc_start, inside
from . import maven, site

# daemon: (jar bundle, main class, heap MiB)
DAEMONS = {
    "namenode": ("hadoop", "org.apache.hadoop.hdfs.server.namenode.NameNode", 512),
    "datanode": ("hadoop", "org.apache.hadoop.hdfs.server.datanode.DataNode", 384),
    "resourcemanager": ("hadoop", "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager", 512),
    "nodemanager": ("hadoop", "org.apache.hadoop.yarn.server.nodemanager.NodeManager", 512),
    "kafka": ("kafka", "kafka.Kafka", 512),
}
# a service and its daemons; YARN keeps Spark's staging files on HDFS, so it starts HDFS too
SERVICES = {"hdfs": ("namenode", "datanode"), "yarn": ("namenode", "datanode", "resourcemanager", "nodemanager"),
            "kafka": ("kafka",)}
READY_S = 120


def default_root():
    """$MPI_JOIN_SERVICES_DIR, else ~/.local/state/mpi-join/dev-services."""
    return os.environ.get("MPI_JOIN_SERVICES_DIR") or os.path.join(os.path.expanduser("~"), ".local", "state",
                                                                    "mpi-join", "dev-services")


def daemons_of(services):
    """The daemons of the named services, in start order; a name not a service is refused."""
    out = []
    for s in services:
        if s not in SERVICES:
            raise JobError(f"--only: unknown service {s!r} (choose from {', '.join(SERVICES)})")
        out += [d for d in SERVICES[s] if d not in out]
    return sorted(out, key=list(DAEMONS).index)


class DevServices:
    """The services under one folder: start, stop, kill (for fault tests), status, endpoints."""

    def __init__(self, root=None, progress=print):
        self.root = os.path.realpath(root or default_root())
        self.progress = progress
        self.conf = os.path.join(self.root, "conf")
        self._children = {}

    def _path(self, *parts):
        return inside(self.root, os.path.join(self.root, *parts))

    def _lock(self):
        os.makedirs(self.root, exist_ok=True)
        f = open(self._path(".lock"), "w")
        fcntl.flock(f, fcntl.LOCK_EX)
        return f

    def _state(self):
        try:
            with open(self._path("services.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def _save(self, state):
        tmp = self._path(".services.json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
        os.replace(tmp, self._path("services.json"))

    def ports(self):
        """The ports of every daemon: chosen free at the first start, then kept."""
        os.makedirs(self.root, exist_ok=True)
        return _kept_ports(self._path("ports.json"))

    def running(self, name):
        """The pid of daemon `name` when the process its start recorded is still that process."""
        rec = self._state().get(name)
        if rec and _proc_start(rec["pid"]) == rec["start"]:
            return rec["pid"]
        return None

    def start(self, services=("hdfs", "yarn", "kafka"), memory_mb=4096, vcores=4):
        """Start the daemons of `services` not running yet; returns the endpoints once all answer."""
        if shutil.which("java") is None:
            raise JobError("java not found: the development services are Java daemons (install a JDK 17)")
        with self._lock():
            p = self.ports()
            site.write_hadoop(self.conf, self.root, p, memory_mb, vcores)
            os.makedirs(self._path("kafka"), exist_ok=True)
            site.write_kafka(self._path("kafka", "server.properties"), self.root, p)
            t0 = time.monotonic()
            todo = [d for d in daemons_of(services) if self.running(d) is None]
            try:
                for d in todo:
                    self._launch(d, p)
                for d in daemons_of(services):
                    self._wait_ready(d, p)
            except BaseException:          # what this start launched goes with it: no orphan daemons
                self._end(todo)
                raise
            if todo:
                self.progress(f"dev-services: started {', '.join(todo)} in {time.monotonic() - t0:.1f} s")
        return self.endpoints()

    def _cmd(self, name, *args, heap=None):
        bundle, main, mb = DAEMONS[name] if name in DAEMONS else name
        jars = maven.classpath(bundle, self.progress)
        cp = ([self.conf] if bundle == "hadoop" else []) + jars
        return ["java", f"-Xmx{heap or mb}m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
                "-cp", os.pathsep.join(cp), main, *args]

    def _env(self):
        java = os.path.realpath(shutil.which("java"))
        return dict(os.environ, JAVA_HOME=os.path.dirname(os.path.dirname(java)), HADOOP_CONF_DIR=self.conf)

    def _launch(self, name, p):
        os.makedirs(self._path("logs"), exist_ok=True)
        log = self._path("logs", f"{name}.log")
        if name == "namenode" and not os.path.exists(self._path("hdfs", "name", "current", "VERSION")):
            self._once(self._cmd("namenode", "-format", "-nonInteractive", heap=256), "format the NameNode", log)
        if name == "kafka" and not os.path.exists(self._path("kafka", "data", "meta.properties")):
            cluster = "-"
            while cluster[0] in "-_":      # the tool's parser takes a leading "-" for an option
                cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            self._once(self._cmd(("kafka", "kafka.tools.StorageTool", 256), "format", "--standalone", "-t", cluster,
                                 "-c", self._path("kafka", "server.properties")), "format Kafka's storage", log)
        args = [self._path("kafka", "server.properties")] if name == "kafka" else []
        at = os.path.getsize(log) if os.path.exists(log) else 0
        with open(log, "ab") as out:
            proc = subprocess.Popen(self._cmd(name, *args), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self._env(), start_new_session=True,
                                    cwd=self.root)
        self._children[name] = proc
        st = self._state()
        st[name] = {"pid": proc.pid, "start": _proc_start(proc.pid), "log": log, "log_at": at, "started": time.time()}
        self._save(st)

    def _once(self, cmd, what, log):
        with open(log, "ab") as out:
            r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=self._env(), cwd=self.root)
        if r.returncode != 0:
            raise JobError(f"dev-services: could not {what} (exit {r.returncode}): see {log}")

    def _wait_ready(self, name, p):
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.running(name) is None:
                raise JobError(f"dev-services: {name} exited while starting: {self._why(name)}")
            if _ready(name, p, self._state()[name]):
                return
            time.sleep(0.5)
        raise JobError(f"dev-services: {name} did not answer within {READY_S} s: {self._why(name)}")

    def _why(self, name):
        return _last_error(self._path("logs", f"{name}.log"))

    def kill(self, name, sig=signal.SIGKILL):
        """Signal one daemon (a fault test's kill -9); it stays recorded, so `start` starts it again."""
        pid = self.running(name)
        if pid is not None:
            os.kill(pid, sig)
            self._reap(name, pid, 30)

    def stop(self, services=None):
        """Stop the daemons of `services` (all when None) this folder's starts recorded: SIGTERM,
        then SIGKILL after 20 s; returns their names."""
        names = list(DAEMONS) if services is None else daemons_of(services)
        with self._lock():
            return self._end(names)

    def _end(self, names):
        """Stop the daemons `names` (the lock held); returns those that were running."""
        st = self._state()
        pids = {n: self.running(n) for n in reversed(names)}
        pids = {n: pid for n, pid in pids.items() if pid is not None}
        for pid in pids.values():          # all at once: each JVM takes its seconds to shut down
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name, pid in pids.items():
            if not self._reap(name, pid, max(0.0, deadline - time.monotonic())):
                os.killpg(pid, signal.SIGKILL)
                self._reap(name, pid, 10)
        for name in names:
            st.pop(name, None)
        self._save(st)
        return list(pids)

    def _reap(self, name, pid, seconds):
        """Wait until `pid` is gone (reaping it where this process started it); False on time-out."""
        start = self._state().get(name, {}).get("start")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            child = self._children.get(name)
            if child is not None and child.pid == pid:
                child.poll()
            if _proc_start(pid) != start or _proc_start(pid) is None:
                return True
            time.sleep(0.2)
        return False

    def status(self):
        """[(daemon, pid or None, RSS MiB or None, log)] of every daemon."""
        out = []
        for name in DAEMONS:
            pid = self.running(name)
            out.append((name, pid, _rss_mib(pid) if pid else None, self._path("logs", f"{name}.log")))
        return out

    def endpoints(self):
        """Where each service listens, and the configuration folder Spark and Hadoop's tools read."""
        p = self.ports()
        return {"hdfs": f"hdfs://127.0.0.1:{p['nn_rpc']}", "hdfs_web": f"http://127.0.0.1:{p['nn_http']}",
                "yarn_web": f"http://127.0.0.1:{p['rm_web']}", "yarn_rm": f"127.0.0.1:{p['rm_rpc']}",
                "kafka": f"127.0.0.1:{p['kafka']}", "hadoop_conf_dir": self.conf}

    def hadoop(self, tool, *args, user=None, check=True):
        """Run one of Hadoop's command-line tools (`dfs`: FsShell, `dfsadmin`: DFSAdmin) against
        these services; returns the CompletedProcess (a failure raises JobError with `check`)."""
        main = {"dfs": "org.apache.hadoop.fs.FsShell", "dfsadmin": "org.apache.hadoop.hdfs.tools.DFSAdmin"}[tool]
        env = self._env()
        if user:
            env["HADOOP_USER_NAME"] = user
        cmd = self._cmd(("hadoop", main, 256), *args)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if check and r.returncode != 0:
            err = [ln for ln in r.stderr.splitlines() if ln.strip() and "WARN" not in ln and "SLF4J" not in ln]
            raise JobError(f"hdfs {tool} {' '.join(args)}: {err[-1] if err else 'exit ' + str(r.returncode)}")
        return r


def _kept_ports(path):
    """The ports recorded in `path`, or free ones chosen now (all bound at once, so distinct) and recorded."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    names = [n for d in DAEMONS for n in site.PORTS[d]]
    socks = []
    for _ in names:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = {n: s.getsockname()[1] for n, s in zip(names, socks)}
    for s in socks:
        s.close()
    with open(path, "w") as f:
        json.dump(ports, f, indent=1)
    return ports


def _last_error(log):
    """The last error line of a daemon's log, and where the log is."""
    try:
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()[-400:]
    except OSError:
        lines = []
    bad = [ln.strip() for ln in lines if "Exception" in ln or " ERROR " in ln or "FATAL" in ln]
    return f"{bad[-1][:300] if bad else 'no error in its log'} (log: {log})"


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def _ready(name, p, rec):
    """Whether daemon `name` (its services.json record `rec`) answers as a ready one does."""
    if name == "namenode":
        j = _get(f"http://127.0.0.1:{p['nn_http']}/jmx?qry=Hadoop:service=NameNode,name=NameNodeStatus")
        return bool(j and j.get("beans") and j["beans"][0].get("State") == "active")
    if name == "datanode":       # this DataNode process up, and the NameNode out of safe mode with it
        dn = _get(f"http://127.0.0.1:{p['dn_http']}/jmx?qry=Hadoop:service=DataNode,name=DataNodeInfo")
        j = _get(f"http://127.0.0.1:{p['nn_http']}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState")
        info = _get(f"http://127.0.0.1:{p['nn_http']}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo")
        return bool(dn and dn.get("beans") and "RUNNING" in str(dn["beans"][0].get("BPServiceActorInfo"))
                    and j and j.get("beans") and j["beans"][0].get("NumLiveDataNodes", 0) >= 1
                    and info and info.get("beans") and not info["beans"][0].get("Safemode"))
    if name == "resourcemanager":
        j = _get(f"http://127.0.0.1:{p['rm_web']}/ws/v1/cluster/info")
        return bool(j and j.get("clusterInfo", {}).get("state") == "STARTED")
    if name == "nodemanager":
        j = _get(f"http://127.0.0.1:{p['rm_web']}/ws/v1/cluster/metrics")
        return bool(j and j.get("clusterMetrics", {}).get("activeNodes", 0) >= 1)
    try:                         # the broker says so in its log, after this start's offset
        with open(rec["log"], "rb") as f:
            f.seek(rec.get("log_at", 0))
            return b"Kafka Server started" in f.read()
    except OSError:
        return False


def _rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
