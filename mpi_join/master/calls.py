"""Rank 0's operator is called one call at a time (Flink's OperatorCoordinator: queued events,
never re-entered). What it is handed while a call of its runs, or while that call's Output is
being sent (rank 0 handles workers' messages while it waits for credit), waits in a queue: its
own control records (`on_control`), a finished move (`on_moved`), a change of its routing it
placed (`apply_change`, with one source). Each is handed over once the call has returned and its
Output is sent, in the order they came. So an operator never sees its own state change under it
in the middle of a call, and what it sends in answer to an event never goes out between the
messages of another call's Output. Answers it waits for inside a call (loads, a strategy's
`ask`) go to its coordinator instead (coordinator.py)."""
from collections import deque


class OperatorCalls:
    def __init__(self, op, apply):
        """`op`: rank 0's operator; `apply(out)` sends an Output (outlet.Outlet.apply)."""
        self.op, self.apply = op, apply
        self.queued, self.depth = deque(), 0

    def __call__(self, name, *args):
        """Call `op.name(*args)` now and send its Output; then hand over what was queued meanwhile."""
        self.depth += 1
        try:
            self.apply(getattr(self.op, name)(*args))
        finally:
            self.depth -= 1
        self.deliver()

    def post(self, name, *args):
        """`op.name(*args)` now if no call of the operator is running, else once it has returned."""
        self.queued.append((name, args))
        self.deliver()

    def deliver(self):
        while self.queued and self.depth == 0:
            name, args = self.queued.popleft()
            self(name, *args)

    def pending(self, name):
        """Is an `op.name` call queued?"""
        return any(n == name for n, _ in self.queued)
