"""Sorted step rows -> `RolloutBatch`: the one place batch offsets are assembled.

Loaders (`crbc_viz.io.schema.build_batch`), the store's read side and group selection
(`RolloutBatch.select_groups`) all arrive at the same point: a table of step rows, the
group and trajectory each row belongs to, and per-trajectory outcomes. The functions here turn
that into the batch's offset arrays without a per-step (or per-trajectory) Python loop:

- `row_codes(*columns)`: integer codes of row tuples in first-occurrence order (the codes
  ``pandas.MultiIndex.factorize`` gives, missing values one code of their own), from one hash
  factorisation per column;
- `sort_rows(group_codes, traj_codes, step_idx)`: the order group → trajectory → step and the
  `Layout` (offsets) of the rows in that order;
- `assemble(steps, layout, ...)`: the `RolloutBatch` of rows already in that order;
- `ranges(starts, stops)`: the concatenated ``arange(start, stop)`` of many ranges, and
  `Layout` (offsets from trajectory lengths): defined beside `RolloutBatch` in
  `crbc_viz.data`, whose `select_groups` uses them too (data sits below io), re-exported here.

Axis vocabulary (STYLE.md): ``S`` steps, ``T`` trajectories, ``G`` groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..data import GROUP_KEY, Layout, RolloutBatch, ranges

if TYPE_CHECKING:  # `sort_rows` and `layout` run without pandas (the columnar lane uses them)
    import pandas as pd

__all__ = ["row_codes", "sort_rows", "Layout", "layout", "assemble", "ranges"]


def _column_codes(col) -> np.ndarray:
    import pandas as pd

    if isinstance(col, np.ndarray) and col.dtype.kind in "iu" and col.ndim == 1:
        values = col
    else:
        values = col.to_numpy() if isinstance(col, (pd.Series, pd.Index)) else np.asarray(col)
    codes, _ = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False)


def row_codes(*columns) -> np.ndarray:
    """Codes ``[S]`` of the row tuples ``zip(*columns)``, numbered in order of first
    occurrence (equal to ``pd.MultiIndex.from_arrays(columns).factorize()[0]``: ``None`` and
    ``NaN`` are one missing value with a code of its own). Each column is factorised once; the
    codes of a pair of columns combine as ``a * (max(b) + 1) + b`` and are factorised again,
    so the order of first occurrence is kept."""
    import pandas as pd

    if not columns:
        raise ValueError("row_codes needs at least one column")
    codes = _column_codes(columns[0])
    for col in columns[1:]:
        b = _column_codes(col)
        if len(b) != len(codes):
            raise ValueError("row_codes: columns differ in length")
        width = int(b.max()) + 1 if len(b) else 1
        codes, _ = pd.factorize(codes * width + b)
        codes = codes.astype(np.int64, copy=False)
    return codes


def layout(group_codes: np.ndarray, traj_codes: np.ndarray) -> Layout:
    """The `Layout` of rows already sorted so that each trajectory's rows are contiguous and
    each group's trajectories are contiguous, groups numbered 0..G-1 in order of appearance.
    ``traj_codes`` need only differ between neighbouring trajectories (any labels)."""
    g = np.asarray(group_codes, dtype=np.int64)
    t = np.asarray(traj_codes)
    n = len(t)
    if n == 0:
        return Layout.of_lengths(np.zeros(0, np.int64), np.zeros(0, np.int64))
    new_traj = np.empty(n, dtype=bool)
    new_traj[0] = True
    np.not_equal(t[1:], t[:-1], out=new_traj[1:])
    new_traj[1:] |= g[1:] != g[:-1]
    starts = np.flatnonzero(new_traj)
    return Layout.of_lengths(np.diff(np.r_[starts, n]), g[starts])


def sort_rows(
    group_codes: np.ndarray, traj_codes: np.ndarray, step_idx: np.ndarray
) -> tuple[np.ndarray, Layout]:
    """(order, layout): the stable order group → trajectory → ``step_idx`` of the rows, and
    the `Layout` of the rows taken in that order. Groups and trajectories are ordered by their
    codes (first occurrence when they come from `row_codes`)."""
    g = np.asarray(group_codes, dtype=np.int64)
    order = np.lexsort((np.asarray(step_idx, dtype=np.int64), np.asarray(traj_codes), g))
    return order, layout(g[order], np.asarray(traj_codes)[order])


def assemble(
    steps: pd.DataFrame,
    lay: Layout,
    *,
    step_anchor_hash: np.ndarray,
    traj_success: np.ndarray,
    traj_truncated: np.ndarray,
    traj_return: np.ndarray,
    source: str = "",
    warnings: Sequence[str] = (),
    skipped: Sequence[str] = (),
    groups: pd.DataFrame | None = None,
    step_success: bool = True,
) -> RolloutBatch:
    """The `RolloutBatch` of ``steps`` (rows in `Layout` order, index reset by the caller or
    not: it is reset here). ``groups`` defaults to the `GROUP_KEY` columns of each group's
    first row; with ``step_success`` the ``success`` column becomes the trajectory's outcome
    on every one of its rows (as the loaders promise)."""
    steps = steps.reset_index(drop=True)
    if step_success:
        steps["success"] = np.repeat(np.asarray(traj_success, dtype=bool), lay.traj_len)
    if groups is None:
        groups = steps.iloc[lay.group_first][list(GROUP_KEY)].reset_index(drop=True)
    return RolloutBatch(
        steps=steps,
        step_traj=lay.step_traj,
        step_anchor_hash=step_anchor_hash,
        traj_offsets=lay.traj_offsets,
        traj_group=lay.traj_group,
        traj_success=np.asarray(traj_success, dtype=bool),
        traj_truncated=np.asarray(traj_truncated, dtype=bool),
        traj_return=np.asarray(traj_return, dtype=np.float64),
        group_traj_offsets=lay.group_traj_offsets,
        groups=groups,
        source=source,
        warnings=tuple(warnings),
        skipped=tuple(skipped),
    )
