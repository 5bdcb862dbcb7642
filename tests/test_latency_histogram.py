"""The production-delay histogram (runtime/metrics.py): log-scale bins that ranks merge by adding."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mpi_join.runtime.metrics import _EDGES, _NBINS, LatencyHistogram


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 3000), runs=st.booleans(), edges=st.booleans())
def test_runs_of_equal_delays_are_binned_as_every_delay_would_be(seed, n, runs, edges):
    """A run of equal delays (a probe's results) is binned once and counted by its length: the
    counts equal binning every value (the number of edges at or below it), below the first edge,
    past the last, negative and on an edge exactly."""
    rng = np.random.default_rng(seed)
    lat = rng.lognormal(15, 4, n).astype(np.int64) - rng.integers(0, 2, n) * 10**4
    if edges:
        lat[::3] = _EDGES[rng.integers(0, len(_EDGES), len(lat[::3]))].astype(np.int64)
    if runs:
        lat = np.repeat(lat, rng.integers(1, 12, n))
    h = LatencyHistogram()
    h.add(lat)
    h.add(lat[:0])
    assert (h.counts == np.bincount(np.searchsorted(_EDGES, lat, side="right"), minlength=_NBINS)).all()
    assert h.n == len(lat)
