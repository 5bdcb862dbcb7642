"""The `hash` strategy's slave loop: receive an epoch, join it, write results, acknowledge.

Checkpoint markers arrive on the same channel as the epochs, so the state a slave saves is
exactly the state after the last epoch before the marker."""
import os
import time

import numpy as np

from .. import checkpoint as ck
from ..partitioning import Partitioner
from ..transport import Tag, pack_obj, unpack, unpack_obj
from ..window import runtime_dtype
from .hash_join import HashJoinModule
from .local_join import warm_up


def injected_fault(rank):
    """MPI_JOIN_FAULT="rank:epoch" makes that rank fail at that epoch (to test job abort)."""
    spec = os.environ.get("MPI_JOIN_FAULT", "")
    r, _, e = spec.partition(":")
    return int(e) if r.strip() == str(rank) and e.strip().isdigit() else -1


def run_slave(job, tx, metrics, writer, resume=None):
    dtypes = [runtime_dtype(s.dtype) for s in job.streams]
    params = job.strategy.params
    module = HashJoinModule(Partitioner(job, params["partitions"]), dtypes, params["local_join"])
    if resume:
        arrays, state = ck.read_rank(resume["dir"], resume["id"], tx.rank, module.state_dtypes())
        module.restore(arrays)
        metrics.results, metrics.tuples_in = state["results"], state["tuples_in"]
        writer.resume(state["files"])
    slow = params["slow_delay"] if params["slow_rank"] == tx.rank else 0.0
    fault = injected_fault(tx.rank)
    warm_up(dtypes, len(module.part.key_cols[0]), params["local_join"])
    tx.send(0, Tag.READY, np.zeros(1, np.int64))
    while True:
        _, tag, buf = tx.recv(source=0)
        if tag == Tag.EOS:
            break
        if tag == Tag.CTRL:
            _control(unpack_obj(buf), job, tx, metrics, writer, module)
            continue
        if tag != Tag.DATA:
            raise RuntimeError(f"slave: unexpected message {tag.name} from the master")
        header, batches = unpack(buf, dtypes)
        epoch, bounds = int(header[0]), header[1:3]
        metrics.tuples_in += sum(len(b) for b in batches)
        if epoch == fault:
            raise RuntimeError(f"fault injected at epoch {epoch} (MPI_JOIN_FAULT)")
        if slow:
            time.sleep(slow)
        sa, sb, tin = module.on_epoch(bounds, batches)
        if len(sa):
            now = time.time_ns()
            lat = now - tin
            writer.add([sa, sb], np.full(len(sa), now, np.int64), lat)
            metrics.latency.add(lat)
            metrics.results += len(sa)
        metrics.epochs += 1
        w0, w1 = module.window_tuples()
        tx.send(0, Tag.ACK, np.array([epoch, metrics.results, metrics.tuples_in, w0, w1], np.int64))
    writer.close()
    metrics.extra["window_tuples"] = module.window_tuples()
    done = metrics.to_dict(tx)
    tx.send(0, Tag.DONE, pack_obj(done))
    tx.flush()


def _control(msg, job, tx, metrics, writer, module):
    if msg["kind"] != "checkpoint":
        raise RuntimeError(f"slave: unknown control message {msg['kind']!r}")
    writer.flush()                                  # results up to the cut are in committed files
    files = [os.path.basename(f) for f in writer.files]
    ck.write_rank(msg["dir"], msg["id"], tx.rank, module.snapshot(),
                  {"epoch": msg["epoch"], "results": metrics.results, "tuples_in": metrics.tuples_in, "files": files})
    tx.send(0, Tag.CTRL, pack_obj({"kind": "checkpoint_done", "id": msg["id"], "files": files,
                                   "results": metrics.results}))
