"""The strategy registry: each strategy declared once, read by the runtime, the CLI, bench,
the workload generator and the tests.

An entry names what the strategy can do (predicate kinds, stream count, minimum ranks), its
parameters (testing-only knobs marked), and where its code is: the builder of its dataflow graph
(graph.Graph) and the operator of each role (operator.Operator: rank 0's `driver` role, fed by
the source, routes; the others join), as "module:attribute", so the registry imports no strategy code and
nothing is imported before it is needed. Strategies outside this package
register themselves with `register()` from a module named in MPI_JOIN_STRATEGIES (a comma
list, imported on every rank).
"""
import importlib
import math
import os
from dataclasses import dataclass, field, replace

from .errors import ConfigError


@dataclass(frozen=True)
class Param:
    default: object
    check: object      # value -> error text or None
    help: str
    testing: bool = False      # a knob for tests (fault injection, forced decisions), not tuning


@dataclass(frozen=True)
class StrategyInfo:
    name: str
    summary: str
    predicates: frozenset = frozenset({"equi", "band", "theta"})   # kinds it evaluates (all of a job's must be in it)
    streams: tuple = (2, 2)    # (min, max) number of streams
    min_ranks: int = 2
    params: dict = field(default_factory=dict)
    graph: str = ""            # "module:function" (nranks, params) -> graph.Graph
    router: str = ""           # "module:Class", an operator.Operator: the `driver` role's code (rank 0, fed by the source)
    module: str = ""           # "module:Class", an operator.Operator: the `worker` role's code
    roles: dict = field(default_factory=dict)   # graph role -> "module:Class"; unnamed roles run `module`
    workload: str = "equi"     # the generator workload that suits it best (bench, tests)
    requires: frozenset = field(default_factory=frozenset)   # predicate kinds a job must have
    requires_why: str = ""
    check: str = ""            # "module:function" (job, nranks) -> error text or None: the strategy's own checks
    reads: str = ""            # "module:function" job -> ((stream index, column), ...): what its roles read of
                               # every tuple besides the predicate's columns (an aggregate's); never null
    planner: str = ""          # "module:function" (job, n_max, Tn, Ts) -> (lines, details): `mpi-join plan`
    cases: dict = field(default_factory=dict)   # bench case -> ("module:function", help): `bench --case`
    shape: str = ""            # its shape in the scaling model (scaling_model.SHAPES); "" for none
    variants: tuple = ()       # (workload, params): cases bench-suite runs beside the strategy's own
    suite_budget_s: float = 0  # seconds of the full test suite its tests may take (printed, never enforced)
    testing: bool = False      # registered by the tests to check the runtime (its join is another's)
    outer: bool = False        # emits an outer join's lone rows itself, as tuples leave its windows (every
                               # partner of a tuple is found on one rank); else rank 0 writes them from
                               # the results (storage/lone_rows.py), at each checkpoint
    cut_complete: bool = False  # every pair of the input before a checkpoint's offset is in the result
                                # files that cut closes (a pair is found when its newer tuple arrives):
                                # a lone tuple is final once its window has passed; else once no rank
                                # holds it (operator.oldest)
    rescale: bool = False      # a checkpoint resumes at another rank count: each worker takes its state out
                               # of the old workers' files (Operator.restore_rescaled: by default key groups,
                               # partitioning/key_groups.py; matrix and biclique deal stored tuples again)
    hops: str = ""             # "module:function" (k join cores, params) -> links a tuple crosses until it has
                               # met its last partner and its result is out: the delay model of bench cores

    def load(self, what):
        return _load(getattr(self, what))

    def role_code(self, role):
        """"module:Class" that a rank of graph role `role` runs: the strategy's entry for the
        role, else its `driver` or `worker` entry, else its router or join module, else the
        runtime's own (ROLE_DEFAULTS: rank 0 routes along its edges, a sink writes results)."""
        if role in self.roles:
            return self.roles[role]
        code = self.roles.get("driver", self.router) if role == "driver" else self.roles.get("worker", self.module)
        return code or ROLE_DEFAULTS.get(role, "")

    def load_role(self, role):
        return _load(self.role_code(role))

    def build_graph(self, nranks, params, sources=1):
        """The strategy's dataflow graph on `nranks` ranks, `sources - 1` of them extra sources
        (graph.Graph.with_sources), refused with one line if it does not hold together
        (graph.Graph.check)."""
        return _load(self.graph)(nranks - (sources - 1), params).with_sources(sources).check(
            lambda role: bool(self.role_code(role)), f"strategy {self.name!r}")


# the runtime's code for a role a strategy gives none: rank 0 routes by its edges' partitioners;
# a `distributor` passes what it gets on by its edges' partitioners; a `sink` writes the result
# rows its result edges bring
ROLE_DEFAULTS = {"driver": "mpi_join.runtime.routing:EdgeRouter", "distributor": "mpi_join.runtime.routing:Distributor",
                 "sink": "mpi_join.slaves.sink:ResultSink"}


def _load(spec):
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


_BIG = 1 << 31      # the upper end of every integer parameter without one of its own


def _int_range(lo, hi):
    def check(v):
        ok = isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
        return None if ok else f"expected an integer in {lo:,}..{hi:,}"
    return check


_pos_int = _int_range(1, _BIG)
_non_neg_int = _int_range(0, _BIG)


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fraction(v):
    return None if _number(v) and 0 <= v <= 1 else "expected a number in [0, 1]"


def numbers(text, where):
    """Comma-separated finite numbers ("1,2,0.5"); ValueError names what is wrong."""
    vals = [float(x) for x in str(text).split(",")]
    if not all(math.isfinite(v) and abs(v) <= 1e12 for v in vals):
        raise ValueError(f"{where}: numbers must be finite and at most 1e12")
    return vals


def _bool(v):
    return None if isinstance(v, bool) else "expected true or false"


def _choice(*opts):
    return lambda v: None if v in opts else f"expected one of {', '.join(map(repr, opts))}"


def _non_neg(v):
    return None if _number(v) and 0 <= v <= 1e9 else "expected a finite number in [0, 1e9]"


def _rank_or_none(v):
    return None if v == -1 or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= _BIG) else "expected a worker rank (>= 1), or -1 for none"


def _roles(module, **classes):
    """{role: "module:Class"} for a strategy whose role classes live in one module."""
    return {role: f"{module}:{cls}" for role, cls in classes.items()}


def _chain_strategy(name, summary, graph, module, classes, case, params, budget, variants=(), rescale=False):
    """`handshake` and `llhj`: a chain of workers, one class per role (left, middle, right, solo) in
    `module`, the driver's router in chain_routing.py (a router imports no join code), their
    shared checks and parameters, and a `max-rate` bench case."""
    hops = f"{module}:hops"
    return StrategyInfo(
        name=name, summary=summary,
        graph=graph, roles={"driver": f"mpi_join.ring.chain_routing:{classes[0]}",
                            **_roles(module, **dict(zip(("left", "middle", "right", "solo"), classes[1:])))},
        workload="band", check="mpi_join.ring.chain_routing:check_job", params={**_CHAIN_PARAMS, **params}, shape="chain",
        suite_budget_s=budget, hops=hops, rescale=rescale,
        variants=variants,
        cases={"max-rate": (f"mpi_join.ring.bench_chain:{case}",
                            "maximum sustainable rate per stream by bisection for each chain length (-n: ranks, "
                            "default 2 3 4), latency at 80% of it, comparisons/s per core, beside the oracle")})


def _text(v):
    return None if isinstance(v, str) else "expected a string"


def _line(v):
    return None if isinstance(v, str) and len(v) <= 4096 and v.isprintable() else "expected one line of text"


def _number_list(allow=()):
    """Comma-separated finite numbers, or "" (or one of `allow`); lengths are checked against
    the rank count later."""
    def check(v):
        if not isinstance(v, str):
            return "expected a string of comma-separated numbers"
        if v == "" or v in allow:
            return None
        try:
            numbers(v, "")
        except ValueError:
            return "expected comma-separated finite numbers (at most 1e12)"
        return None
    return check


# what both handshake-join chains take
_CHAIN_PARAMS = {
    "local_join": Param("scan", _choice("scan", "index"),
                        "join in a segment: 'scan' the nested loop of the original, 'index' an equi "
                        "hash or band index kept across batches"),
    "weights": Param("", _number_list(), "relative segment sizes of the workers, comma-separated (default equal; "
                     "for unequal ranks)"),
}


REGISTRY = {
    "hash": StrategyInfo(
        name="hash", suite_budget_s=225, shape="partition", outer=True, rescale=True,
        predicates=frozenset({"equi", "band", "theta", "asof"}),
        summary="master + slaves; epoch-synchronised distribution of hash-partitioned windows",
        requires=frozenset({"equi"}),
        requires_why="hash partitioning needs equal keys to meet on one slave",
        graph="mpi_join.runtime.graph:star",
        router="mpi_join.master.hash_router:HashRouter",
        module="mpi_join.slaves.hash_join:HashJoinModule",
        workload="equi",
        check="mpi_join.master.hash_router:check_job",
        params={
            "partitions": Param(60, _int_range(1, 1 << 20), "hash partitions (far more than slaves)"),
            "local_join": Param("index", _choice("index", "bnl"),
                                "local join on a slave: 'bnl' block nested loop (the paper's), 'index' hash index"),
            "theta": Param(384, _non_neg_int, "fine tuning of the block nested loop: bucket limit in blocks (0: off); the paper's "
                                            "1.5 MB / 4 KB; an index join keeps one bucket per group"),
            "block_size": Param(4096, _pos_int, "block size in bytes, for theta"),
            "reorganize_every": Param(10, _non_neg_int, "reorganisation epoch, in distribution epochs (0: never)"),
            "supply_threshold": Param(0.5, _fraction, "average buffer occupancy above which a slave supplies"),
            "consumer_threshold": Param(0.01, _fraction, "average buffer occupancy below which a slave consumes"),
            "buffer_capacity": Param(0, _non_neg_int, "slave buffer capacity in tuples, for occupancy "
                                     "(0: max_inflight x batch_size / slaves)"),
            "declustering": Param(True, _bool, "adapt the number of active slaves (take out, bring back)"),
            "idle_busy": Param(0.25, _fraction, "a slave is taken out only if its CPU was busy less than this "
                               "fraction of the time (and the windows are full)"),
            "rho": Param(2.0, _non_neg, "bring a slave back when suppliers > rho x consumers"),
            "subgroups": Param(1, _int_range(1, 4096), "serve the slaves in this many sub-groups per distribution epoch"),
            "force": Param("", _choice("", "migrate", "decluster"),
                           "force migrations every reorganisation, or alternate declustering", testing=True),
            "seed": Param(0, _non_neg_int, "seed of the controller's random choices"),
            "slow_rank": Param(-1, _rank_or_none, "make this slave slow: it sleeps slow_delay per 1000 tuples",
                               testing=True),
            "slow_delay": Param(0.0, _non_neg, "seconds a slow slave sleeps per 1000 tuples", testing=True),
        },
    ),
    "psp": StrategyInfo(
        name="psp", suite_budget_s=150, shape="chain", rescale=True, cut_complete=True,
        summary="a ring of time-sliced multi-way joins (pipelined state partitioning): no state duplicated, "
                "every predicate",
        streams=(2, 8),
        graph="mpi_join.runtime.graph:ring",
        roles={"driver": "mpi_join.ring.psp_router:PspRouter",
               **_roles("mpi_join.ring.psp", head="HeadSlice", ring="SlicedJoin", tail="TailSlice", solo="OnlySlice")},
        planner="mpi_join.ring.planner:plan_lines",
        cases={"fig8a": ("mpi_join.ring.bench_psp:run_case",
                         "response time against ring length (-n: ranks, default 2 3 4) beside the cost model, "
                         "3-way costly image join, selectivities 0.05, 0.1, 0.5"),
               "interleave": ("mpi_join.ring.bench_psp:run_interleave",
                              "throughput of basic PSP against PSP-I (interleave 4) at the maximum rate, "
                              "on rings of 2 and 3 (-n: ranks)")},
        workload="images",
        check="mpi_join.ring.psp_router:check_job",
        params={
            "interleave": Param(1, _int_range(1, 1024), "input batches in the ring at once: 1 is basic PSP (a batch enters "
                                "when the one before has ended its cycle), more is PSP-I (delayed purge)"),
            "ordering": Param("auto", _text, "join orderings, e.g. \"A>C>B,B>A>C\" (probing stream first); "
                              "'auto': most selective first, measured on the first batch"),
            "weights": Param("", _number_list(), "relative slice sizes of the operators, comma-separated (default equal; "
                             "0 leaves an operator without state)"),
            "lengths": Param("", _text, "ring length per stream, e.g. \"A=2,C=3\" (others: every operator): a "
                             "stream's state spans its first operators only (`mpi-join plan` suggests them)"),
            "slice_counts": Param("", _number_list(("balanced",)), "count-bounded slices (workload smoothing): tuples each operator "
                                  "but the tail holds, comma-separated (the last repeats), or \"balanced\" (equal "
                                  "shares of each window's tuples, every batch); the tail keeps time"),
            "relocation": Param("passive", _choice("passive", "aggressive"),
                                "how new slice sizes take effect: passive (cuts advance at most twice as fast "
                                "as the window slides) or aggressive (state moves to the next operators at once)"),
            "adapt_every": Param(0, _non_neg_int, "epochs between load checks that may add or remove an operator "
                                 "or smooth the slices (ring/adapt.py; 0: never)"),
            "grow_above": Param(0.85, _fraction, "add an operator when every operator with state is busier than this"),
            "shrink_below": Param(0.15, _fraction, "remove one when all are idler than this (windows full)"),
            "imbalance": Param(0.25, _fraction, "smooth the slices when loads differ by more than this"),
            "force_relocate": Param("", _text, "EPOCH:W1,...,WN[:passive|aggressive]: new slice weights at that "
                                    "epoch", testing=True),
            "slow_rank": Param(-1, _rank_or_none, "make this operator slow: it burns slow_cpu microseconds of CPU per "
                               "pair of a probe tuple and a tuple it holds", testing=True),
            "slow_cpu": Param(0.0, _non_neg, "microseconds of CPU per probe x held pair on the slow operator",
                              testing=True),
        },
    ),
    "handshake": _chain_strategy(
        "handshake", "handshake join: R and S flow past each other along a chain of workers, two-phase forwarding",
        "mpi_join.runtime.graph:chain", "mpi_join.ring.handshake", ("HandshakeRouter", "LeftEnd", "HandshakeModule", "RightEnd", "OnlySegment"),
        "run_case", budget=130, rescale=True, params={
            "slow_rank": Param(-1, _rank_or_none, "make this worker slow: it sleeps slow_delay per batch",
                               testing=True),
            "slow_delay": Param(0.0, _non_neg, "seconds the slow worker sleeps per batch", testing=True),
        },
        # its indexed local join beside its nested loop on band (the target: 10 times the rate)
        variants=(("band", {"local_join": "index"}),)),
    "llhj": _chain_strategy(
        "llhj", "low-latency handshake join: every new tuple fast-forwarded to all chain segments, stored at home",
        "mpi_join.runtime.graph:fed_chain", "mpi_join.ring.llhj", ("LowLatencyRouter", "LeftHome", "LowLatencyModule", "RightHome", "OnlyHome"),
        "run_case_llhj", {}, 100,
        variants=(("band", {"local_join": "index"}),), rescale=True),
    "biclique": StrategyInfo(
        name="biclique", suite_budget_s=285, shape="biclique", min_ranks=4, rescale=True, cut_complete=True, graph="mpi_join.biclique.graph:build",
        summary="BiStream's join-biclique: dispatchers store each tuple at one unit of its side and send it to "
                "be joined at units of the other side (random or ContRand routing); no state replicated",
        roles={**_roles("mpi_join.biclique.shuffler", driver="Shuffler", dispatcher="Dispatcher"), "unit": "mpi_join.biclique.roles:Unit",
               "merger": "mpi_join.biclique.merger:Merger"},
        workload="equi",
        check="mpi_join.biclique.checks:check_job", reads="mpi_join.biclique.checks:aggregated",
        cases={"fig6a": ("mpi_join.biclique.bench_memory:run_case",
                          "state per join unit against the processing volume (full history) for biclique and "
                          "matrix with the same number of units (-n: units, default 4), the paper's Figure 6a"),
               "fig8": ("mpi_join.biclique.bench_figures:run_fig8",
                        "throughput of random routing against ContRand (and matrix) on TPC-H q5 and q7 from "
                        "tpchgen-cli (-n: units, default 4), the paper's Figure 8"),
               "fig12": ("mpi_join.biclique.bench_figures:run_fig12",
                         "an elasticity trace: 2PS adding and removing units as a rising and falling input rate "
                         "fills and empties the windows (-n: units, default 8), the paper's Figure 12")},
        params={
            "dispatchers": Param(1, _int_range(1, 64), "dispatcher ranks (1 to 64) after the shuffler; with more "
                                 "than one, units merge their flows in the shuffler's stamp order (the "
                                 "order-consistent protocol)"),
            "r_units": Param(0, _int_range(0, 1 << 16), "R-units m (0: half of the units); the rest are S-units"),
            "r_groups": Param(1, _int_range(1, 1 << 16), "ContRand subgroups d of the R-units (1: random routing; "
                              "m: pure hashing; above 1 needs an equi condition)"),
            "s_groups": Param(1, _int_range(1, 1 << 16), "ContRand subgroups e of the S-units"),
            "local_join": Param("index", _choice("index", "scan"),
                                "join in a unit: 'index' an equi hash or band index, 'scan' a nested loop"),
            "archive_period": Param(0, _non_neg_int, "span P of a chained-index subindex, in the stored stream's "
                                    "window units (ts units or tuples; 0: a tenth of the window): windows are "
                                    "discarded a whole subindex at a time"),
            "max_delay": Param(0, _non_neg_int, "arrival slack D kept on top of the window before a subindex is "
                               "discarded (Theorem 1: window + D); 0 is exact, units merge their flows in order"),
            "aggregate": Param("", _line, "online aggregate of the join results, e.g. \"sum(S.v), count(*), avg(R.v) "
                               "by R.k\" (sum, count, avg, min, max; group columns of either stream): units "
                               "pre-aggregate, a merger rank (the last) writes timestamped snapshots to "
                               "OUTPUT/aggregate/"),
            "update_ms": Param(200.0, _non_neg, "aggregate update period in ms: units send their views, and the "
                               "merger writes a snapshot, at most this often (0: every batch)"),
            "scaling": Param(False, _bool, "2PS adaptive resource management: the shuffler asks the units for "
                             "their memory load every scale_every_ms and adds spare units to a subgroup, or takes "
                             "units out of it, within each side"),
            "spare_units": Param(0, _non_neg_int, "with scaling: units of each side held idle at the start, for "
                                 "scaling out (at least one per side stays active)"),
            "unit_capacity_mb": Param(64.0, _non_neg, "with scaling: the memory capacity C of a unit in MB (the load "
                                      "tau of a subgroup is its units' window state over k C)"),
            "t_high": Param(0.8, _fraction, "with scaling: load above which a subgroup is overloaded (T_h)"),
            "t_low": Param(0.3, _fraction, "with scaling: load below which a subgroup is underloaded (T_l)"),
            "psi": Param(0.6, _fraction, "with scaling: the load a scaling aims at (Equation 7), between T_l "
                         "and T_h"),
            "confirmations": Param(3, _int_range(1, 1000), "with scaling: the same decision this many times in a "
                                   "row confirms it"),
            "scale_every_ms": Param(1000.0, _non_neg, "with scaling: the period of the load requests in ms"),
            "max_state_mb": Param(0.0, _non_neg, "stop with an error when a unit's windows pass this many MB "
                                  "(0: no limit); full-history windows only grow"),
            "ordered": Param(True, _bool, "units merge their dispatchers' flows in stamp order (false shows what "
                             "goes wrong without the order-consistent protocol)", testing=True),
        },
    ),
    "matrix": StrategyInfo(
        name="matrix", suite_budget_s=70, shape="matrix", rescale=True, cut_complete=True,
        predicates=frozenset({"equi", "band", "theta", "asof"}),
        summary="join-matrix (the baseline of BiStream): a grid of cells, each R tuple stored along a row and each "
                "S tuple down a column, so every pair meets in one cell",
        graph="mpi_join.biclique.matrix:build",
        roles={"worker": "mpi_join.biclique.cell:Cell"},
        workload="equi",
        check="mpi_join.biclique.checks:check_matrix",
        params={
            "rows": Param(0, _int_range(0, 1 << 16), "rows of the grid (0: the divisor of the worker count nearest "
                          "its square root); columns = workers / rows"),
            "local_join": Param("index", _choice("index", "scan"),
                                "join in a cell: 'index' an equi hash or band index, 'scan' a nested loop"),
            "max_state_mb": Param(0.0, _non_neg, "stop with an error when a cell's windows pass this many MB "
                                  "(0: no limit); full-history windows only grow"),
        },
    ),
    "splitjoin": StrategyInfo(
        name="splitjoin", suite_budget_s=115, shape="tree", rescale=True,
        summary="SplitJoin: a distribution tree feeds every join core, each stores 1/k and processes all; "
                "results merge back up in order (relaxed adjustable punctuation)",
        min_ranks=3,
        graph="mpi_join.splitjoin.graph:build", hops="mpi_join.splitjoin.graph:hops",
        roles={**_roles("mpi_join.splitjoin.roles", core="JoinCore", distributor="DistributorCore"),
               **_roles("mpi_join.splitjoin.root", combiner="Combiner")},
        workload="band",
        check="mpi_join.splitjoin.checks:check_job",
        cases={"cores": ("mpi_join.splitjoin.bench_cores:run_case",
                         "throughput and mean delay against 1..4 join cores (-n values are cores) for splitjoin, "
                         "handshake and llhj in one run, and a model calibrated on them up to 256 cores")},
        params={
            "fanout": Param(2, _int_range(1, 64), "children per node of the distribution and merge trees (the "
                            "fanout fills before the tree deepens)"),
            "local_join": Param("index", _choice("index", "scan"),
                                "join in a core: 'scan' the paper's nested loop, 'index' an equi hash or band index"),
            "punctuation": Param("tuples", _choice("tuples", "comparisons", "none"),
                                 "stars in the results: after every `interval` tuples (1: strict outer order), "
                                 "after every `interval` comparisons (1: strict inner order), or none"),
            "interval": Param(1, _int_range(1, 1 << 20), "tuples or comparisons per star"),
        },
    ),
}


def label(name, params):
    """A strategy with parameters as one name, e.g. handshake[local_join=index] (bench-suite's
    cases, the scaling model's rows)."""
    return name + "".join(f"[{k}={v}]" for k, v in sorted(params.items()))


def parse_label(text):
    """(strategy, params) of such a name."""
    name, _, rest = text.partition("[")
    return name, dict(x.split("=", 1) for x in rest[:-1].split("][")) if rest else {}


def register(info):
    """Add a strategy (from a plugin module, or a test). Names are unique."""
    if info.name in REGISTRY and REGISTRY[info.name] is not info:
        raise ValueError(f"strategy {info.name!r} is already registered")
    REGISTRY[info.name] = info
    return info


_plugins_loaded = set()


def load_plugins():
    """Import the modules named in MPI_JOIN_STRATEGIES (each calls register())."""
    for mod in filter(None, (m.strip() for m in os.environ.get("MPI_JOIN_STRATEGIES", "").split(","))):
        if mod not in _plugins_loaded:
            try:
                importlib.import_module(mod)
            except ImportError as e:
                raise ConfigError(f"MPI_JOIN_STRATEGIES: cannot import {mod!r}: {e}") from None
            _plugins_loaded.add(mod)


def get(name):
    load_plugins()
    return REGISTRY.get(name)


def names():
    load_plugins()
    return list(REGISTRY)


DEFAULT = "hash"        # a generated job's strategy where none suits its workload better


def for_workload(workload):
    """The strategy a generated job of `workload` names: the first registered that suits it best
    (its `workload`), else DEFAULT. The generators and the CLI ask here instead of naming one."""
    return next((n for n in names() if get(n).workload == workload), DEFAULT)


def with_param(param):
    """The first registered strategy that takes the parameter `param` (None if none does)."""
    return next((n for n in names() if param in get(n).params), None)


def supporting(kinds):
    """Names of strategies that can evaluate all predicate kinds in `kinds`."""
    load_plugins()
    return [n for n, s in REGISTRY.items() if set(kinds) <= s.predicates and s.requires <= set(kinds)]


def runnable(job):
    """Names of the strategies that can run `job`: its stream count and predicate kinds."""
    m = len(job.streams)
    return [n for n in supporting(job.predicate.kinds) if REGISTRY[n].streams[0] <= m <= REGISTRY[n].streams[1]]


def check_strategy(job):
    """Known name, known parameters with valid values; returns the job with defaults filled in."""
    where = f"{job.path}: strategy"
    info = get(job.strategy.name)
    if info is None:
        raise ConfigError(f"{where}.name: unknown strategy {job.strategy.name!r} (available: {', '.join(REGISTRY)})")
    params = {}
    for k, v in job.strategy.params.items():
        if k not in info.params:
            raise ConfigError(f"{where}.{k}: unknown parameter for strategy {info.name!r} "
                              f"(parameters: {', '.join(info.params)})")
        err = info.params[k].check(v)
        if err:
            raise ConfigError(f"{where}.{k}: {err}, got {v!r}")
        params[k] = v
    for k, p in info.params.items():
        params.setdefault(k, p.default)
    job = replace(job, strategy=replace(job.strategy, params=params))
    return _with_reads(job, info) if info.reads else job


def _with_reads(job, info):
    """The job's streams with the columns the strategy's roles read (info.reads), which a null may
    not be hidden in: a declared `nullable` one is refused."""
    from .reads import with_reads
    extra = tuple(_load(info.reads)(job))
    for si, col in extra:
        if col in job.streams[si].nullable:
            s = job.streams[si]
            raise ConfigError(f"{job.path}: streams.{s.name}.nullable: {col!r} is read by strategy "
                              f"{info.name!r} (an aggregate's column) and so may not hold nulls")
    return replace(job, streams=with_reads(job.streams, job.predicate, extra))


def check_runnable(job, nranks):
    """Can this strategy run this job on `nranks` ranks? Raises ConfigError naming the problem."""
    info = get(job.strategy.name)
    m = len(job.streams)
    if not info.streams[0] <= m <= info.streams[1]:
        raise ConfigError(f"{job.path}: strategy {info.name!r} joins {info.streams[0]}"
                          f"{'' if info.streams[0] == info.streams[1] else '-' + str(info.streams[1])} streams; the job has {m}")
    others = supporting(job.predicate.kinds)
    hint = (f"strategies that support it: {', '.join(others)}" if others else
            "no distributed strategy in this version supports it; `mpi-join oracle` computes it in one process")
    unsupported = job.predicate.kinds - info.predicates
    if unsupported:
        raise ConfigError(f"{job.path}: predicate: strategy {info.name!r} supports only "
                          f"{', '.join(sorted(info.predicates))} predicates, the job has "
                          f"{', '.join(sorted(unsupported))}; {hint}")
    missing = info.requires - job.predicate.kinds
    if missing:
        why = f" ({info.requires_why})" if info.requires_why else ""
        raise ConfigError(f"{job.path}: predicate: strategy {info.name!r} needs {' and '.join(sorted(missing))} "
                          f"conditions{why}, the job has only {', '.join(sorted(job.predicate.kinds))}; "
                          f"{', '.join(sorted(info.predicates - info.requires))} conditions may be added to them; {hint}")
    if job.predicate.outer and job.strategy.params.get("aggregate"):
        raise ConfigError(f"{job.path}: predicate.outer: an outer join's rows without a partner come after the last "
                          f"result, which an online aggregate does not wait for; aggregate the collected results, or "
                          f"drop strategy.aggregate")
    k = job.run.sources
    if nranks - (k - 1) < info.min_ranks:
        more = f" plus {k - 1} extra source rank{'s' if k > 2 else ''} (run.sources = {k})" if k > 1 else ""
        raise ConfigError(f"strategy {info.name!r} needs at least {info.min_ranks} MPI ranks (rank 0 drives the "
                          f"input, {info.min_ranks - 1}+ workers join){more}, got {nranks}; launch with mpiexec -n "
                          f"{info.min_ranks + k - 1} or more")
    err = _load(info.check)(job, nranks - (k - 1)) if info.check else None
    if err:
        raise ConfigError(err)


def describe_params(info):
    """Lines for --help: each parameter, its default and what it does."""
    out = []
    for k, p in info.params.items():
        allowed = p.check(object())       # a check's refusal of a non-value says what it accepts
        out.append(f"{k} = {p.default!r}: {p.help}" + (f" [{allowed.removeprefix('expected ')}]" if allowed else "")
                   + (" (testing)" if p.testing else ""))
    return out
