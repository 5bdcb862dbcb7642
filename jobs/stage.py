"""spark-submit entry for staging: spark-submit jobs/stage.py JOB.toml [--out URI]

Same as `mpi-join stage`, with the Spark master and configuration taken from spark-submit."""
import argparse
import sys

from mpi_join.config import load_job
from mpi_join.errors import JobError
from mpi_join.storage.spark.session import spark_session
from mpi_join.storage.spark.stage import stage

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("job")
    ap.add_argument("--out", default=None, help="staged output (default: the job's [input] staged)")
    a = ap.parse_args()
    try:
        job = load_job(a.job)
        man = stage(spark_session(None, "mpi-join stage"), job, a.out)
    except JobError as e:
        print(f"mpi-join: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"staged {man['total']:,} tuples; quarantined {sum(man['quarantined'].values()):,}")
