"""Liveness: a silent rank or link becomes a clear abort instead of a job that hangs forever.

MPI reports nothing when a link between hosts is cut or a rank is stopped (SIGSTOP, a frozen
node): the others just wait. So every rank watches the peers it depends on (the driver watches
every worker, and a worker the driver, from the start on), counting anything received from a
peer as a sign of life, and a heartbeat thread sends each watched peer a small ALIVE message
every `beat_every` (a fifth of the timeout, at most 5 s), so a rank busy for a long time (a
checkpoint write, a big batch) is still heard. A peer silent for longer than the timeout is
reported with what was last heard from it. Time the watching rank itself spent away from its
message loop is not held against its peers (their messages were waiting, unread).

Pure bookkeeping on a clock passed in, so it is tested without MPI; transport.py drives it.
"""


class Liveness:
    def __init__(self, timeout_s, now):
        self.timeout = float(timeout_s)
        self.beat_every = min(self.timeout / 5, 5.0)
        self.heard = {}           # watched peer -> [time heard, what]
        self.beating = set()      # peers that get ALIVE messages
        self.last_tick = now

    def watch(self, peer, now):
        self.heard[peer] = [now, "nothing yet"]
        self.beating.add(peer)

    def stop_beating(self, peer):
        """No more ALIVE messages to `peer` (it is about to leave), but keep watching it."""
        self.beating.discard(peer)

    def unwatch(self, peer):
        self.heard.pop(peer, None)
        self.beating.discard(peer)

    def on_heard(self, peer, what, now):
        if peer in self.heard:
            self.heard[peer] = [now, what]

    def tick(self, now):
        """Called from the message loop: a gap since the last tick longer than `beat_every` is
        time this rank was away, added to every peer's allowance."""
        gap = now - self.last_tick
        self.last_tick = now
        if gap > self.beat_every:
            for h in self.heard.values():
                h[0] += gap

    def silent(self, now):
        """(peer, seconds silent, what was last heard) of the longest-silent peer over the
        timeout, else None."""
        worst = max(self.heard.items(), key=lambda kv: now - kv[1][0], default=None)
        if worst is None or now - worst[1][0] <= self.timeout:
            return None
        return worst[0], now - worst[1][0], worst[1][1]
