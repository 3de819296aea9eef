"""GraphGPO's shortest-path (distance-to-success) credit (ESTIMATORS.md §3a)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import SUCCESS, AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.segments import segment_zscore
from ..ops.xp import as_numpy, namespace
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["ShortestPathParams", "shortest_path", "distance_to_success"]


@dataclass(frozen=True)
class ShortestPathParams:
    omega: float = param(
        0.1,
        "decay ω ∈ (0,1) of the graph reward r_succ·ω^(d+c) (0.1 ALFWorld, 0.2 WebShop, 0.8 Sokoban)",
        low=0.0,
        high=1.0,
        low_open=True,
    )
    r_succ: float = param(10.0, "success reward r_succ", low=0.0, high=1000.0, low_open=True)
    exponent: str = param(
        "d+c",
        "graph-reward exponent: 'd+c' = d(s′)+1 (paper Eq. 4) or 'd' = d(s′) "
        "([C3] reference; a constant factor under unit cost)",
        choices=("d+c", "d"),
    )
    ddof: int = param(
        1,
        "std degrees of freedom in the per-source z-score (A^E always uses verl-agent's sample std)",
        low=0,
        high=1,
    )
    eps: float = param(
        1e-6, "added to the std of the per-source z-score (A^E always uses 1e-6)", low=0.0, high=1.0
    )
    w_graph: float = param(1.0, "weight β_G of the graph advantage", low=0.0, high=100.0)
    w_group: float = param(1.0, "weight β_E of the episode (GRPO) advantage", low=0.0, high=100.0)


def distance_to_success(graph: AnchorGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit-cost hops to SUCCESS by reverse BFS.

    Returns:
        ``d [N]`` per node, where a node that cannot reach SUCCESS gets its group's
        d_max + 1; ``d_unreachable [G]`` = d_max + 1 per group (FAILURE's distance); and
        ``reached [G]``, whether the group has any SUCCESS edge at all.
    """
    N = graph.num_nodes
    d = np.full(N, -1, dtype=np.int64)
    src = graph.pair_node[graph.edge_pair]
    dst = graph.edge_next
    # Reverse adjacency over node→node edges (CSR by destination).
    inner = dst >= 0
    order = np.argsort(dst[inner], kind="stable")
    rev_src = src[inner][order]
    rev_off = np.searchsorted(dst[inner][order], np.arange(N + 1))
    frontier = np.unique(src[dst == SUCCESS])
    d[frontier] = 1
    hop = 1
    while frontier.size:
        hop += 1
        nbrs = (
            np.concatenate([rev_src[rev_off[v] : rev_off[v + 1]] for v in frontier])
            if frontier.size
            else np.zeros(0, np.int64)
        )
        nbrs = np.unique(nbrs)
        frontier = nbrs[d[nbrs] < 0]
        d[frontier] = hop
    G = graph.num_groups
    reached = np.zeros(G, dtype=bool)
    reached[graph.node_group[d > 0]] = True
    d_max = np.zeros(G, dtype=np.int64)
    np.maximum.at(d_max, graph.node_group, np.maximum(d, 0))
    d = np.where(d < 0, d_max[graph.node_group] + 1, d)
    return d, d_max + 1, reached


def _distances(graph: AnchorGraph, to) -> tuple:
    """`distance_to_success` in ``to``'s arrays."""
    return tuple(to(a) for a in distance_to_success(graph))


def _shortest_path(
    graph: AnchorGraph, p: ShortestPathParams, *, to=as_numpy, distances=_distances
) -> CreditResult:
    """GraphGPO shortest-path credit: reward steps by their successor's distance to success.

        d(SUCCESS) = 0;  d(s) = min over out-edges (s,a,s′) of 1 + d(s′)   (reverse BFS)
        R^G(s,a,s′) = r_succ · ω^(d(s′) + 1)
        A_graph = (R^G − mean) / (std + eps) over the outgoing edge occurrences of s
        A = β_G · A_graph + β_E · A^E

    ``ddof`` and ``eps`` belong to the per-source z-score only; A^E is verl-agent's episode
    advantage (one value per rollout, sample std, eps 1e-6), as in `grpo`.

    Paper: Cheng et al., "Beyond Trajectory-Level Attribution: Graph-Based Credit Assignment
    for Agentic RL", arXiv 2605.26684 (ICML 2026), Eq. 4; weights 1/1 per CRBC App. C.3.

    Args:
        graph: anchor graph.
        p: the checked `ShortestPathParams` (`shortest_path` takes its fields as keywords).
        to: the converter of the graph's arrays (`crbc_viz.ops.xp`); ``distances(graph, to)``:
            `distance_to_success` in those arrays (the torch row passes its reverse BFS over
            the edge list on the device, and otherwise runs this same function).

    Returns:
        `CreditResult`: value = d(s_t) (unreachable = d_max + 1, FAILURE likewise), q_value =
        R^G of the step, credit = A_graph, advantage = w_graph·A_graph + w_group·A^E ``[S]``.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`ShortestPathParams`).

    Notes:
        Singleton or zero-variance sources get 0; a group that never reached SUCCESS gets 0
        everywhere. Frequencies are ignored: one rare short route sets d(s) for every
        predecessor — the rare-route trap that CRBC avoids.

    >>> from crbc_viz import load_rollouts, build_graph
    >>> r = shortest_path(build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl")))
    >>> [int(v) for v in r.value[:3]], round(float(r.credit[0]), 4)
    ([3, 2, 1], 0.8659)
    """
    omega, r_succ, exponent, ddof, eps, w_graph, w_group = (
        p.omega,
        p.r_succ,
        p.exponent,
        p.ddof,
        p.eps,
        p.w_graph,
        p.w_group,
    )
    b = graph.batch
    d, d_unreachable, reached = distances(graph, to)
    xp = namespace(d)
    G = graph.num_groups
    step_group = to(b.step_group)
    nxt = to(graph.step_next)
    # Successor distance: SUCCESS = 0, FAILURE = d_max + 1 (unreachable), else d(s′).
    d_next = xp.where(
        nxt == SUCCESS, 0, xp.where(nxt >= 0, d[xp.where(nxt >= 0, nxt, 0)], d_unreachable[step_group])
    )
    power = d_next + (1 if exponent == "d+c" else 0)
    q = r_succ * omega ** xp.astype(power, xp.float64)
    # z-score within each source node's outgoing occurrences (one occurrence or no spread: 0).
    node = to(graph.step_node)
    z = segment_zscore(q, node, graph.num_nodes, ddof=ddof, eps=eps)[0]
    z = xp.where(reached[step_group], z, 0.0)
    a_group = group_advantage(graph, to=to)[to(b.step_traj)]  # A^E: verl-agent's (sample std, eps 1e-6)
    return CreditResult(
        "shortest_path",
        p,
        graph,
        xp.astype(d[node], xp.float64),
        q,
        z,
        w_graph * z + w_group * a_group,
        node_value=xp.astype(d, xp.float64),
        diagnostics={"groups_without_success": int(G - int(xp.sum(reached)))},
    )


shortest_path = register(
    EstimatorSpec(
        name="shortest_path",
        title="GraphGPO shortest-path credit",
        paper="Cheng et al., Beyond Trajectory-Level Attribution: Graph-Based Credit Assignment for "
        "Agentic RL (arXiv 2605.26684)",
        equation="R^G = r_succ·ω^(d(s′)+1);  A = z-score of R^G over s's out-occurrences + A^E",
        section="§3a",
        kernel=_shortest_path,
        params_cls=ShortestPathParams,
        value_meaning=("d(s): hops to SUCCESS", False, "SUCCESS\nd = 0", "FAILURE\nd = ∞"),
    )
)
