"""The torch rows of the vectorised core estimators `grpo` and `shortest_path`, so every core
estimator runs on CUDA too. Each is the numpy reference's own function run on the graph's
tensors (`array_kernel`); what is written here is only what differs on a device: the reverse
BFS of `shortest_path`, one hop per pass over the edge list, all groups at once."""

from __future__ import annotations

from ...estimators.grpo import _grpo
from ...estimators.registry import implements
from ...estimators.shortest_path import _shortest_path
from ...graph import SUCCESS, AnchorGraph
from .arrays import array_kernel

__all__ = ["distance_to_success_torch"]

implements("grpo", "torch")(array_kernel(_grpo))


def distance_to_success_torch(graph: AnchorGraph, to):
    """`crbc_viz.estimators.shortest_path.distance_to_success` as tensors on ``to.device``:
    ``(d [N], d_unreachable [G], reached [G])`` by reverse BFS over the edge list."""
    import torch

    dev = to.device
    N, G = graph.num_nodes, graph.num_groups
    src = to(graph.pair_node[graph.edge_pair])
    dst = to(graph.edge_next)
    node_group = to(graph.node_group)
    d = torch.full((N,), -1, dtype=torch.int64, device=dev)
    frontier = torch.zeros(N, dtype=torch.bool, device=dev)
    frontier[src[dst == SUCCESS]] = True
    d[frontier] = 1
    inner = dst >= 0
    i_src, i_dst = src[inner], dst[inner]
    hop = 1
    while bool(frontier.any()):
        hop += 1
        cand = torch.zeros(N, dtype=torch.bool, device=dev)
        cand[i_src[frontier[i_dst]]] = True
        frontier = cand & (d < 0)
        d[frontier] = hop
    reached = torch.zeros(G, dtype=torch.bool, device=dev)
    reached[node_group[d > 0]] = True
    d_max = torch.zeros(G, dtype=torch.int64, device=dev).scatter_reduce(
        0, node_group, d.clamp(min=0), reduce="amax", include_self=True
    )
    return torch.where(d < 0, d_max[node_group] + 1, d), d_max + 1, reached


def _shortest_path_on_device(graph, params, *, to):
    return _shortest_path(graph, params, to=to, distances=distance_to_success_torch)


implements("shortest_path", "torch")(array_kernel(_shortest_path_on_device, _shortest_path))
