"""The canonical schema itself (SCHEMA.md): JSONL, JSON, Parquet or CSV step rows."""

from __future__ import annotations

from ..readers import read_table
from ._common import Imported

NAME = "canonical"
#: What the app calls this format.
TITLE = "canonical log"
SIGNATURE = ("group_id", "traj_id", "step_idx", "reward")
FOLDER = False
OPTIONS = ()


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def read(path: str) -> Imported:
    raw = read_table(path)
    keys = {k: k for k in ("group_id", "traj_id", "step_idx")}
    return Imported(raw, NAME, keys)
