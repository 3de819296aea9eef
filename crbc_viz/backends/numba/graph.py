"""Compiled kernels for the graph-wide peers where numpy's per-group loops are too slow.

`graph_gae_bonus_numba` computes GRAFT's Graph-GAE bonus (Eqs. 9–10) with the exact
semantics of the numpy reference `crbc_viz.estimators.graft.graph_gae_bonus`: for a step
whose successor is anchor v with r steps left in its trajectory,

    bonus = Σ_{k=1}^{r} (γλ)^k · Ā_k(v),   Ā_k(v) = Σ_{u∈F_k(v)} TD(u) / Σ_{u∈F_k(v)} N(u),

where F_1(v) = {v} and F_{k+1}(v) is the set of non-terminal successors of F_k(v). Frontiers
are index lists with a visit stamp for de-duplication; groups run in parallel.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .jit import njit as _njit
from .jit import numba as _nb
from .jit import prange as _prange

__all__ = ["graph_gae_bonus_numba", "mean_backup_values_numba", "discounted_suffix_sum_numba"]


class Queries(NamedTuple):
    """The running sums asked of the frontier walk, sorted by (start anchor, horizon)."""

    group_off: np.ndarray  # [G + 1] offsets of each group's queries
    off: np.ndarray  # [N + 1] offsets of each start anchor's queries
    remaining: np.ndarray  # [Q] horizon r of each query
    step: np.ndarray  # [Q] the step whose bonus it is


@_njit(cache=True, parallel=True, nogil=True)
def gae_bonus_kernel(group_node_off, queries, node_td, visits, succ_off, succ, gl, out):
    """Per start anchor v, walk the frontiers up to the longest horizon asked of v and write
    the running sum at each asked horizon (queries of v sorted by horizon): O(steps + anchors)
    memory, no (anchor × horizon) table. ``queries``: a plain tuple in `Queries`' field order."""
    q_group_off, q_off, q_rem, q_step = queries
    G = group_node_off.shape[0] - 1
    for g in _prange(G):
        lo, hi = group_node_off[g], group_node_off[g + 1]
        n = hi - lo
        if n == 0 or q_group_off[g] == q_group_off[g + 1]:
            continue
        cur = np.empty(n, np.int64)
        nxt = np.empty(n, np.int64)
        stamp = np.zeros(n, np.int64)  # stamp[x] == tick: x already in the next frontier
        tick = 0
        for v in range(lo, hi):
            qa, qb = q_off[v], q_off[v + 1]
            if qa == qb:
                continue
            H = q_rem[qb - 1]
            qi = qa
            cur[0] = v
            m = 1
            acc = 0.0
            fac = 1.0
            for kk in range(1, H + 1):
                fac *= gl
                tds = 0.0
                cnt = 0.0
                tick += 1
                m2 = 0
                for i in range(m):
                    u = cur[i]
                    tds += node_td[u]
                    cnt += visits[u]
                    for e in range(succ_off[u], succ_off[u + 1]):
                        x = succ[e]
                        if stamp[x - lo] != tick:
                            stamp[x - lo] = tick
                            nxt[m2] = x
                            m2 += 1
                a_bar = tds / cnt if (m > 0 and cnt > 0) else 0.0
                acc += fac * a_bar
                while qi < qb and q_rem[qi] == kk:
                    out[q_step[qi]] = acc
                    qi += 1
                # Fixed point F_{k+1} = F_k: Ā stays constant, finish with the geometric tail.
                same = m2 == m
                if same:
                    for i in range(m):
                        if stamp[cur[i] - lo] != tick:
                            same = False
                            break
                if same:
                    for k2 in range(kk + 1, H + 1):
                        fac *= gl
                        acc += fac * a_bar
                        while qi < qb and q_rem[qi] == k2:
                            out[q_step[qi]] = acc
                            qi += 1
                    break
                for i in range(m2):
                    cur[i] = nxt[i]
                m = m2


def graph_gae_bonus_numba(graph, td: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Same contract as `crbc_viz.estimators.graft.graph_gae_bonus` (``[S]``)."""
    if _nb is None:
        raise ImportError("numba is not installed; use backend='numpy' or 'torch'")
    from ...estimators.graft import gae_inputs, gae_negligible

    b = graph.batch
    out = np.zeros(b.num_steps)
    if lam == 0.0 or out.size == 0:
        return out
    remaining, node_td = gae_inputs(graph, td)
    if gae_negligible(graph, node_td, remaining, gamma, lam):
        return out
    # Queries: every step with a non-terminal successor v and r > 0 steps left asks for the
    # running sum of v at horizon r; sorted by (v, r), so by group too.
    q = np.flatnonzero((graph.step_next >= 0) & (remaining > 0))
    q = q[np.lexsort((remaining[q], graph.step_next[q]))]
    N = graph.num_nodes
    q_off = np.searchsorted(graph.step_next[q], np.arange(N + 1)).astype(np.int64)
    q_group_off = q_off[graph.group_node_offsets].astype(np.int64)
    # Non-terminal successors of each node as CSR: edges are sorted by (pair, successor) and
    # pairs by node, so they are already grouped by source; repeats (one successor reached by
    # several actions) are skipped by the kernel's visit stamp.
    inner = graph.edge_next >= 0
    succ_src = graph.pair_node[graph.edge_pair][inner]
    succ = graph.edge_next[inner]
    succ_off = np.searchsorted(succ_src, np.arange(N + 1)).astype(np.int64)
    queries = Queries(q_group_off, q_off, remaining[q].astype(np.int64), q.astype(np.int64))
    gae_bonus_kernel(
        graph.group_node_offsets.astype(np.int64),
        tuple(queries),
        node_td,
        graph.node_visits.astype(np.float64),
        succ_off,
        succ.astype(np.int64),
        float(gamma * lam),
        out,
    )
    return out


def mean_backup_values_numba(graph, gamma: float):
    """GRAFT's / Gated-BEPO's node values: the CRBC closure with β = γ (ESTIMATORS.md §13),
    from the compiled engine. Returns ``(V [N], residual)`` like `mean_backup_values`."""
    from .crbc import crbc_step_credit

    b = graph.batch
    out = crbc_step_credit(
        b.step_anchor_hash,
        graph.step_action,
        b.traj_offsets,
        b.group_traj_offsets,
        b.traj_success,
        beta=gamma,
    )
    V = np.zeros(graph.num_nodes)
    V[graph.step_node] = out["value"]
    return V, out["closure_residual"]


@_njit(cache=True, nogil=True)
def _suffix_sum(values, traj_off, decay, out):
    for t in range(traj_off.shape[0] - 1):
        acc = 0.0
        for k in range(traj_off[t + 1] - 1, traj_off[t] - 1, -1):
            acc = values[k] + decay * acc
            out[k] = acc


def discounted_suffix_sum_numba(graph, values: np.ndarray, decay: float) -> np.ndarray:
    """Σ_{l≥0} decay^l · values_{t+l} within each trajectory ``[S]`` (the contract of
    `crbc_viz.estimators.gigpo.discounted_returns`), compiled."""
    if _nb is None:
        raise ImportError("numba is not installed; use backend='numpy' or 'torch'")
    out = np.empty(graph.batch.num_steps)
    _suffix_sum(
        np.ascontiguousarray(values, dtype=np.float64),
        graph.batch.traj_offsets.astype(np.int64),
        float(decay),
        out,
    )
    return out
