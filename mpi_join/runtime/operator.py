"""The one operator interface: what a strategy supplies for every vertex of its graph, a pure
state machine with no MPI in it. Rank 0's vertex is fed by the input source (it routes); every
other vertex by its upstream edges (it joins, merges, dispatches or writes). The runtime
(master/driver.py on rank 0, slaves/worker.py elsewhere) is the only caller.

Every vertex:
- `warm_up()` once, before READY: compile every kernel the run will use.
- `on_data(src, header, batches)` once per batch, in the order each link delivered them (links
  are FIFO; messages of different links interleave). `batches[k]` is stream k's rows (runtime
  dtype, seq order), `header.bounds[k]` stream k's expiry bound after this batch, `header.body`
  the strategy's typed header (headers.Header) the sender gave, or None. Rank 0's vertex gets
  the source's batches with `src == SOURCE`, `header.order` the batch's slot in its epoch
  (an epoch has `slots` slots) and `header.msg_no` the batch's number in the input with several
  sources (every source numbers alike), -1 with one (`number()`). Returns an Output (or None):
  results to emit, batches to send along its edges, control records; rank 0's runtime sends them
  with credits, in order.
- `on_control(src, msg)` for the strategy's own control records, in order with DATA on the
  link; ops listed in `urgent_ops` are handed over on arrival instead (before queued DATA, never
  before a queued checkpoint marker).
- `on_eos(src)` when the end of the input has passed link `src`.
- `after_data(header)` after each `on_data`: by default expires the joins declared with
  `Rows(..., expire=True)` by the batch's bounds.
- its state, declared (`declare(name=part, ...)`): the runtime derives `snapshot()`,
  `restore()` and `state_dtype()` (each part's arrays under "<name>/" in the HDF5 rank file,
  each checked against its dtype and checksum on restore) and the footprint. A part is a
  `Fields` (named attributes: counters, lists, maps of plain values), a `Rows` (a join's
  windows: slaves/local_join.BinaryJoin), an `Array` (one array, or None), an `Arrays` (a list
  of arrays), or any object with
  snapshot() -> (arrays, attrs), restore(arrays, attrs), state_dtype(name) and, if it holds
  window rows, footprint() and oldest(n) (the oldest seq of each stream it holds: `oldest`).
- `stats()` for metrics, `footprint()` for the memory figures.
A vertex whose state moves in units (coordinator.move): `unit_of(batch)`, `take(unit)` -> (arrays,
attrs) and `put(unit, arrays, attrs)`; the runtime moves the state and the unit's queued rows.

Hooks a vertex has for what only its place in the graph asks of it, each saying why:
- fed by several links in one order: `next_order()` (graph.Edge.merge): the order it takes next
  when the links' orders are dense (0, 1, 2, ... across them, none missing), so the batch
  bearing it goes at once, not waiting for the other links to pass it; None: not known;
- on a link that carries its own kind of rows: `link_dtypes(kind)`;
- whose restore at another rank count reads the rows in flight to it at the cut itself, in an
  order of its own (splitjoin's combiner: its results in punctuated order): `in_flight = "own"`;
  by default ("drain") the old graph is carried to rest first (slaves/cuts._in_flight);
- that must finish what is in flight before new input enters (the PSP ring's head):
  `accepts_input()`, and `buffer_capacity` for the load metric; `quiet()`, whether a checkpoint
  marker from the input may enter now (with several sources a marker comes with the input);
- fed by the source (rank 0), because it alone sees each input row first and may change the
  routing while the input streams: `annotate(batch, stream)` fills strategy columns (`_h`) as
  the source releases rows, once; `flush()` returns what it buffers (before a cut, a move and
  the end); `quiet()` says nothing is in flight that a cut could not capture; `end_of_epoch(epoch)`
  after each epoch, where an adapting router (`adapts()`) asks loads, moves state and changes its
  routing through `self.coordinator` (master/coordinator.py: events out, answers back; never
  the driver); `on_moved(unit, src, dst, held)` hands it a finished move's held rows (it may
  return an Output); `apply_change(what)` applies a change it placed (at once with one source;
  with several, every source's router before the same part of the input); `with_sources(k)`
  says what of its adaptation it does not do with k sources; `report(workers)` lines for the
  summary; `number(header, count)`, the number of the batch a header heads for a router that
  numbers batches (with several sources its number in the input, each source routing a share
  and all numbering alike; with one its own count, kept in its state); `rescale(root, cid)` at
  a restore at another rank count routes as the workers' restore placed the state (one that
  declares no state routes by this run's graph already; one that does says how, else it is
  refused); `connect(coordinator)`, the driver's, before warm_up. It is called one call at a
  time (master/calls.py): what comes during a call is handed over after it.
"""
import copy
from dataclasses import dataclass, field

import numpy as np

from ..storage.results import result_dtype
from .graph import INPUT, RESULTS, Edge
from ..errors import InputError

SOURCE = -1          # the input source, the rank-0 vertex's one upstream


def carried(job, module, kind):
    """dtypes of the arrays a DATA message on a link of this kind holds (graph.carries)."""
    if kind == INPUT:
        return module.dtypes
    if kind == RESULTS:
        return [result_dtype(job.stream_names)]
    return module.link_dtypes(kind)


def old_graph(op, old, sources=1):
    """The graph of a checkpoint whose workers were `old`: rank 0, `old`, and its extra sources."""
    from ..strategies import get
    return get(op.job.strategy.name).build_graph(len(old) + sources, op.job.strategy.params, sources)


@dataclass
class Output:
    """What handling one message produced."""
    results: list = field(default_factory=list)     # (tuple of seq arrays, one per stream; tin array)
    forward: list = field(default_factory=list)     # (dests, batches, bounds, body, order): one message, packed once
    control: list = field(default_factory=list)     # (dest, Control)
    snapshots: list = field(default_factory=list)   # (number, final, rows, meta): an aggregate's snapshots

    @classmethod
    def sending(cls, edges, batches, bounds, body=None, order=-1):
        """An Output of one message along every edge of `edges` (a router's usual answer)."""
        out = cls()
        out.send_many(edges, batches, bounds, body, order)
        return out

    def emit(self, seqs, tin):
        if len(tin):
            self.results.append((tuple(seqs), tin))

    def send(self, edge, batches, bounds, body=None, order=-1):
        """Forward `batches` along `edge`, one of the sender's (graph.Edge: `Operator.to(rank)`,
        `graph.out_edges`; a vertex that is not the edge's source is refused where it is sent);
        `body`: the strategy's typed header (headers.Header); `order`: the batch's place for the
        receiver's ordered merge (DataHeader.order)."""
        self.send_many((edge,), batches, bounds, body, order)

    def send_many(self, edges, batches, bounds, body=None, order=-1):
        """`send` along every edge of `edges`: the message is packed once and the same buffer
        goes to each (a fan-out costs one copy, not one per destination)."""
        self.forward.append((_ends(edges), batches, tuple(int(b) for b in bounds), body, int(order)))

    def tell(self, dest, msg):
        self.control.append((dest, msg))

    def send_results(self, edge, rows, body=None):
        """Send result rows (results.result_dtype: each stream's seq and `_tin`) along the result
        edge `edge`, to be written there (or sent on) instead of here."""
        self.forward.append((_ends((edge,)), [rows], (), body, -1))

    def snapshot(self, number, final, rows, meta):
        """Write `rows` (a finished aggregate, aggregate.finish) as snapshot `number` of the run's
        aggregate/ directory; `meta` goes into the file's metadata."""
        self.snapshots.append((int(number), bool(final), rows, dict(meta)))

    def extend(self, other):
        if other is not None:
            self.results += other.results
            self.forward += other.forward
            self.control += other.control
            self.snapshots += other.snapshots
        return self


def _ends(edges):
    """The ranks `edges` lead to, all from one vertex; a rank or anything else is refused in one
    line (a send names the edge it goes along, so the runtime knows what it carries)."""
    edges = tuple(edges)
    bad = next((e for e in edges if not isinstance(e, Edge)), None)
    if bad is not None:
        raise TypeError(f"Output: a send goes along an edge of the graph (Operator.to(rank), graph.out_edges), "
                        f"not {type(bad).__name__} {bad!r}")
    if len({e.src for e in edges}) > 1:
        raise ValueError(f"Output: one message goes along edges of one vertex, not of ranks {sorted({e.src for e in edges})}")
    return tuple(e.dst for e in edges)


class Fields:
    """Named attributes of an operator as state: plain values (numbers, lists, dicts), in the rank
    file's JSON attributes. `codecs[name]` = (encode, decode) for a value JSON would not give back
    as it was (a dict with int keys: INT_KEYS)."""

    def __init__(self, owner, *names, rescale=None, **codecs):
        if rescale not in (None, "first", "sum", "fresh"):
            raise TypeError(f"Fields(rescale={rescale!r}): 'first' (every vertex of the group holds the same values: "
                            f"the first's are taken), 'sum' (each holds a share: they are added) or 'fresh' "
                            f"(values of this vertex alone, such as a peak: they start again)")
        self.owner, self.names, self.codecs, self.rescale = owner, names + tuple(codecs), codecs, rescale

    def snapshot(self):
        """Copies: the cut is written once every upstream marker is in, and the operator goes on
        meanwhile (a list counted on in place would be written as it is then, not at the cut)."""
        enc = {n: self.codecs.get(n, (None, None))[0] or (lambda v: v) for n in self.names}
        return {}, {n: copy.deepcopy(enc[n](getattr(self.owner, n))) for n in self.names}

    def restore(self, arrays, attrs):
        for n in self.names:
            dec = self.codecs.get(n, (None, None))[1]
            setattr(self.owner, n, dec(attrs[n]) if dec else attrs[n])

    def state_dtype(self, name):
        return None

    def restore_homed(self, files, home):
        """At another rank count, from the old vertices' attributes ([(arrays, attrs)], in index
        order) as `rescale` says; a part that says nothing cannot be dealt again."""
        if self.rescale is None:
            return False
        if self.rescale == "fresh":
            return True
        attrs = [a for _, a in files]
        if attrs and self.rescale == "first":
            self.restore({}, attrs[0])
        elif attrs:
            self.restore({}, {n: _added([a[n] for a in attrs]) for n in self.names})
        return True


def _added(values):
    """Values of one field from every old vertex, added (numbers, and lists of numbers item by item)."""
    if isinstance(values[0], list):
        return [sum(v) for v in zip(*values)]
    return sum(values)


def _int_keys(decode):
    def code(d):
        return None if d is None else {(int(k) if decode else str(k)): v for k, v in d.items()}
    return code


INT_KEYS = (_int_keys(False), _int_keys(True))     # a dict keyed by ints (or None), for Fields


class Rows:
    """A local join's windows as state (slaves/local_join.BinaryJoin, or a chained index): each
    stream's rows, and the windows' base numbers (stored rows keep their numbers); indexes are
    rebuilt on restore. Read from the owner's attribute `name` each time: a unit that hands its
    state away replaces its join. The operator's defaults warm the join up before READY and
    count its rows in `stats()`; with `expire=True` the worker also expires it by each batch's
    bounds after `on_data` (DataHeader.bounds: what no tuple still to come can see)."""

    def __init__(self, owner, name="join", expire=False, home=None):
        if not hasattr(owner, name) or not hasattr(getattr(owner, name), "snapshot"):
            raise TypeError(f"Rows(owner, name={name!r}): the owner (the operator, `Rows(self)`) holds its join as "
                            f"its attribute {name!r}, set before declare(); got {type(owner).__name__}, which "
                            + ("has no such attribute" if not hasattr(owner, name) else "holds no join there"))
        self.owner, self.name, self.expires, self.home = owner, name, bool(expire), home

    def warm_up(self):
        if hasattr(self.join, "warm_up"):
            self.join.warm_up()

    def rows(self):
        return len(self.join)

    def expire(self, bounds):
        if self.expires:
            self.join.expire(bounds)

    @property
    def join(self):
        return getattr(self.owner, self.name)

    def snapshot(self):
        windows = getattr(self.join, "windows", ())
        return self.join.snapshot("w"), {"base": [w.base for w in windows]}

    def restore(self, arrays, attrs):
        for w, b in zip(getattr(self.join, "windows", ()), attrs["base"]):
            w.number_from(b)
        self.join.restore(arrays, "w")

    def state_dtype(self, name):
        return self.join.state_dtype(name, "w")

    def oldest(self, n):
        if not hasattr(self.join, "windows"):        # a join that does not show its rows: holds all
            return [0] * n
        return oldest_seqs([w.view() for w in self.join.windows], n)

    def footprint(self):
        return self.join.footprint()

    def restore_homed(self, files, home):
        """At another rank count: the rows of every old vertex's windows ([(arrays, attrs)])
        that live here, `home(rows, stream)` (this part's own `home`, or the one rank 0's edge
        into this vertex declares: placement.home), each stream's in seq order, each row once."""
        if home is None:
            return False
        arrays = {}
        for s in (0, 1):
            dt = self.join.state_dtype(f"w/{s}", "w")
            rows = [a[f"w/{s}"] for a, _ in files if f"w/{s}" in a]
            rows = np.concatenate(rows) if rows else np.zeros(0, dt)
            rows = rows[np.asarray(home(rows, s), bool)]
            # in seq order, each row once: a row stored in several places (a grid's row) comes from each
            arrays[f"w/{s}"] = rows[np.unique(rows["seq"], return_index=True)[1]]
        self.join.restore(arrays, "w")
        return True


class Arrays:
    """A list of arrays an operator holds in attribute `name` (one per stream, say), with the
    dtype each must have."""

    def __init__(self, owner, name, dtypes):
        self.owner, self.name, self.dtypes = owner, name, dtypes

    def snapshot(self):
        return {str(k): a.copy() for k, a in enumerate(getattr(self.owner, self.name))}, {}

    def restore(self, arrays, attrs):
        setattr(self.owner, self.name, [arrays[str(k)] for k in range(len(self.dtypes))])

    def state_dtype(self, name):
        return self.dtypes[int(name)] if name.isdigit() and int(name) < len(self.dtypes) else None


class Array:
    """One array an operator holds in attribute `name`, or None, with the dtype it must have;
    stored flat, with its shape. `rescale="fresh"`: at another rank count the array starts
    again as the operator made it (what it held is taken elsewhere: say where, beside it)."""

    def __init__(self, owner, name, dtype, rescale=None):
        if rescale not in (None, "fresh"):
            raise TypeError(f"Array(rescale={rescale!r}): 'fresh' (it starts again at another rank count) or None")
        self.owner, self.name, self.dtype, self.rescale = owner, name, dtype, rescale

    def restore_homed(self, files, home):
        return self.rescale == "fresh"

    def snapshot(self):
        v = getattr(self.owner, self.name)
        return ({} if v is None else {"data": v.ravel().copy()}), {"shape": None if v is None else list(v.shape)}

    def restore(self, arrays, attrs):
        shape = attrs["shape"]
        setattr(self.owner, self.name, None if shape is None else arrays["data"].reshape(shape))

    def state_dtype(self, name):
        return np.dtype(self.dtype) if name == "data" else None


class Operator:
    """Defaults for the optional hooks (the module docstring says when each is called and why);
    a strategy overrides what it needs. The defaults of state read the declared parts."""
    urgent_ops = frozenset()
    buffer_capacity = 0          # tuples, for the load metric (0: the worker's share of what may be in flight)
    slots = 1                    # rank 0: slots per epoch (hash's sub-groups)
    in_flight = "drain"          # rows in flight at a cut, at another rank count (the docstring)
    coordinator = None           # rank 0: its way to the job (master/coordinator.py), connected before warm_up

    def __init__(self, job, rank, graph, dtypes):
        self.job, self.rank, self.graph, self.dtypes = job, rank, graph, dtypes

    def on_data(self, src, header, batches):
        raise NotImplementedError

    def to(self, dst):
        """This vertex's edge to rank `dst` (Output.send goes along edges); one line where none."""
        if dst not in self.graph.downstream(self.rank):
            raise RuntimeError(f"rank {self.rank}: no edge of the {self.graph.name} graph leads from it to rank {dst} "
                               f"(its edges lead to {self.graph.downstream(self.rank)})")
        return self.graph.edge(self.rank, dst)

    def on_control(self, src, msg):
        raise RuntimeError(f"rank {self.rank}: unexpected control record {msg.op!r} from rank {src}")

    def _nothing(self, *args):
        return None

    def _yes(self):
        return True

    # what does nothing by default, or says yes (the module docstring: when each is called, why)
    on_eos = next_order = annotate = flush = end_of_epoch = with_sources = on_moved = _nothing
    accepts_input = quiet = _yes

    def link_dtypes(self, kind):
        raise RuntimeError(f"rank {self.rank}: links carrying {kind!r} are not declared by this strategy")

    def unit_of(self, batch):
        raise RuntimeError(f"rank {self.rank}: {type(self).__name__} does not say which unit a row is in (unit_of)")

    def take(self, unit):
        raise RuntimeError(f"rank {self.rank}: this strategy does not move state between workers")

    put = take

    # -- state: the declared parts (declare) ---------------------------------------------------
    def declare(self, **parts):
        self.__dict__.setdefault("_parts", {}).update(parts)

    def warm_up(self):
        for part in _declared(self, Rows):
            part.warm_up()

    def after_data(self, header):
        for part in _declared(self, Rows):
            part.expire(header.bounds)

    def stats(self):
        return {"window_tuples": sum(p.rows() for p in _declared(self, Rows))}

    def snapshot(self):
        return _snapshot(self)

    def restore(self, arrays, attrs):
        _restore(self, arrays, attrs)

    def state_dtype(self, name):
        part = self.__dict__.get("_parts", {}).get(name.partition("/")[0])
        return part.state_dtype(name.partition("/")[2]) if part is not None else None

    def restore_rescaled(self, read, old, root, cid):
        return restore_rescaled(self, read, old, root, cid)

    def restore_groups(self, files, groups):
        _restore_groups(self, files, groups)

    def footprint(self):
        sizes = [p.footprint() for p in _declared(self) if hasattr(p, "footprint")]
        return sum(h for h, _ in sizes), sum(r for _, r in sizes)

    # -- rank 0, fed by the source -------------------------------------------------------------
    def connect(self, coordinator):
        self.coordinator = coordinator

    def adapts(self):
        return False

    def apply_change(self, what):
        raise NotImplementedError(f"{type(self).__name__} placed a change and cannot apply it")

    def number(self, header, count):
        return header.msg_no if header.msg_no >= 0 else count

    def rescale(self, root, cid):
        if self.__dict__.get("_parts"):
            raise NotImplementedError(f"{type(self).__name__} cannot route to another number of workers")

    def report(self, workers):
        return []


def oldest_seqs(batches, n, names=(), into=None):
    """Per stream (n of them), the oldest seq among `batches` (None: none), lowered into `into`:
    a batch of tuples (`seq` and `ts` columns) is stream k's when it is batches[k]; one with "<name>_seq"
    columns (`names`) holds results, each naming a tuple of every stream (-1: none). What a rank
    still holds at a cut (operator.oldest): an outer join's tuples older than every held one
    have met every partner they will (storage/lone_rows.py)."""
    out = list(into) if into is not None else [None] * n
    for k, b in enumerate(batches):
        if b is None or not len(b) or b.dtype.names is None:
            continue
        cols = [(k, b["seq"])] if {"seq", "ts"} <= set(b.dtype.names) and k < n else []
        cols += [(j, b[f"{m}_seq"]) for j, m in enumerate(names) if f"{m}_seq" in b.dtype.names]
        for j, c in cols:
            c = c[c >= 0]
            if len(c):
                v = int(c.min())
                out[j] = v if out[j] is None else min(out[j], v)
    return out


def _declared(op, kind=object):
    """`op`'s declared parts (of class `kind`)."""
    return [p for p in op.__dict__.get("_parts", {}).values() if isinstance(p, kind)]


def oldest(op):
    """Per stream, the oldest seq a vertex still holds (None: none), from its
    declared parts: a part that holds rows says so with `oldest(n)`; None for the whole when one
    holding rows does not (then nothing counts as final: storage/lone_rows.py)."""
    n, out = len(op.dtypes), [None] * len(op.dtypes)
    for p in _declared(op):
        if isinstance(p, (Fields, Array, Arrays)):
            continue
        if not hasattr(p, "oldest"):
            return None
        out = [a if b is None else b if a is None else min(a, b) for a, b in zip(out, p.oldest(n))]
    return out


def _snapshot(op):
    arrays, attrs = {}, {}
    for name, part in op.__dict__.get("_parts", {}).items():
        a, attrs[name] = part.snapshot()
        arrays.update({f"{name}/{k}": v for k, v in a.items()})
    return arrays, attrs


def _restore(op, arrays, attrs):
    """Each declared part from its arrays and attributes; state of another layout (an earlier
    version's checkpoint) is refused with one line, not a traceback."""
    for name, part in op.__dict__.get("_parts", {}).items():
        try:
            part.restore({k[len(name) + 1:]: v for k, v in arrays.items() if k.startswith(name + "/")}, attrs[name])
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise InputError(f"rank {op.rank}: the checkpoint's state of its {type(op).__name__} has no valid "
                             f"part {name!r} ({type(e).__name__}: {e}); it was written by another version or "
                             f"strategy: run without --resume") from None


def restore_rescaled(op, read, old, root, cid):
    """Operator.restore_rescaled's default, a restore at another rank count (a strategy whose
    registry entry says `rescale`): this worker's state out of the old workers' files (`old`,
    their ranks; `read(rank, keep)` gives one's (arrays, attrs) as `snapshot` gave them, reading
    only the arrays `keep(name)` accepts; `read(rank, keep, channel=dtypes)` also its channel
    state, [(src, header, batches)], which is refused without; `state=` checks arrays of another
    operator's kind by its `state_dtype`). Returns None, or an Output of results made in
    restoring (slaves/cuts.py writes them). By default: result rows in flight on a result edge
    into the old vertices of this one's role are handed to the first new one (`on_data`: a sink
    writes them); then state in key groups, the groups the plan gives this rank
    (restore_plan.owners_after, which rank 0's `rescale` follows too) out of every file, or else
    each declared part dealt by where its rows live (restore_homed: a Rows part by its `home` or
    the placement of the edges on its path from rank 0, a Fields part as its `rescale` says)."""
    from ..partitioning.key_groups import group_of
    from ..partitioning.restore_plan import owners_after
    graph = old_graph(op, old)
    me = op.graph.vertex(op.rank)
    mine = [r for r in old if graph.vertex(r).role == me.role]
    out = _results_in_flight(op, read, graph, mine) if me.index == 0 else None
    parts = op.__dict__.get("_parts")
    if not parts:
        return out
    if all(hasattr(p, "restore_groups") for p in parts.values()):
        owner = owners_after(root, cid, op.graph.workers)
        groups = {g for g, o in enumerate(owner) if int(o) == op.rank}
        op.restore_groups([read(r, lambda n: group_of(n) in groups) for r in old], groups)
        return out
    _restore_homed(op, [read(r, lambda n: True) for r in sorted(mine, key=lambda r: graph.vertex(r).index)])
    return out


def _restore_groups(op, files, groups):
    """`op`'s state from the old workers' files, [(arrays, attrs)], keeping key groups `groups`
    (key_groups.group_of) only. Each declared part that is in key groups merges them (its
    `restore_groups`); state of another kind cannot be split, and is refused."""
    from ..partitioning.key_groups import group_of
    for name, part in op.__dict__.get("_parts", {}).items():
        if not hasattr(part, "restore_groups"):
            raise InputError(f"rank {op.rank}: the state part {name!r} of its {type(op).__name__} is not in "
                             f"key groups; resume with the checkpoint's rank count")
        pre = name + "/"
        part.restore_groups([({k[len(pre):]: v for k, v in a.items() if k.startswith(pre)
                               and group_of(k[len(pre):]) in groups}, attrs[name]) for a, attrs in files], groups)


def _rows_part(op):
    """The name of `op`'s one declared Rows part."""
    names = [n for n, p in op.__dict__.get("_parts", {}).items() if isinstance(p, Rows)]
    if len(names) != 1:
        raise TypeError(f"{type(op).__name__} declares {len(names)} Rows parts; name the one meant")
    return names[0]


def keeps_rows(op, stream=None):
    """A `keep` for Operator.restore_rescaled's `read`: the arrays of `op`'s declared Rows part
    (one stream's, or both), so that a strategy's own dealer never spells the rank file's names."""
    pre = f"{_rows_part(op)}/w/"
    return lambda n: n.startswith(pre) and (stream is None or n == f"{pre}{stream}")


def stored_rows(op, arrays, stream):
    """Stream `stream`'s rows of `op`'s declared Rows part in an old rank file's module arrays (as
    `read` gives them; none: an empty array of the part's dtype)."""
    part = _rows_part(op)
    rows = arrays.get(f"{part}/w/{stream}")
    return rows if rows is not None else np.zeros(0, op.__dict__["_parts"][part].state_dtype(f"w/{stream}"))


def _restore_homed(op, files):
    """Each declared part from the old files of this vertex's role, dealt by where its rows
    live; a part that cannot say is refused in one line."""
    from .placement import home
    placed = home(op.job, op.graph, op.rank)
    for name, part in op.__dict__.get("_parts", {}).items():
        pre = name + "/"
        mine = [({k[len(pre):]: v for k, v in a.items() if k.startswith(pre)}, attrs[name]) for a, attrs in files]
        own = getattr(part, "home", None)
        where = ((lambda rows, s: own(rows, s, op.graph.vertex(op.rank).index,
                                      op.graph.vertex(op.rank).count)) if own is not None else placed)
        if not hasattr(part, "restore_homed") or not part.restore_homed(mine, where):
            raise InputError(f"rank {op.rank}: the state part {name!r} of its {type(op).__name__} does not say "
                             f"where its rows live at another rank count (Rows(home=...) or a partitioned edge "
                             f"from rank 0; Fields(rescale=...), Array(rescale=...)); resume with the checkpoint's rank count")


def _results_in_flight(op, read, graph, mine):
    """An Output of this operator's `on_data` of every result message in flight into the
    old vertices `mine` at the cut (their channel state on result edges), or None; rows in
    flight on any other kind of link cannot be dealt again here, and are refused in one line."""
    def dtypes(src, r):
        kind = graph.carries(src, r)
        if kind != RESULTS:
            raise InputError(f"rank {op.rank}: the checkpoint holds {kind!r} rows in flight from rank {src} to "
                             f"rank {r}, which its {type(op).__name__} cannot deal at another rank count; resume "
                             f"with the checkpoint's rank count")
        return carried(op.job, op, RESULTS)
    if not any(graph.carries(src, r) == RESULTS for r in mine for src in graph.upstream(r)):
        return None
    out = Output()
    for r in mine:
        _, _, pending = read(r, lambda n: False, channel=lambda src, r=r: dtypes(src, r))
        for src, header, batches in pending:
            out.extend(op.on_data(src, header, batches))
    return out
