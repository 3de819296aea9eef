"""The CSV reader: every cell read as text (validation coerces it), rows numbered from 1 after
the header, a header that names one field twice refused."""

from __future__ import annotations

import re

import numpy as np

from ...errors import LoadError, Problem
from .. import _guards
from ._base import GZIP_ERRORS, RawTable, check_unique_names, gzip_reason, max_line_bytes, open_text


def read_csv(path: str, limit: int | None = None) -> RawTable:
    import pandas as pd

    budget = _guards.Budget(path, "row")
    try:
        with open_text(path) as fh:
            df = pd.read_csv(fh, dtype=str, keep_default_na=False, na_values=[], nrows=budget.max_rows + 1)
        budget.rows(len(df))
        budget.fields([str(c) for c in df.columns])
        _check_csv_header(path, df)
    except LoadError:
        raise
    except pd.errors.EmptyDataError:
        df = pd.DataFrame()
    except UnicodeDecodeError as exc:
        raise LoadError(
            [Problem(path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
        ) from None
    except GZIP_ERRORS as exc:
        raise LoadError([Problem(path, None, None, f"cannot read file: {gzip_reason(exc)}")]) from None
    except (pd.errors.ParserError, ValueError, OverflowError) as exc:
        raise LoadError([Problem(path, None, None, f"cannot parse CSV: {str(exc).strip()[:300]}")]) from None
    df = df.replace({"": None})
    # 1-based data row numbers (the header is not counted); exact even with quoted newlines.
    return RawTable(path, df, np.arange(1, len(df) + 1, dtype=np.int64), "row", True)


def _check_csv_header(path: str, df) -> None:
    """Refuse a header naming one field twice (pandas would read the second as ``name.1``,
    and the field's values would silently come from the first)."""
    import csv

    mangled = [str(c) for c in df.columns if re.search(r"\.\d+$", str(c))]
    if not mangled:
        return
    head = _guards.first_line(path, max_line_bytes())
    try:
        names = next(csv.reader([head.decode("utf-8-sig")])) if head else []
    except (csv.Error, UnicodeDecodeError, StopIteration):
        return
    check_unique_names(names, path)
