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
