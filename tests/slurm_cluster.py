"""A real single-node Slurm cluster on localhost for the tests (Debian's slurmctld, slurmd, munge).

Installs the packages when they are missing (apt-get), writes a slurm.conf into a temporary
directory, starts munged, slurmctld and slurmd, waits for the node, and stops what it started."""
import os
import shutil
import subprocess
import time

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]

CONF = """\
ClusterName=mpijoin
SlurmctldHost=localhost
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
NodeName=localhost CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class Unavailable(Exception):
    pass


def ensure_installed():
    if all(shutil.which(x) for x in ("slurmctld", "slurmd", "sbatch")) and os.path.exists("/usr/sbin/munged"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable("Slurm is not installed and apt-get (as root) is not available to install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if p.returncode != 0:
            raise Unavailable(f"{' '.join(cmd)} failed: {p.stderr.strip()[-300:]}")


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, d):
        self.dir = d
        self.conf = os.path.join(d, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self._munge = None

    def start(self):
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(CONF.format(d=self.dir, cpus=os.cpu_count() or 2, ctld_port=_free_port(), d_port=_free_port()))
        self._start_munge()
        for cmd in (["slurmctld", "-f", self.conf], ["slurmd", "-f", self.conf, "-N", "localhost"]):
            p = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=60)
            if p.returncode != 0:
                raise Unavailable(f"{cmd[0]} did not start: {p.stderr.strip()[-300:]}")
        deadline = time.time() + 60
        while time.time() < deadline:
            p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env)
            if p.returncode == 0 and p.stdout.strip() in ("idle", "mixed", "allocated"):
                return self
            time.sleep(0.5)
        raise Unavailable(f"the node did not come up: {self.log_tail()}")

    def _start_munge(self):
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
            return
        os.makedirs("/run/munge", exist_ok=True)
        subprocess.run(["chown", "munge:munge", "/run/munge"], check=False)
        if not os.path.exists("/etc/munge/munge.key"):
            subprocess.run(["mungekey", "--create"], check=False, capture_output=True)
            subprocess.run(["chown", "munge:munge", "/etc/munge/munge.key"], check=False)
        p = subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], capture_output=True, text=True)
        if p.returncode != 0:
            raise Unavailable(f"munged did not start: {p.stderr.strip()}")
        self._munge = True

    def stop(self):
        for name in ("slurmd", "slurmctld"):
            pid = os.path.join(self.dir, f"{name}.pid")
            try:
                with open(pid) as f:
                    os.kill(int(f.read().strip()), 15)
            except (OSError, ValueError):
                pass
        if self._munge:
            subprocess.run(["pkill", "-x", "munged"], check=False)

    def log_tail(self):
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            try:
                with open(os.path.join(self.dir, name)) as f:
                    out.append(f.read()[-800:])
            except OSError:
                pass
        return "\n".join(out)

    def sbatch(self, args, cwd=None, timeout=900):
        """`sbatch ARGS`, then wait for the job: (its state, sbatch's stderr). Polls each second
        (`sbatch --wait` looks ever less often, up to every 10 s, which a short job pays for)."""
        p = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, env=self.env, cwd=cwd,
                           timeout=60)
        if p.returncode != 0:
            return "NOT SUBMITTED", p.stderr
        job = p.stdout.strip().split(";")[0]
        return self.wait([job], timeout)[job], p.stderr

    def wait(self, job_ids, timeout=600):
        """Wait until the jobs have left the queue; returns {id: state} from scontrol."""
        deadline = time.time() + timeout
        states = {}
        while time.time() < deadline:
            states = {}
            for j in job_ids:
                p = subprocess.run(["scontrol", "show", "job", str(j)], capture_output=True, text=True, env=self.env)
                st = next((w.split("=", 1)[1] for w in p.stdout.split() if w.startswith("JobState=")), "UNKNOWN")
                states[j] = st
            if all(s not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") for s in states.values()):
                return states
            time.sleep(1)
        raise TimeoutError(f"slurm jobs {job_ids} still {states} after {timeout} s")
