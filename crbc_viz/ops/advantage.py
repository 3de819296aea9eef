"""The GRPO group advantage A^G — the one copy every estimator and integration uses."""

from __future__ import annotations

import numpy as np

from ..graph import AnchorGraph
from .returns import trajectory_outcome
from .segments import no_spread, segment_stats

__all__ = ["group_advantage", "row_advantage"]


def group_advantage(
    graph: AnchorGraph,
    *,
    norm: str = "std",
    ddof: int = 1,
    eps: float = 1e-6,
    stats: str = "trajectory",
    outcome: str = "success",
) -> np.ndarray:
    """A^G_i = (R_i − mean_j R_j) / (F_norm + eps), one value per trajectory ``[T]``.

    ``norm='std'``: F_norm is the group std (GRPO); ``'mean'``: no division (Dr.GRPO / RLOO
    mean_norm). ``stats='cross_steps'`` weighs each rollout by its length (verl-agent's
    ``compute_mean_std_cross_steps``). A one-rollout group (or one step row under
    ``cross_steps``) gets mean 0 and std 1, as verl's ``compute_grpo_outcome_advantage``
    does; any other group with no spread (equal outcomes, or a std that rounds to 0) gets
    exactly 0 whatever ``eps``, 0 included (ESTIMATORS.md §1: "A = 0/eps = 0").
    """
    b = graph.batch
    R = trajectory_outcome(graph, outcome)
    w = b.traj_len.astype(np.float64) if stats == "cross_steps" else None
    g = b.traj_group
    G = b.num_groups
    cnt, mean, std = segment_stats(R, g, G, ddof=ddof, weights=w)
    single = cnt <= 1
    flat = ~single & (no_spread(R, g, G) | (std == 0))
    mean = np.where(single, 0.0, mean)
    std = np.where(single | flat, 1.0, std)
    centered = np.where(flat[g], 0.0, R - mean[g])
    if norm == "mean":
        return centered
    return centered / (std[g] + eps)


def row_advantage(graph: AnchorGraph, score: np.ndarray, std_norm: bool, eps: float) -> np.ndarray:
    """verl-agent's ``episode_norm_reward`` over step rows ``[S]`` (cross-steps statistics):
    score − mean of the group's rows, divided by std + eps in ``std_norm``; a one-row group
    has mean 0 and std 1, a group whose rows agree within round-off gets 0."""
    b = graph.batch
    sg, G = b.step_group, b.num_groups
    cnt, mean, std = segment_stats(score, sg, G, ddof=1)
    single = cnt <= 1
    flat = ~single & (no_spread(score, sg, G) | (std == 0))
    mean = np.where(single, 0.0, mean)
    std = np.where(single | flat, 1.0, std)
    out = np.where(flat[sg], 0.0, score - mean[sg])
    return out / (std[sg] + eps) if std_norm else out
