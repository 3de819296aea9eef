"""No per-step (or per-anchor) recomputation of a whole-batch array: the work the estimators
and the step views do per step stays constant as a group grows.

`RolloutBatch.step_group`, ``step_pos``, ``traj_len`` and ``trajectories`` each build an
array (or a frame) over the whole batch on every access; read once per step, they make a view
quadratic in the group's steps (a 60k-step group's step table took seconds, IAPO 18 s on 128k
steps; TRCA read one per rollout). The same code runs here on two batches, the second with three
times the groups, four times the rollouts and each four times longer, counting those accesses: the counts must not grow
with the rollouts' number or length. An error
message's location (`step_location`, two frame lookups) is built only for a step that fails.
"""

from __future__ import annotations

import numpy as np
import pytest

import crbc_viz.estimators.iapo as iapo_mod
import crbc_viz.estimators.trca as trca_mod
import crbc_viz.ops.signals as signals_mod
from crbc_viz import build_graph, score
from crbc_viz.analysis.agreement import agreement_by_group
from crbc_viz.analysis.depth import depth_family
from crbc_viz.analysis.matching import group_matching, matching_summary
from crbc_viz.analysis.summary import batch_summary, group_table
from crbc_viz.data import RolloutBatch
from crbc_viz.estimators import registry
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from crbc_viz.teaching_rows import batch_from_rows
from crbc_viz.views.graph_view import graph_drawing
from crbc_viz.views.learn_tables import combination_steps
from crbc_viz.views.share import step_table
from crbc_viz.views.trajectories import step_frame
from crbc_viz.views.why import edge_explanation
from strategies import with_signals  # noqa: F401

WHOLE_BATCH = ("step_group", "step_pos", "traj_len", "trajectories")


def _graph(groups: int, rollouts: int, rollout_len: int):
    b = random_mdp_batch(
        groups, rollouts, rollout_len, num_states=rollout_len * 4, p_fail=0.0, p_progress=0.05, seed=3
    )
    rows = with_signals(batch_to_rows(b))
    last = {}
    for i, r in enumerate(rows):
        last[r["group_id"], r["traj_id"]] = i
    won = {k for j, k in enumerate(sorted(last)) if j % 2 == 0}  # every other rollout succeeds
    for i, r in enumerate(rows):
        key = (r["group_id"], r["traj_id"])
        r["success"] = key in won
        if key in won and last[key] == i:
            r.update(reward=1.0, done=True)
    return build_graph(batch_from_rows(rows))


@pytest.fixture
def counted(monkeypatch):
    """Counts of the whole-batch properties' accesses and of `step_location`'s calls."""
    counts = dict.fromkeys((*WHOLE_BATCH, "step_location"), 0)
    for name in WHOLE_BATCH:
        prop = getattr(RolloutBatch, name)

        def get(self, _f=prop.fget, _n=name):
            counts[_n] += 1
            return _f(self)

        monkeypatch.setattr(RolloutBatch, name, property(get))
    where = signals_mod.step_location

    def location(graph, s):
        counts["step_location"] += 1
        return where(graph, s)

    for mod in (signals_mod, iapo_mod, trca_mod):
        monkeypatch.setattr(mod, "step_location", location)
    return counts


def _work(graph) -> dict:
    """Every estimator's reference kernel, the batch tables and the per-step views on ``graph``."""
    results = {name: score(graph, name, backend="numpy") for name in registry.names()}
    crbc = results["crbc"]
    b = graph.batch
    agreement_by_group(b.step_group, crbc.credit, results["gigpo"].credit, b.num_groups)
    batch_summary(graph), group_table(graph), matching_summary(graph, {}), group_matching(graph)
    depth_family(graph, 0.98, 3)
    step_frame(graph, results, group=0)
    step_table(graph, results)
    combination_steps(graph, crbc, None, 1.0)
    graph_drawing(graph, crbc, max_nodes=40, estimator="crbc")
    edge = f"a->b#{int(np.argmax(graph.edge_count))}"
    for r in results.values():  # the why panel of every estimator (its own or the generic one)
        edge_explanation(graph, r, edge)
    return results


def test_whole_batch_arrays_are_not_rebuilt_per_step(counted):
    small, large = _graph(2, 4, 25), _graph(6, 16, 100)
    assert large.batch.num_steps >= 10 * small.batch.num_steps  # the rollouts ran their length
    assert large.num_nodes >= 2 * small.num_nodes
    counted.update(dict.fromkeys(counted, 0))
    _work(small)
    at_small = dict(counted)
    counted.update(dict.fromkeys(counted, 0))
    _work(large)
    assert counted == at_small, (
        f"{small.batch.num_steps} steps: {at_small}; {large.batch.num_steps}: {counted}"
    )
    assert counted["step_location"] == 0  # no error, so no location was built
