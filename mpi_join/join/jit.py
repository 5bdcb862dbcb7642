"""Facts around numba that the runtime reports, per rank: how many kernels it compiled (and
when), and the garbage-collector pauses after the compiler's heap is frozen.

Kept apart from kernels.py so that importing it does not import numba: numba's import and its
first dispatch cost about a second of CPU per process, which a rank that runs no kernel (most
routers) should not pay at every launch.
"""
import threading
import time


def freeze_heap():
    """Call once the kernels are compiled, before the replay clock starts: collect, then move
    every object alive into the permanent generation. Compiling leaves about 130 k objects
    (numba's typing and LLVM state) that every full garbage collection would traverse again:
    80 to 250 ms with no batch handled, on every rank at about the same batch, which showed as
    the worst production delays of a run. The collection is a full one only after this thread
    compiled (a cold cache left 39 k objects of garbage among 190 k); kernels loaded from the
    cache leave none past the young generations, and a full collection there cost a rank 11% of
    its start-up CPU (0.66 -> 0.59 s a worker, mpiexec -n 5 on 2,000 tuples)."""
    import gc
    gc.collect(2 if Compiles.mine()[0] else 1)
    gc.freeze()
    GcPauses.install()


class _Figures:
    """One thread's figures. A rank's are its thread's: under mpiexec the process's own, under
    `run --local` (every rank a thread of one process) each rank's, not the sum of them all."""
    __slots__ = ("count", "seconds", "max_s", "depth", "t0")

    def __init__(self):
        self.count, self.seconds, self.max_s, self.depth, self.t0 = 0, 0.0, 0.0, 0, None


# thread-local, not keyed by thread id: a finished rank's figures go with its thread, and a
# later run's thread that gets the same id (run --local again in one process) starts at zero
_figures = threading.local()


def _mine(kind):
    f = getattr(_figures, kind, None)
    if f is None:
        f = _Figures()
        setattr(_figures, kind, f)
    return f


class GcPauses:
    """Garbage-collector pauses since `freeze_heap`, counted on the thread whose allocation
    started the collection (in the rank metrics)."""
    @classmethod
    def install(cls):
        import gc
        _figures.gc = _Figures()
        if cls._event not in gc.callbacks:
            gc.callbacks.append(cls._event)

    @classmethod
    def _event(cls, phase, info):
        f = getattr(_figures, "gc", None)
        if f is None:               # a thread that is no rank's (or not since its freeze_heap)
            return
        if phase == "start":
            f.t0 = time.perf_counter()
        elif f.t0 is not None:
            d = time.perf_counter() - f.t0
            f.count, f.seconds, f.max_s, f.t0 = f.count + 1, f.seconds + d, max(f.max_s, d), None

    @classmethod
    def stats(cls):
        f = getattr(_figures, "gc", None) or _Figures()
        return {"gc_collections": f.count, "gc_pause_ms": round(f.seconds * 1e3, 2),
                "gc_pause_max_ms": round(f.max_s * 1e3, 2)}


class Compiles:
    """Counts the numba compilations of this thread (loads from the on-disk cache are not
    compilations) and the seconds they took, through numba's compile events, which fire on the
    thread that compiles. The runtime uses it to compile every kernel before the replay clock
    starts, to say so when the cache was cold, and to report any kernel that still compiled
    during the replay."""
    _listener = None

    @classmethod
    def mine(cls):
        """(kernels compiled, seconds spent compiling) by the calling thread so far."""
        f = getattr(_figures, "compiles", None)
        return (f.count, f.seconds) if f else (0, 0.0)

    @classmethod
    def install(cls):
        """Listen to numba's compile events; kernels.py calls it when it imports numba. A process
        that never imports numba (a router that runs no kernel) compiles nothing and pays nothing."""
        if cls._listener is None:
            from numba.core import event

            class Listener(event.Listener):
                def on_start(self, ev):
                    f = _mine("compiles")
                    if f.depth == 0:
                        f.t0 = time.perf_counter()
                    f.depth += 1

                def on_end(self, ev):
                    f = _mine("compiles")
                    f.depth -= 1
                    f.count += 1
                    if f.depth == 0:
                        f.seconds += time.perf_counter() - f.t0

            cls._listener = Listener()
            event.register("numba:compile", cls._listener)
        return cls
