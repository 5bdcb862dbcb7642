"""`mpi-join bench biclique --case fig6a`: the paper's Figure 6a at this machine's scale. With
full-history windows every tuple processed stays stored, so the state a join unit holds grows
with the processing volume; the join-biclique stores each tuple once (at one unit of its side),
the join-matrix along a whole row or column of its grid. For the same number of join units
(`-n` values; default 4), `biclique` (1 shuffler + 1 dispatcher + the units, half R, half S) and
`matrix` (driver + a grid of the units) run the equi workload at growing volumes in the same
run, each checked against the oracle, and the table shows the most tuples and the peak memory of
any one unit."""
import os
import tempfile

from .. import strategies
from ..tools.bench import oracle_rate, run_verified, set_param, print_table
from ..config import load_job
from ..tools.workloads import make
from .matrix import grid

VOLUMES = (20000, 40000, 80000)


def run(units=4, volumes=VOLUMES, workdir=None, keys=1_000_000):
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="mpi-join-bench-memory-")
        workdir = tmp.name
    r, c = grid(units)
    print(f"biclique against matrix with {units} join units: equi workload, full-history windows, {keys:,} uniform "
          f"keys; biclique on {units + 2} ranks ({units // 2} R-units, {units - units // 2} S-units, random "
          f"routing), matrix on {units + 1} ({r} x {c} cells)", flush=True)
    rows = []
    for v in volumes:
        held = {}
        for s, n in (("biclique", units + 2), ("matrix", units + 1)):
            d = os.path.join(workdir, f"{s}-{v}")
            jp = make("equi", d, tuples=v, window="unbounded", strategy=s, uniform_keys=keys)
            if "r_units" in strategies.get(s).params:
                set_param(jp, "r_units", units // 2)
            job = load_job(jp)
            _, _, expect_n = oracle_rate(job)
            print(f"bench: {s}, {v:,} tuples on {n} ranks", flush=True)
            summary = run_verified(jp, d, job, n, None, expect_n)
            join = [x for x in summary["ranks"] if x["role"] in ("unit", "worker")]
            held[s] = (max(x["peak_window_tuples"] for x in join), max(x["peak_rss_mb"] for x in join))
        rows.append((f"{v:,}", f"{held['biclique'][0]:,}", f"{held['matrix'][0]:,}",
                     f"{held['matrix'][0] / max(held['biclique'][0], 1):.2f}",
                     f"{held['biclique'][1]:.0f}", f"{held['matrix'][1]:.0f}"))
    print("\nstate per join unit against the processing volume (the most any one unit held)")
    print_table(("tuples processed", "biclique tuples/unit", "matrix tuples/cell", "matrix / biclique",
                 "biclique peak MB", "matrix peak MB"), rows)
    print(f"a biclique unit holds about volume / {units} tuples, a matrix cell volume / {units} x (rows + cols) / 2 "
          f"on average ({r} x {c} here): each tuple is held once against {c} (R) or {r} (S) times; results equal the "
          f"oracle in every run")
    if tmp:
        tmp.cleanup()
    return rows


def run_case(nprocs, workdir, **_):
    """-n values are join units here (the first is used)."""
    return run(tuple(nprocs)[0] if nprocs else 4, workdir=workdir)
