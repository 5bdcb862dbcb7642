"""A SparkSession set up for the pipeline: local[*] by default, any master by option, quiet."""
import contextlib
import signal
import os

_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


# a local JVM that stages a small input: the C1 compiler only and the serial collector start
# and finish sooner than the tiered JIT and G1 (stage --force on 200k CSV rows: 0.86x the wall
# time). Not for collect: joining payloads to millions of results needs the full JIT (1.16x)
SHORT_LIVED = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"


def spark_session(master=None, app="mpi-join", conf=(), small=False, java_extra="", shield_term=False):
    """Build (or reuse) the session. `master` None keeps what spark-submit set (the CLI passes
    local[*] by default). `small`: the work is small and local (stage.small_input), so a local
    master's JVM is set up for a short life (SHORT_LIVED). The driver JVM maps the class archive
    of `mpi-join warm-spark` when there is one (warm.py: about half the start-up).
    MPI_JOIN_SPARK_JAVA_OPTS adds options after these (a later HotSpot flag wins); `--conf
    spark.driver.extraJavaOptions` replaces all of them. `shield_term`: the JVM ignores SIGTERM
    (it inherits the ignored disposition, and then installs no handler of its own), so that a
    SIGTERM to the whole process group reaches only Python, which stops the streaming query
    and ends the log with the JVM still there (live staging); the JVM ends with its Python."""
    from .warm import java_options
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    from pyspark.sql import SparkSession
    b = SparkSession.builder.appName(app)
    if master:
        b = b.master(master)
    b = (b.config("spark.ui.showConsoleProgress", "false")
          .config("spark.ui.enabled", "false")
          .config("spark.sql.session.timeZone", "UTC")
          .config("spark.sql.shuffle.partitions", "8")
          .config("spark.driver.memory", os.environ.get("MPI_JOIN_SPARK_DRIVER_MEMORY", "2g"))
          .config("spark.driver.extraJavaOptions", " ".join(o for o in (
              f"-Dlog4j2.configurationFile=file:{_LOG4J}",
              SHORT_LIVED if small and str(master or "").startswith("local") else "",
              java_options(), java_extra, os.environ.get("MPI_JOIN_SPARK_JAVA_OPTS", "")) if o)))
    for kv in conf:
        k, _, v = kv.partition("=")
        b = b.config(k, v)
    with _term_ignored_by_the_jvm(shield_term):
        spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def _term_ignored_by_the_jvm(on):
    """While the session starts, the JVM's process is spawned with SIGTERM ignored (set in the
    child between fork and exec; the parent's handlers are not touched, so this works on any
    thread: a stager starts its JVM beside its fast path, Reader.warm)."""
    if not on:
        yield
        return
    from pyspark import java_gateway
    popen = java_gateway.Popen

    def spawn(cmd, **kw):
        first = kw.get("preexec_fn")

        def pre():
            if first is not None:
                first()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kw["preexec_fn"] = pre
        return popen(cmd, **kw)
    java_gateway.Popen = spawn
    try:
        yield
    finally:
        java_gateway.Popen = popen


def _python():
    import sys
    return sys.executable
