"""`stripes`, a test strategy written from the README's "Adding a strategy": a band join over key
stripes. Rank 0 sends each tuple to every core whose stripe its band [v - eps, v + eps] touches; a
core stores the tuples of its own stripe and probes with all it gets; results go to the sink. No
rank-0 operator and no restore code: its placement routes and deals the stored rows again."""
import numpy as np

from broadcast_strategy import Store, build
from mpi_join.runtime.placement import home
from mpi_join.strategies import REGISTRY, StrategyInfo, register


class Stripes:
    """Stripe of a value: floor(v / width) mod count, width twice the band (NaN in stripe 0)."""
    def __init__(self, job):
        band = job.predicate.band[0]
        self.cols, self.eps = dict((band.left, band.right)), band.eps      # stream -> its column
        self.width = 2 * band.eps or 1.0

    def _stripe(self, rows, s, shift=0.0):
        v = np.nan_to_num(rows[self.cols[s]].astype(np.float64) + shift, nan=0.0)
        return np.floor(np.clip(v, -2.0 ** 60, 2.0 ** 60) / self.width).astype(np.int64)

    def home(self, rows, s, index, count):
        return self._stripe(rows, s) % count == index

    def reach(self, rows, s, index, count):            # the stripes of [v - eps, v + eps], a stripe wider
        lo, hi = self._stripe(rows, s, -self.eps) - 1, self._stripe(rows, s, self.eps) + 1
        return self.home(rows, s, index, count) | ((index - lo) % count <= np.minimum(hi - lo, count - 1))


class Core(Store):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.where = home(job, graph, rank)

    def mine(self, b, s):
        return b[self.where(b, s)]


if "stripes" not in REGISTRY:
    register(StrategyInfo(name="stripes", summary="test: a band join over key stripes", predicates=frozenset({"band"}),
                          requires=frozenset({"band"}), min_ranks=3, testing=True, rescale=True,
                          graph="stripe_strategy:build_stripes", roles={"core": "stripe_strategy:Core"}))


def build_stripes(size, params):
    return build(size, params, "stripe_strategy:Stripes")
