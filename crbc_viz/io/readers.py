"""File readers: each turns one file into a raw table plus the line/row of every row.

Readers only parse; `crbc_viz.io.schema` validates. Every reader reports problems with
the file, the line (or row) and, where it applies, the field.

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

import io
import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import LoadError, Problem
from . import _guards

if TYPE_CHECKING:  # pandas is imported where a frame is made: the columnar lane never needs it
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "RawTable",
    "read_table",
    "detect_format",
    "FORMATS",
    "MAX_LINE_MB",
    "MAX_JSON_MB",
    "max_line_bytes",
    "max_json_bytes",
    "read_jsonl_arrow",
    "raw_from_arrow",
    "read_parquet_arrow",
    "raw_from_parquet",
    "read_charged",
    "check_document",
]

FORMATS = ("jsonl", "json", "parquet", "csv")
_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_BOM = b"\xef\xbb\xbf"
#: Default longest accepted JSONL line, in MiB (``$CRBC_VIZ_MAX_LINE_MB`` overrides it).
MAX_LINE_MB = 32
_ENV_MAX_LINE = "CRBC_VIZ_MAX_LINE_MB"
#: Default largest ``.json`` document, in MiB (``$CRBC_VIZ_MAX_JSON_MB`` overrides it).
MAX_JSON_MB = 512
_ENV_MAX_JSON = "CRBC_VIZ_MAX_JSON_MB"
_SKIP_CHUNK = 1 << 20
#: Default deepest JSON nesting accepted (``$CRBC_VIZ_MAX_DEPTH`` overrides it).
MAX_JSON_DEPTH = _guards.MAX_DEPTH
_GZIP_ERRORS = (OSError, EOFError, zlib.error)
# A \uD800-\uDFFF escape in the raw text (paired escapes decode to one code point; lone ones
# survive json.loads as unencodable surrogates).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NonFinite(float):
    """A ``NaN`` / ``Infinity`` / ``-Infinity`` literal, tagged so validation can name it."""

    token: str

    def __new__(cls, token: str):
        obj = super().__new__(cls, float(token.replace("Infinity", "inf")))
        obj.token = token
        return obj


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
    records: pd.DataFrame
    line: np.ndarray
    where: str  # "line", "row" or "item"
    from_text: bool  # values came from text (CSV): numbers and booleans may be strings
    problems: list[Problem] = field(default_factory=list)
    nonfinite: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    broken_ids: list = field(default_factory=list)


_mib_setting = _guards.mib_setting  # finite and > 0, else a LoadError naming the variable


def max_line_bytes() -> int:
    """The longest JSONL line accepted, in bytes (``$CRBC_VIZ_MAX_LINE_MB`` or `MAX_LINE_MB`)."""
    return _mib_setting(_ENV_MAX_LINE, MAX_LINE_MB)


def max_json_bytes() -> int:
    """The largest whole-document ``.json`` accepted (``$CRBC_VIZ_MAX_JSON_MB`` or
    `MAX_JSON_MB`): a JSON document is parsed in memory, JSONL is streamed line by line."""
    return _mib_setting(_ENV_MAX_JSON, MAX_JSON_MB)


def detect_format(path: str | os.PathLike) -> str:
    """Format from the file name (``.gz`` is looked through)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for ext, fmt in (
        (".jsonl", "jsonl"),
        (".ndjson", "jsonl"),
        (".json", "json"),
        (".parquet", "parquet"),
        (".pq", "parquet"),
        (".csv", "csv"),
    ):
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


def _open_binary(path: str):
    """The file's bytes, through gzip when it starts with the gzip magic, capped after
    decompression (`_guards.open_input`)."""
    with open(path, "rb") as fh:
        head = fh.read(8192)
    if head[:2] == _GZIP_MAGIC:
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


def _open_text(path: str) -> io.TextIOBase:
    return io.TextIOWrapper(_open_binary(path), encoding="utf-8-sig", errors="strict", newline="")


def _json_loads(text: str):
    return json.loads(text, parse_constant=_NonFinite)


def _parse_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} (column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "invalid JSON: nesting too deep"
    return f"invalid JSON: {str(exc)[:200]}"  # e.g. an integer with too many digits


def _fix_surrogates(obj):
    """(``obj`` with lone surrogates in every string, keys too, replaced by U+FFFD, how many
    were replaced); iterative, so nesting depth cannot overflow the stack."""
    count = 0

    def fix(v):
        nonlocal count
        if isinstance(v, str):
            v, n = _SURROGATE.subn("\ufffd", v)
            count += n
        return v

    root = [fix(obj)]
    stack = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        v = parent[key]
        if isinstance(v, dict):
            new = {fix(k): fix(x) for k, x in v.items()}
            parent[key] = new
            stack.extend((new, k) for k, x in new.items() if isinstance(x, (dict, list)))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                v[i] = fix(x)
                if isinstance(v[i], (dict, list)):
                    stack.append((v, i))
    return root[0], count


def _note_nonfinite(rows: list, start: int, nonfinite: dict) -> None:
    """Record the (row, field) of every top-level NaN/Infinity literal in ``rows[start:]``."""
    for i in range(start, len(rows)):
        for k, v in rows[i].items():
            if isinstance(v, _NonFinite):
                nonfinite[(i, k)] = v.token


def _spend(budget: _guards.Budget, rows: list, start: int, line: int | None) -> None:
    """Charge the rows appended since ``start`` (and their field names) to ``budget``: a row's
    slots in the row lists and, for the steps of a trajectory row, its dict (its values were
    charged with the text)."""
    budget.rows(len(rows), line)
    for r in rows[start:]:
        budget.fields(r, line)
    if len(rows) > start:
        budget.spend(sum(64 + 16 * len(r) for r in rows[start:]), line)


_ID_RE = {k: re.compile(rf'"{k}"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)') for k in ("group_id", "traj_id")}


def _guess_ids(text: str):
    """(group_id, traj_id) as written in an unparseable line, or None (best effort)."""
    found = []
    for k in ("group_id", "traj_id"):
        m = _ID_RE[k].search(text)
        if m is None:
            return None
        try:
            v = json.loads(m.group(1))
        except ValueError:
            return None
        found.append(str(v))
    return tuple(found)


def _flatten(
    obj: dict, line: int, out_rows: list, out_lines: list, path: str, problems: list, where: str
) -> None:
    """Append one step row, or the steps of one trajectory row (``{"steps": [...]}``)."""
    steps = obj.get("steps")
    if steps is None:
        out_rows.append(obj)
        out_lines.append(line)
        return
    if not isinstance(steps, list):
        problems.append(
            Problem(
                path, line, "steps", f"expected a list of step objects, got {type(steps).__name__}", where
            )
        )
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


def _iter_lines(fh, limit: int, path: str, problems: list) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) per line; ``None`` for a line over ``limit`` bytes, which is
    consumed in `_SKIP_CHUNK` pieces and reported, never held whole."""
    lineno = 0
    while True:
        raw = fh.readline(limit + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            size = len(raw)
            while True:
                more = fh.readline(_SKIP_CHUNK)
                size += len(more)
                if not more or more.endswith(b"\n"):
                    break
            problems.append(
                Problem(
                    path,
                    lineno,
                    None,
                    f"line is longer than the limit of {limit / 2**20:g} MiB "
                    f"(at least {size / 2**20:.1f} MiB); set ${_ENV_MAX_LINE} to "
                    f"raise the limit",
                )
            )
            yield lineno, None
            continue
        if lineno == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        yield lineno, raw


def _read_jsonl(path: str, limit: int | None = None) -> RawTable:
    limit = max_line_bytes() if limit is None else int(limit)
    fast = _read_jsonl_fast(path, limit)
    if fast is not None:
        return fast
    rows: list[dict] = []
    lines: list[int] = []
    problems: list[Problem] = []
    nonfinite: dict = {}
    broken: list = []
    surrogate_lines = 0
    lineno = blank = 0
    budget = _guards.Budget(path)
    depth, items = _guards.max_depth(), _guards.max_items()
    try:
        with _open_binary(path) as fh:
            for lineno, raw in _iter_lines(fh, limit, path, problems):
                budget.problems(problems, lineno)
                if raw is None or not raw.strip():
                    blank += raw is not None
                    if blank > budget.max_rows:  # a gzip of blank lines: bounded time, too
                        raise _guards.limit_error(
                            path,
                            f"more than {budget.max_rows:,} blank lines (the row limit)",
                            _guards.ENV_MAX_ROWS,
                            lineno,
                        )
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    problems.append(
                        Problem(path, lineno, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                    )
                    continue
                why = _guards.json_problem(raw, depth, items)
                if why is not None:  # never parsed: json.loads of it could take gigabytes
                    problems.append(Problem(path, lineno, None, why))
                    broken.append(_guess_ids(text))
                    continue
                budget.spend(_guards.json_cost(raw), lineno)  # before json.loads allocates it
                try:
                    obj = _json_loads(text)
                except (ValueError, RecursionError) as exc:
                    problems.append(Problem(path, lineno, None, _parse_error(exc)))
                    broken.append(_guess_ids(text))
                    continue
                if not isinstance(obj, dict):
                    problems.append(
                        Problem(path, lineno, None, f"expected a JSON object, got {_json_type(obj)}")
                    )
                    continue
                if _SURROGATE_ESCAPE.search(text):
                    obj, n = _fix_surrogates(obj)
                    surrogate_lines += n > 0
                start = len(rows)
                _flatten(obj, lineno, rows, lines, path, problems, "line")
                _spend(budget, rows, start, lineno)
                if "NaN" in text or "Infinity" in text:
                    _note_nonfinite(rows, start, nonfinite)
        budget.problems(problems, lineno)
    except LoadError:
        raise
    except _GZIP_ERRORS as exc:
        after = f" after line {lineno}" if lineno else ""
        problems.append(Problem(path, None, None, f"cannot read{after}: {_gzip_reason(exc)}"))
    notes = []
    if surrogate_lines:
        notes.append(
            f"{path}: {surrogate_lines} line(s) contain lone UTF-16 surrogates "
            f"(\\ud800-\\udfff escapes); they were replaced by U+FFFD"
        )
    return RawTable(
        path,
        _frame(rows),
        np.asarray(lines, dtype=np.int64),
        "line",
        False,
        problems,
        nonfinite,
        notes,
        broken,
    )


#: Id fields that pandas would turn into float64 when some rows lack them (an integer
#: ``state_hash`` above 2**53 would then lose digits): kept as the objects that were parsed.
_ID_FIELDS = ("group_id", "traj_id", "run_id", "anchor_key", "state_hash")


def _frame(rows: list[dict]) -> pd.DataFrame:
    """The parsed rows as a table; id columns with missing values keep their exact values."""
    import pandas as pd

    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_records(rows)
    for c in _ID_FIELDS:
        if c in df.columns and df[c].dtype.kind == "f":
            df[c] = pd.Series([r.get(c) for r in rows], index=df.index, dtype=object)
    return df


#: Largest JSONL input (after decompression) parsed in one vectorised pass; larger files
#: are streamed line by line (`_read_jsonl`), so memory stays bounded.
FAST_JSONL_MAX_BYTES = 256 << 20
# Anything the vectorised parser would read differently from `json.loads` + `_flatten`, or
# that needs a per-line message: then the streaming path reads the file (it alone reports).
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
_FAST_TYPES = ("string", "int64", "double", "bool", "null")
_FAST_BLOCK = 1 << 22
_STRING_LIST = "list<item: string>"


def _read_jsonl_fast(path: str, limit: int) -> RawTable | None:
    """The whole file parsed at once by pyarrow's JSON reader (`read_jsonl_arrow`), as a
    `RawTable`; None when the streaming reader must run instead."""
    table = read_jsonl_arrow(path, limit)
    return None if table is None else raw_from_arrow(path, table)


def _charge_frame(path: str, table: pa.Table, where: str) -> None:
    """Refuse (`LoadError` naming ``$CRBC_VIZ_MAX_MEMORY_MB``) an Arrow table whose pandas frame,
    validated, would pass the memory budget: the table itself plus rows x columns cells."""
    budget = _guards.Budget(path, where)
    budget.spend(table.nbytes)
    budget.fields([str(c) for c in table.column_names])
    budget.rows(table.num_rows)


def raw_from_arrow(path: str, table: pa.Table) -> RawTable:
    """The `RawTable` of a JSONL file's `read_jsonl_arrow` table (what `read_table` returns
    for that file)."""
    import pandas as pd

    _charge_frame(path, table, "line")
    df = table.to_pandas()
    for c in _ID_FIELDS:  # as `_frame`: integer ids with gaps keep their exact values
        if c in df.columns and df[c].dtype.kind == "f" and str(table.schema.field(c).type) == "int64":
            df[c] = pd.Series(table.column(c).to_pylist(), index=df.index, dtype=object)
    return RawTable(path, df, np.arange(1, len(df) + 1, dtype=np.int64), "line", False)


def read_jsonl_arrow(path: str, limit: int, *, lists: bool = False) -> pa.Table | None:
    """The whole JSONL file parsed at once by pyarrow's JSON reader (row ``i`` is line
    ``i + 1``), or None when the streaming reader must run instead. With ``lists``, fields
    that are lists of strings on every row (``available_actions``) are taken too (as Arrow
    lists; the columnar lane turns them back into Python lists).

    Taken only for files where both readers provably agree: at most
    `FAST_JSONL_MAX_BYTES` after decompression, every line under ``limit`` and non-blank,
    one JSON object per line (each line starts with ``{`` and ends with ``}``, and rows ==
    lines, so row ``i`` is line ``i + 1``), valid UTF-8, only flat
    string / integer / float / boolean / null fields (no ``steps`` lists, arrays or objects),
    no ``NaN``/``Infinity`` literals, surrogate escapes, NUL bytes or integers past 2**53
    read as floats, no BOM,
    and within the row / field / cell caps of `_guards.Budget`. Any parse error (a bad line,
    a field that changes type) also falls back, so every message comes from one place.

    Before pyarrow sees the bytes: no line may nest deeper than ``$CRBC_VIZ_MAX_DEPTH`` or
    hold more than `FAST_MAX_ITEMS` values (pyarrow dies, SIGSEGV, on nesting some 20,000 deep
    and on a list of ten million numbers), and the table it builds is bounded: its fields are
    those of the first lines (`_sample_schema`; a field first seen later, or a value of
    another type, makes pyarrow stop, and the streaming reader reads the file), so it holds at
    most rows x those fields, which must fit the cell and memory budgets. A file of
    many rows each with its own field names would otherwise make pyarrow build every field for
    every row (gigabytes from a 1.5 MB file).
    """
    budget = _guards.Budget(path)
    try:
        size = os.path.getsize(path)
        if size > FAST_JSONL_MAX_BYTES or 2 * size > budget.max_bytes:
            return None
        with _open_binary(path) as fh:  # gzip, NUL sniff and the decompressed-size cap
            data = fh.read(FAST_JSONL_MAX_BYTES + 1)
    except LoadError:
        raise
    except (OSError, EOFError, zlib.error):
        return None
    # Every array made from here on is per line or per 16 MiB piece, never per byte of data.
    if (
        not data
        or len(data) > FAST_JSONL_MAX_BYTES
        or 2 * len(data) > budget.max_bytes
        or data.startswith(_BOM)
        or data.find(b"\x00") >= 0
        or (data.find(b"\\") >= 0 and _SURROGATE_BYTES.search(data))  # memchr first: fast
    ):
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    # At most one position per row: 200 MB of blank lines would need 1.6 GB of them.
    ends = _positions(buf, lambda b: b == 10, budget.max_rows)
    if ends is None:
        return None
    if not data.endswith(b"\n"):
        ends = np.r_[ends, len(data)]
    starts = np.r_[0, ends[:-1] + 1]
    lengths = ends - starts
    if lengths.max() > limit or (lengths == 0).any():
        return None
    last = ends - 1 - (buf[ends - 1] == 13)  # a line's last byte before "\r\n" / "\n"
    if not ((buf[starts] == 123).all() and (buf[last] == 125).all()):  # "{" ... "}" per line
        return None
    if buf.max() >= 128 and not _utf8_ok_in_pieces(data):  # pyarrow does not check UTF-8 itself
        return None
    if not _shapes_fit(data, buf, starts, ends, lengths):
        return None
    try:
        import pyarrow as pa
        import pyarrow.json as pj

        sample, n_sample = _sample_schema(data, buf, ends)
        if sample is None:
            return None
        if n_sample == len(ends):
            table = sample  # the sample is the whole file
        else:
            cells = len(ends) * sample.num_columns
            if (
                sample.num_columns > budget.max_fields
                or cells > budget.max_cells
                or 2 * len(data) + cells * _ARROW_CELL_BYTES > budget.max_bytes
            ):
                return None
            # Blocks of 4 MiB (or the longest line) are parsed in parallel; one 16 MiB block
            # ran on one thread (0.18 s against 0.05 s for 14 MB on 2 cores).
            block = max(_FAST_BLOCK, int(lengths.max()) + 2)
            table = pj.read_json(
                pa.BufferReader(data),
                read_options=pj.ReadOptions(block_size=block),
                parse_options=pj.ParseOptions(
                    explicit_schema=sample.schema, unexpected_field_behavior="error"
                ),
            )
    except Exception:  # noqa: BLE001 (pyarrow raises several types; the streaming path reports)
        return None
    if (
        table.num_rows != len(ends)
        or table.num_columns > budget.max_fields
        or table.num_rows * table.num_columns > budget.max_cells
        or any(
            str(t) not in _FAST_TYPES and not (lists and str(t) == _STRING_LIST) for t in table.schema.types
        )
        or "steps" in table.column_names
    ):
        return None
    from .._arrow import call, numbers  # not `to_numpy`: that would import pandas

    for name, typ in zip(table.column_names, table.schema.types):
        if str(typ) == "double":
            col = table.column(name)
            v = numbers(col)
            if col.null_count:
                v = v[numbers(call("is_valid", col))]
            # NaN / Infinity literals (json.loads tags them), integers past 2**53 or past the
            # float range (json.loads keeps them exact): all are the streaming path's to report.
            if not np.isfinite(v).all() or np.any((np.abs(v) >= 2.0**53) & (v == np.round(v))):
                return None
    return table


#: Most values one line may hold for pyarrow's reader (a tenth of the default
#: ``$CRBC_VIZ_MAX_ITEMS``): longer lists are read by ``json`` (which cannot crash on them).
FAST_MAX_ITEMS = 100_000
#: Table cells of the first lines whose fields bound the fast reader's table (`_sample_schema`).
_SAMPLE_CELLS = 1 << 21
#: Bytes of one Arrow cell, charged to the memory budget: 8 (a number, or a string's offset
#: and its bytes, which the file's own size bounds) plus slack for the chunks' builders.
_ARROW_CELL_BYTES = 16
#: Bytes scanned at once where a whole input is scanned (no array as large as the input).
_PIECE = 1 << 24


def _shapes_fit(data: bytes, buf: np.ndarray, starts, ends, lengths) -> bool:
    """Whether every line nests at most ``$CRBC_VIZ_MAX_DEPTH`` deep and holds at most
    `FAST_MAX_ITEMS` values. Brackets are counted per line on the bytes (an upper bound on the
    depth: strings count too), commas only in lines long enough to pass the limit; the
    exact count (`_guards.json_shape`) runs only for lines over these bounds."""
    depth, items = _guards.max_depth(), min(_guards.max_items(), FAST_MAX_ITEMS)
    opens = sum(
        np.count_nonzero(buf[lo : lo + _PIECE] == c)
        for c in (0x7B, 0x5B)
        for lo in range(0, len(buf), _PIECE)
    )
    suspect = lengths >= items  # values <= commas + brackets + 1 <= length + 1
    if opens > len(ends):  # more than the "{" every line starts with
        at = _positions(buf, lambda b: (b | 0x20) == 0x7B)  # "{" or "["
        per_line = np.bincount(np.searchsorted(ends, at), minlength=len(ends))
        suspect |= per_line > depth
    for i in np.flatnonzero(suspect):
        if _guards.json_problem(data[starts[i] : ends[i]], depth, items) is not None:
            return False
    return True


def _positions(buf: np.ndarray, test, most: int | None = None) -> np.ndarray | None:
    """``np.flatnonzero(test(buf))`` computed in 16 MiB pieces (no mask the size of ``buf``);
    None as soon as there are more than ``most``."""
    parts, n = [], 0
    for lo in range(0, len(buf), _PIECE):
        parts.append(np.flatnonzero(test(buf[lo : lo + _PIECE])) + lo)
        n += len(parts[-1])
        if most is not None and n > most:
            return None
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _utf8_ok_in_pieces(data: bytes) -> bool:
    """Whether ``data`` is UTF-8, decoded in 16 MiB pieces (not one string as large as it)."""
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        for lo in range(0, len(data), _PIECE):
            dec.decode(data[lo : lo + _PIECE])
        dec.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _sample_schema(data: bytes, buf: np.ndarray, ends):
    """(pyarrow's table of the first lines, how many lines it holds): as many lines as keep
    lines x keys (colons, counted on the bytes) within `_SAMPLE_CELLS`, at least one, so even
    the sample's table is small whatever the lines hold. (None, 0) when pyarrow refuses them."""
    import pyarrow as pa
    import pyarrow.json as pj

    head = int(ends[min(len(ends), 4096) - 1])
    colons = np.flatnonzero(buf[:head] == 58)
    per_line = np.cumsum(np.bincount(np.searchsorted(ends, colons), minlength=min(len(ends), 4096)))
    fits = np.flatnonzero(np.arange(1, len(per_line) + 1) * per_line <= _SAMPLE_CELLS)
    n = int(fits[-1]) + 1 if fits.size else 1
    block = max(_FAST_BLOCK, int(ends[n - 1]) + 2)
    try:
        table = pj.read_json(
            pa.BufferReader(data[: int(ends[n - 1]) + 1]),
            read_options=pj.ReadOptions(block_size=block, use_threads=False),
        )
    except Exception:  # noqa: BLE001 (the streaming path reports)
        return None, 0
    return table, n


def _gzip_reason(exc: Exception) -> str:
    if isinstance(exc, EOFError):
        return "the gzip stream is truncated (ends before its end-of-stream marker)"
    if isinstance(exc, zlib.error):
        return f"the gzip data is corrupt ({exc})"
    return str(exc) or type(exc).__name__


def _json_type(obj) -> str:
    return {
        list: "array",
        str: "string",
        bool: "boolean",
        type(None): "null",
        int: "number",
        float: "number",
        _NonFinite: "number",
    }.get(type(obj), type(obj).__name__)


def _read_json(path: str, limit: int | None = None) -> RawTable:
    problems: list[Problem] = []
    budget = _guards.Budget(path, "item")
    try:
        cap = max_json_bytes()
        with _open_binary(path) as fh:
            data = read_charged(fh, cap + 1, budget)  # bytes, not characters: one may take 4
        if len(data) > cap:
            raise LoadError(
                [
                    Problem(
                        path,
                        None,
                        None,
                        f"JSON document is larger than the limit of {cap / 2**20:.0f} MiB; "
                        f"write JSONL (one row per line, streamed) for large logs, or set "
                        f"${_ENV_MAX_JSON}",
                    )
                ]
            )
        if data.startswith(_BOM):
            data = data[len(_BOM) :]
        text = data.decode("utf-8")
        check_document(data, path)
        del data
        doc = _json_loads(text)
    except LoadError:
        raise
    except json.JSONDecodeError as exc:
        raise LoadError(
            [Problem(path, exc.lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})")]
        ) from None
    except UnicodeDecodeError as exc:
        raise LoadError(
            [Problem(path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
        ) from None
    except _GZIP_ERRORS as exc:
        raise LoadError([Problem(path, None, None, f"cannot read file: {_gzip_reason(exc)}")]) from None
    except (ValueError, RecursionError) as exc:
        raise LoadError([Problem(path, None, None, _parse_error(exc))]) from None
    notes = []
    if _SURROGATE_ESCAPE.search(text):
        doc, n = _fix_surrogates(doc)
        if n:
            notes.append(f"{path}: lone UTF-16 surrogates (\\ud800-\\udfff escapes) were replaced by U+FFFD")
    if isinstance(doc, dict) and isinstance(doc.get("steps"), list):
        items = doc["steps"]
        shared = {k: v for k, v in doc.items() if k != "steps"}
    elif isinstance(doc, list):
        items, shared = doc, {}
    else:
        raise LoadError(
            [Problem(path, None, None, "expected a JSON array of rows, or an object with a 'steps' array")]
        )
    rows: list[dict] = []
    lines: list[int] = []
    budget.rows(len(items))
    for i, obj in enumerate(items):
        budget.problems(problems, i)
        if not isinstance(obj, dict):
            problems.append(Problem(path, i, None, f"expected a JSON object, got {_json_type(obj)}", "item"))
            continue
        if shared:
            obj = {**shared, **obj}
        start = len(rows)
        _flatten(obj, i, rows, lines, path, problems, "item")
        _spend(budget, rows, start, i)
    budget.problems(problems, len(items))
    nonfinite: dict = {}
    if "NaN" in text or "Infinity" in text:
        _note_nonfinite(rows, 0, nonfinite)
    return RawTable(
        path, _frame(rows), np.asarray(lines, dtype=np.int64), "item", False, problems, nonfinite, notes
    )


def read_charged(fh, n: int, budget: _guards.Budget) -> bytes:
    """Up to ``n`` bytes of ``fh``, read in 16 MiB pieces, each charged to ``budget`` before the
    next is read: the piece, the text it decodes to (up to 4 bytes a character) and what
    ``json.loads`` builds from it (`_guards.json_cost`), so a document of tiny objects is
    refused after a few pieces, not after 512 MiB."""
    parts = []
    got = 0
    while got < n:
        piece = fh.read(min(_PIECE, n - got))
        if not piece:
            break
        budget.spend(
            len(piece) + (len(piece) if piece.isascii() else 4 * len(piece)) + _guards.json_cost(piece)
        )
        parts.append(piece)
        got += len(piece)
    return b"".join(parts)


def check_document(data: bytes, path: str) -> None:
    """Refuse a ``.json`` document nested deeper than ``$CRBC_VIZ_MAX_DEPTH`` below its rows
    (two levels are the document's own: its array and an object's ``steps``)."""
    depth = _guards.max_depth()
    if data.count(b"[") + data.count(b"{") <= depth + 2:
        return
    deepest, _ = _guards.json_shape(data)
    if deepest > depth + 2:
        raise LoadError(
            [
                Problem(
                    path,
                    None,
                    None,
                    f"JSON nesting too deep: nested deeper than {depth} levels below the document's rows "
                    f"(the limit; set ${_guards.ENV_MAX_DEPTH} to raise the limit)",
                )
            ]
        )


def _read_parquet(path: str, limit: int | None = None) -> RawTable:
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
        _check_unique_names(pf.schema_arrow.names, path)
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
    _charge_frame(path, table, "row")
    try:
        df = table.to_pandas()
    except Exception as exc:  # noqa: BLE001 (an extension type pandas cannot hold, ...)
        raise LoadError([Problem(path, None, None, f"cannot read Parquet: {str(exc)[:300]}")]) from None
    return RawTable(path, df, np.arange(len(df), dtype=np.int64), "row", False)


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


def _check_unique_names(names: list, path: str) -> None:
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


def _read_csv(path: str, limit: int | None = None) -> RawTable:
    import pandas as pd

    budget = _guards.Budget(path, "row")
    try:
        with _open_text(path) as fh:
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
    except _GZIP_ERRORS as exc:
        raise LoadError([Problem(path, None, None, f"cannot read file: {_gzip_reason(exc)}")]) from None
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
    _check_unique_names(names, path)


_READERS = {"jsonl": _read_jsonl, "json": _read_json, "parquet": _read_parquet, "csv": _read_csv}


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
