"""Which payload columns the ranks read of each stream (the predicate's keys and band columns,
every column of a stream a UDF reads, a strategy's own: an aggregate's), and so where a null
must be flagged (schema.NULL) rather than hidden: a column nothing reads may hold nulls freely,
for the ranks never look at it (README "Nulls")."""
from dataclasses import replace

from .schema import NULL, stream_dtype


def with_reads(streams, pred, extra=()):
    """The streams with `reads` (the predicate's columns of each, every column of a stream a UDF
    reads, and `extra`: (stream index, column)) and their dtypes with the NULL flag where needed."""
    reads = [set() for _ in streams]
    for c in pred.equi + pred.band:
        for si, col in (c.left, c.right):
            reads[si].add(col)
    for t in pred.theta:
        for si in t.streams:
            reads[si].update(streams[si].schema)
    for si, col in extra:
        reads[si].add(col)
    out = []
    for s, r in zip(streams, reads):
        s = replace(s, reads=tuple(c for c in s.schema if c in r))
        if s.null_flag != (NULL in s.dtype.names):
            widths = {n: s.dtype.fields[n][0].itemsize for n in s.dtype.names}
            s = replace(s, dtype=stream_dtype(s.schema, f"streams.{s.name}.schema", widths, s.null_flag))
        out.append(s)
    return tuple(out)
