"""The readers' and importers' rows as one Arrow table, and the pandas frame made from it.

An importer (`crbc_viz.io.importers`) builds its canonical rows as columns: numpy arrays, lists
of Python values, scalars (one value for every row), or a column of the reader's table.
`arrow_table` makes them one `pyarrow.Table`. A column Arrow holds as it is (numbers, flags,
text, each with missing values) becomes an Arrow column; a column of other values (message
lists, JSON objects, a mix of numbers and text: what a trainer's log may hold in a field the
importer passes on) rides along as an `ObjectColumn`, an Arrow column of row positions whose
type carries the values.

Validation (`crbc_viz.io.schema`) reads the table as it is (`object_values` gives an
`ObjectColumn`'s values). `frame_of` turns it into a frame: the same columns, values and dtypes
that building a frame from the importer's columns gives, so nothing downstream sees a
difference; `crbc_viz.io.readers.RawTable` calls it the first time its ``records`` are read,
and the schema path for a batch whose rows hold Python values. An importer reads a reader's
rows by column instead (`Columns`, `RawTable.columns`): each column's values as that frame
would hold them (`column_values`), without making it.
"""

from __future__ import annotations

import math
import uuid
import weakref

import numpy as np
import pyarrow as pa

from .._arrow import missing, plain_type

__all__ = [
    "Columns",
    "ObjectColumn",
    "arrow_table",
    "column_values",
    "frame_of",
    "held",
    "hold",
    "object_values",
    "plain_array",
    "with_column",
]

_INT64 = (-(2**63), 2**63 - 1)


#: The values of each live `ObjectColumn`, by its token: Arrow keeps only a weak reference to a
#: Python extension type and rebuilds a collected one from its serialized token, so the values
#: live here, as long as a table held for them lives (`hold`: `arrow_table`'s table, and each
#: table `with_column` makes): ``_HOLDERS`` counts those tables per token.
_VALUES: dict[bytes, object] = {}
_HOLDERS: dict[bytes, int] = {}


def hold(table: pa.Table) -> pa.Table:
    """Keep the values of ``table``'s `ObjectColumn` columns as long as ``table`` lives (call it on
    a table derived from another, by ``select``, ``take`` or ``set_column``, that may outlive
    it, while that other table still lives)."""
    for typ in table.schema.types:
        if isinstance(typ, ObjectColumn):
            _HOLDERS[typ.token] = _HOLDERS.get(typ.token, 0) + 1
            weakref.finalize(table, _release, typ.token)
    return table


def _release(token: bytes) -> None:
    left = _HOLDERS.get(token, 0) - 1
    if left > 0:
        _HOLDERS[token] = left
        return
    _HOLDERS.pop(token, None)
    _VALUES.pop(token, None)


class ObjectColumn(pa.ExtensionType):
    """A column of Python values Arrow has no type for, held as given (``values``: a list, an
    object array or a column of the reader's frame); its storage is each row's position in
    ``values``, so taking or filtering rows of the table keeps it right. In-process only: the
    type serializes to a token naming its values in this process (`_VALUES`)."""

    def __init__(self, values, token: bytes | None = None):
        self.token = token if token is not None else uuid.uuid4().bytes
        _VALUES.setdefault(self.token, values)
        self.values = values
        super().__init__(pa.int64(), "crbc_viz.object_column")

    def __arrow_ext_serialize__(self) -> bytes:
        return self.token

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        if serialized not in _VALUES:
            raise TypeError(
                "an ObjectColumn's values live as long as the table made with them, in one process"
            )
        return cls(_VALUES[serialized], serialized)


def _kind(v) -> str | None:
    """The Arrow-held kind of one Python value: ``none``, ``bool``, ``int``, ``float``, ``str``,
    or None (a value Arrow does not hold as a plain value)."""
    if v is None:
        return "none"
    if isinstance(v, bool | np.bool_):
        return "bool"
    if isinstance(v, int | np.integer):
        return "int" if _INT64[0] <= int(v) <= _INT64[1] else None
    if isinstance(v, float | np.floating):
        return "nan" if math.isnan(v) else "float"
    if isinstance(v, str):
        return "str"
    return None


#: The Arrow types a list of Python values is held as, when Arrow reads it as one of them: a
#: missing value is a null, read back as pandas reads it (NaN in a column of numbers or text;
#: whole numbers with one missing are floats). A list Arrow reads as another type (lists,
#: objects, bytes), or cannot read as one type (numbers mixed with flags or text, flags with
#: NaN), and flags with one missing (pandas: an object column), stay Python values.
_PLAIN = (pa.int64(), pa.float64(), pa.bool_(), pa.string())


def _from_list(values: list) -> pa.Array | None:
    """The Arrow array of a list of Python values when it reads back as the same pandas column
    (all numbers; all flags, some missing; all text, some missing), else None."""
    try:
        got = pa.array(values)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return None
    if isinstance(got, pa.ChunkedArray) or got.type not in _PLAIN:  # text past 2 GiB, lists ...
        return None
    if not _only(got.type, {type(v) for v in values}):  # Arrow reads a flag as a number, pandas not
        return None
    if got.null_count and got.type == pa.int64():  # pandas: whole numbers, some missing, are floats
        try:
            return pa.array(values, type=pa.float64())
        except pa.ArrowInvalid:  # a whole number past 2**53: kept exact, as a Python value
            return None
    if got.null_count and got.type == pa.bool_():  # pandas: an object column of flags and None
        return None
    return got


def plain_array(values: list) -> pa.Array | None:
    """The plain Arrow array `arrow_table` makes of a list of Python values, or None where the
    list rides as an `ObjectColumn`."""
    return _from_list(values)


def _only(typ: pa.DataType, types: set) -> bool:
    """Whether values of the Python ``types`` are all of the kind Arrow read them as (``typ``):
    numbers but no flags, flags but no numbers, text; None anywhere."""
    types = types - {type(None)}
    flags = all(issubclass(t, bool | np.bool_) for t in types)
    if typ == pa.bool_():
        return flags
    if typ == pa.string():
        return all(issubclass(t, str) for t in types)
    whole = all(issubclass(t, int | np.integer) and not issubclass(t, bool) for t in types)
    return (
        whole
        if typ == pa.int64()
        else not any(issubclass(t, bool | np.bool_) for t in types)
        and all(issubclass(t, int | float | np.integer | np.floating) for t in types)
    )


def _texts(values) -> bool:
    """Whether every value is text or missing (None, NaN), one at least text: a column pandas
    reads as text."""
    types = set(map(type, values.tolist() if isinstance(values, np.ndarray) else values))
    if types == {str}:  # the usual case, told without a call per value
        return True
    kinds = {_kind(v) for v in values}
    return "str" in kinds and kinds <= {"str", "none", "nan"}


class _One:
    """One value for every row of an `ObjectColumn` (pandas broadcasts it)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _objects(values, n: int) -> pa.Array:
    return pa.ExtensionArray.from_storage(ObjectColumn(values), pa.array(np.arange(n, dtype=np.int64)))


def _column(values, n: int) -> pa.Array:
    """One column of `arrow_table` as an Arrow array of ``n`` rows."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "iufb" and values.ndim == 1:
            return pa.array(values)
        if values.dtype.kind == "O" and values.ndim == 1 and _texts(values):  # pandas reads text
            listed = values.tolist()
            if all(type(v) is str for v in listed):
                return pa.array(listed, type=pa.string())
            return pa.array([v if isinstance(v, str) else None for v in listed], type=pa.string())
        return _objects(values, n)
    if isinstance(values, list):
        got = _from_list(values)
        return _objects(values, n) if got is None else got
    if hasattr(values, "dtype") and hasattr(values, "array"):  # a column of the reader's frame
        if getattr(values.dtype, "kind", "O") in "iufb" and isinstance(values.dtype, np.dtype):
            return pa.array(values.to_numpy())
        return _objects(values, n)
    got = _from_list([values] * n) if n else None  # one value for every row
    return _objects(_One(values), n) if got is None else got


def arrow_table(columns: dict, n: int | None = None) -> pa.Table:
    """The table of ``columns`` (name -> numpy array, list, one value for every row, Arrow
    array, or a column of the reader's frame), ``n`` rows (default: the first column's length
    that is not one value). Columns Arrow does not hold as plain values ride as `ObjectColumn`.
    """
    if n is None:
        n = next((len(v) for v in columns.values() if _sized(v)), 0)
    arrays = [_column(v, n) for v in columns.values()]
    try:
        for name, a in zip(columns, arrays):
            if len(a) != n:
                raise ValueError(f"column {name!r} has {len(a)} rows, not {n}")
        table = pa.Table.from_arrays(arrays, names=[str(c) for c in columns])
    except BaseException:
        for a in arrays:  # values made here, held by no table: dropped
            if isinstance(a.type, ObjectColumn) and a.type.token not in _HOLDERS:
                _VALUES.pop(a.type.token, None)
        raise
    return hold(table)  # the values go with the table


def with_column(table: pa.Table, name: str, values) -> pa.Table:
    """``table`` with column ``name`` set to ``values`` (as `arrow_table` takes a column: an
    array, a list, one value for every row), replaced in place or added last; the new table
    holds its `ObjectColumn` values (`hold`), so it may outlive ``table``."""
    made = arrow_table({name: values}, table.num_rows)  # holds the new values until `out` does
    col = made.column(0)
    names = table.column_names
    out = table.set_column(names.index(name), name, col) if name in names else table.append_column(name, col)
    hold(out)
    del made
    return out


def _sized(v) -> bool:
    return isinstance(v, list | np.ndarray | pa.Array | pa.ChunkedArray) or (
        hasattr(v, "dtype") and hasattr(v, "array")
    )


def _positions(col: pa.ChunkedArray) -> np.ndarray:
    """The rows of an `ObjectColumn`'s values that its table's rows hold, in the table's order."""
    return np.concatenate([np.asarray(c.storage) for c in col.chunks]) if col.num_chunks else np.zeros(0, int)


def _object_series(col: pa.ChunkedArray):
    """The pandas column of an `ObjectColumn`: its values made a frame's column as pandas makes
    one from what the importer gave (all of them: a list, an array, one value for every row),
    then the table's rows of it in the table's order."""
    import pandas as pd

    values = col.type.values
    pos = _positions(col)
    if isinstance(values, _One):
        return pd.DataFrame({"v": values.value}, index=pd.RangeIndex(len(pos)))["v"]
    whole = pd.DataFrame({"v": values.array if hasattr(values, "iloc") else values})["v"]
    if len(pos) == len(whole) and bool((pos == np.arange(len(pos))).all()):
        return whole
    return whole.iloc[pos].reset_index(drop=True)


def object_values(col: pa.ChunkedArray) -> np.ndarray:
    """The values of an `ObjectColumn` as an object array, row by row in the table's order, as
    the frame made of it holds them (`held`)."""
    values = col.type.values
    pos = _positions(col)
    if isinstance(values, _One):
        out = np.empty(len(pos), dtype=object)
        out.fill(values.value)
        return out
    return np.asarray(held(values)).astype(object, copy=False)[pos]


def frame_of(table: pa.Table):
    """The pandas frame of an `arrow_table`: plain columns as ``Table.to_pandas`` gives them (a
    missing number NaN, missing flags None in an object column), `ObjectColumn` ones as pandas
    builds them from the importer's values."""
    import pandas as pd

    plain = [c for c, t in zip(table.column_names, table.schema.types) if not isinstance(t, ObjectColumn)]
    base = table.select(plain).to_pandas() if plain else pd.DataFrame(index=pd.RangeIndex(table.num_rows))
    out = {}
    for name, typ in zip(table.column_names, table.schema.types):
        if isinstance(typ, ObjectColumn):
            out[name] = _object_series(table.column(name))
        else:
            out[name] = base[name]
    return pd.DataFrame(out, index=pd.RangeIndex(table.num_rows))


def held(values, n: int | None = None) -> np.ndarray:
    """The values of one column of `arrow_table` (a list, a numpy array, a reader's column, one
    value for every row) as the frame made of it holds them (what its ``to_numpy()`` gives):
    whole numbers int64 (float64 with NaN where some are missing), flags bool (an object array
    with None where some are missing), text an object array with NaN where missing, other values
    as given."""
    if hasattr(values, "dtype") and hasattr(values, "array") and not isinstance(values, np.ndarray):
        return values.to_numpy()
    if isinstance(values, np.ndarray):
        if values.dtype.kind != "O" or not _texts(values):
            return values  # pandas keeps an object array as it is, unless it is text
        return np.array([v if isinstance(v, str) else math.nan for v in values.tolist()], dtype=object)
    if not isinstance(values, list):
        values = [values] * (n or 0)
    got = _from_list(list(values))
    if got is None:
        out = np.empty(len(values), dtype=object)
        out[:] = [v if isinstance(v, str) else math.nan for v in values] if _texts(values) else list(values)
        return out
    if pa.types.is_string(got.type):
        return np.array([math.nan if v is None else v for v in got.to_pylist()], dtype=object)
    return got.to_numpy(zero_copy_only=False)  # numbers (a missing one NaN) or flags


def column_values(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The values of one column of an Arrow table as the frame made of it (`frame_of`) holds them
    (its column's ``to_numpy()``), without making the frame: whole numbers int64 (float64 with NaN
    where some are missing), flags bool (an object array with None where some are missing), text
    an object array with NaN where missing, lists and objects as Python values with None where
    missing, an `ObjectColumn` as the importer's values are held (`held`). Other Arrow types
    (times, decimals, dictionaries, bytes) through pandas, as the frame converts them."""
    typ = col.type
    if isinstance(typ, ObjectColumn):
        col = col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col], type=typ)
        if isinstance(typ.values, _One):
            return _object_series(col).to_numpy()
        return np.asarray(held(typ.values))[_positions(col)]
    if not plain_type(typ):  # times, decimals, dictionaries, bytes: as pandas converts them
        return frame_of(pa.table({"v": col}))["v"].to_numpy()
    out = col.to_numpy(zero_copy_only=False)
    if (pa.types.is_string(typ) or pa.types.is_large_string(typ)) and col.null_count:
        out[missing(col)] = math.nan
    return out


class Columns:
    """The columns of a reader's Arrow table by name, each as `column_values` gives it (what the
    frame of the table holds, without making the frame), converted on first read, once:
    ``cols["reward"][i]``, ``"step" in cols``, ``list(cols)`` (the names, in order),
    ``cols.rows`` (how many rows), ``cols.row(i)`` (one row as a dict, by name),
    ``cols.tuples()`` (the rows as tuples of Python values)."""

    def __init__(self, table: pa.Table):
        self.table = table
        self.rows = table.num_rows
        self._names = table.column_names  # read once: each read of a schema rebuilds its types
        self._index = {c: i for i, c in enumerate(self._names)}
        self._made: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._made:
            if name not in self._index:
                raise KeyError(name)
            self._made[name] = column_values(self.table.column(self._index[name]))
        return self._made[name]

    def __contains__(self, name) -> bool:
        return name in self._index

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def items(self):
        return [(c, self[c]) for c in self._names]

    def row(self, i: int) -> dict:
        """Row ``i``: each column's value there, by name."""
        return {c: self[c][i] for c in self._names}

    def tuples(self):
        """The rows, each a tuple of its values in column order as Python values (numbers
        ``int`` / ``float``, not numpy's: what a frame's ``itertuples`` gives)."""
        return zip(*(self[c].tolist() for c in self._names))
