"""Rank 0's operator's one way to the running job (its `self.coordinator`), for the strategies
that adapt while the input streams: hash's reorganisation and migration, biclique's scaling,
psp's relocation. Events go out (load requests, moves, routing changes, the strategy's own
control records) and answers come back (loads, finished moves through `on_moved`); the operator
decides, the coordinator carries it out. It holds the driver's parts it needs (the source, the
moves, the parts of the input) and a pump that handles one message, never the driver: an
operator cannot reach the lifecycle it runs in.

What an operator may ask, all of it:
- where the input is: `released`, `done`, `bounds()`, `windows_full()`;
- loads: `ask_loads(ranks)`, then `loads(ranks)` once every one has answered (None before);
- moves of state: `move(unit, src, dst)`, `moving` (any begun and not finished), `settle()`;
- changes of its routing: `change(what, barrier=False)` (master/parts.py), `changing`,
  `barrier_batches`, and `decides` (False on an extra source, which only applies rank 0's);
- `tell(dest, msg)` a control record of its own (answers come to its `on_control`, after the
  call that sent it has returned: calls.py);
- `ask(ranks, msg, answer)`: `msg` to each of `ranks`, whose records of class `answer` come back
  here (`answered(answer)`: {rank: the latest}), not to its `on_control`, so that a call may
  `wait(ready)` for them without being re-entered;
- `send(out)`: an Output sent now rather than when the call that made it returns (what a
  router buffers goes out before a move begins).
"""
from ..runtime.protocol import LoadRequest


class Coordinator:
    def __init__(self, source, moves, parts, tell, post, pump, decides=True):
        """`tell(dest, msg)` sends a control record, `post(out)` an Output (in credit); `pump()`
        handles one incoming message (the answers arrive through it: `on_load`, moves
        acknowledged, the operator's on_control)."""
        self._source, self._moves, self._parts = source, moves, parts
        self._tell, self._post, self._pump = tell, post, pump
        self.decides = decides
        self._loads, self._answers = {}, {}

    # -- where the input is ----------------------------------------------------------------
    @property
    def released(self):
        return self._source.released

    @property
    def done(self):
        return self._source.done

    def bounds(self):
        return self._source.bounds()

    def windows_full(self):
        return self._source.windows_full()

    # -- loads -----------------------------------------------------------------------------
    def ask_loads(self, ranks):
        """Ask `ranks` for their load since their last report. Nothing waits for them: a worker
        answers between batches, and waiting would stall the replay for a batch's join time."""
        self._loads = {}
        for r in ranks:
            self._tell(r, LoadRequest())

    def on_load(self, src, report):
        self._loads[src] = report

    def loads(self, ranks):
        """{rank: LoadReport} once every rank of `ranks` has answered the last request, else None."""
        return dict(self._loads) if all(r in self._loads for r in ranks) else None

    # -- moves -----------------------------------------------------------------------------
    def move(self, unit, src, dst):
        """Move `unit` of state from worker `src` to `dst` (master/moves.py); the operator's
        `on_moved` hears when it is done."""
        self._moves.begin(unit, src, dst, now=self._parts.at_barrier is not None)

    @property
    def moving(self):
        return bool(self._moves.on)

    def settle(self):
        """Handle messages until every move begun is done."""
        self._moves.settle()

    # -- changes of the routing ------------------------------------------------------------
    def change(self, what, barrier=False):
        self._parts.change(what, barrier)

    @property
    def changing(self):
        return self._parts.changing

    @property
    def barrier_batches(self):
        return self._parts.barrier_batches

    # -- the strategy's own records ----------------------------------------------------------
    def tell(self, dest, msg):
        self._tell(dest, msg)

    def ask(self, ranks, msg, answer):
        self._answers[answer] = {}
        for r in ranks:
            self._tell(r, msg)

    def answered(self, answer):
        return dict(self._answers.get(answer, {}))

    def on_answer(self, src, msg):
        """The driver's: keep `msg` if it answers an `ask`; False otherwise (the operator's event)."""
        if type(msg) not in self._answers:
            return False
        self._answers[type(msg)][src] = msg
        return True

    def send(self, out):
        self._post(out)

    def wait(self, ready):
        """Handle messages until `ready()` holds (a stall stops the job: termination.recv_or_stall)."""
        while not ready():
            self._pump()
