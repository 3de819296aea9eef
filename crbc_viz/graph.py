"""The merged anchor-state graph of every group, as whole-batch arrays.

Per group, anchors are nodes; two absorbing boundaries, SUCCESS (value 1) and FAILURE
(value 0), are shared sentinels: a step's successor ``step_next`` is the node id of the
next anchor, or ``SUCCESS`` (-1) / ``FAILURE`` (-2) after a trajectory's last step
(truncation is failure). Every step is an occurrence of an edge (s, a, x).

Ids are deterministic: nodes in first-occurrence order over the batch's steps (so each
group's nodes are contiguous), (node, action) pairs sorted by node then by the action's
first occurrence, edges sorted by pair then successor.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ._extras import require
from .data import RolloutBatch

__all__ = ["AnchorGraph", "build_graph", "lazy_graph", "action_ids", "SUCCESS", "FAILURE"]

SUCCESS = -1
FAILURE = -2


@dataclass(frozen=True, eq=False)
class AnchorGraph:
    """Anchor-merged graph of a `RolloutBatch`.

    Axes: ``S`` steps, ``T`` trajectories, ``G`` groups, ``N`` anchor nodes, ``P``
    (node, action) pairs, ``E`` distinct edges (s, a, x).

    Attributes:
        batch: the rollouts.
        step_node: anchor node of each step ``[S]``.
        step_next: successor node ``[S]``; ``SUCCESS``/``FAILURE`` after the last step.
        step_action: global action id ``[S]`` (index into ``action_names``).
        step_pair: (node, action) pair of each step ``[S]``.
        step_edge: edge of each step ``[S]``.
        node_group: group of each node ``[N]``.
        group_node_offsets: ``[G + 1]`` node offsets (a group's nodes are contiguous).
        node_first_step: first step visiting each node ``[N]``.
        pair_node, pair_action: ``[P]``; pairs sorted by node (``node_pair_offsets [N + 1]``).
        edge_pair, edge_next, edge_count: ``[E]``; edges sorted by pair then successor.
        action_names: the action strings ``[A]``; a step that logs no action has its
            transition as its action (`crbc_viz.io.actions`), an id of its own.
    """

    batch: RolloutBatch
    step_node: np.ndarray
    step_next: np.ndarray
    step_action: np.ndarray
    step_pair: np.ndarray
    step_edge: np.ndarray
    node_group: np.ndarray
    group_node_offsets: np.ndarray
    node_first_step: np.ndarray
    pair_node: np.ndarray
    pair_action: np.ndarray
    node_pair_offsets: np.ndarray
    edge_pair: np.ndarray
    edge_next: np.ndarray
    edge_count: np.ndarray
    action_names: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.node_group.shape[0])

    @property
    def num_groups(self) -> int:
        return int(self.group_node_offsets.shape[0] - 1)

    @cached_property
    def node_visits(self) -> np.ndarray:
        """N(s): visits of each node ``[N]`` (repeated visits count)."""
        return np.bincount(self.step_node, minlength=self.num_nodes)

    @cached_property
    def pair_count(self) -> np.ndarray:
        """N(s, a) ``[P]``."""
        return np.bincount(self.step_pair, minlength=self.pair_node.shape[0])

    @cached_property
    def node_num_actions(self) -> np.ndarray:
        """Distinct observed actions at each node ``[N]``."""
        return np.diff(self.node_pair_offsets)

    @cached_property
    def node_anchor_key(self) -> np.ndarray:
        return self.batch.steps["anchor_key"].to_numpy(dtype=object)[self.node_first_step]

    @cached_property
    def node_anchor_obs(self) -> np.ndarray:
        """The raw anchor of each node, for display (the anchor key where none was logged)."""
        import pandas as pd

        if "anchor_obs" in self.batch.steps:
            obs = self.batch.steps["anchor_obs"].to_numpy(dtype=object)[self.node_first_step]
            return np.where(pd.isna(obs), self.node_anchor_key, obs)
        return self.node_anchor_key

    def group_slice(self, g: int) -> slice:
        """Nodes of group ``g``."""
        return slice(int(self.group_node_offsets[g]), int(self.group_node_offsets[g + 1]))

    def shared_step_mask(self) -> np.ndarray:
        """Steps whose anchor is also visited by another trajectory of the group ``[S]``."""
        pairs = np.unique(np.stack([self.step_node, self.batch.step_traj], axis=1), axis=0)
        trajs_per_node = np.bincount(pairs[:, 0], minlength=self.num_nodes)
        return trajs_per_node[self.step_node] >= 2

    def to_networkx(self, g: int):
        """Group ``g`` as a ``networkx.MultiDiGraph``: one edge per distinct (s, a, x) with
        its ``count``; nodes are anchor keys plus ``"SUCCESS"`` and ``"FAILURE"``."""
        nx = require("networkx", "AnchorGraph.to_networkx")

        out = nx.MultiDiGraph(group=self.batch.group_label(g))
        sl = self.group_slice(g)
        keys = self.node_anchor_key
        for n in range(sl.start, sl.stop):
            out.add_node(
                keys[n],
                node_id=n,
                visits=int(self.node_visits[n]),
                anchor=str(self.node_anchor_obs[n]),
                boundary=False,
            )
        out.add_node("SUCCESS", boundary=True, value=1.0)
        out.add_node("FAILURE", boundary=True, value=0.0)
        p_lo, p_hi = self.node_pair_offsets[sl.start], self.node_pair_offsets[sl.stop]
        for e in np.flatnonzero((self.edge_pair >= p_lo) & (self.edge_pair < p_hi)):
            p = self.edge_pair[e]
            x = self.edge_next[e]
            dst = "SUCCESS" if x == SUCCESS else "FAILURE" if x == FAILURE else keys[x]
            out.add_edge(
                keys[self.pair_node[p]],
                dst,
                key=int(e),
                action=str(self.action_names[self.pair_action[p]]),
                count=int(self.edge_count[e]),
            )
        return out


def _first_occurrence_ids(keys_sorted_order: np.ndarray, is_new: np.ndarray, n: int):
    """Ids in first-occurrence order from a sort order and its run starts."""
    run_id_sorted = np.cumsum(is_new) - 1
    ids = np.empty(n, dtype=np.int64)
    ids[keys_sorted_order] = run_id_sorted
    num = int(run_id_sorted[-1]) + 1 if n else 0
    first = np.full(num, n, dtype=np.int64)
    np.minimum.at(first, ids, np.arange(n))
    rank = np.empty(num, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(num)
    return rank[ids], np.sort(first)


def _logged_actions(batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray]:
    """``(codes [S], names [K])`` of the logged actions (compared as text), -1 where a step
    logs none (the column absent, or null on its row)."""
    S = batch.num_steps
    if not batch.has_step_column("action"):
        return np.full(S, -1, dtype=np.int64), np.zeros(0, dtype=object)
    col = batch.plain_column("action")
    if col is not None:  # rows still in Arrow (the columnar lane, the adapters, the store): nulls allowed
        import pyarrow as pa

        from ._arrow import call, numbers

        if pa.types.is_null(col.type):  # no step logs one
            return np.full(S, -1, dtype=np.int64), np.zeros(0, dtype=object)
        col = col.combine_chunks()
        enc = col if pa.types.is_dictionary(col.type) else call("dictionary_encode", col)
        codes = numbers(enc.indices).astype(np.int64)
        if enc.indices.null_count:
            codes = np.where(numbers(call("is_valid", enc.indices)), codes, -1)
        names = np.asarray([str(v) for v in enc.dictionary.to_pylist()], dtype=object)
        return codes, names
    import pandas as pd

    col = batch.steps["action"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        names = np.asarray([str(v) for v in col.cat.categories], dtype=object)
        return col.cat.codes.to_numpy().astype(np.int64), names
    if pd.api.types.infer_dtype(col, skipna=True) not in ("string", "empty"):
        col = col.map(str, na_action="ignore")  # compared as text: 1 and "1" are one action
    codes, uniques = pd.factorize(col.to_numpy(dtype=object), sort=False)  # null: -1
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def _factorize_actions(batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray]:
    """Action ids in first-occurrence order: the logged action, or for a step that logs none
    its transition (`crbc_viz.io.actions`: the next step's anchor, or SUCCESS / FAILURE)."""
    from .io.actions import step_action_codes

    codes, names = _logged_actions(batch)
    return step_action_codes(codes, names, batch.step_anchor_hash, batch.traj_offsets, batch.traj_success)


_ACTION_IDS: weakref.WeakKeyDictionary[RolloutBatch, tuple] = weakref.WeakKeyDictionary()


def action_ids(batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray]:
    """``(step_action [S], action_names [A])`` of ``batch``, computed once per batch (the
    graph and the compiled kernels share them)."""
    got = _ACTION_IDS.get(batch)
    if got is None:
        got = _factorize_actions(batch)
        _ACTION_IDS[batch] = got
    return got


_GRAPH_FIELDS = tuple(f.name for f in dataclasses.fields(AnchorGraph) if f.name != "batch")


class _LazyAnchorGraph(AnchorGraph):
    """An `AnchorGraph` whose arrays are built on first use: a kernel that merges the
    anchors itself (the compiled CRBC engine) never pays for `build_graph`, and the result's
    ``graph`` still answers every question about the merge when asked."""

    def __init__(self, batch: RolloutBatch):  # noqa: D107 (no dataclass __init__: fields stay unset)
        object.__setattr__(self, "batch", batch)

    def __getattr__(self, name):
        if name in _GRAPH_FIELDS and "step_node" not in self.__dict__:
            full = build_graph(self.__dict__["batch"])
            self.__dict__.update({f: getattr(full, f) for f in _GRAPH_FIELDS})
            return self.__dict__[name]
        raise AttributeError(name)

    @property
    def built(self) -> bool:
        return "step_node" in self.__dict__

    def __getstate__(self):
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __repr__(self):
        return f"AnchorGraph(lazy, {self.batch.num_steps} steps, built={self.built})"


def lazy_graph(data: RolloutBatch | AnchorGraph) -> AnchorGraph:
    """``data`` itself when it is a graph, else a graph of the batch built on first use."""
    return data if isinstance(data, AnchorGraph) else _LazyAnchorGraph(data)


def is_built(graph: AnchorGraph) -> bool:
    """Whether ``graph``'s arrays exist already (a lazy graph not yet touched: False)."""
    return not isinstance(graph, _LazyAnchorGraph) or graph.built


def build_graph(batch: RolloutBatch) -> AnchorGraph:
    """Merge each group's steps at their anchors (exact key match within the group)."""
    S = batch.num_steps
    step_group = batch.step_group
    h = batch.step_anchor_hash
    # Nodes: unique (group, anchor hash), first-occurrence order.
    order = np.lexsort((h, step_group))
    gs, hs = step_group[order], h[order]
    is_new = np.r_[True, (gs[1:] != gs[:-1]) | (hs[1:] != hs[:-1])] if S else np.zeros(0, bool)
    step_node, node_first_step = _first_occurrence_ids(order, is_new, S)
    N = node_first_step.shape[0]
    node_group = step_group[node_first_step]
    group_node_offsets = np.searchsorted(node_group, np.arange(batch.num_groups + 1)).astype(np.int64)

    # Actions and (node, action) pairs.
    step_action, action_names = action_ids(batch)
    A = max(len(action_names), 1)
    pair_key = step_node * A + step_action
    pair_keys, step_pair = np.unique(pair_key, return_inverse=True)
    pair_node, pair_action = pair_keys // A, pair_keys % A
    node_pair_offsets = np.searchsorted(pair_node, np.arange(N + 1)).astype(np.int64)

    # Successors: the next step's node, or a boundary after a trajectory's last step.
    step_next = np.empty(S, dtype=np.int64)
    step_next[:-1] = step_node[1:] if S else step_next[:-1]
    last = batch.traj_offsets[1:] - 1
    step_next[last] = np.where(batch.traj_success, SUCCESS, FAILURE)
    edge_key = step_pair * (N + 2) + (step_next + 2)
    edge_keys, step_edge, edge_count = np.unique(edge_key, return_inverse=True, return_counts=True)
    edge_pair, edge_next = edge_keys // (N + 2), edge_keys % (N + 2) - 2
    return AnchorGraph(
        batch=batch,
        step_node=step_node,
        step_next=step_next,
        step_action=step_action,
        step_pair=step_pair.astype(np.int64),
        step_edge=step_edge.astype(np.int64),
        node_group=node_group,
        group_node_offsets=group_node_offsets,
        node_first_step=node_first_step,
        pair_node=pair_node,
        pair_action=pair_action,
        node_pair_offsets=node_pair_offsets,
        edge_pair=edge_pair,
        edge_next=edge_next,
        edge_count=edge_count.astype(np.int64),
        action_names=np.asarray(action_names, dtype=object),
    )
