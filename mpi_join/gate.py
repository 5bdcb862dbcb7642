"""Ranks started before their input is ready, held at a gate (`pipeline`; launch.Launch).

`pipeline` starts mpiexec before it reads the job. Each rank imports what its role runs (a worker
also sets numba up and loads the kernels it guesses its role will run: ranks.warm_ahead), then
rank 0 waits for one line on its standard input, which mpiexec forwards to
rank 0 alone: "go" once the input is staged, and rank 0 loads the job as any run does; the end of
its input instead (staging failed, the pipeline was stopped or died) and every rank leaves quietly
with exit code 2. The other ranks wait for rank 0's Start as in any run (without spinning a core).

Why: what ranks pay before their first tuple (three interpreters' imports, MPI's start, numba's
set-up: about 1.6 CPU-s and 0.9 s of wall time on the door's job, BENCHMARKS.md) is then spent
while the pipeline reads the job and stages, which keeps about one core and a third of two busy;
rank 0 reads nothing
of the job or the staged input before "go", so it sees the input as staged.
"""
import os
import sys

ENV = "MPI_JOIN_GATE"           # set by the launcher ("stdin"); taken out of the ranks' environment
GO = "go"


def gated():
    """Whether this rank was launched held at the gate."""
    return os.environ.pop(ENV, None) == "stdin"


def preload(rank, warm=None):
    """Import what the rank's role runs before the gate opens; `warm()`: a worker's guess at its
    kernels (ranks.warm_ahead). Then what is alive is frozen out of the garbage collector's
    reach, so that the collection after the kernels load (jit.freeze_heap), once the gate is
    open, has only what came since to look at (35-45 ms a worker on the door's job, before)."""
    import gc
    if rank == 0:
        import pyarrow.parquet  # noqa: F401 - the staged input's reader
        from .master import driver, progress  # noqa: F401
        from .storage import checksums, input_warnings, staged  # noqa: F401
    else:
        from .slaves import worker  # noqa: F401
        from .storage import results  # noqa: F401
        from .join import kernels, window  # noqa: F401
        kernels.set_up()
        if warm is not None:
            warm()
    gc.collect()
    gc.freeze()


def opened(stream=None):
    """Rank 0 at the gate: True once the launcher says "go", False when its input ends first."""
    line = (stream or sys.stdin).readline()
    return line.strip() == GO
