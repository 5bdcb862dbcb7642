"""`psp`'s router (rank 0, and every extra source: numbers each batch, cuts it into slices, picks
the join orderings), the batch headers it sends into the ring, and the strategy's job checks.
No join code (and no numba) is imported here, so a rank that routes starts without loading a
kernel; the first batch's selectivities of more than two streams are measured with the kernels,
imported then (selectivity.py). The ring's operators: psp.py."""
from dataclasses import dataclass

from ..runtime.headers import Header
from ..runtime.protocol import Control
from ..runtime.operator import INT_KEYS, Fields, Operator, Output
from ..strategies import numbers
from .adapt import rebalance
from .slicing import Slicer


# -- what a batch in the ring is (the typed header of its DATA message) ---------------------------
@dataclass(frozen=True)
class _Batch(Header):
    batch_id: int
    retired: int           # head's note: every batch up to this one has ended its cycle
    orderings: tuple       # each stream's probing order, M x (M-1), row by row
    cuts: tuple            # the batch's slice cuts, M x n, row by row


@dataclass(frozen=True)
class Entering(_Batch):
    """INPUT: a new batch from the driver (to the head)."""


@dataclass(frozen=True)
class Probing(_Batch):
    """PROBE: the batch's probe copies going round."""


@dataclass(frozen=True)
class CycleDone(Control):
    """Head -> driver: every input batch up to `upto` has finished its cycle in the ring."""
    upto: int


def parse_ordering(text, names):
    """"A>C>B, B>A>C" -> {probe stream: [streams in probing order]}; streams not listed: auto."""
    out = {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        seq = [s.strip() for s in part.split(">")]
        bad = [s for s in seq if s not in names]
        if bad:
            raise ValueError(f"unknown stream {bad[0]!r} (streams: {', '.join(names)})")
        if sorted(seq) != sorted(names) or len(set(seq)) != len(seq):
            raise ValueError(f"{part!r} must name every stream once, the probing stream first")
        out[names.index(seq[0])] = [names.index(s) for s in seq[1:]]
    return out


def check_ordering(pred, first, order):
    """Each stream in the order must have a condition with one already bound."""
    bound = {first}
    for j in order:
        if not any(pred.between(m, j) for m in bound):
            return j
        bound.add(j)
    return None


def auto_orderings(pred, M, sel, given=None):
    """Join orderings, most selective first: from each probing stream, repeatedly bind the stream
    (connected to the bound ones) whose condition with them passes the fewest pairs (`sel[m][j]`:
    the measured fraction of pairs of m and j that satisfy their conditions)."""
    out = {}
    for i in range(M):
        if given and i in given:
            out[i] = list(given[i])
            continue
        bound, order = {i}, []
        while len(bound) < M:
            cand = [j for j in range(M) if j not in bound and any(pred.between(m, j) for m in bound)]
            j = min(cand, key=lambda j: (min(sel[m][j] for m in bound if pred.between(m, j)), j))
            order.append(j)
            bound.add(j)
        out[i] = order
    return out


def batch_header(cls, batch_id, retired, orderings, cuts):
    M = cuts.shape[0]
    return cls(int(batch_id), int(retired), tuple(int(s) for i in range(M) for s in orderings[i]),
               tuple(cuts.ravel().tolist()))


def slice_counts(job, n):
    """The strategy's `slice_counts` as Slicer counts: None (time slicing), "balanced" or n counts."""
    text = job.strategy.params["slice_counts"]
    if not text or text == "balanced":
        return text or None
    counts = [int(x) for x in str(text).split(",")]
    return (counts + [counts[-1]] * n)[:n]


def slice_weights(job, n):
    """The strategy's `weights`, one per operator of a ring of n (default equal)."""
    text = job.strategy.params["weights"]
    return [float(x) for x in str(text).split(",")] if text else [1.0] * n


def new_slicer(job, n, counts):
    """The Slicer of the strategy's parameters for a ring of n operators; `counts` False: time
    slicing whatever `slice_counts` says (a source's: the head sets count-bounded cuts)."""
    p = job.strategy.params
    lengths = None
    if p["lengths"]:
        given = dict(kv.split("=") for kv in str(p["lengths"]).split(","))
        lengths = [int(given.get(s.name, n)) for s in job.streams]
    return Slicer([s.window for s in job.streams], n, weights=slice_weights(job, n), counts=slice_counts(job, n) if counts else None,
                  mode=p["relocation"], lengths=lengths)


class PspRouter(Operator):
    """The driver's side: numbers each batch, computes its cuts and join orderings, sends it to
    the head, and knows which batches have ended their cycle (a checkpoint waits for all)."""

    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        p = job.strategy.params
        self.n = len(graph.workers)
        self.M = len(job.streams)
        names = [s.name for s in job.streams]
        self.given = parse_ordering(p["ordering"], names) if p["ordering"] != "auto" else {}
        self.orderings = None
        self.slicer = new_slicer(job, self.n, counts=False)
        self.force = _parse_force(p["force_relocate"])
        self.weights = slice_weights(job, self.n)
        self.adapt_every = int(p["adapt_every"])
        self.asked = False
        self.next_id = 0
        self.retired = -1
        self.relocations = []
        self.declare(slicer=self.slicer, route=Fields(self, "next_id", "retired", "weights", orderings=INT_KEYS))

    def on_data(self, src, header, batches):
        if not any(len(b) for b in batches):
            return
        if self.orderings is None:
            self.orderings = auto_orderings(self.job.predicate, self.M, self._selectivity(batches), self.given)
        cuts = self.slicer.next(batches)
        self.next_id = self.number(header, self.next_id) + 1
        return Output.sending((self.to(1),), batches, header.bounds, batch_header(Entering, self.next_id - 1, -1,
                                                                         self.orderings, cuts))

    def _selectivity(self, batches):
        """What auto_orderings weighs: for two streams there is one ordering whatever it is, so
        the kernels that measure it (and numba) are imported only for three or more."""
        if self.M == 2:
            return [[1.0, 1.0], [1.0, 1.0]]
        from .selectivity import measure_selectivity
        return measure_selectivity(self.job.predicate, batches)

    def rescale(self, root, cid):
        """Restored at another rank count (psp_rescale.py): the shares of this ring (the slicer
        went on from the old one's edge: slicing.Slicer.restore)."""
        from ..storage.checkpoint import manifest_of
        from .psp_rescale import first_batch
        self.weights = slice_weights(self.job, self.n)
        self.slicer.set_shares(self.weights)
        renumbered = first_batch(self.job, manifest_of(root, cid)[0], len(self.graph.sources))
        if renumbered is not None:
            self.next_id, self.retired = renumbered + 1, renumbered

    def adapts(self):
        return bool(self.adapt_every or self.force)

    def end_of_epoch(self, epoch):
        """Relocate when forced, or every `adapt_every` epochs by the operators' loads; a
        relocation is a change placed in the input (coordinator.change), and the next waits until it
        is applied here."""
        if self.force and epoch == self.force[0]:
            self._relocate(epoch, self.force[1], self.force[2])
        if self.adapt_every and epoch % self.adapt_every == 0 and not self.coordinator.changing:
            workers = self.graph.workers
            loads = self.coordinator.loads(workers) if self.asked else None
            if loads:
                p = self.job.strategy.params
                new = rebalance(self.weights, [loads[w].busy for w in workers], p["grow_above"], p["shrink_below"],
                                p["imbalance"], self.coordinator.windows_full())
                if new is not None:
                    self._relocate(epoch, new, p["relocation"])
            if loads or not self.asked:
                self.coordinator.ask_loads(workers)
                self.asked = True

    def _relocate(self, epoch, weights, mode):
        self.coordinator.change([epoch, [float(x) for x in weights], mode])

    def apply_change(self, what):
        epoch, self.weights, mode = what[0], list(what[1]), what[2]
        self.slicer.set_shares(self.weights, mode=mode)
        self.relocations.append((epoch, [round(x, 4) for x in self.weights], mode))

    def on_control(self, src, msg):
        if isinstance(msg, CycleDone):
            self.retired = max(self.retired, msg.upto)
        else:
            super().on_control(src, msg)

    def quiet(self):
        return self.retired >= self.next_id - 1

    def stats(self):
        return {"batches": self.next_id, "orderings": self.orderings and {str(k): v for k, v in self.orderings.items()},
                "relocations": self.relocations}


def _parse_force(text):
    """"EPOCH:w1,w2,...[:aggressive]" -> (epoch, weights, mode)."""
    if not text:
        return None
    parts = str(text).split(":")
    return int(parts[0]), [float(x) for x in parts[1].split(",")], parts[2] if len(parts) > 2 else "aggressive"


def check_job(job, nranks):
    """The `psp` strategy's own job checks (named in its registry entry)."""
    p, where, names = job.strategy.params, f"{job.path}: strategy", [s.name for s in job.streams]
    n = nranks - 1
    if p["ordering"] != "auto":
        try:
            given = parse_ordering(p["ordering"], names)
        except ValueError as e:
            return f"{where}.ordering: {e}"
        for i, order in given.items():
            bad = check_ordering(job.predicate, i, order)
            if bad is not None:
                return (f"{where}.ordering: in {names[i]}'s ordering, {names[bad]} has no condition with the "
                        f"streams before it; each stream must be joined to one already bound")
    if p["lengths"]:
        for kv in str(p["lengths"]).split(","):
            k, _, v = kv.partition("=")
            if k.strip() not in names or not v.strip().isdigit() or not 1 <= int(v) <= n:
                return (f"{where}.lengths: expected STREAM=N pairs with N in 1..{n} (operators on {nranks} ranks), "
                        f"got {kv!r}")
    for key in ("weights", "slice_counts"):
        if p[key] and not (key == "slice_counts" and p[key] == "balanced"):
            try:
                vals = numbers(p[key], key)
            except ValueError:
                return f"{where}.{key}: expected comma-separated finite numbers, got {p[key]!r}"
            if key == "weights" and (len(vals) != n or min(vals) < 0 or sum(vals) <= 0):
                return (f"{where}.weights: expected {n} non-negative numbers (one per ring operator on "
                        f"{nranks} ranks) with a positive sum, got {p[key]!r}")
            if key == "slice_counts" and min(vals) < 1:
                return f"{where}.slice_counts: expected positive tuple counts, got {p[key]!r}"
    if p["force_relocate"]:
        try:
            epoch, weights, mode = _parse_force(p["force_relocate"])
            assert len(weights) == n and min(weights) >= 0 and sum(weights) > 0 and mode in ("passive", "aggressive")
        except (ValueError, IndexError, AssertionError):
            return (f"{where}.force_relocate: expected EPOCH:W1,...,W{n}[:passive|aggressive] ({n} weights, "
                    f"one per operator), got {p['force_relocate']!r}")
    return None
