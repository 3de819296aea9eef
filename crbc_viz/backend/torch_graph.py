"""Batched torch twins of the graph-wide peer estimators (GiGPO, RTMC, GRAFT, Gated-BEPO,
PGPO): same signature as the numpy reference plus ``device``, float64, every group in one
pass.

There are no per-step Python loops: per-trajectory discounted sums are one matmul of the
padded ``[T, L_max]`` rewards with a ``[L_max, L_max]`` discount Toeplitz matrix; group-by
reductions are ``index_add_`` / ``scatter_reduce``; the mean-backup values reuse CRBC's
batched direct solve (`closure_values_torch`, β = γ); Graph GAE iterates over hop depth
(not over steps) on padded per-group adjacency matrices. GRPO's trajectory advantage is
O(T) and reuses the numpy `group_advantage`.
"""
from __future__ import annotations

import numpy as np

from ..graph import FAILURE, SUCCESS, AnchorGraph
from ..result import CreditResult
from . import resolve_device

__all__ = ["gigpo_torch", "rtmc_torch", "graft_torch", "gated_bepo_torch", "pgpo_torch"]


# ---------------------------------------------------------------- helpers

def _t(x, dev, dtype=None):
    import torch

    return torch.as_tensor(np.ascontiguousarray(x), device=dev, dtype=dtype)


def _discounted(graph: AnchorGraph, x, decay: float):
    """Σ_{l≥t} decay^(l−t)·x_l within each trajectory ``[S]`` (one padded matmul)."""
    import torch

    b = graph.batch
    S = b.num_steps
    if S == 0:
        return x.clone()
    dev = x.device
    T = b.num_trajectories
    L = int(b.traj_len.max())
    row = _t(b.step_traj, dev)
    col = _t(b.step_pos, dev)
    pad = torch.zeros((T, L), dtype=x.dtype, device=dev)
    pad[row, col] = x
    idx = torch.arange(L, device=dev)
    diff = idx[:, None] - idx[None, :]                 # l − t
    U = torch.where(diff >= 0, torch.tensor(float(decay), dtype=x.dtype, device=dev)
                    ** diff.clamp(min=0).to(x.dtype), torch.zeros((), dtype=x.dtype, device=dev))
    return (pad @ U)[row, col]


def _seg_stats(x, seg, num: int, ddof: int):
    import torch

    cnt = torch.zeros(num, dtype=x.dtype, device=x.device).index_add_(0, seg, torch.ones_like(x))
    mean = torch.zeros(num, dtype=x.dtype, device=x.device).index_add_(0, seg, x) / cnt.clamp(min=1)
    dev2 = (x - mean[seg]) ** 2
    var = torch.zeros(num, dtype=x.dtype, device=x.device).index_add_(0, seg, dev2) / \
        (cnt - ddof).clamp(min=1)
    return cnt, mean, var.sqrt()


def _seg_zscore(x, seg, num: int, *, ddof: int = 1, eps: float = 1e-6, scale: bool = True):
    """Twin of `crbc_viz.estimators.gigpo.segment_zscore`: ``(z, mean, std, count)``."""
    import torch

    cnt, mean, std = _seg_stats(x, seg, num, ddof)
    xmax = torch.full((num,), -torch.inf, dtype=x.dtype, device=x.device).scatter_reduce(
        0, seg, x, reduce="amax")
    xmin = torch.full((num,), torch.inf, dtype=x.dtype, device=x.device).scatter_reduce(
        0, seg, x, reduce="amin")
    degenerate = (cnt < 2) | (xmax == xmin)
    z = x - mean[seg]
    if scale:
        z = z / (std[seg] + eps)
    return torch.where(degenerate[seg], torch.zeros_like(z), z), mean, std, cnt


def _group_ids(graph: AnchorGraph, dev):
    b = graph.batch
    return _t(b.step_group, dev), b.num_groups


def _values_and_successors(graph: AnchorGraph, gamma: float, dev):
    """V ``[N]`` (mean-backup fixed point), V(s_t) and V(s_{t+1}) ``[S]`` and the residual."""
    import torch

    from .torch_crbc import closure_values_torch

    V, residual = closure_values_torch(graph, gamma, device=str(dev), dtype=torch.float64)
    V = V.to(dev)
    nxt = _t(graph.step_next, dev)
    node = _t(graph.step_node, dev)
    v_next = torch.where(nxt == SUCCESS, torch.ones((), dtype=V.dtype, device=dev),
                         torch.where(nxt == FAILURE, torch.zeros((), dtype=V.dtype, device=dev),
                                     V[nxt.clamp(min=0)] if V.numel() else
                                     torch.zeros(nxt.shape, dtype=V.dtype, device=dev)))
    return V, V[node], v_next, float(residual)


def _result(name, params, graph, value, q, credit, adv, **kw):
    def np_(x):
        return x.detach().cpu().numpy() if hasattr(x, "detach") else x
    extra = {k: (np_(v) if v is not None and k != "diagnostics" else v) for k, v in kw.items()}
    return CreditResult(name, params, graph, np_(value), np_(q), np_(credit), np_(adv),
                        backend="torch", **extra)


# ---------------------------------------------------------------- GiGPO

def gigpo_torch(graph: AnchorGraph, *, gamma: float = 0.95, omega: float = 1.0,
                mode: str = "mean_norm", episode_stats: str = "cross_steps", eps: float = 1e-6,
                step_reward: str = "env", outcome: str = "success", similarity: bool = False,
                similarity_thresh: float = 0.95, device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.gigpo.gigpo` (same equations and defaults)."""
    from ..estimators.gigpo import GiGPOParams, episode_advantage, step_groups, step_rewards

    dev = resolve_device(device)
    params = GiGPOParams(gamma, omega, mode, episode_stats, eps, step_reward, outcome, similarity,
                         similarity_thresh)
    b = graph.batch
    a_ep = _t(episode_advantage(graph, mode, episode_stats, eps, outcome)[b.step_traj], dev)
    r = _t(step_rewards(graph, step_reward, outcome), dev, None)
    R = _discounted(graph, r, gamma)                                          # Eq. 5
    seg_np, num = step_groups(graph, similarity, similarity_thresh)          # Eq. 6
    seg = _t(seg_np, dev)
    a_s, mean, _, cnt = _seg_zscore(R, seg, num, ddof=1, eps=eps, scale=(mode == "mean_std_norm"))
    sing = float((cnt[seg] < 2).double().mean()) if len(seg_np) else 0.0
    return _result("gigpo", params, graph, mean[seg], R, a_s, a_ep + omega * a_s,
                   node_value=None if similarity else mean,
                   diagnostics={"singleton_fraction": sing,
                                "num_step_groups": int((cnt > 0).sum())})


# ---------------------------------------------------------------- RTMC

def rtmc_torch(graph: AnchorGraph, *, gamma: float = 0.99, n_prior: float = 2.0,
               normalize: bool = False, norm_eps: float = 1e-8, outcome: str = "success",
               device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.rtmc.rtmc`."""
    import torch

    from ..estimators.grpo import trajectory_outcome
    from ..estimators.rtmc import RTMCParams

    dev = resolve_device(device)
    params = RTMCParams(gamma, n_prior, normalize, norm_eps, outcome)
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
    first_idx = torch.full((int(inv.max()) + 1 if S else 0,), S, dtype=ar.dtype,
                           device=dev).scatter_reduce(0, inv, ar, reduce="amin")
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
    v_prior = (torch.zeros(G, dtype=f64, device=dev).index_add_(0, tg, R) / g_cnt.clamp(min=1))
    v_prior = v_prior[_t(graph.node_group, dev)]
    v = (s_s + n_prior * v_prior) / (n_s + n_prior).clamp(min=1e-300)           # Eq. 11
    pair_adv = q - v[pn]
    a = pair_adv[pair]
    adv = a.clone()
    if normalize:
        sg = _t(b.step_group, dev)
        _, _, std = _seg_stats(a, sg, G, 0)
        ok = std[sg] > norm_eps
        adv = torch.where(ok, a / torch.where(ok, std[sg], torch.ones_like(a)), a)
    node = _t(graph.step_node, dev)
    sing = float((n_s[node] < 2).double().mean()) if S else 0.0
    return _result("rtmc", params, graph, v[node], q[pair], a, adv, node_value=v, pair_q=q,
                   pair_credit=pair_adv, diagnostics={"singleton_state_fraction": sing})


# ---------------------------------------------------------------- GRAFT

def _graph_gae_bonus(graph: AnchorGraph, td, gamma: float, lam: float):
    """Twin of `crbc_viz.estimators.graft.graph_gae_bonus` on padded per-group matrices."""
    import torch

    b = graph.batch
    dev, f64 = td.device, td.dtype
    S = b.num_steps
    out = torch.zeros(S, dtype=f64, device=dev)
    if lam == 0.0 or S == 0 or graph.num_nodes == 0:
        return out
    remaining_np = (b.traj_len[b.step_traj] - 1 - b.step_pos).astype(np.int64)
    inner_steps = np.flatnonzero(graph.step_next >= 0)
    if inner_steps.size == 0:
        return out
    offsets = graph.group_node_offsets
    G = graph.num_groups
    n = int(np.diff(offsets).max())
    local = np.arange(graph.num_nodes) - offsets[graph.node_group]
    ng, nl = _t(graph.node_group, dev), _t(local, dev)
    node = _t(graph.step_node, dev)
    node_td = torch.zeros(graph.num_nodes, dtype=f64, device=dev).index_add_(0, node, td)
    visits = _t(graph.node_visits, dev, f64)
    td_pad = torch.zeros((G, n), dtype=f64, device=dev)
    td_pad[ng, nl] = node_td
    vis_pad = torch.zeros((G, n), dtype=f64, device=dev)
    vis_pad[ng, nl] = visits
    src = graph.pair_node[graph.edge_pair]
    e = np.flatnonzero(graph.edge_next >= 0)
    adj = torch.zeros((G, n, n), dtype=f64, device=dev)
    adj[_t(graph.node_group[src[e]], dev), _t(local[src[e]], dev),
        _t(local[graph.edge_next[e]], dev)] = 1.0
    F = torch.eye(n, dtype=f64, device=dev).expand(G, n, n).clone()
    st = _t(inner_steps, dev)
    st_g = ng[_t(graph.step_next[inner_steps], dev)]
    st_v = nl[_t(graph.step_next[inner_steps], dev)]
    rem = _t(remaining_np[inner_steps], dev)
    acc = torch.zeros(len(inner_steps), dtype=f64, device=dev)
    for k in range(1, int(remaining_np[inner_steps].max()) + 1):   # hop depth, not steps
        cnt = F @ vis_pad.unsqueeze(-1)
        a_bar = torch.where(cnt > 0, (F @ td_pad.unsqueeze(-1)) / cnt.clamp(min=1),
                            torch.zeros_like(cnt)).squeeze(-1)
        acc = acc + torch.where(rem >= k, (gamma * lam) ** k * a_bar[st_g, st_v],
                                torch.zeros_like(acc))
        F = ((F @ adj) > 0).to(f64)
    out[st] = acc
    return out


def graft_torch(graph: AnchorGraph, *, gamma: float = 0.99, gae_lambda: float = 0.95,
                normalize: bool = True, ddof: int = 1, eps: float = 1e-6, singleton: str = "sign",
                device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.graft.graft`."""
    import torch

    from ..estimators.graft import GRAFTParams

    if singleton not in ("sign", "zero", "raw"):
        raise ValueError(f"singleton must be 'sign', 'zero' or 'raw', got {singleton!r}")
    dev = resolve_device(device)
    params = GRAFTParams(gamma, gae_lambda, normalize, ddof, eps, singleton)
    V, v_cur, v_next, residual = _values_and_successors(graph, gamma, dev)
    td = gamma * v_next - v_cur                                               # Eq. 8
    a_gae = td + _graph_gae_bonus(graph, td, gamma, gae_lambda)               # Eqs. 9–10
    node = _t(graph.step_node, dev)
    N = graph.num_nodes
    cnt, mean, std = _seg_stats(a_gae, node, N, ddof)
    single = cnt[node] == 1
    if normalize:                                                             # Eq. 11
        a_hat = (a_gae - mean[node]) / (std[node] + eps)
        sing = {"sign": lambda: a_gae / (a_gae.abs() + eps), "zero": lambda: torch.zeros_like(a_gae),
                "raw": lambda: a_gae}[singleton]()
        a_hat = torch.where(single, sing, a_hat)
    else:
        a_hat = a_gae
    sf = float(single.double().mean()) if graph.batch.num_steps else 0.0
    return _result("graft", params, graph, v_cur, gamma * v_next, a_hat, a_hat.clone(),
                   node_value=V, diagnostics={"closure_residual": residual, "singleton_fraction": sf})


# ---------------------------------------------------------------- Gated-BEPO

def gated_bepo_torch(graph: AnchorGraph, *, gamma: float = 0.98, gae_lambda: float = 0.95,
                     rho: float = 0.5, min_successors: int = 2, bellman_norm: str = "group_z",
                     ddof: int = 1, eps: float = 1e-6, device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.gated_bepo.gated_bepo`."""
    import torch

    from ..estimators.gated_bepo import GatedBEPOParams
    from ..estimators.grpo import group_advantage

    if bellman_norm not in ("group_z", "none"):
        raise ValueError(f"bellman_norm must be 'group_z' or 'none', got {bellman_norm!r}")
    dev = resolve_device(device)
    params = GatedBEPOParams(gamma, gae_lambda, rho, min_successors, bellman_norm, ddof, eps)
    b = graph.batch
    V, v_cur, v_next, residual = _values_and_successors(graph, gamma, dev)
    delta = gamma * v_next - v_cur
    a_b = _discounted(graph, delta, gamma * gae_lambda)                        # GAE along τ
    if bellman_norm == "group_z":
        sg, G = _group_ids(graph, dev)
        cnt, mean, std = _seg_stats(a_b, sg, G, ddof)
        a_norm = torch.where(cnt[sg] < 2, torch.zeros_like(a_b), (a_b - mean[sg]) / (std[sg] + eps))
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
    return _result("gated_bepo", params, graph, v_cur, gamma * v_next, a_b, adv, node_value=V,
                   diagnostics={"gated_fraction": gf, "closure_residual": residual})


# ---------------------------------------------------------------- PGPO

def pgpo_torch(graph: AnchorGraph, *, eta: float = 0.95, gamma: float = 1.0, alpha: float = 2.0,
               beta: float = 1.0, eps: float = 1e-6, ddof: int = 1, potential: str = "mean",
               step_reward: str = "env", device: str = "auto") -> CreditResult:
    """Batched twin of `crbc_viz.estimators.pgpo.pgpo`."""
    import torch

    from ..estimators.gigpo import step_rewards
    from ..estimators.pgpo import PGPOParams

    if potential not in ("mean", "loo"):
        raise ValueError(f"potential must be 'mean' or 'loo', got {potential!r}")
    dev = resolve_device(device)
    params = PGPOParams(eta, gamma, alpha, beta, eps, ddof, potential, step_reward)
    b = graph.batch
    f64 = torch.float64
    N, G = graph.num_nodes, b.num_groups
    r = _t(step_rewards(graph, step_reward), dev, f64)
    R = _discounted(graph, r, eta)                                            # Eq. 1
    node = _t(graph.step_node, dev)
    a_s, _, _, _ = _seg_zscore(R, node, N, ddof=ddof, eps=eps)                # Eq. 3
    phi_sum = torch.zeros(N, dtype=f64, device=dev).index_add_(0, node, R)    # Eq. 6
    phi_cnt = torch.zeros(N, dtype=f64, device=dev).index_add_(0, node, torch.ones_like(R))
    phi = phi_sum / phi_cnt.clamp(min=1)
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
        phi_n = loo(phi_sum[nn] - torch.where(same, R, torch.zeros_like(R)),
                    phi_cnt[nn] - same.to(f64))
    last = _t(b.traj_offsets[1:] - 1, dev)
    r_final = r[last][_t(b.step_traj, dev)]
    delta = torch.where(terminal, gamma * r_final, gamma * phi_n) - phi_m       # Eq. 7
    a_phi, _, _, _ = _seg_zscore(delta, node, N, ddof=ddof, eps=eps)          # Eq. 8
    tg = _t(b.traj_group, dev)
    succ = (r[last] > 0).to(f64)                                              # r_final > 0
    p_succ = (torch.zeros(G, dtype=f64, device=dev).index_add_(0, tg, succ) /
              torch.zeros(G, dtype=f64, device=dev).index_add_(0, tg, torch.ones_like(succ)).clamp(min=1))
    w = beta * (1.0 - p_succ) ** alpha                                        # Eqs. 9–10
    adv = a_s + w[_t(b.step_group, dev)] * a_phi                              # Eq. 11
    nan = torch.full_like(R, float("nan"))
    return _result("pgpo", params, graph, phi[node], nan, adv, adv.clone(), node_value=phi,
                   diagnostics={"task_gate_mean": float(w.mean()) if G else 0.0})
