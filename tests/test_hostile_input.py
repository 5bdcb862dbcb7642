"""Hostile and careless input, in process (the fast tier): names that are paths, numbers out of
range, damaged manifests, job files that are not text, directories that overlap, Slurm values
that would inject a command. Each case must end with exit 2 and one line naming the field or
file, and leave a sentinel tree outside the job's own directories exactly as it was."""
import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from mpi_join.cli import main
from conftest import equi_job_text, job_toml, random_streams, stream_toml, write_job

def job_text(streams=None, predicate='equi = [["R.k", "S.k"]]', schema_r='{ k = "int32", v = "float64" }',
             window_r='"5ms"', **parts):
    streams = streams if streams is not None else (
        stream_toml("R", schema_r[1:-1].strip(), window_r) + stream_toml("S", 'k = "int64", w = "float64"', '"5ms"'))
    return job_toml(streams, predicate, **parts)


def two(name_a, name_b="S"):
    return stream_toml(name_a, 'k = "int32"', '"5ms"') + stream_toml(name_b, 'k = "int32"', '"5ms"')


def q(s):
    return json.dumps(s)          # a TOML basic string (escapes newlines, NUL, quotes)


def tree_digest(root):
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(d, f)
            h.update(p.encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
        h.update(d.encode())
    return h.hexdigest()


@pytest.fixture
def world(tmp_path):
    """tmp/outside: the sentinel (a victim file and folder); tmp/job: the job's own directory."""
    outside = tmp_path / "outside"
    (outside / "victim").mkdir(parents=True)
    (outside / "victim" / "part-r0000-00000.parquet").write_text("not mpi-join's")
    (outside / "victim.txt").write_text("keep me")
    (outside / "staged").mkdir()
    (outside / "staged" / "_manifest.json").write_text("{}")
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    return tmp_path, outside, jobdir


def invoke(args, cwd=None):
    runner = CliRunner()
    old = os.getcwd()
    try:
        if cwd:
            os.chdir(cwd)
        return runner.invoke(main, args, catch_exceptions=False)
    except SystemExit as e:      # pragma: no cover - CliRunner turns exits into results
        raise AssertionError(f"exit {e.code}")
    finally:
        os.chdir(old)


def assert_refused(res, *fragments):
    assert res.exit_code == 2, (res.exit_code, res.output)
    err = res.stderr if hasattr(res, "stderr") else res.output
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("mpi-join: error:"), err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def check_case(world, text, *fragments, cmd="check"):
    tmp, outside, jobdir = world
    before = tree_digest(outside)
    (jobdir / "job.toml").write_text(text)
    args = {"check": ["check", str(jobdir / "job.toml"), "-n", "3"],
            "oracle": ["oracle", str(jobdir / "job.toml")],
            "explain": ["explain", str(jobdir / "job.toml"), "-n", "3"]}[cmd]
    line = assert_refused(invoke(args), *fragments)
    assert tree_digest(outside) == before
    return line


# -- 1. names are not paths -------------------------------------------------------------
BAD_NAMES = ["..", "../../outside/victim", "/etc", "R/x", ".", "a b", "a-b", "1abc", "x" * 5000, "_tin",
             "_coord", "é", "a.b", "a\nb", "a\u0000b", "", "R\n"]   # "R\n": re.match with $ let it pass


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n)[:20] for n in BAD_NAMES])
def test_stream_names_are_identifiers(world, name):
    line = check_case(world, job_text(streams=two(q(name)), predicate="theta = [{udf = \"mpi_join.udfs:band10\"}]"),
                      "streams", "stream name")
    assert len(line) < 400


@pytest.mark.parametrize("name", ["..", "a/b", "_h", "_tin", "x" * 65, "a\nb", "9z", "seq"])
def test_column_names_are_identifiers(world, name):
    check_case(world, job_text(schema_r=f'{{ k = "int32", {q(name)} = "int32" }}'), "streams.R.schema")


# -- 9. every number has a range ----------------------------------------------------------
NUMBERS = [
    ('name = "hash"\npartitions = 1_000_000_000_000', "strategy.partitions"),
    ('name = "hash"\npartitions = 0', "strategy.partitions"),
    ('name = "hash"\npartitions = -1', "strategy.partitions"),
    ('name = "hash"\ntheta = -1', "strategy.theta"),
    ('name = "hash"\nrho = nan', "strategy.rho"),
    ('name = "hash"\nrho = inf', "strategy.rho"),
    ('name = "hash"\nsupply_threshold = nan', "strategy.supply_threshold"),
    ('name = "hash"\nsubgroups = 0', "strategy.subgroups"),
    ('name = "hash"\nsubgroups = 100000', "strategy.subgroups"),
    ('name = "hash"\nblock_size = 0', "strategy.block_size"),
    ('name = "psp"\nweights = "nan,1"', "strategy.weights"),
    ('name = "psp"\nweights = "inf,1"', "strategy.weights"),
    ('name = "psp"\nweights = "1e300,1"', "strategy.weights"),
    ('name = "psp"\ninterleave = 0', "strategy.interleave"),
    ('name = "psp"\ninterleave = 1_000_000_000', "strategy.interleave"),
    ('name = "psp"\nslice_counts = "nan"', "strategy.slice_counts"),
    ('name = "handshake"\nweights = "nan,1"', "strategy.weights"),
    ('name = "handshake"\nweights = "0,1"', "strategy.weights"),
    ('name = "llhj"\nweights = "inf,1"', "strategy.weights"),
    ('name = "handshake"\nslow_delay = inf', "strategy.slow_delay"),
]


@pytest.mark.parametrize("strategy,field", NUMBERS, ids=[n[0].replace("\n", " ")[:40] for n in NUMBERS])
def test_strategy_numbers_have_ranges(world, strategy, field):
    check_case(world, job_text(strategy=strategy), field)


RUN_NUMBERS = [
    ("batch_size = 0", "run.batch_size"), ("batch_size = 1_073_741_824", "run.batch_size"),
    ("batch_size = nan", "run.batch_size"), ("batch_size = 1.5", "run.batch_size"),
    ("rate = nan", "run.rate"), ("rate = inf", "run.rate"), ("rate = -1", "run.rate"), ("rate = 0", "run.rate"),
    ("rate = 1e12", "run.rate"), ("max_inflight = 0", "run.max_inflight"),
    ("max_inflight = 1_000_000", "run.max_inflight"), ('flush_interval = "0s"', "run.flush_interval"),
    ('flush_interval = "1000d"', "run.flush_interval"), ('liveness_timeout = "1ms"', "run.liveness_timeout"),
    ('overload_after = "99999d"', "run.overload_after"), ("progress = 3", "run.progress"),
]


@pytest.mark.parametrize("run,field", RUN_NUMBERS, ids=[n[0][:30] for n in RUN_NUMBERS])
def test_run_numbers_have_ranges(world, run, field):
    check_case(world, job_text(run=run), field)


WINDOWS = ['"1000000000000000000000s"', "100_000_000_000_000_000_000", "0", "-5", "1.5", "nan", '"nan"', "inf",
           '"-3s"', "true"]


@pytest.mark.parametrize("window", WINDOWS)
def test_windows_have_ranges(world, window):
    check_case(world, job_text(window_r=window), "streams.R.window")


@pytest.mark.parametrize("eps", ["nan", "inf", "-1", "1e308", '"5"'])
def test_band_eps_is_finite(world, eps):
    check_case(world, job_text(predicate=f'equi = [["R.k", "S.k"]]\nband = [{{left = "R.v", right = "S.w", eps = {eps}}}]'),
               "predicate.band[0].eps")


@pytest.mark.parametrize("ckpt,field", [
    ('dir = "c"\nevery_tuples = 0', "checkpoint.every_tuples"),
    ('dir = "c"\nevery_tuples = 100_000_000_000_000_000_000', "checkpoint.every_tuples"),
    ('dir = "c"\nevery_tuples = 10\nkeep = 0', "checkpoint.keep"),
    ('dir = "c"\nevery_tuples = 10\nkeep = 1_000_000', "checkpoint.keep"),
    ('dir = "c"\nevery = "0s"', "checkpoint.every"),
])
def test_checkpoint_numbers_have_ranges(world, ckpt, field):
    check_case(world, job_text(extra="[checkpoint]\n" + ckpt), field)


# -- 10. one line for the rest ---------------------------------------------------------------
@pytest.mark.parametrize("typ", ["char99999999999", "uint8[100000,100000,100000]", "char0", "uint8[0]", "float128",
                                 "uint8[2000000,100]"])
def test_column_types_have_sizes(world, typ):
    check_case(world, job_text(schema_r=f'{{ k = "int32", big = "{typ}" }}'), "streams.R.schema.big")


@pytest.mark.parametrize("content,fragment", [
    (b"\x00\x01\x02\xff\xfe binary", "not UTF-8"),
    ("[job]\nname = \"caf\xe9\"\n".encode("latin-1"), "not UTF-8"),
    (b"[job\nname = 1", "not valid TOML"),
    (b"", "[input]: required section is missing"),
])
def test_job_files_that_are_not_toml(world, content, fragment):
    tmp, outside, jobdir = world
    (jobdir / "job.toml").write_bytes(content)
    assert_refused(invoke(["check", str(jobdir / "job.toml")]), "job.toml", fragment)


def test_a_folder_is_not_a_job_file(world):
    tmp, outside, jobdir = world
    res = invoke(["check", str(jobdir)])          # click's own check of the argument
    assert res.exit_code == 2 and "is a directory" in res.output


@pytest.mark.parametrize("udf,fragment", [
    ("os:system", "not a Python function"),
    ("../x:f", "expected \"module:function\""),
    ("a b:f", "expected \"module:function\""),
    ("x:y:z", "expected \"module:function\""),
    ("no_such_module_here:f", "cannot import module"),
])
def test_udfs_are_python_functions(world, udf, fragment):
    check_case(world, job_text(predicate=f'theta = [{{udf = {q(udf)}}}]', strategy='name = "psp"'),
               "predicate.theta[0].udf", fragment)


def test_udf_module_runs_only_after_the_rest_is_valid(world):
    tmp, outside, jobdir = world
    (jobdir / "evil.py").write_text(f"open({q(str(outside / 'ran'))}, 'w').write('x')\ndef f(a, b):\n    return True\n")
    check_case(world, job_text(predicate='theta = [{udf = "evil:f"}]', strategy='name = "psp"\nweights = "nan"'),
               "strategy.weights")
    assert not (outside / "ran").exists()


def test_job_folder_is_not_on_sys_path(world):
    """An h5py.py (or any module named like a dependency) next to the job file is never imported."""
    import sys
    tmp, outside, jobdir = world
    text = job_text()
    (jobdir / "job.toml").write_text(text)
    from mpi_join.config import load_job
    load_job(str(jobdir / "job.toml"))
    assert str(jobdir) not in sys.path


def test_cli_rank_counts_start_at_one(world):
    tmp, outside, jobdir = world
    (jobdir / "job.toml").write_text(job_text())
    for cmd in (["check", str(jobdir / "job.toml"), "-n", "0"], ["run", str(jobdir / "job.toml"), "-n", "0"]):
        res = invoke(cmd)
        assert res.exit_code == 2 and "'-n'" in res.output and "0 is not in the range" in res.output, res.output


# -- 2. output never overlaps input --------------------------------------------------------
@pytest.mark.parametrize("inp,out,extra,fragment", [
    ('staged = "staged"', 'dir = "staged/R/out"', "", "output.dir"),
    ('staged = "staged"', 'dir = "staged"', "", "output.dir"),
    ('staged = "out/staged"', 'dir = "out"', "", "output.dir"),
    ('staged = "staged"', 'dir = "out"', '[checkpoint]\ndir = "out/ckpt"\nevery_tuples = 10', "checkpoint.dir"),
    ('staged = "staged"', 'dir = "out"', '[checkpoint]\ndir = "staged"\nevery_tuples = 10', "checkpoint.dir"),
    ('staged = "staged"', 'dir = "out"', '[checkpoint]\ndir = "."\nevery_tuples = 10', "checkpoint.dir"),
    ('staged = "."', 'dir = "out"', "", "output.dir"),
])
def test_directories_never_overlap(world, inp, out, extra, fragment):
    check_case(world, job_text(inp=inp, out=out, extra=extra), fragment, "must be separate")


def test_overlap_is_seen_through_symlinks(world):
    tmp, outside, jobdir = world
    (jobdir / "staged").mkdir()
    os.symlink(jobdir / "staged", jobdir / "out")
    check_case(world, job_text(), "output.dir", "overlaps input.staged", "the same directory")


def test_raw_input_inside_the_output(world):
    streams = ('[streams.R]\nschema = { k = "int32" }\nwindow = "5ms"\n'
               'raw = { path = "out/raw/R", format = "csv", time = "t", time_unit = "ms" }\n'
               '[streams.S]\nschema = { k = "int32" }\nwindow = "5ms"\n')
    check_case(world, job_text(streams=streams), "raw.path", "must be separate")


def test_checkpoint_dir_that_is_a_file(world):
    tmp, outside, jobdir = world
    (jobdir / "ckpt").write_text("a file")
    check_case(world, job_text(extra='[checkpoint]\ndir = "ckpt"\nevery_tuples = 10'), "checkpoint.dir",
               "not a directory")


def test_collect_refuses_overlaps_before_spark(world):
    tmp, outside, jobdir = world
    (jobdir / "job.toml").write_text(job_text())
    (jobdir / "out").mkdir()
    (jobdir / "staged").mkdir()
    os.symlink(jobdir / "staged", jobdir / "link")
    before = tree_digest(outside)
    for out, frag in ((jobdir / "link" / "c", "--out"), (jobdir / "out" / "c", "--out"), (jobdir / "staged", "--out")):
        assert_refused(invoke(["collect", str(jobdir / "out"), "--job", str(jobdir / "job.toml"), "--out", str(out)]),
                       frag)
    assert_refused(invoke(["collect", str(jobdir / "nope"), "--job", str(jobdir / "job.toml"), "--out",
                           str(jobdir / "c")]), "no such run output directory")
    assert tree_digest(outside) == before


# -- 6. staged manifests -----------------------------------------------------------------------
@pytest.fixture
def staged(world):
    tmp, outside, jobdir = world
    path, job = write_job(str(jobdir), equi_job_text(('"5ms"', '"5ms"')),
                          random_streams(np.random.default_rng(0), 300))
    return path, job


def _manifest(job):
    return os.path.join(job.staged, "_manifest.json")


@pytest.mark.parametrize("edit,fragment", [
    (lambda m: "{garbage", "cannot be read"),
    (lambda m: json.dumps(dict(m, total=m["total"] + 1)), "total"),
    (lambda m: json.dumps(dict(m, format="other/9")), "format"),
    (lambda m: json.dumps(dict(m, streams=[1, 2])), "'streams'"),
    (lambda m: json.dumps({**m, "streams": {**m["streams"], "R": {**m["streams"]["R"], "count": -1}}}), "count"),
    (lambda m: json.dumps({**m, "streams": {**m["streams"], "R": {**m["streams"]["R"], "ts_min": 10**9}}}), "ts_min"),
    (lambda m: json.dumps({**m, "streams": {**m["streams"], "R": {**m["streams"]["R"],
                          "schema": {**m["streams"]["R"]["schema"], "_tin": "int64"}}}}), "_tin"),
    (lambda m: json.dumps(dict(m, files={"R": {"part-9.parquet": {"bytes": "x"}}})), "files.R"),
    (lambda m: "[1, 2, 3]", "not a JSON object"),
    (lambda m: "\xff", "cannot be read"),
])
def test_damaged_manifests_are_refused(world, staged, edit, fragment):
    path, job = staged
    with open(_manifest(job)) as f:
        man = json.load(f)
    with open(_manifest(job), "w", encoding="latin-1") as f:
        f.write(edit(man))
    for cmd in (["check", path, "-n", "3"], ["oracle", path]):
        assert_refused(invoke(cmd), "_manifest.json", fragment)


def test_deleted_or_added_part_files_are_refused_at_check(world, staged):
    path, job = staged
    part = sorted(os.listdir(os.path.join(job.staged, "S")))[0]
    shutil.copy(os.path.join(job.staged, "S", part), os.path.join(job.staged, "S", "part-extra.parquet"))
    assert_refused(invoke(["check", path, "-n", "3"]), "part-extra.parquet", "not in the manifest")
    os.remove(os.path.join(job.staged, "S", "part-extra.parquet"))
    os.remove(os.path.join(job.staged, "S", part))
    assert_refused(invoke(["check", path, "-n", "3"]), os.path.join("S", part))


# -- 7. Slurm scripts cannot be injected -------------------------------------------------------
SLURM_BAD = [
    (["--time", "01:00:00\ntouch INJECTED"], "--time"),
    (["--partition", "debug\rtouch INJECTED"], "--partition"),
    (["--sbatch-opt", "--account=x\ntouch INJECTED"], "--sbatch-opt"),
    (["--sbatch-opt", "touch INJECTED"], "--sbatch-opt"),
    (["--python", "/usr/bin/python3\ntouch INJECTED"], "--python"),
    (["--collect-out", "/tmp/c\ttouch"], "--collect-out"),
    (["--spark-master", "local\x1b[2J"], "--spark-master"),
    (["--nodes", "0"], "--nodes"),
    # Unicode line breaks (U+2028, U+0085) were accepted: every one is refused
    (["--partition", "debug\u2028touch INJECTED"], "--partition"),
    (["--time", "01:00:00\u0085touch INJECTED"], "--time"),
    (["--sbatch-opt", "--account=x\u2029y"], "--sbatch-opt"),
]


@pytest.mark.parametrize("opts,field", SLURM_BAD, ids=[o[0][0] + str(i) for i, o in enumerate(SLURM_BAD)])
def test_slurm_values_with_control_characters_are_refused(world, opts, field):
    tmp, outside, jobdir = world
    (jobdir / "job.toml").write_text(job_text())
    before = tree_digest(outside)
    assert_refused(invoke(["slurm", str(jobdir / "job.toml"), *opts]), field)
    assert not (jobdir / "slurm").exists() or not os.listdir(jobdir / "slurm")
    assert tree_digest(outside) == before


def test_slurm_job_folder_with_a_newline_is_refused(world):
    tmp, outside, jobdir = world
    d = tmp / "evil\ntouch INJECTED"
    d.mkdir()
    (d / "job.toml").write_text(job_text())
    assert_refused(invoke(["slurm", str(d / "job.toml")]), "control character")


def test_slurm_never_imports_the_jobs_udfs(world):
    tmp, outside, jobdir = world
    (jobdir / "evil.py").write_text(f"open({q(str(outside / 'ran'))}, 'w').write('x')\ndef f(a, b):\n    return True\n")
    (jobdir / "job.toml").write_text(job_text(predicate='theta = [{udf = "evil:f"}]', strategy='name = "psp"'))
    res = invoke(["slurm", str(jobdir / "job.toml"), "--out", str(jobdir / "scripts")])
    assert res.exit_code == 0, res.output
    assert not (outside / "ran").exists()


def test_slurm_hostile_but_printable_values_run_as_data(world):
    """Values full of shell syntax (no control characters) are rendered quoted: bash -n passes, and
    the script run with stub sbatch/srun/python commands runs nothing that was injected."""
    tmp, outside, jobdir = world
    (jobdir / "job.toml").write_text(job_text())
    evil = "$(touch INJ1);`touch INJ2`;'\"; touch INJ3 #"
    for chain in ([], ["--chain"]):
        out = jobdir / ("scripts" + ("-chain" if chain else ""))
        res = invoke(["slurm", str(jobdir / "job.toml"), "--time", evil, "--partition", evil, "--sbatch-opt",
                      "--comment=" + evil, "--spark-master", evil, "--collect-out", str(tmp / evil.replace("/", "_")),
                      "--out", str(out), "--python", str(tmp / "stub" / "python"), *chain])
        assert res.exit_code == 0, res.output
        stub = tmp / "stub"
        stub.mkdir(exist_ok=True)
        for name in ("sbatch", "srun", "python", "mpiexec"):
            (stub / name).write_text("#!/bin/sh\necho \"$0 $*\" >> \"$STUBLOG\"\necho 1\n")
            os.chmod(stub / name, 0o755)
        work = tmp / "work"
        work.mkdir(exist_ok=True)
        for f in sorted(os.listdir(out)):
            p = subprocess.run(["bash", "-n", str(out / f)], capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
            env = dict(os.environ, PATH=f"{stub}:{os.environ['PATH']}", STUBLOG=str(tmp / "stub.log"),
                       SLURM_NTASKS="4", SLURM_JOB_NUM_NODES="1", SLURM_JOB_NODELIST="n1", SLURM_TASKS_PER_NODE="4")
            subprocess.run(["bash", str(out / f)], cwd=work, env=env, capture_output=True, text=True, timeout=60)
        for inj in ("INJ1", "INJ2", "INJ3"):
            assert not (work / inj).exists() and not (jobdir / inj).exists() and not (out / inj).exists()
            assert not any(inj == n for _, _, fs in os.walk(tmp) for n in fs)
        assert (tmp / "stub.log").exists()


def test_a_module_next_to_the_job_never_shadows_a_dependency(world):
    """`python -m mpi_join` (what mpiexec starts on every rank) run from the job's folder: a
    click.py there is not imported."""
    import sys
    tmp, outside, jobdir = world
    (jobdir / "click.py").write_text("raise SystemExit('SHADOWED')\n")
    p = subprocess.run([sys.executable, "-m", "mpi_join", "--version"], cwd=jobdir, capture_output=True, text=True)
    assert p.returncode == 0 and "SHADOWED" not in p.stderr + p.stdout, p.stderr


def test_symlinked_results_or_metrics_are_refused(world):
    from mpi_join.errors import JobError
    from mpi_join.ranks import MARKER, _prepare_output
    tmp, outside, jobdir = world
    for sub in ("results", "metrics"):
        out = jobdir / f"out-{sub}"
        out.mkdir()
        (out / MARKER).write_text("x")
        os.symlink(outside / "victim", out / sub)
        before = tree_digest(outside)
        with pytest.raises(JobError, match=f"{sub}/ is a symbolic link"):
            _prepare_output(str(out))
        assert tree_digest(outside) == before
    out = jobdir / "out-link"
    os.symlink(outside / "victim", out)
    with pytest.raises(JobError, match="output.dir is a symbolic link"):
        _prepare_output(str(out))


@pytest.mark.parametrize("value", ["garbage", "0:3", "1:", ":1", "1:x", "-1:2", "9:1"])
def test_fault_injection_values_that_are_not_understood_are_refused(monkeypatch, value):
    from mpi_join.errors import ConfigError
    from mpi_join.slaves.worker import fault_spec
    monkeypatch.setenv("MPI_JOIN_FAULT", value)
    with pytest.raises(ConfigError, match="MPI_JOIN_FAULT"):
        fault_spec(4)


def test_dir_lock_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path):
    from mpi_join.errors import JobError
    from mpi_join.storage.paths import DirLock
    a = DirLock(str(tmp_path / "d"), "output.dir").acquire()
    with pytest.raises(JobError, match=r"output.dir: .* is in use by another run \(host .*, pid \d+, started"):
        DirLock(str(tmp_path / "d"), "output.dir").acquire()
    a.release()
    said = []
    with open(tmp_path / "d" / ".mpi-join.lock", "w") as f:
        json.dump({"host": __import__("socket").gethostname(), "pid": 2 ** 22 + 11}, f)
    b = DirLock(str(tmp_path / "d"), "output.dir", say=said.append).acquire()
    assert said and "stale" in said[0] and "not running" in said[0]
    b.release()
    assert not (tmp_path / "d" / ".mpi-join.lock").exists()
    with open(tmp_path / "d" / ".mpi-join.lock", "w") as f:
        json.dump({"host": "elsewhere", "pid": 1}, f)
    with pytest.raises(JobError, match="host elsewhere"):
        DirLock(str(tmp_path / "d"), "output.dir").acquire()
    old = __import__("time").time() - 600
    os.utime(tmp_path / "d" / ".mpi-join.lock", (old, old))
    c = DirLock(str(tmp_path / "d"), "output.dir", say=said.append).acquire()
    assert "has not touched it" in said[-1]
    c.release()


def test_hydra_exit_codes_name_the_killed_rank():
    from mpi_join.launch import exit_codes, killed_line
    codes = exit_codes("[mpiexec@vm] Exit codes: [n1] 0,0 [n2] 9,0\n")
    assert codes == [(0, "n1", 0), (1, "n1", 0), (2, "n2", 9), (3, "n2", 0)]
    assert killed_line(codes).startswith("mpi-join: error: rank 2 on host n2 was killed (SIGKILL")
    line = killed_line(exit_codes("Exit codes: [a] 9,0 [b] 137"))
    assert line.startswith("mpi-join: error: ranks 0 on a, 2 on b ended by SIGKILL: one was killed outright")
    assert killed_line(exit_codes("Exit codes: [vm] 0,2,2")) is None
    assert exit_codes("something else") == []


@pytest.mark.parametrize("said,named", [
    ("mpi-join: rank 1 failed: Exception: Other MPI error, error stack:", True),     # a transfer from the dead peer
    ("mpi-join: rank 1 failed: ValueError: a bad value", False),                      # rank 1's own failure
])
def test_a_rank_that_failed_in_a_transfer_from_a_killed_peer_does_not_hide_it(tmp_path, capsys, said, named):
    """Under load a surviving rank may fail first, with MPI's own error in a transfer from the rank
    that was killed (process_vm_readv: no such process); the killed rank is still named, in one
    line. A rank's own failure is the cause, and no killed line is added to it."""
    from mpi_join.launch import Launch
    (tmp_path / "hydra_pmi_proxy").write_text("")
    fake = tmp_path / "mpiexec"
    fake.write_text(f"#!/bin/sh\necho '{said}' >&2\necho '[mpiexec@vm] Exit codes: [vm] 0,1,9'\nexit 9\n")
    fake.chmod(0o755)
    assert Launch([str(fake), "-n", "3"]).wait() == 9
    err = capsys.readouterr().err
    assert said in err
    lines = [ln for ln in err.splitlines() if ln.startswith("mpi-join: error:")]
    assert lines == (["mpi-join: error: rank 2 on host vm was killed (SIGKILL; the OOM killer or a kill -9 do this); "
                      "the job was aborted; with checkpoints, `--resume` continues it"] if named else []), err


def test_a_lock_held_by_a_killed_unreaped_process_is_stale(tmp_path):
    """A holder killed outright may linger as a zombie until its parent reaps it: not running."""
    import signal
    import socket
    import sys
    from mpi_join.storage.paths import DirLock, _proc_start
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = _proc_start(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    __import__("time").sleep(0.3)                  # dead, not reaped: a zombie
    (tmp_path / "d").mkdir()
    with open(tmp_path / "d" / ".mpi-join.lock", "w") as f:
        json.dump({"host": socket.gethostname(), "pid": child.pid, "proc_start": start}, f)
    said = []
    DirLock(str(tmp_path / "d"), "output.dir", say=said.append).acquire().release()
    child.wait()
    assert said and "is not running" in said[0]


@pytest.mark.parametrize("args,says", [
    (["--rate", "nan"], "'--rate': 'nan' is not a finite number"),
    (["--rate", "inf"], "'--rate'"),
    (["--rate", "0"], "'--rate'"),
    (["--tuples", "-5"], "'--tuples': -5 is not in the range"),
    (["--skew", "nan"], "'--skew'"),
    (["--count-window", "0"], "'--count-window'"),
])
def test_generate_refuses_numbers_out_of_range_and_nan_in_one_line(tmp_path, args, says):
    """NaN passed click's range checks (every comparison with it is false) and made every
    timestamp INT64_MIN; a negative tuple count reached numpy's error."""
    res = CliRunner().invoke(main, ["generate", "equi", "--out", str(tmp_path / "g"), *args])
    assert res.exit_code == 2 and says in res.output, res.output
    assert not (tmp_path / "g").exists()


def test_run_local_with_more_ranks_than_threads_is_refused_in_one_line(tmp_path):
    """-n 65536 is inside the rank range, but not a number of threads one process may start:
    one line and exit 2 (a `can't start new thread` traceback and a hang before)."""
    res = CliRunner().invoke(main, ["generate", "equi", "--out", str(tmp_path), "--tuples", "200"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["run", "--local", "-n", "65536", str(tmp_path / "job.toml")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mpi-join: error: run --local -n 65536: at most"), res.stderr


@pytest.mark.parametrize("where,says", [("staged/R", "overlaps input.staged"), ("out/results", "overlaps output.dir"),
                                        ("full", "exists and is not an empty directory")])
def test_oracle_out_stays_out_of_the_jobs_directories_and_replaces_nothing(tmp_path, where, says):
    res = CliRunner().invoke(main, ["generate", "equi", "--out", str(tmp_path), "--tuples", "300"])
    assert res.exit_code == 0, res.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "part-r0000-00000.parquet").write_text("a user's file")
    before = tree_digest(str(tmp_path))
    res = CliRunner().invoke(main, ["oracle", str(tmp_path / "job.toml"), "--out", str(tmp_path / where)])
    assert_refused(res, "--out: ", says)
    assert tree_digest(str(tmp_path)) == before
    res = CliRunner().invoke(main, ["oracle", str(tmp_path / "job.toml"), "--out", str(tmp_path / "new")])
    assert res.exit_code == 0 and os.listdir(tmp_path / "new"), res.output


def test_a_job_file_with_a_utf8_byte_order_mark_is_read(tmp_path):
    """Windows editors write one; it was "Invalid statement (at line 1, column 1)"."""
    from conftest import equi_job_text as ejt
    (tmp_path / "job.toml").write_bytes(b"\xef\xbb\xbf" + ejt(('"5ms"', '"5ms"')).encode())
    res = CliRunner().invoke(main, ["explain", str(tmp_path / "job.toml"), "-n", "3"])
    assert "Invalid statement" not in res.output and "not valid TOML" not in res.output, res.output


def test_a_landing_path_that_is_a_file_is_named_as_one(tmp_path):
    from mpi_join.config import load_job
    from mpi_join.errors import InputError
    from mpi_join.storage.spark.follow import landing_dir
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "R").write_text("t,k,v\n")
    text = equi_job_text(('"5ms"', '"5ms"')).replace(
        "[streams.S]", '[streams.S]\nraw = { path = "raw/S", format = "csv", time = "t", time_unit = "ms" }').replace(
        "[streams.R]\n", '[streams.R]\nraw = { path = "raw/R", format = "csv", time = "t", time_unit = "ms" }\n')
    (tmp_path / "job.toml").write_text(text)
    job = load_job(str(tmp_path / "job.toml"))
    with pytest.raises(InputError, match="landing directory of stream 'R' is a file, not a directory"):
        landing_dir(job.streams[0])


def test_tail_of_a_staged_directory_is_refused_in_one_line(tmp_path):
    arrays = random_streams(np.random.default_rng(1), 100)
    path, job = write_job(str(tmp_path), equi_job_text(('"5ms"', '"5ms"')), arrays)
    res = CliRunner().invoke(main, ["tail", job.staged, "--no-follow"])
    assert_refused(res, "a staged directory", "not a run's output")


def test_verify_of_an_unfinished_run_says_so(tmp_path):
    """A run's output without _SUCCESS (still running, or stopped) was DIFFERENT with no word why."""
    arrays = random_streams(np.random.default_rng(2), 400)
    path, job = write_job(str(tmp_path), equi_job_text(('"5ms"', '"5ms"')), arrays)
    os.makedirs(os.path.join(job.output, "results"))
    res = CliRunner().invoke(main, ["verify", job.output, "--job", path])
    assert res.exit_code == 1, res.output
    assert "the run has not finished (no _SUCCESS)" in res.output and "DIFFERENT" in res.output, res.output


@pytest.mark.parametrize("left", ["file", "link"])
def test_run_overwrite_refuses_a_results_dir_holding_what_mpi_join_did_not_write(tmp_path, left):
    """--overwrite wrote _SUCCESS beside a user's own Parquet file or a link left in results/,
    which that _SUCCESS does not name (collect then refused the finished run, a reader of
    results/*.parquet counted it in): one line, nothing touched. (Another file of the user's
    stays: tests/test_user_files.py.)"""
    res = CliRunner().invoke(main, ["generate", "equi", "--out", str(tmp_path), "--tuples", "200"])
    assert res.exit_code == 0, res.output
    rdir = tmp_path / "out" / "results"
    rdir.mkdir(parents=True)
    (tmp_path / "mine.txt").write_text("keep me")
    if left == "file":
        (rdir / "notes.parquet").write_text("a user's")
    else:
        os.symlink(tmp_path / "mine.txt", rdir / "linked.parquet")
    res = CliRunner().invoke(main, ["run", "--local", "-n", "3", "--overwrite", str(tmp_path / "job.toml")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "results/, where a run's part files are its answer" in lines[0], res.stderr
    assert not (tmp_path / "out" / "_SUCCESS").exists() and (tmp_path / "mine.txt").read_text() == "keep me"


def test_stage_at_rest_refuses_a_damaged_parquet_file_in_one_line_before_spark(tmp_path):
    """It printed Spark's FAILED_READ_FILE traceback (about 250 lines) and exited 1."""
    from conftest import run_cli_no_spark
    import pyarrow as pa
    import pyarrow.parquet as pq
    for s in "RS":
        (tmp_path / "raw" / s).mkdir(parents=True)
        pq.write_table(pa.table({"t": [1, 2], "k": [1, 2], "v": [0.5, 0.25]}), tmp_path / "raw" / s / "a.parquet")
    (tmp_path / "raw" / "S" / "junk.parquet").write_bytes(os.urandom(300))
    text = equi_job_text(('"5ms"', '"5ms"'))
    for s in "RS":
        text = text.replace(f"[streams.{s}]\n", f'[streams.{s}]\nraw = {{ path = "raw/{s}", format = "parquet", '
                                                 f'time = "t", time_unit = "ms" }}\n')
    (tmp_path / "job.toml").write_text(text)
    p, spark = run_cli_no_spark(tmp_path, "stage", str(tmp_path / "job.toml"))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-2000:]
    assert "junk.parquet: not a readable Parquet file of stream 'S'" in lines[0] and spark == [], lines


def test_check_and_explain_of_a_job_with_raw_input_and_nothing_staged_judge_the_job_alone(tmp_path):
    """They refused with "staged input directory not found"; now they explain the plan from the
    job and say what they could not check. A job with no raw input still needs its staged input."""
    text = equi_job_text(('"5ms"', "20"))
    for s in "RS":
        text = text.replace(f"[streams.{s}]\n", f'[streams.{s}]\nraw = {{ path = "raw/{s}", format = "csv", '
                                                 f'time = "t", time_unit = "ms" }}\n')
    (tmp_path / "job.toml").write_text(text)
    res = CliRunner().invoke(main, ["check", str(tmp_path / "job.toml")])
    assert res.exit_code == 0 and "nothing staged yet" in res.output and "not checked" in res.output, res.output
    res = CliRunner().invoke(main, ["explain", str(tmp_path / "job.toml"), "-n", "3"])
    assert res.exit_code == 0 and "the plan from the job alone" in res.output, res.output
    assert "S: 20 tuples (count window)" in res.output and "known once staged" in res.output, res.output
    (tmp_path / "plain.toml").write_text(equi_job_text(('"5ms"', '"5ms"')))
    res = CliRunner().invoke(main, ["check", str(tmp_path / "plain.toml")])
    assert_refused(res, "staged input directory not found")
