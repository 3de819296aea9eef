"""Batched torch twin of `crbc_viz.estimators.crbc` (every group in one pass).

The exact solve is direct, never iterative: groups with at most ``dense_max`` anchors are
bucketed by padded size and solved with one batched dense LU per bucket
(``torch.linalg.solve``; padding rows are identity rows with b = 0). Larger groups go to a
sparse direct solve (SciPy SuperLU on the block-diagonal system, on the CPU), so no dense
n² matrix is ever built for a large group. I − βM is a nonsingular M-matrix, so LU without
pivoting problems is stable; torch's partial pivoting is used anyway.
"""
from __future__ import annotations

import math

import numpy as np

from ..graph import SUCCESS, AnchorGraph
from ..result import CreditResult
from . import resolve_device

__all__ = ["crbc_torch", "visit_local_torch", "closure_values_torch", "DENSE_MAX"]

#: Largest group (anchors) solved densely; larger groups use the sparse direct solve.
DENSE_MAX = 512


def _bucket_size(n: np.ndarray) -> np.ndarray:
    """Padded size classes: powers of two from 8 up, so a bucket wastes < 2× per side."""
    return np.maximum(8, 1 << np.ceil(np.log2(np.maximum(n, 1))).astype(np.int64))


def closure_values_torch(graph: AnchorGraph, beta: float, *, device: str = "auto",
                         dtype=None, dense_max: int = DENSE_MAX):
    """Solve (I − βM)V = b for every group at once.

    Returns:
        ``(V [N], residual)`` as a torch tensor on ``device`` and the closure residual
        ‖(I − βM)V − b‖∞ over the batch (a float).
    """
    import torch

    dev = torch.device(resolve_device(device))
    dtype = dtype or torch.float64
    N = graph.num_nodes
    src = graph.pair_node[graph.edge_pair]
    nxt = graph.edge_next
    visits = graph.node_visits.astype(np.float64)
    w = graph.edge_count / visits[src]                       # μ(a|s)·P(x|s,a) = N(s,a,x)/N(s)
    inner = nxt >= 0
    t_src = torch.as_tensor(src, device=dev)
    t_w = torch.as_tensor(w, device=dev, dtype=dtype)
    # Eq. 8: b(s) = β Σ_a μ(a|s) P(z+|s,a)
    b = torch.zeros(N, device=dev, dtype=dtype)
    succ = torch.as_tensor(nxt == SUCCESS, device=dev)
    b.index_add_(0, t_src[succ], beta * t_w[succ])

    V = torch.zeros(N, device=dev, dtype=dtype)
    offsets = graph.group_node_offsets
    n_group = np.diff(offsets)
    node_group = graph.node_group
    local = np.arange(N) - offsets[node_group]
    e_src, e_dst, e_w = src[inner], nxt[inner], w[inner]
    e_group = node_group[e_src]

    dense = n_group <= dense_max
    size = np.where(dense, _bucket_size(n_group), 0)
    for m in np.unique(size[dense]):
        groups = np.flatnonzero(size == m)
        slot = np.full(len(n_group), -1, dtype=np.int64)
        slot[groups] = np.arange(len(groups))
        B = len(groups)
        A = torch.zeros((B, int(m), int(m)), device=dev, dtype=dtype)
        diag = torch.arange(int(m), device=dev)
        A[:, diag, diag] = 1.0
        sel = slot[e_group] >= 0
        idx = (torch.as_tensor(slot[e_group[sel]], device=dev),
               torch.as_tensor(local[e_src[sel]], device=dev),
               torch.as_tensor(local[e_dst[sel]], device=dev))
        A.index_put_(idx, torch.as_tensor(-beta * e_w[sel], device=dev, dtype=dtype), accumulate=True)
        nodes = np.flatnonzero(slot[node_group] >= 0)
        t_nodes = torch.as_tensor(nodes, device=dev)
        rhs = torch.zeros((B, int(m)), device=dev, dtype=dtype)
        rhs[torch.as_tensor(slot[node_group[nodes]], device=dev),
            torch.as_tensor(local[nodes], device=dev)] = b[t_nodes]
        sol = torch.linalg.solve(A, rhs.unsqueeze(-1)).squeeze(-1)  # Eq. 9: one solve per bucket
        V[t_nodes] = sol[torch.as_tensor(slot[node_group[nodes]], device=dev),
                         torch.as_tensor(local[nodes], device=dev)]
    if (~dense).any():
        V = _sparse_solve_large(graph, ~dense, e_src, e_dst, e_w, beta, b, V)

    # Closure residual ‖(I − βM)V − b‖∞ by a sparse mat-vec over the edges.
    MV = torch.zeros(N, device=dev, dtype=dtype)
    MV.index_add_(0, torch.as_tensor(e_src, device=dev),
                  torch.as_tensor(e_w, device=dev, dtype=dtype) * V[torch.as_tensor(e_dst, device=dev)])
    residual = float((V - beta * MV - b).abs().max()) if N else 0.0
    return V, residual


def _sparse_solve_large(graph, large, e_src, e_dst, e_w, beta, b, V):
    """Block-diagonal sparse direct solve (SuperLU) for the groups too large to solve densely."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla
    import torch

    nodes = np.flatnonzero(large[graph.node_group])
    pos = np.full(graph.num_nodes, -1, dtype=np.int64)
    pos[nodes] = np.arange(len(nodes))
    sel = pos[e_src] >= 0
    n = len(nodes)
    rows = np.r_[np.arange(n), pos[e_src[sel]]]
    cols = np.r_[np.arange(n), pos[e_dst[sel]]]
    vals = np.r_[np.ones(n), -beta * e_w[sel]]
    A = sp.csc_matrix((vals, (rows, cols)), shape=(n, n))
    sol = spla.spsolve(A, b[torch.as_tensor(nodes, device=b.device)].cpu().numpy())
    V[torch.as_tensor(nodes, device=V.device)] = torch.as_tensor(np.atleast_1d(sol), device=V.device,
                                                                 dtype=V.dtype)
    return V


def _group_advantage_torch(graph: AnchorGraph, dev, dtype, eps: float = 1e-6):
    """A^G per trajectory (success indicator, sample std, eps; one-rollout groups: mean 0, std 1)."""
    import torch

    R = torch.as_tensor(graph.batch.traj_success, device=dev, dtype=dtype)
    g = torch.as_tensor(graph.batch.traj_group, device=dev)
    G = graph.num_groups
    cnt = torch.zeros(G, device=dev, dtype=dtype).index_add_(0, g, torch.ones_like(R))
    mean = torch.zeros(G, device=dev, dtype=dtype).index_add_(0, g, R) / cnt.clamp(min=1)
    sq = torch.zeros(G, device=dev, dtype=dtype).index_add_(0, g, (R - mean[g]) ** 2)
    std = torch.sqrt(sq / (cnt - 1).clamp(min=1))
    single = cnt <= 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    return (R - mean[g]) / (std[g] + eps)


def _family_torch(graph: AnchorGraph, name: str, params, *, device, beta, depth, sigma_min,
                  w_group, w_step, min_actions, dtype=None, dense_max=DENSE_MAX) -> CreditResult:
    import torch

    dev = torch.device(resolve_device(device))
    dtype = dtype or torch.float64
    N, P = graph.num_nodes, graph.pair_node.shape[0]
    pair_node = torch.as_tensor(graph.pair_node, device=dev)
    pair_count = torch.as_tensor(graph.pair_count, device=dev, dtype=dtype)
    visits = torch.as_tensor(graph.node_visits, device=dev, dtype=dtype)
    mu = pair_count / visits[pair_node]
    edge_pair = torch.as_tensor(graph.edge_pair, device=dev)
    nxt = torch.as_tensor(graph.edge_next, device=dev)
    p_x = torch.as_tensor(graph.edge_count, device=dev, dtype=dtype) / pair_count[edge_pair]

    def backup(V):  # Eq. 7: Q(s,a) = β Σ_x P(x|s,a) V(x), V(z+) = 1, V(z−) = 0
        v_next = torch.where(nxt >= 0, V[nxt.clamp(min=0)],
                             (nxt == SUCCESS).to(dtype))
        return torch.zeros(P, device=dev, dtype=dtype).index_add_(0, edge_pair, beta * p_x * v_next)

    diagnostics = {}
    if math.isinf(depth):
        V, residual = closure_values_torch(graph, beta, device=dev.type if dev.index is None else str(dev),
                                           dtype=dtype, dense_max=dense_max)
        Q = backup(V)
        diagnostics["closure_residual"] = residual
    else:
        b = graph.batch
        step_node = torch.as_tensor(graph.step_node, device=dev)
        step_pair = torch.as_tensor(graph.step_pair, device=dev)
        to_go = torch.as_tensor(b.traj_len[b.step_traj] - b.step_pos, device=dev, dtype=dtype)
        R = torch.as_tensor(b.traj_success[b.step_traj], device=dev, dtype=dtype)
        G_ret = beta ** to_go * R                                  # Eq. 6: G = β^(T−t+1)·R
        V = torch.zeros(N, device=dev, dtype=dtype).index_add_(0, step_node, G_ret) / visits
        Q = torch.zeros(P, device=dev, dtype=dtype).index_add_(0, step_pair, G_ret) / pair_count
        for _ in range(int(depth)):
            Q = backup(V)                                          # Q^(K) = B V^(K−1)
            V = torch.zeros(N, device=dev, dtype=dtype).index_add_(0, pair_node, mu * Q)
    adv = Q - V[pair_node]                                         # Eq. 13
    sigma = torch.sqrt(torch.zeros(N, device=dev, dtype=dtype).index_add_(0, pair_node, mu * adv ** 2))
    n_act = torch.as_tensor(graph.node_num_actions, device=dev)
    gate = n_act >= min_actions
    pair_credit = torch.where(gate[pair_node], adv / sigma.clamp(min=sigma_min)[pair_node],
                              torch.zeros_like(adv))
    step_traj = torch.as_tensor(graph.batch.step_traj, device=dev)
    step_pair = torch.as_tensor(graph.step_pair, device=dev)
    step_node = torch.as_tensor(graph.step_node, device=dev)
    a_group = _group_advantage_torch(graph, dev, dtype)[step_traj]
    credit = pair_credit[step_pair]
    advantage = w_group * a_group + w_step * credit
    diagnostics["gated_fraction"] = float((~gate).to(dtype).mean()) if N else 0.0

    def np_(t):
        return t.detach().to("cpu", torch.float64).numpy()

    return CreditResult(name, params, graph, np_(V[step_node]), np_(Q[step_pair]), np_(credit),
                        np_(advantage), node_value=np_(V), pair_q=np_(Q), pair_credit=np_(pair_credit),
                        diagnostics=diagnostics, backend=f"torch:{dev.type}")


def crbc_torch(graph: AnchorGraph, *, device: str = "auto", beta: float = 0.98,
               depth: float = math.inf, sigma_min: float = 0.1, w_group: float = 1.0,
               w_step: float = 5.0, min_actions: int = 2, dtype=None,
               dense_max: int = DENSE_MAX) -> CreditResult:
    """Batched `crbc_viz.estimators.crbc.crbc` (same math, same outputs)."""
    from ..estimators.crbc import CRBCParams

    params = CRBCParams(beta, depth, sigma_min, w_group, w_step, min_actions)
    return _family_torch(graph, "crbc", params, device=device, beta=beta, depth=depth,
                         sigma_min=sigma_min, w_group=w_group, w_step=w_step,
                         min_actions=min_actions, dtype=dtype, dense_max=dense_max)


def visit_local_torch(graph: AnchorGraph, *, device: str = "auto", beta: float = 0.98,
                      sigma_min: float = 0.1, w_group: float = 1.0, w_step: float = 5.0,
                      min_actions: int = 2, dtype=None) -> CreditResult:
    """Batched `crbc_viz.estimators.crbc.visit_local`."""
    from ..estimators.crbc import VisitLocalParams

    params = VisitLocalParams(beta, sigma_min, w_group, w_step, min_actions)
    return _family_torch(graph, "visit_local", params, device=device, beta=beta, depth=0,
                         sigma_min=sigma_min, w_group=w_group, w_step=w_step,
                         min_actions=min_actions, dtype=dtype)
