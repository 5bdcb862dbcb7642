"""The README's "Using it" commands run as written (with a smaller input), in order, in a fresh
folder: generate, stage, check, explain, run, collect, verify, pipeline, oracle, strategies and
slurm (rendered; submitting needs a cluster, which tests/test_slurm.py starts). `bench` is run
by tests/test_bench.py with small sizes."""
import os
import re
import subprocess
import sys

SLOW = True
README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def using_it_commands():
    text = open(README).read()
    block = text.split("## Using it", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    cmds = []
    for line in block.strip().splitlines():
        cmd = line.split("  #", 1)[0].strip()
        if cmd and not cmd.startswith("source "):
            cmds.append(cmd)
    return cmds


def test_the_readme_commands_run_as_written(tmp_path):
    cmds = using_it_commands()
    assert len(cmds) >= 10 and cmds[0].startswith("mpi-join generate")
    from mpi_join.storage.spark.session import SHORT_LIVED
    # the pipeline's JVM stages 4,000 tuples: set up for a short life, as a user may (README, Spark)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], MPI_JOIN_QUIET="1",
               MPI_JOIN_SPARK_JAVA_OPTS=SHORT_LIVED)
    ran = {}
    for cmd in cmds:
        if cmd.startswith("mpi-join bench"):
            continue
        cmd = re.sub(r"--tuples \d+", "--tuples 4000", cmd).replace(" --submit", "")
        p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"{cmd}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        ran[cmd.split()[1]] = p
    assert "verify" in ran and (tmp_path / "work/equi/collected/_summary.json").exists()
    assert (tmp_path / "work/equi/slurm").is_dir()
    assert "staged 4,000 tuples (R 2,000, S 2,000); quarantined 0" in ran["stage"].stdout, ran["stage"].stdout
    # after `stage`, the pipeline finds the staged input up to date and only runs and collects
    # (tests/test_spark.py runs it from raw input, staging and collecting in one Spark session)
    assert "is up to date" in ran["pipeline"].stderr and "OK: results equal the oracle" in ran["pipeline"].stderr


def test_the_readmes_flink_cases_are_the_flink_tiers():
    """README "Checked against Apache Flink" lists the cases tests/test_flink.py runs: each row's
    condition is one case's, with its strategies."""
    from test_flink import CASES, ON
    text = open(README).read()
    table = text[text.index("### Checked against Apache Flink"):]
    lines = table.splitlines()
    start = next(k for k, r in enumerate(lines) if r.startswith("| case"))
    rows = []
    for r in lines[start + 2:]:
        if not r.startswith("|"):
            break
        rows.append(r)
    assert len(rows) == len(CASES)
    for (sql, _, strategies), row in zip(CASES.values(), rows):
        cond = sql.split(ON, 1)[1] if ON in sql else sql
        assert f"`{cond}`" in row or "as inner" in row, (cond, row)
        assert all(s.split("@")[0] in row for s in strategies), (strategies, row)
