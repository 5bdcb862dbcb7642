"""SplitJoin resumed from a checkpoint at another rank count (`run --resume` with another -n;
slaves/cuts.restore_rescaled calls the roles' `restore_rescaled`).

- Cores: old core p of k stored the tuples whose count in their stream is p mod k, and its
  window's m-th row (its base plus its index) is the tuple of count p + k m. So each stored
  tuple's count is known again, and new core p' of k' takes those whose count is p' mod k',
  numbered as if it had stored them from the start (the punctuation's blocks count a core's
  stored rows); it goes on storing by the counts every core has seen. Stored tuples met before
  the cut and do not meet again (a core joins each arriving tuple with what it holds).
- Mergers: results of batches before the cut that were not written yet are in the flows the
  distributors and the combiner queue (their gathers) and in those on their way to them (their
  channel state); each result row is in exactly one of these. The new combiner writes them all
  as it restores (in the punctuated order: by trigger, then the stored tuple; the next batch's
  results follow), so every
  result is written once. The tree of the new run starts with empty gathers.
- The driver only broadcasts: it routes the new tree as it is."""
import numpy as np

from ..runtime.operator import Output, keeps_rows, old_graph, stored_rows
from .graph import FLOWS


def restore_core(core, read, old):
    """A new join core's rows out of every old core; returns its counts (`seen`, per stream)."""
    graph = old_graph(core, old)
    cores = [r for r in old if graph.vertex(r).group == "cores"]
    kept, seen = [[], []], list(core.seen)
    for r in cores:
        arrays, attrs, _ = read(r, keeps_rows(core), channel=core.link_dtypes(FLOWS))
        p, k = graph.vertex(r).index, len(cores)
        seen = [int(x) for x in attrs["counts"]["seen"]]
        for s, base in enumerate(attrs["join"]["base"]):
            rows = stored_rows(core, arrays, s)
            count = p + k * (int(base) + np.arange(len(rows), dtype=np.int64))
            mine = count % core.k == core.pos
            kept[s].append((count[mine], rows[mine]))
    arrays, bases = {}, []
    for s, parts in enumerate(kept):
        count = np.concatenate([c for c, _ in parts])
        rows = np.concatenate([x for _, x in parts])
        order = np.argsort(count, kind="stable")
        arrays[f"w/{s}"] = rows[order]
        # the number of its first row: the counts p' mod k' below it (below every count seen: none held)
        bases.append((int(count[order[0]]) - core.pos) // core.k if len(count)
                     else max(0, -(-(seen[s] - core.pos) // core.k)))
    for w, b in zip(core.join.windows, bases):
        w.number_from(b)
    core.join.restore(arrays, "w")
    return seen


def restore_combiner(comb, read, old):
    """The new combiner's counts (stars, results received: the old one's) and an Output of every
    result row the old mergers held or had on their way to them, written now."""
    graph = old_graph(comb, old)
    dtypes = comb.link_dtypes(FLOWS)
    rows, stars, received = [], None, 0
    for r in old:
        if graph.vertex(r).role not in ("distributor", "combiner"):
            continue
        arrays, attrs, pending = read(r, lambda n: n.startswith("gather/") or n.startswith("counts"), channel=dtypes)
        if graph.vertex(r).role == "combiner":
            stars, received = list(attrs["counts"]["stars"]), int(attrs["counts"]["received"])
        rows += [a for n, a in arrays.items() if n.startswith("gather/") and n.rsplit("/", 1)[1] in ("0", "2")]
        rows += [b[f] for _, _, b in pending for f in (0, 2)]
    out = Output()
    if rows:
        rows = np.concatenate(rows)
        # in the punctuated order: by the trigger (the newer tuple, the larger seq), then the other
        seqs = np.stack([rows[c] for c in comb.cols])
        rows = rows[np.lexsort((seqs.min(axis=0), seqs.max(axis=0)))]
        received += len(rows)
        out.emit([np.ascontiguousarray(rows[c]) for c in comb.cols], np.ascontiguousarray(rows["_tin"]))
    return stars, received, out
