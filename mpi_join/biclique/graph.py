"""The join-biclique's graph: rank 0 is the shuffler (the driver: it stamps every batch with its
place in the input, the order), ranks 1..D the dispatchers, then m R-units and n S-units (role
`unit`, groups `R-units` and `S-units`). Every dispatcher feeds every unit (a complete bipartite
graph behind the router); a unit takes its dispatchers' links as one flow in stamp order (merged
edges: the runtime's ordered merge), which is the order-consistent protocol: every unit processes
the tuples it gets in one global order, so no pair is missed or joined twice. A dispatcher sends
every unit every batch, empty when it holds nothing for that unit: the empty message is the
protocol's signal tuple (it advances the link's watermark).

With an aggregate (strategy.aggregate), the last rank is the merger: every unit sends it the
part of its local view not sent yet (links carrying "views", aggregate.py), and it writes the
merged global view as timestamped snapshots."""
from ..runtime.graph import DRIVER, Edge, Graph, vertices

VIEWS = "views"
SIDES = ("R-units", "S-units")


def build(size, params):
    return biclique(size, params["dispatchers"], params["r_units"], bool(params["aggregate"]), params["ordered"])


def biclique(size, dispatchers=1, r_units=0, merger=False, ordered=True):
    d = max(1, min(int(dispatchers), size - 3 - bool(merger)))
    units = size - 1 - d - bool(merger)
    m = max(1, min(int(r_units) if r_units else max(1, units // 2), units - 1))
    last = size - 1 if merger else None
    disp = list(range(1, d + 1))
    sides = (list(range(d + 1, d + 1 + m)), list(range(d + 1 + m, size - bool(merger))))

    def role(r):
        return "merger" if r == last else "dispatcher" if r <= d else "unit"

    def group(r):
        return SIDES[r in sides[1]] if role(r) == "unit" else ""
    edges = [Edge(DRIVER, x, partitioner="round-robin") for x in disp]
    edges += [Edge(x, u, partitioner="own", merge=bool(ordered)) for u in sides[0] + sides[1] for x in disp]
    if merger:
        edges += [Edge(u, last, VIEWS) for u in sides[0] + sides[1]]
    notes = [f"rank 0: shuffler: stamps every batch with its place in the input and deals the batches to "
             f"{_ranks(disp)} in turn",
             f"{_ranks(disp)}: dispatcher{'s' if d > 1 else ''}: route each tuple to be stored at one unit of its side "
             f"and joined at units of the other side; every unit gets every batch (empty: a signal)",
             f"{_ranks(sides[0])}: {m} R-unit{'s' if m > 1 else ''}: store R tuples, join the S tuples sent to them",
             f"{_ranks(sides[1])}: {len(sides[1])} S-unit{'s' if len(sides[1]) > 1 else ''}: store S tuples, join "
             f"the R tuples sent to them"] + \
            ([f"rank {last}: merger: merges the units' local aggregate views into the global view and writes it "
              f"as timestamped snapshots"] if merger else [])
    return Graph("biclique", vertices(size, role, group), edges, notes)


def side(graph, rank):
    """0 for an R-unit (stores R, joins S), 1 for an S-unit."""
    return SIDES.index(graph.vertex(rank).group)


def merger_of(graph):
    """The merger's rank, or None without an aggregate."""
    return next(iter(graph.ranks("merger")), None)


def _ranks(ranks):
    return f"ranks {ranks[0]}..{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"
