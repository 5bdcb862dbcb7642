"""A strategy's router and join modules without MPI: wired by FIFO queues, one per link of its
topology, with messages delivered in a random order across links (each link stays FIFO, as MPI
guarantees) and end-of-stream travelling the topology as the runtime sends it. What the
production code returns is what this delivers."""
from collections import deque
from dataclasses import replace

import numpy as np

from mpi_join import strategies
from mpi_join.config import parse_job
from mpi_join.master.source import Source
from mpi_join.protocol import DataHeader
from mpi_join.strategies import check_strategy

EOS = "eos"

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


class _Driver:
    moving = False                  # state moves (driver.move) are not simulated

    def __init__(self, links, source):
        self.links, self.source = links, source

    def send(self, dest, batches, body=None, bounds=None, order=-1):
        b = self.source.bounds() if bounds is None else bounds
        self.links[(0, dest)].append((_wire(DataHeader(0, tuple(int(x) for x in b), body, order)), batches))

    def send_many(self, dests, batches, body=None, bounds=None, order=-1):
        for d in dests:
            self.send(d, batches, body, bounds, order)

    def bounds(self):
        return self.source.bounds()

    def request_load(self, ranks):
        """Load reports are not simulated: a request is never answered."""

    def loads_of(self, ranks):
        return None


def _wire(header):
    """The header as the receiver gets it: encoded to int64 words and decoded back."""
    return DataHeader.decode(np.asarray(header.encode(), np.int64))


def simulate_strategy(strategy, job, arrays, workers, seed=0, batch_size=7, on_epoch=None, snapshots=None, trace=None,
                      **params):
    """Run `job` over `arrays` with `strategy` on `workers` workers; returns (results as an (r, M)
    seq array, the modules by rank, the router). `on_epoch(epoch, modules, router)` runs after
    each released batch; aggregate snapshots written are appended to the list `snapshots`; every
    call handed to a module is appended to the list `trace` as (rank, "data", src, header,
    batches) or (rank, "eos", src), and every call to the router as (0, "route", batches,
    bounds, epoch) or (0, "flush")."""
    job = replace(job, strategy=replace(job.strategy, name=strategy, params=dict(params)),
                  run=replace(job.run, batch_size=batch_size, rate=None))
    job = check_strategy(job)
    info = strategies.get(strategy)
    graph = info.build_graph(workers + 1, job.strategy.params)
    src = Source(job, arrays=arrays)
    mods = {r: info.load_role(graph.role(r))(job, r, graph, src.dtypes) for r in graph.workers}
    links = {(a, b): deque() for a, b in graph.links()}
    router = info.load_role("driver")(job, graph, _Driver(links, src))
    rng = np.random.default_rng(seed)
    out, epoch, eos_sent = [], 0, False
    ended = {r: set() for r in graph.workers}
    last = {}                                   # the last order delivered on each link

    def apply(b, res):
        if res is None:
            return
        for seqs, _ in res.results:
            out.append(np.stack(seqs, axis=1))
        if res.snapshots:
            assert snapshots is not None, "aggregate snapshots written, and no list to take them"
            snapshots.extend(res.snapshots)
        for dests, bs, bounds, body, order in res.forward:
            for dest in dests:
                links[(b, dest)].append((_wire(DataHeader(0, bounds, body, order)), bs))
        for dest, msg in res.control:
            assert dest == 0, "control records between workers are not simulated"
            router.on_control(b, msg)

    def deliver(a, b):
        item = links[(a, b)].popleft()
        if trace is not None:
            trace.append((b, "eos", a) if item == EOS else (b, "data", a) + tuple(item))
        if item == EOS:
            ended[b].add(a)
            apply(b, mods[b].on_eos(a))
            for d in graph.ends(b, a, ended[b]):
                links[(b, d)].append(EOS)
            return
        header, batches = item
        last[(a, b)] = header.order
        for d in graph.first(b, a):
            links[(b, d)].append((header, batches))
        apply(b, mods[b].on_data(a, header, batches))

    def in_order(link):
        """A merged link's next batch goes first only if no other merged link can still bring a
        lesser order (it has ended, or its next or last order is greater): the runtime's merge."""
        a, b = link
        q = links[link]
        merged = graph.merged(b)
        if q[0] == EOS or a not in merged:
            return True
        mine = q[0][0].order
        if mine == mods[b].next_order():
            return True
        for u in merged:
            if u == a or u in ended[b]:
                continue
            other = links[(u, b)]
            if not ((other and (other[0] == EOS or other[0][0].order > mine)) or last.get((u, b), -1) > mine):
                return False
        return True

    def ready(link):
        q = links[link]
        if not q or not in_order(link):
            return False
        return link[0] != 0 or q[0] == EOS or mods[link[1]].accepts_input()

    while True:
        live = [l for l in links if ready(l)]
        if not src.done and (not live or rng.random() < 0.3):
            batches = src.next_epoch()
            if trace is not None:
                trace.append((0, "route", batches, tuple(src.bounds()), epoch + 1))
            router.route(batches, 0)
            epoch += 1
            router.end_of_epoch(epoch)
            if on_epoch:
                on_epoch(epoch, mods, router)
            continue
        if src.done and not eos_sent and router.quiet():
            if trace is not None:
                trace.append((0, "flush"))
            router.flush()
            for e in graph.entries():
                links[(0, e)].append(EOS)
            eos_sent = True
            continue
        if not live:
            break
        deliver(*live[rng.integers(len(live))])
    assert eos_sent and router.quiet(), "work left in flight"
    M = len(arrays)
    return (np.concatenate(out) if out else np.zeros((0, M), np.int64)), mods, router


def simulate(job, arrays, n, seed=0, batch_size=7, on_epoch=None, **params):
    """The PSP ring of `n` operators (see simulate_strategy)."""
    return simulate_strategy("psp", job, arrays, n, seed, batch_size, on_epoch, **params)
