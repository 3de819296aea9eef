"""TRACE — turn-level reward from gold-answer log-probabilities (ESTIMATORS.md §8)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import AnchorGraph
from ..ops.segments import no_spread, segment_stats
from ..ops.signals import float_signal, is_missing, require_columns, step_location  # noqa: F401
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["TRACEParams", "trace", "outcome_advantage", "turn_credit"]


# ---------------------------------------------------------------- the estimator


@dataclass(frozen=True)
class TRACEParams:
    w_out: float = param(1.0, "weight of the outcome advantage A_out", low=0.0, high=100.0)
    w_turn: float = param(0.2, "weight of the turn credit r_t", low=0.0, high=100.0)
    K: int = param(
        3,
        "window of the normalised TD credit (0 = no local credit: only the last "
        "transition gets the terminal fill)",
        low=0,
        high=1000,
    )
    gamma: float = param(0.8, "discount γ inside the window and of the terminal fill", low=0.0, high=1.0)
    gap_eps: float = param(
        0.1, "gap offset ε of d_t = −ℓ_t + ε (not a numerical epsilon)", low=0.0, high=10.0, low_open=True
    )
    terminal_scale: float = param(2.0, "scale c of the terminal fill c·γ^(T−t)·A_out", low=0.0, high=100.0)
    terminal_discount: bool = param(
        True,
        "multiply the terminal fill by γ^(T−t) (verl adaptation); "
        "False = c·A_out (alphaXiv reproduction). The paper's factor "
        "was not seen",
    )
    outcome_eps: float = param(
        1e-6,
        "A_out = (R − mean)/pop std, and 0 when pop std ≤ eps (all-equal and one-rollout groups give 0)",
        low=0.0,
        high=1.0,
    )


def _trace(graph: AnchorGraph, p: TRACEParams) -> CreditResult:
    """TRACE: K-step normalised TD credit on log-gaps of the gold answer, plus the outcome.

        d_t     = −ℓ_t + ε;   V_t = log(d_0 / d_t);   δ_t = V_{t+1} − V_t
        local_t = Σ_{j=0}^{e−t} γ^j δ_{t+j} / Σ_{j=0}^{e−t} γ^j,   e = min(t + K − 1, T − 1)
        r_t     = local_t + c · γ^(T−t) · A_out          when e = T − 1 (terminal fill)
        A_out   = (R − mean) / pop_std                    (0 when pop_std ≤ eps)
        A       = w_out · A_out + w_turn · r_t

    Paper: Tao et al., "TRACE: Turn-level Reward Assignment via Credit Estimation for
    Long-Horizon Agents", arXiv 2607.13988, Algorithm 1 (read through two third-party
    implementations, [C3]).

    Args:
        graph: anchor graph; its batch's steps carry ``gold_logprob`` ``[S]``: a trajectory
            of T + 1 rows carries ℓ_0..ℓ_T; rows 0..T−1 are the T transitions and the last
            row is the final-answer turn.
        p: the checked `TRACEParams` (`trace` takes its fields as keywords).

    Returns:
        `CreditResult` ``[S]``: value = V_t, q_value = NaN, credit = r_t (0 on the final-
        answer row), advantage = w_out·A_out + w_turn·r_t (the final-answer row gets
        w_out·A_out only).

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`TRACEParams`).
        MissingSignalError: no ``gold_logprob`` column.
        EstimatorInputError: a missing, non-finite or positive ℓ (naming group / traj / step).

    Notes:
        The window is truncated at the trajectory's end. A one-row trajectory has no
        transition and gets the outcome term only. The turn credit is not normalised
        across the group. Truncated rollouts are failures in A_out. A_out has no GRPO
        one-rollout rule: a group of one rollout has pop std 0, so A_out = 0.

    >>> import numpy as np
    >>> from crbc_viz.estimators.trace import turn_credit
    >>> [round(float(x), 4) for x in turn_credit(np.array([-3, -2, -2, -0.5]), 1.0)]
    [1.5122, 1.8368, 2.8528]
    """
    w_out, w_turn, K, gamma, gap_eps, terminal_scale, terminal_discount, outcome_eps = (
        p.w_out,
        p.w_turn,
        p.K,
        p.gamma,
        p.gap_eps,
        p.terminal_scale,
        p.terminal_discount,
        p.outcome_eps,
    )
    ell = float_signal(graph, "trace", "gold_logprob", high=0.0)
    b = graph.batch
    a_out = outcome_advantage(graph, outcome_eps)
    value = np.empty(b.num_steps)
    credit = np.zeros(b.num_steps)
    for i, (lo, hi) in enumerate(zip(b.traj_offsets[:-1], b.traj_offsets[1:])):
        d = -ell[lo:hi] + gap_eps
        value[lo:hi] = np.log(d[0] / d)
        credit[lo : hi - 1] = turn_credit(
            ell[lo:hi],
            a_out[i],
            K=K,
            gamma=gamma,
            gap_eps=gap_eps,
            terminal_scale=terminal_scale,
            terminal_discount=terminal_discount,
        )
    adv = w_out * a_out[b.step_traj] + w_turn * credit
    nan = np.full(b.num_steps, np.nan)
    return CreditResult("trace", p, graph, value, nan, credit, adv)


def outcome_advantage(graph: AnchorGraph, eps: float = TRACEParams.outcome_eps) -> np.ndarray:
    """A_out per trajectory ``[T]`` (§8.2): (R − mean) / pop_std over the group's rollouts,
    0 where pop_std ≤ eps; R is the success indicator."""
    b = graph.batch
    R = b.traj_success.astype(np.float64)
    g = b.traj_group
    _, mean, pop_std = segment_stats(R, g, b.num_groups, ddof=0)
    flat = ((pop_std <= eps) | no_spread(R, g, b.num_groups))[g]
    return np.where(flat, 0.0, (R - mean[g]) / np.where(flat, 1.0, pop_std[g]))


def turn_credit(
    ell: np.ndarray,
    a_out: float,
    *,
    K: int = TRACEParams.K,
    gamma: float = TRACEParams.gamma,
    gap_eps: float = TRACEParams.gap_eps,
    terminal_scale: float = TRACEParams.terminal_scale,
    terminal_discount: bool = TRACEParams.terminal_discount,
) -> np.ndarray:
    """r_t for the T = len(ell) − 1 transitions of one trajectory ``[T]``."""
    d = -np.asarray(ell, dtype=np.float64) + gap_eps
    V = np.log(d[0] / d)
    delta = np.diff(V)
    T = len(delta)
    r = np.zeros(T)
    for t in range(T):
        if K > 0:
            e = min(t + K - 1, T - 1)
            disc = gamma ** np.arange(e - t + 1)
            r[t] = np.dot(disc, delta[t : e + 1]) / disc.sum()
            reaches_end = e == T - 1
        else:
            reaches_end = t == T - 1
        if reaches_end:
            r[t] += terminal_scale * (gamma ** (T - t) if terminal_discount else 1.0) * a_out
    return r


trace = register(
    EstimatorSpec(
        name="trace",
        title="TRACE — turn-level credit from gold-answer log-probabilities",
        paper="Tao et al., TRACE: Turn-level Reward Assignment via Credit Estimation for Long-Horizon "
        "Agents (arXiv 2607.13988)",
        equation="V_t = log(d_0/d_t), d_t = −ℓ_t + ε;  r_t = K-step normalised TD + c·γ^(T−t)·A_out;  "
        "A = w_out·A_out + w_turn·r_t  (Alg. 1)",
        section="§8",
        kernel=_trace,
        params_cls=TRACEParams,
        requires=("gold_logprob",),
    )
)
