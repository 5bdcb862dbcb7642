"""The operator harness: every operator of every registered strategy (test-only ones included),
on every predicate kind it supports, on streams that carry a column of every type, snapshotted halfway through, written to and read back from a real HDF5 rank file
(checkpoint.write_rank/read_rank, checksums and declared dtypes included), restored into a fresh
instance, and fed the rest: its outputs must be the outputs of an instance that never stopped.

The calls each module gets are recorded from a whole run of the strategy (sim.py: the real Driver and Workers in one process
and routers, links interleaved at random), so every operator sees the headers and batches its
upstream really sends."""
from types import SimpleNamespace

import numpy as np
import pytest

from mpi_join.storage import checkpoint as ck
from mpi_join import strategies
from mpi_join.config import parse_job
from mpi_join.master.coordinator import Coordinator
from mpi_join.master.source import Source
from sim import simulate_strategy

# one payload column of every type the job file accepts (schema.py), on both streams
TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "bool",
         "char4", "string", "uint8[3]", "float64[2]"]


PREDICATES = {"equi": 'equi = [["R.k", "S.k"]]',
              "equi+band": 'equi = [["R.k", "S.k"]]\nband = [{left = "R.v", right = "S.w", eps = 1.5}]',
              "band": 'band = [{left = "R.v", right = "S.w", eps = 0.5}]',
              "theta": 'theta = [{udf = "udf_fixtures:close_values", streams = ["R", "S"]}]'}


def _job(strategy, kind, pred="equi"):
    import tomllib
    cols = ", ".join(f'c{i} = "{t}"' for i, t in enumerate(TYPES))
    win = ('"9ms"', '"4ms"') if kind == "time" else ("11", "23")
    text = f"""
[job]
name = "harness"
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.R]
schema = {{ k = "int32", v = "float64", {cols} }}
window = {win[0]}
[streams.S]
schema = {{ k = "int64", w = "float32", {cols} }}
window = {win[1]}
[predicate]
{PREDICATES[pred]}
[strategy]
name = "{strategy}"
"""
    return parse_job(tomllib.loads(text), "harness.toml")


def _streams(job, rng, n=160):
    sid = rng.integers(0, 2, n)
    ts = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
    out = []
    for s, stream in enumerate(job.streams):
        a = np.zeros(int((sid == s).sum()), stream.dtype)
        a["seq"], a["ts"] = np.nonzero(sid == s)[0], ts[sid == s]
        a["k"] = rng.integers(0, 5, len(a))
        raw = rng.integers(0, 256, a.nbytes, dtype=np.uint8)
        for name in stream.dtype.names[3:]:             # every payload column: random bytes of its type
            col = a[name]
            width = col.dtype.itemsize * int(np.prod(col.shape[1:], dtype=np.int64))
            bytes_ = raw[:len(a) * width].reshape(len(a), width) if len(a) else np.zeros((0, width), np.uint8)
            a[name] = bytes_.view(col.dtype).reshape(col.shape) if col.dtype.kind != "b" else bytes_[:, 0] % 2 == 1
        a["vw"[s]] = rng.integers(0, 8, len(a)) * 0.5         # the band's and the UDF's columns meet
        out.append(a)
    return out


def _norm(out):
    """An Output as plain values, arrays as their bytes."""
    if out is None:
        return None
    return ([([s.tolist() for s in seqs], tin.tolist()) for seqs, tin in out.results],
            [(d, [(b.dtype.str, b.tobytes()) for b in bs], bounds, repr(body), order)
             for d, bs, bounds, body, order in out.forward],
            [(d, repr(m)) for d, m in out.control],
            [(k, final, rows.tobytes()) for k, final, rows, _ in out.snapshots])


def _feed(module, calls):
    """The calls handed to `module`, as the worker makes them (after_data follows each on_data)."""
    def one(c):
        if c[1] != "data":
            return module.on_eos(c[2])
        out = module.on_data(c[2], c[3], c[4])
        module.after_data(c[3])
        return out
    return [_norm(one(c)) for c in calls]


class _Input:
    """The source as rank 0's coordinator sees it in the harness (the real Coordinator): the
    batch's bounds, never done or full; its sends, changes and the moves it begins are recorded
    (the moves never start: nothing is moving); load requests get no answer."""
    done, released = False, 0

    def __init__(self):
        self.sent, self.now = [], ()

    def bounds(self):
        return self.now

    def windows_full(self):
        return False

    def post(self, out):
        for dests, batches, bounds, body, order in (out.forward if out is not None else ()):
            self.sent.append((tuple(dests), [(b.dtype.str, b.tobytes()) for b in batches], repr(body),
                              tuple(bounds), order))

    def coordinator(self):
        moves = SimpleNamespace(on={}, begin=lambda unit, src, dst, now: self.sent.append(("move", unit, src, dst)),
                                settle=lambda: None)
        parts = SimpleNamespace(changing=False, barrier_batches=None, at_barrier=None,
                                change=lambda what, barrier=False: self.sent.append(("change", what, barrier)))
        return Coordinator(self, moves, parts, lambda dest, msg: None, self.post,
                           pump=lambda: None)


def _route(op, calls, epoch=0):
    """Rank 0's operator fed the source's batches (and flushed), the epochs numbered on from
    `epoch`: what it sent, per call."""
    out = []
    for c in calls:
        rt = op.coordinator._source
        rt.sent = []
        if c[1] == "data":
            rt.now = c[3].bounds
            rt.post(op.on_data(c[2], c[3], c[4]))
            epoch += 1
            op.end_of_epoch(epoch)
        elif c[1] == "flush":
            rt.post(op.flush())
        out.append(rt.sent)
    return out


def _rank0(cls, job, graph, dtypes):
    op = cls(job, 0, graph, dtypes)
    op.connect(_Input().coordinator())
    return op


def _covering(info):
    """Worker counts (from the default, max(3, fewest)) at which every role class the strategy's
    graphs give from its fewest ranks to 8 appears: a chain's `solo` needs one worker, say."""
    params = {k: p.default for k, p in info.params.items()}
    first = max(3, info.min_ranks - 1)
    counts, seen = [], set()
    for w in [first] + [w for w in range(info.min_ranks - 1 or 1, 8) if w != first]:
        try:
            graph = info.build_graph(w + 1, params)
        except Exception:  # noqa: BLE001 - a count its graph does not take
            continue
        classes = {info.role_code(graph.role(r)) for r in graph.workers}
        if classes - seen:
            counts.append(w)
            seen |= classes
    return counts


def _cases():
    """Every strategy of the registry (hyphenated test strategies too) on each predicate kind it
    supports, the window kinds in turn, at worker counts where each of its role classes appears;
    biclique also with its online aggregate."""
    out, turn = [], 0
    for name in strategies.names():
        info = strategies.get(name)
        if info.streams[0] > 2:
            continue
        counts = _covering(info)
        for pred in PREDICATES:
            kinds = set(pred.split("+"))
            if kinds <= info.predicates and info.requires <= kinds and (pred == "equi" or not info.testing
                                                                         or info.requires):
                for w in counts if pred == "equi" or "equi" not in info.predicates else counts[:1]:
                    kind = ("time", "count")[turn % 2]
                    turn += 1
                    out.append(pytest.param(name, kind, pred, "", w, id=f"{name}-{kind}-{pred}-{w}"))
    return out + [pytest.param("biclique", "time", "equi", "aggregate", 4, id="biclique-time-equi-aggregate")]


@pytest.mark.parametrize("strategy,kind,pred,variant,workers", _cases())
def test_every_operator_round_trips_its_state(tmp_path, strategy, kind, pred, variant, workers):
    name = "-".join(x for x in (strategy, variant) if x)
    params = {"aggregate": "count(*), sum(R.c9) by S.k", "update_ms": 0.0} if variant == "aggregate" else {}
    job = _job(strategy, kind, pred)
    info = strategies.get(strategy)
    arrays = _streams(job, np.random.default_rng(7))
    trace = []
    simulate_strategy(strategy, job, arrays, workers, seed=3, trace=trace, snapshots=[], **params)
    job = strategies.check_strategy(job.__class__(**{**job.__dict__, "strategy": job.strategy.__class__(
        name=strategy, params=params)}))
    graph = info.build_graph(workers + 1, job.strategy.params)
    dtypes = Source(job, arrays=arrays).dtypes
    checked = 0
    for rank in graph.workers:
        calls = [c for c in trace if c[0] == rank and c[1] in ("data", "eos")]
        cls = info.load_role(graph.role(rank))
        whole = _feed(cls(job, rank, graph, dtypes), calls)
        half = len(calls) // 2
        first = cls(job, rank, graph, dtypes)
        assert _feed(first, calls[:half]) == whole[:half], (name, rank)
        arrays_, attrs = first.snapshot()
        arrays_ = {k: np.array(v, copy=True) for k, v in arrays_.items()}      # as the worker's cut does
        _feed(first, calls[half:])     # the rank file is written later: the operator goes on meanwhile
        ck.write_rank(str(tmp_path), 1, rank, {f"module/{k}": v for k, v in arrays_.items()}, {"module": attrs})
        back, battrs = ck.read_rank(str(tmp_path), 1, rank, lambda n, _: first.state_dtype(n[len("module/"):]))
        fresh = cls(job, rank, graph, dtypes)
        fresh.restore({k[len("module/"):]: v for k, v in back.items()}, battrs["module"])
        assert _feed(fresh, calls[half:]) == whole[half:], (name, rank, graph.role(rank))
        checked += bool(calls[half:])
    assert checked >= len(graph.workers) - 1, "most operators must have calls after the cut"
    calls = [c for c in trace if c[0] == 0]             # rank 0's operator, the same way
    cls = info.load_role("driver")
    whole = _route(_rank0(cls, job, graph, dtypes), calls)
    half = len(calls) // 2
    first = _rank0(cls, job, graph, dtypes)
    assert _route(first, calls[:half]) == whole[:half], name
    arrays_, attrs = first.snapshot()
    ck.write_rank(str(tmp_path), 2, 0, arrays_, attrs)
    back, battrs = ck.read_rank(str(tmp_path), 2, 0, lambda n, _: first.state_dtype(n))
    fresh = _rank0(cls, job, graph, dtypes)
    fresh.restore(back, battrs)
    assert _route(fresh, calls[half:], sum(c[1] == "data" for c in calls[:half])) == whole[half:], name


def test_state_of_another_layout_is_refused_with_one_line():
    """A splitjoin combiner's state as an earlier version wrote it (the queue lengths as a bare
    list, the counters beside them): one InputError naming the part, not a traceback."""
    from mpi_join.errors import InputError
    job = strategies.check_strategy(_job("splitjoin", "time"))
    info = strategies.get("splitjoin")
    graph = info.build_graph(4, job.strategy.params)
    dtypes = Source(job, arrays=_streams(job, np.random.default_rng(1), 10)).dtypes
    combiner = info.load_role("combiner")(job, 3, graph, dtypes)
    with pytest.raises(InputError, match=r"no valid part 'gather'.*another version"):
        combiner.restore({}, {"gather": [0, 0], "stars": [0, 0], "received": 0})


def test_rows_names_its_owner_not_the_join():
    """Rows(self.join), the easy slip, is refused where it is written, not at the first checkpoint."""
    from mpi_join.runtime.operator import Rows
    from mpi_join.slaves.local_join import BinaryJoin

    class Op:
        pass
    op = Op()
    op.join = object.__new__(BinaryJoin)
    assert Rows(op).join is op.join
    with pytest.raises(TypeError, match=r"Rows\(self\)"):
        Rows(op.join)


def _homed():
    """(strategy, predicate) of every registered strategy whose workers' stored rows have a
    declared home (a Rows part's own, or the placement of rank 0's edge into the worker)."""
    from mpi_join.runtime.operator import Rows
    from mpi_join.runtime.placement import home
    from mpi_join.join.window import runtime_dtype
    out = []
    for name in strategies.names():
        info = strategies.get(name)
        if info.streams[0] > 2:
            continue
        pred = "equi" if "equi" in info.predicates and not info.requires - {"equi"} else "band"
        job = strategies.check_strategy(_job(name, "time", pred))
        graph = info.build_graph(max(5, info.min_ranks), job.strategy.params)
        dtypes = [runtime_dtype(s.dtype, len(job.streams)) for s in job.streams]

        def own(r):
            parts = info.load_role(graph.role(r))(job, r, graph, dtypes).__dict__.get("_parts", {})
            return any(isinstance(p, Rows) and p.home is not None for p in parts.values())
        if any(home(job, graph, r) is not None or own(r) for r in graph.workers):
            out.append(pytest.param(name, pred, id=name))
    return out


@pytest.mark.parametrize("strategy,pred", _homed())
def test_every_stored_row_sits_at_its_home(strategy, pred):
    """The one declaration of where a row lives (runtime/placement.py) routes it, deals it again
    at another rank count, and is checked here: after every epoch of a run, every row a worker's
    windows hold is one its home gives it."""
    from mpi_join.runtime.operator import Rows
    from mpi_join.runtime.placement import home
    job = _job(strategy, "time", pred)
    arrays = _streams(job, np.random.default_rng(11), 300)
    held = []

    def check(epoch, mods, router):
        graph = router.graph
        for rank, op in mods.items():
            placed, v = home(op.job, graph, rank), graph.vertex(rank)
            for part in op.__dict__.get("_parts", {}).values():
                if not isinstance(part, Rows) or (part.home is None and placed is None):
                    continue
                for name, rows in part.join.snapshot("w").items():
                    s = int(name.rsplit("/", 1)[1])               # w/{stream}
                    where = part.home(rows, s, v.index, v.count) if part.home else placed(rows, s)
                    assert np.asarray(where, bool).all(), (strategy, rank, s)
                    held.append(len(rows))
    least = strategies.get(strategy).min_ranks - 1              # the worker counts the strategy runs at
    for workers in (max(3, least), max(4, least + 1)):
        simulate_strategy(strategy, job, arrays, workers, seed=workers, on_epoch=check)
    assert sum(held) > 0
