"""The JSON document reader (``.json``): an array of rows, or an object with a ``steps`` array,
parsed whole after its size (``$CRBC_VIZ_MAX_JSON_MB``), what parsing it takes (charged as it
is read) and its nesting passed; JSONL is the format for large logs."""

from __future__ import annotations

import json

import numpy as np

from ...errors import LoadError, Problem
from .. import _guards
from ._base import BOM, ENV_MAX_JSON, GZIP_ERRORS, PIECE, RawTable, gzip_reason, max_json_bytes, open_binary
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


def read_json(path: str, limit: int | None = None) -> RawTable:
    problems: list[Problem] = []
    budget = _guards.Budget(path, "item")
    try:
        cap = max_json_bytes()
        with open_binary(path) as fh:
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
                        f"${ENV_MAX_JSON}",
                    )
                ]
            )
        if data.startswith(BOM):
            data = data[len(BOM) :]
        text = data.decode("utf-8")
        check_document(data, path)
        del data
        doc = json_loads(text)
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
    except GZIP_ERRORS as exc:
        raise LoadError([Problem(path, None, None, f"cannot read file: {gzip_reason(exc)}")]) from None
    except (ValueError, RecursionError) as exc:
        raise LoadError([Problem(path, None, None, parse_error(exc))]) from None
    notes = []
    if SURROGATE_ESCAPE.search(text):
        doc, n = fix_surrogates(doc)
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
            problems.append(Problem(path, i, None, f"expected a JSON object, got {json_type(obj)}", "item"))
            continue
        if shared:
            obj = {**shared, **obj}
        start = len(rows)
        flatten(obj, i, rows, lines, path, problems, "item")
        spend(budget, rows, start, i)
    budget.problems(problems, len(items))
    nonfinite: dict = {}
    if "NaN" in text or "Infinity" in text:
        note_nonfinite(rows, 0, nonfinite)
    return RawTable(
        path, table_of(rows), np.asarray(lines, dtype=np.int64), "item", False, problems, nonfinite, notes
    )


def read_charged(fh, n: int, budget: _guards.Budget) -> bytes:
    """Up to ``n`` bytes of ``fh``, read in 16 MiB pieces, each charged to ``budget`` before the
    next is read: the piece, the text it decodes to (up to 4 bytes a character) and what
    ``json.loads`` builds from it (`_guards.json_cost`), so a document of tiny objects is
    refused after a few pieces, not after 512 MiB."""
    parts = []
    got = 0
    while got < n:
        piece = fh.read(min(PIECE, n - got))
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
