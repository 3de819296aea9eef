"""Compiled CPU engine for CRBC: merge, solve and credit fused per group, parallel over groups.

Input is the batch's raw step arrays — anchor hashes, action ids, trajectory and group
offsets, success flags — so the whole estimator runs here: anchors are merged inside each
group (sort + run-length, group-scoped), the closure (I − βM)V = b is solved by dense
Gaussian elimination in the group's own scratch (I − βM is a nonsingular M-matrix, so
elimination without pivoting is stable), then Q, the gated σ-normalised credit and the final
advantage are written per step. Groups larger than ``dense_max`` anchors are solved by
SciPy's sparse LU after the kernel (the numpy reference's path: no dense n² matrix).

numba compiles this on first use (cached on disk). Without numba the module still imports and
`crbc_step_credit` raises ImportError, but `crbc_viz.api.score` never gets that far:
`crbc_viz.backends.numba.available` is false, so ``backend="auto"`` passes over this engine and
``backend="numba"`` raises `BackendUnavailable`.
"""

from __future__ import annotations

import math

import numpy as np

from ...ops.checks import check_step_arrays
from ..checks import check_engine_params

__all__ = ["crbc_step_credit", "DENSE_MAX"]

DENSE_MAX = 1024

try:  # numba is a declared dependency, but the module must import without it
    import numba as _nb

    _njit, _prange = _nb.njit, _nb.prange
except ImportError:  # pragma: no cover
    _nb = None
    _prange = range

    def _njit(*_args, **_kwargs):
        return lambda f: f


@_njit(cache=True, nogil=True, inline="always")
def intern(keys, vals, h, count, shift, cap):
    """Id of key ``h`` in the open-addressing table, inserting it as ``count`` if new.
    Returns ``(id, new count)``."""
    slot = np.int64((h * np.uint64(0x9E3779B97F4A7C15)) >> shift)
    while True:
        if vals[slot] < 0:
            keys[slot] = h
            vals[slot] = count
            return count, count + 1
        if keys[slot] == h:
            return vals[slot], count
        slot = (slot + 1) & (cap - 1)


@_njit(cache=True, nogil=True)
def group_kernel(
    g,
    hashes,
    actions,
    traj_off,
    group_traj_off,
    success,
    beta,
    depth_inf,
    depth,
    sigma_min,
    w_group,
    w_step,
    min_actions,
    dense_max,
    out_v,
    out_q,
    out_credit,
    out_adv,
    large_flag,
    residual,
    node_stats,
):
    t_lo, t_hi = group_traj_off[g], group_traj_off[g + 1]
    lo, hi = traj_off[t_lo], traj_off[t_hi]
    n_steps = hi - lo
    if n_steps == 0:
        return
    # --- merge: local node ids in first-occurrence order (open-addressing hash table)
    cap = 16
    while cap < 2 * n_steps:
        cap *= 2
    shift = np.uint64(64 - int(math.log2(cap)))
    keys = np.empty(cap, np.uint64)
    vals = np.full(cap, -1, np.int64)
    node = np.empty(n_steps, np.int64)
    n = 0
    for k in range(n_steps):
        node[k], n = intern(keys, vals, hashes[lo + k], n, shift, cap)
    # --- successors: next step's node, or −1 (SUCCESS) / −2 (FAILURE)
    nxt = np.empty(n_steps, np.int64)
    for t in range(t_lo, t_hi):
        a, b = traj_off[t] - lo, traj_off[t + 1] - lo
        for k in range(a, b - 1):
            nxt[k] = node[k + 1]
        if b > a:
            nxt[b - 1] = -1 if success[t] else -2
    # --- (node, action) pairs, same table reused with the exact pair key
    vals[:] = -1
    pair = np.empty(n_steps, np.int64)
    npairs = 0
    for k in range(n_steps):
        key = (np.uint64(node[k]) << np.uint64(32)) | np.uint64(actions[lo + k])
        pair[k], npairs = intern(keys, vals, key, npairs, shift, cap)
    visits = np.zeros(n, np.float64)
    pcount = np.zeros(npairs, np.float64)
    pnode = np.empty(npairs, np.int64)
    for k in range(n_steps):
        visits[node[k]] += 1.0
        pcount[pair[k]] += 1.0
        pnode[pair[k]] = node[k]
    nact = np.zeros(n, np.int64)
    for p in range(npairs):
        nact[pnode[p]] += 1
    gated = 0
    for i in range(n):
        if nact[i] < min_actions:
            gated += 1
    node_stats[g, 0] = n
    node_stats[g, 1] = gated
    V = np.zeros(n, np.float64)
    Q = np.zeros(npairs, np.float64)
    if depth_inf:
        if n > dense_max:
            large_flag[g] = 1
            return
        # --- closure: A = I − βM, rhs b; M(s,s′) = N(s→s′)/N(s)
        A = np.zeros((n, n), np.float64)
        rhs = np.zeros(n, np.float64)
        for i in range(n):
            A[i, i] = 1.0
        for k in range(n_steps):
            s = node[k]
            w = beta / visits[s]
            x = nxt[k]
            if x >= 0:
                A[s, x] -= w
            elif x == -1:
                rhs[s] += w
        for c in range(n):  # elimination without pivoting
            piv = A[c, c]
            for r in range(c + 1, n):
                f = A[r, c]
                if f != 0.0:
                    f /= piv
                    for j in range(c, n):
                        A[r, j] -= f * A[c, j]
                    rhs[r] -= f * rhs[c]
        for c in range(n - 1, -1, -1):
            acc = rhs[c]
            for j in range(c + 1, n):
                acc -= A[c, j] * V[j]
            V[c] = acc / A[c, c]
        # residual ‖(I − βM)V − b‖∞ from the step list (O(steps), no copy of A)
        r = V.copy()
        for k in range(n_steps):
            x = nxt[k]
            w = beta / visits[node[k]]
            if x >= 0:
                r[node[k]] -= w * V[x]
            elif x == -1:
                r[node[k]] -= w
        res = 0.0
        for i in range(n):
            if abs(r[i]) > res:
                res = abs(r[i])
        residual[g] = res
        for k in range(n_steps):
            x = nxt[k]
            vx = V[x] if x >= 0 else (1.0 if x == -1 else 0.0)
            Q[pair[k]] += beta * vx / pcount[pair[k]]
    else:
        # visit-local returns G = β^(T−t+1)·R summed in step order, then divided once (as the
        # reference's bincount: an all-success group at β = 1 gets V = 1 exactly), then K backups
        for t in range(t_lo, t_hi):
            a, b = traj_off[t] - lo, traj_off[t + 1] - lo
            R = 1.0 if success[t] else 0.0
            for k in range(a, b):
                G = beta ** (b - k) * R
                V[node[k]] += G
                Q[pair[k]] += G
        for i in range(n):
            V[i] /= visits[i]
        for p in range(npairs):
            Q[p] /= pcount[p]
        for _ in range(depth):
            Qn = np.zeros(npairs, np.float64)
            for k in range(n_steps):
                x = nxt[k]
                vx = V[x] if x >= 0 else (1.0 if x == -1 else 0.0)
                Qn[pair[k]] += beta * vx / pcount[pair[k]]
            Vn = np.zeros(n, np.float64)
            for p in range(npairs):
                Vn[pnode[p]] += pcount[p] / visits[pnode[p]] * Qn[p]
            Q, V = Qn, Vn
    # --- credit: A = Q − V, σ² = Σ μ A², gate, normalise
    sig2 = np.zeros(n, np.float64)
    for p in range(npairs):
        d = Q[p] - V[pnode[p]]
        sig2[pnode[p]] += pcount[p] / visits[pnode[p]] * d * d
    # --- GRPO A^G of the group (sample std, eps = 1e-6; one rollout: mean 0, std 1)
    m = t_hi - t_lo
    mean = 0.0
    for t in range(t_lo, t_hi):
        mean += 1.0 if success[t] else 0.0
    mean /= m
    sq = 0.0
    for t in range(t_lo, t_hi):
        d = (1.0 if success[t] else 0.0) - mean
        sq += d * d
    std = math.sqrt(sq / (m - 1)) if m > 1 else 1.0
    if m == 1:
        mean = 0.0
    for t in range(t_lo, t_hi):
        ag = ((1.0 if success[t] else 0.0) - mean) / (std + 1e-6)
        for k in range(traj_off[t] - lo, traj_off[t + 1] - lo):
            s = node[k]
            p = pair[k]
            c = 0.0
            if nact[s] >= min_actions:
                c = (Q[p] - V[s]) / max(math.sqrt(sig2[s]), sigma_min)
            out_v[lo + k] = V[s]
            out_q[lo + k] = Q[p]
            out_credit[lo + k] = c
            out_adv[lo + k] = w_group * ag + w_step * c


@_njit(cache=True, parallel=True, nogil=True)
def all_groups(
    hashes,
    actions,
    traj_off,
    group_traj_off,
    success,
    beta,
    depth_inf,
    depth,
    sigma_min,
    w_group,
    w_step,
    min_actions,
    dense_max,
    out_v,
    out_q,
    out_credit,
    out_adv,
    large_flag,
    residual,
    node_stats,
):
    G = group_traj_off.shape[0] - 1
    for g in _prange(G):
        group_kernel(
            g,
            hashes,
            actions,
            traj_off,
            group_traj_off,
            success,
            beta,
            depth_inf,
            depth,
            sigma_min,
            w_group,
            w_step,
            min_actions,
            dense_max,
            out_v,
            out_q,
            out_credit,
            out_adv,
            large_flag,
            residual,
            node_stats,
        )


def _compiled():
    if _nb is None:
        raise ImportError("numba is not installed; use backend='torch' or 'numpy'")
    return all_groups


def crbc_step_credit(
    step_anchor_hash: np.ndarray,
    step_action: np.ndarray,
    traj_offsets: np.ndarray,
    group_traj_offsets: np.ndarray,
    traj_success: np.ndarray,
    *,
    beta: float = 0.98,
    depth: float = math.inf,
    sigma_min: float = 0.1,
    w_group: float = 1.0,
    w_step: float = 5.0,
    min_actions: int = 2,
    dense_max: int = DENSE_MAX,
):
    """CRBC per step straight from raw step arrays (the training-loop entry point).

    Args:
        step_anchor_hash: ``[S]`` uint64 anchor hash (merged within each group only; any
            integer dtype, int64 read bit for bit).
        step_action: ``[S]`` integer action ids in ``[0, 2**32)`` (any consistent coding).
        traj_offsets: ``[T + 1]`` step offsets: 0, strictly increasing (no empty
            trajectory), S last. ``group_traj_offsets``: ``[G + 1]`` trajectory offsets: 0,
            non-decreasing, T last.
        traj_success: ``[T]`` bool outcome (or 0/1 numbers).
        beta, depth, sigma_min, w_group, w_step, min_actions: as `crbc_viz.estimators.crbc.crbc`
            (same bounds). dense_max: integer >= 0.

    Returns:
        dict of ``value``, ``q_value``, ``credit``, ``advantage`` (each ``[S]`` float64) and
        ``closure_residual`` (max over groups; exact depth only), ``num_nodes`` (anchors
        merged) and ``gated_nodes`` (anchors with fewer than ``min_actions`` actions).

    Raises:
        EstimatorInputError: an array or parameter outside that contract (named in the
            message), checked before the kernel runs (`crbc_viz.ops.checks`).
    """
    fn = _compiled()
    caller = "crbc_step_credit"
    p, dense_max = check_engine_params(
        caller,
        beta=beta,
        depth=depth,
        sigma_min=sigma_min,
        w_group=w_group,
        w_step=w_step,
        min_actions=min_actions,
        dense_max=dense_max,
    )
    beta, depth, sigma_min, w_group, w_step, min_actions = (
        p.beta,
        p.depth,
        p.sigma_min,
        p.w_group,
        p.w_step,
        p.min_actions,
    )
    step_anchor_hash, step_action, traj_offsets, group_traj_offsets, traj_success = check_step_arrays(
        step_anchor_hash, step_action, traj_offsets, group_traj_offsets, traj_success, caller=caller
    )
    S = step_anchor_hash.shape[0]
    out = {k: np.zeros(S) for k in ("value", "q_value", "credit", "advantage")}
    G = group_traj_offsets.shape[0] - 1
    large = np.zeros(G, np.int8)
    residual = np.zeros(G)
    node_stats = np.zeros((G, 2), np.int64)
    depth_inf = math.isinf(depth)
    fn(
        step_anchor_hash,
        step_action,
        traj_offsets,
        group_traj_offsets,
        traj_success,
        float(beta),
        depth_inf,
        0 if depth_inf else int(depth),
        float(sigma_min),
        float(w_group),
        float(w_step),
        int(min_actions),
        int(dense_max),
        out["value"],
        out["q_value"],
        out["credit"],
        out["advantage"],
        large,
        residual,
        node_stats,
    )
    if large.any():
        _solve_large_groups(
            np.flatnonzero(large),
            out,
            residual,
            step_anchor_hash,
            step_action,
            traj_offsets,
            group_traj_offsets,
            traj_success,
            beta,
            sigma_min,
            w_group,
            w_step,
            min_actions,
        )
    out["closure_residual"] = float(residual.max()) if (depth_inf and G) else float("nan")
    out["num_nodes"], out["gated_nodes"] = (int(x) for x in node_stats.sum(axis=0))
    return out


def _solve_large_groups(
    groups,
    out,
    residual,
    hashes,
    actions,
    traj_off,
    gto,
    success,
    beta,
    sigma_min,
    w_group,
    w_step,
    min_actions,
):
    """Groups over ``dense_max`` anchors: the numpy reference, whose closure solve takes
    sparse LU for them (`crbc_viz.ops.closure`; no dense n² matrix, no torch)."""
    import pandas as pd

    from ...data import RolloutBatch
    from ...estimators.crbc import crbc
    from ...graph import build_graph

    for g in groups:
        t_lo, t_hi = gto[g], gto[g + 1]
        lo, hi = traj_off[t_lo], traj_off[t_hi]
        lens = np.diff(traj_off[t_lo : t_hi + 1])
        steps = pd.DataFrame({"action": pd.Categorical(actions[lo:hi]), "anchor_key": ""})
        sub = RolloutBatch(
            steps=steps,
            step_traj=np.repeat(np.arange(t_hi - t_lo), lens),
            step_anchor_hash=hashes[lo:hi],
            traj_offsets=traj_off[t_lo : t_hi + 1] - lo,
            traj_group=np.zeros(t_hi - t_lo, np.int64),
            traj_success=success[t_lo:t_hi],
            traj_truncated=np.zeros(t_hi - t_lo, bool),
            traj_return=success[t_lo:t_hi].astype(float),
            group_traj_offsets=np.array([0, t_hi - t_lo]),
            groups=pd.DataFrame({"g": [g]}),
        )
        r = crbc(
            build_graph(sub),
            beta=beta,
            sigma_min=sigma_min,
            w_group=w_group,
            w_step=w_step,
            min_actions=min_actions,
        )
        out["value"][lo:hi], out["q_value"][lo:hi] = r.value, r.q_value
        out["credit"][lo:hi], out["advantage"][lo:hi] = r.credit, r.advantage
        residual[g] = r.diagnostics["closure_residual"]
