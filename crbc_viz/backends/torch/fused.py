"""CRBC fused on one device, from raw step arrays: sort-based merge, bucketed batched dense
LU, credit — the GPU path of the training loop (also runs on the CPU for parity tests).

Merge: anchors are merged within each group by two stable sorts (hash, then group) and a
run-length pass; (node, action) pairs by ``torch.unique``. The closure reuses
`crbc_viz.backends.torch.crbc.solve_closure` with one entry per step (weights 1/N(s)
accumulate into M), so no edge table is materialised. Everything stays on the device
except the per-group node counts (one small host copy, to size the buckets).
"""

from __future__ import annotations

import numpy as np

from ...graph import SUCCESS
from ._device import resolve_device
from .crbc import DENSE_MAX, group_advantage_torch, readout, solve_closure

__all__ = ["crbc_step_credit_torch", "to_device"]


def to_device(step_anchor_hash, step_action, traj_offsets, group_traj_offsets, traj_success, device="auto"):
    """Place the five step arrays on ``device`` once (outside a timed loop)."""
    import torch

    dev = torch.device(resolve_device(device))
    h = np.ascontiguousarray(step_anchor_hash, dtype=np.uint64).view(np.int64)
    return (
        torch.as_tensor(h, device=dev),
        torch.as_tensor(np.asarray(step_action, np.int64), device=dev),
        torch.as_tensor(np.asarray(traj_offsets, np.int64), device=dev),
        torch.as_tensor(np.asarray(group_traj_offsets, np.int64), device=dev),
        torch.as_tensor(np.asarray(traj_success, bool), device=dev),
    )


def crbc_step_credit_torch(
    step_hash,
    step_action,
    traj_offsets,
    group_traj_offsets,
    traj_success,
    *,
    beta: float = 0.98,
    sigma_min: float = 0.1,
    w_group: float = 1.0,
    w_step: float = 5.0,
    min_actions: int = 2,
    dtype=None,
    dense_max: int = DENSE_MAX,
):
    """Exact CRBC per step; inputs are tensors from `to_device` (all on one device).

    Returns:
        dict of ``value``, ``q_value``, ``credit``, ``advantage`` tensors ``[S]`` and the
        ``closure_residual`` (float). float64 by default; ``dtype=torch.float32`` agrees with
        float64 to about 1e-5 on these workloads (bench/RESULTS.md states the measured gap).
    """
    import torch

    dev = step_hash.device
    dtype = dtype or torch.float64
    S = step_hash.shape[0]
    T = traj_offsets.shape[0] - 1
    G = group_traj_offsets.shape[0] - 1
    traj_len = traj_offsets[1:] - traj_offsets[:-1]
    traj_group = torch.repeat_interleave(
        torch.arange(G, device=dev), group_traj_offsets[1:] - group_traj_offsets[:-1], output_size=T
    )
    step_traj = torch.repeat_interleave(torch.arange(T, device=dev), traj_len, output_size=S)
    step_group = traj_group[step_traj]
    # Merge: sort by (group, hash) with two stable sorts, then number the runs.
    o1 = torch.argsort(step_hash, stable=True)
    order = o1[torch.argsort(step_group[o1], stable=True)]
    gs, hs = step_group[order], step_hash[order]
    new = torch.ones(S, dtype=torch.bool, device=dev)
    new[1:] = (gs[1:] != gs[:-1]) | (hs[1:] != hs[:-1])
    sorted_id = torch.cumsum(new, 0) - 1
    step_node = torch.empty(S, dtype=torch.int64, device=dev)
    step_node[order] = sorted_id
    node_group = gs[new]
    N = node_group.shape[0]
    group_node_offsets = np.r_[0, np.cumsum(torch.bincount(node_group, minlength=G).cpu().numpy())]
    # Pairs and successors.
    A = int(step_action.max()) + 1 if S else 1
    pair_keys, step_pair = torch.unique(step_node * A + step_action, return_inverse=True)
    pair_node = pair_keys // A
    step_next = torch.empty(S, dtype=torch.int64, device=dev)
    step_next[:-1] = step_node[1:]
    last = traj_offsets[1:] - 1
    step_next[last] = torch.where(traj_success, SUCCESS, -2)
    visits = torch.bincount(step_node, minlength=N).to(dtype)
    pair_count = torch.bincount(step_pair, minlength=pair_keys.shape[0]).to(dtype)
    # Closure with one entry per step: Σ over occurrences of 1/N(s) = N(s→x)/N(s).
    V, residual = solve_closure(
        step_node,
        step_next,
        1.0 / visits[step_node],
        node_group,
        group_node_offsets,
        beta,
        dense_max=dense_max,
    )
    v_next = torch.where(step_next >= 0, V[step_next.clamp(min=0)], (step_next == SUCCESS).to(dtype))
    Q = torch.zeros(pair_keys.shape[0], device=dev, dtype=dtype).index_add_(
        0, step_pair, beta * v_next / pair_count[step_pair]
    )
    mu = pair_count / visits[pair_node]
    n_act = torch.bincount(pair_node, minlength=N)
    pair_credit, _ = readout(V, Q, pair_node, mu, n_act, sigma_min=sigma_min, min_actions=min_actions)
    credit = pair_credit[step_pair]
    a_group = group_advantage_torch(traj_success, traj_group, G).to(dtype)[step_traj]
    return {
        "value": V[step_node],
        "q_value": Q[step_pair],
        "credit": credit,
        "advantage": w_group * a_group + w_step * credit,
        "closure_residual": residual,
    }
