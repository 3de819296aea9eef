"""Trajectory outcomes of a validated, sorted step table (docs/schema.md, "Success and
truncation"): each trajectory's return, success and truncation, with notes where the log's
own flags decide against the rule."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .coerce import is_missing, short

__all__ = ["trajectory_outcomes"]


def trajectory_outcomes(
    table: pd.DataFrame, t_codes: np.ndarray, traj_offsets: np.ndarray, success_threshold: float, path: str
):
    """(success [T], truncated [T], return [T], notes) of the trajectories of a sorted table.

    - return: the last logged ``episode_return``, else the sum of ``reward``;
    - success: the last logged ``success`` value, else return > ``success_threshold``;
    - truncated: the last row says ``done=false``. Rows with no ``done`` value (or a file with
      no ``done`` field) say nothing, so such trajectories are taken as ended;
    - a truncated trajectory is a failure, unless the trainer logged ``success=true`` for it:
      the explicit flag wins (and is counted in a note), a success inferred from the return
      or the rewards does not.
    """
    num_t = len(traj_offsets) - 1
    notes: list[str] = []
    step_reward = table["reward"].to_numpy(dtype=np.float64)
    traj_return = np.add.reduceat(step_reward, traj_offsets[:-1]) if len(step_reward) else np.zeros(0)
    if "episode_return" in table:
        er = _last_non_null(table["episode_return"].to_numpy(dtype=object), t_codes, num_t)
        has = np.array([v is not None for v in er], dtype=bool)
        traj_return[has] = np.array([v for v in er[has]], dtype=np.float64)
    traj_success = traj_return > success_threshold
    explicit_true = np.zeros(num_t, dtype=bool)
    if "success" in table:
        col = table["success"].to_numpy(dtype=object)
        sv = _last_non_null(col, t_codes, num_t)
        has = np.array([v is not None for v in sv], dtype=bool)
        traj_success[has] = np.array([bool(v) for v in sv[has]], dtype=bool)
        explicit_true = has & traj_success
        flips = _true_then_false(col, t_codes, num_t)
        if flips.any():
            notes.append(
                f"{path}: {int(flips.sum())} trajectorie(s) log success=true on a row and "
                f"success=false on a later row (first: {_traj_label(table, traj_offsets, flips)}); "
                f"the last logged value is the trajectory's success"
            )
    traj_truncated = np.zeros(num_t, dtype=bool)
    if "done" in table:
        dv = table["done"].to_numpy(dtype=object)[traj_offsets[1:] - 1]
        traj_truncated = np.array([not is_missing(v) and not bool(v) for v in dv], dtype=bool)
    kept = traj_truncated & explicit_true
    traj_success &= ~traj_truncated | kept
    if kept.any():
        notes.append(
            f"{path}: {int(kept.sum())} truncated trajectorie(s) (last row done=false) "
            f"log success=true (first: {_traj_label(table, traj_offsets, kept)}); the "
            f"logged success is kept, other truncated trajectories are failures"
        )
    return traj_success, traj_truncated, traj_return, notes


def _true_then_false(col: np.ndarray, t_codes: np.ndarray, num_t: int) -> np.ndarray:
    """Per trajectory of a sorted table: a ``success`` true on one row and false on a later one
    (false then true is the usual per-step "won so far" flag and is not flagged)."""
    miss = pd.isna(col)
    val = np.where(miss, -1, np.where(miss, False, col).astype(bool)).astype(np.int8)
    pos = np.arange(len(col))
    first_true = np.full(num_t, len(col), dtype=np.int64)
    last_false = np.full(num_t, -1, dtype=np.int64)
    np.minimum.at(first_true, t_codes[val == 1], pos[val == 1])
    np.maximum.at(last_false, t_codes[val == 0], pos[val == 0])
    return first_true < last_false


def _traj_label(table: pd.DataFrame, traj_offsets: np.ndarray, mask: np.ndarray) -> str:
    r = traj_offsets[int(np.flatnonzero(mask)[0])]
    return f"trajectory {short(table['traj_id'].iat[r])} of group {short(table['group_id'].iat[r])}"


def _last_non_null(values, t_codes: np.ndarray, num_t: int) -> np.ndarray:
    """Per trajectory, the last non-null value of a step column (None where all are null)."""
    ser = pd.Series(np.asarray(values, dtype=object))
    last = ser.groupby(t_codes, sort=True).last()  # skips nulls
    out = np.full(num_t, None, dtype=object)
    out[last.index.to_numpy()] = last.to_numpy(dtype=object)
    return np.array([None if is_missing(v) else v for v in out], dtype=object)
