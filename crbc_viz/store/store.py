"""Compatibility alias: the store was split into `crbc_viz.store.layout` (format, manifests,
parts, lock), `crbc_viz.store.query` (read side) and `crbc_viz.store.ingest` (write side).
Import from `crbc_viz.store` (or those modules); this module re-exports the old names."""

from __future__ import annotations

from .ingest import IngestReport, drop_incomplete, file_digest, ingest
from .layout import CRASH_ENV, DEFAULT_PART_ROWS, TEXT_COLUMNS, Part, StoreError
from .query import LogStore, incomplete_sources, open_store, parse_group_label

__all__ = [
    "LogStore",
    "Part",
    "IngestReport",
    "ingest",
    "open_store",
    "StoreError",
    "incomplete_sources",
    "drop_incomplete",
    "file_digest",
    "DEFAULT_PART_ROWS",
    "TEXT_COLUMNS",
    "CRASH_ENV",
    "parse_group_label",
]
