"""The canonical step fields (SCHEMA.md), their kinds and limits: one table, read by the
schema validator (`crbc_viz.io.schema`) and the columnar lane (`crbc_viz.io.columnar`).

Imports nothing heavy, so the lane (and ``crbc-viz score``) can check a file against it
without pandas.
"""

from __future__ import annotations

__all__ = [
    "REQUIRED",
    "FIELD_KINDS",
    "MAX_STEP_IDX",
    "MAX_ABS_REWARD",
    "INT_LIMIT",
    "LINE_COLUMN",
    "BAD_COLUMN",
    "SIGNAL_JSON",
]

REQUIRED = ("group_id", "traj_id", "step_idx", "reward")

#: field -> kind: ``id`` (a string, or an integer read as its digits), ``int``, ``float``
#: (finite, at most `MAX_ABS_REWARD`), ``bool``, ``text`` (a string) or ``anchor`` (a string,
#: array or object). The fields of `REQUIRED` must be present on every row.
FIELD_KINDS: dict[str, str] = {
    "group_id": "id",
    "traj_id": "id",
    "step_idx": "int",
    "reward": "float",
    "run_id": "id",
    "train_step": "int",
    "action": "text",
    "anchor_obs": "anchor",
    "anchor_key": "id",
    "state_hash": "id",
    "done": "bool",
    "success": "bool",
    "episode_return": "float",
    "is_action_valid": "bool",
    "observation": "text",
    "response": "text",
    "env_name": "text",
    "split": "text",
}

#: Largest accepted ``step_idx`` (contiguity from 0 makes larger values impossible anyway).
MAX_STEP_IDX = 2**31 - 1
#: Largest accepted |reward| / |episode_return|: beyond it, sums and group statistics could
#: overflow to inf, and such values are a logging bug in every environment we know.
MAX_ABS_REWARD = 1e15
#: Largest accepted |integer| in an integer field other than ``step_idx``.
INT_LIMIT = 2**62
#: Internal columns of validation (names no log uses, so a user's "_line" field is kept).
LINE_COLUMN, BAD_COLUMN = "__crbc_line", "__crbc_bad"
#: Optional signal columns whose lists and objects arrive as JSON text from tabular cells.
SIGNAL_JSON = ("rubric", "rubric_active", "influence_edges")
