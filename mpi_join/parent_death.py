"""A child of `mpi-join live` ends with it. The supervisor starts its stager and its run each in
a session of their own (a Ctrl-C at the terminal reaches the supervisor alone, which decides how
to stop them), so nothing would stop them if the supervisor itself were SIGKILLed (the OOM
killer, `kill -9`): they would go on holding their directories' locks, and the next `live` would
be refused. The supervisor names itself and a signal in the child's environment; the child asks
Linux to send it that signal when its parent dies (prctl PR_SET_PDEATHSIG), and sends it to itself
at once if the parent is gone already. The variable is taken out of the environment, so that the
child's own children (mpiexec, the ranks, Spark's JVM) never see it.

The signal is the one that stops each child the way a later `live` can continue from: SIGTERM
stops the run at its last commit (it passes it on to mpiexec and every rank); the stager gets
SIGKILL, which leaves the log open (a SIGTERM would drain it and end the log), and its JVM ends
when its pipe to the stager closes."""
import ctypes
import os
import sys

ENV = "MPI_JOIN_PARENT_DEATH"
_PR_SET_PDEATHSIG = 1


def child_env(env, sig):
    """`env` for a child that should get signal `sig` when this process dies."""
    return {**(env if env is not None else os.environ), ENV: f"{os.getpid()}:{int(sig)}"}


def arm():
    """In the child, first thing: ask for the parent's death signal named in the environment."""
    value = os.environ.pop(ENV, None)
    if not value:
        return
    try:
        parent, sig = (int(x) for x in value.split(":"))
    except ValueError:
        return                                  # not ours to judge: the variable is internal
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:                  # it died before the request was made
        os.kill(os.getpid(), sig)
