"""ContRand routing (BiStream, Section 3.2.2, Algorithm 1), pure numpy.

Each side's units are split into subgroups (d for R, e for S; consecutive units, sizes as even as
they go). A tuple is stored at one unit of the subgroup its key hashes to, chosen at random
within it (content-insensitive: a hash of the tuple's seq, so a replay after --resume routes it
the same way), and sent for joining to every unit of the opposite side's subgroup that its key
hashes to. d = e = 1 is pure random routing (any predicate); d = m and e = n is pure hashing
(equi joins only: the key hash `_h` decides)."""
import numpy as np

_MIX = np.uint64(0x9E3779B97F4A7C15)


def subgroups(n_units, groups):
    """[start, stop) of each of `groups` subgroups of n_units consecutive units."""
    cuts = np.linspace(0, n_units, groups + 1).round().astype(np.int64)
    return list(zip(cuts[:-1], cuts[1:]))


def group_of(batch, groups):
    """The subgroup each tuple's key hashes to (all 0 with one subgroup)."""
    if groups == 1:
        return np.zeros(len(batch), np.int64)
    return (batch["_h"] % np.uint64(groups)).astype(np.int64)


def spread(batch, n):
    """A random choice among n for each tuple, made from its seq: the same on a replay."""
    with np.errstate(over="ignore"):
        r = ((batch["seq"].astype(np.uint64) * _MIX) >> np.uint64(33)).astype(np.int64)
    return r % np.maximum(n, 1)


class Membership:
    """Which units of each side store and which join, per subgroup (2PS scaling changes it).

    A unit is *active* in one subgroup (stores tuples of it, joins the other side's tuples that
    hash to it), *draining* in one (stores nothing more, still joins until nothing it holds can
    be seen: then released), or *spare* (held idle: it gets every batch, empty). Initially the
    first `active[s]` units of side s are split into subgroups as `subgroups` does, and the rest
    are spare. `code` is the table as one int per unit (R-units then S-units): -1 spare,
    2 g active in g, 2 g + 1 draining in g; the shuffler sends it with every batch."""

    def __init__(self, units, groups, active=(0, 0)):
        self.units, self.groups = tuple(units), tuple(groups)
        self.code = []
        for s in (0, 1):
            a = active[s] or units[s]
            side = [-1] * units[s]
            for g, (lo, hi) in enumerate(subgroups(a, groups[s])):
                for u in range(lo, hi):
                    side[u] = 2 * g
            self.code.append(side)

    @classmethod
    def of(cls, units, groups, code):
        m = cls.__new__(cls)
        m.units, m.groups = tuple(units), tuple(groups)
        m.code = [list(code[:units[0]]), list(code[units[0]:units[0] + units[1]])]
        return m

    def flat(self):
        return tuple(self.code[0] + self.code[1])

    def active(self, side, g):
        return [u for u, c in enumerate(self.code[side]) if c == 2 * g]

    def draining(self, side, g=None):
        return [u for u, c in enumerate(self.code[side]) if c >= 0 and c % 2 and (g is None or c // 2 == g)]

    def spare(self, side):
        return [u for u, c in enumerate(self.code[side]) if c < 0]

    def group(self, side, u):
        """The subgroup unit u joins for (active or draining), or -1 when spare."""
        c = self.code[side][u]
        return c // 2 if c >= 0 else -1

    def add(self, side, g, units):
        for u in units:
            assert self.code[side][u] < 0, f"unit {u} of side {side} is not spare"
            self.code[side][u] = 2 * g

    def drain(self, side, units):
        for u in units:
            assert self.code[side][u] >= 0 and self.code[side][u] % 2 == 0
            self.code[side][u] += 1

    def release(self, side, units):
        for u in units:
            self.code[side][u] = -1

    def store_units(self, batch, side):
        """Index of the unit of side `side` that stores each tuple: one chosen at random (from
        the seq) among the active units of the subgroup its key hashes to."""
        g = group_of(batch, self.groups[side])
        out = np.empty(len(batch), np.int64)
        r = spread(batch, np.iinfo(np.int64).max)
        for k in range(self.groups[side]):
            members = np.array(self.active(side, k), np.int64)
            if not len(members):
                raise RuntimeError(f"subgroup {k} of side {side} has no active unit")
            mine = g == k
            out[mine] = members[r[mine] % len(members)]
        return out

    def joined_at(self, batch, side):
        """For tuples of the other side: the subgroup of side `side` each joins at (its key's
        hash); unit u of `side` joins those with joined_at == group(side, u)."""
        return group_of(batch, self.groups[side])
