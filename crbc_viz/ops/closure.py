"""The closure solve shared by the numpy references: (I − βM)V = b for every group at once.

M(s,s′) = Σ_a μ(a|s) P(s′|s,a) = N(s→s′)/N(s) and b(s) = β N(s→z+)/N(s) are given as a
list of weighted entries (source node, successor, weight); entries may repeat and add up.
Groups never share a node, so the system is block diagonal. It is solved in memory that grows
with the number of entries, not with (largest group)²:

- groups of at most `DENSE_MAX` anchors: padded to a power-of-two size class and solved
  with one batched dense LU per class (``numpy.linalg.solve``; padding rows are identity
  rows with b = 0), in chunks of at most `CHUNK_BYTES` of matrix;
- larger groups up to `SPARSE_LU_MAX` anchors: one sparse LU (SciPy SuperLU) of their
  block-diagonal system — the same fill-in as solving each group alone; SciPy is imported
  only when such a group exists;
- groups over `SPARSE_LU_MAX` anchors: LU fill-in on a well-mixed graph grows towards n²
  (a 50k-anchor random group fills 6 M entries, 110k did not finish in 5 minutes), so they
  are solved by the fixed-point iteration V ← βMV + b over the sparse entries until the
  proven error bound ‖V − V*‖∞ ≤ β/(1 − β)·‖ΔV‖∞ is below `ITER_TOL` (for β = 1, the
  contraction rate measured over the last iterations stands in for β);
- and so are groups over `LU_ALWAYS_MAX` anchors whose iteration is known to be cheap: for
  β < 1 it ends within `iterations_needed(β)` sweeps (‖ΔV‖∞ shrinks by β a sweep from at most
  1), and a group is iterated where that many sweeps over its entries are at most
  `ITER_WORK_MAX` updates (`iterated_groups`). LU's cost cannot be told in advance: a
  12,000-anchor group of random transitions took 13 s to factorise against 0.1 s iterated.

I − βM is a nonsingular M-matrix (every anchor reaches a boundary under the empirical
chain), so all three are stable.
"""

from __future__ import annotations

import numpy as np

from ..graph import FAILURE, SUCCESS
from .xp import asarray_like, namespace

__all__ = [
    "solve_closure",
    "graph_entries",
    "sparse_solve",
    "mean_backup_values",
    "successor_values",
    "DENSE_MAX",
    "CHUNK_BYTES",
    "SPARSE_LU_MAX",
    "LU_ALWAYS_MAX",
    "ITER_WORK_MAX",
    "ITER_TOL",
    "iterations_needed",
    "iterated_groups",
]

#: Largest group (anchors) solved densely by the reference; larger groups go to sparse LU.
DENSE_MAX = 256
#: Largest dense block of padded matrices allocated at once (bytes).
CHUNK_BYTES = 64 << 20
#: Largest group (anchors) factorised by sparse LU; larger groups are iterated to `ITER_TOL`.
SPARSE_LU_MAX = 20_000
#: Proven bound on the error of an iterated group's values (∞-norm).
ITER_TOL = 1e-13
#: Groups of at most this many anchors are always factorised (fast whatever their graph: a
#: 1,800-anchor group of random transitions factorises in 0.05 s).
LU_ALWAYS_MAX = 2_000
#: Entry updates (sweeps × the group's entries and anchors) an iterated group may need at most.
ITER_WORK_MAX = 200_000_000


def iterations_needed(beta: float) -> float:
    """Sweeps of V ← βMV + b from V = b after which β/(1 − β)·‖ΔV‖∞ ≤ `ITER_TOL` is certain
    (‖ΔV‖∞ ≤ β^k after k sweeps: ‖b‖∞ ≤ β, rows of M sum to ≤ 1); infinite for β = 1."""
    if not beta < 1.0:
        return float("inf")
    if beta <= 0.0:
        return 1.0
    return float(np.ceil(np.log(ITER_TOL * (1.0 - beta) / beta) / np.log(beta))) + 1.0


def iterated_groups(n_group: np.ndarray, e_group_count: np.ndarray, beta: float) -> np.ndarray:
    """Which groups ``[G]`` the fixed-point iteration solves (the rest are factorised): those
    over `SPARSE_LU_MAX` anchors, and those over `LU_ALWAYS_MAX` whose iteration needs at most
    `ITER_WORK_MAX` updates. ``e_group_count``: each group's inner entries."""
    n_group = np.asarray(n_group, dtype=np.float64)
    work = iterations_needed(beta) * (np.asarray(e_group_count, dtype=np.float64) + n_group)
    return (n_group > SPARSE_LU_MAX) | ((n_group > LU_ALWAYS_MAX) & (work <= ITER_WORK_MAX))


def graph_entries(graph):
    """(source node, successor, weight N(s,a,x)/N(s)) of each distinct edge ``[E]``."""
    src = graph.pair_node[graph.edge_pair]
    return src, graph.edge_next, graph.edge_count / graph.node_visits[src].astype(np.float64)


def size_class(n: np.ndarray) -> np.ndarray:
    """Padded size classes: powers of two from 8 up (a class wastes < 2× per side)."""
    return np.maximum(8, 1 << np.ceil(np.log2(np.maximum(n, 1))).astype(np.int64))


def solve_closure(
    src: np.ndarray,
    nxt: np.ndarray,
    w: np.ndarray,
    group_node_offsets: np.ndarray,
    beta: float,
    *,
    dense_max: int = DENSE_MAX,
) -> tuple[np.ndarray, float]:
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
    b = beta * np.bincount(src[succ], weights=w[succ], minlength=N)  # Eq. 8: b(s)
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
    for m in sorted(set(size[dense].tolist())):  # not np.unique: it imports numpy.ma (15 ms)
        groups = np.flatnonzero(size == m)
        slot_of = np.full(len(n_group), -1, dtype=np.int64)
        slot_of[groups] = np.arange(len(groups))
        e_sel = np.flatnonzero(slot_of[e_group] >= 0)
        e_slot = slot_of[e_group[e_sel]]  # increasing: entries are by group
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
            A = (
                np.bincount(flat, weights=-beta * i_w[es], minlength=k * m * m)
                .astype(np.float64, copy=False)
                .reshape(k, m, m)
            )
            A[:, np.arange(m), np.arange(m)] += 1.0
            rhs = np.zeros((k, m))
            rows, cols = n_slot[na:nb] - c0, local[ns]
            rhs[rows, cols] = b[ns]
            sol = np.linalg.solve(A, rhs[..., None])[..., 0]  # Eq. 9: one solve per class
            V[ns] = sol[rows, cols]
    large = ~dense & (n_group > 0)
    if large.any():
        iterate = iterated_groups(n_group, np.bincount(e_group, minlength=len(n_group)), beta)
        V = sparse_solve(large[node_group], i_src, i_dst, i_w, b, beta, V, iterate=iterate[node_group])
    MV = np.bincount(i_src, weights=i_w * V[i_dst], minlength=N)
    return V, float(np.max(np.abs(V - beta * MV - b)))


def sparse_solve(node_large: np.ndarray, i_src, i_dst, i_w, b, beta, V, iterate=None):
    """The block-diagonal system of the nodes in ``node_large`` ``[N]``: sparse LU, or the
    bounded fixed-point iteration for the nodes in ``iterate`` ``[N]`` (whole groups)."""
    import scipy.sparse as sp

    iterate = np.zeros_like(node_large) if iterate is None else iterate
    for mask, solver in ((node_large & ~iterate, _lu), (node_large & iterate, _iterate)):
        nodes = np.flatnonzero(mask)
        if nodes.size == 0:
            continue
        pos = np.full(mask.shape[0], -1, dtype=np.int64)
        pos[nodes] = np.arange(len(nodes))
        sel = mask[i_src]
        n = len(nodes)
        M = sp.csr_matrix((i_w[sel], (pos[i_src[sel]], pos[i_dst[sel]])), shape=(n, n))  # sums repeats
        V[nodes] = solver(M, b[nodes], beta)
    return V


def _lu(M, rhs, beta):
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    return splu((sp.identity(M.shape[0], format="csc") - beta * M).tocsc()).solve(rhs)


def _iterate(M, rhs, beta, max_iter: int = 1_000_000):
    """V ← βMV + b from V = b until β/(1 − β)·‖ΔV‖∞ ≤ `ITER_TOL` (rows of M sum to ≤ 1, so
    that bounds ‖V − V*‖∞); for β = 1 the measured contraction of ‖ΔV‖ takes β's place."""
    M = (beta * M).tocsr()
    V = rhs.copy()
    prev = np.inf
    rates: list[float] = []
    for _ in range(max_iter):
        nxt = M @ V + rhs
        d = float(np.max(np.abs(nxt - V))) if V.size else 0.0
        V = nxt
        if d == 0.0:
            break
        rates = (rates + [d / prev])[-20:]
        prev = d
        rho = beta if beta < 1.0 else (max(rates) if len(rates) == 20 else 1.0)
        if rho < 1.0 and d * rho / (1.0 - rho) <= ITER_TOL:
            break
    return V


def mean_backup_values(graph, gamma: float) -> tuple[np.ndarray, float]:
    """V over all anchor nodes ``[N]``: the fixed point of the empirical mean backup.

        V(u) = γ · Σ_a π̂(a|u) Σ_v P̂(v|u,a) V(v),   V(SUCCESS) = 1, V(FAILURE) = 0

    π̂·P̂ = N(u,a,v)/N(u) from raw edge counts (GRAFT §4, Gated-BEPO §5). Solved with one
    direct solve (I − γM)V = b per group (`solve_closure`), the limit of GRAFT's Gauss–Seidel
    iteration.

    Returns:
        ``(V [N], residual)`` with residual = max ‖(I − γM)V − b‖∞ over groups.
    """
    return solve_closure(*graph_entries(graph), graph.group_node_offsets, gamma)


def successor_values(graph, node_value):
    """V(s_{t+1}) per step ``[S]`` with V(SUCCESS) = 1 and V(FAILURE) = 0 (``node_value`` a
    numpy array or a tensor: the result is in its library, on its device)."""
    xp = namespace(node_value)
    nxt = asarray_like(graph.step_next, node_value)
    return xp.where(
        nxt == SUCCESS, 1.0, xp.where(nxt == FAILURE, 0.0, node_value[xp.where(nxt >= 0, nxt, 0)])
    )
