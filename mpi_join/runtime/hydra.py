"""Leaving a launch by mpiexec (MPICH's Hydra) early without being taken for a crash.

Hydra's proxy treats a rank whose PMI connection closes before PMI finalize as failed: it sends
SIGKILL to the launch's other ranks, and a rank it reaps while their output is still open is
reported with that signal, so mpiexec exits 9 although every rank meant to leave with 130 (a
Ctrl-C that stops every rank at once made that a race: about one run in six on a loaded
machine). A rank that ends on a signal of its own (ranks._interrupted) therefore first says
"finalize" on its PMI connection, as MPI_Finalize would, without MPI_Finalize's wait for the
other ranks: the proxy then takes its exit for an orderly one and leaves the others be.

Only under Hydra, whose proxy is the rank's parent and speaks PMI-1 on the descriptor named in
PMI_FD (srun's PMI-2 under Slurm speaks another wire format there, and a run in process has no
PMI at all); anywhere else this does nothing."""
import os
import select

PROXY = "hydra_pmi_proxy"
REPLY_TIMEOUT_S = 1.0


def under_hydra():
    """The PMI descriptor Hydra's proxy gave this rank, or None when not launched by Hydra."""
    fd = os.environ.get("PMI_FD", "")
    if not fd.isdigit():
        return None
    try:
        with open(f"/proc/{os.getppid()}/comm") as f:
            parent = f.read().strip()
    except OSError:
        return None
    return int(fd) if PROXY.startswith(parent) and parent else None   # comm is cut at 15 characters


def finalize_pmi():
    """Tell Hydra's proxy this rank is done with PMI, so that its exit ends nobody else; True once
    the proxy acknowledged it. Waits at most REPLY_TIMEOUT_S for the answer and never raises:
    it runs in a signal handler on the way out."""
    fd = under_hydra()
    if fd is None:
        return False
    try:
        os.write(fd, b"cmd=finalize\n")
        reply = b""
        while not reply.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], REPLY_TIMEOUT_S)
            if not ready:
                return False
            chunk = os.read(fd, 256)
            if not chunk:
                return False
            reply += chunk
        return reply.startswith(b"cmd=finalize_ack")
    except OSError:
        return False
