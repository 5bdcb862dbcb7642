"""Typed binary headers (mpi_join/runtime/headers.py): a frozen dataclass <-> int64 words by field order,
checked on the way back, and the DATA header that carries one."""
from dataclasses import dataclass

import numpy as np
import pytest

from mpi_join.runtime.headers import Ack, Header, HeaderError, Ready
from mpi_join.runtime.protocol import DataHeader
from mpi_join.ring.chain_routing import Arriving
from mpi_join.ring.handshake import Acked
from mpi_join.ring.psp import Partial
from mpi_join.ring.psp_router import Probing


@dataclass(frozen=True)
class Mixed(Header):
    n: int
    flag: bool
    xs: tuple
    m: int


def test_fields_round_trip_in_order_with_tuples_of_any_length():
    for h in (Mixed(-5, True, (), 7), Mixed(2**62, False, (1, -2, 3), -1), Ack(3, 10, 20), Ready(4, 1500)):
        w = h.encode()
        assert w.dtype == np.int64 and int(w[0]) == type(h).code
        assert type(h).read(w) == h
        assert Header.read(w) == h                  # the code names the class


def test_a_header_read_as_another_type_is_an_error():
    with pytest.raises(HeaderError, match="expected a Ack header, got Ready"):
        Ack.read(Ready(1, 2).encode())
    with pytest.raises(HeaderError, match="unknown header"):
        Header.read(np.array([12345, 1, 2], np.int64))
    with pytest.raises(HeaderError, match="cut short"):
        Mixed.read(Mixed(1, True, (1, 2, 3), 4).encode()[:4])
    with pytest.raises(HeaderError, match="unread words"):
        Ack.read(np.concatenate([Ack(1, 2, 3).encode(), [9]]))


def test_field_types_other_than_int_bool_tuple_are_refused():
    @dataclass(frozen=True)
    class Bad(Header):
        x: float
    with pytest.raises(TypeError, match="Bad.x"):
        Bad(1.5).words()


def test_two_classes_with_one_code_are_refused():
    with pytest.raises(TypeError, match="already"):
        @dataclass(frozen=True)
        class Clash(Header):
            code = Ack.code
            x: int


def test_the_data_header_carries_bounds_and_a_strategy_body():
    for body in (None, Arriving(1), Acked(0, 17), Probing(3, -1, (1, 0), (5, 6, 7, 8)),
                 Partial(2, 1, 0, 3, True, (1, 2))):
        for order in (-1, 0, 123):
            h = DataHeader(9, (-(1 << 62), 0, 44), body, order)
            assert DataHeader.decode(np.asarray(h.encode(), np.int64)) == h
