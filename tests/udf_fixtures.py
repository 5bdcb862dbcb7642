"""UDFs used by the tests (importable because tests/ is on sys.path)."""


def close_values(a, b):
    return abs(a.v - b.w) < 3.0


def sum_small(a, b):
    return a.v + b.w < 15.0
