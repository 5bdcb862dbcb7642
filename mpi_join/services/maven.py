"""The jars of the development services, fetched with Maven from Maven Central the first time
and kept in a cache: each bundle a pinned list of artifacts, copied with their dependencies
into <cache>/jars/<bundle>-<digest>/ and marked complete only when every jar is there (a
fetch cut short is fetched again, never half used)."""
import hashlib
import json
import os
import shutil
import subprocess

from ..errors import JobError

# the real daemons' code: Hadoop's own (the HDFS NameNode and DataNode, the YARN
# ResourceManager and NodeManager, shaded in hadoop-client-minicluster beside the 3.5.0 client
# PySpark bundles), log4j 1's API (reload4j) and the BouncyCastle provider the ResourceManager
# loads, slf4j-simple so that every daemon's log says what it did; and a KRaft Kafka broker
BUNDLES = {
    "hadoop": ("org.apache.hadoop:hadoop-client-minicluster:3.5.0", "ch.qos.reload4j:reload4j:1.2.25",
               "org.bouncycastle:bcprov-jdk18on:1.82", "org.bouncycastle:bcpkix-jdk18on:1.82",
               "org.slf4j:slf4j-simple:1.7.36"),
    "kafka": ("org.apache.kafka:kafka_2.13:4.4.0", "org.slf4j:slf4j-simple:1.7.36"),
    # the peer's: Flink SQL's Kafka connector (one shaded jar) for `bench kafka`'s Flink side
    "flink-kafka": ("org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2",),
}
COMPLETE = ".complete.json"


def cache_root():
    """Where fetched jars are kept: $MPI_JOIN_CACHE, else ~/.cache/mpi-join."""
    return os.path.realpath(os.environ.get("MPI_JOIN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                              "mpi-join"))


def _pom(coords):
    deps = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
                   for g, a, v in (c.split(":") for c in coords))
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            '<groupId>mpi-join</groupId><artifactId>dev-services</artifactId><version>1</version>'
            f"<dependencies>{deps}</dependencies></project>\n")


def bundle_dir(name):
    """The cache folder of bundle `name` (named for its pinned artifacts: a new pin, a new folder)."""
    digest = hashlib.sha256("\n".join(BUNDLES[name]).encode()).hexdigest()[:12]
    return os.path.join(cache_root(), "jars", f"{name}-{digest}")


def classpath(name, progress=print):
    """The jars of bundle `name` (fetched first where the cache lacks them), as a list."""
    d = bundle_dir(name)
    done = _complete(d)
    if done is None:
        fetch(name, progress)
        done = _complete(d)
    return [os.path.join(d, j) for j in done]


def _complete(d):
    """The jar names of a complete bundle folder, each there with its recorded size, or None."""
    try:
        with open(os.path.join(d, COMPLETE)) as f:
            rec = json.load(f)
        jars = rec["jars"]
        if all(os.path.getsize(os.path.join(d, j)) == n for j, n in jars.items()):
            return sorted(jars)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def fetch(name, progress=print):
    """Copy bundle `name`'s artifacts with their dependencies from Maven Central into the cache."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JobError("mvn not found: dev-services fetches the Hadoop and Kafka jars from Maven Central with Maven "
                       "3.8+ (apt-get install maven)")
    d = bundle_dir(name)
    tmp = d + ".partial"
    root = os.path.dirname(d)
    os.makedirs(root, exist_ok=True)
    if os.path.lexists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "pom.xml"), "w") as f:
        f.write(_pom(BUNDLES[name]))
    progress(f"dev-services: fetching the {name} jars with Maven ({', '.join(BUNDLES[name])}) into {d}")
    p = subprocess.run([mvn, "-q", "-B", "-f", os.path.join(tmp, "pom.xml"), "dependency:copy-dependencies",
                        f"-DoutputDirectory={tmp}"], capture_output=True, text=True)
    if p.returncode != 0:
        last = [ln for ln in (p.stdout + p.stderr).splitlines() if "ERROR" in ln][:1]
        raise JobError(f"mvn could not fetch the {name} jars ({', '.join(BUNDLES[name])}): "
                       f"{last[0].strip() if last else 'exit ' + str(p.returncode)}")
    jars = {j: os.path.getsize(os.path.join(tmp, j)) for j in os.listdir(tmp) if j.endswith(".jar")}
    with open(os.path.join(tmp, COMPLETE), "w") as f:
        json.dump({"artifacts": list(BUNDLES[name]), "jars": jars}, f, indent=1)
    if os.path.lexists(d):
        shutil.rmtree(d)
    os.replace(tmp, d)
    progress(f"dev-services: {len(jars)} {name} jars, {sum(jars.values()) / 2**20:.0f} MiB")
