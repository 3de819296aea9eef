"""The CSV reader: every cell read as text (validation coerces it), an empty cell missing, rows
numbered from 1 after the header (blank lines skipped, quoted newlines inside a row), a header
that names one field twice refused. Read with Python's ``csv`` module into Arrow text columns."""

from __future__ import annotations

import csv

import numpy as np

from ...errors import LoadError, Problem
from .. import _guards
from ._base import (
    GZIP_ERRORS,
    RawTable,
    check_unique_names,
    gzip_reason,
    max_line_bytes,
    open_binary,
    open_text,
)


def read_csv(path: str, limit: int | None = None) -> RawTable:
    import pyarrow as pa

    budget = _guards.Budget(path, "row")
    try:
        with open_text(path) as fh:
            header, _ = _rows(fh, 0, max_line_bytes())
        check_unique_names(header, path)
        table = _arrow_csv(path, header)
        if table is not None:
            budget.rows(table.num_rows)
            budget.fields(header)
            return RawTable(path, table, np.arange(1, table.num_rows + 1, dtype=np.int64), "row", True)
        with open_text(path) as fh:
            header, rows = _rows(fh, budget.max_rows + 1, max_line_bytes())
        budget.rows(len(rows))
        budget.fields(header)
    except LoadError:
        raise
    except UnicodeDecodeError as exc:
        raise LoadError(
            [Problem(path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
        ) from None
    except GZIP_ERRORS as exc:
        raise LoadError([Problem(path, None, None, f"cannot read file: {gzip_reason(exc)}")]) from None
    except (csv.Error, ValueError) as exc:
        raise LoadError([Problem(path, None, None, f"cannot parse CSV: {str(exc).strip()[:300]}")]) from None
    cells = [[None if v == "" else v for v in col] for col in zip(*rows)] if rows else [[] for _ in header]
    table = pa.Table.from_arrays([pa.array(c, type=pa.string()) for c in cells], names=header)
    return RawTable(path, table, np.arange(1, len(rows) + 1, dtype=np.int64), "row", True)


def _arrow_csv(path: str, header: list[str]):
    """The file read by Arrow's CSV reader, every column text and an empty cell missing, when it
    reads what `_rows` reads (every row as wide as the header; quoted newlines inside a cell,
    blank lines skipped), else None (a short or long row, text that is not UTF-8 ...: `_rows`
    reads the file and names what it finds)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    if not header:
        return None
    try:
        with open_binary(path) as fh:
            table = pcsv.read_csv(
                fh,
                parse_options=pcsv.ParseOptions(newlines_in_values=True),
                convert_options=pcsv.ConvertOptions(
                    column_types={h: pa.string() for h in header},
                    null_values=[""],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=True,
                ),
            )
    except (pa.ArrowException, ValueError, *GZIP_ERRORS):
        return None
    if table.column_names != header or any(t != pa.string() for t in table.schema.types):
        return None
    return table.combine_chunks()


def _rows(fh, max_rows: int, max_cell: int) -> tuple[list[str], list[list[str]]]:
    """(header, data rows) of a CSV text stream, at most ``max_rows`` data rows (0: the header
    alone), each padded with empty cells to the header's width; blank lines skipped.

    Raises:
        ValueError: a row with more cells than the header (naming its line).
        csv.Error: text the ``csv`` module cannot read (an unterminated quote ...).
    """
    csv.field_size_limit(max(csv.field_size_limit(), max_cell))
    reader = csv.reader(fh, strict=True)
    header: list[str] | None = None
    rows: list[list[str]] = []
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise csv.Error(f"the row starting on line {start}: {exc}") from None
        if not row:
            continue
        if header is None:
            header = row
            if max_rows == 0:
                break
            continue
        if len(row) > len(header):
            raise ValueError(f"line {reader.line_num} has {len(row)} fields, the header {len(header)}")
        if len(row) < len(header):
            row = row + [""] * (len(header) - len(row))
        rows.append(row)
        if len(rows) >= max_rows:
            break
    return header or [], rows
