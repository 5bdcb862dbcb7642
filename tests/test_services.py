"""The pipeline against real services, started by the project's own code (`mpi-join
dev-services`, services/daemons.py): a NameNode and a DataNode, a ResourceManager and a
NodeManager, a KRaft Kafka broker, each its own JVM from jars fetched with Maven. Raw files
on HDFS are staged (CSV, JSON lines, Parquet; on local Spark and on YARN), joined, and
collected back to HDFS; every answer is compared pair for pair with DuckDB's on the same files,
and the run with the oracle. The faults: safe mode, a path the user may not write, the only
DataNode killed before and during a collect (one line, nothing marked complete, a rerun
completes it). The services tier: `make test` runs it on its own (`-m services`)."""
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from conftest import job_toml, mpi_join_cmd, run_cli, run_mpi, stream_toml
from mpi_join.tools.bench_door import duckdb_door, generate

SLOW = True
pytestmark = [pytest.mark.services, pytest.mark.xdist_group("services")]


def _env(ds, **extra):
    return dict(os.environ, HADOOP_CONF_DIR=ds.conf, MPI_JOIN_QUIET="1", **extra)


def _door(tmp, ds, name, imp_format="csv", click_format="csv", n=(6000, 1500)):
    """The door's workload (bench_door.generate: ISO times with offsets, string ids, nulls, bad
    rows) in `tmp`, its raw files put on HDFS under /NAME/ in the formats given; returns (the
    job file, DuckDB's pairs over the same rows, the HDFS root of the job)."""
    generate(str(tmp), n[0], n[1], files=5, bad=3, say=lambda m: None)
    _, _, want = duckdb_door(str(tmp), str(tmp / "duck.parquet"))
    hd = ds.endpoints()["hdfs"]
    ds.hadoop("dfs", "-mkdir", "-p", f"{hd}/{name}/raw")
    text = (tmp / "job.toml").read_text()
    for stream, fmt in (("imp", imp_format), ("click", click_format)):
        src = tmp / "raw" / stream
        if fmt != "csv":       # the same rows as JSON lines or Parquet, every value text as in the CSV
            out = tmp / f"raw-{fmt}" / stream
            out.mkdir(parents=True)
            for f in sorted(os.listdir(src)):
                with open(src / f) as fh:
                    header = fh.readline().strip().split(",")
                t = pcsv.read_csv(str(src / f), convert_options=pcsv.ConvertOptions(
                    column_types={c: pa.string() for c in header}))
                if fmt == "parquet":
                    pq.write_table(t, str(out / f.replace(".csv", ".parquet")))
                else:
                    with open(out / f.replace(".csv", ".json"), "w") as fh:
                        for row in t.to_pylist():
                            fh.write(json.dumps(row) + "\n")
            src = out
        ds.hadoop("dfs", "-put", str(src), f"{hd}/{name}/raw/{stream}")
        text = text.replace(f'path = "raw/{stream}", format = "csv"', f'path = "{hd}/{name}/raw/{stream}", format = "{fmt}"')
    assert text.count(hd) == 2, text
    (tmp / "job.toml").write_text(text)
    return str(tmp / "job.toml"), want, f"{hd}/{name}"


def _pairs(ds, uri, tmp):
    """The (imp_id, click_id) pairs of a collected dataset on HDFS, fetched with `hdfs dfs -get`."""
    local = tmp / f"got-{time.monotonic_ns()}"
    ds.hadoop("dfs", "-get", uri, str(local))
    t = pq.read_table(str(local), columns=["imp_imp_id", "click_click_id"])
    return {(a, b) for a, b in zip(t.column(0).to_pylist(), t.column(1).to_pylist())}, sorted(os.listdir(local))


def _ok(p):
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p


def _one_line(p, *words):
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert p.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words), p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "\tat org." not in p.stderr, p.stderr[-3000:]
    return lines[0]


def _listing(ds, uri):
    r = ds.hadoop("dfs", "-ls", uri, check=False)
    return r.stdout


def test_services_answer_and_stop_only_their_own(services, tmp_path):
    st = json.loads(_ok(run_cli("dev-services", "status", "--json", "--dir", services.root)).stdout)
    assert all(d["pid"] for d in st["daemons"].values()), st
    ep = st["endpoints"]
    with urllib.request.urlopen(f"{ep['yarn_web']}/ws/v1/cluster/metrics", timeout=5) as r:
        assert json.load(r)["clusterMetrics"]["activeNodes"] == 1
    with urllib.request.urlopen(f"{ep['hdfs_web']}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState",
                                timeout=5) as r:
        assert json.load(r)["beans"][0]["NumLiveDataNodes"] == 1
    host, port = ep["kafka"].split(":")
    socket.create_connection((host, int(port)), timeout=5).close()
    # another folder's stop stops nothing of these; its status says nothing runs
    other = str(tmp_path / "other")
    assert "nothing was running" in _ok(run_cli("dev-services", "stop", "--dir", other)).stdout
    assert all(pid for _, pid, _, _ in services.status())
    assert "not running" in _ok(run_cli("dev-services", "status", "--dir", other)).stdout
    # a start of what runs starts nothing and says where it listens
    p = _ok(run_cli("dev-services", "start", "--dir", services.root, "--only", "hdfs"))
    assert ep["hdfs"] in p.stdout and "started" not in p.stderr, p.stderr


def test_hdfs_csv_stage_run_collect_equal_duckdb(services, tmp_path):
    path, want, root = _door(tmp_path, services, "csv")
    env = _env(services)
    p = _ok(run_cli("stage", path, env=env))
    assert "engine spark" in p.stderr and "quarantined 3" in p.stdout, p.stderr
    _ok(run_mpi(3, "run", path, env=env))
    _ok(run_cli("verify", str(tmp_path / "out"), "--job", path, env=env))
    p = _ok(run_cli("collect", str(tmp_path / "out"), "--job", path, "--out", f"{root}/joined", "--with-payload",
                    env=env))
    got, names = _pairs(services, f"{root}/joined", tmp_path)
    assert got == want and len(want) > 100, (len(got), len(want))
    assert "_SUCCESS" in names and "_summary.json" in names, names
    # pipeline, HDFS in and out, in one command
    p = _ok(run_cli("pipeline", path, "-n", "2", "--with-payload", "--overwrite", "--collect-out",
                    f"{root}/piped", env=env))
    assert _pairs(services, f"{root}/piped", tmp_path)[0] == want


def test_hdfs_json_and_parquet_raw(services, tmp_path):
    path, want, root = _door(tmp_path, services, "mixed", imp_format="json", click_format="parquet")
    env = _env(services)
    _ok(run_cli("stage", path, env=env))
    _ok(run_mpi(2, "run", path, env=env))
    _ok(run_cli("collect", str(tmp_path / "out"), "--job", path, "--out", f"{root}/joined", "--with-payload",
                env=env))
    assert _pairs(services, f"{root}/joined", tmp_path)[0] == want


def test_yarn_stages_and_collects_as_local_spark(services, tmp_path):
    path, want, root = _door(tmp_path, services, "yarn")
    env = _env(services)
    yarn = ("--master", "yarn", "--conf", "spark.executor.instances=2", "--conf", "spark.executor.memory=512m",
            "--conf", "spark.yarn.am.memory=512m")
    p = _ok(run_cli("stage", path, *yarn, env=env, timeout=600))
    on_yarn = {s: pq.read_table(str(tmp_path / "staged" / s)).sort_by("seq") for s in ("imp", "click")}
    man_yarn = json.loads((tmp_path / "staged" / "_manifest.json").read_text())
    _ok(run_cli("stage", path, "--force", env=env))
    for s, t in on_yarn.items():
        local = pq.read_table(str(tmp_path / "staged" / s)).sort_by("seq")
        assert t.equals(local), s
    man = json.loads((tmp_path / "staged" / "_manifest.json").read_text())
    assert {k: man_yarn["streams"][k]["count"] for k in man["streams"]} == \
           {k: v["count"] for k, v in man["streams"].items()} and man_yarn["quarantined"] == man["quarantined"]
    _ok(run_mpi(2, "run", path, env=env))
    _ok(run_cli("collect", str(tmp_path / "out"), "--job", path, "--out", f"{root}/joined", "--with-payload",
                *yarn, env=env, timeout=600))
    assert _pairs(services, f"{root}/joined", tmp_path)[0] == want


def test_hdfs_faults_are_one_line_and_a_rerun_completes(services, tmp_path):
    path, want, root = _door(tmp_path, services, "faults")
    env = _env(services)
    _ok(run_cli("stage", path, env=env))
    _ok(run_mpi(2, "run", path, env=env))
    collect = ["collect", str(tmp_path / "out"), "--job", path, "--with-payload", "--out"]
    # safe mode: refused in one line, nothing written; out of it, the same command completes
    services.hadoop("dfsadmin", "-safemode", "enter")
    try:
        _one_line(run_cli(*collect, f"{root}/safe", env=env), "safe mode")
        assert "No such file" in services.hadoop("dfs", "-ls", f"{root}/safe", check=False).stderr
    finally:
        services.hadoop("dfsadmin", "-safemode", "leave")
    _ok(run_cli(*collect, f"{root}/safe", env=env))
    # a user who may not write there
    _one_line(run_cli(*collect, f"{root}/alice", env=_env(services, HADOOP_USER_NAME="alice")),
              "Permission denied", "user=alice")
    # the only DataNode killed before the collect: one line, nothing marked complete; back, a rerun completes
    services.kill("datanode")
    try:
        _one_line(run_cli(*collect, f"{root}/nodn", env=env), "DataNode")
        ls = _listing(services, f"{root}/nodn")
        assert "_SUCCESS" not in ls and "_summary.json" not in ls, ls
    finally:
        services.start(["hdfs"])
    _ok(run_cli(*collect, f"{root}/nodn", env=env))
    assert _pairs(services, f"{root}/nodn", tmp_path)[0] == want


def test_datanode_killed_during_a_collect(services, tmp_path):
    """The DataNode is killed as soon as the collect's task output appears on HDFS."""
    path, want, root = _door(tmp_path, services, "during", n=(60000, 15000))
    env = _env(services)
    _ok(run_cli("stage", path, env=env))
    _ok(run_mpi(2, "run", path, env=env))
    web = services.endpoints()["hdfs_web"]
    seen = []

    def watch():      # WebHDFS, polled: the kill lands while Spark writes its parts
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not seen:
            try:
                with urllib.request.urlopen(f"{web}/webhdfs/v1/during/joined/_temporary?op=LISTSTATUS", timeout=2):
                    seen.append(time.monotonic())
                    services.kill("datanode")
            except OSError:
                time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        p = subprocess.run(mpi_join_cmd("collect", str(tmp_path / "out"), "--job", path, "--with-payload", "--out",
                                        f"{root}/joined"), capture_output=True, text=True, env=env, timeout=600)
        t.join(130)
        assert seen, "the collect's output never appeared"
        if p.returncode == 0:      # its blocks were all written before the kill took: then it is whole
            assert _pairs(services, f"{root}/joined", tmp_path)[0] == want
        else:
            _one_line(p)
            ls = _listing(services, f"{root}/joined")
            assert "_SUCCESS" not in ls and "_summary.json" not in ls, ls
    finally:
        services.start(["hdfs"])
    _ok(run_cli("collect", str(tmp_path / "out"), "--job", path, "--with-payload", "--out", f"{root}/joined",
                env=env))
    assert _pairs(services, f"{root}/joined", tmp_path)[0] == want


def test_slurm_script_stages_on_yarn_and_collects_to_hdfs(services, tmp_path):
    """`mpi-join slurm` with HDFS raw input, `--spark-master yarn` and an HDFS `--collect-out`,
    submitted to a real single-node Slurm: the batch job stages on YARN, runs under mpiexec
    inside the allocation, verifies, and collects into HDFS."""
    import slurm_cluster
    slurm_cluster.ensure_installed()
    cluster = slurm_cluster.Cluster(str(tmp_path / "slurm")).start()
    try:
        path, want, root = _door(tmp_path, services, "slurm")
        r = run_cli("slurm", path, "--ntasks", "3", "--overcommit", "--launcher", "mpiexec", "--verify",
                    "--spark-master", "yarn", "--collect-out", f"{root}/joined", "--with-payload")
        assert r.returncode == 0, r.stderr
        script = r.stdout.split("submit with: sbatch ")[1].strip()
        assert f"--out {root}/joined --master yarn" in open(script).read()
        env = dict(cluster.env, HADOOP_CONF_DIR=services.conf)
        p = subprocess.run(["sbatch", "--parsable", script], capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        job = p.stdout.strip().split(";")[0]
        state = cluster.wait([job], timeout=900)[job]
        logs = tmp_path / "slurm-logs"
        log = "".join((logs / f).read_text() for f in os.listdir(logs))
        assert state == "COMPLETED", state + log[-3000:] + cluster.log_tail()
        assert "OK: results equal the oracle" in log, log[-3000:]
        assert _pairs(services, f"{root}/joined", tmp_path)[0] == want
    finally:
        cluster.stop()


def test_raw_file_removed_between_listing_and_reading(services, tmp_path):
    """A raw file on HDFS deleted once `stage` has listed it: one line naming what is gone and
    nothing staged, or (when the read was quicker than the delete) every row staged."""
    path, _, root = _door(tmp_path, services, "gone")
    gone = f"{root}/raw/imp/part-001.csv"
    p = subprocess.Popen(mpi_join_cmd("stage", path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_env(services))
    err = []
    for line in p.stderr:
        err.append(line)
        if "stage: stream imp: reading" in line:
            services.hadoop("dfs", "-rm", gone)
            break
    err += p.stderr.readlines()
    out = p.stdout.read()
    p.wait(300)
    p = subprocess.CompletedProcess([], p.returncode, out, "".join(err))
    print(p.stderr[-600:])
    if p.returncode == 0:
        assert "staged 7,497 tuples" in p.stdout, p.stdout
    else:
        line = _one_line(p)
        assert "part-001.csv" in line and ("gone" in line or "not exist" in line), line
        assert not (tmp_path / "staged" / "_manifest.json").exists()


def test_a_failed_start_leaves_no_daemon_behind(tmp_path):
    """A daemon that cannot start (here Kafka, its port taken) fails `start` in one line, and the
    daemons that start launched are stopped with it."""
    from mpi_join.services.daemons import DevServices
    root = tmp_path / "svc"
    ports = DevServices(str(root)).ports()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports["kafka"]))
        taken.listen()
        p = run_cli("dev-services", "start", "--dir", str(root), "--only", "hdfs,kafka", timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("mpi-join: error:")]
    assert p.returncode == 2 and len(lines) == 1 and "kafka" in lines[0], p.stderr[-2000:]
    assert not any(pid for _, pid, _, _ in DevServices(str(root)).status())
    assert "not running" in run_cli("dev-services", "status", "--dir", str(root)).stdout


def test_a_live_landing_directory_on_hdfs_stages_each_row_once_through_a_sigkill(services, tmp_path):
    """`stage --follow` of landing directories on HDFS (Spark's file source watches them; its
    checkpoint is in the log): the files put while it runs are staged, a SIGKILL and a restart
    with `--until end` stage each row once, a bad row is quarantined by itself with its file's
    hdfs:// URI, and the run over the log equals the oracle."""
    import numpy as np
    hd = services.endpoints()["hdfs"]
    root = f"{hd}/live-land"
    raw = '{{ path = "{}/{}", format = "csv", time = "t", time_unit = "ms" }}'
    (tmp_path / "job.toml").write_text(job_toml(
        stream_toml("R", 'k = "int64", v = "float64"', '"200ms"', raw.format(root, "R"))
        + stream_toml("S", 'k = "int64", w = "float64"', '"200ms"', raw.format(root, "S")),
        'equi = [["R.k", "S.k"]]', inp='staged = "staged"\nallowed_lateness = "1s"', name="hdfs-live"))
    path, env = str(tmp_path / "job.toml"), _env(services)
    services.hadoop("dfs", "-mkdir", "-p", f"{root}/R", f"{root}/S")
    rng, rows, t0, made = np.random.default_rng(9), {"R": [], "S": []}, 1_000_000, [0]

    def land(n, files):
        """`files` files a stream, put beside the landing directories and renamed into them
        (the producer contract), in three Hadoop commands."""
        d, first = tmp_path / f"files-{n}", made[0]
        made[0] += files                            # each file a second of event time after the last
        for st, col in (("R", "v"), ("S", "w")):
            (d / st).mkdir(parents=True)
            for j in range(files):
                lines = [f"k,t,{col}"]              # the time column not first
                for i in range(200):
                    t, k, x = t0 + 1000 * (first + j) + 5 * i, int(rng.integers(0, 40)), round(float(rng.random()), 6)
                    bad = n == 1 and j == 0 and i == 7 and st == "R"
                    lines.append(f"{k},{'later' if bad else t},{x}")
                    if not bad:
                        rows[st].append((t, k, x))
                (d / st / f"{st}-{n}-{j}.csv").write_text("\n".join(lines) + "\n")
        services.hadoop("dfs", "-mkdir", "-p", f"{hd}/incoming-{n}")
        services.hadoop("dfs", "-put", str(d / "R"), str(d / "S"), f"{hd}/incoming-{n}/")
        for st in ("R", "S"):
            services.hadoop("dfs", "-mv", f"{hd}/incoming-{n}/{st}/*", f"{root}/{st}/")

    land(0, 2)
    p = subprocess.Popen(mpi_join_cmd("stage", "--follow", "--trigger", "500ms", path), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        man = tmp_path / "staged" / "_manifest.json"
        deadline = time.monotonic() + 180
        while (not man.exists() or json.loads(man.read_text())["total"] < 400) and time.monotonic() < deadline \
                and p.poll() is None:
            time.sleep(0.2)
        assert p.poll() is None and json.loads(man.read_text())["total"] >= 400, \
            p.stderr.read() if p.poll() is not None else "no commit"
        land(1, 2)                               # while it runs
        time.sleep(1.0)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
    land(2, 1)
    r = run_cli("stage", "--follow", "--until", "end", path, env=env, timeout=300)
    _ok(r)
    assert "continuing the log" in r.stderr, r.stderr[-2000:]
    for st, col in (("R", "v"), ("S", "w")):
        t = pq.read_table(str(tmp_path / "staged" / st), columns=["ts", "k", col])
        got = sorted(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), t.column(2).to_pylist()))
        assert got == sorted(rows[st]), (st, len(got), len(rows[st]))
    q = pq.read_table(str(tmp_path / "staged" / "_quarantine" / "R")).to_pylist()
    assert len(q) == 1 and q[0]["file"] == f"{root}/R/R-1-0.csv" and q[0]["record"] == 8, q
    _ok(run_mpi(3, "run", path))
    v = run_cli("verify", str(tmp_path / "out"), "--job", path)
    assert v.returncode == 0 and "OK" in v.stdout, v.stdout + v.stderr
