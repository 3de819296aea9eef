"""Trajectory outcomes of a validated, sorted step table (docs/schema.md, "Success and
truncation"): the rule itself is `crbc_viz.outcome_rule` (one copy for every path); here the
table's columns are read for it, with their missing values, and the notes are worded where the
log's own flags decide against the rule."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .._arrow import missing, numbers
from ..outcome_rule import outcome_rule
from .coerce import short, values_of

__all__ = ["trajectory_outcomes"]


def trajectory_outcomes(table: dict, traj_offsets: np.ndarray, success_threshold: float, path: str):
    """(success [T], truncated [T], return [T], notes) of the trajectories of a sorted table
    (the rows of each trajectory contiguous, delimited by ``traj_offsets``).

    - return: the last logged ``episode_return``, else the sum of ``reward``;
    - success: the last logged ``success`` value, else return > ``success_threshold``;
    - truncated: the last row says ``done=false``. Rows with no ``done`` value (or a file with
      no ``done`` field) say nothing, so such trajectories are taken as ended;
    - a truncated trajectory is a failure, unless the trainer logged ``success=true`` for it:
      the explicit flag wins (and is counted in a note), a success inferred from the return
      or the rewards does not.
    """
    notes: list[str] = []
    got = outcome_rule(
        traj_offsets,
        _logged(table, "reward", np.float64)[0],
        episode_return=_logged(table, "episode_return", np.float64),
        success=_logged(table, "success", bool),
        done=_logged(table, "done", bool),
        threshold=success_threshold,
    )
    if got.flips.any():
        notes.append(
            f"{path}: {int(got.flips.sum())} trajectorie(s) log success=true on a row and "
            f"success=false on a later row (first: {_traj_label(table, traj_offsets, got.flips)}); "
            f"the last logged value is the trajectory's success"
        )
    kept = got.kept
    if kept.any():
        notes.append(
            f"{path}: {int(kept.sum())} truncated trajectorie(s) (last row done=false) "
            f"log success=true (first: {_traj_label(table, traj_offsets, kept)}); the "
            f"logged success is kept, other truncated trajectories are failures"
        )
    return got.success(), got.truncated, got.ret, notes


def _logged(cols: dict, name: str, dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """Column ``name`` as ``(values, logged)`` for `outcome_rule` (its validated values: numbers
    or flags, a missing one None), or None where there is no such column."""
    col = cols.get(name)
    if col is None:
        return None
    if isinstance(col, np.ndarray) and col.dtype != object:
        return col.astype(dtype, copy=False), np.ones(len(col), dtype=bool)
    if not isinstance(col, np.ndarray) and (pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)):
        logged = ~missing(col)
        return numbers(col).astype(dtype), logged
    vals = values_of(col)
    logged = np.array([v is not None for v in vals.tolist()], dtype=bool)
    values = np.zeros(len(vals), dtype=dtype)
    values[logged] = vals[logged].astype(dtype)
    return values, logged


def _traj_label(cols: dict, traj_offsets: np.ndarray, mask: np.ndarray) -> str:
    r = int(traj_offsets[int(np.flatnonzero(mask)[0])])
    traj, group = (values_of(cols[c])[r] for c in ("traj_id", "group_id"))
    return f"trajectory {short(traj)} of group {short(group)}"
