"""pairwise.all_pairs: every pair of values of any two factors is in some row, and the rows are
fewer than the product's (what the simulated matrices rely on)."""
import itertools

import pytest

from pairwise import all_pairs


@pytest.mark.parametrize("factors", [
    (["equi", "band", "theta"], ["time", "count"], [1, 2, 3, 4], [1, 3]),
    (["equi", "band", "theta"], ["time", "count"], [(1, 2), (2, 2), (3, 3), (4, 2), (6, 2), (6, 3)], [1, 5]),
    ([3, 4], [1, 2, 3, 4], [1, 4], ["time", "count"]),
    ([1, 2], ["a"]),
])
def test_every_pair_of_values_is_in_a_row(factors):
    rows = all_pairs(*factors)
    for i, j in itertools.combinations(range(len(factors)), 2):
        assert {(r[i], r[j]) for r in rows} == set(itertools.product(factors[i], factors[j]))
    assert all(len(r) == len(factors) and all(v in f for v, f in zip(r, factors)) for r in rows)
    assert len(rows) == len(set(rows)) <= len(list(itertools.product(*factors)))
    if len(factors) > 2:
        assert len(rows) < len(list(itertools.product(*factors))) / 2


def test_a_dict_factor_gives_its_keys():
    assert sorted(all_pairs({"x": 1, "y": 2}, [0])) == [("x", 0), ("y", 0)]
