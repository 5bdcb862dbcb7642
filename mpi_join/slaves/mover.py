"""Moving a unit of state between workers, the worker's side of coordinator.move (master/moves.py).

The holder, on MoveOut (handled on arrival, never before a queued checkpoint marker), takes the
unit out of its module with the unit's rows still queued from the driver and sends both to the
new holder in one STATE message. The new holder keeps that message until the Install, in order
on the driver's link, is next: the driver's DATA behind it waits for the state. Then it puts the
unit in, joins the rows that were queued at the old holder, and tells the driver. A unit moved
away at routing epoch e gets no rows routed at e or later: a protocol error if it does, not a
silent double."""
import numpy as np
from numpy.lib.format import descr_to_dtype, dtype_to_descr

from ..runtime.graph import DRIVER
from ..runtime.headers import UnitState
from ..runtime.protocol import DataHeader, Install, Moved, Tag
from ..runtime.wire import pack, pack_obj, unpack, unpack_obj


class Mover:
    def __init__(self, tx, rank, module, inbox):
        self.tx, self.rank, self.module, self.inbox = tx, rank, module, inbox
        self.dtypes = module.dtypes
        self.arrived = {}                           # unit -> moved state here, its Install not yet handled
        self.moved_out = {}                         # unit -> routing epoch it left this rank at

    def move_out(self, msg):
        arrays, attrs = self.module.take(msg.unit)
        names = sorted(arrays)
        queued = self.inbox.take_unit(msg.unit, self.module.unit_of, self.dtypes)
        meta = {"names": names, "dtypes": [dtype_to_descr(arrays[n].dtype) for n in names], "attrs": attrs}
        parts = [pack_obj(meta)] + [np.ascontiguousarray(arrays[n]) for n in names] + queued
        self.tx.send(msg.to, Tag.STATE, pack(UnitState(msg.unit, msg.epoch).encode(), parts))
        self.moved_out[msg.unit] = msg.epoch
        self.tx.send(DRIVER, Tag.CTRL, Moved(msg.unit, "out").encode())

    def state_in(self, buf):
        """A STATE message: kept until its Install is next in the driver's queue."""
        h = UnitState.read(unpack(buf, [])[0])
        meta = unpack_obj(unpack(buf, [np.uint8])[1][0])
        dts = [descr_to_dtype(d) for d in meta["dtypes"]]
        parts = unpack(buf, [np.uint8] + dts + list(self.dtypes))[1]
        arrays = dict(zip(meta["names"], parts[1:1 + len(dts)]))
        self.arrived[h.unit] = (arrays, meta["attrs"], parts[1 + len(dts):])

    def blocks(self, item):
        """Is the driver's queued `item` an Install whose state has not arrived yet?"""
        return item[0] == "ctrl" and isinstance(item[1], Install) and item[1].unit not in self.arrived

    def install(self, msg):
        """Put the unit in; returns (the rows queued at the old holder, the header to join them
        under); the caller joins them and then calls `installed`."""
        arrays, attrs, queued = self.arrived.pop(msg.unit)
        self.module.put(msg.unit, arrays, attrs)
        self.moved_out.pop(msg.unit, None)
        return queued, DataHeader(-1, msg.bounds, None, -1, msg.epoch)

    def installed(self, msg):
        self.tx.send(DRIVER, Tag.CTRL, Moved(msg.unit, "in").encode())

    def check(self, header, batches):
        """Refuse rows of a unit routed here after it moved away."""
        if not self.moved_out:
            return
        gone = np.array(sorted(u for u, e in self.moved_out.items() if header.epoch >= e), np.int64)
        for b in batches:
            if len(b) and len(gone):
                units = self.module.unit_of(b)
                stray = np.isin(units, gone)
                if stray.any():
                    u = int(units[stray][0])
                    raise RuntimeError(f"worker {self.rank}: rows of unit {u} routed at epoch {header.epoch}, "
                                       f"after it moved away at epoch {self.moved_out[u]}")
