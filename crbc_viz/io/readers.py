"""File readers: each turns one file into a raw table plus the line/row of every row.

Readers only parse; `crbc_viz.io.schema` validates. Every reader reports problems with
the file, the line (or row) and, where it applies, the field.
"""
from __future__ import annotations

import gzip
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from .errors import LoadError, Problem

__all__ = ["RawTable", "read_table", "detect_format", "FORMATS"]

FORMATS = ("jsonl", "json", "parquet", "csv")
_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"


@dataclass
class RawTable:
    """Rows as parsed, before validation. ``line[i]`` locates row ``i`` in the file."""

    path: str
    records: pd.DataFrame
    line: np.ndarray
    where: str  # "line", "row" or "item"
    from_text: bool  # values came from text (CSV): numbers and booleans may be strings
    problems: list[Problem] = field(default_factory=list)


def detect_format(path: str | os.PathLike) -> str:
    """Format from the file name (``.gz`` is looked through)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for ext, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "json"),
                     (".parquet", "parquet"), (".pq", "parquet"), (".csv", "csv")):
        if name.endswith(ext):
            return fmt
    raise LoadError([Problem(str(path), None, None,
                             f"unknown file type; expected one of .jsonl, .json, .parquet, .csv "
                             f"(optionally .gz)")])


def _open_text(path: str) -> io.TextIOBase:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == _GZIP_MAGIC:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="strict", newline="")
    if path.lower().endswith(".gz"):
        raise LoadError([Problem(path, None, None, "file name ends in .gz but the file is not gzip")])
    return open(path, "r", encoding="utf-8", errors="strict", newline="")


def _flatten(obj: dict, line: int, out_rows: list, out_lines: list, path: str,
             problems: list, where: str) -> None:
    """Append one step row, or the steps of one trajectory row (``{"steps": [...]}``)."""
    steps = obj.get("steps")
    if steps is None:
        out_rows.append(obj)
        out_lines.append(line)
        return
    if not isinstance(steps, list):
        problems.append(Problem(path, line, "steps", f"expected a list of step objects, got "
                                f"{type(steps).__name__}", where))
        return
    shared = {k: v for k, v in obj.items() if k != "steps"}
    for j, step in enumerate(steps):
        if not isinstance(step, dict):
            problems.append(Problem(path, line, f"steps[{j}]", "expected a JSON object", where))
            continue
        row = dict(shared)
        row.update(step)
        out_rows.append(row)
        out_lines.append(line)


def _iter_jsonl(path: str) -> Iterator[tuple[int, str]]:
    with _open_text(path) as fh:
        for lineno, text in enumerate(fh, start=1):
            yield lineno, text


def _read_jsonl(path: str) -> RawTable:
    rows: list[dict] = []
    lines: list[int] = []
    problems: list[Problem] = []
    try:
        for lineno, text in _iter_jsonl(path):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nesting too deep"
                problems.append(Problem(path, lineno, None, f"invalid JSON: {msg}"))
                continue
            if not isinstance(obj, dict):
                problems.append(Problem(path, lineno, None,
                                        f"expected a JSON object, got {type(obj).__name__}"))
                continue
            _flatten(obj, lineno, rows, lines, path, problems, "line")
    except UnicodeDecodeError as exc:
        problems.append(Problem(path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})"))
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        problems.append(Problem(path, None, None, f"cannot read file: {exc}"))
    return RawTable(path, pd.DataFrame.from_records(rows) if rows else pd.DataFrame(),
                    np.asarray(lines, dtype=np.int64), "line", False, problems)


def _read_json(path: str) -> RawTable:
    problems: list[Problem] = []
    try:
        with _open_text(path) as fh:
            doc = json.load(fh)
    except (json.JSONDecodeError) as exc:
        raise LoadError([Problem(path, exc.lineno, None, f"invalid JSON: {exc.msg}")]) from None
    except RecursionError:
        raise LoadError([Problem(path, None, None, "invalid JSON: nesting too deep")]) from None
    except UnicodeDecodeError as exc:
        raise LoadError([Problem(path, None, None, f"not UTF-8 text ({exc.reason})")]) from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise LoadError([Problem(path, None, None, f"cannot read file: {exc}")]) from None
    if isinstance(doc, dict) and isinstance(doc.get("steps"), list):
        items = doc["steps"]
        shared = {k: v for k, v in doc.items() if k != "steps"}
    elif isinstance(doc, list):
        items, shared = doc, {}
    else:
        raise LoadError([Problem(path, None, None,
                                 "expected a JSON array of rows, or an object with a 'steps' array")])
    rows: list[dict] = []
    lines: list[int] = []
    for i, obj in enumerate(items):
        if not isinstance(obj, dict):
            problems.append(Problem(path, i, None, f"expected a JSON object, got {type(obj).__name__}",
                                    "item"))
            continue
        if shared:
            obj = {**shared, **obj}
        _flatten(obj, i, rows, lines, path, problems, "item")
    return RawTable(path, pd.DataFrame.from_records(rows) if rows else pd.DataFrame(),
                    np.asarray(lines, dtype=np.int64), "item", False, problems)


def _read_parquet(path: str) -> RawTable:
    import pyarrow.parquet as pq  # local: only needed for Parquet input

    try:
        with open(path, "rb") as fh:
            if fh.read(4) != _PARQUET_MAGIC:
                raise LoadError([Problem(path, None, None, "not a Parquet file (bad magic bytes)")])
        table = pq.read_table(path)
    except LoadError:
        raise
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise LoadError([Problem(path, None, None, f"cannot read Parquet: {exc}")]) from None
    df = table.to_pandas()
    return RawTable(path, df, np.arange(len(df), dtype=np.int64), "row", False)


def _read_csv(path: str) -> RawTable:
    try:
        with _open_text(path) as fh:
            df = pd.read_csv(fh, dtype=str, keep_default_na=False, na_values=[])
    except pd.errors.EmptyDataError:
        df = pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, EOFError, gzip.BadGzipFile) as exc:
        raise LoadError([Problem(path, None, None, f"cannot parse CSV: {exc}")]) from None
    df = df.replace({"": None})
    # 1-based data row numbers (the header is not counted); exact even with quoted newlines.
    return RawTable(path, df, np.arange(1, len(df) + 1, dtype=np.int64), "row", True)


_READERS = {"jsonl": _read_jsonl, "json": _read_json, "parquet": _read_parquet, "csv": _read_csv}


def read_table(path: str | os.PathLike, fmt: str | None = None) -> RawTable:
    """Parse ``path`` into a `RawTable` (no validation)."""
    path = str(path)
    if not os.path.exists(path):
        raise LoadError([Problem(path, None, None, "no such file")])
    if os.path.isdir(path):
        raise LoadError([Problem(path, None, None, "is a directory, expected a file")])
    fmt = fmt or detect_format(path)
    if fmt not in _READERS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    return _READERS[fmt](path)


