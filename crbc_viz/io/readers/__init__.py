"""File readers: each turns one file into a raw table plus the line/row of every row, one
module per format:

    jsonl           JSON Lines, streamed line by line (`jsonl.read_jsonl`)
    jsonl_arrow     JSON Lines parsed at once by pyarrow, where it provably reads the same
    json_document   a JSON document (``.json``), parsed whole
    parquet         Parquet, checked from its footer before it is read
    csv_table       CSV, every cell read as text

`read_table` picks the reader from the file name (`detect_format`; `SUFFIXES` are the endings
a log may have). Readers only parse; `crbc_viz.io.schema` validates. Every reader reports
problems with the file, the line (or row) and, where it applies, the field.

Hostile input is handled here, at the boundary:

- JSON Lines are streamed line by line in binary, each line bounded by ``max_line_bytes``
  (default `MAX_LINE_MB` MiB, or ``$CRBC_VIZ_MAX_LINE_MB``); a longer line is skipped in
  bounded memory and reported, never read whole.
- No JSON text reaches a parser (pyarrow's, ``json``) before its nesting depth and its number
  of values are counted on its bytes (`_guards.json_problem`: ``$CRBC_VIZ_MAX_DEPTH``,
  ``$CRBC_VIZ_MAX_ITEMS``), and what its parse will allocate is charged to the file's memory
  budget first (`_guards.Budget`, ``$CRBC_VIZ_MAX_MEMORY_MB``): Python objects estimated from
  the bytes, Arrow columns as rows x fields, the row table as rows x distinct fields.
- Each line is decoded as UTF-8 on its own, so a bad byte names its line; a raw NUL byte at
  the start of a file means "binary, not text"; a UTF-8 byte-order mark is accepted.
- Gzip that is not gzip, truncated or corrupt gzip, JSON nested too deeply, numbers too long
  to convert and every other parse failure become a `Problem`, never a traceback.
- ``NaN`` / ``Infinity`` literals are remembered per (row, field) so validation can say
  "non-finite" instead of "missing".
- Lone UTF-16 surrogates from ``\\ud800``-style escapes (which cannot be encoded as UTF-8, so
  would break hashing, rendering and Parquet) are replaced by U+FFFD, with a warning.
"""

from __future__ import annotations

import os

from ...errors import LoadError, Problem
from .. import _guards
from ._base import (
    FORMATS,
    MAX_JSON_MB,
    MAX_LINE_MB,
    SUFFIXES,
    RawTable,
    detect_format,
    max_json_bytes,
    max_line_bytes,
)
from .csv_table import read_csv
from .json_document import read_json
from .jsonl import read_jsonl
from .jsonl_arrow import raw_from_arrow, read_jsonl_arrow
from .parquet import read_parquet

__all__ = [
    "RawTable",
    "read_table",
    "detect_format",
    "FORMATS",
    "SUFFIXES",
    "MAX_LINE_MB",
    "MAX_JSON_MB",
    "max_line_bytes",
    "max_json_bytes",
]


def _read_jsonl_fast(path: str, limit: int) -> RawTable | None:
    """The whole file parsed at once by pyarrow's JSON reader (`read_jsonl_arrow`), as a
    `RawTable`; None when the streaming reader must run instead."""
    table = read_jsonl_arrow(path, limit)
    return None if table is None else raw_from_arrow(path, table)


def _read_jsonl_either(path: str, limit: int | None = None) -> RawTable:
    """JSON Lines: the vectorised reader where it provably reads the same, else the streaming
    one (which alone writes the per-line messages)."""
    limit = max_line_bytes() if limit is None else int(limit)
    fast = _read_jsonl_fast(path, limit)
    return fast if fast is not None else read_jsonl(path, limit)


_READERS = {"jsonl": _read_jsonl_either, "json": read_json, "parquet": read_parquet, "csv": read_csv}


def read_table(
    path: str | os.PathLike, fmt: str | None = None, *, max_line_bytes: int | None = None
) -> RawTable:
    """Parse ``path`` into a `RawTable` (no validation). Never modifies the file.

    Args:
        path: the file.
        fmt: ``jsonl``, ``json``, ``parquet`` or ``csv``; default from the name.
        max_line_bytes: longest JSONL line accepted (default `max_line_bytes`()).

    Raises:
        LoadError: the file cannot be read at all (missing, not gzip, binary, ...).
    """
    path = str(path)
    _guards.check_input_file(path)  # regular files only: no FIFO, device, folder or link loop
    fmt = fmt or detect_format(path)
    if fmt not in _READERS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    try:
        return _READERS[fmt](path, max_line_bytes)
    except PermissionError as exc:
        raise LoadError([Problem(path, None, None, f"cannot open: {exc.strerror}")]) from None
    except IsADirectoryError:
        raise LoadError([Problem(path, None, None, "is a directory, expected a file")]) from None
