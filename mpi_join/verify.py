"""Compare a results dataset with the oracle: missing, extra and duplicated results."""
import time

from .oracle import run_oracle
from .results import compare, read_results
from .staged import read_staged


def verify(results_path, job, examples=5):
    """Returns a report dict; report["ok"] is True only when the result sets are equal."""
    arrays = read_staged(job)
    t0 = time.perf_counter()
    expected = run_oracle(job, arrays)
    oracle_s = time.perf_counter() - t0
    got = read_results(results_path, job.stream_names)
    missing, extra, (dups, counts) = compare(expected, got)
    return {
        "ok": not (len(missing) or len(extra) or len(dups)),
        "expected": int(len(expected)), "got": int(len(got)),
        "missing": int(len(missing)), "extra": int(len(extra)),
        "duplicated": int(len(dups)), "duplicate_copies": int((counts - 1).sum()) if len(counts) else 0,
        "examples": {
            "missing": missing[:examples].tolist(), "extra": extra[:examples].tolist(),
            "duplicated": [[*r, int(c)] for r, c in zip(dups[:examples].tolist(), counts[:examples])],
        },
        "oracle_s": oracle_s,
        "streams": list(job.stream_names),
    }


def format_report(rep):
    cols = ", ".join(f"{s}_seq" for s in rep["streams"])
    lines = [f"expected {rep['expected']:,} results (oracle, {rep['oracle_s']:.2f} s), got {rep['got']:,}",
             f"missing {rep['missing']:,}   extra {rep['extra']:,}   duplicated {rep['duplicated']:,}"
             f" ({rep['duplicate_copies']:,} extra copies)"]
    for k in ("missing", "extra", "duplicated"):
        if rep["examples"][k]:
            lab = f"({cols}" + (", copies)" if k == "duplicated" else ")")
            lines.append(f"  {k} e.g. {lab}: " + "; ".join(map(str, rep["examples"][k])))
    lines.append("compared with the oracle on the staged input as given (this cannot catch a wrong time unit or "
                 "column at staging)")
    lines.append("OK: results equal the oracle" if rep["ok"] else "DIFFERENT: results do not equal the oracle")
    return "\n".join(lines)
