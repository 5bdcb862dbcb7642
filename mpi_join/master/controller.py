"""The `hash` master's controller: reorganisation and the degree of declustering (IV-C, V-A).

Pure planning, no MPI: given each active slave's average buffer occupancy over the last
reorganisation epoch and the partition groups it owns, decide which groups move where and
whether a slave leaves or rejoins service."""
from dataclasses import dataclass, field


@dataclass
class Plan:
    moves: list = field(default_factory=list)      # (partition group, from slave, to slave)
    activate: list = field(default_factory=list)   # slaves brought back into service
    deactivate: list = field(default_factory=list) # slaves taken out of service
    suppliers: list = field(default_factory=list)
    consumers: list = field(default_factory=list)


def classify(occupancy, supply, consume):
    """Suppliers are above the supply threshold, consumers below the consumer threshold."""
    suppliers = sorted((s for s, o in occupancy.items() if o > supply), key=lambda s: -occupancy[s])
    consumers = sorted((s for s, o in occupancy.items() if o < consume), key=lambda s: occupancy[s])
    return suppliers, consumers


def plan(occupancy, groups_of, active, inactive, rng, supply=0.5, consume=0.01, rho=2.0, declustering=True,
         busy=None, idle_busy=0.25, windows_full=True):
    """One reorganisation. `occupancy`, `busy` (CPU seconds per wall second) and `groups_of`
    cover the active slaves. A slave leaves service only when nobody supplies, the windows are
    full (load before that is not steady-state load), and its CPU is nearly idle: a slave whose
    buffer is empty because it keeps up by working hard is not idle."""
    p = Plan()
    p.suppliers, p.consumers = classify({s: occupancy[s] for s in active}, supply, consume)
    busy = busy or {}
    idle = [s for s in p.consumers if busy.get(s, 0.0) < idle_busy]
    if declustering and windows_full and not p.suppliers and idle and len(active) > 1:
        # nobody is overloaded and some slave is nearly idle: take the least loaded slave out,
        # spreading its groups over the rest
        out = min(idle, key=lambda s: (busy.get(s, 0.0), occupancy[s], -s))
        rest = [s for s in active if s != out]
        for k, g in enumerate(sorted(groups_of.get(out, []))):
            p.moves.append((g, out, rest[k % len(rest)]))
        p.deactivate.append(out)
        return p
    consumers = list(p.consumers)
    if declustering and inactive and len(p.suppliers) > rho * len(p.consumers):
        back = min(inactive)
        p.activate.append(back)
        consumers.insert(0, back)
    # one scan: each consumer takes one randomly chosen group from the next supplier
    suppliers = [s for s in p.suppliers if groups_of.get(s)]
    for c, s in zip(consumers, suppliers):
        gs = sorted(groups_of[s])
        p.moves.append((gs[rng.integers(len(gs))], s, c))
    return p


def forced_plan(groups_of, active, inactive, rng, mode, round_no):
    """Reorganisations forced for testing: 'migrate' moves a random group between random pairs
    every time; 'decluster' alternately takes a slave out of service and brings it back."""
    p = Plan()
    if mode == "decluster":
        if inactive and (round_no % 2 == 1 or len(active) == 1):
            p.activate.append(min(inactive))
            return p
        if len(active) > 1:
            out = max(active)
            rest = [s for s in active if s != out]
            p.moves = [(g, out, rest[k % len(rest)]) for k, g in enumerate(sorted(groups_of.get(out, [])))]
            p.deactivate.append(out)
        return p
    order = list(active)
    rng.shuffle(order)
    for s, c in zip(order[0::2], order[1::2]):
        gs = sorted(groups_of.get(s, []))
        if gs:
            p.moves.append((gs[rng.integers(len(gs))], s, c))
    return p
