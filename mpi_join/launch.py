"""`mpi-join run -n N`: launch the ranks with mpiexec and, when a rank is killed outright (SIGKILL,
the OOM killer), name it and its host. MPICH's Hydra reports per-rank exit codes with
`-print-all-exitcodes` ("[mpiexec@host] Exit codes: [h1] 0,0,9 [h2] 0"); ranks are listed per host
in placement order. Everything the ranks print passes through unchanged."""
import os
import shutil
import re
import signal
import subprocess
import sys
import threading

from . import gate
from .errors import JobError

_CODES = re.compile(r"Exit codes: (.*)$")
_HOST = re.compile(r"\[([^\]]+)\]\s*([-\d,]+)")
# a rank's failure that is MPI's own error in a transfer (mpi4py's MPI.Exception): what a rank
# sees when the peer it reads from was killed outright, which the exit codes then name
_PEER_GONE = re.compile(r" failed: Exception: .*MPI error")


def mpiexec_path():
    """The mpiexec next to this Python (the mpich wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def mpiexec_cmd(n, args):
    exe = mpiexec_path()
    if not exe:
        raise JobError("mpiexec not found: install the mpich wheel (pip install mpich) or put mpiexec on PATH")
    return [exe, "-n", str(n), sys.executable, "-m", "mpi_join", *args]


def is_hydra(mpiexec):
    return os.path.exists(os.path.join(os.path.dirname(mpiexec), "hydra_pmi_proxy"))


def exit_codes(line):
    """[(rank, host, code)] from Hydra's "Exit codes:" line, or [] if it is not one."""
    m = _CODES.search(line)
    if not m:
        return []
    out, rank = [], 0
    for host, codes in _HOST.findall(m.group(1)):
        for c in codes.split(","):
            if c.strip().lstrip("-").isdigit():
                out.append((rank, host, int(c)))
                rank += 1
    return out


def killed_line(codes):
    """One line naming the ranks that ended by a signal, or None. When one rank is killed, Hydra
    may kill the others with the same signal while cleaning up, so a single rank is named only
    when the exit codes single it out; otherwise all of them are listed."""
    hit = []
    for rank, host, code in codes:
        sig = code - 128 if code > 128 else code
        if code not in (0, 1, 2, 130) and 0 < sig < 65:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            hit.append((rank, host, name))
    if not hit:
        return None
    if len(hit) == 1:
        rank, host, name = hit[0]
        who = f"rank {rank} on host {host} was killed ({name}; the OOM killer or a kill -9 do this)"
    else:
        who = ("ranks " + ", ".join(f"{r} on {h}" for r, h, _ in hit) + f" ended by {hit[0][2]}: one was "
               "killed outright (the OOM killer or a kill -9), and mpiexec killed the others")
    return f"mpi-join: error: {who}; the job was aborted; with checkpoints, `--resume` continues it"


def run(cmd, stopped_line=None):
    """Run the mpiexec command line `cmd`; returns its exit code (Launch.wait)."""
    return Launch(cmd).wait(stopped_line)


class Launch:
    """mpiexec and its ranks, started now, their output passed through as they print it.

    `gated`: the ranks wait at the gate (gate.py) until `go`; `stop` lets them leave instead.
    mpiexec runs in a session of its own: a Ctrl-C at the terminal reaches this process alone,
    which forwards it once while it waits (Hydra takes a second one for "force abort"), as it
    forwards a SIGINT or SIGTERM sent to its pid alone; mpiexec passes it on to every rank,
    which stop cleanly. Before `wait`, a signal is this process's own to handle (it stops the
    launch)."""

    def __init__(self, cmd, gated=False):
        self.hydra = is_hydra(cmd[0])
        if self.hydra:
            cmd = [cmd[0], "-print-all-exitcodes", *cmd[1:]]
        env = dict(os.environ, **{gate.ENV: "stdin"}) if gated else None
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if gated else None, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
                                     env=env)
        self._gate = self.proc.stdin            # rank 0's standard input (gated), until go or stop
        self.seen = {"codes": [], "said": False, "signal": None}
        self.threads = [threading.Thread(target=self._pump, args=(self.proc.stdout, sys.stdout), daemon=True),
                        threading.Thread(target=self._pump, args=(self.proc.stderr, sys.stderr), daemon=True)]
        for t in self.threads:
            t.start()

    def go(self):
        """Open the gate: rank 0 reads the job and the input now."""
        self._close(gate.GO + "\n")

    def stop(self, timeout=30.0):
        """Close the gate without "go": every rank leaves quietly (exit code 2); returns the exit
        code. A launch still running after `timeout` seconds is killed."""
        self._close("")
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()

    def _close(self, line):
        stdin, self._gate = self._gate, None
        if stdin is None:
            return
        try:                    # a launch that ended already (a rank failed to start) says so in `wait`
            if line:
                stdin.write(line)
            stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def _pump(self, src, dst):
        seen = self.seen
        for line in src:        # Hydra prints its banner and the exit codes on stdout
            codes = exit_codes(line) if self.hydra else []
            if codes:
                seen["codes"] = codes
                continue            # replaced by one line of ours when it matters
            if self.hydra and line.startswith("[mpiexec@") and "Ctrl-C" in line:
                continue            # Hydra's notes on forwarding the signal: the ranks say what happened
            if line.startswith("mpi-join: error:") or (" failed: " in line and not _PEER_GONE.search(line)):
                seen["said"] = True     # a rank's MPI error in a transfer with a killed peer is not the cause
            if line.startswith(("mpi-join: interrupted by the user", "mpi-join: stopped by SIG")):
                seen["stopped_said"] = True
            dst.write(line)
            dst.flush()

    def wait(self, stopped_line=None):
        """Wait for the launch to end; returns its exit code. `stopped_line(signum)`: the line
        rank 0 says when a signal stops the run, said here instead when rank 0's did not come
        through (under load, mpiexec may tear rank 0 down, or stop forwarding, before it arrives)."""
        proc, seen = self.proc, self.seen

        def forward(signum, _frame):
            if seen["signal"] is None:
                seen["signal"] = signum
                proc.send_signal(signum)

        old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            rc = proc.wait()
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
        for t in self.threads:
            t.join(60)               # the pipes end with the last rank: what it said is all forwarded
        if seen["signal"] is not None and rc != 0:      # stopped (a run that had ended keeps its 0)
            if not seen.get("stopped_said") and not seen["said"] and stopped_line is not None:
                try:
                    sys.stderr.write(f"\n{stopped_line(seen['signal'])}\n")
                except Exception as e:  # noqa: BLE001 - the line is a courtesy; the exit code says it
                    sys.stderr.write(f"\nmpi-join: stopped by {signal.Signals(seen['signal']).name} ({e})\n")
                sys.stderr.flush()
            return 128 + int(seen["signal"])
        if rc not in (0, 2, 130, 143) and not seen["said"]:
            line = killed_line(seen["codes"])
            if line:
                sys.stderr.write(line + "\n")
        return rc
