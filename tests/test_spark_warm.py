"""`mpi-join warm-spark`: the class archive Spark's driver maps at start-up (README "Spark start-up").
The suite builds it once (make test runs warm-spark first; the fixture builds it when absent)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from mpi_join.storage.spark import warm
from conftest import run_cli

SLOW = True


@pytest.fixture(scope="module")
def archive():
    if warm.java_binary() is None:
        pytest.fail("no java: Spark needs Java 17")
    return warm.build(progress=lambda _: None)


def test_the_archive_maps_on_this_jvm_and_classpath(archive):
    """-Xshare:on refuses to start a JVM whose archive it cannot map (another JVM, another
    classpath): this one starts, so Spark's driver, on the same java and jars, maps it."""
    side = json.load(open(archive + ".json"))
    assert side["bytes"] == os.path.getsize(archive) and warm.usable_archive() == archive
    p = subprocess.run([warm.java_binary(), "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp", side["classpath"],
                        "-version"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    bad = subprocess.run([warm.java_binary(), "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp",
                          side["classpath"].split(os.pathsep)[0], "-version"], capture_output=True, text=True)
    assert bad.returncode != 0          # the check is real: another classpath is refused


def test_a_driver_jvm_gets_the_archive(archive):
    code = ("from mpi_join.storage.spark.session import spark_session\n"
            "s = spark_session('local[1]', small=True)\n"
            "print(list(s.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"-XX:SharedArchiveFile={archive}" in p.stdout


def test_a_damaged_or_foreign_archive_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("MPI_JOIN_CACHE", str(tmp_path / "cache"))
    path = warm.archive_path()
    assert os.path.dirname(path) == str(tmp_path / "cache") and warm.java_options() == ""
    os.makedirs(os.path.dirname(path))
    open(path, "wb").write(b"x" * 100)
    json.dump({"bytes": 99}, open(path + ".json", "w"))           # cut short, or written over
    assert warm.usable_archive() is None and warm.java_options() == ""
    json.dump({"bytes": 100}, open(path + ".json", "w"))
    assert warm.usable_archive() == path and path in warm.java_options()
    # other Spark jars: another name, so an upgrade finds no archive
    jars = tmp_path / "jars"
    shutil.copytree(warm._jars_dir(), jars, ignore=lambda d, names: names[1:])
    monkeypatch.setattr(warm, "_jars_dir", lambda: str(jars))
    assert warm.archive_path() != path and warm.usable_archive() is None


def test_where_and_no_java(tmp_path):
    r = run_cli("warm-spark", "--where", env=dict(os.environ, MPI_JOIN_CACHE=str(tmp_path)))
    assert r.returncode == 0 and str(tmp_path) in r.stdout and "not built" in r.stdout
    r = run_cli("warm-spark", env=dict(os.environ, MPI_JOIN_CACHE=str(tmp_path), JAVA_HOME=str(tmp_path / "nojava")))
    assert r.returncode != 0 and "no java found" in r.stderr


def test_archives_of_removed_installations_are_pruned(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    gone, alive, stray = root / "spark-gone.jsa", root / "spark-alive.jsa", root / "spark-stray.jsa"
    for p, jars in ((gone, str(tmp_path / "removed-venv" / "jars")), (alive, str(tmp_path))):
        p.write_bytes(b"x")
        (root / (p.name + ".json")).write_text(json.dumps({"bytes": 1, "jars": jars}))
    stray.write_bytes(b"x")                                         # no record: not ours to judge
    outside = tmp_path / "users-file"
    outside.write_bytes(b"keep me")
    link = root / "spark-link.jsa"                                   # a link: removed, never its target
    link.symlink_to(outside)
    (root / "spark-link.jsa.json").write_text(json.dumps({"bytes": 7, "jars": str(tmp_path / "gone-too")}))
    said = []
    warm._prune(str(root), keep=str(root / "spark-new.jsa"), progress=said.append)
    assert not gone.exists() and not (root / "spark-gone.jsa.json").exists()
    assert not os.path.lexists(link) and outside.read_bytes() == b"keep me"
    assert alive.exists() and stray.exists() and len(said) == 2 and all("is gone" in m for m in said)
