"""The one interface a transport gives the runtime: MPI (transport.Transport, a process per rank),
in memory (local.LocalTransport, `run --local`: a thread per rank) and the stepped in-memory
network (memory.MemTransport: the drain, and the tests' simulations) each implement it, and tests/test_transport_api.py checks every member
of each against it. The driver, the workers and liveness call nothing else."""
from typing import Protocol, runtime_checkable


@runtime_checkable
class Transport(Protocol):
    rank: int                  # this rank
    size: int                  # ranks in the job
    idle_s: float              # time spent waiting with nothing to receive
    comm_s: float              # time inside calls that move data
    bytes_in: int
    bytes_out: int
    hosts: list                # each rank's host (ranks.py fills it at the start)

    def cpu(self) -> float:
        """This rank's CPU seconds (its process's or its thread's)."""

    def send(self, dest: int, tag: int, buf) -> None:
        """Send the uint8 buffer `buf` to rank `dest` with `tag`; the buffer is the transport's
        from then on (the sender never reuses it). Per (sender, receiver) link, first in, first out."""

    def poll(self, source=None, tag=None):
        """(src, Tag, buf) of a waiting message from `source` with `tag` (None: any), or None."""

    def recv(self, source=None, tag=None, timeout=None):
        """Like poll, waiting up to `timeout` seconds (None: until one comes; a waiting rank does
        not spin a core); None after the timeout. A failed peer raises wire.PeerFailed."""

    def flush(self) -> None:
        """Complete every send begun."""

    def close(self) -> None:
        """Flush, and stop what runs beside the rank (heartbeats)."""

    def pause(self, seconds: float) -> None:
        """Let `seconds` pass without work to do (the other ranks move on)."""

    def idle_for(self, peers):
        """How long every rank of `peers` has been idle, by their heartbeats, or None."""

    def host(self, rank: int) -> str:
        """The host rank `rank` runs on."""

    def enable_liveness(self, timeout_s: float) -> None:
        """Start heartbeats: a peer silent for `timeout_s` is a failed peer."""

    def watch(self, peer: int) -> None:
        """Expect heartbeats from `peer`."""

    def unwatch(self, peer: int) -> None:
        """Stop expecting heartbeats from `peer` (it ended)."""

    def start_times(self) -> None:
        """idle_s and comm_s from 0 again (the replay's clock starts: metrics.start_clock)."""

    def stop_beating(self, peer: int) -> None:
        """Send `peer` no more heartbeats."""
