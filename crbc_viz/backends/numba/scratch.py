"""The compiled engine's path for groups at the exact depth (`scratch_group`): every table
lives in one `Scratch` per run of groups (`group_run`), so nothing is allocated per group nor
any hash table cleared, and one hash probe per step finds the (anchor, action) pair. A group
of up to `MASK_MAX` anchors is solved in the scratch too (`small_matrix`, `solve_masked`); a
larger one takes the merged arrays on to `crbc_viz.backends.numba.group.values_and_credit`."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .group import (
    MASK_MAX,
    Group,
    anchor_stats,
    group_kernel,
    pair_credit,
    solve_masked,
    values_and_credit,
    write_steps,
)
from .jit import lowest_bit, njit


class Scratch(NamedTuple):
    """One worker's tables for a run of groups, made once per run (`scratch`) and reused
    group after group: nothing is allocated per group, and the hash tables mark their live
    slots with the group's stamp instead of being cleared."""

    pkey: np.ndarray  # [cap] uint64 anchor hash of a (hash, action) slot
    pact: np.ndarray  # [cap] int64 its action
    pval: np.ndarray  # [cap] int64 its pair id
    pstamp: np.ndarray  # [cap] int64 stamp of the group that filled the slot
    nkey: np.ndarray  # [cap] uint64 anchor hash
    nval: np.ndarray  # [cap] int64 its anchor id
    nstamp: np.ndarray  # [cap] int64
    node: np.ndarray  # [steps] anchor of each step
    pair: np.ndarray  # [steps] pair of each step
    pnode: np.ndarray  # [steps] anchor of each pair
    pcount: np.ndarray  # [steps] float64 N(s, a)
    q: np.ndarray  # [steps] float64 Q(s, a)
    credit: np.ndarray  # [steps] float64 credit of each pair
    nxt: np.ndarray  # [steps] next anchor of each step, −1 SUCCESS, −2 FAILURE (over `MASK_MAX` anchors)
    visits: np.ndarray  # [steps] float64 N(s)
    nact: np.ndarray  # [steps] int64 distinct actions of each anchor
    mask: np.ndarray  # [MASK_MAX] uint64 nonzero columns of each row of A
    rhs: np.ndarray  # [MASK_MAX] float64
    v: np.ndarray  # [MASK_MAX] float64 V in the matrix's (reverse) order
    value: np.ndarray  # [MASK_MAX] float64 V by anchor id
    vsum: np.ndarray  # [MASK_MAX] float64 Σ V(next) over an anchor's steps
    work: np.ndarray  # [4, MASK_MAX] float64 `pair_credit`'s
    A: np.ndarray  # [MASK_MAX, MASK_MAX] float64: a group's n × n block, zeroed by `small_matrix`


@njit(cache=True, nogil=True, inline="always")
def scratch(max_steps):
    """A `Scratch` for groups of up to ``max_steps`` steps: hash tables of a power of two
    ≥ 2 × ``max_steps`` slots (load ≤ ½), stamps 0 (a group's stamp is its index + 1)."""
    cap = 16
    while cap < 2 * max_steps:
        cap *= 2
    m = MASK_MAX
    return Scratch(
        np.empty(cap, np.uint64),
        np.empty(cap, np.int64),
        np.empty(cap, np.int64),
        np.zeros(cap, np.int64),
        np.empty(cap, np.uint64),
        np.empty(cap, np.int64),
        np.zeros(cap, np.int64),
        np.empty(max_steps, np.int64),
        np.empty(max_steps, np.int64),
        np.empty(max_steps, np.int64),
        np.empty(max_steps, np.float64),
        np.empty(max_steps, np.float64),
        np.empty(max_steps, np.float64),
        np.empty(max_steps, np.int64),
        np.empty(max_steps, np.float64),
        np.empty(max_steps, np.int64),
        np.empty(m, np.uint64),
        np.empty(m, np.float64),
        np.empty(m, np.float64),
        np.empty(m, np.float64),
        np.empty(m, np.float64),
        np.empty((4, m), np.float64),
        np.empty((m, m), np.float64),
    )


@njit(cache=True, nogil=True, inline="always")
def small_anchor(nkey, nval, nstamp, h, n, stamp, shift):
    """Id of anchor hash ``h`` in the scratch's anchor table, inserting it as ``n`` if new.
    Returns ``(id, new n)``."""
    cap = nkey.shape[0]
    slot = np.int64((h * np.uint64(0x9E3779B97F4A7C15)) >> shift)
    while nstamp[slot] == stamp:
        if nkey[slot] == h:
            return nval[slot], n
        slot = (slot + 1) & (cap - 1)
    nstamp[slot], nkey[slot], nval[slot] = stamp, h, n
    return n, n + 1


@njit(cache=True, nogil=True, inline="always")
def merge_small(steps, lo, n_steps, sc, stamp):
    """`merge_group` into the scratch, one probe per step: (anchor hash, action) pairs are
    looked up first, the anchor only when the pair is new. Ids in first-occurrence order, as
    `merge_group`'s. Returns ``(anchors, pairs)``."""
    hashes, actions = steps.hashes, steps.actions
    pkey, pact, pval, pstamp = sc.pkey, sc.pact, sc.pval, sc.pstamp
    nkey, nval, nstamp = sc.nkey, sc.nval, sc.nstamp
    node, pair, pnode, pcount, nact, visits = sc.node, sc.pair, sc.pnode, sc.pcount, sc.nact, sc.visits
    cap = pkey.shape[0]
    shift = np.uint64(64 - int(math.log2(cap)))
    n = 0
    npairs = 0
    for k in range(n_steps):
        h = hashes[lo + k]
        a = actions[lo + k]
        slot = np.int64(
            ((h ^ (np.uint64(a) * np.uint64(0xC2B2AE3D27D4EB4F))) * np.uint64(0x9E3779B97F4A7C15)) >> shift
        )
        while pstamp[slot] == stamp and not (pkey[slot] == h and pact[slot] == a):
            slot = (slot + 1) & (cap - 1)
        if pstamp[slot] == stamp:
            p = pval[slot]
        else:
            s, m = small_anchor(nkey, nval, nstamp, h, n, stamp, shift)
            if m > n:  # a new anchor
                visits[s] = 0.0
                nact[s] = 0
                n = m
            pstamp[slot], pkey[slot], pact[slot], pval[slot] = stamp, h, a, npairs
            p = npairs
            npairs += 1
            pnode[p] = s
            pcount[p] = 0.0
            nact[s] += 1
        pair[k] = p
        node[k] = pnode[p]
        pcount[p] += 1.0
    for p in range(npairs):
        visits[pnode[p]] += pcount[p]
    return n, npairs


@njit(cache=True, nogil=True, inline="always")
def small_matrix(steps, t_lo, t_hi, sc, n, beta):
    """`closure_matrix` into the scratch's top-left n × n block (zeroed here), each row's
    nonzero columns as the bits of ``mask``: the same entries as `closure_matrix`'s."""
    traj_off, success = steps.traj_off, steps.success
    node, A, rhs, mask, visits = sc.node, sc.A, sc.rhs, sc.mask, sc.visits
    lo = traj_off[t_lo]
    for i in range(n):
        mask[i] = np.uint64(1) << np.uint64(i)
        rhs[i] = 0.0
        for j in range(n):
            A[i, j] = 0.0
    for t in range(t_lo, t_hi):
        a, b = traj_off[t] - lo, traj_off[t + 1] - lo
        for k in range(a, b - 1):
            s, x = n - 1 - node[k], n - 1 - node[k + 1]
            A[s, x] -= 1.0
            mask[s] |= np.uint64(1) << np.uint64(x)
        if success[t]:
            rhs[n - 1 - node[b - 1]] += 1.0
    for i in range(n):
        w = beta / visits[n - 1 - i]
        m = mask[i]
        while m:
            A[i, lowest_bit(m)] *= w
            m &= m - np.uint64(1)
        rhs[i] *= w
        A[i, i] += 1.0


@njit(cache=True, nogil=True, inline="always")
def small_q(steps, t_lo, t_hi, sc, n, npairs, beta):
    """V by anchor id, Q(s, a) = β · mean over the pair's steps of V(next) (V(SUCCESS) = 1,
    V(FAILURE) = 0) and ‖(I − βM)V − b‖∞ (row s: V(s) − β·Σ V(next)/N(s) over its steps)."""
    traj_off, success = steps.traj_off, steps.success
    node, pair, pnode, pcount, Q, V, vsum = sc.node, sc.pair, sc.pnode, sc.pcount, sc.q, sc.value, sc.vsum
    v, visits = sc.v, sc.visits
    lo = traj_off[t_lo]
    for i in range(n):
        V[i] = v[n - 1 - i]
        vsum[i] = 0.0
    for p in range(npairs):
        Q[p] = 0.0
    for t in range(t_lo, t_hi):
        a, b = traj_off[t] - lo, traj_off[t + 1] - lo
        for k in range(a, b - 1):
            Q[pair[k]] += V[node[k + 1]]
        if success[t]:
            Q[pair[b - 1]] += 1.0
    for p in range(npairs):
        vsum[pnode[p]] += Q[p]
        Q[p] = beta * Q[p] / pcount[p]
    res = 0.0
    for i in range(n):
        res = max(res, abs(V[i] - beta * vsum[i] / visits[i]))
    return res


@njit(cache=True, nogil=True, inline="always")
def successors(steps, t_lo, t_hi, sc, n_steps):
    """``nxt`` of `merge_group` in the scratch: each step's next anchor, −1 after the last
    step of a success, −2 of a failure."""
    traj_off, success, node, nxt = steps.traj_off, steps.success, sc.node, sc.nxt
    lo = traj_off[t_lo]
    for t in range(t_lo, t_hi):
        a, b = traj_off[t] - lo, traj_off[t + 1] - lo
        for k in range(a, b - 1):
            nxt[k] = node[k + 1]
        nxt[b - 1] = -1 if success[t] else -2
    return nxt[:n_steps]


@njit(cache=True, nogil=True, inline="always")
def scratch_group(g, steps, params, out, sc):
    """Group ``g`` at the exact depth, merged in the scratch (`merge_small`): a group of up to
    `MASK_MAX` anchors is solved there too (`small_matrix`, `solve_masked`, `small_q`), a larger
    one's merged arrays — `merge_group`'s, the same ids — go on to `values_and_credit`. Returns
    False, having written nothing, for a group of more steps than the scratch holds
    (`group_kernel` then runs it)."""
    t_lo, t_hi = steps.group_traj_off[g], steps.group_traj_off[g + 1]
    lo = steps.traj_off[t_lo]
    n_steps = steps.traj_off[t_hi] - lo
    if n_steps > sc.node.shape[0]:  # made for smaller groups (numba checks no bounds)
        return False
    n, npairs = merge_small(steps, lo, n_steps, sc, g + 1)
    node, pcount, nact = sc.node[:n_steps], sc.pcount[:npairs], sc.nact[:n]
    if n > MASK_MAX:
        nxt = successors(steps, t_lo, t_hi, sc, n_steps)
        grp = Group(
            t_lo, t_hi, lo, node, sc.pair[:n_steps], nxt, sc.visits[:n], pcount, sc.pnode[:npairs], nact
        )
        values_and_credit(g, steps, params, out, grp)
        return True
    anchor_stats(g, params, out, nact, n)
    small_matrix(steps, t_lo, t_hi, sc, n, params.beta)
    solve_masked(sc.A, sc.rhs[:n], sc.mask[:n], sc.v[:n])
    out.residual[g] = small_q(steps, t_lo, t_hi, sc, n, npairs, params.beta)
    V, Q = sc.value[:n], sc.q[:npairs]
    # (the Group's ``nxt`` is not read by `pair_credit` or `write_steps`: ``node`` stands in)
    grp = Group(t_lo, t_hi, lo, node, sc.pair, node, sc.visits, pcount, sc.pnode, nact)
    pair_credit(params, grp, V, Q, sc.work, sc.credit)
    write_steps(steps, params, grp, V, Q, sc.credit, out)
    return True


#: Groups of more steps than this skip the scratch (`group_run`): its tables are sized by the
#: run's largest group, and a group this long gains nothing from sharing them.
SCRATCH_MAX_STEPS = 1 << 16


@njit(cache=True, nogil=True)
def group_run(g_lo, g_hi, steps, params, out):
    """Groups ``[g_lo, g_hi)`` in turn: a group of up to `SCRATCH_MAX_STEPS` steps at the exact
    depth by `scratch_group`, in one `Scratch` made for the largest such group of the run
    (~180 bytes a step), any other by `group_kernel`."""
    traj_off, gto = steps.traj_off, steps.group_traj_off
    max_steps = 0
    for g in range(g_lo, g_hi):
        n_steps = traj_off[gto[g + 1]] - traj_off[gto[g]]
        if n_steps <= SCRATCH_MAX_STEPS:
            max_steps = max(max_steps, n_steps)
    sc = scratch(max_steps)
    for g in range(g_lo, g_hi):
        n_steps = traj_off[gto[g + 1]] - traj_off[gto[g]]
        if n_steps == 0:
            continue
        if not (params.depth_inf and scratch_group(g, steps, params, out, sc)):
            group_kernel(g, steps, params, out)
