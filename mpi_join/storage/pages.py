"""Small pages for the at-rest stager and collector (local_stage.py, local_collect.py).

Where Linux backs memory with transparent huge pages "always" (as here), the first touch of any
2 MB-aligned region of anonymous memory zeroes all of it: a thread's stack, an allocator's arena,
a buffer freed and mapped again. Staging in process starts some ten threads and allocates and
frees columns of tens of MB; the kernel's page clearing was a fifth of `stage`'s CPU (perf, on
`bench door`'s 1.2 M rows), and `pipeline` spent 0.89-1.08 s of system time, 0.75-0.90 s with
this process's huge pages off (wall 2.90-2.95 s -> 2.74-2.78 s, three runs each, one sitting).
The ranks keep huge pages (a window's random probes meet fewer TLB misses on them): `pipeline`
starts them before it stages (gate.py), and the setting passes only to children started later."""
import ctypes

_PR_SET_THP_DISABLE = 41


def small_pages():
    """Back this process's memory (and its later children's) with 4 KB pages. Where the call is
    not there (not Linux, an old kernel), nothing changes."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
