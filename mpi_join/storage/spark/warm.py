"""A class-data-sharing (CDS) archive of the classes Spark loads, so that its JVM starts sooner.

A local Spark driver spends most of a small stage or collect loading and verifying some 18,000
classes: about 9 s to build the session and 5 s for its first job, on 2 cores. `mpi-join
warm-spark` runs a small stage once with the JVM listing the classes it loads, then has `java
-Xshare:dump` write them, already parsed and verified, into one archive; every later driver JVM
maps it (`-XX:SharedArchiveFile`) instead of loading them again (README "Spark start-up").

The archive belongs to one JVM and one set of Spark jars: its name is a hash of the java
binary and of the jars (names, sizes, modification times), so an upgrade of either simply
finds no archive. A JVM that cannot use it (a different classpath, say) starts as before: the
archive is an optimisation, never a requirement. It lives in the cache folder
($MPI_JOIN_CACHE, else $XDG_CACHE_HOME/mpi-join, else ~/.cache/mpi-join), is written under a
temporary name and renamed, and is used only when its size matches the one recorded beside it.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from ...errors import ConfigError
from .. import paths


def cache_root():
    root = os.environ.get("MPI_JOIN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "mpi-join")
    return os.path.realpath(root)


def java_binary():
    """The java Spark's launcher runs: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def _jars_dir():
    import pyspark
    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


def archive_path():
    """Where the archive for this java and these Spark jars is (present or not), or None when
    there is no java to key it by."""
    java = java_binary()
    if java is None:
        return None
    h = hashlib.sha256()
    for p in [java] + sorted(os.path.join(_jars_dir(), f) for f in os.listdir(_jars_dir())):
        st = os.stat(p)
        h.update(f"{os.path.basename(p)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return os.path.join(cache_root(), f"spark-{h.hexdigest()[:20]}.jsa")


def usable_archive():
    """The archive's path if it is there whole (its size as recorded when it was written)."""
    try:
        path = archive_path()
        if path is None or not os.path.isfile(path):
            return None
        with open(path + ".json") as f:
            return path if json.load(f).get("bytes") == os.path.getsize(path) else None
    except (OSError, ValueError):
        return None


def java_options():
    """Driver JVM options that map the archive, or "" when there is none."""
    path = usable_archive()
    # -Xshare:auto: a JVM that cannot map it starts without it; its warning would only alarm
    return f"-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off" if path else ""


def build(progress=print, force=False):
    """Write the archive for this java and these Spark jars; returns its path."""
    java, path = java_binary(), archive_path()
    if path is None:
        raise ConfigError("warm-spark: no java found (set JAVA_HOME or put java on PATH); Spark needs Java 17")
    if usable_archive() and not force:
        progress(f"warm-spark: {path} is up to date (--force builds it again)")
        return path
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=root, prefix=".warm-") as tmp:
        classes, cp = os.path.join(tmp, "classes.lst"), os.path.join(tmp, "classpath")
        progress("warm-spark: staging a small input with Spark to list the classes it loads ...")
        # its JVM maps no archive (an empty cache): it lists every class, not only those outside one
        p = subprocess.run([sys.executable, "-m", "mpi_join.storage.spark.class_list", classes, cp, tmp],
                           capture_output=True, text=True, env=dict(os.environ, MPI_JOIN_CACHE=tmp))
        if p.returncode != 0 or not os.path.exists(classes) or not os.path.exists(cp):
            raise ConfigError(f"warm-spark: the listing run failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
        with open(cp) as f:
            classpath = f.read()
        progress(f"warm-spark: {sum(1 for _ in open(classes)):,} classes listed; writing the archive "
                 f"(one to two minutes) ...")
        part = os.path.join(tmp, "spark.jsa")
        p = subprocess.run([java, "-Xshare:dump", f"-XX:SharedClassListFile={classes}",
                            f"-XX:SharedArchiveFile={part}", "-Xlog:cds=off", "-cp", classpath],
                           capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(part):
            raise ConfigError(f"warm-spark: java -Xshare:dump failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
        size = os.path.getsize(part)
        os.replace(part, path)
        with open(path + ".json.part", "w") as f:
            json.dump({"bytes": size, "java": java, "jars": _jars_dir(), "classpath": classpath,
                       "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f)
        os.replace(path + ".json.part", path + ".json")
    _prune(root, keep=path, progress=progress)
    progress(f"warm-spark: wrote {path} ({size / 2**20:.0f} MiB, {time.perf_counter() - t0:.0f} s); "
             f"later Spark drivers on this machine map it at start-up")
    return path


def _prune(root, keep, progress):
    """Delete the archives of Spark installations that are gone (their jars folder no longer
    exists: a removed virtualenv), so that reinstalls do not pile up 200 MB files. Only files
    named spark-*.jsa and their records, directly in the cache folder, are touched (a link is
    removed, never its target: paths.remove_file)."""
    import glob
    for old in glob.glob(os.path.join(root, "spark-*.jsa")):
        if old == keep:
            continue
        try:
            with open(old + ".json") as f:
                jars = json.load(f).get("jars")
        except (OSError, ValueError):
            continue                     # not ours to judge: leave it
        if jars and not os.path.isdir(jars):
            for p in (old, old + ".json"):
                if os.path.lexists(p):
                    paths.remove_file(root, p)
            progress(f"warm-spark: removed {old} (its Spark installation {jars} is gone)")
