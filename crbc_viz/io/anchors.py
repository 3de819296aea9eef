"""Anchor canonicalisation and 64-bit hashing (SCHEMA.md, "Anchor canonicalisation").

- strings are stripped of trailing whitespace;
- arrays (JSON lists of numbers, numpy arrays) hash their shape and float64 bytes;
- objects (and non-numeric lists) hash their sorted, compact JSON.

The hash is BLAKE2b with an 8-byte digest; the key is its 16-digit hex form. Keys are
scoped to a group by the graph layer, which merges anchors only within a group.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

__all__ = ["canonical_anchor_bytes", "anchor_key", "anchor_hash64"]


def _numeric_array(value: list) -> np.ndarray | None:
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):  # ragged nested lists
        return None
    if arr.dtype.kind in "biuf" and arr.dtype != object:
        return arr.astype(np.float64)
    return None


def canonical_anchor_bytes(value: Any) -> bytes:
    """The canonical byte string an anchor observation hashes to."""
    if isinstance(value, str):
        return b"s:" + value.rstrip().encode("utf-8", "surrogatepass")
    if isinstance(value, np.ndarray):
        arr = value.astype(np.float64) if value.dtype.kind in "biuf" else value
        if arr.dtype == np.float64:
            return b"a:" + repr(arr.shape).encode() + b":" + np.ascontiguousarray(arr).tobytes()
        value = arr.tolist()
    if isinstance(value, (list, tuple)):
        arr = _numeric_array(list(value)) if value else None
        if arr is not None:
            return b"a:" + repr(arr.shape).encode() + b":" + np.ascontiguousarray(arr).tobytes()
    return b"j:" + json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              default=str).encode("utf-8", "surrogatepass")


def anchor_hash64(value: Any) -> int:
    """Unsigned 64-bit BLAKE2b hash of the canonical anchor."""
    digest = hashlib.blake2b(canonical_anchor_bytes(value), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def anchor_key(value: Any) -> str:
    """The 16-hex-digit anchor key of an anchor observation."""
    return f"{anchor_hash64(value):016x}"
