"""The three transports (MPI, threads in one process for `run --local`, the stepped in-memory
network of the drain and the simulations) implement
the one interface the runtime calls (runtime/transport_api.py): every member, every parameter."""
import inspect

import pytest

from mpi_join.runtime.transport_api import Transport


def _instances():
    from mpi4py import MPI
    from mpi_join.runtime.local import Hub
    from mpi_join.runtime.transport import Transport as MPITransport
    from mpi_join.runtime.memory import MemTransport, Network
    return {"mpi": MPITransport(MPI.COMM_SELF), "local": Hub(2).transport(1), "memory": MemTransport(Network(2, 0), 0)}


def _members():
    names = [n for n in dir(Transport) if not n.startswith("_") and callable(getattr(Transport, n))]
    return names, list(Transport.__annotations__)


@pytest.mark.parametrize("kind", ["mpi", "local", "memory"])
def test_every_transport_implements_the_interface(kind):
    tx = _instances()[kind]
    try:
        methods, fields = _members()
        assert len(methods) >= 12 and isinstance(tx, Transport)
        for name in fields:
            assert hasattr(tx, name), f"{kind}: no attribute {name!r}"
        for name in methods:
            want = [p for p in inspect.signature(getattr(Transport, name)).parameters.values() if p.name != "self"]
            try:
                got = inspect.signature(getattr(tx, name)).parameters
            except ValueError:          # a builtin (time.process_time) takes nothing
                got = {}
            assert not [p for p in got.values() if p.default is p.empty and p.kind is not p.VAR_POSITIONAL
                        and p.name not in {w.name for w in want}], f"{kind}.{name}{tuple(got)}: a parameter the interface has not"
            for p in want:
                assert p.name in got or any(q.kind in (q.VAR_POSITIONAL, q.VAR_KEYWORD) for q in got.values()), \
                    f"{kind}.{name}{tuple(got)} has no parameter {p.name!r}"
    finally:
        tx.close()
