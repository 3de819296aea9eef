"""The store's rows as Arrow, both ways. Written: a batch's steps as the hot and text tables of
a part (`tables_of`; `arrow_column`: a column's Arrow type, values no plain type holds as JSON
text in ``<name>__json``). Read: what DuckDB reads from the parts (``to_arrow_table``, `read`),
the JSON-encoded columns decoded (`decode_json`), the text table joined (`join_text`), and the
pandas frame made from them only when someone asks for it (`StoreFrame`, the conversion a
`crbc_viz.data.ArrowRows` of store rows uses).

The frame is the one DuckDB's own ``.df()`` gives for the same rows, so nothing downstream
sees a difference: an integer or flag column with a missing value is a pandas nullable column
(``Int64``, ``boolean``, missing ``<NA>``), a text column with no value where DuckDB read it
holds None (`read`), the ids (``run_id``, ``group_id``, ``traj_id``) of a batch's rows are
Python strings in object columns, and a decoded JSON column holds the Python values as pandas
holds a column set from them. `tests/store/test_store_rows.py` checks the frames against
DuckDB's own.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .._arrow import array, call, cast, missing, numbers, take
from ..errors import LoadError, Problem
from ..io.arrow_rows import ObjectColumn, frame_of, hold
from .layout import _CANONICAL_TYPES, _DROP_AT_INGEST, _JSON_SUFFIX, TEXT_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "StoreFrame",
    "arrow_column",
    "page_frame",
    "split_steps",
    "tables_of",
    "decode_json",
    "flags",
    "join_text",
    "objects",
    "part_codes",
    "python_values",
    "read",
    "row_numbers",
]

#: The id columns a store's frame holds as Python strings in object columns.
_OBJECT_IDS = ("run_id", "group_id", "traj_id")


def objects(values: np.ndarray) -> pa.Array:
    """An `ObjectColumn` of ``values`` (an object array), row ``i`` holding ``values[i]``."""
    return pa.ExtensionArray.from_storage(ObjectColumn(values), array(np.arange(len(values), dtype=np.int64)))


def python_values(col: pa.ChunkedArray) -> np.ndarray:
    """A column's values as an object array (None where missing; an `ObjectColumn` as held)."""
    if isinstance(col.type, ObjectColumn):
        from ..io.arrow_rows import object_values

        return object_values(col)
    out = np.empty(len(col), dtype=object)
    out[:] = col.to_pylist()
    return out


def read(table: pa.Table) -> pa.Table:
    """A table as DuckDB read it, each text column without a value (or without rows) given
    Arrow's null type: DuckDB's frame holds such a column as None in an object column, and so
    does the frame of a null column, whatever rows are later taken of it."""
    for i, (name, typ) in enumerate(zip(table.column_names, table.schema.types)):
        col = table.column(i)
        if (pa.types.is_string(typ) or pa.types.is_large_string(typ)) and col.null_count == len(col):
            table = table.set_column(i, name, pa.nulls(len(col)))
    return table


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def decode_json(table: pa.Table) -> pa.Table:
    """Each ``<name>__json`` column (values Arrow holds as JSON text) decoded into ``<name>``:
    in place of a plain ``<name>`` column (parts written with either: the plain value where the
    row has one), else added last. The table returned holds the decoded values (`hold`)."""
    for col in [c for c in table.column_names if c.endswith(_JSON_SUFFIX)]:
        base = col[: -len(_JSON_SUFFIX)]
        vals = np.empty(table.num_rows, dtype=object)  # filled one by one: equal-length lists stay lists
        vals[:] = [json.loads(v) if isinstance(v, str) else None for v in table.column(col).to_pylist()]
        names = table.column_names
        if base in names:
            cur = python_values(table.column(base))
            have = np.array([not _missing(v) for v in cur.tolist()], dtype=bool)
            vals = np.where(have, cur, vals)
        out = table.drop_columns([col])
        names, new = out.column_names, objects(vals)
        out = out.set_column(names.index(base), base, new) if base in names else out.append_column(base, new)
        table = hold(out)  # held before the table holding the values decoded so far goes
    return table


def part_codes(table: pa.Table, rank: dict[str, int]) -> np.ndarray:
    """``[n]`` each row's part's place in the store (``rank``, by the part file's stem: the
    rows' ``_part``)."""
    from pyarrow._compute import DictionaryEncodeOptions

    enc = call(
        "dictionary_encode", table.column("_part").combine_chunks(), options=DictionaryEncodeOptions("encode")
    )
    ranks = np.array([rank.get(s, -1) for s in enc.dictionary.to_pylist()], dtype=np.int64)
    return ranks[numbers(enc.indices).astype(np.int64)] if len(ranks) else np.zeros(0, np.int64)


def join_text(table: pa.Table, text: pa.Table) -> pa.Table:
    """``table`` with the columns of ``text`` (rows keyed by ``_part`` and ``_row``) added
    last, each step row taking the text row of its key (a null where it has none, NaN in a
    column of decoded values). The table returned holds the decoded values (`hold`)."""
    if text.num_rows == 0:
        return table
    stems = sorted(set(table.column("_part").to_pylist()) | set(text.column("_part").to_pylist()))
    rank = {s: i for i, s in enumerate(stems)}
    width = int(max(row_numbers(table).max(initial=0), row_numbers(text).max(initial=0))) + 1
    key = part_codes(table, rank) * width + row_numbers(table)
    tkey = part_codes(text, rank) * width + row_numbers(text)
    order = np.argsort(tkey, kind="stable")
    at = np.searchsorted(tkey[order], key)
    hit = at < len(order)
    hit[hit] = tkey[order][at[hit]] == key[hit]
    rows = np.where(hit, order[np.minimum(at, len(order) - 1)], 0)
    idx = array(rows.astype(np.int64, copy=False), valid=hit)
    for name in text.column_names:
        if name in ("_part", "_row"):
            continue
        col = text.column(name)
        if isinstance(col.type, ObjectColumn):  # decoded values: a step without text holds NaN
            vals = python_values(col)[rows]
            vals[~hit] = math.nan
            table = table.append_column(name, objects(vals))
        else:
            table = table.append_column(name, take(col, idx))
    return hold(table)


def row_numbers(table: pa.Table) -> np.ndarray:
    """``[n]`` each row's place in its part (``_row``), int64."""
    return numbers(cast(table.column("_row"), pa.int64())).astype(np.int64, copy=False)


def flags(col: pa.ChunkedArray) -> np.ndarray:
    """A flag column as bool, False where missing."""
    return numbers(cast(col, pa.bool_())) & ~missing(col)


# -- writing ------------------------------------------------------------------------------
def arrow_column(name: str, values: pd.Series, path: str = ""):
    """(column name, pyarrow array) for a steps column; non-scalar values go to ``<name>__json``,
    and so do an extra field's values that its type cannot hold (an integer beyond int64: kept
    as text, exactly). A canonical column that cannot be held is a `LoadError` naming ``path``."""
    import pandas as pd

    kind = _CANONICAL_TYPES.get(name)
    extra = kind is None
    if kind is None:
        if values.dtype != object and not isinstance(values.dtype, pd.StringDtype):
            if isinstance(values.dtype, pd.CategoricalDtype):
                values = values.astype(object)
            else:
                return name, pa.array(values.to_numpy(), from_pandas=True)
        inferred = pd.api.types.infer_dtype(values, skipna=True)
        kind = {
            "string": "string",
            "boolean": "bool",
            "integer": "int64",
            "floating": "float64",
            "mixed-integer-float": "float64",
            "empty": None,
        }.get(inferred, "json")
        if kind is None:
            return name, None
    if kind != "json":
        typ = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}[kind]
        try:
            return name, pa.array(values.to_numpy(dtype=object), type=typ, from_pandas=True)
        except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            if not extra:
                why = f"a value cannot be stored as {kind} ({str(exc)[:200]})"
                raise LoadError([Problem(path, None, name, why)]) from None
    arr = [
        None
        if (v is None or (isinstance(v, float) and v != v))
        else json.dumps(v.tolist() if isinstance(v, np.ndarray) else v, ensure_ascii=False, default=str)
        for v in values.to_numpy(dtype=object)
    ]
    return name + _JSON_SUFFIX, pa.array(arr, type=pa.string())


def tables_of(batch, stem_of_row: np.ndarray, row_in_part: np.ndarray, source: str, path: str = ""):
    """(hot table, text table or None) for the batch's steps in their final row order (``path``:
    the log's, named by an error)."""
    steps = batch.steps
    hot, txt = {}, {}
    hot["_part"] = pa.array(stem_of_row, type=pa.string())
    hot["_row"] = pa.array(row_in_part, type=pa.int32())
    for c in steps.columns:
        if c in _DROP_AT_INGEST or c.startswith("_"):
            continue
        name, arr = arrow_column(c, steps[c], path)
        if arr is None:
            continue
        (txt if c in TEXT_COLUMNS else hot)[name] = arr
    hot["_anchor_hash"] = pa.array(batch.step_anchor_hash, type=pa.uint64())
    hot["_traj_return"] = pa.array(np.repeat(batch.traj_return, batch.traj_len), type=pa.float64())
    hot["_truncated"] = pa.array(np.repeat(batch.traj_truncated, batch.traj_len), type=pa.bool_())
    hot["_source"] = pa.array(np.full(len(steps), source[:16], dtype=object), type=pa.string())
    text_table = None
    if txt:
        txt = {"_row": hot["_row"], **txt}
        text_table = pa.table(txt)
    return pa.table(hot), text_table


# -- the frame ----------------------------------------------------------------------------
class StoreFrame:
    """The frame of store rows as DuckDB's ``.df()`` converts them (module docstring); it keeps
    the table its decoded columns were made with (``keep``), so their values live as long as
    the rows. ``object_ids``: the ids as Python strings in object columns (a batch's rows),
    else as DuckDB gives them (text columns)."""

    __slots__ = ("keep", "object_ids")

    def __init__(self, keep: pa.Table, *, object_ids: bool):
        self.keep, self.object_ids = keep, object_ids

    def __call__(self, table: pa.Table) -> pd.DataFrame:
        df = frame_of(table)
        for name, typ in zip(table.column_names, table.schema.types):
            col = table.column(name)
            if isinstance(typ, ObjectColumn):
                continue
            if col.null_count and (pa.types.is_integer(typ) or pa.types.is_boolean(typ)):
                df[name] = col.to_pandas(types_mapper=_nullable)
        for name in _OBJECT_IDS if self.object_ids else ():
            if name in df.columns:
                df[name] = df[name].astype(object)
        return df


def _nullable(typ: pa.DataType):
    import pandas as pd

    if pa.types.is_boolean(typ):
        return pd.BooleanDtype()
    return {
        "int8": pd.Int8Dtype(),
        "int16": pd.Int16Dtype(),
        "int32": pd.Int32Dtype(),
        "int64": pd.Int64Dtype(),
        "uint8": pd.UInt8Dtype(),
        "uint16": pd.UInt16Dtype(),
        "uint32": pd.UInt32Dtype(),
        "uint64": pd.UInt64Dtype(),
    }.get(str(typ))


def page_frame(table: pa.Table) -> pd.DataFrame:
    """The frame of rows a page shows (`StoreFrame`, the ids as DuckDB gives them)."""
    return StoreFrame(table, object_ids=False)(table)


def split_steps(source: str, table: pa.Table, r: int) -> Problem:
    """The problem of the trajectory starting at row ``r`` whose steps are not 0..n-1."""
    v = {c: table.column(c)[int(r)].as_py() for c in ("run_id", "train_step", "group_id", "traj_id")}
    return Problem(
        source,
        None,
        "step_idx",
        f"trajectory '{v['traj_id']}' of group '{v['run_id']}/{v['train_step']}/{v['group_id']}' "
        f"has duplicate or missing steps in the store (ingested from two sources?)",
        "row",
    )
