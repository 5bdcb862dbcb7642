"""Process-wide facts around numba that the runtime reports: how many kernels this process
compiled (and when), and the garbage-collector pauses after the compiler's heap is frozen.

Kept apart from kernels.py so that importing it does not import numba: numba's import and its
first dispatch cost about a second of CPU per process, which a rank that runs no kernel (most
routers) should not pay at every launch.
"""
import time


def freeze_heap():
    """Call once the kernels are compiled, before the replay clock starts: collect, then move
    every object alive into the permanent generation. Compiling leaves about 130 k objects
    (numba's typing and LLVM state) that every full garbage collection would traverse again:
    80 to 250 ms with no batch handled, on every rank at about the same batch, which showed as
    the worst production delays of a run."""
    import gc
    gc.collect()
    gc.freeze()
    GcPauses.install()


class GcPauses:
    """Garbage-collector pauses of this process since `freeze_heap` (in the rank metrics)."""
    count, total_s, max_s = 0, 0.0, 0.0
    _t = None

    @classmethod
    def install(cls):
        import gc
        cls.count, cls.total_s, cls.max_s = 0, 0.0, 0.0
        if cls._event not in gc.callbacks:
            gc.callbacks.append(cls._event)

    @classmethod
    def _event(cls, phase, info):
        if phase == "start":
            cls._t = time.perf_counter()
        elif cls._t is not None:
            d = time.perf_counter() - cls._t
            cls.count, cls.total_s, cls.max_s = cls.count + 1, cls.total_s + d, max(cls.max_s, d)

    @classmethod
    def stats(cls):
        return {"gc_collections": cls.count, "gc_pause_ms": round(cls.total_s * 1e3, 2),
                "gc_pause_max_ms": round(cls.max_s * 1e3, 2)}


class Compiles:
    """Counts the numba compilations of this process (loads from the on-disk cache are not
    compilations) and the seconds they took, through numba's compile events. The runtime uses
    it to compile every kernel before the replay clock starts, to say so when the cache was
    cold, and to report any kernel that still compiled during the replay."""
    count, seconds, _depth, _t0 = 0, 0.0, 0, 0.0

    @classmethod
    def install(cls):
        """Listen to numba's compile events; kernels.py calls it when it imports numba. A process
        that never imports numba (a router that runs no kernel) compiles nothing and pays nothing."""
        if getattr(cls, "_listener", None) is None:
            from numba.core import event

            class Listener(event.Listener):
                def on_start(self, ev):
                    if cls._depth == 0:
                        cls._t0 = time.perf_counter()
                    cls._depth += 1

                def on_end(self, ev):
                    cls._depth -= 1
                    cls.count += 1
                    if cls._depth == 0:
                        cls.seconds += time.perf_counter() - cls._t0

            cls._listener = Listener()
            event.register("numba:compile", cls._listener)
        return cls
