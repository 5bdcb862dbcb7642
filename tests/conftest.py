"""Shared helpers: build jobs from arrays, launch real mpiexec runs with a hang guard."""
import json
import os
import subprocess
import sys
import time
import textwrap

import numpy as np
import pytest

from mpi_join.config import load_job
from mpi_join.storage.staged import write_staged

HERE = os.path.dirname(os.path.abspath(__file__))
# test-only strategies (tests/relay_strategy.py) are registered through the plugin variable, on
# this process and on every rank it launches; tests/ is importable there too (UDF fixtures)
os.environ["MPI_JOIN_STRATEGIES"] = "relay_strategy,graph_strategies,broadcast_strategy,stripe_strategy"
os.environ["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

# Every Spark JVM a test starts (sessions here, stagers and collects it launches) does small work:
# set up for a short life (session.SHORT_LIVED: the C1 compiler only and the serial collector),
# whatever the command would choose for a large input. tests/test_spark.py on 3 workers: 0.74x
# the machine's CPU seconds of the default (the JIT's threads ran beside every other test).
from mpi_join.storage.spark.session import SHORT_LIVED  # noqa: E402
os.environ.setdefault("MPI_JOIN_SPARK_JAVA_OPTS", SHORT_LIVED)

# Every rank and CLI run a test launches imports the package anew: with PYTHONDONTWRITEBYTECODE
# set (as on the CI machines) none would write its bytecode, and each would compile every module
# from source (an idle 3-rank run took 1.29 times as long without them). Written once here, as
# pip does for an installed package; a stale one is recompiled.
import compileall  # noqa: E402
import mpi_join  # noqa: E402
for _d in (os.path.dirname(mpi_join.__file__), HERE):
    compileall.compile_dir(_d, quiet=2, maxlevels=0 if _d == HERE else 10)
# pytest rewrites the asserts of every test module it imports and, unless bytecode writing is off,
# caches the result in tests/__pycache__: without the cache each pytest process (each xdist worker)
# rewrote and compiled all of them again, about 1.6 s of CPU each
sys.dont_write_bytecode = False

BIN = os.path.dirname(sys.executable)
MPIEXEC = os.path.join(BIN, "mpiexec")
RUN_TIMEOUT = 180


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: launches mpiexec, Spark or Slurm (the full tier; "
                                       "`pytest -m 'not slow'` is the fast tier)")
    config.addinivalue_line("markers", "xdist_group(name): run on one pytest-xdist worker with the rest of its group")
    config.addinivalue_line("markers", "flink: compares with Apache Flink (the Flink tier, also slow; `make flink` "
                                       "builds its environment)")
    config.addinivalue_line("markers", "services: against real HDFS, YARN and Kafka daemons that the tests start "
                                       "(`mpi-join dev-services`; the services tier, also slow)")
    config.addinivalue_line("markers", "serial: not beside the first phase: in make test's second phase, one module "
                                       "of its machine-wide ones beside another (it starts something the whole machine "
                                       "shares)")
    config.addinivalue_line("markers", "alone: serial, and its timing does not hold beside any other run: make test's "
                                       "third phase, one test at a time")


_LAUNCHES = ("run_mpi(", "run_mpi)", "MPIEXEC", "_expect_run_error(", "spark_session", "spark_stream_join", "slurm", "kill_then_resume(",
             "kill_after_checkpoints(", "fault_after_checkpoints(", "crash_then_resume(")


# Modules that start something the whole machine shares (a Slurm daemon, network namespaces
# standing for hosts, a Spark standalone cluster): they failed beside the first phase's runs, so
# they are `serial`: `make test` runs the rest on three workers, then these on two, each module one
# pytest-xdist group (one module's daemons beside another's, never beside themselves), then the
# `alone` tests one at a time (README, Development). A module can also set SERIAL = True or
# ALONE = True, or a test carry the mark. `make fast` has none of them.
MACHINE_WIDE = ("test_slurm", "test_multihost", "test_spark_cluster")


def pytest_itemcollected(item):
    """pytest-xdist groups (--dist loadgroup), set as each test is collected: xdist reads them in
    its own pytest_collection_modifyitems, which runs before this file's."""
    if item.module.__name__ in MACHINE_WIDE:
        item.add_marker(pytest.mark.xdist_group(f"machine-wide:{item.module.__name__}"))
        return
    shared = _module_fixture(item)
    if shared:
        item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{shared}"))


def pytest_collection_modifyitems(items):
    """Tests that launch mpiexec, Spark or Slurm are the slow tier: every test of a module that
    sets SLOW = True, and any other test whose body launches one. Each test carries the strategy
    it counts against (user_properties: the summary reads it from the report, also under xdist)."""
    import inspect
    launches = {}         # per test function (its parametrized cases share it): its source's verdict
    for item in items:
        fn = getattr(item, "function", None)
        if fn is not None and fn not in launches and not getattr(item.module, "SLOW", False):
            try:
                src = inspect.getsource(fn)
            except (OSError, TypeError):
                src = ""
            launches[fn] = any(k in src for k in _LAUNCHES)
        if getattr(item.module, "SLOW", False) or launches.get(fn):
            item.add_marker(pytest.mark.slow)
        if getattr(item.module, "ALONE", False):
            item.add_marker(pytest.mark.alone)
        if item.module.__name__ in MACHINE_WIDE or getattr(item.module, "SERIAL", False) or \
                item.get_closest_marker("alone"):
            item.add_marker(pytest.mark.serial)
        name = _strategy_of(item)
        if name:
            item.user_properties.append(("strategy", name))


def _module_fixture(item):
    """The first module-scoped fixture a test uses (a Spark session, Flink's run of every case, a
    crashed job the module's tests copy), or None. Its tests are one pytest-xdist group, so that
    the fixture is built once, on one worker, not once on each."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name in getattr(item, "fixturenames", ()):
        d = defs.get(name)
        if d and d[-1].scope in ("module", "package", "session") and d[-1].baseid:   # ours, not pytest's
            return name
    return None


# Seconds of the full suite each strategy may take (its files' tests plus its rows of the shared
# matrices, each test's own duration in make test, where it runs beside the other
# workers), so that every strategy still fits when more are added: the budgets sum to 1,315 s
# of test time, about 7.3 minutes of the first phase's wall time on 3 workers. A test counts
# against its `strategy` parameter, else its module's STRATEGY; the test-only strategies count
# as "runtime". Each strategy's budget is in its registry entry (suite_budget_s). The summary
# prints each total beside its budget; nothing fails on time.
RUNTIME_BUDGET_S = 240
_spent = {}


def _budgets():
    from mpi_join import strategies
    return {**{n: strategies.get(n).suite_budget_s for n in strategies.names() if not strategies.get(n).testing},
            "runtime": RUNTIME_BUDGET_S}


def _strategy_of(item):
    """The budget a test counts against: its `strategy` parameter's, else its module's STRATEGY's
    (a test-only strategy's is the runtime's)."""
    from mpi_join import strategies
    params = getattr(getattr(item, "callspec", None), "params", {})
    name = params.get("strategy")
    if not isinstance(name, str) or strategies.get(name) is None:
        name = getattr(item.module, "STRATEGY", None)
    info = strategies.get(name) if name else None
    return "runtime" if info is not None and info.testing else name


def pytest_runtest_logreport(report):
    name = dict(report.user_properties).get("strategy")
    if name:
        _spent[name] = _spent.get(name, 0.0) + report.duration


# make test's three phases of the full suite (-m): the first on SUITE_JOBS workers, the machine-wide
# modules on two, the `alone` tests one at a time; the last prints the budgets of all three (the
# others leave their figures in pytest's cache). The Flink tier (-m flink) runs after them.
PHASES = ("not serial and not flink and not services", "serial and not alone and not flink and not services",
          "alone and not flink and not services")
_SPENT_KEY = "mpi-join/spent-first-phase"


def _full_suite(config):
    """Budgets are for the whole suite: a tier (-m), a selection (-k) or some files say nothing
    about them, and printing them there would only alarm. make test's phases are the whole suite
    between them."""
    o = config.option
    if (o.markexpr and o.markexpr not in PHASES) or o.keyword:
        return False
    here = os.path.dirname(os.path.abspath(__file__))
    return all(os.path.abspath(str(a)) in (here, os.path.dirname(here)) for a in config.args)


def pytest_terminal_summary(terminalreporter):
    config = terminalreporter.config
    if not _full_suite(config):
        return
    spent = dict(_spent)
    phase = PHASES.index(config.option.markexpr) if config.option.markexpr in PHASES else None
    if phase:
        for name, s in (config.cache.get(_SPENT_KEY, None) or {}).items():
            spent[name] = spent.get(name, 0.0) + s
    if phase is not None and phase < len(PHASES) - 1:
        config.cache.set(_SPENT_KEY, spent)
        terminalreporter.write_line(f"seconds per strategy: printed at the end of the last phase (-m \"{PHASES[-1]}\")")
        return
    if phase is not None:
        config.cache.set(_SPENT_KEY, {})
    if not spent:
        return
    terminalreporter.section("seconds per strategy (budget)")
    budgets = _budgets()
    for name, s in sorted(spent.items()):
        budget = budgets.get(name)
        over = "  OVER BUDGET" if budget and s > budget else ""
        terminalreporter.write_line(f"{name:<10} {s:6.1f} of {budget}{over}")
    terminalreporter.write_line(f"{'all':<10} {sum(spent.values()):6.1f} of {sum(budgets.values())} "
                                f"(the rest of the suite: the pipeline, Spark, Slurm, the CLI)")


def mpi_join_pids(candidates, rank=None, marker=""):
    """The pids among `candidates` of mpi_join processes (ranks, or Hydra proxies that start
    them) whose command line holds `marker` (a string, or a tuple of strings it holds all of);
    only those of MPI rank `rank` when given."""
    markers = [m.encode() for m in ((marker,) if isinstance(marker, str) else marker)]
    out = []
    for pid in candidates:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b"mpi_join" not in cmd or not all(m in cmd for m in markers):
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if rank is None or f"PMI_RANK={rank}".encode() in env:
            out.append(int(pid))
    return out


def mpi_join_cmd(*args):
    return [sys.executable, "-m", "mpi_join", *args]


_NO_SPARK = ("import atexit, json, sys\n"
             "flag = sys.argv.pop(1)\n"
             "atexit.register(lambda: open(flag, 'w').write(json.dumps(sorted(m for m in sys.modules if m == 'pyspark' "
             "or m.startswith('pyspark.')))))\n"
             "from mpi_join.cli import main\n"
             "main(prog_name='mpi-join')\n")


def run_cli_no_spark(tmp, *args, timeout=120):
    """`mpi-join ARGS` as run_cli, also telling whether it imported pyspark (so whether it could
    have started a JVM): (completed process, the pyspark modules it imported)."""
    flag = os.path.join(str(tmp), f".imports-{os.getpid()}-{time.monotonic_ns()}")
    p = subprocess.run([sys.executable, "-c", _NO_SPARK, flag, *args], capture_output=True, text=True, timeout=timeout)
    with open(flag) as f:
        mods = json.load(f)
    os.remove(flag)
    return p, mods


def run_mpi(n, *args, timeout=RUN_TIMEOUT, env=None):
    """Launch `mpiexec -n n mpi-join ARGS`; a hang fails the test instead of stalling the suite."""
    e = dict(os.environ, MPI_JOIN_QUIET="1")
    e.update(env or {})
    try:
        return subprocess.run([MPIEXEC, "-n", str(n), *mpi_join_cmd(*args)], capture_output=True,
                              text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mpiexec -n {n} {' '.join(args)} did not finish within {timeout} s (a rank hangs)")


def run_local(n, *args, timeout=RUN_TIMEOUT, env=None):
    """`mpi-join run --local -n n ARGS` (ARGS as run_mpi's, starting with "run") in this process:
    the in-process runtime (runtime/local.py), the same ranks' code as under mpiexec, without a
    process per rank. On a thread, so that a hang fails the test instead of stalling the suite."""
    import threading
    assert args[0] == "run", args
    done = []
    e = dict(env or {}, MPI_JOIN_QUIET="1")
    t = threading.Thread(target=lambda: done.append(_invoke(["run", "--local", "-n", str(n), *args[1:]], e)),
                         daemon=True)
    t.start()
    t.join(timeout)
    if not done:
        pytest.fail(f"run --local -n {n} {' '.join(args[1:])} did not finish within {timeout} s (a rank hangs)")
    return done[0]


def _invoke(args, env=None):
    from click.testing import CliRunner
    from mpi_join.cli import main
    r = CliRunner().invoke(main, [str(a) for a in args], prog_name="mpi-join", env=env)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        import traceback
        raise AssertionError("mpi-join " + " ".join(map(str, args)) + " raised:\n"
                             + "".join(traceback.format_exception(r.exception)) + r.stderr)
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr)


def run_cli(*args, timeout=300, env=None, cwd=None):
    return subprocess.run(mpi_join_cmd(*args), capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def spark():
    """One local Spark session per module (its tests are one xdist group: _module_fixture). A
    test that stages or collects in this process (`cli("stage", ...)`) has the command's
    getOrCreate take it, so no second JVM starts, where how a stager's or collect's own process
    starts or ends is not what it tests; those that signal one run it as a process of its own."""
    from mpi_join.storage.spark.session import spark_session
    yield spark_session("local[2]", "mpi-join-tests", small=True)


@pytest.fixture(scope="session")
def services(tmp_path_factory):
    """HDFS, YARN and Kafka for the services tier (tests/test_services.py, test_kafka.py), started
    once by the project's own DevServices and stopped after the last test; its tests run in one
    process (make test's `-m services` step), so every one of them shares these daemons."""
    from mpi_join.services.daemons import DevServices
    ds = DevServices(str(tmp_path_factory.mktemp("services")), progress=print)
    t0 = time.monotonic()
    ds.start(["hdfs", "yarn", "kafka"])
    print(f"services started in {time.monotonic() - t0:.1f} s: {ds.endpoints()}")
    yield ds
    ds.stop()


def cli(*args):
    """`mpi-join ARGS` run in this process by click's test runner: the same command and the same
    one-line errors as `run_cli`, without the new interpreter (about 0.8 s of imports each). For
    commands that launch nothing (check, explain, plan, generate, oracle, verify, --help), and
    for `stage` where the test holds a Spark session (the command's getOrCreate takes it, so no
    second JVM starts); a test of what a process imports, of its exit by a signal, or of how a
    command starts its own JVM uses `run_cli`."""
    return _invoke(args)


def job_toml(streams, predicate, strategy='name = "hash"', run="", extra="", inp='staged = "staged"',
             out='dir = "out"', name="t"):
    """A job file from its parts: `streams` is the [streams.X] tables, the others a table's body."""
    return (f'[job]\nname = "{name}"\nts_unit = "ms"\n[input]\n{inp}\n[output]\n{out}\n{streams}'
            f'[predicate]\n{predicate}\n[strategy]\n{strategy}\n[run]\n{run}\n{extra}\n')


def stream_toml(name, schema, window=None, raw=None):
    """One [streams.NAME] table; `schema` is the TOML inline table's body."""
    return (f"[streams.{name}]\nschema = {{ {schema} }}\n" + (f"window = {window}\n" if window else "")
            + (f"raw = {raw}\n" if raw else ""))


def equi_job_text(windows, keys=1, strategy="hash", extra_strategy="", run="", predicate=None):
    """A job of streams R and S; `windows` (R's, S's) as TOML values, or None when the predicate
    gives an interval."""
    on = '[["R.k", "S.k"]]' if keys == 1 else '[["R.k", "S.k"], ["R.k2", "S.k2"]]'
    pred = f"equi = {on}" if predicate is None else predicate
    return textwrap.dedent(f"""\
        [job]
        name = "t"
        ts_unit = "ms"
        [input]
        staged = "staged"
        [output]
        dir = "out"
        [streams.R]
        schema = {{ k = "int32", k2 = "int16", v = "float32" }}
        {f"window = {windows[0]}" if windows else ""}
        [streams.S]
        schema = {{ k = "int64", k2 = "int16", w = "float64" }}
        {f"window = {windows[1]}" if windows else ""}
        [predicate]
        {pred}
        [strategy]
        name = "{strategy}"
        {extra_strategy}
        [run]
        {run}
        """)


def random_streams(rng, n, key_range=6, ts_step=3, k2_range=2):
    """Two random streams with a dense seq, non-decreasing ts (with ties) and small key domains."""
    sid = rng.integers(0, 2, n)
    ts = np.cumsum(rng.integers(0, ts_step + 1, n)).astype(np.int64)
    R = np.zeros(int((sid == 0).sum()), [("seq", "i8"), ("ts", "i8"), ("k", "i4"), ("k2", "i2"), ("v", "f4")])
    S = np.zeros(int((sid == 1).sum()), [("seq", "i8"), ("ts", "i8"), ("k", "i8"), ("k2", "i2"), ("w", "f8")])
    for arr, s in ((R, 0), (S, 1)):
        arr["seq"] = np.nonzero(sid == s)[0]
        arr["ts"] = ts[sid == s]
        arr["k"] = rng.integers(0, key_range, len(arr))
        arr["k2"] = rng.integers(0, k2_range, len(arr))
    R["v"] = rng.uniform(0, 20, len(R))
    S["w"] = rng.uniform(0, 20, len(S))
    return [R, S]


def text_columns(arrays, rng, cols):
    """`arrays` with one more text column each: cols[i] = (name, width) for arrays[i], random
    lowercase bytes of 0 to `width` characters."""
    out = []
    for a, (col, width) in zip(arrays, cols):
        b = np.zeros(len(a), a.dtype.descr + [(col, f"S{width}")])
        for n in a.dtype.names:
            b[n] = a[n]
        b[col] = [bytes(rng.integers(97, 123, rng.integers(0, width + 1), dtype=np.uint8)) for _ in range(len(a))]
        out.append(b)
    return out


def with_text_columns(text, arrays, rng):
    """The job text and arrays of `equi_job_text`/`random_streams` with a text column on each
    stream (R.tag char6, S.name char12)."""
    text = text.replace('v = "float32" }', 'v = "float32", tag = "char6" }').replace(
        'w = "float64" }', 'w = "float64", name = "char12" }')
    return text, text_columns(arrays, rng, [("tag", 6), ("name", 12)])


def rerecord(job):
    """Record the staged part files as they are now in the manifest, as a tool that writes the
    staged layout itself would: a part edited after staging then reaches the reader's schema
    and content checks (a part that no longer matches its record is refused before them)."""
    import json
    from mpi_join.storage.staged import MANIFEST, hash_input
    p = os.path.join(job.staged, MANIFEST)
    man = json.load(open(p))
    man["files"] = hash_input(job)
    with open(p, "w") as f:
        json.dump(man, f)


def write_job(tmp, text, arrays=None):
    """Write job.toml (and staged data for `arrays`) under tmp; returns (path, loaded job)."""
    os.makedirs(tmp, exist_ok=True)
    path = os.path.join(tmp, "job.toml")
    with open(path, "w") as f:
        f.write(text)
    job = load_job(path)
    if arrays is not None:
        write_staged(job.staged, job.streams, arrays, job.ts_unit)
    return path, job
