"""The vectorised JSON Lines reader: a whole file parsed at once by pyarrow's JSON reader, taken
only where it provably reads what the streaming reader (`crbc_viz.io.readers.jsonl`) reads;
the columnar lane (`crbc_viz.io.columnar`) reads its Arrow table without pandas."""

from __future__ import annotations

import os
import re
import zlib
from typing import TYPE_CHECKING

import numpy as np

from ...errors import LoadError
from .. import _guards
from ._base import BOM, PIECE, RawTable, charge_frame, open_binary
from ._json import ID_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa

#: Largest JSONL input (after decompression) parsed in one vectorised pass; larger files
#: are streamed line by line (`read_jsonl`), so memory stays bounded.
FAST_JSONL_MAX_BYTES = 256 << 20
# Anything the vectorised parser would read differently from `json.loads` + `flatten`, or
# that needs a per-line message: then the streaming path reads the file (it alone reports).
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
_FAST_TYPES = ("string", "int64", "double", "bool", "null")
_FAST_BLOCK = 1 << 22
_STRING_LIST = "list<item: string>"


def raw_from_arrow(path: str, table: pa.Table) -> RawTable:
    """The `RawTable` of a JSONL file's `read_jsonl_arrow` table (what `read_table` returns
    for that file)."""
    from ..arrow_rows import arrow_table

    charge_frame(path, table, "line")
    columns = {}
    for c, typ in zip(table.column_names, table.schema.types):
        col = table.column(c)
        if c in ID_FIELDS and str(typ) == "int64" and col.null_count:
            # As `frame`: integer ids with gaps keep their exact values (Python objects, not
            # the floats a frame's column of numbers with gaps would make of them).
            col = np.array(col.to_pylist() + [None], dtype=object)[:-1]
        columns[c] = col
    return RawTable(
        path,
        arrow_table(columns, table.num_rows),
        np.arange(1, table.num_rows + 1, dtype=np.int64),
        "line",
        False,
    )


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
    data = _whole_file(path, budget)
    if data is None:
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
    if not _table_fits(table, len(ends), budget, lists=lists):
        return None
    return table


def _whole_file(path: str, budget: _guards.Budget) -> bytes | None:
    """The file's bytes (decompressed) when the vectorised reader may take them: within
    `FAST_JSONL_MAX_BYTES` and the memory budget, no BOM, NUL byte or surrogate escape."""
    try:
        size = os.path.getsize(path)
        if size > FAST_JSONL_MAX_BYTES or 2 * size > budget.max_bytes:
            return None
        with open_binary(path) as fh:  # gzip, NUL sniff and the decompressed-size cap
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
        or data.startswith(BOM)
        or data.find(b"\x00") >= 0
        or (data.find(b"\\") >= 0 and _SURROGATE_BYTES.search(data))  # memchr first: fast
    ):
        return None
    return data


def _table_fits(table: pa.Table, n_lines: int, budget: _guards.Budget, *, lists: bool) -> bool:
    """Whether pyarrow's ``table`` reads as the streaming reader would: one row per line, within
    the field and cell caps, only flat types (string lists with ``lists``), no ``steps`` field,
    and no float column holding a NaN / Infinity literal or an integer past 2**53."""
    if (
        table.num_rows != n_lines
        or table.num_columns > budget.max_fields
        or table.num_rows * table.num_columns > budget.max_cells
        or any(
            str(t) not in _FAST_TYPES and not (lists and str(t) == _STRING_LIST) for t in table.schema.types
        )
        or "steps" in table.column_names
    ):
        return False
    from ..._arrow import call, numbers  # not `to_numpy`: that would import pandas

    for name, typ in zip(table.column_names, table.schema.types):
        if str(typ) == "double":
            col = table.column(name)
            v = numbers(col)
            if col.null_count:
                v = v[numbers(call("is_valid", col))]
            # NaN / Infinity literals (json.loads tags them), integers past 2**53 or past the
            # float range (json.loads keeps them exact): all are the streaming path's to report.
            if not np.isfinite(v).all() or np.any((np.abs(v) >= 2.0**53) & (v == np.round(v))):
                return False
    return True


#: Most values one line may hold for pyarrow's reader (a tenth of the default
#: ``$CRBC_VIZ_MAX_ITEMS``): longer lists are read by ``json`` (which cannot crash on them).
FAST_MAX_ITEMS = 100_000
#: Table cells of the first lines whose fields bound the fast reader's table (`_sample_schema`).
_SAMPLE_CELLS = 1 << 21
#: Bytes of one Arrow cell, charged to the memory budget: 8 (a number, or a string's offset
#: and its bytes, which the file's own size bounds) plus slack for the chunks' builders.
_ARROW_CELL_BYTES = 16


def _shapes_fit(data: bytes, buf: np.ndarray, starts, ends, lengths) -> bool:
    """Whether every line nests at most ``$CRBC_VIZ_MAX_DEPTH`` deep and holds at most
    `FAST_MAX_ITEMS` values. Brackets are counted per line on the bytes (an upper bound on the
    depth: strings count too), commas only in lines long enough to pass the limit; the
    exact count (`_guards.json_shape`) runs only for lines over these bounds."""
    depth, items = _guards.max_depth(), min(_guards.max_items(), FAST_MAX_ITEMS)
    opens = sum(
        np.count_nonzero(buf[lo : lo + PIECE] == c) for c in (0x7B, 0x5B) for lo in range(0, len(buf), PIECE)
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
    for lo in range(0, len(buf), PIECE):
        parts.append(np.flatnonzero(test(buf[lo : lo + PIECE])) + lo)
        n += len(parts[-1])
        if most is not None and n > most:
            return None
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _utf8_ok_in_pieces(data: bytes) -> bool:
    """Whether ``data`` is UTF-8, decoded in 16 MiB pieces (not one string as large as it)."""
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        for lo in range(0, len(data), PIECE):
            dec.decode(data[lo : lo + PIECE])
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
