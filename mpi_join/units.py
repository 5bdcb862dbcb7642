"""Durations ("15min", "2s", "250ms") and event-time units, read exactly.

A duration's number is read as a decimal fraction (fractions.Fraction of its text), never through
a float: "1.0000000001s" is 1,000,000,000.1 ns and "9007199254740993ns" that integer. Each reader
then says how a fraction of its unit is taken: a window rounds up (a strict bound on integer times,
so `d < 1.5` and `d < 2` accept the same d), an interval bound must be a whole number of the job's
unit, and an option in ns (flush interval, timeouts) a whole number of ns.
"""
import re
from fractions import Fraction

from .errors import ConfigError

# nanoseconds per unit
_NS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "sec": 1_000_000_000,
    "min": 60_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
}
TS_UNITS = ("ns", "us", "ms", "s")
_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")


def parse_duration(text, field):
    """A duration such as "15min" as an exact number of nanoseconds (a Fraction); `field` names
    the option in errors."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise ConfigError(f"{field}: expected a duration string such as \"15min\" or \"500ms\", got {text!r}")
    m = _DUR.fullmatch(text.lower())
    if not m or m.group(2) not in _NS:
        raise ConfigError(
            f"{field}: cannot read duration {text!r}; write a number and a unit "
            f"({', '.join(sorted(set(_NS)))}), e.g. \"15min\""
        )
    return Fraction(m.group(1)) * _NS[m.group(2)]


def parse_duration_ns(text, field):
    """A duration as a whole number of nanoseconds; one that is not ("1.5ns") is refused."""
    ns = parse_duration(text, field)
    if ns.denominator != 1:
        raise ConfigError(f"{field}: {text!r} is not a whole number of nanoseconds")
    return int(ns)


def ns_to_ts(ns, ts_unit):
    """Convert nanoseconds to the job's event-time unit, rounding up so no tuple is ever cut early."""
    per = _NS[ts_unit]
    return int(-(-Fraction(ns) // per))


def ts_unit_ns(ts_unit):
    return _NS[ts_unit]
