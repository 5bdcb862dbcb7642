"""Typed binary headers: a frozen dataclass <-> int64 words, by field order.

A strategy says what its DATA messages mean with a small dataclass (psp's `Probing(batch_id,
retired, orderings, cuts)`, handshake's `Acked(side, upto)`) instead of positional ints; the
runtime's own payloads (ACK, READY, the STATE header) are headers too. On the wire a header is
its class's code followed by its fields: an int or bool field is one word, a tuple field a length
word and then its ints. The code is a stable number made from the class's module and name, so
every rank agrees on it without a registry to keep in step, and decoding checks it: a header
read as the wrong type is an error, not a silent misread.
"""
import dataclasses
import zlib
from typing import ClassVar

import numpy as np

_BY_CODE = {}
_KINDS = {int: "int", bool: "bool", tuple: "tuple", "int": "int", "bool": "bool", "tuple": "tuple"}


class HeaderError(RuntimeError):
    """A header that does not decode as what was asked for: a protocol bug, named."""


class Header:
    """Base of typed headers. Subclasses are frozen dataclasses whose fields are int, bool or
    tuple (of ints); `code` is derived from the class's qualified name unless set."""
    code: ClassVar[int] = 0

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "code" not in cls.__dict__:
            cls.code = zlib.crc32(f"{cls.__module__}.{cls.__qualname__}".encode()) & 0x7FFFFFFF
        other = _BY_CODE.get(cls.code)
        if other is not None and (other.__module__, other.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"header {cls.__qualname__}: code {cls.code} is already {other.__qualname__}'s")
        _BY_CODE[cls.code] = cls

    @classmethod
    def _layout(cls):
        lay = cls.__dict__.get("_fields_")
        if lay is None:
            lay = []
            for f in dataclasses.fields(cls):
                kind = _KINDS.get(f.type)
                if kind is None:
                    raise TypeError(f"header {cls.__qualname__}.{f.name}: type {f.type!r}; a header holds int, "
                                    f"bool or tuple fields")
                lay.append((f.name, kind))
            cls._fields_ = lay
        return lay

    def words(self):
        """The header as a list of ints: [code, field words...]."""
        out = [self.code]
        for name, kind in self._layout():
            v = getattr(self, name)
            if kind == "tuple":
                out.append(len(v))
                out.extend(int(x) for x in v)
            else:
                out.append(int(v))
        return out

    def encode(self):
        return np.asarray(self.words(), np.int64)

    @classmethod
    def decode(cls, words, at=0):
        """`words[at:]` as a header of this class (or, on Header itself, of whatever class its code
        names). Returns (header, index after it)."""
        words = np.asarray(words, np.int64)
        if at >= len(words):
            raise HeaderError(f"{cls.__name__} header expected, the message ends first")
        code = int(words[at])
        got = _BY_CODE.get(code)
        if got is None or (cls is not Header and not issubclass(got, cls)):
            name = got.__qualname__ if got else f"an unknown header (code {code})"
            raise HeaderError(f"expected a {cls.__qualname__} header, got {name}")
        vals, k = {}, at + 1
        try:
            for name, kind in got._layout():
                if kind == "tuple":
                    n = int(words[k])
                    if n < 0 or k + 1 + n > len(words):
                        raise IndexError
                    vals[name] = tuple(int(x) for x in words[k + 1:k + 1 + n])
                    k += 1 + n
                else:
                    vals[name] = bool(words[k]) if kind == "bool" else int(words[k])
                    k += 1
        except IndexError:
            raise HeaderError(f"{got.__qualname__} header cut short ({len(words) - at} words)") from None
        return got(**vals), k

    @classmethod
    def read(cls, words):
        """Exactly one header of this class filling `words`."""
        h, k = cls.decode(words)
        if k != len(words):
            raise HeaderError(f"{cls.__qualname__} header followed by {len(words) - k} unread words")
        return h


# -- the runtime's own payloads -------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Ack(Header):
    """A DATA message was handled: a credit back to its sender, and the receiver's counters."""
    msg_no: int
    results: int
    tuples_in: int


@dataclasses.dataclass(frozen=True)
class Ready(Header):
    """A worker's kernels are compiled: how many it compiled and how long that took."""
    compiled: int
    compile_us: int


@dataclasses.dataclass(frozen=True)
class UnitState(Header):
    """Header of a STATE message: unit `unit`'s state, moved at routing epoch `epoch`."""
    unit: int
    epoch: int
