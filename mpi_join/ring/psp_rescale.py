"""The PSP ring resumed from a checkpoint at another rank count (`run --resume` with another
-n; slaves/cuts.restore_rescaled calls SlicedJoin.restore_rescaled).

A checkpoint's marker enters the ring only between cycles (PspRouter.quiet), so at a cut no
batch, probe, partial combination or END is on its way: the state is the slices, and every
pair of stored tuples has met (a new tuple meets every stored one on its cycle). The new ring's
head takes every stored tuple of every old slice; the other operators start empty. The
slicers go on from the old ones (slicing.Slicer.restore: the window's edge, the floors; the
other cuts start over), so the first batch's cuts put each stored tuple in its slice by the
ring's own purges: each operator moves what lies below its cut to the next, ahead of the
probe, so the probe meets every stored tuple once, where it now lies. END life-span control
goes on from the old head's count of retired batches (from the cut's offset, where run.sources
changes the numbering: first_batch)."""
import numpy as np


def first_batch(job, man, sources):
    """The id the new run gives its first batch less one, where it is not the old numbering's
    next: with several sources a batch's id is its place in the input (seq // batch size), with
    one the router's count, so after a change of run.sources the ids go on from the cut's offset.
    None: one source then and now, the old count goes on."""
    if int(man.get("sources", 1)) == 1 and sources == 1:
        return None
    return int(man["input_offset"]) // max(1, job.run.batch_size) - 1


def restore_slice(op, read, old, man):
    """Operator `op` of the new ring (the module docstring); returns the batches retired."""
    head = op.rank == op.graph.workers[0]
    retired = None
    rows = [[] for _ in range(op.M)]
    for r in old:
        mine = r == old[0] and op.slicer is not None
        arrays, attrs = read(r, lambda n: (head and n.startswith("slice/") and n != "slice/cuts")
                             or (mine and n.startswith("slicer/")))
        if r == old[0]:
            retired = int(attrs["counts"]["retired"])
            if mine:
                op.slicer.restore({k[7:]: v for k, v in arrays.items() if k.startswith("slicer/")}, attrs["slicer"])
        for j in range(op.M):
            if f"slice/{j}" in arrays:
                rows[j].append(arrays[f"slice/{j}"])
    held = {}
    for j, dt in enumerate(op.dtypes):
        x = np.concatenate(rows[j]) if rows[j] else np.zeros(0, dt)
        held[str(j)] = x[np.argsort(x["seq"], kind="stable")]
    op.slice.restore(held, {})
    renumbered = first_batch(op.job, man, len(op.graph.sources))
    return retired if renumbered is None else renumbered


class Rescalable:
    """psp's operators (a mix-in of SlicedJoin): restored at another rank count by restore_slice."""

    def restore_rescaled(self, read, old, root, cid):
        from ..storage.checkpoint import manifest_of
        self.cycles.restart(restore_slice(self, read, old, manifest_of(root, cid)[0]))
