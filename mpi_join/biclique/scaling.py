"""Adaptive resource management (BiStream, Section 5): the two-phase scaling (2PS) protocol's
decisions, with no MPI in them; the shuffler (shuffler.Shuffler) asks and acts.

Requesting phase: every `scale_every_ms` the shuffler asks each unit for its memory load volume
(MLV: the bytes of window state it holds, in its load report). For each subgroup G of k active
units of a side, tau = sum MLV / (k C), with C the unit capacity. tau above T_h is an overload
(scale out), below T_l an underload (scale down, while k > 1). A decision is confirmed when it
is made `confirmations` times in a row (a different one resets the count), so a passing spike
scales nothing. Scaling phase: Equation 7 gives how many units, Delta = (tau / Psi - 1) k:
ceil(Delta) spare units join G (as many as there are), or floor(-Delta) of G's least loaded
units leave it (at least one stays).
"""
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    capacity: float          # C, bytes per unit
    t_high: float            # T_h
    t_low: float             # T_l
    psi: float               # the load a scaling aims at
    confirmations: int

    @classmethod
    def of(cls, params):
        return cls(float(params["unit_capacity_mb"]) * 1e6, float(params["t_high"]), float(params["t_low"]),
                   float(params["psi"]), int(params["confirmations"]))


def units_to_change(tau, psi, k):
    """Equation 7: Delta = (tau / Psi - 1) k; positive adds units, negative removes."""
    return (tau / psi - 1.0) * k


class Scaler:
    """The requesting phase's bookkeeping: one streak of equal decisions per (side, subgroup)."""

    def __init__(self, policy):
        self.policy = policy
        self.streak = {}          # (side, g) -> (decision, times in a row)

    def decide(self, members, mlv, spare):
        """Actions [(decision, side, g, units)] from this round's MLVs ({(side, unit): bytes});
        `spare[side]`: units free to join. Also returns the round's observations for the trace."""
        p, actions, seen = self.policy, [], []
        free = [list(spare[0]), list(spare[1])]
        for side in (0, 1):
            for g in range(members.groups[side]):
                act = members.active(side, g)
                k = len(act)
                tau = sum(mlv.get((side, u), 0) for u in act) / (k * p.capacity)
                d = "out" if tau > p.t_high else ("down" if tau < p.t_low and k > 1 else None)
                last, n = self.streak.get((side, g), (None, 0))
                n = n + 1 if d is not None and d == last else (1 if d is not None else 0)
                self.streak[(side, g)] = (d, n)
                seen.append({"side": side, "group": g, "units": k, "tau": round(tau, 4), "decision": d, "streak": n})
                if d is None or n < p.confirmations:
                    continue
                delta = units_to_change(tau, p.psi, k)
                if d == "out":
                    count = min(max(1, math.ceil(delta)), len(free[side]))
                    chosen, free[side] = free[side][:count], free[side][count:]
                else:
                    count = min(max(1, math.floor(-delta)), k - 1)
                    chosen = sorted(act, key=lambda u: (mlv.get((side, u), 0), u))[:count]
                if chosen:
                    actions.append((d, side, g, chosen))
                    self.streak[(side, g)] = (None, 0)
        return actions, seen
