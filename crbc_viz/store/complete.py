"""Whether a log a trainer is writing can be read yet (`incomplete_reason`): its format says it
ends where it ends now. The watcher (`crbc_viz.store.watch`) reads a settled log only then."""

from __future__ import annotations

import gzip
import os
import zlib

_GZ_CHUNK = 1 << 20


def incomplete_reason(path: str) -> str | None:
    """Why the log at ``path`` cannot be complete yet, or None when it can be read: JSONL, NDJSON
    and CSV must end with a newline, JSON with ``]`` or ``}`` (after white space), a ``.gz``
    file must hold a whole gzip stream (and end with a newline inside, for JSONL / CSV), a
    Parquet file must have a footer that reads. An empty file is never complete.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "a.jsonl")
    >>> _ = open(p, "w").write('{"a": 1}\\n{"a": ')
    >>> incomplete_reason(p)
    'does not end with a newline (a line is being written)'
    >>> _ = open(p, "a").write('2}\\n')
    >>> incomplete_reason(p) is None
    True
    """
    low = path.lower()
    try:
        size = os.path.getsize(path)
        if size == 0:
            return "is empty"
        if low.endswith(".gz"):
            return _gzip_reason(path, low[:-3])
        if low.endswith((".parquet", ".pq")):
            return _parquet_reason(path, size)
        with open(path, "rb") as fh:
            fh.seek(max(0, size - 256))
            tail = fh.read()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return _text_reason(low, tail)


def _text_reason(low: str, tail: bytes) -> str | None:
    if low.endswith((".jsonl", ".ndjson", ".csv")):
        return None if tail.endswith(b"\n") else "does not end with a newline (a line is being written)"
    if low.endswith(".json"):
        end = tail.rstrip()
        return (
            None if end.endswith((b"]", b"}")) else "does not end with ] or } (the document is being written)"
        )
    return None


def _gzip_reason(path: str, inner: str) -> str | None:
    """A gzip file is complete when its stream (every member) reaches its end marker."""
    tail = b""
    try:
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read(_GZ_CHUNK):
                tail = (tail + chunk)[-256:]
    except (EOFError, OSError, zlib.error) as exc:
        return f"does not hold a whole gzip stream yet ({str(exc)[:120]})"
    if not tail:
        return "is empty"
    return _text_reason(inner, tail)


def _parquet_reason(path: str, size: int) -> str | None:
    if size < 12:
        return "is too short for a Parquet file (being written)"
    with open(path, "rb") as fh:
        fh.seek(size - 4)
        if fh.read(4) != b"PAR1":
            return "has no Parquet footer yet (being written)"
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except Exception as exc:  # noqa: BLE001  (pyarrow raises several types for a torn footer)
        return f"has a Parquet footer that does not read ({str(exc)[:120]})"
    return None
