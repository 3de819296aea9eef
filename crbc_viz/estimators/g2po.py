"""G2PO — Group-Graph Policy Optimization (ESTIMATORS.md §16)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import FAILURE, SUCCESS, AnchorGraph
from ..ops.advantage import row_advantage
from ..ops.returns import group_steps, trajectory_outcome
from ..ops.segments import segment_zscore
from ..ops.signals import action_invalid
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["G2POParams", "g2po", "node_values"]


@dataclass(frozen=True)
class G2POParams:
    gamma: float = param(
        0.95,
        "discount γ of a node's score γ^(T−t)·R (hard-coded 0.95 in g2po/core_g2po.py)",
        low=0.0,
        high=1.0,
    )
    success_value: float = param(
        10.0, "score of the SUCCESS boundary (the code's SUCCESS_REWARD = 10)", low=-1000.0, high=1000.0
    )
    failure_value: float = param(
        0.0, "score of the FAILURE boundary (0 in the code)", low=-1000.0, high=1000.0
    )
    invalid_penalty: float = param(
        0.1,
        "subtracted from the next-node score of a step whose action was invalid (logged "
        "is_action_valid = false; compute_step_level_advantage's default)",
        low=0.0,
        high=100.0,
    )
    episode_penalty: float = param(
        0.1,
        "subtracted from the episode score of an invalid step's row (the trainer's "
        "invalid_action_penalty_coef, 0.1 in the shipped scripts)",
        low=0.0,
        high=100.0,
    )
    omega: float = param(1.0, "weight of the step advantage (step_advantage_w)", low=0.0, high=100.0)
    mode: str = param(
        "mean_norm",
        "normalisation of all three terms: 'mean_norm' = centre only (config default), "
        "'mean_std_norm' = divide by std + eps (the shipped ALFWorld script)",
        choices=("mean_norm", "mean_std_norm"),
    )
    eps: float = param(1e-6, "added to the unbiased std in mean_std_norm", low=0.0, high=1.0)
    outcome: str = param(
        "return",
        "R: the logged episode return (the code's episode_rewards, 10 on an ALFWorld success) "
        "or the success indicator",
        choices=("return", "success"),
    )


def node_values(graph: AnchorGraph, gamma: float = G2POParams.gamma, outcome: str = G2POParams.outcome):
    """V(s) ``[N]``: the mean over the node's visits of γ^(T_i − t)·R_i (t 0-based, so a
    trajectory's last step weighs γ^1), and the per-step terms ``[S]`` it averages."""
    b = graph.batch
    R = trajectory_outcome(graph, outcome)
    term = gamma ** (b.traj_len[b.step_traj] - b.step_pos).astype(np.float64) * R[b.step_traj]
    cnt = np.bincount(graph.step_node, minlength=graph.num_nodes)
    return np.bincount(graph.step_node, weights=term, minlength=graph.num_nodes) / np.maximum(cnt, 1), term


def _g2po(graph: AnchorGraph, p: G2POParams) -> CreditResult:
    """G2PO: next-node score within the node's group plus the score gain across the prompt.

        V(s)       = mean over visits (i,t) of s of γ^(T_i − t) · R_i    (t = 0..T_i−1)
        V(SUCCESS) = success_value,  V(FAILURE) = failure_value
        y_{i,t}    = V(x_{i,t}) − c · invalid_{i,t}     (x = the next node or boundary)
        A¹_{i,t}   = (y − mean_{steps at s}) / F_norm    (< 2 steps at s → 0)
        Δ_{i,t}    = V(x_{i,t}) − V(s_{i,t})
        A²_{i,t}   = (Δ − mean_{prompt group}) / F_norm
        A^E_{i,t}  = (R_i − c_E · invalid_{i,t} − mean_{group rows}) / F_norm
        A_{i,t}    = A^E + ω · (A¹ + A²)

    F_norm = 1 in ``mean_norm`` and unbiased std + eps in ``mean_std_norm`` (one mode for all
    three terms, as ``compute_g2po_outcome_advantage`` passes it).

    Paper: Wang et al., "Group-Graph Policy Optimization for Long-Horizon Agentic
    Reinforcement Learning", arXiv 2606.22995; official code Nala-YN/G2PO at b8ffaf5,
    ``g2po/core_g2po.py`` (``compute_group_aggregation_values``,
    ``compute_step_level_advantage``, ``compute_g2po_outcome_advantage``).

    Args:
        graph: anchor graph; the code's step groups are the anchor nodes of a prompt group.
        p: the checked `G2POParams` (`g2po` takes its fields as keywords).

    Returns:
        `CreditResult` ``[S]``: value = V(s_t), q_value = y (the next node's score less the
        penalty), credit = A¹ + A², advantage = A^E + ω·(A¹ + A²); ``node_value [N]`` = V.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`G2POParams`).
        EstimatorInputError: a logged ``is_action_valid`` that is not a boolean.

    Notes:
        The boundary after a trajectory's last step is SUCCESS when the rollout succeeded
        (the code tests ``episode_reward == 10``); truncation is FAILURE. Every visit counts
        (revisits and self-loops included). Without a logged ``is_action_valid`` no
        penalty applies. A prompt group of one step gets A² = 0 (the code's unbiased std of
        one value is NaN there in ``mean_std_norm``); values that agree within round-off give
        exactly 0 (docs/estimators.md, "Zero spread").

    >>> from crbc_viz import load_rollouts, build_graph
    >>> g = build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl"))
    >>> r = g2po(g, mode="mean_std_norm")
    >>> [round(float(x), 4) for x in r.node_value]
    [0.4078, 0.4512, 0.6333, 0.0, 0.5573]
    """
    b = graph.batch
    std_norm = p.mode == "mean_std_norm"
    V, term = node_values(graph, p.gamma, p.outcome)
    nxt = graph.step_next
    v_next = np.where(
        nxt == SUCCESS, p.success_value, np.where(nxt == FAILURE, p.failure_value, V[np.maximum(nxt, 0)])
    )
    v_cur = V[graph.step_node]
    invalid = action_invalid(graph, "g2po")
    y = v_next - p.invalid_penalty * invalid
    # Round-off of V: a mean of γ^k·R terms; the group's steps bound the terms behind it.
    terms = group_steps(graph)[b.step_group]
    mag_v = np.maximum(np.abs(v_next), np.abs(v_cur)) + np.abs(term)
    a1, _, _, _ = segment_zscore(
        y,
        graph.step_node,
        graph.num_nodes,
        ddof=1,
        eps=p.eps,
        scale=std_norm,
        magnitude=mag_v + p.invalid_penalty * invalid,
        terms=terms,
    )
    a2, _, _, _ = segment_zscore(
        v_next - v_cur,
        b.step_group,
        b.num_groups,
        ddof=1,
        eps=p.eps,
        scale=std_norm,
        magnitude=mag_v,
        terms=terms,
    )
    R = trajectory_outcome(graph, p.outcome)[b.step_traj]
    a_ep = row_advantage(graph, R - p.episode_penalty * invalid, std_norm, p.eps)
    credit = a1 + a2
    return CreditResult(
        "g2po",
        p,
        graph,
        v_cur,
        y,
        credit,
        a_ep + p.omega * credit,
        node_value=V,
        diagnostics={"invalid_steps": int(invalid.sum())},
    )


g2po = register(
    EstimatorSpec(
        name="g2po",
        title="G2PO — Group-Graph Policy Optimization",
        paper="Wang et al., Group-Graph Policy Optimization for Long-Horizon Agentic RL (arXiv 2606.22995)",
        equation="V(s) = mean γ^(T−t)·R;  A = A^E + ω·(z_s[V(x) − c·invalid] + z_group[V(x) − V(s)])",
        section="§16",
        kernel=_g2po,
        params_cls=G2POParams,
    )
)
