"""Who talks to whom: the rank layouts strategies are built on.

Rank 0 is always the driver (it replays the input); ranks 1..P-1 are workers. A topology
answers, for any rank: its role, its upstream links (ranks it receives DATA from), its downstream
links (ranks it sends DATA to) and its peers (ranks it may move state to). The runtime uses
upstream/downstream to forward checkpoint markers and to count end-of-stream; nothing in it
depends on which topology it is.
"""
from dataclasses import dataclass

DRIVER = 0
# what a link carries (Topology.carries): rows of the input streams, result rows, or the name of
# a kind of rows the strategy declares (its join modules' `link_dtypes(kind)`)
INPUT, RESULTS = "input", "results"


@dataclass(frozen=True)
class Topology:
    size: int                     # ranks in the job, driver included

    name = "?"

    @property
    def workers(self):
        return list(range(1, self.size))

    def role(self, rank):
        return "driver" if rank == DRIVER else "worker"

    def upstream(self, rank):
        raise NotImplementedError

    def downstream(self, rank):
        raise NotImplementedError

    def peers(self, rank):
        return [w for w in self.workers if w != rank]

    def carries(self, sender, receiver):
        """What the DATA link sender -> receiver carries: INPUT, RESULTS, or a strategy's kind."""
        return INPUT

    def continues(self, rank, src):
        """Downstream links of `rank` on which input that came from `src` goes on (the path the
        end-of-stream marker follows); by default all of them."""
        return self.downstream(rank)

    def ends(self, rank, src, ended):
        """Where end-of-stream goes on when `src` ends at `rank` (`ended`: the upstream ranks ended
        so far, `src` among them): the links of `continues(rank, src)` that no other upstream link
        still feeds. So each link gets one copy, after everything that can still reach it (a
        merger tells its parent once all its inputs have ended, not once per input)."""
        return [d for d in self.continues(rank, src)
                if all(u in ended for u in self.upstream(rank) if d in self.continues(rank, u))]

    def entries(self):
        """Workers the driver sends DATA to."""
        return self.downstream(DRIVER)

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

    def links(self):
        """Every directed DATA link (sender, receiver)."""
        return [(a, b) for a in range(self.size) for b in self.downstream(a)]

    def explain(self):
        """Lines saying what the ranks do, in the strategy's words, for `mpi-join explain`
        (none by default: the roles and links say it)."""
        return []

    def describe(self):
        return {r: {"role": self.role(r), "up": self.upstream(r), "down": self.downstream(r),
                    "carries": {d: self.carries(r, d) for d in self.downstream(r)}}
                for r in range(self.size)}


def _line_role(size, rank, first, inner, last):
    """The role of `rank` among workers 1..size-1 in a line: `first`, `inner` or `last`, or
    `solo` for a line of one worker (both ends at once)."""
    if rank == DRIVER:
        return "driver"
    if size == 2:
        return "solo"
    return first if rank == 1 else (last if rank == size - 1 else inner)


class Star(Topology):
    """The driver feeds every worker directly; workers do not send DATA to each other."""
    name = "star"

    def upstream(self, rank):
        return [] if rank == DRIVER else [DRIVER]

    def downstream(self, rank):
        return self.workers if rank == DRIVER else []


class Ring(Topology):
    """Workers 1..n in a ring: each sends to the next, the last back to the first (the head),
    which the driver feeds. Roles: `head`, `ring` (inner), `tail`; a ring of one worker is `solo`
    (head and tail at once)."""
    name = "ring"

    def role(self, rank):
        return _line_role(self.size, rank, "head", "ring", "tail")

    def _next(self, w):
        return 1 if w == self.size - 1 else w + 1

    def _prev(self, w):
        return self.size - 1 if w == 1 else w - 1

    def upstream(self, rank):
        if rank == DRIVER:
            return []
        up = [self._prev(rank)] if self.size > 2 else []
        return ([DRIVER] if rank == 1 else []) + up

    def downstream(self, rank):
        if rank == DRIVER:
            return [1]
        return [self._next(rank)] if self.size > 2 else []

    def continues(self, rank, src):
        if rank == 1 and src == self.size - 1:      # back at the head: one round is complete
            return []
        return self.downstream(rank)


class Chain(Topology):
    """Workers 1..n in a line. Bidirectional (handshake join): the driver feeds both ends and
    each worker sends to both neighbours; one-way: the driver feeds worker 1 and data flows right.
    With `feed_all` (low-latency handshake join) the driver feeds every worker, and input ends
    where it arrives: end-of-stream does not travel the chain."""
    name = "chain"

    def __init__(self, size, bidirectional=True, feed_all=False):
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "bidirectional", bidirectional)
        object.__setattr__(self, "feed_all", feed_all)

    def role(self, rank):
        """`left`, `middle`, `right`; a chain of one worker is `solo` (both ends at once)."""
        return _line_role(self.size, rank, "left", "middle", "right")

    def left_of(self, rank):
        """The rank on a worker's left: the previous worker, or the driver, which feeds the left
        end (a bidirectional chain's R input enters there)."""
        return rank - 1

    def right_of(self, rank):
        """The rank on a worker's right: the next worker, or the driver at the right end."""
        return rank + 1 if rank < self.size - 1 else DRIVER

    def neighbours(self, rank):
        """The workers next to `rank`."""
        return [w for w in (rank - 1, rank + 1) if 1 <= w < self.size]

    def upstream(self, rank):
        if rank == DRIVER:
            return []
        n = self.size - 1
        if getattr(self, "feed_all", False):
            return [DRIVER] + [w for w in (rank - 1, rank + 1) if 1 <= w <= n]
        up = [rank - 1] if rank > 1 else [DRIVER]
        if self.bidirectional:
            up += [rank + 1] if rank < n else ([DRIVER] if rank != 1 else [])
        return up

    def downstream(self, rank):
        n = self.size - 1
        if rank == DRIVER:
            if getattr(self, "feed_all", False):
                return self.workers
            return sorted({1, n}) if self.bidirectional else [1]
        down = [rank + 1] if rank < n else []
        if self.bidirectional and rank > 1:
            down = [rank - 1] + down
        return down

    def continues(self, rank, src):
        """Left-to-right input goes on to the right, right-to-left input to the left."""
        if getattr(self, "feed_all", False):
            return []
        if not self.bidirectional:
            return self.downstream(rank)
        n = self.size - 1
        if src == rank - 1 or (src == DRIVER and rank == 1 and n > 1):
            return [rank + 1] if rank < n else []
        if src == rank + 1 or (src == DRIVER and rank == n and n > 1):
            return [rank - 1] if rank > 1 else []
        return []


class Tree(Topology):
    """The driver is the root of a tree of fanout b over the workers (breadth first): each node
    sends to its children."""
    name = "tree"

    def __init__(self, size, fanout=2):
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "fanout", max(1, int(fanout)))

    def _children(self, rank):
        b = self.fanout
        first = rank * b + 1
        return [c for c in range(first, first + b) if c < self.size]

    def role(self, rank):
        if rank == DRIVER:
            return "driver"
        return "inner" if self._children(rank) else "leaf"

    def upstream(self, rank):
        return [] if rank == DRIVER else [(rank - 1) // self.fanout]

    def downstream(self, rank):
        return self._children(rank)


class Bipartite(Topology):
    """Two sets of units behind the driver (a router): workers 1..r are the left set, the rest
    the right set; the driver feeds every unit, and each unit's peers are the other set."""
    name = "bipartite"

    def __init__(self, size, left=None):
        object.__setattr__(self, "size", size)
        n = size - 1
        object.__setattr__(self, "left", max(1, min(n - 1, n // 2 if left is None else int(left))) if n > 1 else 1)

    def side(self, rank):
        return 0 if 1 <= rank <= self.left else 1

    def role(self, rank):
        if rank == DRIVER:
            return "driver"
        return "left-unit" if self.side(rank) == 0 else "right-unit"

    def upstream(self, rank):
        return [] if rank == DRIVER else [DRIVER]

    def downstream(self, rank):
        return self.workers if rank == DRIVER else []

    def peers(self, rank):
        return [w for w in self.workers if self.side(w) != self.side(rank)]


TOPOLOGIES = {"star": Star, "ring": Ring, "chain": Chain, "tree": Tree, "bipartite": Bipartite}
