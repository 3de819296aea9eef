"""AgentOPSD — recursive self-distillation credit (ESTIMATORS.md §9)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import EstimatorInputError, MissingSignalError
from ..graph import AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.segments import roundoff_tol
from ..ops.signals import is_missing, shown, step_location
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["AgentOPSDParams", "agentopsd", "turn_evidence", "reshape_turns"]


@dataclass(frozen=True)
class AgentOPSDParams:
    gamma: float = param(0.95, "decay γ of the evidence accumulator c_k = γ·c_{k−1} + e_k", low=0.0, high=1.0)
    b: float = param(0.2, "bound b of the reshaping w_k = clip(1 + b·z_k, 1 − b, 1 + b)", low=0.0, high=1.0)
    lam: float = param(0.5, "mix λ of A_k = A_seq·((1 − λ) + λ·w_k)", low=0.0, high=1.0)
    eps0: float = param(
        1e-3, "clip of the prior B_0 = clip(S/G, eps0, 1 − eps0)", low=0.0, high=0.5, low_open=True
    )
    ddof: int = param(
        1,
        "std degrees of freedom of the within-trajectory z_k (unspecified; "
        "[C3] uses the unbiased std, z = 0 for a single turn)",
        low=0,
        high=1,
    )
    eps: float = param(1e-6, "added to the std of z_k", low=0.0, high=1.0)


def turn_evidence(graph: AnchorGraph) -> np.ndarray:
    """e_k per step ``[S]``: ``turn_evidence``, or ``teacher_logprob_sum − student_logprob_sum``."""
    cols = graph.batch.steps.columns
    has_e = "turn_evidence" in cols
    has_ts = "teacher_logprob_sum" in cols and "student_logprob_sum" in cols
    if not has_e and not has_ts:
        # The alternative pair (teacher_logprob_sum + student_logprob_sum) is in the docstring.
        raise MissingSignalError("agentopsd", ["turn_evidence"])
    steps = graph.batch.steps
    S = len(steps)
    ev = steps["turn_evidence"].to_numpy(dtype=object) if has_e else np.full(S, None, dtype=object)
    te = steps["teacher_logprob_sum"].to_numpy(dtype=object) if has_ts else np.full(S, None, object)
    st = steps["student_logprob_sum"].to_numpy(dtype=object) if has_ts else np.full(S, None, object)

    def num(v, field, s):
        if (
            isinstance(v, (bool, np.bool_))
            or not isinstance(v, (int, float, np.integer, np.floating))
            or not math.isfinite(float(v))
        ):
            raise EstimatorInputError(
                f"agentopsd: field '{field}' must be a finite number, got {shown(v)} at "
                f"{step_location(graph, s)}"
            )
        return float(v)

    out = np.empty(S)
    for s in range(S):
        if not is_missing(ev[s]):
            out[s] = num(ev[s], "turn_evidence", s)
        elif not is_missing(te[s]) and not is_missing(st[s]):
            out[s] = num(te[s], "teacher_logprob_sum", s) - num(st[s], "student_logprob_sum", s)
        else:
            raise EstimatorInputError(
                f"agentopsd: field 'turn_evidence' (or both 'teacher_logprob_sum' and "
                f"'student_logprob_sum') is missing at {step_location(graph, s)}"
            )
    return out


def reshape_turns(
    e: np.ndarray,
    a_seq: float,
    b0: float,
    *,
    gamma: float = AgentOPSDParams.gamma,
    b: float = AgentOPSDParams.b,
    lam: float = AgentOPSDParams.lam,
    ddof: int = AgentOPSDParams.ddof,
    eps: float = AgentOPSDParams.eps,
):
    """One trajectory's recursion and reshaping: ``(B [K], q [K], A [K])``."""
    K = len(e)
    c = np.empty(K)
    acc = 0.0
    for k in range(K):  # Eq. 7: c_k = γ c_{k−1} + e_k
        acc = gamma * acc + e[k]
        c[k] = acc
    B = 1.0 / (1.0 + np.exp(-(math.log(b0 / (1.0 - b0)) + c)))  # Eq. 8: B_k = σ(logit B_0 + c_k)
    dB = np.diff(np.r_[b0, B])
    q = np.sign(a_seq) * dB  # Eq. 9
    sd = q.std(ddof=ddof) if K - ddof >= 1 else 0.0
    # q_k subtracts beliefs in [0, 1]: a spread within their round-off is none (zero evidence
    # gives B_k = σ(logit B_0), which may differ from B_0 in the last bit).
    spread = float(q.max() - q.min()) if K else 0.0
    if sd > 0 and spread > roundoff_tol(max(float(np.abs(B).max()), b0), K + 1):
        z = (q - q.mean()) / (sd + eps)
    else:  # one turn, or no spread (A_seq = 0 makes every q_k 0): z = 0, so A = A_seq (§9.5)
        z = np.zeros(K)
    w = np.clip(1.0 + b * z, 1.0 - b, 1.0 + b)  # Eq. 10
    return B, q, a_seq * ((1.0 - lam) + lam * w)  # Eq. 11


def _agentopsd(graph: AnchorGraph, p: AgentOPSDParams) -> CreditResult:
    """AgentOPSD: a per-turn Bayesian belief in success from teacher/student evidence,
    used to reshape the sequence advantage within each trajectory.

        e_k  = Σ_t [log π(y_{k,t} | s_k, c⁺) − log π(y_{k,t} | s_k)]
        B_0  = clip(S/G, eps0, 1 − eps0);   c_0 = 0;   c_k = γ·c_{k−1} + e_k
        B_k  = σ(logit(B_0) + c_k);   q_k = sign(A_seq) · (B_k − B_{k−1})
        z_k  = (q_k − mean_k q) / (std_k q + eps);   w_k = clip(1 + b·z_k, 1 − b, 1 + b)
        A_k  = A_seq · ((1 − λ) + λ·w_k)

    Paper: Wang et al., "AgentOPSD: Recursive Self-Distillation for Agentic Reinforcement
    Learning", arXiv 2608.05987, Eqs. 5–11 (read through paper notes [S] and [C3] code).

    Args:
        graph: anchor graph; steps ``[S]`` carry ``turn_evidence`` (or
            ``teacher_logprob_sum`` and ``student_logprob_sum``).
        p: the checked `AgentOPSDParams` (`agentopsd` takes its fields as keywords).

    Returns:
        `CreditResult` ``[S]``: value = B_k (the belief in success after turn k), q_value =
        NaN, credit = q_k, advantage = A_k (multiplicative on GRPO's A_seq).

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`AgentOPSDParams`).
        MissingSignalError: neither ``turn_evidence`` nor the two log-prob sums are logged.
        EstimatorInputError: a missing or non-finite value (naming group / traj / step).

    Notes:
        A_seq is GRPO's group advantage (unbiased std, eps 1e-6) on the success indicator;
        S/G is the group's success rate. A_seq = 0 gives A = 0 (every q_k is 0: no spread,
        so z = 0 at any eps); a single turn gives A = A_seq; the sign of A_seq is never
        flipped since w_k ∈ [1 − b, 1 + b].

    >>> import numpy as np
    >>> _, _, A = reshape_turns(np.array([0.5, -0.2, 2.0, 0.0]), 0.866, 0.5)
    >>> [round(float(x), 4) for x in A]
    [0.8776, 0.7906, 0.9526, 0.8123]
    """
    gamma, b, lam, eps0, ddof, eps = p.gamma, p.b, p.lam, p.eps0, p.ddof, p.eps
    e = turn_evidence(graph)
    bt = graph.batch
    a_seq = group_advantage(graph)
    G = bt.num_groups
    rate = np.bincount(bt.traj_group, weights=bt.traj_success.astype(np.float64), minlength=G) / np.maximum(
        np.bincount(bt.traj_group, minlength=G), 1
    )
    b0 = np.clip(rate, eps0, 1.0 - eps0)
    value = np.empty(bt.num_steps)
    credit = np.empty(bt.num_steps)
    adv = np.empty(bt.num_steps)
    for i, (lo, hi) in enumerate(zip(bt.traj_offsets[:-1], bt.traj_offsets[1:])):
        value[lo:hi], credit[lo:hi], adv[lo:hi] = reshape_turns(
            e[lo:hi],
            float(a_seq[i]),
            float(b0[bt.traj_group[i]]),
            gamma=gamma,
            b=b,
            lam=lam,
            ddof=ddof,
            eps=eps,
        )
    nan = np.full(bt.num_steps, np.nan)
    return CreditResult("agentopsd", p, graph, value, nan, credit, adv)


agentopsd = register(
    EstimatorSpec(
        name="agentopsd",
        title="AgentOPSD — recursive self-distillation credit",
        paper="Wang et al., AgentOPSD: Recursive Self-Distillation for Agentic Reinforcement Learning "
        "(arXiv 2608.05987)",
        equation="B_k = σ(logit B_0 + c_k), c_k = γc_{k−1} + e_k;  q_k = sign(A_seq)ΔB_k;  "
        "A_k = A_seq((1−λ) + λ·clip(1 + b·z_k))  (Eqs. 5–11)",
        section="§9",
        kernel=_agentopsd,
        params_cls=AgentOPSDParams,
        requires=("turn_evidence",),
    )
)
