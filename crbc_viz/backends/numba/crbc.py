"""Compiled CPU engine for CRBC: merge, solve and credit fused per group, parallel over groups.

Input is the batch's raw step arrays — anchor hashes, action ids, trajectory and group
offsets, success flags — so the whole estimator runs here: anchors are merged inside each
group (an open-addressing hash table, group-scoped), the closure (I − βM)V = b is solved by dense
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
from typing import NamedTuple

import numpy as np

from ...estimators.crbc import CRBCParams
from ...ops.checks import check_step_arrays
from ...ops.segments import F64_EPS, SPREAD_ULPS
from ..checks import check_engine_params

__all__ = ["crbc_step_credit", "run_checked", "DENSE_MAX"]

DENSE_MAX = 1024

try:  # numba is an extra (crbc-viz[numba]); the module must import without it
    import numba as _nb
    from numba.extending import intrinsic as _intrinsic

    _njit, _prange = _nb.njit, _nb.prange

    @_intrinsic
    def lowest_bit(typingctx, x):
        """Index of the lowest set bit of the uint64 ``x`` (not 0): one ``tzcnt``."""
        sig = _nb.types.uint64(_nb.types.uint64)
        # (cttz's second operand, "zero is poison", is an i1: numba's boolean constant)
        return sig, lambda context, builder, sig, args: builder.cttz(
            args[0], context.get_constant(_nb.types.boolean, True)
        )

except ImportError:  # pragma: no cover
    _nb = None
    _prange = range

    def _njit(*_args, **_kwargs):
        return lambda f: f

    def lowest_bit(x):
        return (x & -x).bit_length() - 1


#: Groups of up to this many anchors keep each row's nonzero columns as the bits of one uint64
#: (`closure_values`); larger ones keep the band of columns each row's nonzeros lie in.
MASK_MAX = 64


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
    """One group merged, in group-local ids (built by `merge_group`)."""

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


@_njit(cache=True, nogil=True, inline="always")
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


@_njit(cache=True, nogil=True, inline="always")
def above(c):
    """The uint64 mask of the columns right of column ``c`` (0 for c = 63)."""
    return ~((np.uint64(2) << np.uint64(c)) - np.uint64(1))


@_njit(cache=True, nogil=True, inline="always")
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


@_njit(cache=True, nogil=True, inline="always")
def solve_masked(A, rhs, mask, V):
    """`solve_band`'s operations on the nonzeros only: row r's next column to clear is the
    lowest bit of its mask left of r and right of the last one cleared (fill included), and
    an update touches the columns of row c's mask right of c. Every entry outside a row's mask
    is 0, so the updates and sums skipped are x − 0·y: the same bits as `solve_band`."""
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
                mc = right
                while mc:
                    j = lowest_bit(mc)
                    A[r, j] -= f * A[c, j]
                    mc &= mc - np.uint64(1)
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


@_njit(cache=True, nogil=True, inline="always")
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


@_njit(cache=True, nogil=True, inline="always")
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


@_njit(cache=True, nogil=True, inline="always")
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


@_njit(cache=True, nogil=True, inline="always")
def pair_values(grp, V, beta):
    """Q(s, a) = β · mean over the pair's steps of V(next), V(SUCCESS) = 1, V(FAILURE) = 0."""
    pair, nxt, pcount = grp.pair, grp.nxt, grp.pcount
    Q = np.zeros(pcount.shape[0], np.float64)
    for k in range(nxt.shape[0]):
        x = nxt[k]
        vx = V[x] if x >= 0 else (1.0 if x == -1 else 0.0)
        Q[pair[k]] += beta * vx / pcount[pair[k]]
    return Q


@_njit(cache=True, nogil=True, inline="always")
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


@_njit(cache=True, nogil=True, inline="always")
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


@_njit(cache=True, nogil=True, inline="always")
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


@_njit(cache=True, nogil=True, inline="always")
def write_credit(steps, params, grp, V, Q, out):
    """Per step: V, Q, the gated σ-normalised credit A = (Q − V)/max(σ, σ_min) with
    σ² = Σ_a N(s,a)/N(s)·A², and the advantage w_G·A^G + w_S·A (A^G: GRPO, eps = 1e-6). An
    anchor whose Q agree within round-off (`crbc_viz.ops.segments.roundoff_tol`: magnitude
    max(|Q|, |V|), the group's steps) gets credit 0."""
    traj_off, success = steps.traj_off, steps.success
    node, pair, pnode, pcount, visits, nact, lo = (
        grp.node,
        grp.pair,
        grp.pnode,
        grp.pcount,
        grp.visits,
        grp.nact,
        grp.lo,
    )
    min_actions, sigma_min, w_group, w_step = (
        params.min_actions,
        params.sigma_min,
        params.w_group,
        params.w_step,
    )
    out_v, out_q, out_credit, out_adv = out.value, out.q_value, out.credit, out.advantage
    n = V.shape[0]
    sig2 = np.zeros(n, np.float64)
    qmax = np.full(n, -np.inf)
    qmin = np.full(n, np.inf)
    mag = np.abs(V)
    for p in range(Q.shape[0]):
        s = pnode[p]
        d = Q[p] - V[s]
        sig2[s] += pcount[p] / visits[s] * d * d
        qmax[s] = max(qmax[s], Q[p])
        qmin[s] = min(qmin[s], Q[p])
        mag[s] = max(mag[s], abs(Q[p]))
    tol = params.spread_rtol * node.shape[0]  # × magnitude below
    credit = np.zeros(Q.shape[0], np.float64)  # per pair: each step of a pair reads its own
    for p in range(Q.shape[0]):
        s = pnode[p]
        spread = qmax[s] - qmin[s]
        if nact[s] >= min_actions and spread != 0.0 and not spread <= tol * mag[s]:
            credit[p] = (Q[p] - V[s]) / max(math.sqrt(sig2[s]), sigma_min)
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


@_njit(cache=True, nogil=True)
def group_kernel(g, steps, params, out):
    """Group ``g`` whole: merge, values (exact closure or ``depth`` backups), credit. A group
    over ``params.dense_max`` anchors is only flagged in ``out.large``."""
    t_lo, t_hi = steps.group_traj_off[g], steps.group_traj_off[g + 1]
    if steps.traj_off[t_hi] == steps.traj_off[t_lo]:
        return
    grp = merge_group(steps, t_lo, t_hi)
    nact = grp.nact
    n = nact.shape[0]
    gated = 0
    for i in range(n):
        if nact[i] < params.min_actions:
            gated += 1
    out.node_stats[g, 0] = n
    out.node_stats[g, 1] = gated
    if params.depth_inf:
        if n > params.dense_max:
            out.large[g] = 1
            return
        V = closure_values(grp, params.beta)
        out.residual[g], Q = closure_residual_and_q(grp, V, params.beta)
    else:
        V, Q = backed_up_values(steps, grp, params.beta, params.depth)
    write_credit(steps, params, grp, V, Q, out)


@_njit(cache=True, parallel=True, nogil=True)
def all_groups(steps, params, out):
    """`group_kernel` for every group, in parallel. The arguments are plain tuples in the
    field order of `Steps`, `KernelParams` and `Outputs` (numba types a plain tuple ~2 µs
    faster than a named one at each call; inside, they are named again at no cost)."""
    steps, params, out = Steps(*steps), KernelParams(*params), Outputs(*out)
    for g in _prange(steps.group_traj_off.shape[0] - 1):
        group_kernel(g, steps, params, out)


def _compiled():
    if _nb is None:
        raise ImportError("numba is not installed; use backend='torch' or 'numpy'")
    _launch_threads()
    return all_groups


def _launch_threads() -> None:
    """Start numba's thread pool (once) with OpenMP's passive wait policy unless the user chose
    one: a worker that has no group left sleeps instead of spinning. On a machine shared with
    other jobs (more runnable threads than cores) a spinning worker takes the core the thread
    still merging its groups needs, and each call ends with up to a few ms of spinning; the
    policy is read once, when the OpenMP runtime starts, so the variable is set only for that
    moment and this process's other OpenMP runtimes (torch's) keep their own."""
    from numba.np.ufunc import parallel

    if parallel._is_initialized:
        return
    import os

    if "OMP_WAIT_POLICY" in os.environ:
        parallel._launch_threads()
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        parallel._launch_threads()
    finally:
        del os.environ["OMP_WAIT_POLICY"]


def crbc_step_credit(
    step_anchor_hash: np.ndarray,
    step_action: np.ndarray,
    traj_offsets: np.ndarray,
    group_traj_offsets: np.ndarray,
    traj_success: np.ndarray,
    *,
    beta: float = CRBCParams.beta,
    depth: float = CRBCParams.depth,
    sigma_min: float = CRBCParams.sigma_min,
    w_group: float = CRBCParams.w_group,
    w_step: float = CRBCParams.w_step,
    min_actions: int = CRBCParams.min_actions,
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
            (same defaults and bounds: `CRBCParams`'s). dense_max: integer >= 0.

    Returns:
        dict of ``value``, ``q_value``, ``credit``, ``advantage`` (each ``[S]`` float64) and
        ``closure_residual`` (max over groups; exact depth only), ``num_nodes`` (anchors
        merged) and ``gated_nodes`` (anchors with fewer than ``min_actions`` actions).

    Raises:
        EstimatorInputError: an array or parameter outside that contract (named in the
            message), checked before the kernel runs (`crbc_viz.ops.checks`).
    """
    _compiled()
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
    steps = Steps(
        *check_step_arrays(
            step_anchor_hash, step_action, traj_offsets, group_traj_offsets, traj_success, caller=caller
        )
    )
    return run_checked(steps, p, p.depth, dense_max)


def run_checked(steps: Steps, p, depth: float, dense_max: int = DENSE_MAX) -> dict:
    """`crbc_step_credit` on arrays already checked (`check_step_arrays`) with parameters
    already checked (``p``: a `CRBCParams`-like object whose bounds were checked; ``depth``
    overrides its depth): what `crbc_viz.api.score` calls, which checked both before."""
    fn = _compiled()
    S, G = steps.hashes.shape[0], steps.group_traj_off.shape[0] - 1
    out = Outputs(
        *step_outputs(S),  # every step is written (large groups after the kernel)
        large=np.zeros(G, np.int8),
        residual=np.zeros(G),
        node_stats=np.zeros((G, 2), np.int64),
    )
    depth_inf = math.isinf(depth)
    params = KernelParams(
        beta=float(p.beta),
        depth_inf=depth_inf,
        depth=0 if depth_inf else int(depth),
        sigma_min=float(p.sigma_min),
        w_group=float(p.w_group),
        w_step=float(p.w_step),
        min_actions=int(p.min_actions),
        dense_max=int(dense_max),
        spread_rtol=SPREAD_ULPS * F64_EPS,
    )
    fn(tuple(steps), tuple(params), tuple(out))
    if out.large.any():
        _solve_large_groups(np.flatnonzero(out.large), steps, p, out)
    return {
        "value": out.value,
        "q_value": out.q_value,
        "credit": out.credit,
        "advantage": out.advantage,
        "closure_residual": float(out.residual.max()) if (depth_inf and G) else float("nan"),
        "num_nodes": int(out.node_stats[:, 0].sum()),
        "gated_nodes": int(out.node_stats[:, 1].sum()),
    }


#: Up to this many steps the four per-step outputs are rows of one block (`step_outputs`).
ONE_BLOCK_MAX_STEPS = 1 << 20


def step_outputs(S: int) -> tuple:
    """The four ``[S]`` float64 outputs, uninitialised. Up to `ONE_BLOCK_MAX_STEPS` steps they
    are the rows of one ``[4, S]`` block, which glibc's malloc keeps from one call to the next:
    freeing an mmap'ed block raises its mmap threshold to the block's size and its trim
    threshold to twice that. Four separate arrays of ~S·8 bytes are handed back to the system
    at every free (together they exceed the trim threshold that one of them set), and the next
    call's first writes fault every page in again: ~570 faults, ~0.8 ms of CPU per call on
    workload (b)'s 77k steps, 20 % of the call. Above it (32 MiB: glibc's largest dynamic
    mmap threshold, so a block would be mapped afresh at every call anyway) they are separate,
    so that keeping one does not keep the other three."""
    if S <= ONE_BLOCK_MAX_STEPS:
        return tuple(np.empty((4, S)))
    return tuple(np.empty(S) for _ in range(4))


def _solve_large_groups(groups, steps: Steps, p, out: Outputs) -> None:
    """Groups over ``dense_max`` anchors: the numpy reference, whose closure solve takes
    sparse LU for them (`crbc_viz.ops.closure`; no dense n² matrix, no torch). ``p``: the
    checked `CRBCParams` (exact depth)."""
    import pandas as pd

    from ...data import Layout, batch_from_columns
    from ...estimators.crbc import crbc
    from ...graph import build_graph

    traj_off, gto, success = steps.traj_off, steps.group_traj_off, steps.success
    for g in groups:
        t_lo, t_hi = gto[g], gto[g + 1]
        lo, hi = traj_off[t_lo], traj_off[t_hi]
        lens = np.diff(traj_off[t_lo : t_hi + 1])
        sub = batch_from_columns(
            pd.DataFrame({"action": pd.Categorical(steps.actions[lo:hi]), "anchor_key": ""}),
            layout=Layout.of_lengths(lens, np.zeros(t_hi - t_lo, np.int64), 1),
            step_anchor_hash=steps.hashes[lo:hi],
            traj_success=success[t_lo:t_hi],
            traj_truncated=np.zeros(t_hi - t_lo, bool),
            traj_return=success[t_lo:t_hi].astype(float),
            groups=pd.DataFrame({"g": [g]}),
            success_column=False,
        )
        r = crbc(
            build_graph(sub),
            beta=p.beta,
            sigma_min=p.sigma_min,
            w_group=p.w_group,
            w_step=p.w_step,
            min_actions=p.min_actions,
        )
        out.value[lo:hi], out.q_value[lo:hi] = r.value, r.q_value
        out.credit[lo:hi], out.advantage[lo:hi] = r.credit, r.advantage
        out.residual[g] = r.diagnostics["closure_residual"]
