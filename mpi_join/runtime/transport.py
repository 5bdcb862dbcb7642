"""The MPI transport: numpy buffers over mpi4py's uppercase calls, tagged by message kind (the
in-process runtime has its own, local.py; both implement transport_api.Transport).

Waiting never spins a core: receives poll with Improbe and back off (sleeping up to 2 ms), so
ranks can outnumber cores. Sends are nonblocking and their buffers are kept until complete.
Every wait also drives liveness (liveness.py): it takes heartbeats in and aborts naming a peer
that stays silent (a thread sends this rank's heartbeats); a receive is itself nonblocking
(Irecv), so a message whose sender is cut off mid-transfer cannot hang the rank either.
Tags and message kinds are in protocol.py; what a message is, in wire.py.
"""
import threading
import time

import numpy as np
from mpi4py import MPI

from ..errors import JobError
from .liveness import Liveness
from .protocol import Tag
from .wire import PeerFailed, pack_obj, unpack_obj


_MAX_SLEEP = 0.002
_MIN_SLEEP = 0.00002
_ALIVE_IN = np.zeros(8, np.uint8)      # a heartbeat: int64 1 when its sender was idle in recv, else 0
_HEARD = {Tag.DATA: "a data batch", Tag.ACK: "an acknowledgement", Tag.CTRL: "a control record",
          Tag.STATE: "moved state", Tag.READY: "READY", Tag.DONE: "its final metrics", Tag.ALIVE: "a heartbeat"}


def tell_rank0_failed(comm, why, code, wait=1.0):
    """From a failing rank other than 0, before it aborts the job with `code`: tell rank 0
    (Tag.FAILED), so that it releases the locks it holds (the abort would kill it with them on
    disk), and give it up to `wait` seconds, within which rank 0 aborts the job itself."""
    buf = pack_obj({"why": why[:1000], "code": int(code)})
    try:
        req = comm.Isend([buf, MPI.BYTE], dest=0, tag=Tag.FAILED)
        t = time.monotonic() + wait
        while time.monotonic() < t and not req.Test():
            time.sleep(0.01)
        while time.monotonic() < t:
            time.sleep(0.05)
    except MPI.Exception:
        pass


class Transport:
    """Point-to-point messaging for one rank, with idle and communication time accounted."""
    cpu = staticmethod(time.process_time)       # a rank's CPU is its process's

    def __init__(self, comm=None):
        self.comm = comm or MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._pending = []          # (request, buffer) of unfinished sends
        self.start_times()          # idle_s: waiting with nothing to receive; comm_s: inside calls that move data
        self.bytes_out = 0
        self.bytes_in = 0
        self._status = MPI.Status()
        self.hosts = None           # host of each rank (ranks.py gathers them at start)
        self.live = None
        self._next_tick = 0.0
        self._idle = False          # in recv, waiting for a message: what heartbeats tell
        self.busy_at = {}           # peer -> when a heartbeat last said it was at work

    # -- liveness -------------------------------------------------------------------------
    def enable_liveness(self, timeout_s):
        """Watch peers (see `watch`) and abort on one silent for `timeout_s`; 0 turns it off.
        Heartbeats come from a thread (MPI is initialised with MPI_THREAD_MULTIPLE), so a rank
        busy outside its message loop is still heard; `close` stops it before MPI finalises."""
        if not timeout_s or timeout_s <= 0:
            self.live = None
            return
        self.live = Liveness(timeout_s, time.monotonic())
        self._beat_lock = threading.Lock()
        self._beat_stop = threading.Event()
        self._beats = threading.Thread(target=self._beat, name="heartbeats", daemon=True)
        self._beats.start()

    def _beat(self):
        reqs = []
        while not self._beat_stop.wait(self.live.beat_every):
            beat = np.array([1 if self._idle else 0], np.int64).view(np.uint8)
            with self._beat_lock:
                for p in sorted(self.live.beating):
                    reqs.append((self.comm.Isend([beat, MPI.BYTE], dest=p, tag=Tag.ALIVE), beat))
            reqs = [(r, b) for r, b in reqs if not r.Test()]

    def _heard(self, src, tag, buf, now):
        """A message or heartbeat from `src`: it is alive; a heartbeat also says whether it was
        at work or idle in its message loop (answering a probe now and then is idle)."""
        self.live.on_heard(src, _HEARD.get(tag, "a message"), now)
        if tag == Tag.ALIVE and not buf[:8].view(np.int64)[0]:
            self.busy_at[src] = now

    def pause(self, seconds):
        """Rank 0 has nothing to do until the others move on (a probe wave that must be
        repeated): let them, for `seconds`."""
        time.sleep(seconds)

    def idle_for(self, peers):
        """Seconds for which every heartbeat of every one of `peers` said it was idle, waiting in
        its message loop (None without liveness)."""
        if self.live is None or not peers:
            return None
        now = time.monotonic()
        return min(now - self.busy_at.get(p, now) for p in peers)

    def close(self):
        """Stop the heartbeat thread (before MPI finalises)."""
        if self.live is not None:
            self._beat_stop.set()
            self._beats.join()

    def watch(self, peer):
        if self.live is not None:
            with self._beat_lock:
                self.live.watch(peer, time.monotonic())
            self.busy_at[peer] = time.monotonic()

    def stop_beating(self, peer):
        """No heartbeat reaches `peer` after this returns (call it before the message that lets
        the peer leave: MPI keeps order on a link, so none arrives after the peer is gone)."""
        if self.live is not None:
            with self._beat_lock:
                self.live.stop_beating(peer)

    def unwatch(self, peer):
        if self.live is not None:
            with self._beat_lock:
                self.live.unwatch(peer)

    def host(self, rank):
        return self.hosts[rank] if self.hosts else "?"

    def _tick(self):
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + 0.05
        live = self.live
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=Tag.ALIVE, status=self._status):
            src = self._status.Get_source()
            self.comm.Recv([_ALIVE_IN, MPI.BYTE], source=src, tag=Tag.ALIVE)
            self._heard(src, Tag.ALIVE, _ALIVE_IN, now)
        live.tick(now)
        quiet = live.silent(now)
        if quiet is None:
            return
        peer, secs, last = quiet
        if self.comm.Iprobe(source=peer, tag=MPI.ANY_TAG):     # it did send; this rank was busy
            live.on_heard(peer, "a message", now)
            return
        raise JobError(f"rank {peer} on host {self.host(peer)} has been silent for {secs:.1f} s "
                       f"(run.liveness_timeout {live.timeout:g} s): a cut link, or a stopped, frozen or dead "
                       f"process or node; last heard from it: {last}")

    # -- messages ---------------------------------------------------------------------------
    def send(self, dest, tag, buf):
        t = time.perf_counter()
        req = self.comm.Isend([buf, MPI.BYTE], dest=dest, tag=int(tag))
        self._pending.append((req, buf))
        self.bytes_out += buf.nbytes
        if len(self._pending) > 64:
            self._reap()
        self.comm_s += time.perf_counter() - t

    def _reap(self):
        """Drop the completed sends; True when none is left."""
        self._pending = [(r, b) for r, b in self._pending if not r.Test()]
        return not self._pending

    def poll(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):
        """A waiting message as (source, tag, buffer), or None at once."""
        if self._pending:
            self._reap()
        if self.live is not None:
            self._tick()
        while True:
            m = self.comm.Improbe(source=source, tag=tag, status=self._status)
            if m is None:
                return None
            t = time.perf_counter()
            src, tg, n = self._status.Get_source(), self._status.Get_tag(), self._status.Get_count(MPI.BYTE)
            buf = np.empty(n, np.uint8)
            req = m.Irecv([buf, MPI.BYTE])
            if not req.Test():
                self._complete(req)
            self.bytes_in += n
            self.comm_s += time.perf_counter() - t
            if self.live is not None:
                self._heard(src, tg, buf, time.monotonic())
            if tg == Tag.FAILED:
                said = unpack_obj(buf)
                raise PeerFailed(src, said["why"], said["code"])
            if tg != Tag.ALIVE:
                return src, Tag(tg), buf

    def _complete(self, req):
        """Wait for a started receive, driving liveness (its sender may be cut off mid-message).
        A large message is still streaming in: test without sleeping for a while (a batch takes
        tens of microseconds), then back off."""
        spin_until = time.perf_counter() + 0.005
        while time.perf_counter() < spin_until:
            if req.Test():
                return
        self._wait_for(req.Test)

    def _wait_for(self, done):
        """Back off (sleeping up to 2 ms) until `done()`, driving liveness meanwhile."""
        sleep = _MIN_SLEEP
        while not done():
            if self.live is not None:
                self._tick()
            time.sleep(sleep)
            sleep = min(sleep * 2, _MAX_SLEEP)

    def recv(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, timeout=None):
        """Wait for a message without spinning a core (poll, then sleep with backoff); None
        after `timeout` seconds with nothing (heartbeats do not count)."""
        msg = self.poll(source, tag)
        if msg is not None:
            return msg
        t0 = time.perf_counter()
        sleep = _MIN_SLEEP
        self._idle = True
        try:
            while True:
                time.sleep(sleep)
                msg = self.poll(source, tag)
                if msg is not None or (timeout is not None and time.perf_counter() - t0 > timeout):
                    self.idle_s += time.perf_counter() - t0
                    return msg
                sleep = min(sleep * 2, _MAX_SLEEP)
        finally:
            self._idle = False

    def start_times(self):
        self.idle_s = self.comm_s = 0.0

    def flush(self):
        """Wait until every send has completed (before exiting or reusing buffers)."""
        t0 = time.perf_counter()
        self._wait_for(self._reap)
        self.idle_s += time.perf_counter() - t0
