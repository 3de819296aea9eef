"""The closure solve shared by the numpy references: (I − βM)V = b for every group at once.

M(s,s′) = Σ_a μ(a|s) P(s′|s,a) = N(s→s′)/N(s) and b(s) = β N(s→z+)/N(s) are given as a
list of weighted entries (source node, successor, weight); entries may repeat and add up.
Groups never share a node, so the system is block diagonal. It is solved directly, never
iteratively, in memory that grows with the number of entries, not with (largest group)²:

- groups of at most `DENSE_MAX` anchors: padded to a power-of-two size class and solved
  with one batched dense LU per class (``numpy.linalg.solve``; padding rows are identity
  rows with b = 0), in chunks of at most `CHUNK_BYTES` of matrix;
- larger groups: one sparse LU (SciPy SuperLU) of their block-diagonal system — the same
  fill-in as solving each group alone; SciPy is imported only when such a group exists.

I − βM is a nonsingular M-matrix (every anchor reaches a boundary under the empirical
chain), so both are stable.
"""
from __future__ import annotations

import numpy as np

__all__ = ["solve_closure", "graph_entries", "DENSE_MAX", "CHUNK_BYTES"]

#: Largest group (anchors) solved densely by the reference; larger groups go to sparse LU.
DENSE_MAX = 256
#: Largest dense block of padded matrices allocated at once (bytes).
CHUNK_BYTES = 64 << 20

SUCCESS = -1


def graph_entries(graph):
    """(source node, successor, weight N(s,a,x)/N(s)) of each distinct edge ``[E]``."""
    src = graph.pair_node[graph.edge_pair]
    return src, graph.edge_next, graph.edge_count / graph.node_visits[src].astype(np.float64)


def size_class(n: np.ndarray) -> np.ndarray:
    """Padded size classes: powers of two from 8 up (a class wastes < 2× per side)."""
    return np.maximum(8, 1 << np.ceil(np.log2(np.maximum(n, 1))).astype(np.int64))


def solve_closure(src: np.ndarray, nxt: np.ndarray, w: np.ndarray, group_node_offsets: np.ndarray,
                  beta: float, *, dense_max: int = DENSE_MAX) -> tuple[np.ndarray, float]:
    """V ``[N]`` and the residual ‖(I − βM)V − b‖∞ over all groups.

    Args:
        src, nxt, w: ``[E]`` entries: source node, successor (node id, or SUCCESS −1 /
            FAILURE −2) and weight (rows of M sum to ≤ 1).
        group_node_offsets: ``[G + 1]``; a group's nodes are contiguous.
        beta: the discount.
        dense_max: largest group solved densely (0: every group sparse).
    """
    offsets = np.asarray(group_node_offsets, dtype=np.int64)
    N = int(offsets[-1]) if len(offsets) else 0
    src = np.asarray(src, dtype=np.int64)
    nxt = np.asarray(nxt, dtype=np.int64)
    w = np.asarray(w, dtype=np.float64)
    succ = nxt == SUCCESS
    b = beta * np.bincount(src[succ], weights=w[succ], minlength=N)     # Eq. 8: b(s)
    inner = nxt >= 0
    i_src, i_dst, i_w = src[inner], nxt[inner], w[inner]
    V = np.zeros(N)
    if N == 0:
        return V, 0.0
    n_group = np.diff(offsets)
    node_group = np.repeat(np.arange(len(n_group)), n_group)
    local = np.arange(N) - offsets[node_group]
    e_group = node_group[i_src]
    if len(e_group) > 1 and np.any(e_group[1:] < e_group[:-1]):
        order = np.argsort(e_group, kind="stable")
        i_src, i_dst, i_w, e_group = i_src[order], i_dst[order], i_w[order], e_group[order]
    dense = (n_group <= dense_max) & (n_group > 0)
    size = np.where(dense, size_class(n_group), 0)
    for m in np.unique(size[dense]):
        m = int(m)
        groups = np.flatnonzero(size == m)
        slot_of = np.full(len(n_group), -1, dtype=np.int64)
        slot_of[groups] = np.arange(len(groups))
        e_sel = np.flatnonzero(slot_of[e_group] >= 0)
        e_slot = slot_of[e_group[e_sel]]                 # increasing: entries are by group
        n_sel = np.flatnonzero(slot_of[node_group] >= 0)
        n_slot = slot_of[node_group[n_sel]]
        per_chunk = max(1, CHUNK_BYTES // (8 * m * m))
        for c0 in range(0, len(groups), per_chunk):
            c1 = min(c0 + per_chunk, len(groups))
            k = c1 - c0
            ea, eb = np.searchsorted(e_slot, [c0, c1])
            na, nb = np.searchsorted(n_slot, [c0, c1])
            es, ns = e_sel[ea:eb], n_sel[na:nb]
            flat = ((e_slot[ea:eb] - c0) * m + local[i_src[es]]) * m + local[i_dst[es]]
            A = np.bincount(flat, weights=-beta * i_w[es], minlength=k * m * m).astype(
                np.float64, copy=False).reshape(k, m, m)
            A[:, np.arange(m), np.arange(m)] += 1.0
            rhs = np.zeros((k, m))
            rows, cols = n_slot[na:nb] - c0, local[ns]
            rhs[rows, cols] = b[ns]
            sol = np.linalg.solve(A, rhs[..., None])[..., 0]   # Eq. 9: one solve per class
            V[ns] = sol[rows, cols]
    large = ~dense & (n_group > 0)
    if large.any():
        V = _sparse_solve(large[node_group], i_src, i_dst, i_w, b, beta, V)
    MV = np.bincount(i_src, weights=i_w * V[i_dst], minlength=N)
    return V, float(np.max(np.abs(V - beta * MV - b)))


def _sparse_solve(node_large: np.ndarray, i_src, i_dst, i_w, b, beta, V):
    """The block-diagonal system of the large groups by one sparse LU."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    nodes = np.flatnonzero(node_large)
    pos = np.full(node_large.shape[0], -1, dtype=np.int64)
    pos[nodes] = np.arange(len(nodes))
    sel = node_large[i_src]
    n = len(nodes)
    rows = np.r_[np.arange(n), pos[i_src[sel]]]
    cols = np.r_[np.arange(n), pos[i_dst[sel]]]
    vals = np.r_[np.ones(n), -beta * i_w[sel]]
    A = sp.csc_matrix((vals, (rows, cols)), shape=(n, n))      # duplicates are summed
    V[nodes] = splu(A).solve(b[nodes])
    return V
