"""PGPO — Potential-Guided Policy Optimization (ESTIMATORS.md §6)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EstimatorInputError
from ..graph import AnchorGraph
from ..ops.returns import discounted_returns, group_steps, step_rewards
from ..ops.segments import segment_zscore
from ..ops.xp import as_numpy, asarray_like, copy, namespace, seg_sum
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["PGPOParams", "pgpo", "anchor_potentials"]


@dataclass(frozen=True)
class PGPOParams:
    eta: float = param(0.95, "discount η of the GiGPO-style step return R_{i,t}", low=0.0, high=1.0)
    gamma: float = param(
        1.0,
        "discount γ of the potential difference δ = γΦ(s̃n) − Φ(s̃m) (0.95 in the ablation)",
        low=0.0,
        high=1.0,
    )
    alpha: float = param(2.0, "exponent α of the task gate w = β·(1 − p_succ)^α", low=0.0, high=10.0)
    beta: float = param(1.0, "scale β of the task gate w = β·(1 − p_succ)^α", low=0.0, high=10.0)
    eps: float = param(1e-6, "added to the std of both z-scores", low=0.0, high=1.0)
    ddof: int = param(1, "std degrees of freedom of both z-scores (GiGPO's unbiased std)", low=0, high=1)
    potential: str = param(
        "mean",
        "Φ: 'mean' = visit-local mean (Eq. 6); 'loo' = leave the "
        "scored sample out of both Φ's (ablation variant; empty → 0)",
        choices=("mean", "loo"),
    )
    step_reward: str = param(
        "env",
        "rewards of R_{i,t} and r_final: 'env' = logged per-step "
        "rewards; 'outcome' = the success indicator on the last step",
        choices=("env", "outcome"),
    )


def anchor_potentials(graph: AnchorGraph, R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Φ(s̃) = mean of R_{j,l} over the visits of s̃ (Eq. 6): ``(sum [N], count [N])``, in
    ``R``'s library (a numpy array or a tensor)."""
    N = graph.num_nodes
    node = asarray_like(graph.step_node, R)
    return seg_sum(R, node, N), seg_sum(namespace(R).ones_like(R), node, N)


def _pgpo(graph: AnchorGraph, p: PGPOParams, *, to=as_numpy) -> CreditResult:
    """PGPO: GiGPO's anchor z-score plus a gated, z-scored difference of anchor potentials.

        R_{i,t}  = Σ_{l≥t} η^(l−t) · r_{i,l}                               (Eq. 1)
        A^S      = (R_{i,t} − μ_{G_s̃m}) / (σ_{G_s̃m} + eps)                 (Eq. 3)
        Φ(s̃)     = mean of R_{j,l} over (j,l) ∈ G_s̃                        (Eq. 6)
        δ_{i,t}  = γ·Φ(s̃n) − Φ(s̃m);  at the last step  γ·r_final − Φ(s̃m)   (Eq. 7)
        A^φ      = (δ − μ^δ) / (σ^δ + eps) over the outgoing transitions of s̃m  (Eq. 8)
        w(x)     = β · (1 − p_succ)^α                                       (Eqs. 9–10)
        A        = A^S + w(x) · A^φ                                         (Eq. 11)

    Paper: Zheng et al., "PGPO: Potential-Guided Policy Optimization for Multi-Turn Agentic
    Tasks", arXiv 2609.02236, Eqs. 1–11, App. B.3.

    Args:
        graph: anchor graph ``[S]`` steps; anchor groups are its nodes.
        p: the checked `PGPOParams` (`pgpo` takes its fields as keywords).
        to: the converter of the graph's arrays (`crbc_viz.ops.xp`): numpy here, tensors on a
            device in the torch row, which runs this same function.

    Returns:
        `CreditResult` ``[S]``: value = Φ(s_t), q_value = NaN, credit = advantage =
        A^S + w·A^φ (PGPO has no episode-level term: adding A^E back hurts);
        ``node_value [N]`` = Φ; diagnostics ``task_gate_mean``.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`PGPOParams`).

    Notes:
        p_succ is the fraction of the group's trajectories with r_final > 0 (Eq. 9), read
        from the same rewards as R (``step_reward``), not from the success flag: a WebShop
        failure with a partial score counts, a success logged with a 0 last reward does not.
        Singleton or zero-variance anchor groups give 0 in both z-scores. A self-loop
        gives δ = (γ − 1)·Φ(s). With ``potential='loo'`` the scored sample leaves Φ(s̃m),
        and also Φ(s̃n) on a self-loop; an empty group has Φ = 0. Truncation is failure.

    >>> from crbc_viz import load_rollouts, build_graph
    >>> r = pgpo(build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl")))
    >>> [round(float(x), 4) for x in r.advantage[:3]]
    [0.7358, 0.991, 0.7217]
    """
    eta, gamma, alpha, beta, eps, ddof = p.eta, p.gamma, p.alpha, p.beta, p.eps, p.ddof
    potential, step_reward = p.potential, p.step_reward
    if potential not in ("mean", "loo"):
        raise EstimatorInputError(f"potential must be 'mean' or 'loo', got {potential!r}")
    b = graph.batch
    N = graph.num_nodes
    r = to(step_rewards(graph, step_reward))
    xp = namespace(r)
    R = discounted_returns(graph, r, eta)  # Eq. 1
    R_mag = discounted_returns(graph, xp.abs(r), eta)  # R's round-off: Σ η^k·|r|
    terms = to(group_steps(graph)[b.step_group])
    node = to(graph.step_node)
    a_s, _, _, _ = segment_zscore(R, node, N, ddof=ddof, eps=eps, magnitude=R_mag, terms=terms)  # Eq. 3
    phi_sum, phi_cnt = anchor_potentials(graph, R)  # Eq. 6
    phi = phi_sum / xp.clip(phi_cnt, min=1)
    phi_mag = anchor_potentials(graph, R_mag)[0] / xp.clip(phi_cnt, min=1)
    nxt = to(graph.step_next)
    terminal = nxt < 0
    nxt_node = xp.where(terminal, 0, nxt)
    if potential == "mean":
        phi_m = phi[node]
        phi_n = phi[nxt_node]
    else:

        def loo(total, count):
            return xp.where(count > 0, total / xp.clip(count, min=1), 0.0)

        phi_m = loo(phi_sum[node] - R, phi_cnt[node] - 1)
        same = (nxt_node == node) & ~terminal
        phi_n = loo(
            phi_sum[nxt_node] - xp.where(same, R, 0.0), phi_cnt[nxt_node] - xp.astype(same, xp.float64)
        )
    last = to(b.traj_offsets[1:] - 1)
    r_final = r[last][to(b.step_traj)]
    delta = xp.where(terminal, gamma * r_final, gamma * phi_n) - phi_m  # Eq. 7
    # δ's round-off: that of the potentials it subtracts (`phi_mag` bounds the loo ones too).
    d_mag = xp.where(terminal, gamma * xp.abs(r_final), gamma * phi_mag[nxt_node]) + phi_mag[node]
    a_phi, _, _, _ = segment_zscore(delta, node, N, ddof=ddof, eps=eps, magnitude=d_mag, terms=terms)  # Eq. 8
    won = xp.astype(r[last] > 0, xp.float64)  # r_final > 0
    tg = to(b.traj_group)
    p_succ = seg_sum(won, tg, b.num_groups) / xp.clip(seg_sum(xp.ones_like(won), tg, b.num_groups), min=1)
    w = beta * (1.0 - p_succ) ** alpha  # Eqs. 9–10
    adv = a_s + w[to(b.step_group)] * a_phi  # Eq. 11
    return CreditResult(
        "pgpo",
        p,
        graph,
        phi[node],
        xp.full_like(R, np.nan),
        adv,
        copy(adv),
        node_value=phi,
        diagnostics={"task_gate_mean": float(xp.mean(w)) if b.num_groups else 0.0},
    )


pgpo = register(
    EstimatorSpec(
        name="pgpo",
        title="PGPO — Potential-Guided Policy Optimization",
        paper="Zheng et al., PGPO: Potential-Guided Policy Optimization for Multi-Turn Agentic Tasks "
        "(arXiv 2609.02236)",
        equation="δ = γΦ(s̃n) − Φ(s̃m);  A = A^S + β(1 − p_succ)^α · z_{s̃m}(δ)  (Eqs. 1–11)",
        section="§6",
        kernel=_pgpo,
        params_cls=PGPOParams,
    )
)
