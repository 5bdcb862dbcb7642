"""Durations ("15min", "2s", "250ms") and event-time units."""
import re

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


def parse_duration_ns(text, field):
    """Parse a duration such as "15min" into nanoseconds; `field` names the option in errors."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise ConfigError(f"{field}: expected a duration string such as \"15min\" or \"500ms\", got {text!r}")
    m = _DUR.fullmatch(text.lower())
    if not m or m.group(2) not in _NS:
        raise ConfigError(
            f"{field}: cannot read duration {text!r}; write a number and a unit "
            f"({', '.join(sorted(set(_NS)))}), e.g. \"15min\""
        )
    return int(round(float(m.group(1)) * _NS[m.group(2)]))


def ns_to_ts(ns, ts_unit):
    """Convert nanoseconds to the job's event-time unit, rounding up so no tuple is ever cut early."""
    per = _NS[ts_unit]
    return -(-ns // per)


def ts_unit_ns(ts_unit):
    return _NS[ts_unit]
