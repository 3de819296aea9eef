"""The torch rows of the graph-wide peer estimators (GiGPO, RTMC, GRAFT, Gated-BEPO, PGPO):
each is the numpy reference's own function (`crbc_viz.estimators.<name>`, written once against
the array API) run on the graph's tensors on the device (`array_kernel`), every group in one
pass. Discounted sums along trajectories are blocked matmuls on tensors
(`crbc_viz.ops.returns.blocked_suffix_sums`); group-by reductions are ``index_add_`` /
``scatter_reduce`` (`crbc_viz.ops.xp`).

What is written here is only what differs on a device: the mean-backup values of GRAFT and
Gated-BEPO reuse CRBC's batched direct solve (`closure_values_torch`, β = γ: size-bucketed
chunks, sparse LU for large groups), and GRAFT's Graph GAE is 0 under exact values
(`gae_negligible`), else walked on the CPU in linear memory and moved to the device.
"""

from __future__ import annotations

import dataclasses

from ...estimators.gated_bepo import _gated_bepo, trajectory_gae
from ...estimators.gigpo import _gigpo
from ...estimators.graft import _graft
from ...estimators.pgpo import _pgpo
from ...estimators.registry import implements
from ...estimators.rtmc import _rtmc
from ...graph import AnchorGraph
from .arrays import array_kernel

__all__ = ["closure_values_on", "graph_gae_bonus_torch"]

for _name, _fn in (("gigpo", _gigpo), ("rtmc", _rtmc), ("pgpo", _pgpo)):
    implements(_name, "torch")(array_kernel(_fn))


def closure_values_on(device):
    """``values(graph, γ) -> (V [N] float64 tensor on device, residual)``: the mean-backup
    fixed point by CRBC's batched solve (`closure_values_torch` with β = γ)."""

    def values(graph: AnchorGraph, gamma: float):
        import torch

        from .crbc import closure_values_torch

        V, residual = closure_values_torch(graph, gamma, device=str(device), dtype=torch.float64)
        return V.to(device), float(residual)

    return values


def graph_gae_bonus_torch(graph: AnchorGraph, td, gamma: float, lam: float):
    """`crbc_viz.estimators.graft.graph_gae_bonus` for a tensor ``td``: 0 where `gae_negligible`
    proves it (always, under GRAFT's exact values); otherwise the frontier walk runs on the
    CPU (the compiled kernel, or the reference without numba) in O(steps + anchors) memory and
    the result is moved to ``td``'s device — no [groups × anchors²] padded matrices."""
    import torch

    from ...estimators.graft import gae_inputs, gae_negligible, graph_gae_bonus

    out = torch.zeros(graph.batch.num_steps, dtype=td.dtype, device=td.device)
    if lam == 0.0 or graph.batch.num_steps == 0 or graph.num_nodes == 0:
        return out
    td_np = td.detach().to("cpu", torch.float64).numpy()
    remaining, node_td = gae_inputs(graph, td_np)
    if gae_negligible(graph, node_td, remaining, gamma, lam):
        return out
    try:
        from ..numba.graph import graph_gae_bonus_numba

        bonus = graph_gae_bonus_numba(graph, td_np, gamma, lam)
    except ImportError:
        bonus = graph_gae_bonus(graph, td_np, gamma, lam)
    return torch.as_tensor(bonus, dtype=td.dtype, device=td.device)


def _fields(params) -> dict:
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}


def _graft_on_device(graph, params, *, to):
    return _graft(graph, closure_values_on(to.device), graph_gae_bonus_torch, to=to, **_fields(params))


def _gated_bepo_on_device(graph, params, *, to):
    return _gated_bepo(graph, closure_values_on(to.device), trajectory_gae, to=to, **_fields(params))


implements("graft", "torch")(array_kernel(_graft_on_device, _graft))
implements("gated_bepo", "torch")(array_kernel(_gated_bepo_on_device, _gated_bepo))
