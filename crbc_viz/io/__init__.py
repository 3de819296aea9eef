"""Loading rollout logs into the canonical data model (SCHEMA.md)."""

from __future__ import annotations

import os

from ..data import RolloutBatch
from ..errors import LoadError, Problem
from .anchors import anchor_hash64, anchor_key, canonical_anchor_bytes
from .fields import REQUIRED
from .readers import FORMATS, detect_format, read_table

__all__ = [
    "load_rollouts",
    "LoadError",
    "Problem",
    "FORMATS",
    "REQUIRED",
    "anchor_key",
    "anchor_hash64",
    "canonical_anchor_bytes",
    "detect_format",
]


def load_rollouts(
    path: str | os.PathLike, *, fmt: str | None = None, lenient: bool = False, success_threshold: float = 0.0
) -> RolloutBatch:
    """Load and validate a rollout log (JSONL, JSON, Parquet or CSV; ``.gz`` allowed).

    Args:
        path: the log file.
        fmt: force a format (``jsonl``, ``json``, ``parquet``, ``csv``); default from the name.
        lenient: skip bad rows (and the trajectories they break) instead of failing; what was
            skipped is listed in ``batch.skipped``.
        success_threshold: a trajectory without a ``success`` field succeeded when its
            ``episode_return`` (or summed reward) exceeds this.

    Raises:
        LoadError: listing every problem with file, line (or row) and field.
    """
    from .columnar import batch_from_arrow, has_lists, read_columnar

    path = str(path)
    table = read_columnar(path, fmt)
    parquet = table is not None and (fmt or detect_format(path)) == "parquet"
    if table is not None:
        batch = batch_from_arrow(table, path, success_threshold=success_threshold, lists=not parquet)
        if batch is not None:  # a clean canonical file, read without pandas
            return batch
    from .assemble import build_batch  # every guard and message of the schema
    from .readers.jsonl_arrow import raw_from_arrow
    from .readers.parquet import raw_from_parquet

    if parquet:
        raw = raw_from_parquet(path, table)
    elif table is not None and not has_lists(table):  # lists: the streaming reader's to read
        raw = raw_from_arrow(path, table)
    else:
        raw = read_table(path, fmt)
    return build_batch(raw, lenient=lenient, success_threshold=success_threshold)
