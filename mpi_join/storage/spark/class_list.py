"""The listing run of `mpi-join warm-spark` (warm.py), in a process of its own: a Spark session
whose JVM writes every class it loads to a file, doing what stage and collect do on a small
input (CSV and JSON stages, a Parquet join), with the JVM's classpath saved beside it."""
import json
import os
import sys

_JOB = """[job]
name = "warm"
ts_unit = "us"
[input]
staged = "staged"
[output]
dir = "out"
[streams.R]
raw = {{ path = "raw/R", format = "{fmt}", time = "t", time_unit = "us" }}
schema = {{ k = "int64", v = "float64", s = "char8" }}
window = "1s"
[streams.S]
raw = {{ path = "raw/S", format = "{fmt}", time = "t", time_unit = "us" }}
schema = {{ k = "int64", v = "float64", s = "char8" }}
window = "1s"
[predicate]
equi = [["R.k", "S.k"]]
[strategy]
name = "hash"
"""


def _small_job(work, fmt):
    """A small two-stream job with raw `fmt` files (csv or json), the shape stage reads."""
    d = os.path.join(work, fmt)
    for s in "RS":
        os.makedirs(os.path.join(d, "raw", s))
        rows = [(t * 7, t % 13, t / 8, f"x{t % 5}") for t in range(200)]
        with open(os.path.join(d, "raw", s, f"part-0.{fmt}"), "w") as f:
            if fmt == "csv":
                f.write("t,k,v,s\n" + "".join(f"{t},{k},{v},{x}\n" for t, k, v, x in rows))
            else:
                f.write("".join(json.dumps({"t": t, "k": k, "v": v, "s": x}) + "\n" for t, k, v, x in rows))
    with open(os.path.join(d, "job.toml"), "w") as f:
        f.write(_JOB.format(fmt=fmt))
    return os.path.join(d, "job.toml")


def list_classes(classes, classpath_file, work):
    """The listing run (a process of its own): a session whose JVM writes every class it loads
    to `classes`, a small CSV and JSON stage and a Parquet join, the JVM's classpath saved."""
    from ...config import load_job
    from .session import spark_session
    from .stage import stage
    spark = spark_session("local[2]", app="mpi-join warm-spark", small=True,
                          java_extra=f"-XX:DumpLoadedClassList={classes}")
    with open(classpath_file, "w") as f:
        f.write(spark.sparkContext._jvm.java.lang.System.getProperty("java.class.path"))
    for fmt in ("csv", "json"):
        job = load_job(_small_job(work, fmt))
        stage(spark, job, progress=lambda _: None)
        a, b = (spark.read.parquet(f"file://{job.staged}/{s.name}") for s in job.streams)
        a.join(b, "k").groupBy("k").count().orderBy("k").collect()
    spark.stop()


if __name__ == "__main__":
    list_classes(*sys.argv[1:4])
