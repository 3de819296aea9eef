"""GRPO trajectory-level group advantage A^G (ESTIMATORS.md §1)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import AnchorGraph
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["GRPOParams", "grpo", "trajectory_outcome", "group_advantage"]


@dataclass(frozen=True)
class GRPOParams:
    norm: str = param("std", "F_norm: 'std' divides by the group std (GRPO), 'mean' uses 1 "
                      "(Dr.GRPO / RLOO-style mean_norm)", choices=("std", "mean"))
    ddof: int = param(1, "std degrees of freedom: 1 = Bessel-corrected sample std (verl), "
                      "0 = population std (TRACE)", low=0, high=1)
    eps: float = param(1e-6, "added to the std", low=0.0, high=1.0)
    stats: str = param("trajectory", "'trajectory': one value per rollout; 'cross_steps': "
                       "verl-agent compute_mean_std_cross_steps (rollouts weigh by length)",
                       choices=("trajectory", "cross_steps"))
    outcome: str = param("success", "R_i: the success indicator (1/0) or the logged episode return",
                         choices=("success", "return"))


def trajectory_outcome(graph: AnchorGraph, outcome: str = "success") -> np.ndarray:
    """R_i per trajectory ``[T]``: success indicator or episode return."""
    b = graph.batch
    if outcome == "success":
        return b.traj_success.astype(np.float64)
    if outcome == "return":
        return b.traj_return.astype(np.float64)
    raise ValueError(f"outcome must be 'success' or 'return', got {outcome!r}")


def group_advantage(graph: AnchorGraph, *, norm: str = "std", ddof: int = 1, eps: float = 1e-6,
                    stats: str = "trajectory", outcome: str = "success") -> np.ndarray:
    """A^G_i = (R_i − mean_j R_j) / (F_norm + eps), one value per trajectory ``[T]``.

    A one-rollout group (or one step row under ``cross_steps``) gets mean 0 and std 1,
    as verl's ``compute_grpo_outcome_advantage`` does; a group with equal outcomes gets 0.
    """
    b = graph.batch
    R = trajectory_outcome(graph, outcome)
    w = b.traj_len.astype(np.float64) if stats == "cross_steps" else np.ones_like(R)
    g = b.traj_group
    G = b.num_groups
    cnt = np.bincount(g, weights=w, minlength=G)
    mean = np.bincount(g, weights=w * R, minlength=G) / np.maximum(cnt, 1)
    sq = np.bincount(g, weights=w * (R - mean[g]) ** 2, minlength=G)
    std = np.sqrt(sq / np.maximum(cnt - ddof, 1))
    single = cnt <= 1
    mean = np.where(single, 0.0, mean)
    std = np.where(single, 1.0, std)
    if norm == "mean":
        return R - mean[g]
    return (R - mean[g]) / (std[g] + eps)


def grpo(graph: AnchorGraph, *, norm: str = "std", ddof: int = 1, eps: float = 1e-6,
         stats: str = "trajectory", outcome: str = "success") -> CreditResult:
    """GRPO: every step of a rollout gets its trajectory's group advantage.

        A^G_i = (R_i − mean_j R_j) / (std_j R_j + eps)

    Paper: DeepSeekMath (arXiv 2402.03300); restated as CRBC Eq. 3, GRAFT Eq. 2.

    Args:
        graph: the anchor graph (only its batch's trajectories are used).
        norm, ddof, eps, stats, outcome: see `GRPOParams`.

    Returns:
        `CreditResult` with ``credit = advantage = A^G`` per step ``[S]``; value and
        q_value are NaN (GRPO defines neither).

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`GRPOParams`).

    Notes:
        One-rollout groups get mean 0 / std 1; all-equal groups get 0.

    >>> from crbc_viz import load_rollouts, build_graph
    >>> g = build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl"))
    >>> [round(float(x), 4) for x in group_advantage(g)]
    [0.866, -0.866, -0.866, 0.866]
    """
    params = GRPOParams(norm=norm, ddof=ddof, eps=eps, stats=stats, outcome=outcome)
    adv = group_advantage(graph, norm=norm, ddof=ddof, eps=eps, stats=stats, outcome=outcome)
    step_adv = adv[graph.batch.step_traj]
    nan = np.full_like(step_adv, np.nan)
    return CreditResult("grpo", params, graph, nan, nan.copy(), step_adv, step_adv.copy())


register(EstimatorSpec(
    name="grpo", title="GRPO trajectory-level group advantage",
    paper="Shao et al., DeepSeekMath (arXiv 2402.03300); ESTIMATORS.md §1",
    equation="A^G_i = (R_i − mean_j R_j) / (std_j R_j + eps)", section="§1",
    fn=grpo, params_cls=GRPOParams))
