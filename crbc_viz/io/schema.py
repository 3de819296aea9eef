"""Validation of raw tables against the canonical schema (SCHEMA.md): the known fields coerced
(`crbc_viz.io.coerce`, on the reader's or importer's Arrow columns), JSON text cells bounded
before they are parsed, the optional signals' text cells read. `crbc_viz.io.assemble.build_batch`
takes the validated columns on to a batch.

Every problem in a file is collected (file, line or row, field); with ``lenient=True`` the
offending rows (and the trajectories they break) are skipped later instead and listed in
``RolloutBatch.skipped``, with a one-line count by kind in ``RolloutBatch.warnings`` (the CLI
prints it).

Limits and decisions: ``step_idx`` in 0..`MAX_STEP_IDX`; |reward| and
|episode_return| at most `MAX_ABS_REWARD`; ``NaN``/``Infinity`` in any known field is an error
naming the literal; one traj_id under several group_ids of a run and train_step is legal
(SCHEMA.md: unique only within its group) and kept as separate trajectories — the usual
convention (r0..r7 in every group), so it draws no warning. A JSON text cell (an
``anchor_obs`` or a JSON-text signal carried as a string, as CSV and Parquet must) is parsed
only when it nests at most ``$CRBC_VIZ_MAX_DEPTH`` deep and holds at most
``$CRBC_VIZ_MAX_ITEMS`` values (`_check_json_cells`).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from ..errors import Problem
from . import _guards
from .anchors import parse_json_text
from .coerce import FIELDS, as_bool, coerce_column, values_of
from .fields import BAD_COLUMN as _BAD
from .fields import LINE_COLUMN as _LINE
from .fields import MAX_ABS_REWARD, MAX_STEP_IDX, REQUIRED, SIGNAL_JSON
from .readers import RawTable

__all__ = ["REQUIRED", "MAX_STEP_IDX", "MAX_ABS_REWARD", "validate"]


def validate(raw: RawTable, *, lenient: bool = False) -> tuple[dict | None, np.ndarray, list[Problem]]:
    """Coerce the known fields; return the columns (name -> the coerced fields as numpy arrays,
    the others as the reader's Arrow columns, or object arrays of the Python values Arrow has
    no type for; plus `LINE_COLUMN` and `BAD_COLUMN`), the row lines and the problems found.
    The columns are None when there is nothing to build from (no rows, a required field
    absent)."""
    from .arrow_rows import ObjectColumn

    source = raw.table
    problems = list(raw.problems)
    n = source.num_rows
    if n == 0:
        if not problems:
            problems.append(Problem(raw.path, None, None, "no step rows in file"))
        return None, np.zeros(0, np.int64), problems
    missing_cols = [f for f in REQUIRED if f not in source.column_names]
    for f in missing_cols:
        problems.append(Problem(raw.path, None, f, "missing required field in every row"))
    if missing_cols:
        return None, raw.line, problems
    bad = np.zeros(n, dtype=bool)
    nonfinite: dict[str, dict[int, str]] = {}
    for (i, name), tok in raw.nonfinite.items():
        if name in FIELDS:
            nonfinite.setdefault(name, {})[int(i)] = tok
    coerced = {  # in the order of FIELDS, so the problems are listed in that order
        name: coerce_column(name, source.column(name), raw, problems, bad, nonfinite.get(name, {}))
        for name in FIELDS
        if name in source.column_names
    }
    columns: dict = {}
    for name in source.column_names:
        col = coerced[name] if name in coerced else source.column(name)
        if isinstance(col.type if not isinstance(col, np.ndarray) else None, ObjectColumn):
            col = values_of(col)  # now, while the source table (which holds them) lives
        columns[name] = col
    _check_json_cells(columns, raw, problems, bad)
    _decode_signals(columns, raw.from_text)
    columns[_LINE] = np.asarray(raw.line, dtype=np.int64)
    columns[_BAD] = bad
    return columns, raw.line, problems


#: Optional per-estimator signals (SCHEMA.md): their numbers and booleans arrive as text from
#: CSV and are read here; their lists and objects arrive as JSON text from any tabular cell.
#: A value that does not read is left as logged, for the estimator that uses it to name.
_SIGNAL_NUMBERS = (
    "gold_logprob",
    "turn_evidence",
    "teacher_logprob_sum",
    "student_logprob_sum",
    "judge_score",
    "advantage",
    "num_tokens",
    "direct_inputs",
)
_SIGNAL_BOOLS = ("is_error",)
_SIGNAL_JSON = SIGNAL_JSON


def _text_number(s: str):
    t = s.strip()
    try:
        return int(t)
    except ValueError:
        pass
    try:
        x = float(t)
    except ValueError:
        return s
    return x if math.isfinite(x) else s


def _text_bool(s: str):
    try:
        return as_bool(s, True)
    except TypeError:
        return s


def _text_json(s: str):
    v = parse_json_text(s)
    return s if v is None else v


#: Columns whose string cells are read as JSON when they spell an array or an object.
_JSON_TEXT_COLUMNS = ("anchor_obs", *SIGNAL_JSON)


def _check_json_cells(columns: dict, raw: RawTable, problems: list, bad: np.ndarray) -> None:
    """Refuse, before ``json`` parses them, JSON text cells nested deeper than
    ``$CRBC_VIZ_MAX_DEPTH`` or holding more than ``$CRBC_VIZ_MAX_ITEMS`` values: each is a
    `Problem` on its row and is blanked, so nothing parses it."""
    depth, items = _guards.max_depth(), _guards.max_items()
    short = min(depth, items)  # a text this short has too few brackets and commas to pass
    for c in _JSON_TEXT_COLUMNS:
        if c not in columns or not _may_hold_text(columns[c]):
            continue
        vals = values_of(columns[c])
        hits = []
        for i, v in enumerate(vals):
            if isinstance(v, str) and len(v) > short and v.lstrip()[:1] in ("[", "{"):
                why = _guards.json_problem(v, depth, items)
                if why is not None:
                    hits.append(i)
                    problems.append(Problem(raw.path, int(raw.line[i]), c, why, raw.where))
                    bad[i] = True
        if hits:
            vals = vals.copy()
            vals[hits] = None
            columns[c] = vals


def _may_hold_text(col) -> bool:
    """Whether a column (coerced numpy, or Arrow as read) may hold text cells."""
    if isinstance(col, np.ndarray):
        return col.dtype == object
    typ = col.type
    return not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ))


def _decode_signals(columns: dict, from_text: bool) -> None:
    """Read the optional signal columns' text cells (see `_SIGNAL_NUMBERS`)."""
    todo = [(c, _text_json) for c in _SIGNAL_JSON]
    if from_text:
        todo += [(c, _text_number) for c in _SIGNAL_NUMBERS] + [(c, _text_bool) for c in _SIGNAL_BOOLS]
    for c, read in todo:
        if c in columns and _may_hold_text(columns[c]):
            vals = values_of(columns[c])
            if not any(isinstance(v, str) for v in vals.tolist()):
                continue
            col = np.empty(len(vals), dtype=object)
            for i, v in enumerate(vals):  # one by one: equal-length lists stay lists
                col[i] = read(v) if isinstance(v, str) else v
            columns[c] = col
