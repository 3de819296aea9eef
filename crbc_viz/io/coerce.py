"""Coercion of the canonical fields (SCHEMA.md): each known column of a raw table becomes values
of its kind (`crbc_viz.io.fields.FIELD_KINDS`: id, int, float, bool, text, anchor), every bad
value a `Problem` naming its file, line and field. The columns are Arrow: a clean one (by its
Arrow type: text, whole numbers, numbers, flags) is coerced vectorised, text kept as Arrow; any
other is read value by value (its Python values, `values_of`), which alone writes the messages.

Limits: ``step_idx`` in 0..`MAX_STEP_IDX`; integers within ``INT_LIMIT``; numbers finite and
|x| at most `MAX_ABS_REWARD`; ``NaN``/``Infinity`` in any known field is an error naming the
literal.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from .._arrow import call, cast, missing, numbers
from ..errors import Problem
from .fields import FIELD_KINDS, MAX_ABS_REWARD, MAX_STEP_IDX, REQUIRED
from .fields import INT_LIMIT as _INT_LIMIT
from .readers import RawTable

__all__ = ["FIELDS", "as_bool", "coerce_column", "is_missing", "short"]
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 40, 40, 4, 4, 2
_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}


#: pandas' missing-value singletons (an importer's column may hold them), by class name.
_NA_TYPES = frozenset({"NAType", "NaTType"})


def is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__name__ in _NA_TYPES


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


def values_of(col) -> np.ndarray:
    """The Python values ``[S]`` of one column (an Arrow column of a raw table, or a numpy array
    already coerced) as an object array, a missing value None (an `ObjectColumn` gives what its
    frame would hold: `held`)."""
    from .arrow_rows import ObjectColumn, object_values

    if isinstance(col, np.ndarray):
        return col.astype(object, copy=False)
    if isinstance(col.type, ObjectColumn):
        return object_values(col)
    out = np.empty(len(col), dtype=object)
    out[:] = col.to_pylist()
    return out


def _plain(col):
    """``col`` as one Arrow array of a plain type (dictionary text decoded), or None."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    typ = col.type
    if pa.types.is_dictionary(typ) and _is_text(typ.value_type):
        col = cast(col, typ.value_type)
    if pa.types.is_large_string(col.type):
        col = cast(col, pa.string())
    if col.type in (pa.int64(), pa.float64(), pa.bool_(), pa.string(), pa.null()):
        return col
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        try:
            return cast(col, pa.float64() if pa.types.is_floating(col.type) else pa.int64())
        except pa.ArrowInvalid:  # an unsigned value past int64: the per-value path names it
            return None
    return None


def _is_text(typ) -> bool:
    return pa.types.is_string(typ) or pa.types.is_large_string(typ)


def _objects(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """``values`` as an object array with None where nothing is present (a typed array when
    every row is)."""
    if present.all():
        return values
    out = values.astype(object)
    out[~present] = None
    return out


def _text_numbers(col: pa.Array) -> np.ndarray | None:
    """The float64 values of a text column (blanks around a number allowed), None when one
    does not read as a number (the per-value path names it)."""
    try:
        return numbers(cast(call("utf8_trim_whitespace", col), pa.float64())).astype(np.float64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
        return None


def _float_values(col: pa.Array, from_text: bool) -> np.ndarray | None:
    """The float64 values of a column of numbers (or, read from text, of text), None for any
    other type."""
    if col.type in (pa.int64(), pa.float64()):
        return numbers(col).astype(np.float64)
    if from_text and col.type == pa.string():
        return _text_numbers(col)
    return None


def _fast_column(name: str, col, from_text: bool):
    """Vectorised coercion of a clean Arrow column; None when the slow, per-value path must
    look (it alone writes the messages)."""
    from .arrow_rows import ObjectColumn

    if isinstance(col.type, ObjectColumn):
        return None
    col = _plain(col)
    if col is None:
        return None
    coerce = FIELDS[name][0]
    typ = col.type
    present = ~missing(col)
    if typ == pa.null():
        return np.full(len(col), None, dtype=object)
    if coerce in (_as_id, _as_text, _as_anchor) and typ == pa.string():
        return col  # text as read: kept in Arrow (no per-step objects)
    if coerce is _as_id and typ == pa.int64():
        out = np.full(len(col), None, dtype=object)
        out[present] = [str(v) for v in numbers(col)[present].tolist()]
        return out
    if coerce is _as_int:
        lo, hi = (0, MAX_STEP_IDX) if name == "step_idx" else (-_INT_LIMIT, _INT_LIMIT)
        if typ == pa.int64():
            arr = numbers(col)
            got = arr[present]
            if len(got) == 0 or (got.min() >= lo and got.max() <= hi):
                return _objects(arr.astype(np.int64), present)
            return None
        num = _float_values(col, from_text)
        if num is None:
            return None
        good = num[present]
        if (np.isfinite(good) & (good == np.round(good)) & (good >= lo) & (good <= hi)).all():
            return _objects(np.where(present, num, 0).astype(np.int64), present)
        return None
    if coerce is _as_float:
        num = _float_values(col, from_text)
        if num is None:
            return None
        good = num[present]
        if np.isfinite(good).all() and (np.abs(good) <= MAX_ABS_REWARD).all():
            return _objects(num, present)
        return None
    if coerce is as_bool and typ == pa.bool_():
        return _objects(numbers(col), present)
    return None


def coerce_column(name, col, raw: RawTable, problems: list, bad: np.ndarray, nonfinite: dict[int, str]):
    """Coerce one known column (an Arrow column of the raw table); every bad value becomes a
    `Problem` and marks its row bad. ``nonfinite`` maps rows whose value was a
    ``NaN``/``Infinity`` literal to that literal. Returns a numpy array: typed where every row
    holds a value, else objects with None where one is missing; a text column read as text is
    returned as its Arrow array."""
    coerce, required = FIELDS[name]
    fast = _fast_column(name, col, raw.from_text)
    if fast is not None:
        if required:
            if isinstance(fast, np.ndarray):
                absent = missing(col)
                if fast.dtype == object:
                    absent = absent | np.array([v is None for v in fast.tolist()], dtype=bool)
            else:
                absent = missing(fast)
            for i in np.flatnonzero(absent):
                if int(i) not in nonfinite:
                    problems.append(
                        Problem(raw.path, int(raw.line[i]), name, "missing required field", raw.where)
                    )
            bad |= absent
        out = fast
    else:
        values = values_of(col)
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
        out = np.array(values_of(out), dtype=object)  # a copy: the fast path may return a view
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
