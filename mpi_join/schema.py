"""Column types of the staged data: names in job files <-> numpy <-> Arrow.

Tuples are numpy structured arrays: one contiguous buffer per batch, so a batch travels
through MPI as raw bytes and numba kernels read its columns without copies.
"""
import re

import numpy as np
import pyarrow as pa

from .errors import ConfigError

_SIMPLE = {
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float32": np.float32, "float64": np.float64, "bool": np.bool_,
}
_CHAR = re.compile(r"^char(\d+)$")
_ARRAY = re.compile(r"^(u?int(?:8|16|32|64)|float(?:32|64))\[(\d+(?:\s*,\s*\d+)*)\]$")

# the largest text column, array column and row a job may declare (bytes)
MAX_CHAR = 1 << 20
MAX_ROW = 64 << 20

# columns every staged stream has
SEQ, TS = "seq", "ts"
# a rank's row: whether a column the ranks read (a key, a band column, a UDF's) is null in it (the row
# then matches nothing: join/predicate.key_matrix, band_matrix); only in the rows of a stream with a
# `nullable` column the ranks read
NULL = "_null"
# a staged row (staging, the staged log): which of the schema's columns are null, one flag per column
NULLS = "_nulls"
INTEGER_KINDS = "iub"
# text without a declared width: staged as Parquet UTF-8 strings; in memory a fixed-width bytes
# column as wide as the stream's longest value, which staging records in the manifest
STRING = "string"


def is_string(type_name):
    return str(type_name).strip().lower() == STRING


def numpy_field(name, type_name, where, width=None):
    """Map a job-file type name ("int32", "char20", "string", "uint8[5000,3]") to a numpy field
    spec. A `string` column is `width` bytes wide: the staged input's longest value (1 until
    the input is staged)."""
    t = str(type_name).strip().lower()
    if t in _SIMPLE:
        return (name, _SIMPLE[t])
    if t == STRING:
        return (name, f"S{max(1, int(width or 1))}")
    m = _CHAR.fullmatch(t)
    if m and int(m.group(1)) > 0:
        if int(m.group(1)) > MAX_CHAR:
            raise ConfigError(f"{where}: {type_name!r}: text columns hold at most {MAX_CHAR:,} bytes (char{MAX_CHAR})")
        return (name, f"S{int(m.group(1))}")
    m = _ARRAY.fullmatch(t)
    if m:
        shape = tuple(int(x) for x in m.group(2).split(","))
        if all(s > 0 for s in shape):
            size = np.dtype(_SIMPLE[m.group(1)]).itemsize
            for s in shape:
                size *= s
                if size > MAX_ROW:
                    raise ConfigError(f"{where}: {type_name!r}: an array column holds at most {MAX_ROW >> 20} MB")
            return (name, _SIMPLE[m.group(1)], shape)
    raise ConfigError(
        f"{where}: unknown column type {type_name!r}; use one of {', '.join(_SIMPLE)}, "
        f"string (UTF-8 text), charN (at most N bytes), or an array such as uint8[5000,3]"
    )


def stream_dtype(schema, where, widths=None, null=False):
    """Structured dtype of a stream: seq, ts, then the payload columns in schema order.
    `widths`: {string column: bytes}, as staging recorded them; `null`: with the NULL flag."""
    fields = [(SEQ, np.int64), (TS, np.int64)]
    for name, t in schema.items():
        if name in (SEQ, TS):
            raise ConfigError(f"{where}.{name}: '{name}' is reserved (every stream has seq and ts)")
        fields.append(numpy_field(name, t, f"{where}.{name}", (widths or {}).get(name)))
    if null:
        fields.append((NULL, np.uint8))
    dt = np.dtype(fields)
    if dt.itemsize > MAX_ROW:
        raise ConfigError(f"{where}: a row of {dt.itemsize:,} bytes; rows hold at most {MAX_ROW >> 20} MB")
    return dt


def rows_dtype(dtype):
    """A staged row's dtype: the stream's columns and, for every payload column, its NULLS flag."""
    cols = [d for d in dtype.descr if d[0] != NULL]
    return np.dtype(cols + [(NULLS, np.uint8, (len(cols) - 2,))])


def payload(dtype):
    """The payload columns of a dtype: its columns but seq, ts and the internal ones ("_...")."""
    return [n for n in dtype.names if n not in (SEQ, TS) and not n.startswith("_")]


def stored(dtype):
    """The columns of a dtype that a Parquet file holds: seq, ts and the payload."""
    return [n for n in dtype.names if not n.startswith("_")]


def arrow_type(np_dtype):
    """Arrow type used to store one numpy field in Parquet."""
    base, shape = np_dtype.base, np_dtype.shape
    if shape:
        return pa.binary(int(np.prod(shape)) * base.itemsize)
    if base.kind == "S":
        return pa.binary(base.itemsize)
    return pa.from_numpy_dtype(base)


def type_name(np_dtype):
    """Inverse of numpy_field, for manifests and error messages."""
    base, shape = np_dtype.base, np_dtype.shape
    if base.kind == "S":
        return f"char{base.itemsize}"
    name = "bool" if base.kind == "b" else base.name
    if shape:
        return f"{name}[{','.join(map(str, shape))}]"
    return name


def to_arrow(arr, text=(), dtype=None):
    """Structured array -> Arrow table (fixed-size binary for char and array columns; UTF-8
    strings for the columns named in `text`, the `string` ones); a payload column is null where
    the row's NULLS flag for it is set (rows_dtype). `arr` may also be {name: column} of the
    structured `dtype`'s fields (a `text` column of any width)."""
    import pyarrow.compute as pc
    dtype = arr.dtype if dtype is None else dtype
    nulls = arr[NULLS].astype(bool) if NULLS in dtype.names else None
    pay = payload(dtype)
    cols, names = [], []
    for name in stored(dtype):
        a = _column(arr[name], dtype.fields[name][0], name in text, len(arr[name]))
        if nulls is not None and name in pay and nulls[:, pay.index(name)].any():
            a = pc.if_else(pa.array(nulls[:, pay.index(name)]), pa.scalar(None, a.type), a)
        cols.append(a)
        names.append(name)
    return pa.Table.from_arrays(cols, names=names)


def _column(col, fd, text, n):
    """One numpy column as Arrow (to_arrow)."""
    if text:
        return _text(col, col.dtype.itemsize, n)
    if fd.shape or fd.base.kind == "S":
        width = fd.itemsize
        raw = np.ascontiguousarray(col).view(np.uint8).reshape(n, width) if n else np.zeros((0, width), np.uint8)
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(raw.tobytes())])
    return pa.array(col)


def _text(col, width, n):
    """A numpy bytes column as Arrow UTF-8 text (its values without their trailing NULs), built
    from its buffer, not through Python objects (3x on a million short ids); Arrow's cast checks
    the UTF-8."""
    ln = np.char.str_len(col).astype(np.int64) if n else np.zeros(0, np.int64)
    if int(ln.sum()) >= 2 ** 31:
        return pa.array(col.tolist(), pa.binary()).cast(pa.string())
    raw = np.ascontiguousarray(col).view(np.uint8).reshape(n, width) if n else np.zeros((0, width), np.uint8)
    offs = np.zeros(n + 1, np.int32)
    np.cumsum(ln, out=offs[1:])
    data = raw[np.arange(width) < ln[:, None]]
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(data)]).cast(pa.string())


def from_arrow(table, dtype, where, stream=None, missing_zero=False):
    """Arrow table -> structured array of `dtype`; `where` names the file in errors. A null is
    kept (as 0, with its NULLS or NULL flag where `dtype` has one) in a payload column of
    `stream` that the ranks do not read (`stream.reads`) or that it declares `nullable`; any
    other null is refused (seq, ts, and every column when no stream is given). `missing_zero`:
    a payload column of `stream` that the ranks do not read and `table` lacks is 0."""
    out = np.empty(table.num_rows, dtype=dtype)
    pay = payload(dtype)
    if NULLS in dtype.names:
        out[NULLS] = 0
    if NULL in dtype.names:
        out[NULL] = 0
    for name in stored(dtype):
        fd = dtype.fields[name][0]
        if missing_zero and name in pay and name not in stream.reads and name not in table.column_names:
            out[name] = 0
            continue
        col = table.column(name)
        if col.null_count:
            col = _nulls_kept(col, name, out, pay, stream, where)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        if (fd.shape or fd.base.kind == "S") and not pa.types.is_fixed_size_binary(col.type):
            out[name] = _variable_bytes(col, fd, name, where)
        elif fd.shape or fd.base.kind == "S":
            chunks = [c.buffers()[1] for c in col.chunks]
            offs = [c.offset for c in col.chunks]
            parts = [np.frombuffer(b, np.uint8)[o * fd.itemsize:(o + len(c)) * fd.itemsize]
                     for b, o, c in zip(chunks, offs, col.chunks)]
            raw = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
            out[name] = raw.view(fd.base).reshape((table.num_rows,) + fd.shape) if fd.shape else raw.view(fd)
        else:
            vals = col.to_numpy(zero_copy_only=False)
            if fd.base.kind in "iu" and len(vals) and vals.dtype != fd.base:
                info = np.iinfo(fd.base)
                if vals.min() < info.min or vals.max() > info.max:
                    from .errors import InputError
                    bad = int(np.nonzero((vals < info.min) | (vals > info.max))[0][0])
                    raise InputError(f"{where}: column '{name}' value {vals[bad]} at row {bad} does not fit {type_name(fd)}")
            out[name] = vals
    return out


def _variable_bytes(col, fd, name, where):
    """Variable-length binary/string column -> fixed-size bytes, refusing values that are too long
    (for array columns, values must have exactly the array's size)."""
    import pyarrow.compute as pc
    from .errors import InputError
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    lens = pc.binary_length(col).to_numpy(zero_copy_only=False)
    width = fd.itemsize
    bad = np.nonzero(lens != width)[0] if fd.shape else np.nonzero(lens > width)[0]
    if len(bad):
        k = int(bad[0])
        need = f"exactly {width}" if fd.shape else f"at most {width}"
        raise InputError(f"{where}: column '{name}' row {k} has {lens[k]} bytes, {type_name(fd)} needs {need}")
    vals = padded_bytes(col, width)
    if fd.shape:
        return vals.view(fd.base).reshape((len(vals),) + fd.shape)
    return vals


def padded_bytes(col, width, refuse=b""):
    """A binary or text column without nulls, no value longer than `width`, as numpy bytes of
    `width`, zero-padded: gathered from Arrow's buffers, not through Python objects (40x on
    25,000 short ids); None where a value holds one of the bytes in `refuse`."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    col = col.cast(pa.large_binary())
    n = len(col)
    if not n:
        return np.zeros(0, f"S{width}")
    _, offs, data = col.buffers()
    off = np.frombuffer(offs, np.int64, n + 1, col.offset * 8)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(1, np.uint8)
    text = raw[off[0]:off[-1]]
    if any((text == b).any() for b in refuse):
        return None
    out = np.zeros((n, width), np.uint8)
    # the values lie end to end in Arrow's buffer, in the order of the row-major bytes they fill
    out[np.arange(width) < np.diff(off)[:, None]] = text
    return out.view(f"S{width}").reshape(n)


def _nulls_kept(col, name, out, pay, stream, where):
    """`col` with its nulls as zero values, their flags set in `out` (from_arrow); or InputError."""
    import pyarrow.compute as pc
    reads = set(stream.reads) if stream is not None else None
    if name not in pay or reads is None or (name in reads and name not in stream.nullable):
        raise_null(where, name, col, compared=reads is not None and name in pay)
    mask = pc.is_null(col).to_numpy(zero_copy_only=False)
    if NULLS in out.dtype.names:
        out[NULLS][:, pay.index(name)] = mask
    if NULL in out.dtype.names and name in reads:
        out[NULL] |= mask
    t = col.type
    if pa.types.is_dictionary(t):
        col, t = col.cast(t.value_type), t.value_type
    zero = (b"\0" * t.byte_width if pa.types.is_fixed_size_binary(t) else
            "" if pa.types.is_string(t) or pa.types.is_large_string(t) else
            b"" if pa.types.is_binary(t) or pa.types.is_large_binary(t) else False if pa.types.is_boolean(t) else 0)
    return col.fill_null(pa.scalar(zero, t))


def raise_null(where, name, col, compared=False):
    from .errors import InputError
    import pyarrow.compute as pc
    first = pc.index(pc.is_null(col), True).as_py()
    why = ("the join compares it, and it may hold nulls only when its stream's `nullable` names it" if compared
           else "nulls are not allowed")
    raise InputError(f"{where}: column '{name}' has {col.null_count} null value(s) (first at row {first}); {why}")
