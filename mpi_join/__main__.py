"""`python -m mpi_join` (what mpiexec launches on every rank). Python puts the current directory
first on sys.path for -m; it is dropped here, so that a file next to the job (an h5py.py, say)
can never shadow a dependency on any rank (README "Safety")."""
import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from mpi_join.parent_death import arm  # noqa: E402

arm()           # a child of `mpi-join live` ends with it (mpi_join/parent_death.py)

from mpi_join.cli import main  # noqa: E402

main()
