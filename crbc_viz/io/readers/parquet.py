"""The Parquet reader: magic bytes, the footer's sizes (the input caps), unique column names,
valid UTF-8 string cells and bounded list cells are checked before pandas sees the table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...errors import LoadError, Problem
from .. import _guards
from ._base import RawTable, charge_frame, check_unique_names

if TYPE_CHECKING:
    import pyarrow as pa

_PARQUET_MAGIC = b"PAR1"


def read_parquet(path: str, limit: int | None = None) -> RawTable:
    return raw_from_parquet(path, read_parquet_arrow(path))


def read_parquet_arrow(path: str) -> pa.Table:
    """A Parquet file as an Arrow table, after its magic bytes, its footer's sizes (the input
    caps) and its string cells (valid UTF-8) are checked; every failure is a `LoadError`."""
    import pyarrow.parquet as pq  # local: only needed for Parquet input

    try:
        with open(path, "rb") as fh:
            if fh.read(4) != _PARQUET_MAGIC:
                raise LoadError([Problem(path, None, None, "not a Parquet file (bad magic bytes)")])
        pf = pq.ParquetFile(path)
        check_unique_names(pf.schema_arrow.names, path)
        _check_parquet_size(pf.metadata, path)
        table = pf.read()  # not pq.read_table: its dataset layer imports pandas
        _check_parquet_utf8(table, path)
        _check_parquet_lists(table, path)
    except LoadError:
        raise
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise LoadError([Problem(path, None, None, f"cannot read Parquet: {str(exc)[:300]}")]) from None
    return table


def raw_from_parquet(path: str, table: pa.Table) -> RawTable:
    """The `RawTable` of a Parquet file's `read_parquet_arrow` table."""
    from ..arrow_rows import arrow_table

    charge_frame(path, table, "row")
    columns = {}
    for name, typ in zip(table.column_names, table.schema.types):
        col = table.column(name)
        if not _plain_type(typ):
            # Timestamps, decimals, extension types ...: the values a frame holds for them (the
            # schema reads and names those), made now, where a failure is this file's error.
            try:
                col = col.to_pandas().to_numpy(dtype=object)
            except Exception as exc:  # noqa: BLE001 (an extension type pandas cannot hold, ...)
                raise LoadError(
                    [Problem(path, None, None, f"cannot read Parquet: {str(exc)[:300]}")]
                ) from None
        columns[name] = col
    return RawTable(
        path, arrow_table(columns, table.num_rows), np.arange(table.num_rows, dtype=np.int64), "row", False
    )


def _plain_type(typ) -> bool:
    """Whether validation reads an Arrow type as it is: numbers, flags, text (dictionary-encoded
    too), nulls, and lists or structs of those (kept as Arrow; a batch's frame holds them as
    pyarrow converts them)."""
    from ..._arrow import plain_type

    return plain_type(typ, text_dictionary=True)


def _check_parquet_utf8(table, path: str) -> None:
    """Refuse string cells that are not valid UTF-8 (a writer that skipped validation), naming
    the column and the first bad row, before pandas trips over them later."""
    import pyarrow as pa

    for name, col in zip(table.column_names, table.columns):
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            continue
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            row = next(
                (
                    i
                    for i, v in enumerate(
                        col.cast(
                            pa.binary() if pa.types.is_string(col.type) else pa.large_binary()
                        ).to_pylist()
                    )
                    if v is not None and not _utf8_ok(v)
                ),
                None,
            )
            raise LoadError(
                [Problem(path, row, str(name)[:200], "not valid UTF-8 text in a string column", "row")]
            ) from None


def _check_parquet_lists(table, path: str) -> None:
    """Refuse a list cell holding more than ``$CRBC_VIZ_MAX_ITEMS`` values (all levels of a
    nested list counted), naming its row and column, before pandas makes objects of them."""
    limit = _guards.max_items()
    for name, col in zip(table.column_names, table.columns):
        if not _is_list_type(col.type):
            continue
        per_row = np.zeros(len(col), dtype=np.int64)
        at = 0
        for chunk in col.chunks:
            rows, arr = np.arange(at, at + len(chunk)), chunk
            at += len(chunk)
            while _is_list_type(arr.type):
                arr, counts = _list_level(arr)
                per_row += np.bincount(rows, weights=counts, minlength=len(per_row)).astype(np.int64)
                rows = np.repeat(rows, counts)
        if per_row.size and per_row.max() > limit:
            row = int(np.argmax(per_row > limit))
            raise LoadError(
                [
                    Problem(
                        path,
                        row,
                        str(name)[:200],
                        f"a list of {int(per_row[row]):,} values, more than the limit of {limit:,} in one "
                        f"value; set ${_guards.ENV_MAX_ITEMS} to raise the limit",
                        "row",
                    )
                ]
            )


def _list_level(arr):
    """(the values of list array ``arr``, as many as its cells hold, and each cell's count)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return arr.values.slice(arr.offset * size, len(arr) * size), np.full(len(arr), size, dtype=np.int64)
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    return arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])), np.diff(offsets)


def _is_list_type(typ) -> bool:
    import pyarrow as pa

    return pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)


def _utf8_ok(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _check_parquet_size(meta, path: str) -> None:
    """Refuse, from the footer alone, a Parquet file whose rows, columns or uncompressed size
    pass the limits (a few KB of constant row groups can decode to gigabytes)."""
    budget = _guards.Budget(path, "row")
    budget.rows(meta.num_rows)
    budget.fields(meta.schema.names)
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    budget.spend(size)  # the Arrow table: its uncompressed size
    cap = _guards.mib_setting(_guards.ENV_MAX_INPUT, _guards.MAX_INPUT_MB)
    if size > cap:
        raise _guards.limit_error(
            path,
            f"the data is {size / 2**20:,.0f} MiB uncompressed, more "
            f"than the input limit of {cap / 2**20:g} MiB",
            _guards.ENV_MAX_INPUT,
        )
