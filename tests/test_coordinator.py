"""Rank 0's coordinator (master/coordinator.py): the adapting routers (hash's migrations, psp's
relocations) reach the job only through it, hold no reference to the driver, and still equal
the oracle; its load protocol answers once every rank asked has reported."""
import numpy as np
import pytest

from mpi_join.join.oracle import run_oracle
from mpi_join.master.coordinator import Coordinator
from mpi_join.master.driver import Driver
from mpi_join.runtime.protocol import LoadReport, LoadRequest
from conftest import random_streams
from reference import as_set
from sim import sim_job, simulate_psp, simulate_strategy
from test_psp_ring import multiway_job, multiway_streams

# what an operator may ask of the job: the module docstring's list, all of it
INTERFACE = {"released", "done", "bounds", "windows_full", "ask_loads", "on_load", "loads", "move", "moving",
             "settle", "change", "changing", "barrier_batches", "decides", "tell", "ask", "answered", "on_answer",
             "send", "wait"}


def _reaches(obj, cls, seen=None, depth=0):
    """Does `obj` reach an instance of `cls` through attributes and containers (a few levels)?"""
    seen = set() if seen is None else seen
    if isinstance(obj, cls):
        return True
    if id(obj) in seen or depth > 6 or isinstance(obj, (str, bytes, int, float, np.ndarray, type)):
        return False
    seen.add(id(obj))
    if isinstance(obj, dict):
        items = list(obj.keys()) + list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    else:
        return False
    return any(_reaches(x, cls, seen, depth + 1) for x in items)


def _check_router(router):
    assert isinstance(router.coordinator, Coordinator)
    assert {n for n in dir(router.coordinator) if not n.startswith("_")} == INTERFACE
    rest = {k: v for k, v in vars(router).items() if k != "coordinator"}
    assert not _reaches(rest, Driver, {id(router)}), "rank 0's operator holds the driver"


def test_hash_migrates_through_its_coordinator_only():
    job = sim_job("hash", "equi", "time")
    arrays = random_streams(np.random.default_rng(3), 900, key_range=12)
    got, _, router = simulate_strategy("hash", job, arrays, 3, seed=2, batch_size=20, partitions=9,
                                       reorganize_every=1, force="migrate")
    assert router.log["migrations"], "the forced reorganisation moved no group"
    assert len(got) == len(as_set(got)) and as_set(got) == as_set(run_oracle(job, arrays))
    _check_router(router)


def test_psp_relocates_through_its_coordinator_only():
    job = multiway_job(3, ['"90ms"', '"80ms"', '"100ms"'])
    arrays = multiway_streams(np.random.default_rng(7), 3, 500, key_range=6)
    got, _, router = simulate_psp(job, arrays, 3, seed=3, batch_size=5, force_relocate="30:1,0,3:aggressive")
    assert router.relocations
    assert as_set(got) == as_set(run_oracle(job, arrays))
    _check_router(router)


def test_loads_come_back_once_every_rank_asked_has_answered():
    told = []
    c = Coordinator(None, None, None, lambda dest, msg: told.append((dest, msg)), None, None)
    c.ask_loads([2, 3])
    assert [(d, type(m)) for d, m in told] == [(2, LoadRequest), (3, LoadRequest)]
    report = LoadReport(occupancy=0.5, busy=0.25, state_bytes=10)
    c.on_load(2, report)
    assert c.loads([2, 3]) is None
    c.on_load(3, report)
    assert c.loads([2, 3]) == {2: report, 3: report}
    c.ask_loads([2])                     # a new request forgets the old answers
    assert c.loads([2]) is None


@pytest.mark.parametrize("strategy", ["biclique", "splitjoin", "handshake"])
def test_routers_that_do_not_adapt_hold_no_driver_either(strategy):
    job = sim_job(strategy, "equi", "count")
    arrays = random_streams(np.random.default_rng(5), 200, key_range=8)
    got, _, router = simulate_strategy(strategy, job, arrays, 4, seed=1, batch_size=9)
    assert as_set(got) == as_set(run_oracle(job, arrays))
    _check_router(router)


def test_answers_to_an_ask_come_to_the_coordinator_not_the_operator():
    """biclique's hand-over waits inside apply_change for its units' At: the answers are kept
    here (on_answer True), any other record is the operator's event (False)."""
    from mpi_join.biclique.shuffler import At, Upto
    told = []
    c = Coordinator(None, None, None, lambda dest, msg: told.append((dest, msg)), None, None)
    assert not c.on_answer(2, At(3))                 # nothing asked: the operator's
    c.ask([2, 4], Upto(5), At)
    assert told == [(2, Upto(5)), (4, Upto(5))] and c.answered(At) == {}
    assert c.on_answer(2, At(4)) and c.on_answer(2, At(5)) and not c.on_answer(4, Upto(1))
    assert c.answered(At) == {2: At(5)}


class _Op:
    """Records its calls; its on_data's Output is two messages, its on_control's one. `during`
    runs inside on_data (a wait that handles messages, as biclique's hand-over does)."""
    def __init__(self):
        self.calls, self.inside, self.during = [], False, lambda: None

    def on_data(self, n):
        assert not self.inside, "re-entered"
        self.inside = True
        self.calls.append(("on_data", n))
        self.during()
        self.inside = False
        return ["data", n, "a"], ["data", n, "b"]

    def on_control(self, msg):
        assert not self.inside, "re-entered"
        self.calls.append(("on_control", msg))
        return (["ctrl", msg],)


def test_rank_0s_operator_is_never_re_entered_and_its_answers_follow_the_output():
    """An event that comes inside a call, or while its Output is being sent (rank 0 handles
    messages while it waits for credit), is handed over after the call, in the order they came,
    and its answer goes out after that Output."""
    from mpi_join.master.calls import OperatorCalls
    sent, op = [], _Op()

    def apply(out):                            # sending: each message may wait for credit
        for m in out or ():
            sent.append(m)
            if m == ["data", 1, "a"]:
                calls.post("on_control", "x")   # a worker's record, handled while rank 0 waits
    calls = OperatorCalls(op, apply)
    op.during = lambda: calls.post("on_control", "w")
    calls("on_data", 1)
    assert op.calls == [("on_data", 1), ("on_control", "w"), ("on_control", "x")]
    assert sent == [["data", 1, "a"], ["data", 1, "b"], ["ctrl", "w"], ["ctrl", "x"]]
    calls.post("on_control", "y")            # no call running: at once
    assert op.calls[-1] == ("on_control", "y") and not calls.pending("on_control")
