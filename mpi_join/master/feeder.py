"""An extra source (run.sources = k > 1): a rank that reads, stamps and routes its share of the
input, as rank 0 does with its own, so no single rank handles every input tuple.

It is rank 0's lifecycle without the controller's part (driver.py): the same Source, restricted
to every kth part of the input (source.py), the same operator (the strategy's rank-0 vertex),
the same credits to the same entries, a PartEnd on every entry link after each part and end of
stream after the last. Rank 0 keeps what needs one decider: it waits for every rank to be
ready and says go, decides checkpoints and moves (it leases them to every source at a part none
has started: Lease), detects termination (a feeder answers the probes with the DATA it sent)
and ends the job.
"""
import time

from ..join.jit import Compiles, freeze_heap
from ..runtime.graph import DRIVER
from ..runtime.headers import Ready
from ..runtime.protocol import CutSent, Fin, Go, Lease, Probe, ProbeReply, Tag, decode_control
from ..runtime.wire import pack_obj
from .checkpointer import restore_router
from ..storage.checkpoint import manifest_of, rescaled
from .driver import Driver


class Feeder(Driver):
    decides = False         # rank 0 decides the cuts (Lease: this source puts its markers out) and the
                            # routing's changes (moves and changes placed in the input)
    def __init__(self, job, tx, graph, router_cls, metrics, progress, resume=None, follow=False):
        """`resume`: (checkpoint dir, id) of a resumed run: its router starts from rank 0's state
        at the cut (Go says where in the input); `follow`: its parts of a staged log, as they are
        committed (source.py)."""
        super().__init__(job, tx, graph, router_cls, metrics, progress, follow=follow)
        self.resume = resume
        self.workers = []             # rank 0 runs the job: a feeder waits on no one but its entries
        self.go = self.fin = False
        self.parts.start_at(0)        # parts below this may start (rank 0's Lease)

    def run(self, freeze=True):
        self.warm_up()
        count, seconds = Compiles.mine()
        self.tx.send(DRIVER, Tag.READY, Ready(count, int(seconds * 1e6)).encode())
        self.wait(lambda: self.go)
        if freeze:
            freeze_heap()
        self.metrics.start_clock(self.tx)
        self.t_replay = time.perf_counter()
        self.replay()                  # each part's end flushed the router (Parts.end)
        self.finish_input()
        self.wait(lambda: self.fin and not any(self.out.credits.out.values()))
        self.metrics.extra.update(peak_inflight=max(self.out.credits.peak.values(), default=0),
                                  released_own=self.source.own)
        self.tx.send(DRIVER, Tag.DONE, pack_obj(self.metrics.to_dict(self.tx)))
        self.tx.flush()

    def _marked(self, cid):
        self.control(DRIVER, CutSent(cid, self.out.sent))

    def _recv(self):
        return self.tx.recv()

    def _handle(self, src, tag, buf):
        if tag == Tag.CTRL and src == DRIVER:
            msg = decode_control(buf)
            if isinstance(msg, Go):
                self.go = True
                self.parts.start_at(msg.upto)
                self.out.resumed(msg.sent)
                if msg.offset:
                    restore_router(self.router, *self.resume)
                    if rescaled(manifest_of(*self.resume)[0], self.tx.size, len(self.graph.sources)):
                        self.router.rescale(*self.resume)       # as rank 0's (checkpointer.resume_driver)
                    self.source.resume_at(msg.offset)
            elif isinstance(msg, Lease):
                self.parts.leased(msg)
            elif isinstance(msg, Probe):
                self.control(DRIVER, ProbeReply(msg.wave, self.out.sent, 0))
            elif isinstance(msg, Fin):
                self.fin = True
                self.tx.unwatch(DRIVER)
            else:
                raise RuntimeError(f"source rank {self.tx.rank}: unexpected control {msg.op} from rank 0")
            return
        if tag == Tag.ACK:
            self.out.credits.acked(src)
            return
        raise RuntimeError(f"source rank {self.tx.rank}: unexpected {tag.name} message from rank {src}")

