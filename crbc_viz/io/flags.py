"""The one reading of a true/false a trainer writes (a trajectory's success, a row's ``done`` or
``active_masks``), shared by every trainer adapter (`crbc_viz.integrations`) and importer
(`crbc_viz.io.importers`), so that no path reads a failure as a success.

A flag is a bool (Python or numpy), or 0 / 1 (an integer, or a float equal to 0.0 or 1.0).
Only where the source really holds text (a CSV file, a TRL completions column written as
strings) is text read too, when ``text=True``: ``true`` / ``false`` / ``1`` / ``0`` in any
case, surrounding blanks ignored. Anything else is not a flag: NaN and None (which
``bool(...)`` would read as true and false), other numbers, other strings (``bool("false")`` is
true) and other objects. The callers name each such row; they never guess.

    >>> flags, bad = read_flags([True, 0, 1.0, float("nan"), "false", None])
    >>> flags.tolist(), bad.tolist()
    ([True, False, True, False, False, False], [3, 4, 5])
    >>> read_flags(["TRUE", " 0 "], text=True)[0].tolist()
    [True, False]
    >>> not_a_flag(float("nan"))
    'expected a bool or 0/1, got float nan'
"""

from __future__ import annotations

import math
import reprlib

import numpy as np

__all__ = ["read_flags", "not_a_flag", "TRUE_TEXT", "FALSE_TEXT"]

#: Text read as a flag where ``text=True`` (lower-cased, stripped).
TRUE_TEXT = frozenset({"true", "1"})
FALSE_TEXT = frozenset({"false", "0"})

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 30, 30, 3, 3, 1


def _one(v, text: bool) -> bool | None:
    """The flag ``v`` stands for, or None when it is not one."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return bool(v) if v in (0, 1) else None
    if isinstance(v, (float, np.floating)):
        return bool(v) if v in (0.0, 1.0) else None  # NaN is neither
    if text and isinstance(v, str):
        s = v.strip().lower()
        return True if s in TRUE_TEXT else False if s in FALSE_TEXT else None
    return None


def read_flags(values, *, text: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Flags of a 1-D sequence (list, numpy array, pandas Series).

    Args:
        values: ``[n]`` the values, one per row.
        text: also read the text ``true`` / ``false`` / ``1`` / ``0`` (only where the source
            writes text).

    Returns:
        ``(flags [n] bool, bad [k] int64)``: each value's flag (False where it is not one) and
        the positions of the values that are not flags, in order.
    """
    arr = values.to_numpy() if hasattr(values, "to_numpy") else values
    if not isinstance(arr, np.ndarray):
        arr = np.empty(len(values), dtype=object)
        arr[:] = list(values)
    arr = arr.reshape(-1) if arr.ndim == 0 else arr
    kind = arr.dtype.kind
    if kind == "b":
        return arr.astype(bool), np.zeros(0, np.int64)
    if kind in "iuf":
        good = (arr == 0) | (arr == 1)
        return arr == 1, np.flatnonzero(~good).astype(np.int64)
    if kind in "OU":
        out = np.zeros(len(arr), dtype=bool)
        bad = []
        for i, v in enumerate(arr.tolist() if kind == "U" else arr):
            f = _one(v, text)
            if f is None:
                bad.append(i)
            else:
                out[i] = f
        return out, np.asarray(bad, dtype=np.int64)
    return np.zeros(len(arr), dtype=bool), np.arange(len(arr), dtype=np.int64)  # bytes, dates, complex


def not_a_flag(value, *, text: bool = False) -> str:
    """Why ``value`` is not a flag, for a message that names its row."""
    expected = "a bool, 0/1 or the text true/false" if text else "a bool or 0/1"
    shown = value.item() if isinstance(value, np.generic) else value  # 3, not np.int64(3)
    shown = "nan" if isinstance(shown, float) and math.isnan(shown) else _REPR.repr(shown)
    return f"expected {expected}, got {type(value).__name__} {shown}"
