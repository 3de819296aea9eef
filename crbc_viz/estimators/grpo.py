"""GRPO trajectory-level group advantage A^G (ESTIMATORS.md §1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.xp import as_numpy, copy, namespace
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["GRPOParams", "grpo"]


@dataclass(frozen=True)
class GRPOParams:
    norm: str = param(
        "std",
        "F_norm: 'std' divides by the group std (GRPO), 'mean' uses 1 (Dr.GRPO / RLOO-style mean_norm)",
        choices=("std", "mean"),
    )
    ddof: int = param(
        1,
        "std degrees of freedom: 1 = Bessel-corrected sample std (verl), 0 = population std (TRACE)",
        low=0,
        high=1,
    )
    eps: float = param(1e-6, "added to the std", low=0.0, high=1.0)
    stats: str = param(
        "trajectory",
        "'trajectory': one value per rollout; 'cross_steps': "
        "verl-agent compute_mean_std_cross_steps (rollouts weigh by length)",
        choices=("trajectory", "cross_steps"),
    )
    outcome: str = param(
        "success",
        "R_i: the success indicator (1/0) or the logged episode return",
        choices=("success", "return"),
    )


def _grpo(graph: AnchorGraph, p: GRPOParams, *, to=as_numpy) -> CreditResult:
    """GRPO: every step of a rollout gets its trajectory's group advantage.

        A^G_i = (R_i − mean_j R_j) / (std_j R_j + eps)

    Paper: DeepSeekMath (arXiv 2402.03300); restated as CRBC Eq. 3, GRAFT Eq. 2.

    Args:
        graph: the anchor graph (only its batch's trajectories are used).
        p: the checked `GRPOParams` (`grpo` takes its fields as keywords).
        to: the converter of the graph's arrays (`crbc_viz.ops.xp`): numpy here, tensors on a
            device in the torch row, which runs this same function.

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
    adv = group_advantage(graph, norm=p.norm, ddof=p.ddof, eps=p.eps, stats=p.stats, outcome=p.outcome, to=to)
    step_adv = adv[to(graph.batch.step_traj)]
    nan = namespace(step_adv).full_like(step_adv, np.nan)
    return CreditResult("grpo", p, graph, nan, copy(nan), step_adv, copy(step_adv))


grpo = register(
    EstimatorSpec(
        name="grpo",
        title="GRPO trajectory-level group advantage",
        paper="Shao et al., DeepSeekMath (arXiv 2402.03300); ESTIMATORS.md §1",
        equation="A^G_i = (R_i − mean_j R_j) / (std_j R_j + eps)",
        section="§1",
        kernel=_grpo,
        params_cls=GRPOParams,
        value_meaning=("V(s): mean return of the rollouts through s", True, "SUCCESS", "FAILURE"),
    )
)
