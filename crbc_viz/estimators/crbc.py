"""CRBC — Cross-Rollout Bellman Closure — and its depth-0 member, visit-local averaging
(ESTIMATORS.md §3). This module is the readable numpy reference (whole-batch arrays; the
closure solve in `crbc_viz.ops.closure`);
`crbc_viz.backends.torch.crbc` is its batched twin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph import SUCCESS, AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.closure import graph_entries, solve_closure
from ..ops.returns import group_steps
from ..ops.segments import no_spread
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["CRBCParams", "VisitLocalParams", "crbc", "visit_local", "depth_bound"]


#: Largest finite backup depth (each is a pass over the graph; far past the point where the
#: family equals the closure to float precision for β < 1); ``depth=inf`` is always allowed.
MAX_FINITE_DEPTH = 10_000


@dataclass(frozen=True)
class CRBCParams:
    beta: float = param(
        0.98,
        "discount β of the Bellman closure (β = 1 allowed: the empirical chain is transient)",
        low=0.0,
        high=1.0,
        low_open=True,
    )
    depth: float = param(
        math.inf,
        "backup depth K: 0 = visit-local averaging, ∞ = exact closure "
        f"(one linear solve); a finite K is at most {MAX_FINITE_DEPTH:,} (K backups "
        "run K passes over the graph)",
        low=0,
        high=MAX_FINITE_DEPTH,
    )
    sigma_min: float = param(
        0.1, "floor of the anchor-wise std σ(s) that divides A", low=0.0, high=10.0, low_open=True
    )
    w_group: float = param(1.0, "weight w_G of the trajectory-level GRPO advantage", low=0.0, high=100.0)
    w_step: float = param(5.0, "weight w_S of the step credit A^S", low=0.0, high=100.0)
    min_actions: int = param(
        2,
        "gate: an anchor needs at least this many distinct observed actions to get step credit",
        low=1,
        high=1000,
    )


@dataclass(frozen=True)
class VisitLocalParams:
    beta: float = param(
        0.98, "discount β of the visit-local returns G = β^(T−t+1)·R", low=0.0, high=1.0, low_open=True
    )
    sigma_min: float = param(
        0.1, "floor of the anchor-wise std σ(s) that divides A", low=0.0, high=10.0, low_open=True
    )
    w_group: float = param(1.0, "weight w_G of the trajectory-level GRPO advantage", low=0.0, high=100.0)
    w_step: float = param(5.0, "weight w_S of the step credit A^S", low=0.0, high=100.0)
    min_actions: int = param(
        2,
        "gate: an anchor needs at least this many distinct observed actions to get step credit",
        low=1,
        high=1000,
    )


def _visit_local_returns(graph: AnchorGraph, beta: float) -> np.ndarray:
    """G_{i,t} = β^(T_i − t + 1)·R_i with 1-indexed t (the last step gets β·R) ``[S]``."""
    b = graph.batch
    steps_to_go = b.traj_len[b.step_traj] - b.step_pos  # T_i − t + 1 with 1-indexed t
    return beta**steps_to_go * b.traj_success[b.step_traj].astype(np.float64)


def _closure_values(graph: AnchorGraph, beta: float, depth: float):
    """V over every node ``[N]``, Q over every pair ``[P]`` and the closure residual, for
    all groups at once (groups never share a node, so the system is block diagonal)."""
    N, P = graph.num_nodes, graph.pair_node.shape[0]
    node_visits = graph.node_visits.astype(np.float64)
    pair_count = graph.pair_count.astype(np.float64)
    # Eq. 5: P(x|s,a) = N(s,a,x)/N(s,a) per distinct edge; μ(a|s) = N(s,a)/N(s).
    p_x = graph.edge_count / pair_count[graph.edge_pair]
    mu = pair_count / node_visits[graph.pair_node]
    nxt = graph.edge_next

    def backup(V):  # Eq. 7: (B V)(s,a) = β Σ_x P(x|s,a) V(x), V(z+) = 1, V(z−) = 0
        v_next = np.where(nxt >= 0, V[np.maximum(nxt, 0)] if N else 0.0, (nxt == SUCCESS) * 1.0)
        return beta * np.bincount(graph.edge_pair, weights=p_x * v_next, minlength=P)

    residual = 0.0
    if math.isinf(depth):
        # Eqs. 8–9: M(s,s') = Σ_a μ(a|s) P(s'|s,a) = N(s→s')/N(s); (I − βM)V = b, one solve
        # (dense per small group, sparse LU for large ones: `closure.solve_closure`).
        V, residual = solve_closure(*graph_entries(graph), graph.group_node_offsets, beta)
        Q = backup(V)
    else:
        # Eq. 6 / §3.7: K = 0 averages the visit-local returns; K ≥ 1 backs them up.
        G_ret = _visit_local_returns(graph, beta)
        V = np.bincount(graph.step_node, weights=G_ret, minlength=N) / node_visits
        Q = np.bincount(graph.step_pair, weights=G_ret, minlength=P) / pair_count
        for _ in range(int(depth)):
            Q = backup(V)  # Q^(K) = B V^(K−1)
            V = np.bincount(graph.pair_node, weights=mu * Q, minlength=N)  # V^(K) = T V^(K−1)
    return V, Q, mu, residual


def _closure_family(graph: AnchorGraph, name: str, p, depth: float) -> CreditResult:
    """The family at ``depth`` with ``p``'s β, gate, σ floor and weights (`CRBCParams` or
    `VisitLocalParams`)."""
    N = graph.num_nodes
    node_value, pair_q, pair_mu, residual = _closure_values(graph, p.beta, depth)
    # Eq. 13: A = Q − V; σ(s)² = Σ_a μ(a|s) A²; gate on ≥ min_actions distinct actions.
    pair_adv = pair_q - node_value[graph.pair_node]
    sigma = np.sqrt(np.bincount(graph.pair_node, weights=pair_mu * pair_adv**2, minlength=N))
    gate = graph.node_num_actions >= p.min_actions
    # An anchor whose Q(s, ·) agree within the round-off of the group's solve has no credit.
    flat = no_spread(
        pair_q,
        graph.pair_node,
        N,
        magnitude=node_value[graph.pair_node],
        terms=group_steps(graph)[graph.node_group[graph.pair_node]],
    )
    credited = gate & ~flat
    pair_credit = np.where(
        credited[graph.pair_node], pair_adv / np.maximum(sigma, p.sigma_min)[graph.pair_node], 0.0
    )
    a_group = group_advantage(graph)[graph.batch.step_traj]
    credit = pair_credit[graph.step_pair]
    diagnostics = {"closure_residual": residual, "gated_fraction": float(np.mean(~gate)) if N else 0.0}
    if not math.isinf(depth):
        diagnostics.pop("closure_residual")
    return CreditResult(
        name,
        p,
        graph,
        node_value[graph.step_node],
        pair_q[graph.step_pair],
        credit,
        p.w_group * a_group + p.w_step * credit,
        node_value=node_value,
        pair_q=pair_q,
        pair_credit=pair_credit,
        diagnostics=diagnostics,
    )


def _crbc(graph: AnchorGraph, p: CRBCParams) -> CreditResult:
    """CRBC: exact behaviour-policy Bellman closure on the merged anchor graph.

        M(s,s') = Σ_a μ(a|s) P(s'|s,a),   b(s) = β Σ_a μ(a|s) P(z+|s,a)
        (I − βM) V = b                       (one linear solve; V(z+) = 1, V(z−) = 0)
        Q(s,a) = β Σ_x P(x|s,a) V(x),   A = Q − V
        σ(s) = sqrt(Σ_a μ(a|s) A(s,a)²)
        A^S = 1{#actions(s) ≥ 2} · A / max(σ(s), σ_min)
        A^final = w_G · A^G + w_S · A^S

    A finite ``depth`` K gives the finite-depth family (§3.7): V^(K) = T^K V^(0),
    Q^(K) = B V^(K−1), with V^(0), Q^(0) the visit-local averages of G = β^(T−t+1)·R.

    Paper: Ren et al., "Cross-Rollout Bellman Closure for Long-Horizon Agentic RL",
    arXiv 2609.35082, Eqs. 5–10 and 13–15.

    Args:
        graph: anchor graph; counts are over all step occurrences ``[S]``.
        p: the checked `CRBCParams` (`crbc` takes its fields as keywords).

    Returns:
        `CreditResult`: value = V(s_t), q_value = Q(s_t, a_t), credit = A^S, advantage =
        A^final, each ``[S]``; ``node_value [N]``, ``pair_q`` and ``pair_credit [P]``;
        diagnostics ``closure_residual`` = ‖(I − βM)V − b‖∞ (exact depth only).

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`CRBCParams`).

    Notes:
        Cycles and self-loops need nothing special. Truncated rollouts end at FAILURE.
        β = 1 is solvable: every anchor reaches a boundary under the empirical chain. A
        single-action anchor gets A^S = 0 (gate); an all-failure group gets V ≡ 0. An
        anchor whose Q(s, a) agree within round-off (`crbc_viz.ops.segments.roundoff_tol`:
        magnitude max(|Q|, |V|), the group's steps) gets A^S = 0 exactly, whatever σ_min.

    >>> from crbc_viz import load_rollouts, build_graph
    >>> r = crbc(build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl")))
    >>> [round(float(v), 4) for v in r.node_value]
    [0.4636, 0.4802, 0.6533, 0.0, 0.4659]
    """
    return _closure_family(graph, "crbc", p, p.depth)


def _visit_local(graph: AnchorGraph, p: VisitLocalParams) -> CreditResult:
    """Visit-local averaging: the depth-0 member of the CRBC family (GiGPO-style pooling).

        G_{i,t} = β^(T_i − t + 1) · R_i                (1-indexed t)
        Q^(0)(s,a) = mean of G over occurrences of (s,a);  V^(0)(s) = mean of G over visits to s
        A^(0) = Q^(0) − V^(0), then the gate, σ-normalisation and combination of `crbc`.

    Paper: arXiv 2609.35082 Eq. 6 (§3.7); GiGPO (arXiv 2505.10978) pools the same returns.

    Args:
        graph: anchor graph; counts are over all step occurrences ``[S]``.
        p: the checked `VisitLocalParams` (`visit_local` takes its fields as keywords).

    Returns / Notes: as `crbc` with ``depth = 0`` (no closure residual).

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`VisitLocalParams`).

    >>> from crbc_viz import load_rollouts, build_graph
    >>> r = visit_local(build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl")))
    >>> round(float(r.pair_q[0] - r.node_value[0]), 4)
    0.0093
    """
    return _closure_family(graph, "visit_local", p, 0)


def depth_bound(graph: AnchorGraph, beta: float, depth: int) -> float:
    """Corollary 3: ‖A^∞ − A^(K)‖∞ ≤ 2β^K/(1 − β) · ‖T V0 − V0‖∞ (β < 1; else ∞)."""
    if beta >= 1.0:
        return math.inf
    r0 = visit_local(graph, beta=beta)
    r1 = crbc(graph, beta=beta, depth=1)
    gap = np.max(np.abs(r1.node_value - r0.node_value)) if graph.num_nodes else 0.0
    return float(2 * beta**depth / (1 - beta) * gap)


crbc = register(
    EstimatorSpec(
        name="crbc",
        title="CRBC — Cross-Rollout Bellman Closure",
        paper="Ren et al., Cross-Rollout Bellman Closure for Long-Horizon Agentic RL (arXiv 2609.35082)",
        equation="(I − βM)V = b;  Q = BV;  A^S = 1{#a ≥ 2}·(Q − V)/max(σ(s), σ_min);  A = w_G·A^G + w_S·A^S",
        section="§3",
        kernel=_crbc,
        params_cls=CRBCParams,
        solves=True,
    )
)
visit_local = register(
    EstimatorSpec(
        name="visit_local",
        title="Visit-local averaging (CRBC depth 0, GiGPO-style)",
        paper="arXiv 2609.35082 Eq. 6; Feng et al., GiGPO (arXiv 2505.10978)",
        equation="Q⁰(s,a) = mean G over (s,a);  V⁰(s) = mean G over s;  A = Q⁰ − V⁰, gated and "
        "normalised as CRBC",
        section="§3.7",
        kernel=_visit_local,
        params_cls=VisitLocalParams,
    )
)
