"""Validation of raw tables against the canonical schema (SCHEMA.md) and batch assembly.

Every problem in a file is collected (file, line or row, field) and raised together as one
`LoadError`; with ``lenient=True`` the offending rows (and the trajectories they break) are
skipped instead and listed in ``RolloutBatch.skipped``, with a one-line count by kind in
``RolloutBatch.warnings`` (the CLI prints it).

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
import re
import reprlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ..data import GROUP_KEY, RolloutBatch
from ..errors import MAX_LISTED, LoadError, Problem
from . import _guards
from .anchors import anchor_hash64, parse_json_text
from .assemble import assemble, row_codes, sort_rows
from .fields import BAD_COLUMN as _BAD
from .fields import FIELD_KINDS, MAX_ABS_REWARD, MAX_STEP_IDX, REQUIRED, SIGNAL_JSON
from .fields import INT_LIMIT as _INT_LIMIT
from .fields import LINE_COLUMN as _LINE
from .readers import RawTable

__all__ = ["REQUIRED", "MAX_STEP_IDX", "MAX_ABS_REWARD", "validate", "build_batch"]
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 40, 40, 4, 4, 2
_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}


def _is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def _as_id(v, from_text):
    if isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return str(int(v))
    raise TypeError(f"expected a string id, got {type(v).__name__} {_short(v)}")


def _as_int(v, from_text):
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"expected an integer, got bool {v}")
    out = None
    if isinstance(v, (int, np.integer)):
        out = int(v)
    elif isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
        out = int(v)
    elif from_text and isinstance(v, str):
        try:
            out = int(v.strip())
        except ValueError:
            pass
    if out is None:
        raise TypeError(f"expected an integer, got {type(v).__name__} {_short(v)}")
    if not -_INT_LIMIT <= out <= _INT_LIMIT:
        raise TypeError(f"integer out of range: {_short(v)}")
    return out


def _as_float(v, from_text):
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"expected a number, got bool {v}")
    if isinstance(v, (int, float, np.integer, np.floating)):
        try:
            out = float(v)
        except OverflowError:  # a JSON integer with hundreds of digits
            raise TypeError(f"expected a finite number, got an integer too large ({_short(v)})") from None
    elif from_text and isinstance(v, str):
        try:
            out = float(v.strip())
        except ValueError:
            raise TypeError(f"expected a number, got {_short(v)}") from None
    else:
        raise TypeError(f"expected a number, got {type(v).__name__} {_short(v)}")
    if not math.isfinite(out):
        raise TypeError(f"expected a finite number, got {out}")
    if abs(out) > MAX_ABS_REWARD:
        raise TypeError(
            f"magnitude {out:g} exceeds {MAX_ABS_REWARD:g} (sums and group statistics would overflow)"
        )
    return out


def _as_bool(v, from_text):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)) and int(v) in (0, 1):
        return bool(v)
    if isinstance(v, str) and (from_text or v.lower() in ("true", "false")):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    raise TypeError(f"expected true/false, got {type(v).__name__} {_short(v)}")


def _as_text(v, from_text):
    if isinstance(v, str):
        return v
    raise TypeError(f"expected a string, got {type(v).__name__} {_short(v)}")


def _as_anchor(v, from_text):
    if isinstance(v, (str, list, dict, tuple, np.ndarray)):
        return v
    raise TypeError(f"expected a string, array or object, got {type(v).__name__} {_short(v)}")


def _short(v, n: int = 40) -> str:
    """A bounded, printable repr (depth- and size-limited, so hostile values stay short)."""
    s = _REPR.repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


_COERCERS = {
    "id": _as_id,
    "int": _as_int,
    "float": _as_float,
    "bool": _as_bool,
    "text": _as_text,
    "anchor": _as_anchor,
}
# field -> (coercer, required), from the one table of fields (`crbc_viz.io.fields`).
_FIELDS: dict[str, tuple[Callable, bool]] = {
    name: (_COERCERS[kind], name in REQUIRED) for name, kind in FIELD_KINDS.items()
}


def _fast_column(name: str, col: pd.Series, from_text: bool):
    """Vectorised coercion of a clean column; None when the slow, per-value path must look
    (it alone writes the messages)."""
    from pandas.api.types import infer_dtype

    coerce = _FIELDS[name][0]
    kind = col.dtype.kind
    present = col.notna().to_numpy()
    if isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype(object)
        kind = "O"
    elif hasattr(col.dtype, "numpy_dtype") and not isinstance(col.dtype, pd.StringDtype):
        # Nullable pandas / Arrow dtypes (a Parquet bool or int column with nulls): plain
        # numpy when nothing is missing, else objects with None.
        col = pd.Series(
            col.to_numpy(dtype=col.dtype.numpy_dtype)
            if present.all()
            else col.to_numpy(dtype=object, na_value=None),
            index=col.index,
        )
        kind = col.dtype.kind
    inferred = infer_dtype(col, skipna=True) if kind == "O" else None
    if (
        coerce in (_as_id, _as_text, _as_anchor)
        and isinstance(col.dtype, pd.StringDtype)
        and (inferred in ("string", "empty"))
    ):
        return col  # already a string column: kept as it is (no per-step objects)
    if coerce in (_as_id, _as_text) and (inferred in ("string", "empty")):
        return col.to_numpy(dtype=object)
    if coerce is _as_id and kind in "iu":
        return col.astype(str).to_numpy(dtype=object)
    if coerce is _as_anchor and inferred in ("string", "empty"):
        return col.to_numpy(dtype=object)
    if coerce is _as_int:
        lo, hi = (0, MAX_STEP_IDX) if name == "step_idx" else (-_INT_LIMIT, _INT_LIMIT)
        if kind in "iu":
            arr = col.to_numpy()
            if len(arr) == 0 or (arr.min() >= lo and arr.max() <= hi):
                return arr.astype(np.int64)
            return None
        if (
            kind == "f"
            or inferred in ("integer", "mixed-integer-float")
            or (from_text and inferred == "string")
        ):
            try:
                num = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
            except (ValueError, TypeError, OverflowError):
                return None
            ok = ~present | (np.isfinite(num) & (num == np.round(num)) & (num >= lo) & (num <= hi))
            if ok.all() and (from_text or inferred != "string"):
                out = np.empty(len(col), dtype=object)
                out[present] = num[present].astype(np.int64)
                out[~present] = None
                return out if not present.all() else num.astype(np.int64)
        return None
    if coerce is _as_float:
        if (
            kind in "fiu"
            or inferred in ("floating", "integer", "mixed-integer-float")
            or (from_text and inferred == "string")
        ):
            if inferred == "string" and not from_text:
                return None
            try:
                num = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
            except (ValueError, TypeError, OverflowError):
                return None
            good = num[present]
            if (
                np.isfinite(good).all()
                and (np.abs(good) <= MAX_ABS_REWARD).all()
                and (present.all() or kind != "f")
            ):
                out = num.astype(object) if not present.all() else num
                if not present.all():
                    out[~present] = None
                return out
        return None
    if coerce is _as_bool:
        if kind == "b":
            return col.to_numpy(dtype=bool)
        if inferred == "boolean":
            return col.to_numpy(dtype=object)
        return None
    return None


def _coerce_column(
    name, series: pd.Series, raw: RawTable, problems: list, bad: np.ndarray, nonfinite: dict[int, str]
):
    """Coerce one known column; every bad value becomes a `Problem` and marks its row bad.
    ``nonfinite`` maps rows whose value was a ``NaN``/``Infinity`` literal to that literal."""
    coerce, required = _FIELDS[name]
    fast = _fast_column(name, series, raw.from_text)
    if fast is not None:
        if required:
            missing = pd.isna(series).to_numpy()
            for i in np.flatnonzero(missing):
                if int(i) not in nonfinite:
                    problems.append(
                        Problem(raw.path, int(raw.line[i]), name, "missing required field", raw.where)
                    )
            bad |= missing
        out = fast
    else:
        values = series.to_numpy(dtype=object)
        out = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):
            if i in nonfinite:
                out[i] = None
                continue
            if _is_missing(v):
                out[i] = None
                if required:
                    problems.append(
                        Problem(raw.path, int(raw.line[i]), name, "missing required field", raw.where)
                    )
                    bad[i] = True
                continue
            try:
                out[i] = coerce(v, raw.from_text)
            except (TypeError, ValueError, OverflowError) as exc:
                out[i] = None
                problems.append(Problem(raw.path, int(raw.line[i]), name, str(exc), raw.where))
                bad[i] = True
        if name == "step_idx":
            for i in np.flatnonzero(~bad):
                if out[i] is not None and not 0 <= out[i] <= MAX_STEP_IDX:
                    problems.append(
                        Problem(
                            raw.path,
                            int(raw.line[i]),
                            name,
                            f"expected an integer >= 0 and <= {MAX_STEP_IDX}, got {_short(out[i])}",
                            raw.where,
                        )
                    )
                    bad[i] = True
    if nonfinite:
        out = np.array(out, dtype=object)  # a copy: the fast path may return a read-only view
        for i, tok in sorted(nonfinite.items()):
            what = "a finite number" if coerce is _as_float else _EXPECTED[coerce]
            problems.append(
                Problem(raw.path, int(raw.line[i]), name, f"expected {what}, got {tok}", raw.where)
            )
            out[i] = None
            bad[i] = True
    return out


_EXPECTED = {
    _as_id: "a string id",
    _as_int: "an integer",
    _as_float: "a finite number",
    _as_bool: "true/false",
    _as_text: "a string",
    _as_anchor: "a string, array or object",
}


def validate(raw: RawTable, *, lenient: bool = False) -> tuple[pd.DataFrame, np.ndarray, list[Problem]]:
    """Coerce the known fields; return the table, its row lines and the problems found."""
    df = raw.records
    problems = list(raw.problems)
    n = len(df)
    if n == 0:
        if not problems:
            problems.append(Problem(raw.path, None, None, "no step rows in file"))
        return pd.DataFrame(), np.zeros(0, np.int64), problems
    missing_cols = [f for f in REQUIRED if f not in df.columns]
    for f in missing_cols:
        problems.append(Problem(raw.path, None, f, "missing required field in every row"))
    if missing_cols:
        return df, raw.line, problems
    bad = np.zeros(n, dtype=bool)
    nonfinite: dict[str, dict[int, str]] = {}
    for (i, name), tok in raw.nonfinite.items():
        if name in _FIELDS:
            nonfinite.setdefault(name, {})[int(i)] = tok
    out = {}
    for name in _FIELDS:
        if name in df.columns:
            out[name] = _coerce_column(name, df[name], raw, problems, bad, nonfinite.get(name, {}))
    table = df.copy()
    for name, col in out.items():
        table[name] = col
    _check_json_cells(table, raw, problems, bad)
    _decode_signals(table, raw.from_text)
    table[_LINE] = raw.line
    table[_BAD] = bad
    return table, raw.line, problems


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
        return _as_bool(s, True)
    except TypeError:
        return s


def _text_json(s: str):
    v = parse_json_text(s)
    return s if v is None else v


#: Columns whose string cells are read as JSON when they spell an array or an object.
_JSON_TEXT_COLUMNS = ("anchor_obs", *SIGNAL_JSON)


def _check_json_cells(table: pd.DataFrame, raw: RawTable, problems: list, bad: np.ndarray) -> None:
    """Refuse, before ``json`` parses them, JSON text cells nested deeper than
    ``$CRBC_VIZ_MAX_DEPTH`` or holding more than ``$CRBC_VIZ_MAX_ITEMS`` values: each is a
    `Problem` on its row and is blanked, so nothing parses it."""
    depth, items = _guards.max_depth(), _guards.max_items()
    short = min(depth, items)  # a text this short has too few brackets and commas to pass
    for c in _JSON_TEXT_COLUMNS:
        if c not in table.columns:
            continue
        vals = table[c].to_numpy(dtype=object)
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
            table[c] = vals


def _decode_signals(table: pd.DataFrame, from_text: bool) -> None:
    """Read the optional signal columns' text cells in place (see `_SIGNAL_NUMBERS`)."""
    todo = [(c, _text_json) for c in _SIGNAL_JSON]
    if from_text:
        todo += [(c, _text_number) for c in _SIGNAL_NUMBERS] + [(c, _text_bool) for c in _SIGNAL_BOOLS]
    for c, read in todo:
        if c in table.columns and (table[c].dtype == object or isinstance(table[c].dtype, pd.StringDtype)):
            vals = table[c].to_numpy(dtype=object)
            col = np.empty(len(vals), dtype=object)
            for i, v in enumerate(vals):  # one by one: equal-length lists stay lists
                col[i] = read(v) if isinstance(v, str) else v
            table[c] = col


def build_batch(raw: RawTable, *, lenient: bool = False, success_threshold: float = 0.0) -> RolloutBatch:
    """Validate ``raw`` and assemble a `RolloutBatch`; raise `LoadError` listing every problem."""
    table, _, problems = validate(raw, lenient=lenient)
    if table.empty or any(p.line is None for p in problems if p.field in REQUIRED or p.field is None):
        if not lenient or table.empty or _BAD not in table:
            raise LoadError(problems[:MAX_LISTED], total=len(problems))
    path = raw.path
    run_default = Path(path).name.split(".")[0]
    if "run_id" not in table:
        table["run_id"] = run_default
    else:
        table["run_id"] = table["run_id"].where(table["run_id"].notna(), run_default)
    if "train_step" not in table:
        table["train_step"] = 0
    else:
        table["train_step"] = table["train_step"].where(table["train_step"].notna(), 0)
    table["train_step"] = table["train_step"].astype(np.int64)

    # Group and trajectory indices in first-occurrence order.
    g_codes = row_codes(*(table[c] for c in GROUP_KEY))
    t_codes = row_codes(g_codes, table["traj_id"])

    # Step order within each trajectory: sorted, must be exactly 0..n-1.
    ok = ~table[_BAD].to_numpy()
    sidx = pd.to_numeric(table["step_idx"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    sidx = np.where(ok, sidx, -1)
    order = np.lexsort((sidx, t_codes))
    t_sorted = t_codes[order]
    s_sorted = sidx[order]
    starts = np.r_[True, t_sorted[1:] != t_sorted[:-1]]
    pos = np.arange(len(order)) - np.maximum.accumulate(np.where(starts, np.arange(len(order)), 0))
    traj_bad = np.zeros(t_codes.max() + 1, dtype=bool)
    traj_bad[np.unique(t_codes[~ok])] = True
    lines = table[_LINE].to_numpy()
    where = raw.where
    dup = np.r_[False, (t_sorted[1:] == t_sorted[:-1]) & (s_sorted[1:] == s_sorted[:-1])]
    for k in np.flatnonzero(dup & (s_sorted >= 0)):
        r = order[k]
        problems.append(
            Problem(
                path,
                int(lines[r]),
                "step_idx",
                f"duplicate step_idx {s_sorted[k]} in trajectory "
                f"{_short(table['traj_id'].iat[r])} of group "
                f"{_short(table['group_id'].iat[r])}",
                where,
            )
        )
        traj_bad[t_sorted[k]] = True
    # Contiguity is checked only on trajectories whose rows all parsed; report the first
    # out-of-place row of each.
    parsed_bad = traj_bad.copy()
    gap = (s_sorted != pos) & ~dup & ~parsed_bad[t_sorted]
    seen = set()
    for k in np.flatnonzero(gap):
        t = t_sorted[k]
        if t in seen:
            continue
        seen.add(t)
        r = order[k]
        problems.append(
            Problem(
                path,
                int(lines[r]),
                "step_idx",
                f"not contiguous from 0: expected {pos[k]}, got {s_sorted[k]} "
                f"in trajectory {_short(table['traj_id'].iat[r])} of group "
                f"{_short(table['group_id'].iat[r])}",
                where,
            )
        )
        traj_bad[t] = True
    if lenient and raw.broken_ids:
        # Lines that did not parse but name their trajectory: drop it rather than keep it with
        # a step missing (which could look like a shorter, truncated rollout).
        keys = pd.MultiIndex.from_arrays([table["group_id"].astype(str), table["traj_id"].astype(str)])
        hit = keys.isin({k for k in raw.broken_ids if k is not None})
        traj_bad[t_codes[hit]] = True

    skipped: list[str] = []
    lenient_note = None
    if problems:
        if not lenient:
            raise LoadError(problems[:MAX_LISTED], total=len(problems))
        skipped = [str(p) for p in problems]
        keep_rows = ~traj_bad[t_codes]
        lenient_note = _lenient_summary(
            path,
            problems,
            int((~keep_rows).sum()),
            int(traj_bad.sum()),
            sum(k is None for k in raw.broken_ids),
        )
        table = table[keep_rows]
        if table.empty:
            raise LoadError(
                problems[:MAX_LISTED]
                + [Problem(path, None, None, "no valid trajectory left after skipping bad rows (--lenient)")],
                total=len(problems) + 1,
            )
        g_codes = row_codes(*(table[c] for c in GROUP_KEY))
        t_codes = row_codes(g_codes, table["traj_id"])

    # Final order: group (first occurrence), trajectory (first occurrence within the file), step.
    table = table.assign(step_idx=table["step_idx"].astype(np.int64))
    order, lay = sort_rows(g_codes, t_codes, table["step_idx"].to_numpy())
    table = table.iloc[order].reset_index(drop=True)

    # Outcome (docs/schema.md, "Success and truncation").
    traj_success, traj_truncated, traj_return, outcome_notes = _outcomes(
        table, lay.step_traj, lay.traj_offsets, success_threshold, path
    )

    # Anchors: precomputed key, else the hash of the canonical anchor_obs, else one per step.
    warnings: list[str] = list(raw.notes)
    if lenient_note:
        warnings.append(lenient_note)
    warnings.extend(outcome_notes)
    table, step_hash = _anchor_hashes(table, warnings, path, where)

    table = table.drop(columns=[_BAD, _LINE], errors="ignore")
    return assemble(
        table,
        lay,
        step_anchor_hash=step_hash,
        traj_success=traj_success,
        traj_truncated=traj_truncated,
        traj_return=traj_return,
        source=path,
        warnings=warnings,
        skipped=skipped,
    )


def _outcomes(
    table: pd.DataFrame, t_codes: np.ndarray, traj_offsets: np.ndarray, success_threshold: float, path: str
):
    """(success [T], truncated [T], return [T], notes) of the trajectories of a sorted table.

    - return: the last logged ``episode_return``, else the sum of ``reward``;
    - success: the last logged ``success`` value, else return > ``success_threshold``;
    - truncated: the last row says ``done=false``. Rows with no ``done`` value (or a file with
      no ``done`` field) say nothing, so such trajectories are taken as ended;
    - a truncated trajectory is a failure, unless the trainer logged ``success=true`` for it:
      the explicit flag wins (and is counted in a note), a success inferred from the return
      or the rewards does not.
    """
    num_t = len(traj_offsets) - 1
    notes: list[str] = []
    step_reward = table["reward"].to_numpy(dtype=np.float64)
    traj_return = np.add.reduceat(step_reward, traj_offsets[:-1]) if len(step_reward) else np.zeros(0)
    if "episode_return" in table:
        er = _last_non_null(table["episode_return"].to_numpy(dtype=object), t_codes, num_t)
        has = np.array([v is not None for v in er], dtype=bool)
        traj_return[has] = np.array([v for v in er[has]], dtype=np.float64)
    traj_success = traj_return > success_threshold
    explicit_true = np.zeros(num_t, dtype=bool)
    if "success" in table:
        col = table["success"].to_numpy(dtype=object)
        sv = _last_non_null(col, t_codes, num_t)
        has = np.array([v is not None for v in sv], dtype=bool)
        traj_success[has] = np.array([bool(v) for v in sv[has]], dtype=bool)
        explicit_true = has & traj_success
        flips = _true_then_false(col, t_codes, num_t)
        if flips.any():
            notes.append(
                f"{path}: {int(flips.sum())} trajectorie(s) log success=true on a row and "
                f"success=false on a later row (first: {_traj_label(table, traj_offsets, flips)}); "
                f"the last logged value is the trajectory's success"
            )
    traj_truncated = np.zeros(num_t, dtype=bool)
    if "done" in table:
        dv = table["done"].to_numpy(dtype=object)[traj_offsets[1:] - 1]
        traj_truncated = np.array([not _is_missing(v) and not bool(v) for v in dv], dtype=bool)
    kept = traj_truncated & explicit_true
    traj_success &= ~traj_truncated | kept
    if kept.any():
        notes.append(
            f"{path}: {int(kept.sum())} truncated trajectorie(s) (last row done=false) "
            f"log success=true (first: {_traj_label(table, traj_offsets, kept)}); the "
            f"logged success is kept, other truncated trajectories are failures"
        )
    return traj_success, traj_truncated, traj_return, notes


def _true_then_false(col: np.ndarray, t_codes: np.ndarray, num_t: int) -> np.ndarray:
    """Per trajectory of a sorted table: a ``success`` true on one row and false on a later one
    (false then true is the usual per-step "won so far" flag and is not flagged)."""
    miss = pd.isna(col)
    val = np.where(miss, -1, np.where(miss, False, col).astype(bool)).astype(np.int8)
    pos = np.arange(len(col))
    first_true = np.full(num_t, len(col), dtype=np.int64)
    last_false = np.full(num_t, -1, dtype=np.int64)
    np.minimum.at(first_true, t_codes[val == 1], pos[val == 1])
    np.maximum.at(last_false, t_codes[val == 0], pos[val == 0])
    return first_true < last_false


def _traj_label(table: pd.DataFrame, traj_offsets: np.ndarray, mask: np.ndarray) -> str:
    r = traj_offsets[int(np.flatnonzero(mask)[0])]
    return f"trajectory {_short(table['traj_id'].iat[r])} of group {_short(table['group_id'].iat[r])}"


def _last_non_null(values, t_codes: np.ndarray, num_t: int) -> np.ndarray:
    """Per trajectory, the last non-null value of a step column (None where all are null)."""
    ser = pd.Series(np.asarray(values, dtype=object))
    last = ser.groupby(t_codes, sort=True).last()  # skips nulls
    out = np.full(num_t, None, dtype=object)
    out[last.index.to_numpy()] = last.to_numpy(dtype=object)
    return np.array([None if _is_missing(v) else v for v in out], dtype=object)


def _kind(p: Problem) -> str:
    """A problem's kind for the lenient summary: its field plus its message with the values
    (quoted text, numbers, parentheses) taken out."""
    msg = re.sub(r"\(.*\)|'[^']*'|\"[^\"]*\"", "", p.message)
    msg = re.split(r",| got |:", msg)[0]
    msg = re.sub(r"-?\d+(\.\d+)?(e[+-]?\d+)?", "N", msg).strip()
    return f"{p.field}: {msg}" if p.field else msg


def _lenient_summary(path: str, problems: list[Problem], rows: int, trajs: int, unattributed: int = 0) -> str:
    """One line for the warnings: how much --lenient skipped, and of which kinds."""
    kinds: dict[str, int] = {}
    for p in problems:
        k = _kind(p)
        kinds[k] = kinds.get(k, 0) + 1
    listed = "; ".join(f"{k} x{n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:12])
    return (
        f"{path}: lenient: skipped {len(problems)} problem(s): dropped {rows} row(s) in "
        f"{trajs} trajectorie(s) (lines that did not parse are not counted as rows); by kind: "
        f"{listed}"
        + (
            f". {unattributed} unparseable line(s) name no trajectory: a rollout "
            f"that lost its last step there now looks truncated"
            if unattributed
            else ""
        )
    )


def _anchor_hashes(table: pd.DataFrame, warnings: list, path: str, where: str = "line"):
    """(table with ``anchor_key`` set, step hashes ``[S]``): a precomputed key, else the hash of
    the canonical ``anchor_obs``, else one hash per trajectory step. Hashes are computed once
    per distinct key or (string) observation and gathered, not once per step."""
    n = len(table)
    obs_col = table["anchor_obs"] if "anchor_obs" in table else None
    if (
        obs_col is not None
        and "anchor_key" not in table
        and "state_hash" not in table
        and isinstance(obs_col.dtype, pd.StringDtype)
        and not obs_col.isna().any()
    ):
        # The usual case: every step has a string observation. Factorised in Arrow, one hash
        # per distinct string, the keys gathered as a string array (no per-step objects).
        codes, uniq = pd.factorize(obs_col)
        uh, ukeys = _string_hashes(uniq.to_numpy(dtype=object), codes, np.arange(n), table, path, where)
        return table.assign(anchor_key=pd.array(ukeys, dtype=obs_col.dtype).take(codes)), uh[codes]
    hashes = np.zeros(n, dtype=np.uint64)
    keys = np.empty(n, dtype=object)
    given = None
    for col in ("anchor_key", "state_hash"):
        if col in table:
            given = (
                table[col].to_numpy(dtype=object)
                if given is None
                else np.where(pd.isna(given), table[col].to_numpy(dtype=object), given)
            )
    keyed_mask = ~pd.isna(given) if given is not None else np.zeros(n, dtype=bool)
    at = np.flatnonzero(keyed_mask)
    if at.size:
        codes, uniq = pd.factorize(given[at])
        hashes[at] = np.fromiter((_key_to_hash(k) for k in uniq), np.uint64, len(uniq))[codes]
        keys[at] = given[at]
    obs_mask = np.zeros(n, dtype=bool)
    if "anchor_obs" in table:
        obs = table["anchor_obs"].to_numpy(dtype=object)
        obs_mask = ~keyed_mask & ~pd.isna(obs)
        at = np.flatnonzero(obs_mask)
        if at.size:
            h, k = _obs_hashes(obs[at], at, table, path, where)
            hashes[at], keys[at] = h, k
    none_at = np.flatnonzero(~keyed_mask & ~obs_mask)
    if none_at.size:
        # No anchor: this step merges with nothing (a unique key per trajectory step).
        traj = table["traj_id"].to_numpy(dtype=object)[none_at]
        sidx = table["step_idx"].to_numpy()[none_at]
        h = np.fromiter(
            (anchor_hash64(["__no_anchor__", str(t), int(s)]) for t, s in zip(traj, sidx)),
            np.uint64,
            len(none_at),
        )
        hashes[none_at] = h
        keys[none_at] = [f"{x:016x}" for x in h.tolist()]
    keyed, missing = int(keyed_mask.sum()), int(none_at.size)
    if missing:
        warnings.append(
            f"{path}: {missing} of {n} steps have no anchor_obs or anchor_key; "
            f"they are not merged with any other step"
        )
    if 0 < keyed < n and "anchor_obs" in table and n - keyed - missing > 0:
        warnings.append(
            f"{path}: {keyed} of {n} steps carry a precomputed anchor_key/state_hash "
            f"and {n - keyed - missing} are keyed from anchor_obs; a precomputed key "
            f"merges only with equal keys (docs/schema.md, \"Anchor identity\")"
        )
    table = table.assign(anchor_key=keys)
    return table, hashes


def _obs_hashes(values: np.ndarray, rows: np.ndarray, table: pd.DataFrame, path: str, where: str):
    """(hashes, keys) of the anchor observations ``values`` (rows ``rows`` of ``table``). All
    strings (the usual case): one hash per distinct string. Otherwise one per value, strings
    cached. The first row (in table order) whose value cannot be canonicalised is reported."""
    from pandas.api.types import infer_dtype

    def fail(i, exc):
        line = int(table[_LINE].iat[int(rows[i])]) if _LINE in table else None
        return LoadError(
            [
                Problem(
                    path, line, "anchor_obs", f"cannot canonicalise the anchor ({type(exc).__name__})", where
                )
            ]
        )

    if infer_dtype(values, skipna=False) == "string":
        codes, uniq = pd.factorize(values)
        uh, ukeys = _string_hashes(uniq, codes, rows, table, path, where)
        return uh[codes], ukeys[codes]
    out = np.zeros(len(values), dtype=np.uint64)
    cache: dict = {}
    for i, o in enumerate(values):
        ck = o if isinstance(o, str) else None
        if ck is not None and ck in cache:
            out[i] = cache[ck]
            continue
        try:
            h = anchor_hash64(o)
        except (RecursionError, ValueError, TypeError, OverflowError) as exc:
            raise fail(i, exc) from None
        if ck is not None:
            cache[ck] = h
        out[i] = h
    return out, np.array([f"{x:016x}" for x in out.tolist()], dtype=object)


def _string_hashes(
    uniq, codes: np.ndarray, rows: np.ndarray, table: pd.DataFrame, path: str, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, hex keys) of the distinct anchor strings ``uniq`` (in first-occurrence order;
    ``codes`` map the values at table rows ``rows`` to them)."""
    uh = np.zeros(len(uniq), dtype=np.uint64)
    for j, o in enumerate(uniq):
        try:
            uh[j] = anchor_hash64(o)
        except (RecursionError, ValueError, TypeError, OverflowError) as exc:
            i = int(rows[int(np.argmax(codes == j))])
            line = int(table[_LINE].iat[i]) if _LINE in table else None
            raise LoadError(
                [
                    Problem(
                        path,
                        line,
                        "anchor_obs",
                        f"cannot canonicalise the anchor ({type(exc).__name__})",
                        where,
                    )
                ]
            ) from None
    return uh, np.array([f"{x:016x}" for x in uh.tolist()], dtype=object)


def _key_to_hash(k: str) -> int:
    if len(k) == 16:
        try:
            return int(k, 16)
        except ValueError:
            pass
    return anchor_hash64("key:" + k)
