"""The compiled engine's work on one group (`group_kernel`): the merge into its own arrays
(`merge_group`), the closure's dense matrix and its two solves (`solve_masked` on the rows'
nonzero bits for up to `MASK_MAX` anchors, `solve_band` beyond), the finite-depth backups,
and the credit and per-step outputs (`pair_credit`, `write_steps`), which the scratch path
(`crbc_viz.backends.numba.scratch`) shares."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .jit import above, highest_bit, lowest_bit, njit

#: Groups of up to this many anchors keep each row's nonzero columns as the bits of one uint64
#: (`closure_values`); larger ones keep the band of columns each row's nonzeros lie in.
MASK_MAX = 64


@njit(cache=True, nogil=True, inline="always")
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


class Steps(NamedTuple):
    """The engine's input arrays (checked by `crbc_viz.ops.checks.check_step_arrays`)."""

    hashes: np.ndarray  # [S] uint64 anchor hash
    actions: np.ndarray  # [S] integer action id
    traj_off: np.ndarray  # [T + 1] step offsets
    group_traj_off: np.ndarray  # [G + 1] trajectory offsets
    success: np.ndarray  # [T] bool outcome


class KernelParams(NamedTuple):
    """The checked hyper-parameters as the kernel reads them."""

    beta: float
    depth_inf: bool  # the exact closure; else ``depth`` backups
    depth: int
    sigma_min: float
    w_group: float
    w_step: float
    min_actions: int
    dense_max: int  # the most anchors a group solves densely here
    spread_rtol: float  # `crbc_viz.ops.segments.roundoff_tol` per term and unit magnitude


class Outputs(NamedTuple):
    """What the kernel writes."""

    value: np.ndarray  # [S] float64
    q_value: np.ndarray  # [S] float64
    credit: np.ndarray  # [S] float64
    advantage: np.ndarray  # [S] float64
    large: np.ndarray  # [G] int8: 1 = over ``dense_max`` anchors, left to `_solve_large_groups`
    residual: np.ndarray  # [G] float64 closure residual
    node_stats: np.ndarray  # [G, 2] int64: anchors merged, anchors gated


class Group(NamedTuple):
    """One group merged, in group-local ids (built by `merge_group`; `scratch_group` makes one of
    its `Scratch`'s views for `pair_credit` and `write_steps`, which do not read ``nxt``)."""

    t_lo: int  # trajectories [t_lo, t_hi)
    t_hi: int
    lo: int  # the group's first step
    node: np.ndarray  # [S_g] anchor of each step
    pair: np.ndarray  # [S_g] (anchor, action) pair of each step
    nxt: np.ndarray  # [S_g] the next step's anchor, or −1 (SUCCESS) / −2 (FAILURE)
    visits: np.ndarray  # [N_g] float64 N(s)
    pcount: np.ndarray  # [P_g] float64 N(s, a)
    pnode: np.ndarray  # [P_g] anchor of each pair
    nact: np.ndarray  # [N_g] distinct actions of each anchor


@njit(cache=True, nogil=True, inline="always")
def merge_group(steps, t_lo, t_hi):
    """Anchors and (anchor, action) pairs of trajectories ``[t_lo, t_hi)`` as local ids in
    first-occurrence order (one open-addressing table, reused with the exact pair key), the
    successor of each step and the visit counts."""
    hashes, actions, traj_off, _, success = steps  # locals: no tuple access inside the loops
    lo = traj_off[t_lo]
    n_steps = traj_off[t_hi] - lo
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
    nxt = np.empty(n_steps, np.int64)
    for t in range(t_lo, t_hi):
        a, b = traj_off[t] - lo, traj_off[t + 1] - lo
        for k in range(a, b - 1):
            nxt[k] = node[k + 1]
        if b > a:
            nxt[b - 1] = -1 if success[t] else -2
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
    return Group(t_lo, t_hi, lo, node, pair, nxt, visits, pcount, pnode, nact)


@njit(cache=True, nogil=True, inline="always")
def closure_matrix(grp, beta):
    """(I − βM) and b of `closure_values` in reverse first-occurrence order, each row's band
    ``[first, last]`` of columns outside which it is 0 and, for groups of up to `MASK_MAX`
    anchors, its nonzero columns as bits (``mask``; else all 0)."""
    node, nxt, visits = grp.node, grp.nxt, grp.visits
    n = visits.shape[0]
    A = np.zeros((n, n), np.float64)
    rhs = np.zeros(n, np.float64)
    first = np.arange(n)  # row i's nonzeros lie in columns [first[i], last[i]]
    last = np.arange(n)
    mask = np.zeros(n, np.uint64)
    bits = n <= MASK_MAX
    for k in range(node.shape[0]):
        s = n - 1 - node[k]
        x = nxt[k]
        if x >= 0:
            x = n - 1 - x
            A[s, x] -= 1.0
            first[s] = min(first[s], x)
            last[s] = max(last[s], x)
            if bits:
                mask[s] |= np.uint64(1) << np.uint64(x)
        elif x == -1:
            rhs[s] += 1.0
    for i in range(n):
        w = beta / visits[n - 1 - i]
        for j in range(first[i], last[i] + 1):
            A[i, j] *= w
        rhs[i] *= w
        A[i, i] += 1.0
        if bits:
            mask[i] |= np.uint64(1) << np.uint64(i)
    return A, rhs, first, last, mask


@njit(cache=True, nogil=True, inline="always")
def solve_masked(A, rhs, mask, V):
    """`solve_band`'s operations, the rows to clear read off the masks: row r's next column
    to clear is the lowest bit of its mask left of r and right of the last one cleared (fill
    included), and the update is row c's band right of c, up to its mask's highest bit (a
    contiguous run of multiply-adds, which the compiler vectorises). Every entry outside a
    row's mask is 0 (as `closure_matrix` and `small_matrix` leave them, and x − f·0 = x), so
    the rows cleared and the results are `solve_band`'s, bit for bit; the back substitution
    sums over the mask."""
    n = rhs.shape[0]
    for r in range(n):
        left = ~above(r - 1) if r else np.uint64(0)  # columns < r
        m = mask[r] & left
        while m:
            c = lowest_bit(m)
            f = A[r, c]
            if f != 0.0:
                f /= A[c, c]
                right = mask[c] & above(c)
                if right:
                    for j in range(c + 1, highest_bit(right) + 1):
                        A[r, j] -= f * A[c, j]
                rhs[r] -= f * rhs[c]
                mask[r] |= right
            m = mask[r] & left & above(c)
    for c in range(n - 1, -1, -1):
        acc = rhs[c]
        mc = mask[c] & above(c)
        while mc:
            j = lowest_bit(mc)
            acc -= A[c, j] * V[j]
            mc &= mc - np.uint64(1)
        V[c] = acc / A[c, c]


@njit(cache=True, nogil=True, inline="always")
def solve_band(A, rhs, first, last, V):
    """Gaussian elimination row by row (each row reduced in turn by the rows above it: the
    same operations in the same order as column by column, so the same bits) inside each
    row's band ``[first, last]``, which its updates extend and the back substitution never
    leaves; V in the matrix's order."""
    n = rhs.shape[0]
    for r in range(n):
        for c in range(first[r], r):
            f = A[r, c]
            if f != 0.0:
                f /= A[c, c]
                for j in range(c + 1, last[c] + 1):  # column c of row r is not read again
                    A[r, j] -= f * A[c, j]
                rhs[r] -= f * rhs[c]
                last[r] = max(last[r], last[c])
    for c in range(n - 1, -1, -1):
        acc = rhs[c]
        for j in range(c + 1, last[c] + 1):
            acc -= A[c, j] * V[j]
        V[c] = acc / A[c, c]


@njit(cache=True, nogil=True, inline="always")
def closure_values(grp, beta):
    """V of (I − βM)V = b, M(s,s′) = N(s→s′)/N(s), b(s) = β·N(s→SUCCESS)/N(s): Gaussian
    elimination without pivoting (I − βM is a nonsingular M-matrix) in the group's dense
    scratch. The transitions are counted first and each row scaled once, as the reference's
    N(s→x)/N(s): adding 1/N(s) per step rounded M's rows, and at β = 1 the solve's error grew
    to ~1 ulp per step of the group (LAPACK on the counted rows: ~50× lower).

    Work is spent on nonzeros only: the anchors are numbered in reverse first-occurrence order
    (a trajectory's chain then lies below the diagonal and its back edges above: on random-MDP
    groups half the row operations of first-occurrence order); a group of up to `MASK_MAX`
    anchors keeps each row's nonzero columns as bits and updates those only (`solve_masked`:
    on workload b the band updates do ~6× the multiply-adds of the nonzero ones), a larger one
    scans each row's band (`solve_band`); both do the same operations on the nonzeros in the
    same order, so they give the same bits. A strongly-connected-component order was measured
    and not taken: on random-MDP groups nearly every anchor lies in one component, so block
    substitution saves nothing."""
    A, rhs, first, last, mask = closure_matrix(grp, beta)
    n = rhs.shape[0]
    V = np.zeros(n, np.float64)
    if n <= MASK_MAX:
        solve_masked(A, rhs, mask, V)
    else:
        solve_band(A, rhs, first, last, V)
    return V[::-1].copy()


@njit(cache=True, nogil=True, inline="always")
def closure_residual_and_q(grp, V, beta):
    """‖(I − βM)V − b‖∞ from the step list (O(steps), no copy of A) and `pair_values`'s Q,
    in one pass over the steps."""
    node, nxt, visits, pair, pcount = grp.node, grp.nxt, grp.visits, grp.pair, grp.pcount
    r = V.copy()
    Q = np.zeros(pcount.shape[0], np.float64)
    for k in range(node.shape[0]):
        x = nxt[k]
        w = beta / visits[node[k]]
        if x >= 0:
            r[node[k]] -= w * V[x]
            vx = V[x]
        elif x == -1:
            r[node[k]] -= w
            vx = 1.0
        else:
            vx = 0.0
        Q[pair[k]] += beta * vx / pcount[pair[k]]
    res = 0.0
    for i in range(r.shape[0]):
        if abs(r[i]) > res:
            res = abs(r[i])
    return res, Q


@njit(cache=True, nogil=True, inline="always")
def pair_values(grp, V, beta):
    """Q(s, a) = β · mean over the pair's steps of V(next), V(SUCCESS) = 1, V(FAILURE) = 0."""
    pair, nxt, pcount = grp.pair, grp.nxt, grp.pcount
    Q = np.zeros(pcount.shape[0], np.float64)
    for k in range(nxt.shape[0]):
        x = nxt[k]
        vx = V[x] if x >= 0 else (1.0 if x == -1 else 0.0)
        Q[pair[k]] += beta * vx / pcount[pair[k]]
    return Q


@njit(cache=True, nogil=True, inline="always")
def visit_local_values(steps, grp, beta):
    """Visit-local returns G = β^(T−t+1)·R summed in step order, then divided once (as the
    reference's bincount: an all-success group at β = 1 gets V = 1 exactly). Returns (V, Q)."""
    traj_off, success = steps.traj_off, steps.success
    node, pair, visits, pcount, lo = grp.node, grp.pair, grp.visits, grp.pcount, grp.lo
    V = np.zeros(visits.shape[0], np.float64)
    Q = np.zeros(pcount.shape[0], np.float64)
    for t in range(grp.t_lo, grp.t_hi):
        a, b = traj_off[t] - lo, traj_off[t + 1] - lo
        R = 1.0 if success[t] else 0.0
        for k in range(a, b):
            G = beta ** (b - k) * R
            V[node[k]] += G
            Q[pair[k]] += G
    for i in range(V.shape[0]):
        V[i] /= visits[i]
    for p in range(Q.shape[0]):
        Q[p] /= pcount[p]
    return V, Q


@njit(cache=True, nogil=True, inline="always")
def backed_up_values(steps, grp, beta, depth):
    """Visit-local (V, Q) then ``depth`` backups Q ← β·E[V(next)], V ← Σ_a N(s,a)/N(s)·Q."""
    pnode, pcount, visits = grp.pnode, grp.pcount, grp.visits
    V, Q = visit_local_values(steps, grp, beta)
    for _ in range(depth):
        Qn = pair_values(grp, V, beta)
        Vn = np.zeros(V.shape[0], np.float64)
        for p in range(Qn.shape[0]):
            Vn[pnode[p]] += pcount[p] / visits[pnode[p]] * Qn[p]
        Q, V = Qn, Vn
    return V, Q


@njit(cache=True, nogil=True, inline="always")
def group_outcome_stats(success, t_lo, t_hi):
    """GRPO's (mean, std) of the group's outcomes: sample std; one rollout: mean 0, std 1."""
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
    return mean, std


@njit(cache=True, nogil=True, inline="always")
def pair_credit(params, grp, V, Q, work, credit):
    """Per pair: the gated σ-normalised credit A = (Q − V)/max(σ, σ_min) with
    σ² = Σ_a N(s,a)/N(s)·A². An anchor whose Q agree within round-off
    (`crbc_viz.ops.segments.roundoff_tol`: magnitude max(|Q|, |V|), the group's steps) gets
    credit 0. ``work``: [4, ≥ anchors] scratch (σ², max Q, min Q, magnitude)."""
    pnode, pcount, visits, nact = grp.pnode, grp.pcount, grp.visits, grp.nact
    n = V.shape[0]
    sig2, qmax, qmin, mag = work[0], work[1], work[2], work[3]
    for s in range(n):
        sig2[s] = 0.0
        qmax[s] = -np.inf
        qmin[s] = np.inf
        mag[s] = abs(V[s])
    for p in range(Q.shape[0]):
        s = pnode[p]
        d = Q[p] - V[s]
        sig2[s] += pcount[p] / visits[s] * d * d
        qmax[s] = max(qmax[s], Q[p])
        qmin[s] = min(qmin[s], Q[p])
        mag[s] = max(mag[s], abs(Q[p]))
    tol = params.spread_rtol * grp.node.shape[0]  # × magnitude below
    for p in range(Q.shape[0]):
        s = pnode[p]
        spread = qmax[s] - qmin[s]
        credit[p] = 0.0
        if nact[s] >= params.min_actions and spread != 0.0 and not spread <= tol * mag[s]:
            credit[p] = (Q[p] - V[s]) / max(math.sqrt(sig2[s]), params.sigma_min)


@njit(cache=True, nogil=True, inline="always")
def write_steps(steps, params, grp, V, Q, credit, out):
    """Per step of the group: V, Q, credit and the advantage w_G·A^G + w_S·A (A^G: GRPO,
    eps = 1e-6)."""
    traj_off, success = steps.traj_off, steps.success
    node, pair, lo = grp.node, grp.pair, grp.lo
    w_group, w_step = params.w_group, params.w_step
    out_v, out_q, out_credit, out_adv = out.value, out.q_value, out.credit, out.advantage
    mean, std = group_outcome_stats(success, grp.t_lo, grp.t_hi)
    for t in range(grp.t_lo, grp.t_hi):
        ag = w_group * (((1.0 if success[t] else 0.0) - mean) / (std + 1e-6))
        for k in range(traj_off[t] - lo, traj_off[t + 1] - lo):
            p = pair[k]
            c = credit[p]
            out_v[lo + k] = V[node[k]]
            out_q[lo + k] = Q[p]
            out_credit[lo + k] = c
            out_adv[lo + k] = ag + w_step * c


@njit(cache=True, nogil=True, inline="always")
def write_credit(steps, params, grp, V, Q, out):
    """`pair_credit` then `write_steps` for a merged group (its own scratch)."""
    credit = np.empty(Q.shape[0], np.float64)  # per pair: each step of a pair reads its own
    pair_credit(params, grp, V, Q, np.empty((4, V.shape[0]), np.float64), credit)
    write_steps(steps, params, grp, V, Q, credit, out)


@njit(cache=True, nogil=True, inline="always")
def anchor_stats(g, params, out, nact, n):
    """Anchors merged and anchors gated (fewer than ``min_actions`` actions) of group ``g``."""
    gated = 0
    for i in range(n):
        if nact[i] < params.min_actions:
            gated += 1
    out.node_stats[g, 0] = n
    out.node_stats[g, 1] = gated


@njit(cache=True, nogil=True, inline="always")
def values_and_credit(g, steps, params, out, grp):
    """A merged group's values (exact closure or ``depth`` backups) and credit. A group over
    ``params.dense_max`` anchors is only flagged in ``out.large``."""
    n = grp.nact.shape[0]
    anchor_stats(g, params, out, grp.nact, n)
    if params.depth_inf:
        if n > params.dense_max:
            out.large[g] = 1
            return
        V = closure_values(grp, params.beta)
        out.residual[g], Q = closure_residual_and_q(grp, V, params.beta)
    else:
        V, Q = backed_up_values(steps, grp, params.beta, params.depth)
    write_credit(steps, params, grp, V, Q, out)


@njit(cache=True, nogil=True)
def group_kernel(g, steps, params, out):
    """Group ``g`` whole in its own arrays: `merge_group`, then `values_and_credit`."""
    t_lo, t_hi = steps.group_traj_off[g], steps.group_traj_off[g + 1]
    if steps.traj_off[t_hi] == steps.traj_off[t_lo]:
        return
    values_and_credit(g, steps, params, out, merge_group(steps, t_lo, t_hi))
