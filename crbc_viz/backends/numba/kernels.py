"""The numba rows of the kernel table. Importing this module does not import numba: each
kernel loads the compiled engine (`crbc_viz.backends.numba.crbc`, `...numba.graph`) when it
runs. Every kernel takes the already-checked params object."""

from __future__ import annotations

import dataclasses
import math

from ...estimators.registry import implements

__all__ = ["crbc_numba", "visit_local_numba", "graft_numba", "gated_bepo_numba"]


def _family(name: str, graph, params, depth: float):
    """The compiled engine merges the anchors itself from the batch's step arrays: the
    graph is not built here, and the per-node / per-pair arrays (which need its ids) are
    filled from the per-step output only when read."""
    from ...graph import action_ids
    from ...ops.checks import check_step_arrays
    from ...result import deferred_result, scatter_steps
    from .crbc import Steps, run_checked

    b = graph.batch
    actions, names = action_ids(b)
    steps = check_step_arrays(  # O(T): the action ids are the batch's codes, no O(S) range scan
        b.step_anchor_hash,
        actions,
        b.traj_offsets,
        b.group_traj_offsets,
        b.traj_success,
        caller=f"score(..., '{name}')",
        action_count=len(names),
    )
    out = run_checked(Steps(*steps), params, depth)  # params: checked by score
    n = out["num_nodes"]
    diagnostics = {"gated_fraction": out["gated_nodes"] / n if n else 0.0}
    if math.isinf(depth):
        diagnostics = {"closure_residual": out["closure_residual"], **diagnostics}

    return deferred_result(
        scatter_steps(graph, out["value"], out["q_value"], out["credit"]),
        estimator=name,
        params=params,
        graph=graph,
        value=out["value"],
        q_value=out["q_value"],
        credit=out["credit"],
        advantage=out["advantage"],
        diagnostics=diagnostics,
        backend="numba",
    )


@implements("crbc", "numba")
def crbc_numba(graph, params, *, device: str = "cpu"):
    """`crbc_viz.estimators.crbc.crbc` fused per group by the compiled engine."""
    return _family("crbc", graph, params, params.depth)


@implements("visit_local", "numba")
def visit_local_numba(graph, params, *, device: str = "cpu"):
    """`crbc_viz.estimators.crbc.visit_local` (depth 0) by the compiled engine."""
    return _family("visit_local", graph, params, 0)


def _fields(params) -> dict:
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}


@implements("graft", "numba")
def graft_numba(graph, params, *, device: str = "cpu"):
    """GRAFT with the compiled closure values and Graph-GAE frontier walk."""
    from ...estimators.graft import _graft
    from .graph import graph_gae_bonus_numba, mean_backup_values_numba

    r = _graft(graph, mean_backup_values_numba, graph_gae_bonus_numba, **_fields(params))
    return dataclasses.replace(r, backend="numba")


@implements("gated_bepo", "numba")
def gated_bepo_numba(graph, params, *, device: str = "cpu"):
    """Gated-BEPO with the compiled closure values and discounted suffix sums."""
    from ...estimators.gated_bepo import _gated_bepo
    from .graph import discounted_suffix_sum_numba, mean_backup_values_numba

    r = _gated_bepo(graph, mean_backup_values_numba, discounted_suffix_sum_numba, **_fields(params))
    return dataclasses.replace(r, backend="numba")
