"""The streaming JSON Lines reader: line by line in binary, each line bounded by
``max_line_bytes`` (a longer line is skipped in bounded memory and reported, never read whole),
decoded as UTF-8 on its own (a bad byte names its line), its nesting and values counted on its
bytes and its parse charged to the memory budget before ``json`` sees it. Every problem names
its line. `crbc_viz.io.readers.read_table` tries `crbc_viz.io.readers.jsonl_arrow` first."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import numpy as np

from ...errors import LoadError, Problem
from .. import _guards
from ._base import BOM, ENV_MAX_LINE, GZIP_ERRORS, RawTable, gzip_reason, max_line_bytes, open_binary
from ._json import (
    SURROGATE_ESCAPE,
    fix_surrogates,
    flatten,
    json_loads,
    json_type,
    note_nonfinite,
    parse_error,
    spend,
    table_of,
)

_SKIP_CHUNK = 1 << 20
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
                    f"(at least {size / 2**20:.1f} MiB); set ${ENV_MAX_LINE} to "
                    f"raise the limit",
                )
            )
            yield lineno, None
            continue
        if lineno == 1 and raw.startswith(BOM):
            raw = raw[len(BOM) :]
        yield lineno, raw


def read_jsonl(path: str, limit: int | None = None) -> RawTable:
    """Stream the JSON Lines file ``path`` into a `RawTable`, every problem named by its line
    (a line over ``limit`` bytes, default `max_line_bytes`, is skipped and reported)."""
    limit = max_line_bytes() if limit is None else int(limit)
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
        with open_binary(path) as fh:
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
                    obj = json_loads(text)
                except (ValueError, RecursionError) as exc:
                    problems.append(Problem(path, lineno, None, parse_error(exc)))
                    broken.append(_guess_ids(text))
                    continue
                if not isinstance(obj, dict):
                    problems.append(
                        Problem(path, lineno, None, f"expected a JSON object, got {json_type(obj)}")
                    )
                    continue
                if SURROGATE_ESCAPE.search(text):
                    obj, n = fix_surrogates(obj)
                    surrogate_lines += n > 0
                start = len(rows)
                flatten(obj, lineno, rows, lines, path, problems, "line")
                spend(budget, rows, start, lineno)
                if "NaN" in text or "Infinity" in text:
                    note_nonfinite(rows, start, nonfinite)
        budget.problems(problems, lineno)
    except LoadError:
        raise
    except GZIP_ERRORS as exc:
        after = f" after line {lineno}" if lineno else ""
        problems.append(Problem(path, None, None, f"cannot read{after}: {gzip_reason(exc)}"))
    notes = []
    if surrogate_lines:
        notes.append(
            f"{path}: {surrogate_lines} line(s) contain lone UTF-16 surrogates "
            f"(\\ud800-\\udfff escapes); they were replaced by U+FFFD"
        )
    return RawTable(
        path,
        table_of(rows),
        np.asarray(lines, dtype=np.int64),
        "line",
        False,
        problems,
        nonfinite,
        notes,
        broken,
    )
