"""The join-biclique's graph: rank 0 is the shuffler (the driver: it stamps every batch with its
place in the input, the order), ranks 1..D the dispatchers, then m R-units and n S-units. Every
dispatcher feeds every unit (a complete bipartite graph behind the router); a unit takes its
dispatchers' links as one flow in stamp order (the runtime's ordered merge), which is the
order-consistent protocol: every unit processes the tuples it gets in one global order, so no
pair is missed or joined twice. A dispatcher sends every unit every batch, empty when it holds
nothing for that unit: the empty message is the protocol's signal tuple (it advances the link's
watermark).

With an aggregate (strategy.aggregate), the last rank is the merger: every unit sends it the
part of its local view not sent yet (links carrying "views", aggregate.py), and it writes the
merged global view as timestamped snapshots."""
from ..topology import DRIVER, Topology

VIEWS = "views"


class Biclique(Topology):
    name = "biclique"

    def __init__(self, size, dispatchers=1, r_units=0, merger=False):
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "merger", size - 1 if merger else None)
        d = max(1, min(int(dispatchers), size - 3 - bool(merger)))
        object.__setattr__(self, "d", d)
        units = size - 1 - d - bool(merger)
        m = int(r_units) if r_units else max(1, units // 2)
        object.__setattr__(self, "m", max(1, min(m, units - 1)))

    @property
    def dispatchers(self):
        return list(range(1, self.d + 1))

    @property
    def r_units(self):
        return list(range(self.d + 1, self.d + 1 + self.m))

    @property
    def s_units(self):
        return list(range(self.d + 1 + self.m, self.size - (self.merger is not None)))

    def side(self, rank):
        """0 for an R-unit (stores R, joins S), 1 for an S-unit."""
        return 0 if rank in self.r_units else 1

    def units(self, side):
        return self.r_units if side == 0 else self.s_units

    def role(self, rank):
        if rank == DRIVER:
            return "driver"
        if rank == self.merger:
            return "merger"
        return "dispatcher" if rank <= self.d else "unit"

    def upstream(self, rank):
        if rank == DRIVER:
            return []
        if rank == self.merger:
            return self.r_units + self.s_units
        return [DRIVER] if rank <= self.d else self.dispatchers

    def downstream(self, rank):
        if rank == DRIVER:
            return self.dispatchers
        if rank == self.merger:
            return []
        if rank <= self.d:
            return self.r_units + self.s_units
        return [self.merger] if self.merger is not None else []

    def carries(self, sender, receiver):
        return VIEWS if receiver == self.merger else super().carries(sender, receiver)

    def explain(self):
        return [f"rank 0: shuffler: stamps every batch with its place in the input and deals the batches to "
                f"{_ranks(self.dispatchers)} in turn",
                f"{_ranks(self.dispatchers)}: dispatcher{'s' if self.d > 1 else ''}: route each tuple to be stored at "
                f"one unit of its side and joined at units of the other side; every unit gets every batch (empty: a "
                f"signal)",
                f"{_ranks(self.r_units)}: {self.m} R-unit{'s' if self.m > 1 else ''}: store R tuples, join the S tuples "
                f"sent to them",
                f"{_ranks(self.s_units)}: {len(self.s_units)} S-unit{'s' if len(self.s_units) > 1 else ''}: store S "
                f"tuples, join the R tuples sent to them"] + \
               ([f"rank {self.merger}: merger: merges the units' local aggregate views into the global view and "
                 f"writes it as timestamped snapshots"] if self.merger is not None else [])


def _ranks(ranks):
    return f"ranks {ranks[0]}..{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"
