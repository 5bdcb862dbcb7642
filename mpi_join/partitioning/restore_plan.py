"""What a restore of a checkpoint onto another number of ranks would move (`mpi-join checkpoint
inspect DIR --ranks N`), read from the rank files' layout alone (array names and shapes, no
data read).

Keyed state is named by key group (partitioning/key_groups.py): an array whose name holds
`group/<g>/` belongs to group g, and the rank file that holds it is the group's owner at the
cut. A restore hands whole groups to the workers of the new run (ranks 1..N-1: rank 0 routes)
by key_groups.reassign, so what moves is the groups whose owner changes, with their rows and
bytes as the checkpoint holds them. Everything else in a worker's file is state that is not
keyed."""
import glob
import os

from . import key_groups
from ..storage.checkpoint import ckpt_path, entries, list_checkpoints, one_array

_OWNER = "router/partitions/owner"          # the router's map of groups to owners (hash)


def layout(root, cid):
    """({group: (rows, bytes)}, {group: rank holding it}, the router's owner map or None, (rows,
    bytes) of worker state that is not keyed) of checkpoint `cid`; the rows count stored tuples
    (arrays whose rows carry a seq)."""
    import h5py
    sizes, held, owner, other = {}, {}, None, [0, 0]
    for path in sorted(glob.glob(os.path.join(ckpt_path(root, cid), "rank-*.h5"))):
        rank = int(os.path.basename(path)[5:9])
        with h5py.File(path, "r") as f:
            for name, dtype, n in entries(f):
                nbytes = (1 if n is None else n) * dtype.itemsize
                if name == _OWNER:
                    owner = one_array(f, name).astype(int)
                    continue
                g = key_groups.group_of(name) if name.startswith("module/") else None
                if g is None:
                    if name.startswith("module/") and rank > 0:
                        other[1] += nbytes
                        other[0] += (n or 0) if dtype.names and "seq" in dtype.names else 0
                    continue
                rows, b = sizes.get(g, (0, 0))
                sizes[g] = (rows + (n or 0), b + nbytes)
                held[g] = rank
    return sizes, held, owner, tuple(other)


def plan(root, nranks, cid=None, sources=None):
    """What a restore of checkpoint `cid` (default: the newest complete one) at `nranks` ranks
    with `sources` sources (run.sources; default: the checkpoint's) would move: key_groups.moves
    plus "checkpoint", "workers", "ranks" (the checkpoint's) and "keyed" (False: the state holds
    no key groups; a restore at another rank count deals all of it again, "other_rows" stored
    tuples in "other_bytes"). The workers are ranks 1 .. nranks - sources: the extra sources are
    the last ranks, and hold no state."""
    done = {c: m for c, m in list_checkpoints(root) if m is not None}
    if cid is None:
        if not done:
            raise ValueError(f"{root}: no complete checkpoint")
        cid = max(done)
    sizes, held, owner, (other_rows, other) = layout(root, cid)
    had = int(done[cid].get("sources", 1))
    k = had if sources is None else int(sources)
    if nranks - k < 1:
        raise ValueError(f"{nranks} ranks with {k} sources leave no worker")
    workers = list(range(1, nranks - (k - 1)))
    was = done[cid]["ranks"] if k == had else -1          # another run.sources is another graph
    if owner is None and not sizes:
        return {"checkpoint": cid, "keyed": False, "workers": len(workers), "ranks": was, "other_rows": other_rows,
                "other_bytes": other}          # ranks: -1 at another run.sources (all of it is dealt again)
    if owner is None:                      # no map: the files say who holds each group with state
        owner = [held.get(g, 0) for g in range(max(held) + 1)]
    # at the checkpoint's own rank count each worker reads its own file back: nothing moves, even
    # where migrations left the groups unevenly spread
    new = owner if nranks == was else key_groups.reassign(owner, workers)
    return dict(key_groups.moves(owner, new, sizes), checkpoint=cid, keyed=True, workers=len(workers),
                ranks=done[cid]["ranks"], other_rows=other_rows, other_bytes=other)


def owners_after(root, cid, workers):
    """Each key group's owner after a restore of checkpoint `cid` onto `workers`: the plan rank 0
    and every worker compute alike (key_groups.reassign of the router's map at the cut)."""
    import h5py
    from ..storage.checkpoint import rank_file
    with h5py.File(rank_file(root, cid, 0), "r") as f:
        owner = one_array(f, _OWNER)
        if owner is None:
            raise ValueError(f"{rank_file(root, cid, 0)}: no map of key groups ({_OWNER}) to restore from")
        owner = owner.astype(int)
    return key_groups.reassign(owner, workers)
