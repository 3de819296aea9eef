"""The GRPO group advantage A^G — the one copy every estimator, backend and integration uses
(numpy arrays and torch tensors alike: `crbc_viz.ops.xp`)."""

from __future__ import annotations

import numpy as np

from ..graph import AnchorGraph
from .returns import trajectory_outcome
from .segments import no_spread, segment_stats
from .xp import as_numpy, float_array, namespace

__all__ = ["group_advantage", "outcome_advantage", "row_advantage"]


def outcome_advantage(R, g, num: int, *, norm: str = "std", ddof: int = 1, eps: float = 1e-6, weights=None):
    """A^G_i = (R_i − mean_j R_j) / (F_norm + eps) per element of ``R``, segments ``g`` ``[num]``.

    The arrays' library decides where it runs (numpy, or torch on its device). ``weights`` weigh
    each element's share of the mean and std (verl-agent's cross-steps statistics). A one-element
    segment (or a single weighted row) gets mean 0 and std 1, as verl's
    ``compute_grpo_outcome_advantage`` does; any other segment with no spread (equal values, or a
    std that rounds to 0) gets exactly 0 whatever ``eps``, 0 included (ESTIMATORS.md §1:
    "A = 0/eps = 0"). ``norm='mean'``: no division (Dr.GRPO / RLOO mean_norm).
    """
    R = float_array(R)
    xp = namespace(R)
    cnt, mean, std = segment_stats(R, g, num, ddof=ddof, weights=weights)
    single = cnt <= 1
    flat = ~single & (no_spread(R, g, num) | (std == 0))
    mean = xp.where(single, 0.0, mean)
    std = xp.where(single | flat, 1.0, std)
    centered = xp.where(flat[g], 0.0, R - mean[g])
    if norm == "mean":
        return centered
    return centered / (std[g] + eps)


def group_advantage(
    graph: AnchorGraph,
    *,
    norm: str = "std",
    ddof: int = 1,
    eps: float = 1e-6,
    stats: str = "trajectory",
    outcome: str = "success",
    to=as_numpy,
) -> np.ndarray:
    """A^G_i = (R_i − mean_j R_j) / (F_norm + eps), one value per trajectory ``[T]``
    (`outcome_advantage` over the graph's trajectories and groups; ``to``: the converter of
    the graph's arrays, `crbc_viz.ops.xp.as_numpy` or the torch backend's to its device).

    ``norm='std'``: F_norm is the group std (GRPO); ``'mean'``: no division (Dr.GRPO / RLOO
    mean_norm). ``stats='cross_steps'`` weighs each rollout by its length (verl-agent's
    ``compute_mean_std_cross_steps``). One-rollout groups and groups with no spread: as
    `outcome_advantage`.
    """
    b = graph.batch
    R = to(trajectory_outcome(graph, outcome))
    w = to(b.traj_len.astype(np.float64)) if stats == "cross_steps" else None
    return outcome_advantage(R, to(b.traj_group), b.num_groups, norm=norm, ddof=ddof, eps=eps, weights=w)


def row_advantage(graph: AnchorGraph, score: np.ndarray, std_norm: bool, eps: float) -> np.ndarray:
    """verl-agent's ``episode_norm_reward`` over step rows ``[S]`` (cross-steps statistics):
    score − mean of the group's rows, divided by std + eps in ``std_norm``; a one-row group
    has mean 0 and std 1, a group whose rows agree within round-off gets 0."""
    b = graph.batch
    return outcome_advantage(score, b.step_group, b.num_groups, norm="std" if std_norm else "mean", eps=eps)
