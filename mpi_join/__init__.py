"""mpi-join: sliding-window stream joins across MPI ranks (README.md).

numpy's OpenBLAS starts a thread per core when numpy is imported, and each spins for about 0.1 s
of CPU before it sleeps, in every process: on two cores, the pipeline's own process and its three
ranks lost about 0.35 CPU-seconds to it (perf, on `bench door`'s job). mpi-join runs no BLAS work
worth a second thread, so it asks for one, unless the environment says otherwise; set before
anything imports numpy, and inherited by the ranks mpiexec starts."""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
