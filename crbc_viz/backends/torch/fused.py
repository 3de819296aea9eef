"""CRBC fused on one device, from raw step arrays: sort-based merge, bucketed batched dense
LU, credit — the GPU path of the training loop (also runs on the CPU for parity tests).

Merge: anchors are merged within each group by two stable sorts (hash, then group) and a
run-length pass; (node, action) pairs by ``torch.unique``. The closure reuses
`crbc_viz.backends.torch.crbc.solve_closure` with one entry per step (weights 1/N(s)
accumulate into M), so no edge table is materialised. Everything stays on the device
except the per-group node counts (one small host copy, to size the buckets).

`crbc_fused` is ``crbc``'s guarded torch row of the kernel table: `crbc_viz.api.score` (and so
every trainer adapter) runs it in place of the batched twin where `should_run` agrees, i.e. for
``crbc`` at depth ∞ on a CUDA device named in the call.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import EstimatorInputError
from ...estimators.crbc import CRBCParams
from ...estimators.registry import implements
from ...graph import SUCCESS, action_ids
from ...ops.checks import ACTION_ID_LIMIT, check_step_arrays
from ...result import deferred_result, scatter_steps
from ..checks import check_engine_params
from ._device import resolve_device
from .crbc import DENSE_MAX, check_float_dtype, group_advantage_torch, readout, solve_closure

__all__ = ["crbc_step_credit_torch", "to_device", "check_step_tensors", "crbc_fused", "should_run", "on_cuda"]

_NAMES = ("step_hash", "step_action", "traj_offsets", "group_traj_offsets", "traj_success")


def to_device(step_anchor_hash, step_action, traj_offsets, group_traj_offsets, traj_success, device="auto"):
    """Check the five step arrays (`crbc_viz.ops.checks.check_step_arrays`) and place them on
    ``device`` once (outside a timed loop)."""
    import torch

    h, a, to, gto, s = check_step_arrays(
        step_anchor_hash, step_action, traj_offsets, group_traj_offsets, traj_success, caller="to_device"
    )
    dev = torch.device(resolve_device(device))
    return (
        torch.as_tensor(h.view(np.int64), device=dev),
        torch.as_tensor(a, device=dev),
        torch.as_tensor(to, device=dev),
        torch.as_tensor(gto, device=dev),
        torch.as_tensor(s, device=dev),
    )


def _is_int(t) -> bool:
    import torch

    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def check_step_tensors(
    step_hash, step_action, traj_offsets, group_traj_offsets, traj_success, *, caller: str
):
    """The contract of `crbc_viz.ops.checks.check_step_arrays` on tensors, where they are:
    shapes, dtypes and devices from the metadata, the values by reductions on the device that
    come back to the host in one transfer. Returns the five tensors with the actions and
    offsets as int64 and the outcomes as bool; raises `EstimatorInputError` naming
    ``caller`` and the argument."""
    import torch

    args = (step_hash, step_action, traj_offsets, group_traj_offsets, traj_success)

    def error(name, what):
        return EstimatorInputError(f"{caller}: argument '{name}' {what}")

    for name, t in zip(_NAMES, args):
        if not isinstance(t, torch.Tensor):
            raise error(name, f"must be a torch tensor (see to_device), got {type(t).__name__}")
        if t.dim() != 1:
            raise error(name, f"must be 1-D, got shape {tuple(t.shape)}")
        if t.device != step_hash.device:
            raise error(name, f"is on {t.device}, 'step_hash' on {step_hash.device} (one device for all)")
        if name != "traj_success" and not _is_int(t):
            raise error(name, f"must have an integer dtype, got {t.dtype}")
    if traj_success.is_complex():
        raise error("traj_success", f"must be bool or 0/1 numbers, got dtype {traj_success.dtype}")
    S = step_hash.shape[0]
    if step_action.shape[0] != S:
        raise error("step_action", f"must have length S (of 'step_hash') = {S}, got {step_action.shape[0]}")
    for name, t in (("traj_offsets", traj_offsets), ("group_traj_offsets", group_traj_offsets)):
        if t.shape[0] == 0:
            raise error(name, "must have at least one entry (offsets [K + 1] start at 0)")
    T = traj_offsets.shape[0] - 1
    if traj_success.shape[0] != T:
        raise error(
            "traj_success", f"must have length T (of 'traj_offsets') = {T}, got {traj_success.shape[0]}"
        )
    step_action, traj_offsets, group_traj_offsets = (
        t.to(torch.int64) for t in (step_action, traj_offsets, group_traj_offsets)
    )
    to_step, gto_step = traj_offsets.diff(), group_traj_offsets.diff()
    # (name, what is wrong, 0-d bool on the device, the offending value: read only on failure)
    tests = [
        ("traj_offsets", "must start at 0", traj_offsets[0] != 0, lambda: traj_offsets[0]),
        (
            "traj_offsets",
            "must strictly increase (no empty trajectory)",
            (to_step < 1).any(),
            lambda: f"a step of {to_step.min().item()}",
        ),
        (
            "traj_offsets",
            f"must end at S = {S} (the length of 'step_hash')",
            traj_offsets[-1] != S,
            lambda: traj_offsets[-1],
        ),
        ("group_traj_offsets", "must start at 0", group_traj_offsets[0] != 0, lambda: group_traj_offsets[0]),
        (
            "group_traj_offsets",
            "must never decrease",
            (gto_step < 0).any(),
            lambda: f"a step of {gto_step.min().item()}",
        ),
        (
            "group_traj_offsets",
            f"must end at T = {T} (len(traj_offsets) - 1)",
            group_traj_offsets[-1] != T,
            lambda: group_traj_offsets[-1],
        ),
    ]
    if S:
        lo, hi = step_action.min(), step_action.max()
        tests.append(
            (
                "step_action",
                f"must hold ids in [0, {ACTION_ID_LIMIT})",
                (lo < 0) | (hi >= ACTION_ID_LIMIT),
                lambda: f"min {lo.item()}, max {hi.item()}",
            )
        )
    if traj_success.dtype != torch.bool:
        off = (traj_success != 0) & (traj_success != 1)
        tests.append(("traj_success", "must be bool or 0/1", off.any(), lambda: traj_success[off][0]))
    failed = torch.stack([bad for _, _, bad, _ in tests]).tolist()  # the one host transfer
    for (name, what, _, got), bad in zip(tests, failed):
        if bad:
            value = got()
            value = value.item() if isinstance(value, torch.Tensor) else value
            raise error(name, f"{what}, got {value}")
    return step_hash, step_action, traj_offsets, group_traj_offsets, traj_success.to(torch.bool)


def crbc_step_credit_torch(
    step_hash,
    step_action,
    traj_offsets,
    group_traj_offsets,
    traj_success,
    *,
    beta: float = CRBCParams.beta,
    sigma_min: float = CRBCParams.sigma_min,
    w_group: float = CRBCParams.w_group,
    w_step: float = CRBCParams.w_step,
    min_actions: int = CRBCParams.min_actions,
    dtype=None,
    dense_max: int = DENSE_MAX,
):
    """Exact CRBC per step; inputs are tensors from `to_device` (all on one device).

    Args:
        step_hash, step_action, traj_offsets, group_traj_offsets, traj_success: the arrays of
            `crbc_viz.backends.numba.crbc.crbc_step_credit`, as tensors on one device.
        beta, sigma_min, w_group, w_step, min_actions: as `crbc_viz.estimators.crbc.crbc`
            (defaults and bounds: `CRBCParams`).
        dtype: a floating dtype, float64 by default. dense_max: integer >= 0.

    Returns:
        dict of ``value``, ``q_value``, ``credit``, ``advantage`` tensors ``[S]`` and the
        ``closure_residual`` (float). float64 by default; ``dtype=torch.float32`` agrees with
        float64 to about 1e-5 on these workloads (bench/RESULTS.md states the measured gap).

    Raises:
        EstimatorInputError: a tensor or parameter outside that contract, named in the message
            (`check_step_tensors`: one host transfer for the value checks).
    """
    import torch

    caller = "crbc_step_credit_torch"
    p, dense_max = check_engine_params(
        caller,
        beta=beta,
        sigma_min=sigma_min,
        w_group=w_group,
        w_step=w_step,
        min_actions=min_actions,
        dense_max=dense_max,
    )
    beta, sigma_min, w_group, w_step, min_actions = p.beta, p.sigma_min, p.w_group, p.w_step, p.min_actions
    dtype = check_float_dtype(dtype, caller)
    step_hash, step_action, traj_offsets, group_traj_offsets, traj_success = check_step_tensors(
        step_hash, step_action, traj_offsets, group_traj_offsets, traj_success, caller=caller
    )
    dev = step_hash.device
    S = step_hash.shape[0]
    G = group_traj_offsets.shape[0] - 1
    step_traj, traj_group, step_node, node_group, group_node_offsets = _merge(
        step_hash, traj_offsets, group_traj_offsets
    )
    N = node_group.shape[0]
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
    group_steps = (traj_offsets[group_traj_offsets[1:]] - traj_offsets[group_traj_offsets[:-1]]).to(dtype)
    pair_terms = group_steps[node_group[pair_node]]
    pair_credit, _ = readout(
        V, Q, pair_node, mu, n_act, sigma_min=sigma_min, min_actions=min_actions, pair_terms=pair_terms
    )
    credit = pair_credit[step_pair]
    a_group = group_advantage_torch(traj_success, traj_group, G).to(dtype)[step_traj]
    return {
        "value": V[step_node],
        "q_value": Q[step_pair],
        "credit": credit,
        "advantage": w_group * a_group + w_step * credit,
        "closure_residual": residual,
    }


def on_cuda(device) -> bool:
    """Whether ``device`` (a string or a ``torch.device``) names a CUDA device: the one device
    test of `should_run` (tests replace it to run the fused row on CPU tensors)."""
    return str(device).startswith("cuda")


def should_run(graph, params, device) -> bool | str:
    """The guarded row's condition: ``crbc`` at depth ∞ (the row is registered for ``crbc``
    only) on a CUDA device named in the call (`on_cuda`)."""
    if not math.isinf(params.depth):
        return f"depth {params.depth} is finite: the fused path solves the closure at depth ∞"
    if not on_cuda(device):
        return f"device {device!r} is not a CUDA device"
    return True


_COLUMNS = ("value", "q_value", "credit", "advantage")


@implements("crbc", "torch", should_run=should_run)
def crbc_fused(graph, params, *, device: str = "cuda"):
    """`crbc_viz.estimators.crbc.crbc` at depth ∞ fused on ``device`` from the batch's step
    arrays (`crbc_step_credit_torch`: only the step keys are uploaded, the graph is not built);
    the four per-step columns come back to the host in one transfer, the per-node / per-pair
    arrays are filled from them when read."""
    import torch

    b = graph.batch
    arrays = to_device(
        b.step_anchor_hash,
        action_ids(b)[0],
        b.traj_offsets,
        b.group_traj_offsets,
        b.traj_success,
        device=str(device),
    )
    out = crbc_step_credit_torch(
        *arrays,
        beta=params.beta,
        sigma_min=params.sigma_min,
        w_group=params.w_group,
        w_step=params.w_step,
        min_actions=params.min_actions,
    )
    cols = dict(zip(_COLUMNS, torch.stack([out[c] for c in _COLUMNS]).to("cpu", torch.float64).numpy()))

    return deferred_result(
        scatter_steps(graph, cols["value"], cols["q_value"], cols["credit"]),
        estimator="crbc",
        params=params,
        graph=graph,
        diagnostics={"closure_residual": out["closure_residual"]},
        backend=f"torch:{arrays[0].device.type}",
        **cols,
    )


def _merge(step_hash, traj_offsets, group_traj_offsets):
    """The anchor merge on the device: each step's trajectory ``[S]``, each trajectory's group
    ``[T]``, each step's node ``[S]``, each node's group ``[N]`` and the groups' node offsets
    ``[G + 1]`` (a host array: the one small copy, which sizes the closure's buckets)."""
    import torch

    dev = step_hash.device
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
    group_node_offsets = np.r_[0, np.cumsum(torch.bincount(node_group, minlength=G).cpu().numpy())]
    return step_traj, traj_group, step_node, node_group, group_node_offsets
