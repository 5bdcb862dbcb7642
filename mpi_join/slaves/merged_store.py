"""`hash` with an index join: one store for every partition group a slave owns. An index
join's cost does not grow with the rows held (a nested loop's does, so `bnl` keeps a store per
group), and rows of two partitions never match (equal keys hash alike), so one join call per
epoch does the work of one per group (60 by default). A group is cut out of the store or merged
into it by seq when it moves (moves are rare; epochs are not), and the windows stay in seq order.
Groups cut out and rows merged in since the last rebuild wait for one rebuild (`settle`): a
slave taken out of service moves every group it owns at once, and one rebuild for all of them
is what keeps that from costing a rebuild per group."""
import numpy as np

from ..join.window import POS_INF, footprint
from ..partitioning import group_rows


class MergedStore:
    def __init__(self, part, make_store, template):
        """`make_store()`: a new local_join.BinaryJoin; `template`: one for its row layout."""
        self.part, self.make_store, self.layout = part, make_store, template
        self.store = make_store()
        self.cut_out, self.moved_in = set(), []
        self._parts = {}                 # stream -> the partition of each window row, until the store changes

    def step(self, batches, tins, bounds):
        """Join one epoch's derived batches (`tins`: their arrival times); returns the results,
        or None when there is nothing to do (a move's queued rows, none)."""
        if self.moved_in and not any(len(b) for b in batches) and (np.asarray(bounds) < POS_INF).all():
            return None                   # a move's queued rows, none: the next epoch merges (bounds only rise)
        self.settle()
        self._parts.clear()               # the windows change below
        w = self.store.windows
        # a moved group's held-back rows come late: older than rows of other groups in the
        # window, and anywhere in the batch (the router appends them to what it routed to their
        # new holder already). They are joined like any rows (each pair's visibility is tested
        # by seq; rows of two groups never match), then the windows are put back in seq order,
        # which expiry relies on (it drops a prefix)
        late = any(_late(b["seq"], x) for b, x in zip(batches, w))
        out = [self.store.step(*batches, tins=tins)]
        if late:
            self.rebuild([x.view() for x in self.store.windows])
        self.expire(bounds)
        return out

    def expire(self, bounds):
        self.settle()
        self.store.expire(bounds)
        self._parts.clear()

    def window_tuples(self):
        self.settle()
        return [len(w) for w in self.store.windows]

    def footprint(self):
        self.settle()
        return footprint(self.store)

    def cut(self, p):
        """Group p's window rows of each stream out of the store ({} if it has none). The store
        drops them at its next rebuild (settle); until then no row of p is asked for (p is
        routed elsewhere, and rows of two partitions never match)."""
        if self.moved_in or p in self.cut_out:
            self.settle()                 # p's rows may be among those merged in
        views = [w.view() for w in self.store.windows]
        mine = [self._partitions(s, v) == p for s, v in enumerate(views)]
        if not any(m.any() for m in mine):
            return {}
        self.cut_out.add(p)
        return {f"0/{s}": self.layout.runtime_rows(v[m], s) for s, (v, m) in enumerate(zip(views, mine))}

    def merge_in(self, arrays):
        """Rows of moved or restored groups ({"...<stream>": runtime rows}, named as a move or a
        checkpoint names them), merged into the store's windows at the next rebuild (settle)."""
        self.moved_in.append(arrays)

    def by_group(self):
        """(partition, stream, runtime rows) of every group held: a checkpoint by group, as with
        a store per group (either reads the same)."""
        self.settle()
        for s, w in enumerate(self.store.windows):
            v = w.view()
            labels = self._partitions(s, v)
            # the window made runtime rows once, then cut by group (a conversion per group
            # hashed each group's keys again: 60 groups' worth of calls per checkpoint)
            yield from ((p, s, rows) for p, rows in group_rows(self.layout.runtime_rows(v, s), labels))

    def _partitions(self, s, view):
        """The partition of each row of stream s's window (`view`), computed once while the store
        does not change: a slave that hands over all its groups cuts them one after another."""
        if s not in self._parts:
            self._parts[s] = self.part.partitions(self.layout.hashes(view, s))
        return self._parts[s]

    def settle(self):
        """One rebuild for every group cut out and every row merged in since the last."""
        if not self.cut_out and not self.moved_in:
            return
        cut = np.array(sorted(self.cut_out), np.int64)
        rows = []
        for s, w in enumerate(self.store.windows):
            v = w.view()
            if len(cut):
                v = v[~np.isin(self._partitions(s, v), cut)]
            new = [self.layout.derive(a, s) for arrays in self.moved_in for k, a in arrays.items()
                   if k.rsplit("/", 1)[1] == str(s)]
            rows.append(np.concatenate([v] + new) if new else v)
        self.cut_out, self.moved_in = set(), []
        self.rebuild(rows)

    def rebuild(self, rows):
        """A new store holding `rows` (window rows of each stream), put in seq order."""
        self._parts.clear()
        store = self.make_store()
        for s, r in enumerate(rows):
            store.append(r[np.argsort(r["seq"], kind="stable")], s)
        self.store = store


def _late(seq, window):
    """Would appending rows with these seqs leave the window out of seq order?"""
    if len(seq) == 0:
        return False
    if len(seq) > 1 and not (seq[1:] > seq[:-1]).all():
        return True
    return len(window) > 0 and seq[0] < window.view()["seq"][-1]
