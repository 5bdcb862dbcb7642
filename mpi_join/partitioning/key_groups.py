"""Key groups: the unit keyed state moves in, at run time (a migration) and at a restore onto
another number of workers.

A job's keys hash into a fixed number of groups (`hash`'s `partitions`, 60 by default), fixed
for the job's life: a checkpoint names its keyed state by group (`.../group/<g>/...`), so a
restore at another worker count hands whole groups to new owners and never rehashes a row.
The number of groups is the most workers such state can spread over.

`reassign` is the restore's rule (as Flink's key-group ranges are, but keeping what it can in
place): every worker ends with an equal share, give or take one group, and a group moves only
when its owner is gone or holds more than its share. `moves` says what a plan moves, in groups,
rows and bytes, from the sizes a checkpoint records."""
import re

import numpy as np

GROUP = re.compile(r"(?:^|/)group/(\d+)/")


def reassign(owner, workers):
    """A new owner (one of `workers`) for each group, `owner` the current one (an int array
    indexed by group). Each worker gets floor(G/W) or ceil(G/W) groups, the larger shares going
    to the workers that hold the most already; groups stay with a worker still there, lowest
    group numbers first, up to its share; the rest go to the workers under their share, in
    worker order. Deterministic: every rank computes the same plan from the same checkpoint."""
    owner = np.asarray(owner, np.int64)
    workers = sorted(int(w) for w in workers)
    if not workers:
        raise ValueError("key groups: no worker to own them")
    g, w = len(owner), len(workers)
    held = {x: int((owner == x).sum()) for x in workers}
    base, extra = divmod(g, w)
    larger = set(sorted(workers, key=lambda x: (-held[x], x))[:extra])
    share = {x: base + (x in larger) for x in workers}
    new = np.full(g, -1, np.int64)
    kept = dict.fromkeys(workers, 0)
    for p in range(g):
        x = int(owner[p])
        if x in share and kept[x] < share[x]:
            new[p], kept[x] = x, kept[x] + 1
    free = iter([x for x in workers for _ in range(share[x] - kept[x])])
    for p in np.nonzero(new < 0)[0]:
        new[p] = next(free)
    return new


def group_of(name):
    """The key group an array of a rank file belongs to (its name holds `group/<g>/`), or None
    for state that is not keyed."""
    m = GROUP.search(name)
    return int(m.group(1)) if m else None


def moves(old, new, sizes):
    """What reassigning `old` to `new` moves: {"groups", "rows", "bytes"} moved and the totals
    ("of_rows", "of_bytes"); `sizes` {group: (rows, bytes)} of the keyed state."""
    moved = np.nonzero(np.asarray(old) != np.asarray(new))[0]
    rows = sum(sizes.get(int(p), (0, 0))[0] for p in moved)
    nbytes = sum(sizes.get(int(p), (0, 0))[1] for p in moved)
    return {"groups": len(moved), "of_groups": len(old), "rows": rows, "bytes": nbytes,
            "of_rows": sum(r for r, _ in sizes.values()), "of_bytes": sum(b for _, b in sizes.values())}
