"""What every reader shares: the raw table a reader returns, the formats and their file name
endings, the size limits, and opening a file (gzip looked through, binary refused)."""

from __future__ import annotations

import io
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...errors import LoadError, Problem
from .. import _guards

if TYPE_CHECKING:  # pandas is imported where a frame is made: the columnar lane never needs it
    import pandas as pd
    import pyarrow as pa

FORMATS = ("jsonl", "json", "parquet", "csv")
#: The format of each file name ending (checked in this order: ``.ndjson`` before ``.json``).
EXTENSIONS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
}
#: Every file name ending a log may have (the text formats also gzip-compressed): what a folder
#: walk reads (`crbc_viz.io.importers.expand_sources`) and the app accepts as an upload.
SUFFIXES = (*EXTENSIONS, *(f"{ext}.gz" for ext, fmt in EXTENSIONS.items() if fmt != "parquet"))
GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"
#: Default longest accepted JSONL line, in MiB (``$CRBC_VIZ_MAX_LINE_MB`` overrides it).
MAX_LINE_MB = 32
ENV_MAX_LINE = "CRBC_VIZ_MAX_LINE_MB"
#: Default largest ``.json`` document, in MiB (``$CRBC_VIZ_MAX_JSON_MB`` overrides it).
MAX_JSON_MB = 512
ENV_MAX_JSON = "CRBC_VIZ_MAX_JSON_MB"
GZIP_ERRORS = (OSError, EOFError, zlib.error)
#: Bytes scanned or read at once where a whole input is (no array as large as the input).
PIECE = 1 << 24


class _Records:
    """`RawTable.records`: the rows as a pandas frame, for a caller that wants to look at them as
    one (no importer does: they read `RawTable.columns`). Readers and importers hand an Arrow
    table (`crbc_viz.io.arrow_rows.arrow_table`, which validation reads as it is:
    `RawTable.table`); the frame is made from it on the first read of ``records``, once. A data
    descriptor, so the dataclass's ``__init__`` stores through it and the field keeps no default."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_{name}_rows"

    def __get__(self, obj, objtype=None):
        if obj is None:
            raise AttributeError("records")  # dataclasses: no default value
        rows = obj.__dict__[self.slot]
        if not hasattr(rows, "iloc"):  # an Arrow table: the frame is made here, once
            from ..arrow_rows import frame_of

            rows = obj.__dict__[self.slot] = frame_of(rows)
        return rows

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class RawTable:
    """Rows as parsed, before validation. ``line[i]`` locates row ``i`` in the file.

    ``nonfinite`` maps (row, field) to the ``NaN``/``Infinity`` literal logged there (those
    values reach the table as NaN/inf); ``notes`` are non-fatal warnings from parsing;
    ``broken_ids`` holds, per line that did not parse as JSON, the (group_id, traj_id) read from
    its text (None where they cannot be read), so lenient loading can drop those trajectories
    instead of keeping them with a step missing.
    """

    path: str
    records: pd.DataFrame = _Records()  # noqa: RUF009 (a descriptor field, no default: an Arrow table until read)
    line: np.ndarray
    where: str  # "line", "row" or "item"
    from_text: bool  # values came from text (CSV): numbers and booleans may be strings
    problems: list[Problem] = field(default_factory=list)
    nonfinite: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    broken_ids: list = field(default_factory=list)

    @property
    def arrow(self) -> pa.Table | None:
        """The importer's Arrow table while ``records`` has not been read yet, else None."""
        rows = self.__dict__["_records_rows"]
        return None if hasattr(rows, "iloc") else rows

    @property
    def table(self) -> pa.Table:
        """The rows as an Arrow table (what validation reads): the reader's or importer's table,
        or a frame someone read and changed through ``records`` made one (each column as
        `crbc_viz.io.arrow_rows.arrow_table` holds a frame's column)."""
        rows = self.__dict__["_records_rows"]
        if not hasattr(rows, "iloc"):
            return rows
        from ..arrow_rows import arrow_table

        cols = {}
        for c in rows.columns:
            col = rows[c]
            numeric = isinstance(col.dtype, np.dtype) and col.dtype.kind in "iufb"
            cols[str(c)] = col if numeric else col.to_numpy(dtype=object)
        return arrow_table(cols, len(rows))

    @property
    def columns(self):
        """The rows' columns by name (`crbc_viz.io.arrow_rows.Columns`), each a numpy array of the
        values the frame of ``records`` holds in it, made from the Arrow table without a frame:
        what an importer reads a reader's rows by (``raw.columns["score"][i]``)."""
        cols = self.__dict__.get("_columns_made")
        table = self.table
        if cols is None or cols.table is not table:
            from ..arrow_rows import Columns

            cols = self.__dict__["_columns_made"] = Columns(table)
        return cols

    def set_column(self, name: str, value) -> None:
        """Set column ``name`` to one value on every row (replacing it, or added last)."""
        rows = self.__dict__["_records_rows"]
        if hasattr(rows, "iloc"):
            rows[name] = value
            return
        from ..arrow_rows import with_column

        self.records = with_column(rows, name, value)


def max_line_bytes() -> int:
    """The longest JSONL line accepted, in bytes (``$CRBC_VIZ_MAX_LINE_MB`` or `MAX_LINE_MB`)."""
    return _guards.mib_setting(ENV_MAX_LINE, MAX_LINE_MB)


def max_json_bytes() -> int:
    """The largest whole-document ``.json`` accepted (``$CRBC_VIZ_MAX_JSON_MB`` or
    `MAX_JSON_MB`): a JSON document is parsed in memory, JSONL is streamed line by line."""
    return _guards.mib_setting(ENV_MAX_JSON, MAX_JSON_MB)


def detect_format(path: str | os.PathLike) -> str:
    """Format from the file name (``.gz`` is looked through)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for ext, fmt in EXTENSIONS.items():
        if name.endswith(ext):
            return fmt
    raise LoadError(
        [
            Problem(
                str(path),
                None,
                None,
                "unknown file type; expected one of .jsonl, .json, .parquet, .csv (optionally .gz)",
            )
        ]
    )


def open_binary(path: str):
    """The file's bytes, through gzip when it starts with the gzip magic, capped after
    decompression (`_guards.open_input`)."""
    with open(path, "rb") as fh:
        head = fh.read(8192)
    if head[:2] == GZIP_MAGIC:
        return _guards.open_input(path, check=False)
    if path.lower().endswith(".gz"):
        raise LoadError([Problem(path, None, None, "file name ends in .gz but the file is not gzip")])
    if _looks_binary(head):
        at = head.index(b"\x00")
        raise LoadError(
            [Problem(path, None, None, f"binary file (NUL byte at byte {at}); expected UTF-8 text")]
        )
    return _guards.open_input(path, check=False)


def _looks_binary(head: bytes) -> bool:
    """NUL bytes that are not a stray one in otherwise UTF-8 text (that one is reported on
    its line instead)."""
    if b"\x00" not in head:
        return False
    if head.count(b"\x00") >= 4:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # not just a character cut at the end of the sample
    return False


def open_text(path: str) -> io.TextIOBase:
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", errors="strict", newline="")


def gzip_reason(exc: Exception) -> str:
    if isinstance(exc, EOFError):
        return "the gzip stream is truncated (ends before its end-of-stream marker)"
    if isinstance(exc, zlib.error):
        return f"the gzip data is corrupt ({exc})"
    return str(exc) or type(exc).__name__


def charge_frame(path: str, table: pa.Table, where: str) -> None:
    """Refuse (`LoadError` naming ``$CRBC_VIZ_MAX_MEMORY_MB``) an Arrow table whose pandas frame,
    validated, would pass the memory budget: the table itself plus rows x columns cells."""
    budget = _guards.Budget(path, where)
    budget.spend(table.nbytes)
    budget.fields([str(c) for c in table.column_names])
    budget.rows(table.num_rows)


def check_unique_names(names: list, path: str) -> None:
    """Refuse two columns of one name: a field must be one column (pandas would hand a table
    where a column is expected)."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise LoadError(
                [
                    Problem(
                        path,
                        None,
                        str(name)[:200],
                        f"two columns have this name (columns {seen[name] + 1} and {i + 1}); "
                        f"a field must be one column",
                        "row",
                    )
                ]
            )
        seen[name] = i
