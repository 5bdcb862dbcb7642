"""The join predicate: its conditions (Equi, Band, Theta, Interval) and their conjunction
(Predicate), as config.py reads them from a job file; and turning them into arrays the kernels
read: key matrices, band columns, UDFs."""
import functools
import importlib
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConfigError
from ..schema import NULL

@dataclass(frozen=True)
class Equi:
    kind: ClassVar[str] = "equi"
    left: tuple   # (stream index, column)
    right: tuple


@dataclass(frozen=True)
class Band:
    kind: ClassVar[str] = "band"
    left: tuple
    right: tuple
    eps: float
    closed: bool


@dataclass(frozen=True)
class Theta:
    kind: ClassVar[str] = "theta"
    udf: str          # "module:function", numba-compilable, f(rec_a, rec_b) -> bool
    streams: tuple    # (stream index a, stream index b)


@dataclass(frozen=True)
class Interval:
    """right.ts - left.ts in [lo, up] (closed, in ts units): the part of a shifted interval
    (predicate.interval with 0 outside it) that the two windows cannot say. The windows are its
    hull, so each side is kept exactly as long as the interval needs; this condition removes
    the pairs inside the hull but outside the interval (`join/range_join.pair_mask`, in int64:
    event times in ns do not fit a float64)."""
    kind: ClassVar[str] = "interval"
    left: tuple       # (stream index, "ts")
    right: tuple
    lo: int
    up: int


@dataclass(frozen=True)
class AsOf:
    """An ASOF join: each row of stream `left` is joined with the one row of stream `right` with
    equal keys (the equi conditions) nearest to it in event time in `direction` ("backward":
    right.ts <= left.ts, the latest; "forward": right.ts >= left.ts, the earliest; "nearest":
    the least |right.ts - left.ts|, the earlier side on a tie), equal times counting when
    `closed`, at most `tolerance` ts units apart (None: any). Of right rows at the same best
    time, the last to arrive (the largest seq). `keep`: a left row without one is a result too,
    with null right (ASOF LEFT JOIN). README "ASOF joins"."""
    kind: ClassVar[str] = "asof"
    left: int
    right: int
    direction: str
    tolerance: int | None
    closed: bool
    keep: bool


@dataclass(frozen=True)
class Predicate:
    """A conjunction of pairwise conditions (equi, band, theta) between streams, and the
    residual time condition of a shifted interval (`interval`; not a kind: the windows carry
    time, and every strategy evaluates it through the shared join modules)."""
    equi: tuple = ()
    band: tuple = ()
    theta: tuple = ()
    interval: tuple = field(default=(), repr=False)
    outer: tuple = field(default=(), repr=False)     # streams whose tuples without a partner are results too
    windows: tuple = field(default=(), repr=False, compare=False)   # each stream's Window: what a join can derive from ts
    asof: AsOf | None = None

    @property
    def kinds(self):
        return {k for k in ("equi", "band", "theta") if getattr(self, k)} | ({"asof"} if self.asof else set())

    def between(self, i, j):
        """Conditions relating streams i and j, each oriented so that `left` is stream i."""
        out = []
        for c in self.equi + self.band + self.interval:
            if (c.left[0], c.right[0]) == (i, j):
                out.append(c)
            elif (c.left[0], c.right[0]) == (j, i):
                out.append(_flip(c))
        for t in self.theta:
            if t.streams in ((i, j), (j, i)):
                out.append(t)
        return out


def _flip(c):
    if isinstance(c, Equi):
        return Equi(c.right, c.left)
    if isinstance(c, Interval):
        return Interval(c.right, c.left, -c.up, -c.lo)
    return Band(c.right, c.left, c.eps, c.closed)



_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


@functools.lru_cache(maxsize=None)
def load_udf(spec):
    """Import "module:function" (or "/path/to/module.py:function") and return it as a numba function (compiling it if it is plain
    Python). Cached: one dispatcher per spec, so kernels specialised for it compile once."""
    import numba
    mod, _, fn = spec.rpartition(":")
    try:
        m = _import_file(mod) if mod.endswith(".py") else importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's to see
        raise ConfigError(f"cannot import module {mod!r}: {e}") from None
    f = getattr(m, fn, None)
    if f is None:
        raise ConfigError(f"module {mod!r} has no function {fn!r}")
    if isinstance(f, numba.core.registry.CPUDispatcher):
        return f
    import inspect
    if not inspect.isfunction(f):
        raise ConfigError(f"{mod}:{fn} is not a Python function ({type(f).__name__}); a UDF is a numba-compilable "
                          f"def f(a, b) -> bool")
    return numba.njit(f)


def _import_file(path):
    """A UDF module given by its file (config.py resolves modules next to the job file to their
    path): imported under a name unique to the path."""
    import hashlib
    import importlib.util
    import sys
    name = "mpi_join_udf_" + hashlib.sha1(path.encode()).hexdigest()[:16]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        try:
            spec.loader.exec_module(m)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def key_widths(dt_a, cols_a, dt_b, cols_b):
    """int64 words each equi pair takes in a key matrix: one for an integer column; for text
    (charN), enough 8-byte words for the longer of the two sides, so both sides line up. When
    either side's rows carry the NULL flag, one word more: the null word (key_matrix)."""
    out = []
    for a, b in zip(cols_a, cols_b):
        fa, fb = dt_a.fields[a][0], dt_b.fields[b][0]
        out.append(-(-max(fa.itemsize, fb.itemsize) // 8) if fa.kind == "S" else 1)
    if cols_a and (NULL in dt_a.names or NULL in dt_b.names):
        out.append(1)
    return out


def key_matrix(batch, cols, widths=None):
    """Equi-key columns of a batch as an (n, words) int64 matrix, exact: an integer key is one
    word, a text key its bytes zero-padded into `widths[j]` words (see key_widths), so two keys
    are equal exactly when their matrix rows are; a hash is never the comparison. The null word
    (a last width past the columns') is 0, or seq + 1 in a row whose NULL flag is set: seqs are
    unique across streams, so such a row's key equals no other row's (SQL: a null key matches
    nothing), and it still hashes, routes and sits in its window like any row."""
    widths = widths or [-(-batch.dtype.fields[c][0].itemsize // 8) if batch.dtype.fields[c][0].kind == "S" else 1
                        for c in cols]
    n = len(batch)
    out = np.empty((n, sum(widths)), np.int64)
    if len(widths) > len(cols):
        out[:, -1] = np.where(batch[NULL] != 0, batch["seq"] + 1, 0) if NULL in batch.dtype.names else 0
    k = 0
    for c, w in zip(cols, widths):
        col = batch[c]
        if col.dtype.kind == "S":
            raw = np.zeros((n, 8 * w), np.uint8)
            size = col.dtype.itemsize
            raw[:, :size] = np.ascontiguousarray(col).view(np.uint8).reshape(n, size)
            out[:, k:k + w] = raw.view(np.int64)
        else:
            out[:, k] = col
        k += w
    return out


def mix64(x):
    """splitmix64 finaliser, vectorised: a well-spread 64-bit hash of uint64 values."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLD
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def key_hash(keys):
    """One 64-bit hash per row of an (n, k) key matrix; equal keys always hash equal."""
    h = np.zeros(keys.shape[0], np.uint64)
    with np.errstate(over="ignore"):
        for j in range(keys.shape[1]):
            h = mix64(h * np.uint64(31) + keys[:, j].view(np.uint64))
    return h


def band_matrix(batch, cols, rows=None):
    """Band columns of a batch (of its `rows` only, when given) as an (n, k) float64 matrix:
    bands are evaluated in float64. A row whose NULL flag is set is NaN: within no band."""
    at = (lambda x: x) if rows is None else (lambda x: x[rows])
    out = np.empty((len(batch) if rows is None else len(rows), len(cols)), np.float64)
    for j, c in enumerate(cols):
        out[:, j] = at(batch[c])
    if NULL in batch.dtype.names:
        out[at(batch[NULL]) != 0] = np.nan
    return out


def no_null(A, B, ia, ib):
    """Which pairs (A[ia], B[ib]) have no row whose NULL flag is set (None: neither side has one)."""
    if NULL not in A.dtype.names and NULL not in B.dtype.names:
        return None
    keep = np.ones(len(ia), bool)
    if NULL in A.dtype.names:
        keep &= A[NULL][ia] == 0
    if NULL in B.dtype.names:
        keep &= B[NULL][ib] == 0
    return keep


def binary_parts(pred, i, j):
    """Split the conditions between streams i and j into (equi cols i, equi cols j, bands, thetas)."""
    conds = pred.between(i, j)
    eq = [c for c in conds if c.kind == "equi"]
    bd = [c for c in conds if c.kind == "band"]
    th = [c for c in conds if c.kind == "theta"]
    return ([c.left[1] for c in eq], [c.right[1] for c in eq], bd, th)
