"""The join-biclique resumed from a checkpoint at another rank count (`run --resume` with
another -n; slaves/cuts.restore_rescaled calls the roles' `restore_rescaled`).

- Units: every stored tuple goes to the unit of its side that the routing table of a start
  stores it at (`start_members`: ContRand picks the subgroup by the key's hash and the unit by
  the seq, routing.py), declared as the units' home (`stored_at`) and dealt by the runtime, so
  the resumed run's dispatchers send each new tuple of the other side to the units that may
  hold its partners. Stored tuples met before the cut and do not meet
  again (a unit joins what arrives with what it holds).
- A unit cut before the last batches of another dispatcher (several dispatchers) holds them as
  channel state, and the merger the views on their way to it: the runtime carries the old
  graph to rest first (slaves/cuts._in_flight, drain.py: the old units join those batches as
  they would have, the old merger takes those views), so what is dealt here is at rest. A unit
  takes the new run's first batch as the next in order (a run of another run.sources numbers
  its batches otherwise).
- The merger's view takes the old merger's and the units' views not sent yet: the aggregate of
  every result up to the cut (a new unit's view starts empty: Array(rescale="fresh")).
- The shuffler routes by the table of a start (2PS begins again from it)."""
import numpy as np

from ..join import aggregate
from ..runtime.operator import old_graph
from . import routing
from .graph import SIDES, merger_of


def start_members(graph, params):
    """The routing table a run starts with: with 2PS scaling, all but `spare_units` of each
    side active; without, every unit (the dispatchers' own table then)."""
    n = tuple(len(graph.ranks(g)) for g in SIDES)
    groups = (int(params["r_groups"]), int(params["s_groups"]))
    if not params["scaling"]:
        return routing.Membership(n, groups)
    return routing.Membership(n, groups, tuple(max(1, k - int(params["spare_units"])) for k in n))


def stored_at(unit):
    """A unit's home (runtime/operator.Rows): the rows of its side that the routing table of a
    start stores at the index-th unit of that side. A restore at another rank count deals the
    stored rows by it (the runtime's default); with scaling off it is the dispatchers' own table,
    so it is also where every row a run stores sits (the operator harness checks that)."""
    side, table = unit.side, start_members(unit.graph, unit.job.strategy.params)

    def home(rows, stream, index, count):
        if stream != side or not len(rows):
            return np.zeros(len(rows), bool)
        return table.store_units(rows, side) == index
    return home


def restore_merger(merger, read, old):
    """The new merger: the old one's counts restored, and returns its view: the old one's with
    every old unit's views not sent yet merged in (at rest: the module docstring)."""
    graph = old_graph(merger, old)
    arrays, attrs = read(merger_of(graph), lambda n: True)
    merger.restore(arrays, attrs)
    views = [merger.view]
    for r in graph.ranks(SIDES[0]) + graph.ranks(SIDES[1]):
        a, at = read(r, lambda n: n == "views/data", state=lambda n: merger.dtype if n == "views/data" else None)
        shape = at["views"]["shape"]
        if shape is not None:
            views.append(a["views/data"].reshape(shape))
    return aggregate.merge(merger.spec, *views)
