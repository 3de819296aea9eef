"""Whole-batch statistics shown by ``crbc-viz info`` and the app's Data page."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import AnchorGraph

if TYPE_CHECKING:  # `batch_summary` (``crbc-viz info``) runs without pandas
    import pandas as pd

__all__ = ["batch_summary", "group_table", "truncation_known"]


def batch_summary(graph: AnchorGraph) -> dict:
    """Counts and sharing statistics of a batch (plain Python types, JSON-ready)."""
    b = graph.batch
    S = b.num_steps
    shared = graph.shared_step_mask()
    visits = graph.node_visits
    per_group = np.diff(b.group_traj_offsets)
    return {
        "source": b.source,
        "groups": b.num_groups,
        "trajectories": b.num_trajectories,
        "steps": S,
        "anchors": graph.num_nodes,
        "rollouts_per_group": {
            "min": int(per_group.min()),
            "median": float(np.median(per_group)),
            "max": int(per_group.max()),
        }
        if b.num_groups
        else {},
        "success_rate": float(b.traj_success.mean()) if b.num_trajectories else 0.0,
        "truncated_rate": float(b.traj_truncated.mean()) if b.num_trajectories else 0.0,
        "truncated": int(b.traj_truncated.sum()),
        "truncated_success": int((b.traj_truncated & b.traj_success).sum()),
        "truncation_known": truncation_known(b),
        "shared_step_fraction": float(shared.mean()) if S else 0.0,
        "singleton_anchor_fraction": float((visits == 1).mean()) if graph.num_nodes else 0.0,
        "mean_steps_per_trajectory": float(b.traj_len.mean()) if b.num_trajectories else 0.0,
        "warnings": list(b.warnings),
        "skipped": len(b.skipped),
    }


def truncation_known(batch) -> bool:
    """Whether the batch logs ``done`` at all: without it no trajectory can be seen to be
    truncated, and a truncated count of 0 means "not logged", not "none"."""
    if not batch.has_step_column("done"):
        return False
    arrow = batch.arrow_steps
    if arrow is not None:
        return arrow.column("done").null_count < arrow.num_rows
    return bool(batch.steps["done"].notna().any())


def group_table(graph: AnchorGraph) -> pd.DataFrame:
    """One row per group: ids, rollouts, steps, anchors, success rate, truncated rollouts,
    shared-step fraction."""
    import pandas as pd

    b = graph.batch
    G = b.num_groups
    step_group = b.step_group
    shared = graph.shared_step_mask().astype(np.float64)
    steps = np.bincount(step_group, minlength=G)
    return pd.DataFrame(
        {
            "group_index": np.arange(G),
            "run_id": b.groups["run_id"].to_numpy(),
            "train_step": b.groups["train_step"].to_numpy(),
            "group_id": b.groups["group_id"].to_numpy(),
            "rollouts": np.diff(b.group_traj_offsets),
            "steps": steps,
            "anchors": np.diff(graph.group_node_offsets),
            "success_rate": np.bincount(b.traj_group, weights=b.traj_success, minlength=G)
            / np.maximum(np.diff(b.group_traj_offsets), 1),
            # rollouts whose last row says done=false; <NA> where the batch logs no done at all
            "truncated": pd.array(
                np.bincount(b.traj_group, weights=b.traj_truncated, minlength=G).astype(np.int64),
                dtype="Int64",
            )
            if truncation_known(b)
            else pd.array([pd.NA] * G, dtype="Int64"),
            "shared_step_fraction": np.bincount(step_group, weights=shared, minlength=G)
            / np.maximum(steps, 1),
        }
    )
