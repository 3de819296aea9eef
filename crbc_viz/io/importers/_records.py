"""JSON Lines read as whole records (a trajectory record's ``steps`` list is not split into
rows), behind the same guards as the canonical streaming reader
(`crbc_viz.io.readers.jsonl`): each line bounded, decoded on its own, its nesting and values
counted on its bytes and its parse charged to the file's memory budget before ``json`` sees
it. Every problem names its line."""

from __future__ import annotations

from ...errors import LoadError, Problem
from .. import _guards
from ..readers._base import GZIP_ERRORS, gzip_reason, open_binary
from ..readers._json import SURROGATE_ESCAPE, fix_surrogates, json_loads, json_type, parse_error
from ..readers.jsonl import _iter_lines

__all__ = ["jsonl_records"]


def jsonl_records(path: str, limit: int) -> tuple[list, list[int]]:
    """(records, their lines) of the JSON Lines file ``path``; blank lines are skipped.

    Raises:
        LoadError: every line that is not a readable JSON object, or a limit passed.
    """
    recs: list = []
    lines: list[int] = []
    problems: list[Problem] = []
    budget = _guards.Budget(path)
    depth, items = _guards.max_depth(), _guards.max_items()
    lineno = 0
    try:
        with open_binary(path) as fh:
            for lineno, raw in _iter_lines(fh, limit, path, problems):
                budget.problems(problems, lineno)
                if raw is None or not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    problems.append(
                        Problem(path, lineno, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                    )
                    continue
                why = _guards.json_problem(raw, depth, items)
                if why is not None:
                    problems.append(Problem(path, lineno, None, why))
                    continue
                budget.spend(_guards.json_cost(raw), lineno)
                try:
                    obj = json_loads(text)
                except (ValueError, RecursionError) as exc:
                    problems.append(Problem(path, lineno, None, parse_error(exc)))
                    continue
                if not isinstance(obj, dict):
                    problems.append(
                        Problem(path, lineno, None, f"expected a JSON object, got {json_type(obj)}")
                    )
                    continue
                if SURROGATE_ESCAPE.search(text):
                    obj, _ = fix_surrogates(obj)
                recs.append(obj)
                lines.append(lineno)
                budget.rows(len(recs), lineno)
    except GZIP_ERRORS as exc:
        if isinstance(exc, LoadError):
            raise
        after = f" after line {lineno}" if lineno else ""
        problems.append(Problem(path, None, None, f"cannot read{after}: {gzip_reason(exc)}"))
    if problems:
        raise LoadError(problems[:50], total=len(problems))
    return recs, lines
