"""Compare a results dataset with the oracle: missing, extra and duplicated results; for a
strategy that promises an output order (splitjoin), whether the results were written in it; and
for a run that aggregated online (an aggregate/ directory of snapshots), whether the final
snapshot equals the aggregate of the oracle's results."""
import collections
import os
import time

import numpy as np

from ..join.oracle import run_oracle
from ..errors import InputError
from .checksums import read_success, verify_snapshots
from .results import compare, part_of, read_results, read_snapshots, result_files
from .staged import read_staged


def order_violations(got, level):
    """How many results (rows of seqs in the order written) come before one they should follow.
    `outer`: grouped in the arrival (seq) order of the tuple that triggered them, the newest of
    the result's tuples; `inner`: also, within a trigger, in the arrival order of the others."""
    if len(got) < 2:
        return 0
    trig = got.max(axis=1)
    back = trig[1:] < trig[:-1]
    if level == "inner":
        other = np.sort(got, axis=1)[:, -2]
        back |= (trig[1:] == trig[:-1]) & (other[1:] < other[:-1])
    return int(back.sum())


def read_results_in_write_order(results_path, job, only=None):
    """The results in the order they were written: part files by number. One writer (splitjoin's
    combiner) numbers its files in order, and after a resume at another rank count the new
    writer numbers its files past every file committed before (slaves/cuts.py), so the numbers
    order the files of every launch; two files of one number (two writers at once) cannot be
    ordered and are refused."""
    files = [os.path.basename(f) for f in result_files(results_path)]
    if only is not None:
        files = [f for f in files if f in only]
    parts = [(part_of(f), f) for f in files]
    if any(p is None for p, _ in parts):
        raise InputError(f"{results_path}: --ordered needs part files as mpi-join writes them "
                         f"(part-r<rank>-<n>.parquet); found {next(f for p, f in parts if p is None)}")
    numbers = collections.Counter(n for (_, n), _ in parts)
    if any(c > 1 for c in numbers.values()):
        n = next(k for k, c in numbers.items() if c > 1)
        who = sorted(r for (r, k), _ in parts if k == n)
        raise InputError(f"{results_path}: --ordered needs the files of one writer at a time (splitjoin's combiner); "
                         f"ranks {', '.join(map(str, who))} both wrote a part file number {n}")
    ordered_files = [f for _, f in sorted(parts, key=lambda x: x[0][1])]
    return read_results(results_path, job.stream_names, only=set(ordered_files), order=ordered_files)


def writers(results_path):
    """The ranks whose part files make up a run's results (part-r<rank>-<n>.parquet)."""
    return {(part_of(f) or (-1, 0))[0] for f in result_files(results_path)}


def verify(results_path, job, examples=5, ordered=None, expected=None):
    """Returns a report dict; report["ok"] is True only when the result sets are equal (and, with
    `ordered` = "outer" or "inner", the results were written in that order). `expected`: the
    oracle's result on this job's staged input when the caller has it already, or a function of
    the staged arrays that gives it (a cache)."""
    arrays = read_staged(job)
    prefix = open_log_prefix(results_path, job)
    if prefix is not None:            # the committed results cover the input before the offset
        arrays = [a[a["seq"] < prefix["input_offset"]] for a in arrays]
        expected = None
    t0 = time.perf_counter()
    if expected is None:
        expected = run_oracle(job, arrays)
    elif callable(expected):
        expected = expected(arrays)
    oracle_s = time.perf_counter() - t0
    got = read_results(results_path, job.stream_names, only=prefix and set(prefix["files"]))
    if prefix is not None:            # an outer join's lone rows come when the log ends
        expected, got = expected[(expected >= 0).all(axis=1)], got[(got >= 0).all(axis=1)]
    missing, extra, (dups, counts) = compare(expected, got)
    order = None
    if ordered:
        got = read_results_in_write_order(results_path, job, only=prefix and set(prefix["files"]))
        order = {"level": ordered, "violations": order_violations(got, ordered)}
    agg = check_aggregate(results_path, job, arrays, expected)
    run_dir = results_path if os.path.isdir(os.path.join(results_path, "results")) else os.path.dirname(
        os.path.normpath(results_path))
    unfinished = prefix is None and os.path.isdir(run_dir) and not os.path.exists(os.path.join(run_dir, "_SUCCESS"))
    return {
        "unfinished": unfinished,
        "ok": not (len(missing) or len(extra) or len(dups)) and not (order and order["violations"]) and
              not (agg and agg["difference"]),
        "order": order,
        "aggregate": agg,
        "expected": int(len(expected)), "got": int(len(got)),
        "missing": int(len(missing)), "extra": int(len(extra)),
        "duplicated": int(len(dups)), "duplicate_copies": int((counts - 1).sum()) if len(counts) else 0,
        "examples": {
            "missing": missing[:examples].tolist(), "extra": extra[:examples].tolist(),
            "duplicated": [[*r, int(c)] for r, c in zip(dups[:examples].tolist(), counts[:examples])],
        },
        "oracle_s": oracle_s,
        "streams": list(job.stream_names),
        "open_log": None if prefix is None else {k: prefix.get(k) for k in ("input_offset", "commits", "results")},
    }


def open_log_prefix(results_path, job):
    """When the staged input is a log that has not ended: the run's committed record (commits.py),
    which is what verify checks then; None for an ended log or staged input at rest."""
    from .commits import read_committed
    from .staged import is_log, read_manifest
    man = read_manifest(job.staged)
    if not is_log(man) or man["log"].get("ended"):
        return None
    out = results_path if os.path.isdir(os.path.join(results_path, "results")) else os.path.dirname(
        os.path.normpath(results_path))
    rec = read_committed(out)
    if rec is None or rec.get("input_offset") is None:
        raise InputError(f"{job.staged}: the staged log has not ended and {out} has committed no results yet: "
                         f"nothing to verify until its first commit (output.commit_every)")
    return rec


def check_aggregate(results_path, job, arrays, expected):
    """None without snapshots; else {"snapshots", "groups", "difference"}: the final snapshot
    against the aggregate (the spec it was written with) of the oracle's results."""
    from ..join import aggregate
    out = results_path if os.path.isdir(os.path.join(results_path, "aggregate")) else os.path.dirname(
        os.path.normpath(results_path))
    d = os.path.join(out, "aggregate")
    done = os.path.join(out, "_SUCCESS")
    recorded = read_success(done).get("snapshots") if os.path.isfile(done) else None
    if recorded:                 # the run recorded its snapshots: each as written, none missing
        verify_snapshots(d, recorded, final=True)
    snaps = read_snapshots(d) if os.path.isdir(d) else []
    if not snaps:
        return None
    numbers = [m.get("snapshot") for m, _ in snaps]
    if numbers != list(range(len(snaps))):
        gap = next(k for k, n in enumerate(numbers) if n != k)
        return {"snapshots": len(snaps), "groups": snaps[-1][1].num_rows, "spec": snaps[-1][0].get("aggregate"),
                "difference": f"{d}: aggregate snapshot {gap} is missing (snapshots are numbered 0 to "
                              f"{numbers[-1]} without a gap)"}
    meta, table = snaps[-1]
    if not meta.get("final"):
        return {"snapshots": len(snaps), "groups": table.num_rows, "spec": meta.get("aggregate"),
                "difference": f"{d}: the last snapshot ({meta.get('snapshot')}) is not final: the run did not finish"}
    spec = aggregate.parse(meta["aggregate"], job.streams, f"{d}: aggregate")
    want = aggregate.of_pairs(spec, arrays, expected)
    got = np.zeros(table.num_rows, want.dtype)
    for name in want.dtype.names:
        got[name] = table.column(name).to_numpy(zero_copy_only=False)
    return {"snapshots": len(snaps), "groups": int(len(got)), "spec": spec.text,
            "difference": aggregate.compare(spec, want, got)}


def format_report(rep):
    cols = ", ".join(f"{s}_seq" for s in rep["streams"])
    lines = [f"expected {rep['expected']:,} results (oracle, {rep['oracle_s']:.2f} s), got {rep['got']:,}",
             f"missing {rep['missing']:,}   extra {rep['extra']:,}   duplicated {rep['duplicated']:,}"
             f" ({rep['duplicate_copies']:,} extra copies)"]
    for k in ("missing", "extra", "duplicated"):
        if rep["examples"][k]:
            lab = f"({cols}" + (", copies)" if k == "duplicated" else ")")
            lines.append(f"  {k} e.g. {lab}: " + "; ".join(map(str, rep["examples"][k])))
    if rep.get("order"):
        o = rep["order"]
        what = ("the arrival order of the tuple that triggered them" if o["level"] == "outer" else
                "the arrival order of the triggering tuple, then of the tuple it met")
        lines.append(f"order ({o['level']}): {'every result' if not o['violations'] else str(o['violations']) + ' results'}"
                     f"{' is' if not o['violations'] else ' are not'} written in {what}")
    if rep.get("aggregate"):
        a = rep["aggregate"]
        lines.append(f"aggregate {a['spec']}: {a['snapshots']} snapshots, the final one "
                     + ("equals the oracle's aggregate" if not a["difference"] else f"differs: {a['difference']}")
                     + f" ({a['groups']} groups)")
    if rep.get("open_log"):
        o = rep["open_log"]
        lines.append(f"the staged log has not ended: checked the run's {o['commits']} commit(s), which cover the input "
                     f"before seq {o['input_offset']:,} (an outer join's lone rows are checked once the log has ended)")
    if rep.get("unfinished"):
        lines.append("the run has not finished (no _SUCCESS): its results so far are partial; verify it once it "
                     "has ended")
    lines.append("compared with the oracle on the staged input as given (this cannot catch a wrong time unit or "
                 "column at staging)")
    ordered = " and are in order" if rep.get("order") else ""
    lines.append(f"OK: results equal the oracle{ordered}" if rep["ok"] else
                 "DIFFERENT: results do not equal the oracle" + (" or are out of order" if rep.get("order") else "")
                 + (" (the run has not finished)" if rep.get("unfinished") else ""))
    return "\n".join(lines)
