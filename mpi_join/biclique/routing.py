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


def store_unit(batch, n_units, groups):
    """Index (0..n_units-1) of the unit of its own side that stores each tuple."""
    g = group_of(batch, groups)
    spans = np.array(subgroups(n_units, groups), np.int64)
    start, size = spans[g, 0], spans[g, 1] - spans[g, 0]
    return start + spread(batch, size)


def join_mask(batch, n_units, groups, unit):
    """Which tuples go to opposite-side unit `unit` (an index 0..n_units-1 of that side) for
    joining: those whose key hashes to the unit's subgroup."""
    if groups == 1:
        return np.ones(len(batch), bool)
    g = next(i for i, (a, b) in enumerate(subgroups(n_units, groups)) if a <= unit < b)
    return group_of(batch, groups) == g
