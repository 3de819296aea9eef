"""Whole training runs: a Parquet + DuckDB log store. `layout` (format, manifests, parts, lock),
`query` (the read side: `LogStore`; `manifests` what the manifests say, `scan` how its queries
reach the parts), `ingest` (the write side: `ingest`, `drop_incomplete`), `identity` (which source
a log is: the key its manifest is filed under), `stream` (a large source read in chunks cut at
group boundaries), `watch` (``ingest --watch``; `complete` whether a log can be read yet,
`watch_status` what the app reads of it), `s3` (a store at ``s3://BUCKET/PREFIX``: its paths and
the one-writer lease). Trends and export live in `crbc_viz.analysis`.

Note: the package attribute ``crbc_viz.store.ingest`` is the `ingest` function; the module is
``sys.modules["crbc_viz.store.ingest"]`` (``importlib.import_module``)."""

from __future__ import annotations

from .ingest import IngestReport, drop_incomplete, ingest
from .layout import CRASH_ENV, Part, StoreError
from .query import LogStore, incomplete_sources, open_store, parse_group_label

__all__ = [
    "LogStore",
    "Part",
    "IngestReport",
    "StoreError",
    "ingest",
    "open_store",
    "search_steps",
    "find_trajectory",
    "CRASH_ENV",
    "parse_group_label",
    "incomplete_sources",
    "drop_incomplete",
]


def search_steps(store, text: str, limit: int = 50):
    """Steps whose action or raw anchor contains ``text`` (case-insensitive); ``store`` is a
    `LogStore` or its folder."""
    s = store if isinstance(store, LogStore) else LogStore(store)
    return s.search_steps(text, limit)


def find_trajectory(store, traj_id: str):
    """Every step of the trajectories named ``traj_id``, with their text."""
    s = store if isinstance(store, LogStore) else LogStore(store)
    return s.find_trajectory(traj_id)
