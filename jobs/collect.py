"""spark-submit entry for collection: spark-submit jobs/collect.py RUN_DIR --job JOB.toml --out URI

Same as `mpi-join collect`, with the Spark master and configuration taken from spark-submit."""
import argparse
import sys

from mpi_join.config import load_job
from mpi_join.errors import JobError
from mpi_join.storage.spark.collect import collect, collecting
from mpi_join.storage.spark.session import spark_session

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("--job", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--with-payload", action="store_true")
    ap.add_argument("--partial", action="store_true", help="collect a run without _SUCCESS, marked partial")
    ap.add_argument("--overwrite", action="store_true", help="replace a non-empty --out collect did not write")
    a = ap.parse_args()
    try:
        job = load_job(a.job)
        with collecting(job, a.run_dir, a.out, a.partial, a.overwrite) as parts:
            s = collect(spark_session(None, "mpi-join collect"), job, a.run_dir, a.out, a.with_payload,
                        partial=a.partial, overwrite=a.overwrite, parts=parts)
    except JobError as e:
        print(f"mpi-join: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"collected {s['results']:,} results into {a.out}")
