"""The end of a run: end-of-stream on every entry link, the last checkpoint finished, then probe
waves (the four-counter method) until two in a row see the same counts
and every DATA message sent was handled. Counts that disagree and stay the same for
run.liveness_timeout stop the job: a DATA message was lost, or a rank restored counts of another
run."""
import time

from ..errors import JobError
from ..runtime.protocol import Fin, Probe


def end_run(driver):
    """After the last input: end of stream, termination detected, every worker told to finish and
    its final metrics in (driver.done)."""
    d = driver
    d.finish_input()                # end of stream on every entry link
    d.wait(lambda: not d.ckpt.pending)
    terminate(d)
    for w in d.workers:
        d.tx.stop_beating(w)       # it leaves after its DONE; watched until then
        d.control(w, Fin())
    d.wait(lambda: len(d.done) == len(d.workers))
    d.tx.flush()


def terminate(driver):
    d = driver
    wave, prev, sleep = 0, None, 0.0001
    bound, since = d.job.run.liveness_timeout_s or None, time.perf_counter()
    while True:
        wave += 1
        for w in d.workers:
            d.control(w, Probe(wave))
        d.wait(lambda: len(d.probes.get(wave, ())) == len(d.workers))
        replies = d.probes.pop(wave).values()
        sent = d.out.sent + sum(r.sent for r in replies)
        got = sum(r.received for r in replies)
        if sent == got and prev == (sent, got):
            return
        if prev != (sent, got):
            since = time.perf_counter()
        elif bound is not None and time.perf_counter() - since > bound and stalled(d.tx, d.workers, bound):
            raise JobError(f"rank 0: the workers report {sent:,} DATA messages sent and {got:,} handled, unchanged "
                           f"for {bound:g} s; the job cannot end (a lost message, or a rank's restored state that "
                           f"does not belong to this run)")
        prev = (sent, got)
        d.tx.pause(sleep)
        sleep = min(2 * sleep, 0.005)


def stalled(tx, workers, bound):
    """Every worker idle in its message loop for `bound` seconds (their heartbeats say so), while
    rank 0 gets nothing it waits for: nothing can ever happen again. A worker busy for a long
    time is not a stall."""
    idle = tx.idle_for(workers)
    return bound is not None and idle is not None and idle > bound


def recv_or_stall(tx, workers, bound):
    """The next message for rank 0; a stall stops the job with one line (a lost message, or
    restored state that does not belong to this run) instead of waiting forever."""
    while True:
        msg = tx.recv(timeout=bound)
        if msg is not None:
            return msg
        if stalled(tx, workers, bound):
            raise JobError(f"rank 0: every rank is alive, but every worker has been idle, waiting for messages "
                           f"that do not come, for {bound:g} s while the run waited for them; the job cannot go "
                           f"on (run.liveness_timeout)")
