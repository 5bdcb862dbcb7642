"""`mpi-join run JOB --local --seed N`: every rank of the job in this one thread, over the
runtime's in-memory network (runtime/memory.py), whose seeded scheduler picks which link
delivers the next message (each link first in, first out, as MPI's). The ranks are those of any
other run (ranks._driver, ranks.worker_part: the same driver, workers, output, checkpoints and
verification); only who runs when differs: rank 0 runs, and whenever it waits, the network hands
the other ranks their messages one at a time (Worker.deliver) in the seed's order.

Why: an interleaving that broke a run under mpiexec or threads happens once and is gone; a
seed's happens again. A run that fails (or gives other results) under `--seed N` fails the same
way each time under `--seed N`, so it can be looked at with a debugger or prints; other seeds
try other interleavings. What depends on the clock (run.rate, checkpoint.every as a duration,
run.flush_interval closing an epoch early, routers that adapt to measured loads) still does.
"""
import signal
import sys
import threading

from .errors import JobError
from .runtime.memory import MemTransport, Network
from .runtime.protocol import Tag, decode_control


class SteppedRank:
    """A rank other than 0 as the network steps it: built from rank 0's Start as under MPI
    (ranks.worker_part), then handed its messages one at a time. `failed` says that the
    exception rising through the network is this rank's."""

    def __init__(self, rank, job_path, overrides, net):
        self.rank, self.job_path, self.overrides = rank, job_path, overrides
        self.tx = MemTransport(net, rank)
        self.worker, self.started, self.ended, self.failed = None, False, False, False

    def deliver(self, src, tag, buf):
        try:
            return self._deliver(src, tag, buf)
        except BaseException:
            self.failed = True
            raise

    def _deliver(self, src, tag, buf):
        if self.ended:
            raise RuntimeError(f"rank {self.rank}: a message ({Tag(tag).name}) after the rank had ended")
        if self.worker is None:
            if tag != Tag.START:
                raise RuntimeError(f"rank {self.rank}: {Tag(tag).name} before rank 0's START")
            from .ranks import worker_part
            from .slaves.worker import Worker
            part = worker_part(decode_control(buf), self.job_path, self.overrides, self.tx)
            if part is not None and not isinstance(part, Worker):
                raise JobError(f"run --local --seed: rank {self.rank} would be an extra source (run.sources = "
                               f"{part.job.run.sources}), which reads the input on its own clock and cannot be "
                               f"stepped; set run.sources = 1, or run without --seed")
            self.worker, self.ended = part, part is None
            if part is not None:
                part.begin(freeze=False)     # one process runs every rank: no heap freeze
            return self.ended
        if not self.started:                 # Worker.run: the replay starts with rank 0's first word after READY
            self.worker.start()
            self.started = True
        self.ended = self.worker.deliver(src, tag, buf)
        return self.ended


def run_stepped(job_path, overrides, nprocs, seed):
    """Run the job's `nprocs` ranks in this thread, delivered in seed `seed`'s order; returns the
    exit code ranks.run_rank would. A rank's failure is its one line, with its number."""
    from .ranks import _driver, _interrupted, _release, _say_failed
    if overrides.get("follow"):
        sys.stderr.write("mpi-join: error: run --seed: a followed run (--follow) waits on its log's growth, which no "
                         "seed replays; run it without --seed\n")
        return 2
    sys.stderr.write(f"mpi-join: run --seed {seed}: {nprocs} ranks in this one thread, each message delivered in "
                     f"the order seed {seed} picks\n")
    net = Network(nprocs, seed)
    ranks = [SteppedRank(r, job_path, overrides, net) for r in range(1, nprocs)]
    for r in ranks:
        net.workers[r.rank] = r
    ctx = {"cores": 1, "choose_sources": None}     # one thread: "auto" takes one source
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, _: _interrupted(0, ctx, signum))
    try:
        code = _driver(job_path, overrides, MemTransport(net, 0), ctx)
    except BaseException as e:  # noqa: BLE001 - any rank's failure ends the run, as under MPI
        _release(ctx)
        failed = next((r.rank for r in ranks if r.failed), 0)
        return _say_failed(failed, e)[1]
    while net.step():               # a worker that rank 0 refused (its Start's error) has nothing left
        pass
    return code
