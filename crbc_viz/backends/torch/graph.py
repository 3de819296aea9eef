"""Batched torch twins of the graph-wide peer estimators (GiGPO, RTMC, GRAFT, Gated-BEPO,
PGPO): same signature as the numpy reference plus ``device``, float64, every group in one
pass; the segment statistics are the numpy references' own (`crbc_viz.ops.segments`, written
once for numpy and torch).

There are no per-step Python loops: per-trajectory discounted sums are blocked matmuls
(``[blocks, 64]`` values times a ``[64, 64]`` discount Toeplitz matrix, carried back block by
block), so memory is linear in steps whatever the rollout length; group-by reductions are
``index_add_`` / ``scatter_reduce``; the mean-backup values reuse CRBC's batched direct solve
(`closure_values_torch`, β = γ: size-bucketed chunks, sparse LU for large groups); Graph
GAE is 0 under exact values (`gae_negligible`), else walked on the CPU in linear memory. GRPO's trajectory advantage is
O(T) and reuses the numpy `group_advantage`.
"""

from __future__ import annotations

import numpy as np

from ...estimators.registry import implements
from ...graph import FAILURE, SUCCESS, AnchorGraph
from ...ops.segments import no_spread, segment_stats, segment_zscore
from ...result import CreditResult
from ._device import resolve_device

__all__ = ["gigpo_torch", "rtmc_torch", "graft_torch", "gated_bepo_torch", "pgpo_torch"]


# ---------------------------------------------------------------- helpers


def _t(x, dev, dtype=None):
    import torch

    return torch.as_tensor(np.ascontiguousarray(x), device=dev, dtype=dtype)


#: Positions per block of the blocked discounted sums (a [B, B] Toeplitz matmul per block).
_BLOCK = 64


def _discounted(graph: AnchorGraph, x, decay: float):
    """Σ_{l≥t} decay^(l−t)·x_l within each trajectory ``[S]``.

    Each trajectory is cut into blocks of `_BLOCK` positions: suffix sums inside a block are
    one matmul of the ``[blocks, B]`` padded values with a ``[B, B]`` discount Toeplitz
    matrix; the sums of the blocks after it are carried back one block index at a time,
    vectorised over trajectories. Memory is O(steps + trajectories·B), whatever the length."""
    import torch

    b = graph.batch
    S = b.num_steps
    if S == 0:
        return x.clone()
    dev, B = x.device, _BLOCK
    lens = b.traj_len
    nblk = (lens + B - 1) // B
    blk_off = np.r_[0, np.cumsum(nblk)].astype(np.int64)
    pos = b.step_pos
    bid = blk_off[:-1][b.step_traj] + pos // B
    row, col = _t(bid, dev), _t(pos % B, dev)
    pad = torch.zeros((int(blk_off[-1]), B), dtype=x.dtype, device=dev)
    pad[row, col] = x
    idx = torch.arange(B, device=dev)
    diff = idx[:, None] - idx[None, :]  # l − t
    dec = torch.tensor(float(decay), dtype=x.dtype, device=dev)
    U = torch.where(
        diff >= 0, dec ** diff.clamp(min=0).to(x.dtype), torch.zeros((), dtype=x.dtype, device=dev)
    )
    local = pad @ U  # suffix sums within each block
    carry = torch.zeros(int(blk_off[-1]) + 1, dtype=x.dtype, device=dev)  # sum from a block's start on
    decB = dec**B
    for j in range(int(nblk.max()) - 1, -1, -1):  # block index, last first (not steps)
        t = np.flatnonzero(nblk > j)
        ids = _t(blk_off[t] + j, dev)
        has_next = _t(nblk[t] > j + 1, dev)
        nxt = torch.where(has_next, carry[ids + 1], torch.zeros((), dtype=x.dtype, device=dev))
        carry[ids] = local[ids, 0] + decB * nxt
    last_blk = _t(pos // B == nblk[b.step_traj] - 1, dev)
    tail = torch.where(
        last_blk, torch.zeros((), dtype=x.dtype, device=dev), dec ** (B - col).to(x.dtype) * carry[row + 1]
    )
    return local[row, col] + tail


def _group_ids(graph: AnchorGraph, dev):
    b = graph.batch
    return _t(b.step_group, dev), b.num_groups


def _step_terms(graph: AnchorGraph, dev):
    """The steps of each step's group ``[S]`` (`crbc_viz.ops.returns.group_steps`)."""
    from ...ops.returns import group_steps

    return _t(group_steps(graph)[graph.batch.step_group], dev)


def _values_and_successors(graph: AnchorGraph, gamma: float, dev):
    """V ``[N]`` (mean-backup fixed point), V(s_t) and V(s_{t+1}) ``[S]`` and the residual."""
    import torch

    from .crbc import closure_values_torch

    V, residual = closure_values_torch(graph, gamma, device=str(dev), dtype=torch.float64)
    V = V.to(dev)
    nxt = _t(graph.step_next, dev)
    node = _t(graph.step_node, dev)
    v_next = torch.where(
        nxt == SUCCESS,
        torch.ones((), dtype=V.dtype, device=dev),
        torch.where(
            nxt == FAILURE,
            torch.zeros((), dtype=V.dtype, device=dev),
            V[nxt.clamp(min=0)] if V.numel() else torch.zeros(nxt.shape, dtype=V.dtype, device=dev),
        ),
    )
    return V, V[node], v_next, float(residual)


def _result(name, params, graph, value, q, credit, adv, **kw):
    def np_(x):
        return x.detach().cpu().numpy() if hasattr(x, "detach") else x

    extra = {k: (np_(v) if v is not None and k != "diagnostics" else v) for k, v in kw.items()}
    where = next((x.device.type for x in (value, q, credit, adv) if hasattr(x, "device")), "cpu")
    return CreditResult(
        name, params, graph, np_(value), np_(q), np_(credit), np_(adv), backend=f"torch:{where}", **extra
    )


# ---------------------------------------------------------------- GiGPO


@implements("gigpo", "torch")
def gigpo_torch(graph: AnchorGraph, params, *, device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.gigpo.gigpo` (same equations; checked `GiGPOParams`)."""
    from ...estimators.gigpo import episode_advantage, step_groups
    from ...ops.returns import step_rewards

    p = params
    gamma, omega, mode, episode_stats, eps = p.gamma, p.omega, p.mode, p.episode_stats, p.eps
    step_reward, outcome, similarity, similarity_thresh = (
        p.step_reward,
        p.outcome,
        p.similarity,
        p.similarity_thresh,
    )
    dev = resolve_device(device)
    b = graph.batch
    a_ep = _t(episode_advantage(graph, mode, episode_stats, eps, outcome)[b.step_traj], dev)
    r = _t(step_rewards(graph, step_reward, outcome), dev, None)
    R = _discounted(graph, r, gamma)  # Eq. 5
    seg_np, num = step_groups(graph, similarity, similarity_thresh)  # Eq. 6
    seg = _t(seg_np, dev)
    a_s, mean, _, cnt = segment_zscore(
        R,
        seg,
        num,
        ddof=1,
        eps=eps,
        scale=(mode == "mean_std_norm"),
        magnitude=_discounted(graph, r.abs(), gamma),
        terms=_step_terms(graph, dev),
    )
    sing = float((cnt[seg] < 2).double().mean()) if len(seg_np) else 0.0
    return _result(
        "gigpo",
        params,
        graph,
        mean[seg],
        R,
        a_s,
        a_ep + omega * a_s,
        node_value=None if similarity else mean,
        diagnostics={"singleton_fraction": sing, "num_step_groups": int((cnt > 0).sum())},
    )


# ---------------------------------------------------------------- RTMC


@implements("rtmc", "torch")
def rtmc_torch(graph: AnchorGraph, params, *, device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.rtmc.rtmc` (checked `RTMCParams`)."""
    import torch

    from ...ops.returns import trajectory_outcome

    p = params
    gamma, n_prior, normalize, norm_eps, outcome = p.gamma, p.n_prior, p.normalize, p.norm_eps, p.outcome
    dev = resolve_device(device)
    b = graph.batch
    S, P, N, G = b.num_steps, len(graph.pair_node), graph.num_nodes, b.num_groups
    f64 = torch.float64
    traj = _t(b.step_traj, dev)
    pair = _t(graph.step_pair, dev)
    R = _t(trajectory_outcome(graph, outcome), dev, f64)
    steps_left = _t(b.traj_len[b.step_traj] - 1 - b.step_pos, dev, f64)
    ret = torch.tensor(gamma, dtype=f64, device=dev) ** steps_left * R[traj]
    # First visit of each (trajectory, pair): the smallest step index per unique key.
    key = traj * max(P, 1) + pair
    _, inv = torch.unique(key, return_inverse=True)
    ar = torch.arange(S, device=dev)
    first_idx = torch.full((int(inv.max()) + 1 if S else 0,), S, dtype=ar.dtype, device=dev).scatter_reduce(
        0, inv, ar, reduce="amin"
    )
    first = ar == first_idx[inv]
    fw = first.to(f64)
    n_pair = torch.zeros(P, dtype=f64, device=dev).index_add_(0, pair, fw)
    s_pair = torch.zeros(P, dtype=f64, device=dev).index_add_(0, pair, fw * ret)
    q = s_pair / n_pair.clamp(min=1)
    pn = _t(graph.pair_node, dev)
    n_s = torch.zeros(N, dtype=f64, device=dev).index_add_(0, pn, n_pair)
    s_s = torch.zeros(N, dtype=f64, device=dev).index_add_(0, pn, s_pair)
    tg = _t(b.traj_group, dev)
    g_cnt = torch.zeros(G, dtype=f64, device=dev).index_add_(0, tg, torch.ones_like(R))
    v_prior = torch.zeros(G, dtype=f64, device=dev).index_add_(0, tg, R) / g_cnt.clamp(min=1)
    v_prior = v_prior[_t(graph.node_group, dev)]
    v = (s_s + n_prior * v_prior) / (n_s + n_prior).clamp(min=1e-300)  # Eq. 11
    pair_adv = q - v[pn]
    a = pair_adv[pair]
    adv = a.clone()
    if normalize:
        sg = _t(b.step_group, dev)
        _, _, std = segment_stats(a, sg, G, ddof=0)
        node = _t(graph.step_node, dev)
        flat = no_spread(a, sg, G, magnitude=q[pair].abs() + v[node].abs(), terms=_step_terms(graph, dev))
        ok = ((std > norm_eps) & ~flat)[sg]
        adv = torch.where(ok, a / torch.where(ok, std[sg], torch.ones_like(a)), a)
    node = _t(graph.step_node, dev)
    sing = float((n_s[node] < 2).double().mean()) if S else 0.0
    return _result(
        "rtmc",
        params,
        graph,
        v[node],
        q[pair],
        a,
        adv,
        node_value=v,
        pair_q=q,
        pair_credit=pair_adv,
        diagnostics={"singleton_state_fraction": sing},
    )


# ---------------------------------------------------------------- GRAFT


def _graph_gae_bonus(graph: AnchorGraph, td, gamma: float, lam: float):
    """Twin of `crbc_viz.estimators.graft.graph_gae_bonus`: 0 where `gae_negligible` proves
    it (always, under GRAFT's exact values); otherwise the frontier walk runs on the CPU
    (the compiled kernel, or the reference without numba) in O(steps + anchors) memory and
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


@implements("graft", "torch")
def graft_torch(graph: AnchorGraph, params, *, device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.graft.graft` (checked `GRAFTParams`)."""
    import torch

    p = params
    gamma, gae_lambda, normalize, ddof, eps, singleton = (
        p.gamma,
        p.gae_lambda,
        p.normalize,
        p.ddof,
        p.eps,
        p.singleton,
    )
    dev = resolve_device(device)
    V, v_cur, v_next, residual = _values_and_successors(graph, gamma, dev)
    td = gamma * v_next - v_cur  # Eq. 8
    bonus = _graph_gae_bonus(graph, td, gamma, gae_lambda)
    a_gae = td + bonus  # Eqs. 9–10
    node = _t(graph.step_node, dev)
    N = graph.num_nodes
    cnt = torch.zeros(N, dtype=a_gae.dtype, device=dev).index_add_(0, node, torch.ones_like(a_gae))
    single = cnt[node] == 1
    if normalize:  # Eq. 11; a node whose edges agree within round-off gets 0
        from ...ops.segments import F64_EPS, SPREAD_ULPS

        mag = (gamma * v_next).abs() + v_cur.abs() + bonus.abs()
        terms = _step_terms(graph, dev)
        a_hat = segment_zscore(a_gae, node, N, ddof=ddof, eps=eps, magnitude=mag, terms=terms)[0]
        zero = a_gae.abs() <= SPREAD_ULPS * F64_EPS * terms * mag  # |A| of round-off: 0
        sing = {
            "sign": lambda: torch.where(
                zero, torch.zeros_like(a_gae), a_gae / torch.where(zero, 1.0, a_gae.abs() + eps)
            ),
            "zero": lambda: torch.zeros_like(a_gae),
            "raw": lambda: a_gae,
        }[singleton]()
        a_hat = torch.where(single, sing, a_hat)
    else:
        a_hat = a_gae
    sf = float(single.double().mean()) if graph.batch.num_steps else 0.0
    return _result(
        "graft",
        params,
        graph,
        v_cur,
        gamma * v_next,
        a_hat,
        a_hat.clone(),
        node_value=V,
        diagnostics={"closure_residual": residual, "singleton_fraction": sf},
    )


# ---------------------------------------------------------------- Gated-BEPO


@implements("gated_bepo", "torch")
def gated_bepo_torch(graph: AnchorGraph, params, *, device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.gated_bepo.gated_bepo` (checked `GatedBEPOParams`)."""
    import torch

    from ...ops.advantage import group_advantage

    p = params
    gamma, gae_lambda, rho, min_successors = p.gamma, p.gae_lambda, p.rho, p.min_successors
    bellman_norm, ddof, eps = p.bellman_norm, p.ddof, p.eps
    dev = resolve_device(device)
    b = graph.batch
    V, v_cur, v_next, residual = _values_and_successors(graph, gamma, dev)
    delta = gamma * v_next - v_cur
    a_b = _discounted(graph, delta, gamma * gae_lambda)  # GAE along τ
    if bellman_norm == "group_z":  # a group of one step, or with no spread, gets 0
        sg, G = _group_ids(graph, dev)
        mag = _discounted(graph, (gamma * v_next).abs() + v_cur.abs(), gamma * gae_lambda)
        a_norm = segment_zscore(a_b, sg, G, ddof=ddof, eps=eps, magnitude=mag, terms=_step_terms(graph, dev))[
            0
        ]
    else:
        a_norm = a_b
    N = graph.num_nodes
    src = _t(graph.pair_node[graph.edge_pair], dev)
    key = torch.unique(src * (N + 2) + (_t(graph.edge_next, dev) + 2))
    n_succ = torch.bincount(torch.div(key, N + 2, rounding_mode="floor"), minlength=N)
    gate = (n_succ >= min_successors)[_t(graph.step_node, dev)]
    a_e = _t(group_advantage(graph, ddof=ddof, eps=eps)[b.step_traj], dev)
    adv = torch.where(gate, (1.0 - rho) * a_e + rho * a_norm, a_e)
    gf = float((~gate).double().mean()) if b.num_steps else 0.0
    return _result(
        "gated_bepo",
        params,
        graph,
        v_cur,
        gamma * v_next,
        a_b,
        adv,
        node_value=V,
        diagnostics={"gated_fraction": gf, "closure_residual": residual},
    )


# ---------------------------------------------------------------- PGPO


@implements("pgpo", "torch")
def pgpo_torch(graph: AnchorGraph, params, *, device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.pgpo.pgpo` (checked `PGPOParams`)."""
    import torch

    from ...ops.returns import step_rewards

    p = params
    eta, gamma, alpha, beta, eps, ddof = p.eta, p.gamma, p.alpha, p.beta, p.eps, p.ddof
    potential, step_reward = p.potential, p.step_reward
    dev = resolve_device(device)
    b = graph.batch
    f64 = torch.float64
    N, G = graph.num_nodes, b.num_groups
    r = _t(step_rewards(graph, step_reward), dev, f64)
    R = _discounted(graph, r, eta)  # Eq. 1
    R_mag = _discounted(graph, r.abs(), eta)
    terms = _step_terms(graph, dev)
    node = _t(graph.step_node, dev)
    a_s, _, _, _ = segment_zscore(R, node, N, ddof=ddof, eps=eps, magnitude=R_mag, terms=terms)  # Eq. 3
    phi_sum = torch.zeros(N, dtype=f64, device=dev).index_add_(0, node, R)  # Eq. 6
    phi_cnt = torch.zeros(N, dtype=f64, device=dev).index_add_(0, node, torch.ones_like(R))
    phi = phi_sum / phi_cnt.clamp(min=1)
    phi_mag = torch.zeros(N, dtype=f64, device=dev).index_add_(0, node, R_mag) / phi_cnt.clamp(min=1)
    nxt = _t(graph.step_next, dev)
    terminal = nxt < 0
    nn = nxt.clamp(min=0)
    if potential == "mean":
        phi_m, phi_n = phi[node], phi[nn] if N else torch.zeros_like(R)
    else:

        def loo(total, count):
            return torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))

        phi_m = loo(phi_sum[node] - R, phi_cnt[node] - 1)
        same = (nn == node) & ~terminal
        phi_n = loo(phi_sum[nn] - torch.where(same, R, torch.zeros_like(R)), phi_cnt[nn] - same.to(f64))
    last = _t(b.traj_offsets[1:] - 1, dev)
    r_final = r[last][_t(b.step_traj, dev)]
    delta = torch.where(terminal, gamma * r_final, gamma * phi_n) - phi_m  # Eq. 7
    phi_mag_n = phi_mag[nn] if N else torch.zeros_like(R)
    d_mag = torch.where(terminal, gamma * r_final.abs(), gamma * phi_mag_n) + phi_mag[node]
    a_phi, _, _, _ = segment_zscore(delta, node, N, ddof=ddof, eps=eps, magnitude=d_mag, terms=terms)  # Eq. 8
    tg = _t(b.traj_group, dev)
    succ = (r[last] > 0).to(f64)  # r_final > 0
    p_succ = torch.zeros(G, dtype=f64, device=dev).index_add_(0, tg, succ) / torch.zeros(
        G, dtype=f64, device=dev
    ).index_add_(0, tg, torch.ones_like(succ)).clamp(min=1)
    w = beta * (1.0 - p_succ) ** alpha  # Eqs. 9–10
    adv = a_s + w[_t(b.step_group, dev)] * a_phi  # Eq. 11
    nan = torch.full_like(R, float("nan"))
    return _result(
        "pgpo",
        params,
        graph,
        phi[node],
        nan,
        adv,
        adv.clone(),
        node_value=phi,
        diagnostics={"task_gate_mean": float(w.mean()) if G else 0.0},
    )
