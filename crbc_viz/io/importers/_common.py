"""Shared helpers of the importers: peeking at a file's fields, stable ids, renaming, and the one
reading of a reward / score value (`numbers`, `numbers_from_text`: `crbc_viz.io.flags`'s rule,
every bad value named by file, line and field) and of text that cannot be written as UTF-8
(`replace_surrogates`)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from .. import _guards
from ..arrow_rows import Columns, arrow_table, held
from ..flags import is_number_text, not_a_number, read_flags, read_numbers
from ..readers import RawTable, detect_format, max_json_bytes, max_line_bytes
from ..readers._json import SURROGATE, SURROGATE_ESCAPE, fix_surrogates
from ..readers.json_document import check_document, read_charged

__all__ = [
    "Imported",
    "COUNTS",
    "peek_fields",
    "first_json_line",
    "json_document",
    "text_id",
    "to_text",
    "run_from_dir",
    "step_from_path",
    "rename",
    "columns",
    "take",
    "present",
    "record_columns",
    "concat_parts",
    "objects",
    "kind",
    "arrow_table",
    "cumcount",
    "numbers",
    "number_problems",
    "numbers_from_text",
    "loads",
    "surrogate_note",
]


@dataclass
class Imported:
    """One source converted to canonical field names, ready for ``build_batch``.

    Attributes:
        raw: the rows under canonical names (SCHEMA.md), with the file's line of each row.
        fmt: the importer that produced it.
        source_keys: how the trainer keys a step: trainer field name -> the column of the
            canonical table that holds it (a canonical column, or an ``src_*`` column added
            at import). ``crbc-viz export`` writes them back under the trainer's names.
        notes: what the importer could not recover (e.g. no anchors), shown after ingest.
        counts: per-file counts the importer reports, by name (`COUNTS`): shown by the app's
            Data and Graph pages and by ``crbc-viz info`` beside the matching diagnostics
            (`crbc_viz.analysis.matching`); a name absent means "not reported", not 0.
    """

    raw: RawTable
    fmt: str
    source_keys: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)


#: The per-file counts an importer may report in `Imported.counts`: ``copies_dropped``, rows
#: dropped as a trainer's padding copies (exact copies of another step); ``copies_suspected``,
#: lines kept that may be padding copies (the file cannot tell them apart).
COUNTS = {
    "copies_dropped": "padding copies dropped",
    "copies_suspected": "lines that may be padding copies (kept)",
}


def first_json_line(path: str) -> dict | None:
    """The first JSON line of ``path`` as a dict (None when it is not one), guarded by the
    line, depth and item limits."""
    at, line = _guards.first_line_numbered(path, max_line_bytes())  # bounded: never a whole 10 GB line
    if line is None:
        return None
    why = _guards.json_problem(line)  # depth and values before json sees it
    if why is not None:
        what = "nested too deeply" if why.startswith("JSON nesting") else "too large"
        raise LoadError([Problem(path, at, None, f"the first record is {what} to read: {why}")])
    try:
        obj = json.loads(line.decode("utf-8", errors="replace"))
    except RecursionError:
        raise LoadError(
            [Problem(path, None, None, "invalid JSON: the first record is nested too deeply to read")]
        ) from None
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def peek_fields(path: str) -> set[str]:
    """Field names of the first record of ``path`` (for a trajectory row with ``steps``, the
    union of its own fields and its first step's). Empty when nothing can be read."""
    try:
        fmt = detect_format(path)
    except LoadError:
        return set()
    keys: set[str] = set()
    try:
        if fmt == "jsonl":
            obj = first_json_line(path)
            if obj:
                keys = set(obj)
                if isinstance(obj.get("steps"), list) and obj["steps"] and isinstance(obj["steps"][0], dict):
                    keys |= set(obj["steps"][0])
        elif fmt == "json":
            doc = json_document(path)
            first = doc[0] if isinstance(doc, list) and doc else doc
            if isinstance(first, dict):
                keys = set(first)
                if (
                    isinstance(first.get("steps"), list)
                    and first["steps"]
                    and isinstance(first["steps"][0], dict)
                ):
                    keys |= set(first["steps"][0])
        elif fmt == "parquet":
            import pyarrow.parquet as pq

            keys = set(pq.read_schema(path).names)
        elif fmt == "csv":
            head = _guards.first_line(path, max_line_bytes()) or b""
            keys = {k.strip() for k in head.decode("utf-8", errors="replace").strip().split(",")}
    except LoadError:
        raise  # a limit, a FIFO or unreadable nesting: named, not "format not detected"
    except (OSError, ValueError, UnicodeDecodeError, RecursionError, EOFError):
        return set()
    return keys


def json_document(path: str, fixed: list | None = None):
    """The JSON document in file ``path``, parsed by ``json`` only after its size
    (``$CRBC_VIZ_MAX_JSON_MB``, bytes after gzip), what parsing it takes
    (``$CRBC_VIZ_MAX_MEMORY_MB``, charged as it is read) and its nesting
    (``$CRBC_VIZ_MAX_DEPTH`` below the document's two own levels) passed; lone surrogates are
    replaced as `loads` does (their count appended to ``fixed``).

    Raises:
        LoadError: a limit passed (one line naming it), or not UTF-8.
        ValueError: not JSON (`json.JSONDecodeError`).
    """
    budget = _guards.Budget(path, "item")
    with _guards.open_input(path, max_json_bytes(), env="CRBC_VIZ_MAX_JSON_MB") as fh:
        data = read_charged(fh, max_json_bytes() + 1, budget)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    check_document(data, path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadError(
            [Problem(path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
        ) from None
    del data
    return loads(text, fixed)


def text_id(value, prefix: str = "p") -> str:
    """A short deterministic id of a value (a prompt): ``prefix`` + 12 hex digits of BLAKE2b."""
    s = (
        value
        if isinstance(value, str)
        else json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    )
    return prefix + hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def to_text(value):
    """Strings stay; lists/dicts/arrays become compact JSON; missing stays None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and np.isnan(value):
        return None
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return json.dumps(value, ensure_ascii=False, default=str)


_RUN_SKIP = {
    "completions",
    "rollout",
    "rollouts",
    "rollout_data",
    "rollout_data_dir",
    "generations",
    "dumps",
    "episodes",
    "crbc_dump",
}


def run_from_dir(path: str) -> str:
    """A run name from a trainer's output layout: the nearest parent folder that is not a
    generic dump folder (``completions``, ``rollouts``, ``step_12`` ...)."""
    for parent in Path(path).resolve().parents:
        name = parent.name
        if not name:
            break
        if name.lower() in _RUN_SKIP or re.fullmatch(
            r"(global_|train_|val_)?step[_-]?\d+(_epoch_\d+)?|\d+", name.lower()
        ):
            continue
        return name
    return Path(path).stem


def step_from_path(path: str) -> int | None:
    """The training step written in a dump's file or folder name (``12.jsonl``,
    ``completions_00012.parquet``, ``step_12/``, ``global_step_12``), else None."""
    p = Path(path)
    for name in (p.name, p.parent.name):
        stem = name.split(".")[0]
        m = re.fullmatch(r"(?:.*?(?:global_)?step[_-]?|completions_|crbc_step_)?(\d+)", stem, re.I)
        if m:
            return int(m.group(1))
    return None


def columns(df) -> dict:
    """The columns of a table (a reader's `Columns`, or already a dict of columns) by name, in
    order."""
    return dict(df) if isinstance(df, dict) else dict(df.items())


def row_texts(cols: Columns) -> list[tuple]:
    """Each row of ``cols`` as a tuple of its fields' texts (``str`` of the value; None where it
    is missing: None or NaN), for telling rows alike in every field (a frame's
    ``astype(str)`` rows, which keep a missing value missing)."""
    texts = []
    for c in cols:
        vals = cols[c]
        there = present(vals) if vals.dtype.kind in "Of" else np.ones(len(vals), dtype=bool)
        texts.append([str(v) if ok else None for v, ok in zip(vals.tolist(), there.tolist())])
    return list(zip(*texts)) if texts else [() for _ in range(cols.rows)]


def rename(df, mapping: dict[str, str]) -> dict:
    """Rename trainer fields to canonical ones; a canonical name already present is kept and
    the trainer's copy is kept under ``src_<name>``. ``df``: a reader's `Columns` or a dict
    of columns; the columns are returned by name (for `arrow_table`)."""
    cols = columns(df)
    out = {}
    for col in cols:
        if col in mapping:
            continue
        out[col] = cols[col]
    for src, dst in mapping.items():
        if src in cols:
            if dst in out and dst not in mapping:
                out[f"src_{dst}"] = out.pop(dst)
            out[dst] = cols[src]
    return out


def take(col, rows: np.ndarray):
    """Rows ``rows`` (positions) of one column: a list, a numpy array, or one value for every
    row (returned as it is)."""
    if isinstance(col, list):
        return [col[i] for i in rows.tolist()]
    if isinstance(col, np.ndarray):
        return col[rows]
    return col


def objects(col, n: int | None = None) -> np.ndarray:
    """The values of one column as Python objects (a frame's ``to_numpy(dtype=object)``)."""
    return held(col, n).astype(object)


def kind(col) -> str:
    """The numpy kind of a column's dtype (``i``, ``f``, ``b``, ``O`` ...), as its frame has it."""
    return held(col).dtype.kind


def record_columns(rows: list[dict]) -> dict[str, list]:
    """Rows given as dicts as columns: every field any row has, in order of first appearance;
    NaN where a row lacks it (as a frame built from the rows has it)."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k, np.nan) for r in rows] for k in names}


def concat_parts(parts: list[dict]) -> dict[str, np.ndarray]:
    """The columns of ``parts`` (each a dict of equal-length lists) one after another, each
    value as a frame of its part holds it (`held`): a column of numbers stays numbers (whole
    numbers and fractions: fractions), of flags flags, anything else an object column; a
    column a part lacks is NaN there."""
    names = list(dict.fromkeys(c for part in parts for c in part))
    sizes = [len(next(iter(part.values()))) if part else 0 for part in parts]
    out = {}
    for c in names:
        arrays = [held(part[c]) if c in part else np.full(k, np.nan) for part, k in zip(parts, sizes)]
        kinds = {a.dtype.kind for a in arrays}
        if kinds == {"b"} or (kinds and kinds <= set("iuf")):
            out[c] = np.concatenate(arrays)
        else:
            out[c] = np.concatenate([a.astype(object) for a in arrays]) if arrays else np.zeros(0, object)
    return out


def present(values) -> np.ndarray:
    """``[n]`` bool: the values that are there (not None, not NaN: what a frame's ``notna``
    says of a column of Python values)."""
    return np.fromiter(
        (not (v is None or (isinstance(v, float | np.floating) and np.isnan(v))) for v in values),
        dtype=bool,
        count=len(values),
    )


def cumcount(keys: np.ndarray) -> np.ndarray:
    """0, 1, 2 ... within each distinct key, in row order."""
    seen: dict = {}
    out = np.zeros(len(keys), dtype=np.int64)
    for i, k in enumerate(keys.tolist() if isinstance(keys, np.ndarray) else keys):
        out[i] = seen.get(k, 0)
        seen[k] = out[i] + 1
    return out


def require(raw: RawTable, fields: tuple[str, ...], fmt: str, hint: str) -> None:
    """Raise naming the file when a field every row of this format must have is absent."""
    table = raw.table
    names = table.column_names
    if table.num_rows == 0 or not names:
        return
    missing = [f for f in fields if f not in names]
    if missing:
        raise LoadError(
            [
                Problem(
                    raw.path, None, f, f"missing in every row; a {fmt} file has {', '.join(fields)} ({hint})"
                )
                for f in missing
            ]
        )


def _cell(v) -> str:
    if isinstance(v, float) and np.isnan(v):
        return "null"
    t = to_text(v)
    return t if isinstance(t, str) else json.dumps(t, default=str)


def _rows(cols: dict) -> int:
    """How many rows the columns ``cols`` have (those that are not one value for every row)."""
    return next((len(v) for v in cols.values() if isinstance(v, list | np.ndarray)), 0)


def drop_exact_duplicates(
    df,
    line: np.ndarray,
    keys: tuple[str, ...],
    path: str,
    where: str = "line",
    why: str = "",
    ignore: tuple[str, ...] = (),
) -> tuple[dict, np.ndarray, str | None]:
    """Rows that share ``keys`` (a trajectory and its step): exact copies (every field equal)
    are dropped, keeping the first, with a counted note; copies that differ are an error naming
    both lines and the fields that differ. ``df``: a reader's `Columns` or a dict of columns; each
    value is compared as the frame made of the columns holds it (`crbc_viz.io.arrow_rows.held`).

    Returns:
        (the columns of the rows kept, their lines, the note or None).

    Raises:
        LoadError: one problem per conflicting row.
    """
    cols = columns(df)
    n = _rows(cols)
    if not n or not cols or not set(keys) <= set(cols):
        return cols, line, None
    kcells = list(zip(*([_cell(v) for v in objects(cols[k], n)] for k in keys)))
    counts: dict[tuple, int] = {}
    for k in kcells:
        counts[k] = counts.get(k, 0) + 1
    dup = np.fromiter((counts[k] > 1 for k in kcells), dtype=bool, count=n)
    if not dup.any():
        return cols, line, None
    vals = {c: held(v, n) for c, v in cols.items()}
    names = [c for c in cols if c not in ignore]
    first: dict[tuple, int] = {}
    drop = np.zeros(n, dtype=bool)
    problems: list[Problem] = []
    for i in np.flatnonzero(dup):
        k = kcells[i]
        j = first.setdefault(k, i)
        if j == i:
            continue
        diff = [c for c in names if _cell(vals[c][i]) != _cell(vals[c][j])]
        if diff:
            shown = ", ".join(f"{c}={_cell(vals[c][j])[:40]} vs {_cell(vals[c][i])[:40]}" for c in diff[:3])
            here = "".join(f" ({c} {vals[c][j]} and {vals[c][i]})" for c in ignore if c in cols)
            problems.append(
                Problem(
                    path,
                    int(line[i]),
                    diff[0],
                    f"same {' / '.join(f'{c}={v}' for c, v in zip(keys, k))} as "
                    f"{where} {int(line[j])}{here} but different: {shown}",
                    where,
                )
            )
        else:
            drop[i] = True
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    note = f"dropped {int(drop.sum())} exact duplicate row(s) (same {', '.join(keys)} and content)" + (
        f": {why}" if why else ""
    )
    keep = np.flatnonzero(~drop)
    return {c: take(v, keep) for c, v in cols.items()}, line[keep], note


def number_problems(
    values, path: str, lines, field: str, where: str = "line"
) -> tuple[np.ndarray, list[Problem]]:
    """``(numbers [n] float64, problems)``: the rewards / scores ``values`` read by the one rule
    (`crbc_viz.io.flags.read_numbers`: numbers, or the text of a number; NaN where missing) and
    a `Problem` naming file, line and field for each value that is not a number (``"False"``,
    ``[]``, ``True``, an integer beyond the float range). ``lines[i]``: the line of value ``i``
    (None: not known)."""
    nums, bad = read_numbers(values)
    problems = [
        Problem(path, None if lines is None else int(lines[i]), field, not_a_number(values[i]), where)
        for i in bad.tolist()
    ]
    return nums, problems


def numbers(values, path: str, lines, field: str, where: str = "line") -> np.ndarray:
    """`number_problems`, raising them.

    Raises:
        LoadError: naming the file, line and field of every value that is not a number.
    """
    nums, problems = number_problems(values, path, lines, field, where)
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    return nums


def _text_numbers(col) -> int:
    """How many values of ``col`` (a reader's column or one of `arrow_table`) are numbers written
    as text when every present value is a number or such a text (0 otherwise: the column is not
    one of numbers)."""
    values = held(col)
    if values.dtype.kind in "iufb" or not len(values):
        return 0
    texts = 0
    for v in values:
        if isinstance(v, str):
            if not is_number_text(v):
                return 0
            texts += 1
        elif v is None or (isinstance(v, float) and np.isnan(v)):
            continue
        elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            return 0
    return texts


def numbers_from_text(df, skip=()) -> tuple[dict, list[str]]:
    """The columns of ``df`` (a reader's `Columns` or a dict of columns), each (not in ``skip``)
    whose values are all numbers or the text of a number, some of them text (``"0.5"``,
    ``"1.0"``), read as float numbers; and a note naming those columns, or none. A column of
    other text is left as it is."""
    out, seen = columns(df), []
    for c, col in list(out.items()):
        if c in skip:
            continue
        n = _text_numbers(col)
        if n:
            out[c] = read_numbers(held(col).astype(object))[0]
            seen.append(f"{c} ({n})")
    note = f"numbers written as text read as numbers in column(s): {', '.join(seen)}" if seen else None
    return out, ([note] if note else [])


def flag_column(col) -> tuple[np.ndarray | None, int, int | None]:
    """``(flags or None, how many present values are not flags, the first such row)`` of a
    column (a reader's or one of `arrow_table`) read by `crbc_viz.io.flags.read_flags` with text
    (``true`` / ``false`` / ``0`` / ``1``), missing values left out; flags is None unless every
    present value is one."""
    values = held(col)
    there = present(values) if values.dtype.kind in "Of" else np.ones(len(values), dtype=bool)
    flags, bad = read_flags(values[there], text=True)
    if not there.any():
        return None, 0, None
    if len(bad):
        return None, len(bad), int(np.flatnonzero(there)[bad[0]])
    out = np.zeros(len(values), dtype=bool)
    out[there] = flags
    return out, 0, None


def loads(text: str, fixed: list | None = None):
    """``json.loads(text)`` with the lone UTF-16 surrogates (``"\\ud800"`` escapes, which no
    UTF-8 writer accepts and pandas cannot hold as text) in every string replaced by U+FFFD, as
    the readers do with a file's own strings; how many were replaced is appended to ``fixed``.
    For the JSON an importer parses itself (rLLM's episodes, ROLL's JSON cells).

    Raises:
        ValueError: not JSON (`json.JSONDecodeError`).
    """
    obj = json.loads(text)
    if SURROGATE_ESCAPE.search(text) or SURROGATE.search(text):
        obj, n = fix_surrogates(obj)
        if fixed is not None and n:
            fixed.append(n)
    return obj


def surrogate_note(fixed: list) -> list[str]:
    """The note of `loads`'s replacements (none when there were none)."""
    if not sum(fixed):
        return []
    return [
        f"{sum(fixed)} lone UTF-16 surrogate(s) (\\ud800-\\udfff escapes, not valid Unicode text) "
        "replaced by U+FFFD"
    ]
