"""Whole training runs: a Parquet + DuckDB log store (`LogStore`, `ingest`), trends across
training steps (`crbc_viz.store.trends`), export of scored advantages
(`crbc_viz.store.export`) and the CLI commands (`crbc_viz.store.cli`)."""
from __future__ import annotations

from .store import (CRASH_ENV, IngestReport, LogStore, Part, StoreError, ingest, open_store,
                    parse_group_label)

__all__ = ["LogStore", "Part", "IngestReport", "StoreError", "ingest", "open_store",
           "search_steps", "find_trajectory", "CRASH_ENV", "parse_group_label"]


def search_steps(store, text: str, limit: int = 50):
    """Steps whose action or raw anchor contains ``text`` (case-insensitive); ``store`` is a
    `LogStore` or its folder."""
    s = store if isinstance(store, LogStore) else LogStore(store)
    return s.search_steps(text, limit)


def find_trajectory(store, traj_id: str):
    """Every step of the trajectories named ``traj_id``, with their text."""
    s = store if isinstance(store, LogStore) else LogStore(store)
    return s.find_trajectory(traj_id)
