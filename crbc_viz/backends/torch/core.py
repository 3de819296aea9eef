"""Batched torch twins of the vectorised core estimators `grpo` and `shortest_path`
(same signatures plus ``device=``), so every core estimator runs on CUDA too. Their statistics
are the numpy references' own (`crbc_viz.ops.advantage`, `crbc_viz.ops.segments`: written once
for numpy and torch); what is written here is only what differs on a device (the reverse BFS)."""

from __future__ import annotations

import numpy as np

from ...estimators.registry import implements
from ...graph import SUCCESS, AnchorGraph
from ...ops.segments import segment_zscore
from ...result import CreditResult
from ._device import resolve_device

__all__ = ["grpo_torch", "shortest_path_torch", "group_advantage_t"]


def group_advantage_t(
    graph: AnchorGraph, dev, *, norm="std", ddof=1, eps=1e-6, stats="trajectory", outcome="success"
):
    """A^G per trajectory ``[T]`` as a float64 tensor on ``dev``: `crbc_viz.ops.advantage.
    outcome_advantage` (the one group advantage) run on the graph's tensors."""
    import torch

    from ...ops.advantage import outcome_advantage
    from ...ops.returns import trajectory_outcome

    b = graph.batch
    R = torch.as_tensor(trajectory_outcome(graph, outcome), device=dev, dtype=torch.float64)
    w = torch.as_tensor(b.traj_len, device=dev, dtype=torch.float64) if stats == "cross_steps" else None
    g = torch.as_tensor(b.traj_group, device=dev)
    return outcome_advantage(R, g, b.num_groups, norm=norm, ddof=ddof, eps=eps, weights=w)


def _np(t):
    return t.detach().to("cpu").numpy()


@implements("grpo", "torch")
def grpo_torch(graph: AnchorGraph, params, *, device: str = "auto") -> CreditResult:
    """Batched `crbc_viz.estimators.grpo.grpo` (``params``: the checked `GRPOParams`)."""
    import torch

    norm, ddof, eps, stats, outcome = params.norm, params.ddof, params.eps, params.stats, params.outcome
    dev = torch.device(resolve_device(device))
    adv = group_advantage_t(graph, dev, norm=norm, ddof=ddof, eps=eps, stats=stats, outcome=outcome)
    step_adv = _np(adv[torch.as_tensor(graph.batch.step_traj, device=dev)])
    nan = np.full_like(step_adv, np.nan)
    return CreditResult(
        "grpo", params, graph, nan, nan.copy(), step_adv, step_adv.copy(), backend=f"torch:{dev.type}"
    )


@implements("shortest_path", "torch")
def shortest_path_torch(graph: AnchorGraph, params, *, device: str = "auto") -> CreditResult:
    """Batched `crbc_viz.estimators.shortest_path.shortest_path` (reverse BFS one hop per pass
    over the edge list, all groups at once)."""
    import torch

    p = params
    omega, r_succ, exponent, ddof, eps, w_graph, w_group = (
        p.omega,
        p.r_succ,
        p.exponent,
        p.ddof,
        p.eps,
        p.w_graph,
        p.w_group,
    )
    dev = torch.device(resolve_device(device))
    N, G = graph.num_nodes, graph.num_groups
    src = torch.as_tensor(graph.pair_node[graph.edge_pair], device=dev)
    dst = torch.as_tensor(graph.edge_next, device=dev)
    node_group = torch.as_tensor(graph.node_group, device=dev)
    d = torch.full((N,), -1, dtype=torch.int64, device=dev)
    frontier = torch.zeros(N, dtype=torch.bool, device=dev)
    frontier[src[dst == SUCCESS]] = True
    d[frontier] = 1
    inner = dst >= 0
    i_src, i_dst = src[inner], dst[inner]
    hop = 1
    while bool(frontier.any()):
        hop += 1
        cand = torch.zeros(N, dtype=torch.bool, device=dev)
        cand[i_src[frontier[i_dst]]] = True
        frontier = cand & (d < 0)
        d[frontier] = hop
    reached = torch.zeros(G, dtype=torch.bool, device=dev)
    reached[node_group[d > 0]] = True
    d_max = torch.zeros(G, dtype=torch.int64, device=dev).scatter_reduce(
        0, node_group, d.clamp(min=0), reduce="amax", include_self=True
    )
    d = torch.where(d < 0, d_max[node_group] + 1, d)
    b = graph.batch
    step_group = torch.as_tensor(b.step_group, device=dev)
    nxt = torch.as_tensor(graph.step_next, device=dev)
    d_next = torch.where(
        nxt == SUCCESS,
        torch.zeros_like(nxt),
        torch.where(nxt >= 0, d[nxt.clamp(min=0)], d_max[step_group] + 1),
    )
    power = (d_next + (1 if exponent == "d+c" else 0)).to(torch.float64)
    q = r_succ * torch.pow(torch.tensor(omega, dtype=torch.float64, device=dev), power)
    node = torch.as_tensor(graph.step_node, device=dev)
    z = segment_zscore(q, node, N, ddof=ddof, eps=eps)[0]
    z = torch.where(reached[step_group], z, torch.zeros_like(z))
    a_group = group_advantage_t(graph, dev)[torch.as_tensor(b.step_traj, device=dev)]  # A^E: verl's
    d_np = _np(d).astype(np.float64)
    return CreditResult(
        "shortest_path",
        params,
        graph,
        d_np[graph.step_node],
        _np(q),
        _np(z),
        _np(w_graph * z + w_group * a_group),
        node_value=d_np,
        diagnostics={"groups_without_success": int(G - int(reached.sum()))},
        backend=f"torch:{dev.type}",
    )
