"""SplitJoin's graph: a distribution tree down to the join cores and a merge tree back up.

Ranks: 0 is the driver (the root of the distribution tree), 1..k the join cores, k+1 the
combiner, which also writes the results (so `-n` is k + 2). Cores hang breadth first under the
driver with fanout b: the driver's b children first (the fanout is filled before the tree
deepens), then theirs. A core with children is also a distributor (it passes every batch on to
its children before it joins: Edge.first) and a merger (it merges its own results with its
children's before sending them up); results go up the same edges the input came down, reversed,
to the combiner.

A core's position, which decides the tuples it stores (round-robin: position = count mod k), is
its index in the group `cores`: its place in the tree's pre-order, so every subtree holds
consecutive positions, and a merger that reads its own flow, then its children's in order, reads
cores in position order (what strict inner order needs)."""
from ..runtime.graph import DRIVER, Edge, Graph, Vertex

FLOWS = "rap"      # what a result edge carries: two punctuated flows (rap.py), R- then S-triggered


def build(size, params):
    return split_tree(size, params["fanout"])


def depth(k, b):
    """Levels of a breadth-first tree of k nodes under a root with fanout b."""
    d, level, n = 0, 1, 0
    while n < k:
        level *= b
        n += level
        d += 1
    return d


def hops(k, params):
    """A tuple goes down the distribution tree to every core and its results up the merge tree:
    2 d(k) hops at k cores (bench cores' delay model)."""
    return 2 * depth(k, int(params.get("fanout", 2)))


def split_tree(size, fanout=2):
    b, k = max(1, int(fanout)), size - 2
    combiner = size - 1

    def children(r):
        return [c for c in range(r * b + 1, r * b + 1 + b) if 1 <= c <= k]

    def parent(r):
        return (r - 1) // b

    order = []

    def visit(r):
        order.append(r)
        for c in children(r):
            visit(c)
    for c in children(DRIVER):
        visit(c)
    pos = {r: p for p, r in enumerate(order)}
    verts = [Vertex(0, "driver")] + [Vertex(r, "distributor" if children(r) else "core", pos[r], k, "cores")
                                     for r in range(1, k + 1)] + [Vertex(combiner, "combiner")]
    down = [Edge(parent(c), c, partitioner="broadcast", feeds=(parent(parent(c)),) if parent(c) else None,
                 first=parent(c) != DRIVER) for c in range(1, k + 1)]
    up = [Edge(c, parent(c) if parent(c) != DRIVER else combiner, FLOWS) for c in range(1, k + 1)]
    depth = {c: depth_of(c, parent) for c in range(1, k + 1)}
    notes = [f"rank 0: driver, the root of the distribution tree (fanout {b}, depth {max(depth.values(), default=0)}, "
             f"{k} join core{'s' if k != 1 else ''}); feeds ranks {', '.join(map(str, children(DRIVER)))}"]
    for r in range(1, k + 1):
        kids = children(r)
        what = (f"distributor + join core + merger: passes input on to {', '.join(map(str, kids))} before it "
                f"joins, merges its results with theirs" if kids else "join core")
        to = parent(r) if parent(r) != DRIVER else combiner
        notes.append(f"rank {r}: {what}; position {pos[r]} (stores tuples whose count mod {k} is {pos[r]}); "
                     f"results to rank {to}")
    notes.append(f"rank {combiner}: combiner + sink: merges {', '.join(map(str, children(DRIVER)))}, joins the R- "
                 f"and S-punctuated flows into one stream and writes it")
    return Graph("split-tree", verts, down + up, notes)


def depth_of(rank, parent):
    d = 1
    while parent(rank) != DRIVER:
        rank, d = parent(rank), d + 1
    return d
