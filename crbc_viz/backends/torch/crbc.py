"""Batched torch twin of `crbc_viz.estimators.crbc` (every group in one pass).

The exact solve is direct, never iterative: groups with at most ``dense_max`` anchors are
bucketed by padded size and solved with one batched dense LU per bucket, in chunks of at
most ``CHUNK_BYTES`` (``torch.linalg.solve``; padding rows are identity rows with b = 0). Larger groups go to a
sparse direct solve (SciPy SuperLU on the block-diagonal system, on the CPU), so no dense
n² matrix is ever built for a large group. I − βM is a nonsingular M-matrix, so LU without
pivoting problems is stable; torch's partial pivoting is used anyway.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import EstimatorInputError
from ...estimators.registry import implements
from ...graph import SUCCESS, AnchorGraph
from ...result import CreditResult
from ._device import resolve_device

__all__ = ["crbc_torch", "visit_local_torch", "closure_values_torch", "DENSE_MAX"]

#: Largest group (anchors) solved densely; larger groups use the sparse direct solve.
DENSE_MAX = 512
#: Most bytes of padded dense matrices allocated at once (a size class is solved in chunks).
CHUNK_BYTES = 256 << 20


def check_float_dtype(dtype, caller: str):
    """``dtype`` as torch.float64 (None) or torch.float32 (the solves' dtypes); anything else
    raises `EstimatorInputError` naming ``caller``."""
    import torch

    if dtype is None:
        return torch.float64
    if dtype not in (torch.float64, torch.float32):
        raise EstimatorInputError(
            f"{caller}: parameter 'dtype' must be torch.float64 or torch.float32, got {dtype!r}"
        )
    return dtype


def _bucket_size(n: np.ndarray) -> np.ndarray:
    """Padded size classes: powers of two from 8 up, so a bucket wastes < 2× per side."""
    return np.maximum(8, 1 << np.ceil(np.log2(np.maximum(n, 1))).astype(np.int64))


def closure_values_torch(
    graph: AnchorGraph, beta: float, *, device: str = "auto", dtype=None, dense_max: int = DENSE_MAX
):
    """Solve (I − βM)V = b for every group of ``graph`` at once.

    Returns:
        ``(V [N], residual)``: a tensor on ``device`` and the closure residual
        ‖(I − βM)V − b‖∞ over the batch (a float).
    """
    import torch

    dev = torch.device(resolve_device(device))
    dtype = check_float_dtype(dtype, "closure_values_torch")
    src = graph.pair_node[graph.edge_pair]
    w = graph.edge_count / graph.node_visits[src].astype(np.float64)  # μ(a|s)·P(x|s,a) = N(s,a,x)/N(s)
    t = lambda a, dt=None: torch.as_tensor(a, device=dev, dtype=dt)  # noqa: E731
    return solve_closure(
        t(src),
        t(graph.edge_next),
        t(w, dtype),
        t(graph.node_group),
        graph.group_node_offsets,
        beta,
        dense_max=dense_max,
    )


def solve_closure(
    e_src, e_next, e_w, node_group, group_node_offsets: np.ndarray, beta: float, *, dense_max: int = DENSE_MAX
):
    """The closure from transition weights, all tensors on one device.

    Args:
        e_src, e_next: ``[E]`` source node and successor (node id, or SUCCESS/FAILURE) of
            each transition entry; entries may repeat (they accumulate).
        e_w: ``[E]`` weight μ(a|s)·P(x|s,a) of each entry (so rows of M sum to ≤ 1).
        node_group: ``[N]`` group of each node (groups contiguous).
        group_node_offsets: ``[G + 1]`` node offsets, on the host.

    Returns:
        ``(V [N], residual)``.
    """
    import torch

    dev, dtype = e_w.device, e_w.dtype
    N = node_group.shape[0]
    b = torch.zeros(N, device=dev, dtype=dtype)
    succ = e_next == SUCCESS
    b.index_add_(0, e_src[succ], beta * e_w[succ])  # Eq. 8: b(s)
    inner = e_next >= 0
    i_src, i_dst, i_w = e_src[inner], e_next[inner], e_w[inner]
    V = torch.zeros(N, device=dev, dtype=dtype)
    n_group = np.diff(group_node_offsets)
    offsets = torch.as_tensor(group_node_offsets[:-1], device=dev)
    local = torch.arange(N, device=dev) - offsets[node_group]
    dense = n_group <= dense_max
    size = np.where(dense, _bucket_size(n_group), 0)
    i_group = node_group[i_src]
    for m in np.unique(size[dense]):
        m = int(m)
        bucket = np.flatnonzero(size == m)
        per_chunk = max(1, CHUNK_BYTES // (e_w.element_size() * m * m))
        for c0 in range(0, len(bucket), per_chunk):  # bounded: ≤ CHUNK_BYTES of matrices at once
            groups = bucket[c0 : c0 + per_chunk]
            slot_np = np.full(len(n_group), -1, dtype=np.int64)
            slot_np[groups] = np.arange(len(groups))
            slot = torch.as_tensor(slot_np, device=dev)
            A = torch.zeros((len(groups), m, m), device=dev, dtype=dtype)
            diag = torch.arange(m, device=dev)
            A[:, diag, diag] = 1.0
            e_slot = slot[i_group]
            sel = e_slot >= 0
            A.index_put_(
                (e_slot[sel], local[i_src[sel]], local[i_dst[sel]]), -beta * i_w[sel], accumulate=True
            )
            n_slot = slot[node_group]
            nodes = torch.nonzero(n_slot >= 0).squeeze(1)
            rhs = torch.zeros((len(groups), m), device=dev, dtype=dtype)
            rhs[n_slot[nodes], local[nodes]] = b[nodes]
            sol = torch.linalg.solve(A, rhs.unsqueeze(-1)).squeeze(-1)  # Eq. 9: one solve per chunk
            V[nodes] = sol[n_slot[nodes], local[nodes]]
    if (~dense).any():
        V = _sparse_solve_large(~dense, node_group, i_src, i_dst, i_w, beta, b, V)
    # Closure residual ‖(I − βM)V − b‖∞ by a sparse mat-vec over the entries.
    MV = torch.zeros(N, device=dev, dtype=dtype).index_add_(0, i_src, i_w * V[i_dst])
    residual = float((V - beta * MV - b).abs().max()) if N else 0.0
    return V, residual


def _sparse_solve_large(large: np.ndarray, node_group, i_src, i_dst, i_w, beta, b, V):
    """The groups too large to solve densely, on the CPU by the numpy reference's sparse
    path (`crbc_viz.ops.closure.sparse_solve`: sparse LU, or the bounded iteration
    where `iterated_groups` says); no dense n² matrix is built for them."""
    import torch

    from ...ops.closure import iterated_groups, sparse_solve

    ng = node_group.cpu().numpy()
    src = i_src.cpu().numpy()
    n_group = np.bincount(ng, minlength=len(large))
    iterate = iterated_groups(n_group, np.bincount(ng[src], minlength=len(large)), beta)
    out = sparse_solve(
        large[ng],
        src,
        i_dst.cpu().numpy(),
        i_w.to("cpu", torch.float64).numpy(),
        b.to("cpu", torch.float64).numpy(),
        beta,
        V.to("cpu", torch.float64).numpy().copy(),
        iterate=iterate[ng],
    )
    return torch.as_tensor(out, device=V.device, dtype=V.dtype)


def group_advantage_torch(traj_success, traj_group, num_groups: int, eps: float = 1e-6):
    """A^G per trajectory ``[T]`` from tensors (success indicator, sample std, eps):
    `crbc_viz.ops.advantage.outcome_advantage`, the one group advantage."""
    from ...ops.advantage import outcome_advantage
    from ...ops.xp import float_array

    return outcome_advantage(float_array(traj_success), traj_group, num_groups, eps=eps)


def readout(V, Q, pair_node, mu, node_num_actions, *, sigma_min: float, min_actions: int, pair_terms):
    """Eq. 13: A = Q − V, σ(s)² = Σ_a μ A², gated and σ-normalised credit per pair ``[P]``;
    an anchor whose Q agree within round-off (`crbc_viz.ops.segments.no_spread`: magnitude max(|Q|, |V|),
    ``pair_terms`` = the steps of each pair's group) gets 0.

    Returns ``(pair_credit [P], gate [N])``."""
    import torch

    from ...ops.segments import no_spread

    adv = Q - V[pair_node]
    sigma = torch.sqrt(torch.zeros_like(V).index_add_(0, pair_node, mu * adv**2))
    gate = node_num_actions >= min_actions
    flat = no_spread(Q, pair_node, V.shape[0], magnitude=V[pair_node], terms=pair_terms)
    pair_credit = torch.where(
        (gate & ~flat)[pair_node], adv / sigma.clamp(min=sigma_min)[pair_node], torch.zeros_like(adv)
    )
    return pair_credit, gate


def _family_torch(
    graph: AnchorGraph,
    name: str,
    params,
    *,
    device,
    beta,
    depth,
    sigma_min,
    w_group,
    w_step,
    min_actions,
    dtype=None,
    dense_max=DENSE_MAX,
) -> CreditResult:
    import torch

    dev = torch.device(resolve_device(device))
    dtype = check_float_dtype(dtype, f"{name}_torch")
    N, P = graph.num_nodes, graph.pair_node.shape[0]
    pair_node = torch.as_tensor(graph.pair_node, device=dev)
    pair_count = torch.as_tensor(graph.pair_count, device=dev, dtype=dtype)
    visits = torch.as_tensor(graph.node_visits, device=dev, dtype=dtype)
    mu = pair_count / visits[pair_node]
    edge_pair = torch.as_tensor(graph.edge_pair, device=dev)
    nxt = torch.as_tensor(graph.edge_next, device=dev)
    p_x = torch.as_tensor(graph.edge_count, device=dev, dtype=dtype) / pair_count[edge_pair]

    def backup(V):  # Eq. 7: Q(s,a) = β Σ_x P(x|s,a) V(x), V(z+) = 1, V(z−) = 0
        v_next = torch.where(nxt >= 0, V[nxt.clamp(min=0)], (nxt == SUCCESS).to(dtype))
        return torch.zeros(P, device=dev, dtype=dtype).index_add_(0, edge_pair, beta * p_x * v_next)

    diagnostics = {}
    if math.isinf(depth):
        V, residual = closure_values_torch(
            graph, beta, device=dev.type if dev.index is None else str(dev), dtype=dtype, dense_max=dense_max
        )
        Q = backup(V)
        diagnostics["closure_residual"] = residual
    else:
        b = graph.batch
        step_node = torch.as_tensor(graph.step_node, device=dev)
        step_pair = torch.as_tensor(graph.step_pair, device=dev)
        to_go = torch.as_tensor(b.traj_len[b.step_traj] - b.step_pos, device=dev, dtype=dtype)
        R = torch.as_tensor(b.traj_success[b.step_traj], device=dev, dtype=dtype)
        G_ret = beta**to_go * R  # Eq. 6: G = β^(T−t+1)·R
        V = torch.zeros(N, device=dev, dtype=dtype).index_add_(0, step_node, G_ret) / visits
        Q = torch.zeros(P, device=dev, dtype=dtype).index_add_(0, step_pair, G_ret) / pair_count
        for _ in range(int(depth)):
            Q = backup(V)  # Q^(K) = B V^(K−1)
            V = torch.zeros(N, device=dev, dtype=dtype).index_add_(0, pair_node, mu * Q)
    from ...ops.returns import group_steps

    pair_terms = group_steps(graph)[graph.node_group[graph.pair_node]]
    pair_credit, gate = readout(
        V,
        Q,
        pair_node,
        mu,
        torch.as_tensor(graph.node_num_actions, device=dev),
        sigma_min=sigma_min,
        min_actions=min_actions,
        pair_terms=torch.as_tensor(pair_terms, device=dev, dtype=dtype),
    )
    b = graph.batch
    step_traj = torch.as_tensor(b.step_traj, device=dev)
    step_pair = torch.as_tensor(graph.step_pair, device=dev)
    step_node = torch.as_tensor(graph.step_node, device=dev)
    a_group = group_advantage_torch(
        torch.as_tensor(b.traj_success, device=dev),
        torch.as_tensor(b.traj_group, device=dev),
        graph.num_groups,
    )
    credit = pair_credit[step_pair]
    advantage = w_group * a_group.to(dtype)[step_traj] + w_step * credit
    diagnostics["gated_fraction"] = float((~gate).to(dtype).mean()) if N else 0.0

    def np_(t):
        return t.detach().to("cpu", torch.float64).numpy()

    return CreditResult(
        name,
        params,
        graph,
        np_(V[step_node]),
        np_(Q[step_pair]),
        np_(credit),
        np_(advantage),
        node_value=np_(V),
        pair_q=np_(Q),
        pair_credit=np_(pair_credit),
        diagnostics=diagnostics,
        backend=f"torch:{dev.type}",
    )


@implements("crbc", "torch")
def crbc_torch(
    graph: AnchorGraph, params, *, device: str = "auto", dtype=None, dense_max: int = DENSE_MAX
) -> CreditResult:
    """Batched `crbc_viz.estimators.crbc.crbc` (same math, same outputs); ``params`` is the
    checked `CRBCParams`."""
    return _family_torch(
        graph,
        "crbc",
        params,
        device=device,
        beta=params.beta,
        depth=params.depth,
        sigma_min=params.sigma_min,
        w_group=params.w_group,
        w_step=params.w_step,
        min_actions=params.min_actions,
        dtype=dtype,
        dense_max=dense_max,
    )


@implements("visit_local", "torch")
def visit_local_torch(graph: AnchorGraph, params, *, device: str = "auto", dtype=None) -> CreditResult:
    """Batched `crbc_viz.estimators.crbc.visit_local` (``params``: `VisitLocalParams`)."""
    return _family_torch(
        graph,
        "visit_local",
        params,
        device=device,
        beta=params.beta,
        depth=0,
        sigma_min=params.sigma_min,
        w_group=params.w_group,
        w_step=params.w_step,
        min_actions=params.min_actions,
        dtype=dtype,
    )
