"""The dataflow graph of a job, as one value: vertices (one per rank) and the edges between them.

A strategy's factory (strategies.StrategyInfo.graph) returns a `Graph`; the runtime derives
everything else from it: each rank's upstream and downstream links, what each link carries, the
path end-of-stream travels, which links a vertex merges in order, which it passes input on to
before it joins, where state may move (its group), and what `mpi-join explain` prints.

- A `Vertex` is a rank: its role (which code it runs, strategies.StrategyInfo.roles) and its
  index and count within its group (its role unless the builder names a group: SplitJoin's
  cores and distributors are one group, the join-biclique's R-units and S-units two), so an
  operator learns its place from the graph, not from a numbering scheme of its own.
- An `Edge` is a DATA link `src -> dst`: what it carries (INPUT rows, RESULTS rows, or the name of
  a kind of rows the strategy declares, Operator.link_dtypes); its partitioner (how the sender
  chooses the rows it gets: on rank 0's edges, for a strategy with no rank-0 operator of its
  own, it is what routes (runtime/routing.py); elsewhere the sender's code applies it); `feeds`,
  the upstream links of `src` whose input goes on along it (end-of-stream follows them; None:
  all); `merge`, whether `dst` takes it in order with its other merged edges (DataHeader.order);
  `first`, whether `src` passes each batch from `feeds` on along it before joining it.

Rank 0 is the driver: it replays the input and routes it (master/driver.py). With `sources = k`
(run.sources), `with_sources` adds k - 1 source vertices after the strategy's ranks: each reads
its share of the input and runs rank 0's operator on it, feeding the same entries as rank 0
(master/feeder.py); an entry takes its sources' links as one flow in the input's order
(slaves/inbox.py). A builder is called as `builder(nranks, params)` (params: the strategy's
parameters, defaults filled in); it never sees the extra sources.
"""
from dataclasses import dataclass

from ..errors import ConfigError

DRIVER = 0
SOURCE_ROLE = "source"          # an extra source vertex (run.sources > 1): the runtime's, not a strategy's
INPUT, RESULTS = "input", "results"
PARTITIONERS = ("forward", "broadcast", "hash", "round-robin", "own")


@dataclass(frozen=True)
class Vertex:
    rank: int
    role: str
    index: int = 0           # place within its group, 0..count-1
    count: int = 1           # vertices in its group
    group: str = ""          # "" : its role


@dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    carries: str = INPUT
    partitioner: str = "forward"
    feeds: tuple | None = None
    merge: bool = False
    first: bool = False


class Graph:
    """Vertices and edges, with the queries the runtime and operators ask of them. Immutable: built
    once per run by a builder (star, ring, chain, tree below, or a strategy's own)."""

    def __init__(self, name, vertices, edges, notes=()):
        self.name = name
        self.vertices = tuple(vertices)
        self.edges = tuple(edges)
        self.notes = tuple(notes)              # lines `explain` prints first, in the strategy's words
        self._out, self._in, self._edge = {}, {}, {}
        for e in self.edges:
            self._out.setdefault(e.src, []).append(e)
            self._in.setdefault(e.dst, []).append(e)
            self._edge[(e.src, e.dst)] = e
        self._groups = {}
        for v in self.vertices:
            self._groups.setdefault(v.group or v.role, []).append(v)

    # -- vertices -----------------------------------------------------------------------------
    @property
    def size(self):
        return len(self.vertices)

    @property
    def workers(self):
        """The strategy's ranks: every rank but the driver and the extra sources."""
        return [v.rank for v in self.vertices[1:] if v.role != SOURCE_ROLE]

    @property
    def sources(self):
        """The ranks that read and route the input: rank 0, then the extra sources."""
        return [DRIVER] + [v.rank for v in self.vertices if v.role == SOURCE_ROLE]

    @property
    def others(self):
        """Every rank rank 0 runs the job with (READY, probes, FIN): workers and extra sources."""
        return list(range(1, self.size))

    def with_sources(self, k):
        """This graph with k - 1 extra source vertices appended (ranks size .. size + k - 2). Each
        feeds what rank 0 feeds, so the edges stay as the strategy built them: an entry's link
        from the driver stands for its links from every source (slaves/inbox.py merges them)."""
        if k <= 1:
            return self
        extra = [Vertex(self.size + i, SOURCE_ROLE, i + 1, k, "") for i in range(k - 1)]
        which = (f"rank {extra[0].rank}: source 2" if k == 2 else
                 f"ranks {extra[0].rank}..{extra[-1].rank}: sources 2..{k}")
        notes = self.notes + (f"{which} of {k} (rank 0 is source 1): each reads and routes one part of the input "
                              f"in {k}, as rank 0 does with its own; every entry takes the parts in seq order",)
        return Graph(self.name, self.vertices + tuple(extra), self.edges, notes)

    def vertex(self, rank):
        return self.vertices[rank]

    def role(self, rank):
        return self.vertices[rank].role

    def ranks(self, group):
        """The ranks of a group (or role), in index order."""
        return [v.rank for v in sorted(self._groups.get(group, ()), key=lambda v: v.index)]

    # -- edges --------------------------------------------------------------------------------
    def edge(self, src, dst):
        return self._edge[(src, dst)]

    def out_edges(self, rank):
        """The edges leaving `rank`, in the order the builder gave them."""
        return list(self._out.get(rank, ()))

    def in_edges(self, rank):
        """The edges into `rank`, in the order the builder gave them."""
        return list(self._in.get(rank, ()))

    def upstream(self, rank, carries=None):
        return [e.src for e in self._in.get(rank, ()) if carries is None or e.carries == carries]

    def downstream(self, rank, carries=None):
        return [e.dst for e in self._out.get(rank, ()) if carries is None or e.carries == carries]

    def carries(self, src, dst):
        return self._edge[(src, dst)].carries

    def entries(self):
        """Workers the driver sends DATA to."""
        return self.downstream(DRIVER)

    def links(self):
        return [(e.src, e.dst) for e in self.edges]

    def merged(self, rank):
        """Upstream ranks whose DATA `rank` takes as one flow in order (Edge.merge)."""
        return tuple(e.src for e in self._in.get(rank, ()) if e.merge)

    def first(self, rank, src):
        """Where `rank` passes a batch from `src` on before it joins it (Edge.first)."""
        return [e.dst for e in self.first_edges(rank, src)]

    def first_edges(self, rank, src):
        """The edges of `first`: the worker routes along them by their partitioners (routing.Routes)."""
        return [e for e in self._out.get(rank, ()) if e.first and (e.feeds is None or src in e.feeds)]

    def move_targets(self, rank):
        """Ranks `rank` may move a unit of state to (coordinator.move): the other vertices of its group,
        which run the same code (a biclique's R-unit hands its state to another R-unit)."""
        v = self.vertices[rank]
        return [r for r in self.ranks(v.group or v.role) if r != rank]

    # -- end of stream ------------------------------------------------------------------------
    def continues(self, rank, src):
        """Downstream links of `rank` on which input that came from `src` goes on (Edge.feeds)."""
        return [e.dst for e in self._out.get(rank, ()) if e.feeds is None or src in e.feeds]

    def ends(self, rank, src, ended):
        """Where end-of-stream goes on when `src` ends at `rank` (`ended`: the upstream ranks ended
        so far, `src` among them): the links of `continues(rank, src)` that no other upstream link
        still feeds. So each link gets one copy, after everything that can still reach it (a
        merger tells its parent once all its inputs have ended, not once per input)."""
        return [d for d in self.continues(rank, src)
                if all(u in ended for u in self.upstream(rank) if d in self.continues(rank, u))]

    def eos_links(self):
        """Every link end-of-stream travels, as (sender, receiver): from the driver to the entries,
        then on along `continues`. A worker leaves only after it has had every copy meant for it
        (a copy still in flight at MPI_Finalize would be an unmatched message)."""
        todo = [(DRIVER, e) for e in self.entries()]
        seen = set()
        while todo:
            link = todo.pop()
            if link in seen:
                continue
            seen.add(link)
            src, dst = link
            todo += [(dst, d) for d in self.continues(dst, src)]
        return seen

    # -- what it says -------------------------------------------------------------------------
    def explain(self):
        return list(self.notes)

    def describe(self):
        def down(r):                       # an extra source feeds what the driver feeds
            return self.downstream(DRIVER if self.role(r) == SOURCE_ROLE else r)

        def up(r):
            return [u for s in self.upstream(r) for u in (self.sources if s == DRIVER else [s])]
        return {r: {"role": self.role(r), "up": up(r), "down": down(r),
                    "carries": {d: self.carries(DRIVER if self.role(r) == SOURCE_ROLE else r, d) for d in down(r)}}
                for r in range(self.size)}

    def check(self, has_code, where="strategy"):
        """Refuse a graph that does not hold together, with one line: vertices numbered 0..n-1 with
        the driver at 0, a role without code (`has_code(role)` False), an edge to or from no
        vertex, a worker nothing feeds, an index outside its group."""
        for r, v in enumerate(self.vertices):
            if v.rank != r:
                raise ConfigError(f"{where}: graph {self.name!r}: vertex {r} is numbered {v.rank}")
            if v.role != SOURCE_ROLE and not has_code(v.role):
                raise ConfigError(f"{where}: graph {self.name!r}: rank {r}'s role {v.role!r} has no code")
            if not 0 <= v.index < v.count:
                raise ConfigError(f"{where}: graph {self.name!r}: rank {r} is {v.index} of {v.count} in its group")
        if not self.vertices or self.vertices[0].role != "driver":
            raise ConfigError(f"{where}: graph {self.name!r}: rank 0 must be the driver")
        for e in self.edges:
            if not (0 <= e.src < self.size and 0 <= e.dst < self.size) or e.src == e.dst:
                raise ConfigError(f"{where}: graph {self.name!r}: edge {e.src} -> {e.dst} leads to no other vertex")
            if e.partitioner not in PARTITIONERS and ":" not in e.partitioner:
                raise ConfigError(f"{where}: graph {self.name!r}: edge {e.src} -> {e.dst}: unknown partitioner "
                                  f"{e.partitioner!r} (one of {', '.join(PARTITIONERS)}, or a strategy's own "
                                  f"\"module:function\")")
        for r in self.workers:
            if not self.upstream(r):
                raise ConfigError(f"{where}: graph {self.name!r}: nothing feeds rank {r} ({self.role(r)})")
        return self


def vertices(size, role_of, group_of=None):
    """One vertex per rank: rank 0 the driver, the others `role_of(rank)`, each numbered within
    its group (`group_of(rank)`, default its role) in rank order."""
    roles = ["driver"] + [role_of(r) for r in range(1, size)]
    groups = [g or roles[r] for r, g in enumerate([""] + [group_of(r) if group_of else "" for r in range(1, size)])]
    count, index = {}, []
    for g in groups:                       # one pass: a rank's place in its group, then the sizes
        index.append(count.get(g, 0))
        count[g] = index[-1] + 1
    return [Vertex(r, roles[r], index[r], count[groups[r]], "" if groups[r] == roles[r] else groups[r])
            for r in range(size)]


def _line_role(size, rank, first, inner, last):
    """The role of `rank` among workers 1..size-1 in a line: `first`, `inner` or `last`, or `solo`
    for a line of one worker (both ends at once)."""
    if size == 2:
        return "solo"
    return first if rank == 1 else (last if rank == size - 1 else inner)


def star(size, params=None, role="worker", partitioner="own"):
    """The driver feeds every worker directly; workers do not send DATA to each other."""
    return Graph("star", vertices(size, lambda r: role), [Edge(DRIVER, w, partitioner=partitioner)
                                                         for w in range(1, size)])


def ring(size, params=None):
    """Workers 1..n in a ring: each sends to the next, the last back to the first (the head),
    which the driver feeds. Roles `head`, `ring`, `tail`; a ring of one worker is `solo`. Input
    that comes back to the head has made its round: it goes no further."""
    n = size - 1
    edges = [Edge(DRIVER, 1)]
    if n > 1:
        edges += [Edge(w, w % n + 1, feeds=(DRIVER,) if w == 1 else None) for w in range(1, n + 1)]
    return Graph("ring", vertices(size, lambda r: _line_role(size, r, "head", "ring", "tail")),
                 sorted(edges, key=lambda e: (e.dst, e.src != DRIVER, e.src)))


def chain(size, params=None, bidirectional=True, feed_all=False):
    """Workers 1..n in a line, roles `left`, `middle`, `right` (`solo` for one). Bidirectional
    (handshake join): the driver feeds both ends and each worker sends to both neighbours;
    left-to-right input goes on to the right, right-to-left input to the left. One-way: the
    driver feeds worker 1 and data flows right. With `feed_all` (low-latency handshake join) the
    driver feeds every worker, and input ends where it arrives (end-of-stream does not travel)."""
    n = size - 1
    edges = []
    for r in range(1, n + 1):
        left = r - 1                                     # the driver at the left end
        if feed_all:
            edges.append(Edge(DRIVER, r, feeds=()))
            edges += [Edge(w, r, feeds=()) for w in (r - 1, r + 1) if 1 <= w <= n]
            continue
        edges.append(Edge(left, r, feeds=(left - 1,) if left > 1 else (DRIVER,) if left == 1 else None))
        if bidirectional and (r < n or r != 1):
            right = r + 1 if r < n else DRIVER
            edges.append(Edge(right, r, feeds=(right + 1 if right < n else DRIVER,) if right != DRIVER else None))
    return Graph("chain", vertices(size, lambda r: _line_role(size, r, "left", "middle", "right")), edges)


def fed_chain(size, params=None):
    """The low-latency handshake join's chain: the driver feeds every worker."""
    return chain(size, params, feed_all=True)


def tree(size, params=None, fanout=2, first=False):
    """The driver is the root of a tree of fanout b over the workers (breadth first): each node
    sends to its children (before it joins, with `first`). Roles `inner` and `leaf`."""
    b = max(1, int(fanout))
    kids = {r: [c for c in range(r * b + 1, r * b + 1 + b) if c < size] for r in range(size)}
    edges = [Edge((c - 1) // b, c, first=first and (c - 1) // b != DRIVER) for c in range(1, size)]
    return Graph("tree", vertices(size, lambda r: "inner" if kids[r] else "leaf"), edges)
