"""Moving a partition group between slaves (the `hash` strategy's state migration): the control
records the driver and the two slaves exchange, and the one STATE message that carries the group.

The supplier's state mover sends the group's windows, split information and still-buffered tuples
straight to the consumer in one STATE message; the same encoding (`ExtendibleGroup.state()`) is
what a checkpoint writes."""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

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


def state_header(p, info):
    """Header of a STATE message: [p, global depth, buckets, depths..., directory...]."""
    nb = len(info["depths"])
    return [p, info["global_depth"], nb] + list(info["depths"]) + list(info["directory"])


def state_arrays(arrays, info, buffered, dtypes):
    """Each bucket's two windows, then the buffered tuples of both streams."""
    nb = len(info["depths"])
    return [arrays.get(f"{b}/{s}", np.zeros(0, dtypes[s])) for b in range(nb) for s in (0, 1)] + list(buffered)


def state_dtypes(header, window_dtypes, dtypes):
    """dtypes of a STATE message's arrays: bucket windows (window rows), then buffered tuples."""
    nb = int(header[2])
    return [window_dtypes[s] for _ in range(nb) for s in (0, 1)] + list(dtypes)


def read_state(header, arrs):
    """Inverse of state_header/state_arrays: (group, arrays, split information, buffered)."""
    p, gd, nb = int(header[0]), int(header[1]), int(header[2])
    depths = [int(x) for x in header[3:3 + nb]]
    directory = [int(x) for x in header[3 + nb:]]
    arrays = {f"{b}/{s}": arrs[2 * b + s] for b in range(nb) for s in (0, 1)}
    return p, arrays, {"global_depth": gd, "directory": directory, "depths": depths}, arrs[2 * nb:]
