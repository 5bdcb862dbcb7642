"""SplitJoin's graph: a distribution tree down to the join cores and a merge tree back up.

Ranks: 0 is the driver (the root of the distribution tree), 1..k the join cores, k+1 the
combiner, which also writes the results (so `-n` is k + 2). Cores hang breadth first under the
driver with fanout b: the driver's b children first (the fanout is filled before the tree
deepens), then theirs. A core with children is also a distributor (it passes every batch on to
its children before it joins) and a merger (it merges its own results with its children's before
sending them up); results go up the same edges the input came down, reversed, to the combiner.

A core's position, which decides the tuples it stores (round-robin: position = count mod k), is
its place in the tree's pre-order: every subtree holds consecutive positions, so a merger that
reads its own flow, then its children's in order, reads cores in position order (what strict
inner order needs)."""
from ..topology import DRIVER, INPUT, Topology

FLOWS = "rap"      # what a result edge carries: two punctuated flows (rap.py), R- then S-triggered


class SplitTree(Topology):
    name = "split-tree"

    def __init__(self, size, fanout=2):
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "fanout", max(1, int(fanout)))
        order = []

        def visit(r):
            order.append(r)
            for c in self.children(r):
                visit(c)
        for c in self.children(DRIVER):
            visit(c)
        object.__setattr__(self, "_pos", {r: p for p, r in enumerate(order)})

    @property
    def k(self):
        """Join cores."""
        return self.size - 2

    @property
    def combiner(self):
        return self.size - 1

    def children(self, rank):
        b = self.fanout
        first = rank * b + 1
        return [c for c in range(first, first + b) if 1 <= c <= self.k]

    def parent(self, rank):
        return (rank - 1) // self.fanout

    def position(self, rank):
        return self._pos[rank]

    def result_parent(self, rank):
        """Where a core sends its (merged) results: its parent core, or the combiner."""
        p = self.parent(rank)
        return p if p != DRIVER else self.combiner

    def depth(self, rank):
        d = 1
        while self.parent(rank) != DRIVER:
            rank, d = self.parent(rank), d + 1
        return d

    def role(self, rank):
        if rank == DRIVER:
            return "driver"
        if rank == self.combiner:
            return "combiner"
        return "distributor" if self.children(rank) else "core"

    def upstream(self, rank):
        if rank == DRIVER:
            return []
        if rank == self.combiner:
            return self.children(DRIVER)
        return [self.parent(rank)] + self.children(rank)

    def downstream(self, rank):
        if rank == DRIVER:
            return self.children(DRIVER)
        if rank == self.combiner:
            return []
        return self.children(rank) + [self.result_parent(rank)]

    def continues(self, rank, src):
        """Input ends down the tree; results end up it (once the parent and every child ended)."""
        if rank == self.combiner:
            return []
        if src == self.parent(rank):
            return self.children(rank) + [self.result_parent(rank)]
        return [self.result_parent(rank)]

    def carries(self, sender, receiver):
        """Input comes down from a core's parent; everything else is results going up."""
        return INPUT if 1 <= receiver <= self.k and sender == self.parent(receiver) else FLOWS

    def explain(self):
        """Lines saying which ranks do what."""
        b, k = self.fanout, self.k
        depth = max((self.depth(r) for r in range(1, k + 1)), default=0)
        lines = [f"rank 0: driver, the root of the distribution tree (fanout {b}, depth {depth}, {k} join core"
                 f"{'s' if k != 1 else ''}); feeds ranks {', '.join(map(str, self.children(DRIVER)))}"]
        for r in range(1, k + 1):
            kids = self.children(r)
            what = (f"distributor + join core + merger: passes input on to {', '.join(map(str, kids))} before it "
                    f"joins, merges its results with theirs" if kids else "join core")
            lines.append(f"rank {r}: {what}; position {self.position(r)} (stores tuples whose count mod {k} is "
                         f"{self.position(r)}); results to rank {self.result_parent(r)}")
        lines.append(f"rank {self.combiner}: combiner + sink: merges {', '.join(map(str, self.children(DRIVER)))}, "
                     f"joins the R- and S-punctuated flows into one stream and writes it")
        return lines
