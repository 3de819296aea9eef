"""Coercion of the canonical fields (SCHEMA.md): each known column of a raw table becomes values
of its kind (`crbc_viz.io.fields.FIELD_KINDS`: id, int, float, bool, text, anchor), every bad
value a `Problem` naming its file, line and field. A clean column is coerced vectorised; any
other is read value by value, which alone writes the messages.

Limits: ``step_idx`` in 0..`MAX_STEP_IDX`; integers within ``INT_LIMIT``; numbers finite and
|x| at most `MAX_ABS_REWARD`; ``NaN``/``Infinity`` in any known field is an error naming the
literal.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..errors import Problem
from .fields import FIELD_KINDS, MAX_ABS_REWARD, MAX_STEP_IDX, REQUIRED
from .fields import INT_LIMIT as _INT_LIMIT
from .readers import RawTable

__all__ = ["FIELDS", "as_bool", "coerce_column", "is_missing", "short"]
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 40, 40, 4, 4, 2
_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}


def is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def _as_id(v, from_text):
    if isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return str(int(v))
    raise TypeError(f"expected a string id, got {type(v).__name__} {short(v)}")


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
        raise TypeError(f"expected an integer, got {type(v).__name__} {short(v)}")
    if not -_INT_LIMIT <= out <= _INT_LIMIT:
        raise TypeError(f"integer out of range: {short(v)}")
    return out


def _as_float(v, from_text):
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"expected a number, got bool {v}")
    if isinstance(v, (int, float, np.integer, np.floating)):
        try:
            out = float(v)
        except OverflowError:  # a JSON integer with hundreds of digits
            raise TypeError(f"expected a finite number, got an integer too large ({short(v)})") from None
    elif from_text and isinstance(v, str):
        try:
            out = float(v.strip())
        except ValueError:
            raise TypeError(f"expected a number, got {short(v)}") from None
    else:
        raise TypeError(f"expected a number, got {type(v).__name__} {short(v)}")
    if not math.isfinite(out):
        raise TypeError(f"expected a finite number, got {out}")
    if abs(out) > MAX_ABS_REWARD:
        raise TypeError(
            f"magnitude {out:g} exceeds {MAX_ABS_REWARD:g} (sums and group statistics would overflow)"
        )
    return out


def as_bool(v, from_text):
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
    raise TypeError(f"expected true/false, got {type(v).__name__} {short(v)}")


def _as_text(v, from_text):
    if isinstance(v, str):
        return v
    raise TypeError(f"expected a string, got {type(v).__name__} {short(v)}")


def _as_anchor(v, from_text):
    if isinstance(v, (str, list, dict, tuple, np.ndarray)):
        return v
    raise TypeError(f"expected a string, array or object, got {type(v).__name__} {short(v)}")


def short(v, n: int = 40) -> str:
    """A bounded, printable repr (depth- and size-limited, so hostile values stay short)."""
    s = _REPR.repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


_COERCERS = {
    "id": _as_id,
    "int": _as_int,
    "float": _as_float,
    "bool": as_bool,
    "text": _as_text,
    "anchor": _as_anchor,
}
# field -> (coercer, required), from the one table of fields (`crbc_viz.io.fields`).
FIELDS: dict[str, tuple[Callable, bool]] = {
    name: (_COERCERS[kind], name in REQUIRED) for name, kind in FIELD_KINDS.items()
}


def _fast_column(name: str, col: pd.Series, from_text: bool):
    """Vectorised coercion of a clean column; None when the slow, per-value path must look
    (it alone writes the messages)."""
    from pandas.api.types import infer_dtype

    coerce = FIELDS[name][0]
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
    if coerce is as_bool:
        if kind == "b":
            return col.to_numpy(dtype=bool)
        if inferred == "boolean":
            return col.to_numpy(dtype=object)
        return None
    return None


def coerce_column(
    name, series: pd.Series, raw: RawTable, problems: list, bad: np.ndarray, nonfinite: dict[int, str]
):
    """Coerce one known column; every bad value becomes a `Problem` and marks its row bad.
    ``nonfinite`` maps rows whose value was a ``NaN``/``Infinity`` literal to that literal."""
    coerce, required = FIELDS[name]
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
            if is_missing(v):
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
                            f"expected an integer >= 0 and <= {MAX_STEP_IDX}, got {short(out[i])}",
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
    as_bool: "true/false",
    _as_text: "a string",
    _as_anchor: "a string, array or object",
}
