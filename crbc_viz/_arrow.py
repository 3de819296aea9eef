"""numpy <-> Arrow without pandas.

pyarrow imports pandas (when installed) the first time it converts a Python or numpy object:
``pa.array(ndarray)``, ``pa.scalar``, ``Array.to_numpy`` and ``take`` with a numpy index all
ask its pandas shim whether the object is a pandas one. That import is about half of a short
``crbc-viz score`` run, so the columnar lane (`crbc_viz.io.columnar`) and the Arrow output
(`crbc_viz.result.CreditResult.to_arrow`) move data through the buffers instead, with these.
``tests/io/test_columnar.py`` checks that scoring a clean log leaves pandas unimported.

Compute functions go through `call` and `cast` rather than ``pyarrow.compute`` (or the array
methods ``take``/``cast``/``dictionary_encode`` that import it): importing that module builds a
wrapper and a docstring for every kernel, ~60 ms of a short run; the kernels themselves live in
``pyarrow._compute``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["array", "texts", "numbers", "missing", "plain_type", "take", "call", "cast", "NUMERIC_TYPES"]

_TYPES = {
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.uint64): pa.uint64(),
    np.dtype(np.float64): pa.float64(),
}


_NUMPY = {str(t): d for d, t in _TYPES.items()} | {
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "float": np.dtype(np.float32),
}

#: Arrow types `numbers` converts (by name).
NUMERIC_TYPES = frozenset(_NUMPY) | {"bool"}


def array(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """The Arrow array of a 1-d numpy int64 / int32 / uint64 / float64 / bool array (no nulls,
    or a null wherever ``valid``, a bool array of the same length, is False)."""
    values = np.ascontiguousarray(values).reshape(-1)
    n = len(values)
    mask = (
        None if valid is None else pa.py_buffer(np.packbits(np.asarray(valid, dtype=bool), bitorder="little"))
    )
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [mask, pa.py_buffer(bits)])
    typ = _TYPES.get(values.dtype)
    if typ is None:
        raise TypeError(f"no Arrow conversion here for dtype {values.dtype}")
    return pa.Array.from_buffers(typ, n, [mask, pa.py_buffer(values)])


def texts(values: Sequence[str]) -> pa.Array:
    """The Arrow string array of Python strings (no nulls)."""
    encoded = [v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    data = pa.py_buffer(b"".join(encoded))
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.string(), len(encoded), [None, pa.py_buffer(offsets.astype(np.int32)), data]
        )
    return pa.Array.from_buffers(pa.large_string(), len(encoded), [None, pa.py_buffer(offsets), data])


def numbers(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numeric or boolean Arrow column as numpy (int64 / float64 / ... / bool). Null slots
    hold whatever their buffer holds: check ``col.null_count`` first where it matters."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n, off = len(col), col.offset
    buf = col.buffers()[1]
    if pa.types.is_boolean(col.type):
        if buf is None:
            return np.zeros(n, dtype=bool)
        bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
        return bits[off : off + n].astype(bool)
    dtype = _NUMPY.get(str(col.type))
    if dtype is None:
        raise TypeError(f"no numpy conversion here for Arrow type {col.type}")
    if buf is None:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(buf, dtype=dtype)[off : off + n]


def missing(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``[n]`` bool: which values of an Arrow column are null."""
    return numbers(call("is_null", col))


def plain_type(typ: pa.DataType, *, text_dictionary: bool = False) -> bool:
    """Whether an Arrow type is numbers, flags, text, nulls, or lists or structs of those
    (``text_dictionary``: dictionary-encoded text too): what converts to a frame's values as it
    is."""
    if text_dictionary and pa.types.is_dictionary(typ):
        return pa.types.is_string(typ.value_type) or pa.types.is_large_string(typ.value_type)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return plain_type(typ.value_type, text_dictionary=text_dictionary)
    if pa.types.is_struct(typ):
        return all(plain_type(f.type, text_dictionary=text_dictionary) for f in typ)
    return (
        pa.types.is_integer(typ)
        or pa.types.is_floating(typ)
        or pa.types.is_boolean(typ)
        or pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_null(typ)
    )


def take(data, indices):
    """``data.take(indices)`` (an Arrow array, chunked array or table) for numpy or Arrow
    indices."""
    if isinstance(indices, np.ndarray | list):
        indices = array(np.asarray(indices, dtype=np.int64))
    return call("take", data, indices)


def call(name: str, *args, options=None):
    """The Arrow compute function ``name`` on ``args`` (``pyarrow.compute.<name>``)."""
    from pyarrow._compute import call_function

    return call_function(name, list(args), options)


def cast(data, typ: pa.DataType):
    """``data`` (array, chunked array or scalar) cast to ``typ`` (a checked cast)."""
    if data.type == typ:
        return data
    from pyarrow._compute import CastOptions

    return call("cast", data, options=CastOptions.safe(typ))
