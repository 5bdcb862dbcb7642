"""What --help and generated scripts tell a user (fast tier: no mpiexec)."""
from conftest import cli, equi_job_text, write_job


def test_run_help_covers_staging_keys():
    out = cli("run", "--help").stdout
    assert "raw = { path" in out and "time_unit" in out and "mpi-join stage JOB" in out


def test_generate_help_says_where_raw_data_goes():
    out = cli("generate", "--help").stdout
    assert "raw/ with --raw" in " ".join(out.split())


def test_slurm_collect_with_payload(tmp_path):
    from mpi_join.config import load_job
    from mpi_join.slurm import SlurmOptions, render
    path, _ = write_job(str(tmp_path), equi_job_text(('"5ms"', '"5ms"')))
    job = load_job(path)
    for flag in (False, True):
        text = "\n".join(render(job, SlurmOptions(with_payload=flag)).values())
        collect = [l for l in text.splitlines() if "mpi_join collect" in l]
        assert collect and all(("--with-payload" in l) == flag for l in collect)


def _help_blocks(text):
    """run --help's job-file part, split at each `[table]` that starts a line: {table: its text}."""
    import re
    part = text.split("The job file:")[1].split("Exit codes:")[0]
    marks = list(re.finditer(r"^\s*\[([a-z_.A-Z]+)\]", part, re.M))
    return {m.group(1): part[m.start():(marks[i + 1].start() if i + 1 < len(marks) else len(part))]
            for i, m in enumerate(marks)}


def test_run_help_documents_every_key_the_loader_accepts():
    """Every key of every job-file table the loader takes (config.JOB_KEYS, the sets it refuses
    other keys by) is named in run --help, in the block of its table."""
    import re
    from mpi_join.config import JOB_KEYS
    blocks = _help_blocks(cli("run", "--help").stdout)
    assert set(blocks) >= {"job", "input", "output", "streams.R", "predicate", "strategy", "run", "checkpoint"}
    missing = []
    for table, keys in JOB_KEYS.items():
        for key in keys:
            if table == "":
                found = any(b == key or b.startswith(key + ".") for b in blocks)
            else:
                block = blocks["streams.R" if table.startswith("streams") else table.split(".")[0]]
                found = re.search(rf"(?<![\w.]){re.escape(key)}\b", block) is not None
            if not found:
                missing.append(f"{table}.{key}".lstrip("."))
    assert not missing, f"run --help leaves out: {', '.join(missing)}"
