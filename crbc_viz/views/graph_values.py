"""The numbers a graph drawing shows: V per node, (Q, credit) per (anchor, action) pair, mean
credit per edge, the colour range, a rollout's path, which anchors to draw, and which steps a
time limit ended. Pure numpy on an `AnchorGraph` and a `CreditResult`."""

from __future__ import annotations

import numpy as np

from ..graph import AnchorGraph

__all__ = [
    "node_values",
    "pair_values",
    "edge_credit",
    "value_range",
    "trajectory_path",
    "select_nodes",
    "truncated_steps",
    "EdgeCredit",
    "value_meaning",
]


def _segment_mean(index: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    s = np.bincount(index[ok], weights=v[ok], minlength=size)
    c = np.bincount(index[ok], minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / np.maximum(c, 1), np.nan)


def node_values(graph: AnchorGraph, result) -> np.ndarray:
    """V per node ``[N]``: the estimator's ``node_value`` where it defines one, else the mean of
    its per-step ``value`` over the node's visits (NaN where undefined)."""
    if result is None:
        return np.full(graph.num_nodes, np.nan)
    if result.node_value is not None:
        return np.asarray(result.node_value, dtype=np.float64)
    return _segment_mean(graph.step_node, result.value, graph.num_nodes)


def pair_values(graph: AnchorGraph, result) -> tuple[np.ndarray, np.ndarray]:
    """(Q, credit) per (node, action) pair ``[P]`` (means over the pair's occurrences where the
    estimator has no per-pair array)."""
    P = graph.pair_node.shape[0]
    if result is None:
        return np.full(P, np.nan), np.full(P, np.nan)
    q = (
        np.asarray(result.pair_q, dtype=np.float64)
        if result.pair_q is not None
        else _segment_mean(graph.step_pair, result.q_value, P)
    )
    c = (
        np.asarray(result.pair_credit, dtype=np.float64)
        if result.pair_credit is not None
        else _segment_mean(graph.step_pair, result.credit, P)
    )
    return q, c


def edge_credit(graph: AnchorGraph, result) -> np.ndarray:
    """Mean step credit over each edge's occurrences ``[E]`` (NaN without a result)."""
    E = graph.edge_pair.shape[0]
    if result is None:
        return np.full(E, np.nan)
    return _segment_mean(graph.step_edge, result.credit, E)


def value_range(values: np.ndarray) -> tuple[float, float]:
    """Colour range for node values: [0, 1] when they all lie there, else their min..max."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return 0.0, 1.0
    lo, hi = float(v.min()), float(v.max())
    if lo >= 0.0 and hi <= 1.0:
        return 0.0, 1.0
    return lo, hi if hi > lo else lo + 1.0


def trajectory_path(graph: AnchorGraph, traj: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, nodes, edges) of trajectory ``traj`` (global index), in step order."""
    lo, hi = int(graph.batch.traj_offsets[traj]), int(graph.batch.traj_offsets[traj + 1])
    steps = np.arange(lo, hi)
    return steps, graph.step_node[steps], graph.step_edge[steps]


def select_nodes(graph: AnchorGraph, g: int = 0, max_nodes: int = 500, keep=()) -> np.ndarray:
    """Group ``g``'s anchors to draw: all when at most ``max_nodes``, else the ``max_nodes``
    most-visited (ties by id) plus every node in ``keep`` (e.g. a highlighted path)."""
    sl = graph.group_slice(g)
    ids = np.arange(sl.start, sl.stop)
    if ids.size <= max_nodes:
        return ids
    order = np.lexsort((ids, -graph.node_visits[ids]))
    top = ids[order[:max_nodes]]
    return np.unique(np.concatenate([top, np.asarray(list(keep), dtype=np.int64)]))


def truncated_steps(graph: AnchorGraph) -> np.ndarray:
    """Steps ``[S]`` after which the rollout ran out of steps (its last step, logged
    ``done=false``, not a success): their edge to FAILURE is a time limit, not an action's."""
    b = graph.batch
    out = np.zeros(b.num_steps, dtype=bool)
    last = b.traj_offsets[1:] - 1
    cut = np.asarray(b.traj_truncated, dtype=bool) & ~np.asarray(b.traj_success, dtype=bool)
    cut &= b.traj_offsets[1:] > b.traj_offsets[:-1]
    out[last[cut]] = True
    return out


class EdgeCredit:
    """Sums of the finite step credits per edge, apart for time-limit steps."""

    def __init__(self, graph: AnchorGraph, result, cut: np.ndarray):
        E = graph.edge_pair.shape[0]
        c = np.full(graph.batch.num_steps, np.nan) if result is None else np.asarray(result.credit, float)
        ok = np.isfinite(c)
        self.step_credit = c
        self.sum = {}
        self.num = {}
        for part, mask in (("act", ~cut), ("time", cut)):
            m = ok & mask
            self.sum[part] = np.bincount(graph.step_edge[m], weights=c[m], minlength=E)
            self.num[part] = np.bincount(graph.step_edge[m], minlength=E)
        self.count = {
            "act": np.bincount(graph.step_edge[~cut], minlength=E),
            "time": np.bincount(graph.step_edge[cut], minlength=E),
        }


def value_meaning(estimator: str | None) -> tuple[str, bool, str, str]:
    """(legend title, higher is better, SUCCESS label, FAILURE label) for ``estimator``: its
    spec's ``value_meaning`` (a state value V(s) where the spec says nothing)."""
    from ..estimators import registry

    spec = registry.get(estimator) if estimator in registry.names() else None
    return (spec and spec.value_meaning) or ("V(s)", True, "SUCCESS", "FAILURE")
