"""The data pipeline on Spark: staging raw input into the staged layout, collecting results.

The same code runs from `mpi-join stage` / `mpi-join collect` and from `spark-submit jobs/*.py`."""
