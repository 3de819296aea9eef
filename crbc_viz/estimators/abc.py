"""ABC — Answer-Backtracked Credit assignment (ABSeeker) (ESTIMATORS.md §10)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EstimatorInputError
from ..graph import AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.returns import discounted_returns
from ..ops.segments import segment_zscore
from ..ops.signals import float_signal
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["ABCParams", "abc", "sft_weight"]


@dataclass(frozen=True)
class ABCParams:
    gamma: float = param(0.25, "discount γ of the step advantage A_t = Σ_k γ^(k−t) r̂_k", low=0.0, high=1.0)
    pool: str = param(
        "group",
        "pool of the score z-score ([I]; unstated): 'group' = all steps of "
        "all rollouts of the question, 'trajectory' = one rollout",
        choices=("group", "trajectory"),
    )
    ddof: int = param(1, "std degrees of freedom of the score z-score ([I]; unstated)", low=0, high=1)
    eps: float = param(1e-6, "added to the std of the score z-score", low=0.0, high=1.0)
    w_outcome: float = param(
        0.0,
        "weight of GRPO's A^E added to A ([I]; unstated whether the "
        "outcome is added: the ±1.0 submit term already encodes it)",
        low=0.0,
        high=100.0,
    )


def sft_weight(score: np.ndarray) -> np.ndarray:
    """ABC-SFT per-turn loss weight w(r) = 2·σ(2(r − 1)), so w(1) = 1 ``[S]``."""
    return 2.0 / (1.0 + np.exp(-2.0 * (np.asarray(score, dtype=np.float64) - 1.0)))


def _abc(graph: AnchorGraph, p: ABCParams) -> CreditResult:
    """ABC-GRPO: clue-anchored judge scores, z-scored in the rollout group and discounted.

        r̂_{i,t} = (r_{i,t} − mean) / (std + eps)        over the group's steps
        A_{i,t} = Σ_{k≥t} γ^(k−t) · r̂_{i,k}             (γ = 0.25)
        advantage = A_{i,t} + w_outcome · A^E_i

    r_{i,t} ∈ [0, 2] is the judge's score: neutral 1.0, +0.8 per discovered or verified
    clue, +0.4 per eliminated wrong candidate, −0.8 per wrongly discarded clue, ±1.0 for
    submitting the verified / a wrong answer, clipped to [0, 2].

    Paper: Lu et al., "ABSeeker: Training Long-Horizon Search Agents via Answer-Backtracked
    Credit Assignment", arXiv 2608.05102, ABC-GRPO (read through digests, [S]; no
    equation numbers seen).

    Args:
        graph: anchor graph; steps ``[S]`` carry ``judge_score``.
        p: the checked `ABCParams` (`abc` takes its fields as keywords).

    Returns:
        `CreditResult` ``[S]``: value = q_value = NaN, credit = A, advantage =
        A + w_outcome·A^E. `sft_weight` gives the ABC-SFT weights.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`ABCParams`).
        MissingSignalError: no ``judge_score`` column.
        EstimatorInputError: a missing, non-finite or out-of-[0, 2] score (naming group / traj / step).

    Notes:
        A pool with one step or equal scores gives r̂ = 0.

    >>> import numpy as np
    >>> [round(float(x), 4) for x in sft_weight(np.array([1.8, 1.0, 0.2, 2.0]))]
    [1.664, 1.0, 0.336, 1.7616]
    """
    gamma, pool, ddof, eps, w_outcome = p.gamma, p.pool, p.ddof, p.eps, p.w_outcome
    if pool not in ("group", "trajectory"):
        raise EstimatorInputError(f"pool must be 'group' or 'trajectory', got {pool!r}")
    score = float_signal(graph, "abc", "judge_score", low=0.0, high=2.0)
    b = graph.batch
    seg, num = (b.step_group, b.num_groups) if pool == "group" else (b.step_traj, b.num_trajectories)
    r_hat, _, _, _ = segment_zscore(score, seg, num, ddof=ddof, eps=eps)
    a = discounted_returns(graph, r_hat, gamma)
    adv = a + w_outcome * group_advantage(graph)[b.step_traj] if w_outcome else a.copy()
    nan = np.full(b.num_steps, np.nan)
    return CreditResult("abc", p, graph, nan, nan.copy(), a, adv)


abc = register(
    EstimatorSpec(
        name="abc",
        title="ABC — Answer-Backtracked Credit (ABSeeker)",
        paper="Lu et al., ABSeeker: Training Long-Horizon Search Agents via Answer-Backtracked Credit "
        "Assignment (arXiv 2608.05102)",
        equation="r̂ = z-score of judge scores in the group;  A_t = Σ_{k≥t} γ^(k−t) r̂_k  (ABC-GRPO)",
        section="§10",
        kernel=_abc,
        params_cls=ABCParams,
        requires=("judge_score",),
    )
)
