"""Gated-BEPO — confidence-gated Bellman credit (ESTIMATORS.md §5).

The full text was not available: this is the spec's [I] reading of the abstract and
summaries. Everything the sources leave open is a named parameter.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import EstimatorInputError
from ..graph import AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.closure import mean_backup_values, successor_values
from ..ops.returns import discounted_returns, group_steps
from ..ops.segments import segment_zscore
from ..ops.xp import as_numpy, namespace
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["GatedBEPOParams", "gated_bepo", "trajectory_gae", "distinct_successors"]


@dataclass(frozen=True)
class GatedBEPOParams:
    gamma: float = param(
        0.98,
        "discount γ of the values and TD residuals ([I]; unknown, CRBC's β)",
        low=0.0,
        high=1.0,
        low_open=True,
    )
    gae_lambda: float = param(
        0.95, "λ of the GAE along each sampled trajectory ([I]; unknown)", low=0.0, high=1.0
    )
    rho: float = param(
        0.5,
        "fusion ratio ρ at gated-on states: (1−ρ)·A^E + ρ·norm(A^B). UNKNOWN "
        "in the paper ('adaptive mixing'); a slider",
        low=0.0,
        high=1.0,
    )
    min_successors: int = param(
        2,
        "confidence gate: a state needs at least this many distinct "
        "observed successors (boundaries count) for Bellman credit",
        low=1,
        high=1000,
    )
    bellman_norm: str = param(
        "group_z",
        "norm(A^B) ([I]; unknown): 'group_z' = z-score over the rollout group's steps, 'none'",
        choices=("group_z", "none"),
    )
    ddof: int = param(1, "std degrees of freedom of A^E and of the group z-score", low=0, high=1)
    eps: float = param(1e-6, "added to the std of A^E and of the group z-score", low=0.0, high=1.0)


def distinct_successors(graph: AnchorGraph) -> np.ndarray:
    """Distinct observed successors of each node, SUCCESS / FAILURE included ``[N]``."""
    src = graph.pair_node[graph.edge_pair]
    width = graph.num_nodes + 2  # successors −2..N−1 shifted to 0..N+1
    keys = np.unique(src * width + (graph.edge_next + 2))
    return np.bincount(keys // width, minlength=graph.num_nodes)


def trajectory_gae(graph: AnchorGraph, delta: np.ndarray, decay: float) -> np.ndarray:
    """A_{i,t} = Σ_{l≥0} decay^l · δ_{i,t+l} along each trajectory (backwards) ``[S]``:
    the discounted suffix sum of GiGPO's returns, applied to δ with decay γλ (a numpy array or
    a tensor: `crbc_viz.ops.returns.discounted_returns`)."""
    return discounted_returns(graph, delta, decay)


def _gated_bepo_numpy(graph: AnchorGraph, p: GatedBEPOParams) -> CreditResult:
    """Gated-BEPO: along-trajectory GAE of mean-backup TD residuals, gated by successor count.

        V          = empirical mean-backup fixed point (= CRBC / GRAFT V with discount γ)
        δ_{i,t}    = γ · V(s_{i,t+1}) − V(s_{i,t}),   V(SUCCESS) = 1, V(FAILURE) = 0
        A^B_{i,t}  = Σ_{l≥0} (γλ)^l · δ_{i,t+l}       (GAE along the sampled trajectory)
        g(s)       = 1[ #distinct observed successors of s ≥ 2 ]
        A_{i,t}    = g · [(1 − ρ)·A^E_i + ρ·norm(A^B_{i,t})] + (1 − g) · A^E_i

    Paper: Yan et al., "Gated-BEPO: Confidence-Gated Bellman Credit Assignment for Large
    Language Model Agents", arXiv 2608.06861 (abstract and summaries only; no equation
    numbers were seen).

    Args:
        graph: anchor graph ``[S]`` steps.
        p: the checked `GatedBEPOParams` (`gated_bepo` takes its fields as keywords).

    Returns:
        `CreditResult` ``[S]``: value = V(s_t), q_value = γ·V(s_{t+1}), credit = A^B (raw
        GAE), advantage = the fused A; ``node_value [N]``; diagnostics ``gated_fraction``
        (steps whose state fails the gate) and ``closure_residual``.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`GatedBEPOParams`).

    Notes:
        [I] reading: the sparse success reward is carried by the boundary value V(SUCCESS)
        = 1 and is not added again as r_{i,t}. The gate counts *successors* (not CRBC's
        actions); SUCCESS and FAILURE count as successors. The form of ρ ("adaptive
        mixing") and of norm(·) are unknown: both are parameters. A^E is GRPO's group
        advantage on the success indicator. Truncation is failure. Zero spread gives 0 at
        any eps (A^E of equal outcomes; norm(A^B) of a group whose A^B agree within round-off,
        `crbc_viz.ops.segments.roundoff_tol`).

    >>> from crbc_viz import load_rollouts, build_graph
    >>> r = gated_bepo(build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl")))
    >>> [round(float(x), 4) for x in r.credit[:3]]
    [0.4392, 0.4642, 0.3267]
    """
    # `_gated_bepo` takes the value solver and the GAE: the numba twin passes compiled ones.
    return _gated_bepo(graph, mean_backup_values, trajectory_gae, **dataclasses.asdict(p))


def _gated_bepo(
    graph, _values, _gae, *, gamma, gae_lambda, rho, min_successors, bellman_norm, ddof, eps, to=as_numpy
) -> CreditResult:
    """The estimator once, for numpy and tensors: ``_values(graph, γ) -> (V, residual)`` and
    ``_gae(graph, δ, decay)`` in ``to``'s arrays (the numba row passes compiled ones, the
    torch row its closure solve, `trajectory_gae` and a converter to its device)."""
    if bellman_norm not in ("group_z", "none"):
        raise EstimatorInputError(f"bellman_norm must be 'group_z' or 'none', got {bellman_norm!r}")
    params = GatedBEPOParams(
        gamma=gamma,
        gae_lambda=gae_lambda,
        rho=rho,
        min_successors=min_successors,
        bellman_norm=bellman_norm,
        ddof=ddof,
        eps=eps,
    )
    b = graph.batch
    V, residual = _values(graph, gamma)
    xp = namespace(V)
    v_next = successor_values(graph, V)
    v_cur = V[to(graph.step_node)]
    delta = gamma * v_next - v_cur
    a_b = _gae(graph, delta, gamma * gae_lambda)
    if bellman_norm == "group_z":  # a group of one step, or with no spread, gets 0
        # Round-off of A^B: that of the values its δ subtract, summed as δ is.
        mag = _gae(graph, xp.abs(gamma * v_next) + xp.abs(v_cur), gamma * gae_lambda)
        terms = to(group_steps(graph)[b.step_group])
        a_norm = segment_zscore(
            a_b, to(b.step_group), b.num_groups, ddof=ddof, eps=eps, magnitude=mag, terms=terms
        )[0]
    else:
        a_norm = a_b
    gate = to((distinct_successors(graph) >= min_successors)[graph.step_node])
    a_e = to(group_advantage(graph, ddof=ddof, eps=eps)[b.step_traj])  # O(trajectories): numpy, moved
    adv = xp.where(gate, (1.0 - rho) * a_e + rho * a_norm, a_e)
    return CreditResult(
        "gated_bepo",
        params,
        graph,
        v_cur,
        gamma * v_next,
        a_b,
        adv,
        node_value=V,
        diagnostics={
            "gated_fraction": float(xp.mean(xp.astype(~gate, xp.float64))) if b.num_steps else 0.0,
            "closure_residual": residual,
        },
    )


gated_bepo = register(
    EstimatorSpec(
        name="gated_bepo",
        title="Gated-BEPO — confidence-gated Bellman credit",
        paper="Yan et al., Gated-BEPO: Confidence-Gated Bellman Credit Assignment for Large Language "
        "Model Agents (arXiv 2608.06861; abstract and summaries only)",
        equation="δ = γV(s′) − V(s);  A^B = GAE_γλ(δ);  A = g·[(1−ρ)A^E + ρ·norm(A^B)] + (1−g)·A^E  "
        "([I] reading)",
        section="§5",
        kernel=_gated_bepo_numpy,
        params_cls=GatedBEPOParams,
        solves=True,
    )
)
