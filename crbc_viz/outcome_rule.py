"""The one rule that turns a trajectory's logged rows into its outcome (docs/schema.md, "Success
and truncation"), on numpy arrays: every path that derives outcomes calls it — the schema path
(`crbc_viz.io.outcomes`, which words its notes), `crbc_viz.data.batch_from_columns` (the store,
the columnar lane, the generator) and the columnar lane's check for rows that need a note.

For each trajectory, in this order:

1. return: the last logged ``episode_return``, else the sum of its ``reward``;
2. success: the last logged ``success``, else return > ``threshold``;
3. truncated: the last row (highest ``step_idx``) logs ``done`` = false (a row that logs no
   ``done`` says nothing);
4. a truncated trajectory is a failure, unless its own rows log ``success`` = true (the last
   logged value): the explicit flag wins, a success inferred from the return does not.

Rows are stored trajectory by trajectory (``traj_offsets``); each optional column is given as
``(values, logged)``: the ``[S]`` values and whether each row logs one (a missing value is not
read).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Outcomes", "outcome_rule"]


class Outcomes(NamedTuple):
    """Per trajectory ``[T]``."""

    before: np.ndarray  # bool: success by steps 1-2, before the truncation rule
    explicit: np.ndarray  # bool: its rows' last logged ``success`` is true
    truncated: np.ndarray  # bool: its last row logs done = false
    ret: np.ndarray  # float64: its return
    flips: np.ndarray  # bool: it logs success = true on a row and false on a later one

    def success(self, truncated: np.ndarray | None = None) -> np.ndarray:
        """Step 4: success unless truncated (``truncated``: this rule's, or one given), where
        an explicit ``success`` = true wins."""
        cut = self.truncated if truncated is None else np.asarray(truncated, dtype=bool)
        return self.before & (~cut | self.explicit)

    @property
    def kept(self) -> np.ndarray:
        """Truncated trajectories whose logged ``success`` = true keeps them successes."""
        return self.truncated & self.explicit


def outcome_rule(
    traj_offsets: np.ndarray,
    reward: np.ndarray,
    *,
    episode_return: tuple[np.ndarray, np.ndarray] | None = None,
    success: tuple[np.ndarray, np.ndarray] | None = None,
    done: tuple[np.ndarray, np.ndarray] | None = None,
    threshold: float = 0.0,
) -> Outcomes:
    """The outcomes of the trajectories whose rows ``traj_offsets`` ``[T + 1]`` delimit (each
    with at least one row). ``reward``: ``[S]`` float64, logged on every row. The others:
    ``(values [S], logged [S] bool)`` or None where the rows have no such column."""
    offsets = np.asarray(traj_offsets, dtype=np.int64)
    T = len(offsets) - 1
    starts, ends = offsets[:-1], offsets[1:] - 1
    reward = np.asarray(reward, dtype=np.float64)
    ret = np.add.reduceat(reward, starts) if T else np.zeros(0)
    if episode_return is not None:
        values, has = _last_logged(episode_return, offsets)
        ret[has] = np.asarray(values, dtype=np.float64)[has]
    before = ret > threshold
    explicit = np.zeros(T, dtype=bool)
    flips = np.zeros(T, dtype=bool)
    if success is not None:
        values, has = _last_logged(success, offsets)
        last = np.asarray(values, dtype=bool)
        before[has] = last[has]
        explicit = has & last
        flips = _true_then_false(success, offsets)
    truncated = np.zeros(T, dtype=bool)
    if done is not None:
        values, logged = done
        truncated = np.asarray(logged, dtype=bool)[ends] & ~np.asarray(values, dtype=bool)[ends]
    return Outcomes(before, explicit, truncated, ret, flips)


def _last_logged(column: tuple[np.ndarray, np.ndarray], offsets: np.ndarray):
    """(each trajectory's last logged value ``[T]``, whether it logs one ``[T]``)."""
    values, logged = column
    logged = np.asarray(logged, dtype=bool)
    T = len(offsets) - 1
    if logged.all():
        return np.asarray(values)[offsets[1:] - 1], np.ones(T, dtype=bool)
    rows = np.flatnonzero(logged)
    if not len(rows):
        return np.zeros(T, dtype=np.asarray(values).dtype), np.zeros(T, dtype=bool)
    # The last logged row at or before each trajectory's last row, if inside the trajectory.
    k = np.searchsorted(rows, offsets[1:], side="left") - 1
    at = rows[np.maximum(k, 0)]
    return np.asarray(values)[at], (k >= 0) & (at >= offsets[:-1])


def _true_then_false(column: tuple[np.ndarray, np.ndarray], offsets: np.ndarray) -> np.ndarray:
    """Per trajectory: ``success`` true on a row and false on a later one (false then true is
    the usual per-step "won so far" flag)."""
    values, logged = column
    logged = np.asarray(logged, dtype=bool)
    flag = np.asarray(values, dtype=bool)
    S = len(flag)
    if len(offsets) < 2:
        return np.zeros(0, dtype=bool)
    pos = np.arange(S)
    first_true = np.minimum.reduceat(np.where(logged & flag, pos, S), offsets[:-1])
    last_false = np.maximum.reduceat(np.where(logged & ~flag, pos, -1), offsets[:-1])
    return first_true < last_false
