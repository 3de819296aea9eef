"""Batched torch twins of the vectorised core estimators `grpo` and `shortest_path`
(same signatures plus ``device=``), so every core estimator runs on CUDA too."""

from __future__ import annotations

import numpy as np

from ...errors import EstimatorInputError
from ...estimators.registry import implements
from ...graph import SUCCESS, AnchorGraph
from ...result import CreditResult
from ._device import resolve_device

__all__ = ["grpo_torch", "shortest_path_torch", "group_advantage_t", "no_spread_t"]


def no_spread_t(x, seg, num: int, *, magnitude=None, terms=None):
    """Twin of `crbc_viz.ops.segments.no_spread` ``[num]`` (the same rule and constants; the
    round-off unit of ``x``'s dtype: float32's on a float32 path). ``terms``: per element,
    or one number, or None (the segment's members)."""
    import torch

    from ...ops.segments import F32_EPS, F64_EPS, SPREAD_ULPS

    dt, dev = x.dtype, x.device
    xmax = torch.full((num,), -torch.inf, dtype=dt, device=dev).scatter_reduce(0, seg, x, "amax")
    xmin = torch.full((num,), torch.inf, dtype=dt, device=dev).scatter_reduce(0, seg, x, "amin")
    mag_el = x.abs() if magnitude is None else torch.maximum(x.abs(), magnitude.abs().to(dt))
    mag = torch.zeros(num, dtype=dt, device=dev).scatter_reduce(0, seg, mag_el, "amax")
    if terms is None:
        n = torch.zeros(num, dtype=dt, device=dev).index_add_(0, seg, torch.ones_like(x))
    elif isinstance(terms, (int, float)):
        n = torch.full((num,), float(terms), dtype=dt, device=dev)
    else:
        n = torch.zeros(num, dtype=dt, device=dev).scatter_reduce(0, seg, terms.to(dt), "amax")
    unit = F32_EPS if dt == torch.float32 else F64_EPS
    tol = SPREAD_ULPS * unit * n * mag
    tol = torch.where(torch.isfinite(tol), tol, torch.zeros_like(tol))
    spread = xmax - xmin
    return (xmax >= xmin) & ((spread == 0) | (spread <= tol))


def group_advantage_t(
    graph: AnchorGraph, dev, *, norm="std", ddof=1, eps=1e-6, stats="trajectory", outcome="success"
):
    """A^G per trajectory ``[T]`` as a float64 tensor (the rules of `grpo.group_advantage`)."""
    import torch

    b = graph.batch
    if outcome not in ("success", "return"):
        raise EstimatorInputError(f"outcome must be 'success' or 'return', got {outcome!r}")
    R = torch.as_tensor(
        b.traj_success if outcome == "success" else b.traj_return, device=dev, dtype=torch.float64
    )
    w = (
        torch.as_tensor(b.traj_len, device=dev, dtype=torch.float64)
        if stats == "cross_steps"
        else torch.ones_like(R)
    )
    g = torch.as_tensor(b.traj_group, device=dev)
    G = b.num_groups
    zeros = torch.zeros(G, device=dev, dtype=torch.float64)
    cnt = zeros.clone().index_add_(0, g, w)
    mean = zeros.clone().index_add_(0, g, w * R) / cnt.clamp(min=1)
    sq = zeros.clone().index_add_(0, g, w * (R - mean[g]) ** 2)
    std = torch.sqrt(sq / (cnt - ddof).clamp(min=1))
    single = cnt <= 1
    flat = ~single & (no_spread_t(R, g, G) | (std == 0))  # no spread: exactly 0, whatever eps
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single | flat, torch.ones_like(std), std)
    centered = torch.where(flat[g], torch.zeros_like(R), R - mean[g])
    if norm == "mean":
        return centered
    return centered / (std[g] + eps)


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
    zeros = torch.zeros(N, dtype=torch.float64, device=dev)
    cnt = zeros.clone().index_add_(0, node, torch.ones_like(q))
    mean = zeros.clone().index_add_(0, node, q) / cnt.clamp(min=1)
    var = zeros.clone().index_add_(0, node, (q - mean[node]) ** 2) / (cnt - ddof).clamp(min=1)
    degenerate = (cnt < 2) | no_spread_t(q, node, N) | (var == 0)
    std = torch.sqrt(torch.where(degenerate, torch.ones_like(var), var))  # 1 where overwritten: no 0/0
    z = torch.where(degenerate[node], torch.zeros_like(q), (q - mean[node]) / (std[node] + eps))
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
