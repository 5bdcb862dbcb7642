"""The PSP ring without MPI: its operators (ring/psp.SlicedJoin) and router (PspRouter) wired by
FIFO queues, one per link, with messages delivered in a random order across links (each link
stays FIFO, as MPI guarantees). What the production code returns is what this delivers."""
from collections import deque
from dataclasses import replace

import numpy as np

from mpi_join.master.source import Source
from mpi_join.protocol import DataHeader
from mpi_join.ring.psp import CycleDone, PspRouter, SlicedJoin
from mpi_join.strategies import check_strategy
from mpi_join.topology import Ring


class _Driver:
    def __init__(self, links):
        self.links = links

    def send(self, dest, batches, lane=0, extra=(), bounds=None):
        self.links[(0, dest)].append((DataHeader(0, lane, (0,), tuple(extra)), batches))


def simulate(job, arrays, n, seed=0, batch_size=7, on_epoch=None, **params):
    """Run `job` over `arrays` on a ring of `n` operators; returns (results as an (r, M) seq
    array, the operators, the router). `on_epoch(epoch, ops, router)` runs after each batch."""
    job = replace(job, strategy=replace(job.strategy, name="psp", params=dict(params)),
                  run=replace(job.run, batch_size=batch_size, rate=None))
    job = check_strategy(job)
    topo = Ring(n + 1)
    src = Source(job, arrays=arrays)
    ops = {r: SlicedJoin(job, r, topo, src.dtypes) for r in topo.workers}
    links = {(a, b): deque() for a, b in topo.links()}
    router = PspRouter(job, topo, _Driver(links))
    rng = np.random.default_rng(seed)
    out, epoch = [], 0

    def deliver(a, b):
        header, batches = links[(a, b)].popleft()
        res = ops[b].on_data(a, header, batches)
        for seqs, _ in res.results:
            out.append(np.stack(seqs, axis=1))
        for dest, lane, bs, bounds, extra in res.forward:
            links[(b, dest)].append((DataHeader(0, lane, bounds, extra), bs))
        for dest, msg in res.control:
            assert dest == 0 and isinstance(msg, CycleDone)
            router.on_control(b, msg)

    while True:
        ready = [l for l, q in links.items() if q and (l[0] != 0 or ops[1].accepts_input())]
        if not src.done and (not ready or rng.random() < 0.3):
            router.route(src.next_epoch(), 0)
            epoch += 1
            router.end_of_epoch(epoch)
            if on_epoch:
                on_epoch(epoch, ops, router)
            continue
        if not ready:
            break
        deliver(*ready[rng.integers(len(ready))])
    assert router.quiet(), "batches left in the ring"
    M = len(arrays)
    return (np.concatenate(out) if out else np.zeros((0, M), np.int64)), ops, router
