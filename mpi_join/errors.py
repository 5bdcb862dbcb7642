"""User-facing errors: one line that names the file, field or option and what is wrong."""


class JobError(Exception):
    """A problem with the user's job, input or options (printed as one line, exit code 2)."""

    exit_code = 2


class ConfigError(JobError):
    """The job file is invalid; the message names the field."""


class InputError(JobError):
    """The staged input (or a results dataset) is missing or malformed; the message names the file."""


def fail(e):
    """End a command on a user-facing error: its one line on stderr, its exit code."""
    import sys
    import click
    click.echo(f"mpi-join: error: {e}", err=True)
    sys.exit(getattr(e, "exit_code", 2))
