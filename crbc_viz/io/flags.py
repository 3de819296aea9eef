"""The one reading of a true/false a trainer writes (a trajectory's success, a row's ``done`` or
``active_masks``), shared by every trainer adapter (`crbc_viz.integrations`) and importer
(`crbc_viz.io.importers`), so that no path reads a failure as a success; and the one reading of
a reward, score or return an importer takes from a trainer's file (`read_numbers`).

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

A number (`read_numbers`) is an int or a float (Python or numpy; not a bool: ``True`` is not a
reward) that is finite, or, where ``text=True`` (every importer: a reward written as a string,
``"0.5"``, is read as the number it prints), the text of a decimal number (``0.5``, ``-1``,
``1e-3``, surrounding blanks ignored; not ``nan``, ``inf``, ``0x1``, ``1_000``). None and NaN are
missing (the caller says whether that is allowed); anything else (``"False"``, ``[]``, ``True``,
an integer beyond the float range, ``"1e400"``) is not a number, and the callers name its row.

    >>> nums, bad = read_numbers([1, "0.5", None, "False", True, 10**400])
    >>> nums.tolist()[:2], bad.tolist()
    ([1.0, 0.5], [3, 4, 5])
    >>> not_a_number(True)
    'expected a number, got bool True'
"""

from __future__ import annotations

import math
import re
import reprlib

import numpy as np

__all__ = [
    "read_flags",
    "not_a_flag",
    "read_numbers",
    "not_a_number",
    "is_number_text",
    "TRUE_TEXT",
    "FALSE_TEXT",
]

#: Text read as a flag where ``text=True`` (lower-cased, stripped).
TRUE_TEXT = frozenset({"true", "1"})
FALSE_TEXT = frozenset({"false", "0"})

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 30, 30, 3, 3, 1


def _objects(values) -> np.ndarray:
    """``values`` as a 1-D numpy array (objects, one per value, when it is not an array: a
    value that is itself a list stays one value)."""
    arr = values.to_numpy() if hasattr(values, "to_numpy") else values
    if not isinstance(arr, np.ndarray):
        arr = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):
            arr[i] = v
    return arr.reshape(-1) if arr.ndim == 0 else arr


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
    arr = _objects(values)
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


#: The text of a decimal number (what ``str`` / ``json`` print for a finite float or an int).
_NUMBER_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
#: Longest text read as a number (a longer one is not a number anyone logged).
_MAX_NUMBER_TEXT = 400


def is_number_text(v) -> bool:
    """Whether ``v`` is a string holding the text of a decimal number (see `read_numbers`)."""
    return isinstance(v, str) and len(v) <= _MAX_NUMBER_TEXT and _NUMBER_TEXT.fullmatch(v.strip()) is not None


def _number(v, text: bool) -> float | None:
    """The number ``v`` stands for (NaN when missing), or None when it is not one."""
    if v is None or (isinstance(v, (float, np.floating)) and math.isnan(v)):
        return math.nan
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        try:
            out = float(v)
        except OverflowError:  # an integer with hundreds of digits
            return None
    elif text and is_number_text(v):
        out = float(v.strip())
    else:
        return None
    return out if math.isfinite(out) else None


def read_numbers(values, *, text: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Numbers of a 1-D sequence (list, numpy array, pandas Series): rewards, scores, returns.

    Args:
        values: ``[n]`` the values, one per row.
        text: also read the text of a decimal number (every importer does).

    Returns:
        ``(numbers [n] float64, bad [k] int64)``: each value as a float (NaN where it is missing
        or is not a number) and the positions of the values that are not numbers (not the
        missing ones), in order.
    """
    arr = _objects(values)
    kind = arr.dtype.kind
    if kind in "iuf":
        out = arr.astype(np.float64)
        bad = np.flatnonzero(np.isinf(out)).astype(np.int64)
        out[bad] = np.nan
        return out, bad
    out = np.full(len(arr), np.nan)
    if kind not in "OU":  # bools, bytes, dates
        return out, np.arange(len(arr), dtype=np.int64)
    bad = []
    for i, v in enumerate(arr.tolist() if kind == "U" else arr):
        x = _number(v, text)
        if x is None:
            bad.append(i)
        else:
            out[i] = x
    return out, np.asarray(bad, dtype=np.int64)


def not_a_number(value) -> str:
    """Why ``value`` is not a number, for a message that names its row."""
    shown = value.item() if isinstance(value, np.generic) else value
    if isinstance(shown, int) and not isinstance(shown, bool):
        return f"expected a finite number, got an integer too large ({_REPR.repr(shown)})"
    if isinstance(shown, float) or is_number_text(shown):
        return f"expected a finite number, got {type(value).__name__} {_REPR.repr(shown)}"
    return f"expected a number, got {type(value).__name__} {_REPR.repr(shown)}"
