"""Slurm batch scripts rendered from a job file: stage -> run -> collect, as one job or a chain.

Every value that comes from the job file or the command line is refused if it holds a newline,
a carriage return or another control character (a line break would start a new command in the
script, whatever the quoting), then quoted with shlex.quote, so paths with spaces or shell
characters are passed through unchanged."""
import os
import re
import shlex
import sys
from dataclasses import dataclass

from .errors import JobError
from .storage.paths import check_text
from .storage.spark.collect import default_out

LAUNCHERS = ("srun", "mpiexec")


@dataclass
class SlurmOptions:
    nodes: int = 1
    ntasks: int = 4
    time: str = "01:00:00"
    partition: str | None = None
    launcher: str = "srun"
    chain: bool = False
    overcommit: bool = False
    python: str = sys.executable
    spark_master: str = "local[*]"
    collect_out: str | None = None
    stage: bool | None = None          # None: stage when every stream has a raw source
    collect: bool = True
    with_payload: bool = False          # collect joins each result back to its input columns
    verify: bool = False
    log_dir: str | None = None
    extra: tuple = ()                  # more "#SBATCH" options, e.g. "--account=abc"


def _q(v):
    return shlex.quote(str(v))


def _safe_name(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60] or "job"


def _header(job, o, step, ntasks, nodes):
    name = _safe_name(f"mpi-join-{job.name}-{step}" if step else f"mpi-join-{job.name}")
    logs = log_dir(job, o)
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --nodes={int(nodes)}",
             f"#SBATCH --ntasks={int(ntasks)}", f"#SBATCH --time={_q(o.time)}",
             f"#SBATCH --output={_q(os.path.join(logs, name + '-%j.out'))}"]
    if o.partition:
        lines.append(f"#SBATCH --partition={_q(o.partition)}")
    if o.overcommit:
        lines.append("#SBATCH --overcommit")
    lines += [f"#SBATCH {_q(x)}" for x in o.extra]
    lines += ["", "set -euo pipefail", f"PY={_q(o.python)}", f"JOB={_q(os.path.abspath(job.path))}"]
    return lines, logs


def _steps(job, o):
    """Shell lines for each step: {"stage": [...], "run": [...], "collect": [...]}."""
    out_dir = job.output
    collected = o.collect_out or default_out(out_dir)
    stage = o.stage if o.stage is not None else all(s.raw is not None for s in job.streams)
    steps = {}
    if stage:
        steps["stage"] = ['echo "mpi-join: stage with Spark"',
                          f'"$PY" -m mpi_join stage "$JOB" --master {_q(o.spark_master)}']
    if o.launcher == "srun":
        launch = 'srun --mpi=pmi2 -n "$SLURM_NTASKS"'
    else:   # Hydra takes the nodes and tasks per node from Slurm and starts its proxies with srun
        mpiexec = os.path.join(os.path.dirname(o.python), "mpiexec")
        launch = f'{_q(mpiexec)} -launcher slurm -rmk slurm -n "$SLURM_NTASKS"'
    run = ['echo "mpi-join: run on $SLURM_NTASKS ranks over $SLURM_JOB_NUM_NODES node(s): $SLURM_JOB_NODELIST '
           '(tasks per node $SLURM_TASKS_PER_NODE; the run records each rank\'s host in metrics/summary.json)"',
           f'{launch} "$PY" -m mpi_join run "$JOB"']
    if o.verify:
        run.append(f'"$PY" -m mpi_join verify {_q(out_dir)} --job "$JOB"')
    steps["run"] = run
    if o.collect:
        steps["collect"] = ['echo "mpi-join: collect with Spark"',
                            f'"$PY" -m mpi_join collect {_q(out_dir)} --job "$JOB" --out {_q(collected)} '
                            f'--master {_q(o.spark_master)}' + (" --with-payload" if o.with_payload else "")]
    return steps


def _check_values(job, o):
    """Refuse, with one line naming the option, any value with a control character."""
    vals = [("--time", o.time), ("--partition", o.partition), ("--python", o.python),
            ("--spark-master", o.spark_master), ("--collect-out", o.collect_out), ("--log-dir", o.log_dir),
            ("the job file's path", os.path.abspath(job.path)), ("output.dir", job.output),
            ("the log directory", log_dir(job, o))]
    vals += [("--sbatch-opt", x) for x in o.extra]
    for where, v in vals:
        if v is not None:
            check_text(str(v), where)
    for where, v in (("--nodes", o.nodes), ("--ntasks", o.ntasks)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20:
            raise JobError(f"{where}: expected an integer in 1..{1 << 20:,}, got {v!r}")
    for x in o.extra:
        if not x.startswith("-"):
            raise JobError(f"--sbatch-opt: expected an sbatch option such as --account=abc, got {x[:60]!r}")


def log_dir(job, o):
    """Where the jobs' output goes; Slurm does not create it, so it must exist at submission."""
    return o.log_dir or os.path.join(os.path.dirname(os.path.abspath(job.path)), "slurm-logs")


def render(job, o):
    """{file name: script text}. One script, or one per step plus <name>-submit.sh that chains them
    with --dependency=afterok."""
    if o.launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {LAUNCHERS}")
    _check_values(job, o)
    steps = _steps(job, o)
    base = _safe_name(job.name)
    if not o.chain:
        lines, logs = _header(job, o, None, o.ntasks, o.nodes)
        for k in ("stage", "run", "collect"):
            lines += [""] + steps.get(k, [])
        return {f"{base}.sbatch": "\n".join(lines) + "\n"}
    files, order = {}, []
    for k in ("stage", "run", "collect"):
        if k not in steps:
            continue
        ntasks, nodes = (o.ntasks, o.nodes) if k == "run" else (1, 1)
        lines, logs = _header(job, o, k, ntasks, nodes)
        files[f"{base}-{k}.sbatch"] = "\n".join(lines + [""] + steps[k]) + "\n"
        order.append(f"{base}-{k}.sbatch")
    sub = ["#!/bin/bash", "# Submit the steps as a chain: each starts when the previous one succeeded.",
           "set -euo pipefail", 'cd "$(dirname "$0")"', f"mkdir -p {_q(logs)}", "dep=()", "ids=()"]
    for f in order:
        sub += [f'id=$(sbatch --parsable "${{dep[@]}}" {_q(f)})', "id=${id%%;*}", 'ids+=("$id")',
                'dep=(--dependency=afterok:"$id")']
    sub += ['echo "${ids[*]}"']
    files[f"{base}-submit.sh"] = "\n".join(sub) + "\n"
    return files
