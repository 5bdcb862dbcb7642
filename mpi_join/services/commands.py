"""`mpi-join dev-services`: real HDFS, YARN and Kafka on this machine (daemons.py)."""
import json
import sys

import click

from ..errors import JobError, fail as _fail

_DIR = click.option("--dir", "root", default=None, type=click.Path(file_okay=False),
                    help="The services' folder: data, configuration, logs, pids and ports "
                         "(default $MPI_JOIN_SERVICES_DIR, else ~/.local/state/mpi-join/dev-services).")
_ONLY = click.option("--only", default="hdfs,yarn,kafka", show_default=True,
                     help="Comma-separated services: hdfs, yarn (starts hdfs too: Spark keeps its staging "
                          "files there), kafka.")


def _services(only):
    return [s.strip() for s in only.split(",") if s.strip()]


@click.group("dev-services")
def dev_services():
    """Real HDFS, YARN and Kafka on this machine, for tests and a first try.

    Each daemon is its own JVM from Apache's jars, which the first start fetches with Maven
    from Maven Central into ~/.cache/mpi-join (or $MPI_JOIN_CACHE): a NameNode and a DataNode
    (Hadoop 3.5.0, the client PySpark bundles), a ResourceManager and a NodeManager, and a
    Kafka 4.4.0 broker in KRaft mode. They listen on 127.0.0.1 at ports chosen free at the
    first start and kept; `start` returns when each answers and prints where.

    \b
      mpi-join dev-services start                  # all three (about 30 s; the first time also the fetch)
      eval "$(mpi-join dev-services env)"          # HADOOP_CONF_DIR, MPI_JOIN_HDFS, MPI_JOIN_KAFKA
      mpi-join dev-services hdfs -put raw /raw     # Hadoop's own `hdfs dfs`, against these services
      mpi-join stage job.toml --master yarn        # a job whose raw paths are $MPI_JOIN_HDFS/raw/...
      mpi-join dev-services status
      mpi-join dev-services stop                   # exactly the processes `start` started
    """


@dev_services.command()
@_DIR
@_ONLY
@click.option("--memory-mb", default=4096, show_default=True, type=click.IntRange(512, 1 << 20),
              help="Memory the NodeManager offers YARN's containers.")
@click.option("--vcores", default=4, show_default=True, type=click.IntRange(1, 4096),
              help="Cores the NodeManager offers YARN's containers.")
def start(root, only, memory_mb, vcores):
    """Start the services not running yet, and wait until each answers."""
    from .daemons import DevServices
    try:
        ds = DevServices(root, progress=lambda m: click.echo(m, err=True))
        ep = ds.start(_services(only), memory_mb, vcores)
    except JobError as e:
        _fail(e)
    _print_endpoints(ds, ep, _services(only))


def _print_endpoints(ds, ep, only):
    from .daemons import daemons_of
    on = set(daemons_of(only))
    if "namenode" in on:
        click.echo(f"hdfs: {ep['hdfs']}  (NameNode web {ep['hdfs_web']})")
    if "resourcemanager" in on:
        click.echo(f"yarn: ResourceManager {ep['yarn_rm']}  (web {ep['yarn_web']}); --master yarn with "
                   f"HADOOP_CONF_DIR={ep['hadoop_conf_dir']}")
    if "kafka" in on:
        click.echo(f"kafka: bootstrap servers {ep['kafka']}")
    click.echo(f"folder: {ds.root} (logs in {ds.root}/logs)")


@dev_services.command()
@_DIR
@click.option("--only", default=None, help="Comma-separated services to stop (default: all).")
def stop(root, only):
    """Stop the daemons this folder's starts recorded (SIGTERM, then SIGKILL after 20 s)."""
    from .daemons import DevServices
    try:
        names = DevServices(root).stop(_services(only) if only else None)
    except JobError as e:
        _fail(e)
    click.echo(f"stopped {', '.join(names)}" if names else "nothing was running")


@dev_services.command()
@_DIR
@click.option("--json", "as_json", is_flag=True, help="One JSON object: daemons and endpoints.")
def status(root, as_json):
    """Each daemon: running or not, its pid, memory and log; then the endpoints."""
    from .daemons import DevServices
    ds = DevServices(root)
    rows = ds.status()
    if as_json:
        click.echo(json.dumps({"daemons": {n: {"pid": pid, "rss_mib": rss, "log": log} for n, pid, rss, log in rows},
                               "endpoints": ds.endpoints()}, indent=1))
        return
    for n, pid, rss, log in rows:
        click.echo(f"{n:16} {'running, pid ' + str(pid) + f', {rss:.0f} MiB' if pid else 'not running':34} {log}")
    if any(pid for _, pid, _, _ in rows):
        _print_endpoints(ds, ds.endpoints(), ["hdfs", "yarn", "kafka"])


@dev_services.command()
@_DIR
def env(root):
    """Shell exports for the running services: eval "$(mpi-join dev-services env)"."""
    from .daemons import DevServices
    import shlex
    ep = DevServices(root).endpoints()
    for k, v in (("HADOOP_CONF_DIR", ep["hadoop_conf_dir"]), ("MPI_JOIN_HDFS", ep["hdfs"]),
                 ("MPI_JOIN_KAFKA", ep["kafka"])):
        click.echo(f"export {k}={shlex.quote(v)}")


@dev_services.command(context_settings={"ignore_unknown_options": True})
@_DIR
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hdfs(root, args):
    """Hadoop's `hdfs dfs` (FsShell) against these services: -ls, -put, -get, -cat, -rm, ...
    `hdfs dfsadmin ...` runs DFSAdmin (-safemode enter|leave|get, -report)."""
    from .daemons import DevServices
    tool, rest = ("dfsadmin", args[1:]) if args[:1] == ("dfsadmin",) else ("dfs", args)
    try:
        r = DevServices(root).hadoop(tool, *rest, check=False)
    except JobError as e:
        _fail(e)
    sys.stdout.write(r.stdout)
    sys.stderr.write("".join(ln + "\n" for ln in r.stderr.splitlines() if "SLF4J" not in ln and "NativeCodeLoader" not in ln))
    sys.exit(r.returncode)
