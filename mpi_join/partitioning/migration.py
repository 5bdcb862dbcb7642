"""Moving a partition group between slaves (the `hash` strategy's state migration): the control
records the driver and the two slaves exchange, and the one STATE message that carries the group.

The supplier's state mover sends the group's windows, split information and still-buffered tuples
straight to the consumer in one STATE message; the same encoding (`ExtendibleGroup.state()`) is
what a checkpoint writes."""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..headers import Header
from ..protocol import Control


@dataclass(frozen=True)
class MigrateOut(Control):
    """driver -> supplier (handled on arrival): send group `group` to rank `to`."""
    op: ClassVar[str] = "migrate_out"
    group: int = 0
    to: int = 0


@dataclass(frozen=True)
class Install(Control):
    """driver -> consumer (in order with its DATA): install group `group` from rank `src`, and
    join its buffered tuples under the bounds the move began with."""
    op: ClassVar[str] = "install"
    group: int = 0
    src: int = 0
    bounds: tuple = ()


@dataclass(frozen=True)
class Migrated(Control):
    """supplier or consumer -> driver: its half of the move is done."""
    op: ClassVar[str] = "migrated"
    group: int = 0
    role: str = ""


@dataclass(frozen=True)
class GroupState(Header):
    """Header of the STATE message that carries a group: its split information."""
    group: int
    global_depth: int
    depths: tuple
    directory: tuple


def state_header(p, info):
    return GroupState(int(p), int(info["global_depth"]), tuple(int(d) for d in info["depths"]),
                      tuple(int(d) for d in info["directory"]))


def state_arrays(arrays, info, buffered, dtypes):
    """Each bucket's two windows, then the buffered tuples of both streams."""
    nb = len(info["depths"])
    return [arrays.get(f"{b}/{s}", np.zeros(0, dtypes[s])) for b in range(nb) for s in (0, 1)] + list(buffered)


def state_dtypes(header, dtypes):
    """dtypes of a STATE message's arrays: bucket windows, then buffered tuples (runtime rows)."""
    return [dtypes[s] for _ in header.depths for s in (0, 1)] + list(dtypes)


def read_state(header, arrs):
    """Inverse of state_header/state_arrays: (group, arrays, split information, buffered)."""
    nb = len(header.depths)
    arrays = {f"{b}/{s}": arrs[2 * b + s] for b in range(nb) for s in (0, 1)}
    info = {"global_depth": header.global_depth, "directory": list(header.directory), "depths": list(header.depths)}
    return header.group, arrays, info, arrs[2 * nb:]
