"""All pairs: a few rows of a parameter product in which every value of each factor meets every
value of every other factor at least once (a covering array of strength 2).

The simulated strategies' matrices (ring length x interleaving x predicate x window kind, tree
shape x predicate x window kind, ...) took every combination. A fault in the code of one value,
or in the meeting of two (a predicate kind on a ring of one; count windows at fanout 3), shows
in a row that holds them; each row is a run of the whole graph, so the rows meet many other
interactions as well. The full product of 48 runs becomes 12 or so."""
import itertools


def all_pairs(*factors):
    """Rows (tuples, one value per factor, in factor order) that cover every pair of values of
    any two factors; greedy and deterministic: each row taken is the first of the product that
    covers the most pairs not yet covered."""
    factors = [list(f) for f in factors]
    if len(factors) < 2:
        return [tuple(r) for r in itertools.product(*factors)]
    todo = {(i, a, j, b) for i, j in itertools.combinations(range(len(factors)), 2)
            for a in range(len(factors[i])) for b in range(len(factors[j]))}
    candidates = list(itertools.product(*[range(len(f)) for f in factors]))
    rows = []
    while todo:
        def gain(c):
            return sum((i, c[i], j, c[j]) in todo for i, j in itertools.combinations(range(len(c)), 2))
        best = max(candidates, key=gain)
        todo -= {(i, best[i], j, best[j]) for i, j in itertools.combinations(range(len(best)), 2)}
        rows.append(tuple(f[k] for f, k in zip(factors, best)))
    return rows
