"""What `splitjoin` checks in a job before it runs (named in the registry)."""


def check_job(job, nranks):
    p = job.strategy.params
    where = f"{job.path}: strategy"
    if p["punctuation"] == "comparisons":
        unbounded = [s.name for s in job.streams if s.window.kind == "unbounded"]
        if unbounded:
            return (f"{where}.punctuation: 'comparisons' puts a star after every {p['interval']} comparison(s) of "
                    f"a tuple with its whole sub-window, which never shrinks in the unbounded window of "
                    f"{', '.join(unbounded)}; use 'tuples' (or a bounded window)")
    if nranks < 3:
        return (f"strategy 'splitjoin' needs at least 3 MPI ranks (rank 0 drives the input, then at least one "
                f"join core, and the last rank combines and writes the results), got {nranks}")
    return None
