"""Anchor canonicalisation and 64-bit hashing (docs/schema.md, "Anchor identity").

One anchor has one identity whatever the file format carried it:

- a string whose text (ignoring surrounding whitespace) is a JSON array or object is that
  array or object: a CSV or Parquet cell can only carry ``{"b": 1, "a": 2}`` as JSON text, and
  it must hash like the same object in JSONL;
- other strings are normalised to Unicode NFC (canonically equivalent spellings, such as a
  precomposed "é" and "e" + combining acute, are one anchor) and stripped of trailing
  whitespace;
- numbers compare by value: ``1`` and ``1.0`` are one value, as are ``0`` and ``-0.0``;
- booleans are not numbers: ``true`` is not ``1`` and ``[true, false]`` is not ``[1, 0]``, at
  every depth (Python's ``True == 1`` and numpy's bool-to-int casts are not followed);
- rectangular numeric arrays (JSON lists of numbers, numpy arrays) hash their shape and
  float64 bytes; shape counts, so ``[[1, 2], [3, 4]]`` is not ``[1, 2, 3, 4]``; rectangular
  boolean arrays hash their shape and one byte per element under their own prefix; an array
  mixing booleans and numbers hashes as JSON (``[true, 2]``);
- objects (and other lists) hash their sorted, compact JSON after the rules above are
  applied to every key and value inside them.

The hash is BLAKE2b with an 8-byte digest; the key is its 16-digit hex form. Keys are
scoped to a group by the graph layer, which merges anchors only within a group.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from typing import Any

import numpy as np

__all__ = ["canonical_anchor_bytes", "anchor_key", "anchor_hash64", "parse_json_text"]


def _nfc(s: str) -> str:
    return s if s.isascii() or unicodedata.is_normalized("NFC", s) else unicodedata.normalize("NFC", s)


def parse_json_text(s: str):
    """The JSON array or object that the text ``s`` spells (surrounding whitespace ignored),
    or None when ``s`` is not such a text."""
    t = s.strip()
    if len(t) < 2 or (t[0], t[-1]) not in (("[", "]"), ("{", "}")):
        return None
    try:
        v = json.loads(t)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, (list, dict)) else None


_BOOL_TYPES = frozenset({bool, np.bool_})
_NESTED_TYPES = (list, tuple, np.ndarray)


def _has_bool(value: list) -> bool:
    """Whether a (nested) list holds a boolean anywhere (numpy would cast it to a number)."""
    stack = [value]
    while stack:
        seq = stack.pop()
        types = set(map(type, seq))  # one pass in C; isinstance per element is far slower
        if not _BOOL_TYPES.isdisjoint(types):
            return True
        if any(issubclass(t, _NESTED_TYPES) for t in types):
            for x in seq:
                if isinstance(x, (list, tuple)):
                    stack.append(x)
                elif isinstance(x, np.ndarray) and (x.dtype.kind == "b" or x.dtype == object):
                    stack.append(x.tolist())
    return False


def _rectangular_array(value: list) -> np.ndarray | None:
    """The list as a boolean or float64 array when it is rectangular and all booleans or all
    numbers; None otherwise (ragged, other leaves, or booleans mixed with numbers)."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):  # ragged nested lists
        return None
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind in "iuf" and not _has_bool(value):
        return arr.astype(np.float64)
    return None


def _array_bytes(arr: np.ndarray) -> bytes:
    if arr.dtype.kind == "b":
        return b"b:" + repr(arr.shape).encode() + b":" + np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
    arr = np.ascontiguousarray(arr, dtype=np.float64) + 0.0  # + 0.0 turns -0.0 into 0.0
    return b"a:" + repr(arr.shape).encode() + b":" + arr.tobytes()


def _number(v):
    """A number by value: integral finite floats become ints."""
    if isinstance(v, (int, np.integer)):
        return int(v)
    f = float(v)
    if math.isfinite(f) and f.is_integer():
        return int(f)
    return f


def _key(k) -> str:
    if isinstance(k, str):
        return _nfc(k)
    return json.dumps(_canonical(k), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _canonical(v):
    """``v`` with the anchor rules applied inside (a JSON-ready structure)."""
    if isinstance(v, str):
        return _nfc(v)
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):  # before int: bool is an int subclass in Python
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)):
        return _number(v)
    if isinstance(v, dict):
        return {_key(k): _canonical(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [_canonical(x) for x in v]
    return str(v)


def canonical_anchor_bytes(value: Any) -> bytes:
    """The canonical byte string an anchor observation hashes to."""
    if isinstance(value, str):
        parsed = parse_json_text(value)
        if parsed is None:
            return b"s:" + _nfc(value).rstrip().encode("utf-8", "surrogatepass")
        value = parsed
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            return _array_bytes(value)
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        arr = _rectangular_array(list(value)) if value else None
        if arr is not None:
            return _array_bytes(arr)
    return b"j:" + json.dumps(
        _canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode("utf-8", "surrogatepass")


def anchor_hash64(value: Any) -> int:
    """Unsigned 64-bit BLAKE2b hash of the canonical anchor."""
    digest = hashlib.blake2b(canonical_anchor_bytes(value), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def anchor_key(value: Any) -> str:
    """The 16-hex-digit anchor key of an anchor observation."""
    return f"{anchor_hash64(value):016x}"
