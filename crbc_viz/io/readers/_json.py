"""JSON parsing shared by the JSONL and the JSON document readers: ``NaN`` / ``Infinity``
literals tagged, lone surrogates replaced, trajectory rows flattened into step rows, rows
charged to the file's memory budget, and the row table made."""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING

import numpy as np

from ...errors import Problem
from .. import _guards

if TYPE_CHECKING:
    import pyarrow as pa

# A \uD800-\uDFFF escape in the raw text (paired escapes decode to one code point; lone ones
# survive json.loads as unencodable surrogates).
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
SURROGATE = re.compile("[\ud800-\udfff]")


class NonFinite(float):
    """A ``NaN`` / ``Infinity`` / ``-Infinity`` literal, tagged so validation can name it."""

    token: str

    def __new__(cls, token: str):
        obj = super().__new__(cls, float(token.replace("Infinity", "inf")))
        obj.token = token
        return obj


def json_loads(text: str):
    return json.loads(text, parse_constant=NonFinite)


def parse_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} (column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "invalid JSON: nesting too deep"
    return f"invalid JSON: {str(exc)[:200]}"  # e.g. an integer with too many digits


def fix_surrogates(obj):
    """(``obj`` with lone surrogates in every string, keys too, replaced by U+FFFD, how many
    were replaced); iterative, so nesting depth cannot overflow the stack."""
    count = 0

    def fix(v):
        nonlocal count
        if isinstance(v, str):
            v, n = SURROGATE.subn("\ufffd", v)
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


def note_nonfinite(rows: list, start: int, nonfinite: dict) -> None:
    """Record the (row, field) of every top-level NaN/Infinity literal in ``rows[start:]``."""
    for i in range(start, len(rows)):
        for k, v in rows[i].items():
            if isinstance(v, NonFinite):
                nonfinite[(i, k)] = v.token


def spend(budget: _guards.Budget, rows: list, start: int, line: int | None) -> None:
    """Charge the rows appended since ``start`` (and their field names) to ``budget``: a row's
    slots in the row lists and, for the steps of a trajectory row, its dict (its values were
    charged with the text)."""
    budget.rows(len(rows), line)
    for r in rows[start:]:
        budget.fields(r, line)
    if len(rows) > start:
        budget.spend(sum(64 + 16 * len(r) for r in rows[start:]), line)


def flatten(
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


#: Id fields that a column of numbers would hold as float64 when some rows lack them (an
#: integer ``state_hash`` above 2**53 would then lose digits): kept as the objects parsed.
ID_FIELDS = ("group_id", "traj_id", "run_id", "anchor_key", "state_hash")


def table_of(rows: list[dict]) -> pa.Table:
    """The parsed rows as an Arrow table (`crbc_viz.io.arrow_rows.arrow_table`: columns in order
    of first appearance, a field a row lacks missing there); id columns of numbers with gaps
    keep their exact values."""
    import pyarrow as pa

    from ..arrow_rows import arrow_table

    if not rows:
        return pa.table({})
    from ..arrow_rows import plain_array

    columns: dict = {}
    for name in dict.fromkeys(k for r in rows for k in r):
        values = [r.get(name, _ABSENT) for r in rows]
        kinds = set(map(type, values))
        if kinds <= {type(None), _Absent}:  # a field only ever null or absent: a column of NaN
            columns[name] = np.full(len(rows), np.nan)
            continue
        logged = [None if v is _ABSENT else v for v in values]
        if name in ID_FIELDS and kinds - {str, type(None), _Absent}:
            if kinds & {float, NonFinite, type(None), _Absent}:
                columns[name] = _objects(logged)  # exact ids, None where missing
                continue
        if _Absent in kinds and plain_array(logged) is None:
            # Values Arrow holds as Python objects: as a frame made from the records holds
            # them, a logged null None and an absent field NaN.
            columns[name] = _objects(values)
            continue
        columns[name] = logged
    return arrow_table(columns, len(rows))


class _Absent:
    """A field a row does not have (`table_of`)."""


_ABSENT = _Absent()


def _objects(values: list) -> np.ndarray:
    """An object array of ``values``, an absent field NaN."""
    out = np.empty(len(values), dtype=object)
    out[:] = [math.nan if v is _ABSENT else v for v in values]
    return out


def json_type(obj) -> str:
    return {
        list: "array",
        str: "string",
        bool: "boolean",
        type(None): "null",
        int: "number",
        float: "number",
        NonFinite: "number",
    }.get(type(obj), type(obj).__name__)
