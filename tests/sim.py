"""The runtime in one process: the real Driver, Workers, routers and join modules of a strategy,
over the runtime's in-memory network (runtime/memory.py) whose seeded scheduler delivers
messages between links in a random order (each link stays FIFO, as MPI's are). Nothing of the delivery rules is written here: the
workers' inbox, ordered merge, credits, markers and end of stream are the production code.

Rank 0 drives: whenever it waits for a message, the network delivers others' messages, one at a
time, to a worker picked at random among the links that hold one (`Worker.deliver`), until one
for rank 0 is there."""
from dataclasses import replace

import numpy as np

from mpi_join import strategies
from mpi_join.config import parse_job
from mpi_join.master.driver import Driver
from mpi_join.master.progress import Progress
from mpi_join.runtime.memory import MemTransport, MemWriter, Network
from mpi_join.runtime.metrics import RankMetrics
from mpi_join.slaves.worker import Worker
from mpi_join.strategies import check_strategy
from mpi_join.join.window import runtime_dtype

# the simulations' jobs: one predicate of each kind, time and count windows of different sizes
SIM_PRED = {
    "equi": 'equi = [["R.k", "S.k"]]',
    "band": 'band = [{left = "R.v", right = "S.w", eps = 0.5}]',
    "theta": 'theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]',
}
SIM_WINDOWS = {"time": ('"9ms"', '"4ms"'), "count": ("11", "23")}


def sim_job(strategy, pred, kind):
    """A two-stream job (conftest.equi_job_text) with predicate SIM_PRED[pred], windows SIM_WINDOWS[kind]."""
    import tomllib
    from conftest import equi_job_text
    return parse_job(tomllib.loads(equi_job_text(SIM_WINDOWS[kind], strategy=strategy, predicate=SIM_PRED[pred])),
                     "t.toml")


def simulate(job, arrays, workers, seed=0, snapshots=None, wrap=None, arrivals=None):
    """Run `job` (strategy and parameters checked) over `arrays` on `workers` workers in process;
    returns (results as an (r, M) seq array, the modules by rank, the router). Aggregate snapshots
    are appended to the list `snapshots`; `wrap(rank, module_or_router)` may wrap each before the
    run (to record what it is handed); the list `arrivals`, when given, gets each result's
    arrival time, in the order of the rows returned."""
    info = strategies.get(job.strategy.name)
    graph = info.build_graph(workers + 1, job.strategy.params)
    net = Network(workers + 1, seed)
    dtypes = [runtime_dtype(s.dtype, len(job.streams)) for s in job.streams]
    writers = {}
    for r in graph.workers:
        tx = MemTransport(net, r)
        module = info.load_role(graph.role(r))(job, r, graph, dtypes)
        if wrap:
            wrap(r, module)
        writers[r] = MemWriter(snapshots if snapshots is not None else _no_snapshots())
        net.workers[r] = Worker(job, tx, graph, module, RankMetrics(r, graph.role(r)), writers[r])
    driver = Driver(job, MemTransport(net, 0), graph, info.load_role("driver"), RankMetrics(0, "driver"),
                    Progress(0, enabled=False), arrays=arrays)
    for w in net.workers.values():
        w.begin(freeze=False)
        w.start()
    if wrap:
        wrap(0, driver.router)
    driver.run(freeze=False)
    rows = [np.stack(seqs, axis=1) for w in writers.values() for seqs, _ in w.results]
    if arrivals is not None:
        arrivals.extend(int(t) for w in writers.values() for _, tin in w.results for t in tin)
    M = len(arrays)
    return (np.concatenate(rows) if rows else np.zeros((0, M), np.int64),
            {r: w.module for r, w in net.workers.items()}, driver.router)


class _no_snapshots(list):
    def append(self, snap):
        raise AssertionError("aggregate snapshots written, and no list to take them")


def simulate_strategy(strategy, job, arrays, workers, seed=0, batch_size=7, on_epoch=None, snapshots=None, trace=None,
                      arrivals=None, **params):
    """`simulate` with `strategy` and its `params` set on `job`, batches of `batch_size` at no set
    rate. `on_epoch(epoch, modules, router)` runs after each epoch the router ends; every call
    handed to an operator is appended to the list `trace` as (rank, "data", src, header, batches)
    or (rank, "eos", src), and rank 0's flushes as (0, "flush")."""
    job = replace(job, strategy=replace(job.strategy, name=strategy, params=dict(params)),
                  run=replace(job.run, batch_size=batch_size, rate=None))
    job = check_strategy(job)
    mods = {}

    def wrap(rank, op):
        if rank:
            mods[rank] = op
        if trace is not None:
            _record(rank, op, trace)
        if rank == 0 and on_epoch is not None:
            end = op.end_of_epoch

            def end_of_epoch(epoch):
                end(epoch)
                on_epoch(epoch, mods, op)
            op.end_of_epoch = end_of_epoch
    return simulate(job, arrays, workers, seed, snapshots, wrap, arrivals)


def _record(rank, op, trace):
    """Append what `op` is handed to `trace` (see simulate_strategy)."""
    on_data, on_eos, flush = op.on_data, op.on_eos, op.flush
    op.on_data = lambda src, h, b: trace.append((rank, "data", src, h, b)) or on_data(src, h, b)
    op.on_eos = lambda src: trace.append((rank, "eos", src)) or on_eos(src)
    if rank == 0:
        op.flush = lambda: trace.append((0, "flush")) or flush()


def simulate_psp(job, arrays, n, seed=0, batch_size=7, on_epoch=None, **params):
    """The PSP ring of `n` operators (see simulate_strategy)."""
    return simulate_strategy("psp", job, arrays, n, seed, batch_size, on_epoch, **params)
