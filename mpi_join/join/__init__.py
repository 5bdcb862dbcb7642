"""The join itself, with no MPI in it: windows (window.py), the predicate (predicate.py), the numba
kernels (kernels.py) and the local range joins over them (range_join.py), the single-core oracle
every strategy is checked against (oracle.py), and online aggregates (aggregate.py)."""
