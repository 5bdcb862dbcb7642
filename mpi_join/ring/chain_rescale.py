"""The chains (`handshake`, `llhj`) resumed from a checkpoint at another rank count (`run
--resume` with another -n; slaves/cuts.restore_rescaled calls the modules' restore_rescaled).

At a cut, batches are on their way between neighbours and acknowledgements with them; a
forwarded batch is in its sender's window, marked sent, until acknowledged. So the old chain is
first carried to rest (slaves/drain.py: every worker restored in this process, its channel
state handed over until no message is left, with no more input); then nothing is marked sent,
and an R tuple at old segment i and an S tuple at segment j have met exactly when i >= j (R
flows right, S left: they crossed, or met where both are). The new chain of k segments takes
old segment i at position f(i) = ceil(i k / n), which keeps that order: f(i) >= f(j) when
i >= j. Scaling out, f is one to one and the new segments between start empty; scaling in,
segments i < j that fall on one new segment would hold an R and an S tuple that have not met
and now never would, so that segment joins them as it restores (each pair of its old segments
once). The drain's results are the old run's after the cut; the new left end writes them.
Tuples then move on by age as always, from wherever they are. llhj: restore_home."""
import numpy as np

from ..slaves.drain import drained
from ..slaves.worker import Worker
from ..runtime.operator import Output
from ..slaves.local_join import BinaryJoin


def _laid(mod, read, old):
    """The drained old chain's workers that fall on `mod`'s place in the new one (in chain
    order), an Output holding the drain's results if `mod` is the new left end, and all of them."""
    graph, mods, made = drained(mod, read, old, Worker)
    chain, k = graph.workers, len(mod.graph.workers)
    me = mod.graph.workers.index(mod.rank) + 1
    mine = [mods[r] for i, r in enumerate(chain, 1) if -(-i * k // len(chain)) == me]
    if any(m.seg.sent != [0, 0] for m in mine):
        raise RuntimeError(f"rank {mod.rank}: the drained chain still has batches not acknowledged")
    return mine, (made if me == 1 else Output()), list(mods.values())


def _lay(mod, mine, aligned=None):
    """`mod`'s segment: the rows of the old segments `mine` (each stream in seq order). With
    `aligned(module)` (per stream, an array aligned row for row with its window), returns those
    arrays put in the same order."""
    snaps = [m.seg.snapshot() for m in mine]
    arrays, out = {}, []
    for s, dt in enumerate(mod.seg.join.state_dtypes):
        rows = np.concatenate([a[f"window/{s}"] for a, _ in snaps]) if snaps else np.zeros(0, dt)
        order = np.argsort(rows["seq"], kind="stable")
        arrays[f"window/{s}"] = rows[order]
        if aligned is not None:
            out.append(np.concatenate([aligned(m)[s] for m in mine] or [np.zeros(0, np.int64)])[order])
    nows = [a["now"] for _, a in snaps if a["now"] is not None]
    mod.seg.restore(arrays, {"sent": [0, 0], "now": max(nows) if nows else None})
    return out


def restore_segment(mod, read, old):
    """handshake: worker `mod`'s segment of the new chain (the module docstring); returns the
    results it writes as it restores, and per stream whether its input had ended there."""
    mine, out, _ = _laid(mod, read, old)
    _join_unmet(mod, [m.seg.join for m in mine], out)
    _lay(mod, mine)
    return out, [any(m.ended[s] for m in mine) for s in (0, 1)]


def restore_home(mod, read, old):
    """llhj: as restore_segment, but no two stored tuples meet in llhj (a new tuple meets every
    stored one, fast-forwarded, and is stored at its home): segments that fall together need no
    join. Once drained every worker has processed every batch of the cut, every stored row has
    met all of them, no replica is needed for a catch-up, and every batch still to come is new
    to every stored row (the module starts its counts again: llhj.LowLatencyModule)."""
    mine, out, _ = _laid(mod, read, old)
    _lay(mod, mine)
    return out


def _join_unmet(mod, joins, out):
    """Old segments i < j that fall on this one: each R tuple of i with each S tuple of j (with
    the exact window test), as they would have met had the chain stayed."""
    if len(joins) < 2:
        return
    dt = mod.dtypes
    held = BinaryJoin(mod.job.predicate, dt, mod.job.strategy.params["local_join"])
    for j in reversed(joins):                   # right to left: `held` has S of the segments right of j
        r = j.runtime_rows(j.windows[0].view(), 0, dt[0])
        if len(held.windows[1]) and len(r):
            res = held.probe(r, 0, 0)
            out.emit(res[:2], res[2])
        s = j.runtime_rows(j.windows[1].view(), 1, dt[1])
        if len(s):
            held.append(held.derive(s, 1), 1)
