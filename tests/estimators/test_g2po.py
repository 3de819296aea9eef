"""G2PO (ESTIMATORS.md §16) against the authors' own code, a hand computation and its
properties."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from authors_code import batch_rows, check_sources, float64_torch, load, verl_arrays

from crbc_viz import build_graph, load_rollouts
from crbc_viz.errors import EstimatorInputError
from crbc_viz.estimators.g2po import g2po
from helpers import TOY

pytest.importorskip("torch")


def _graph(tmp_path, rows, name="b.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return build_graph(load_rollouts(path))


@pytest.fixture(scope="module")
def authors():
    check_sources()
    return load("g2po-b8ffaf5", "g2po/core_g2po.py", "authors_core_g2po")


def run_authors(mod, graph, *, mode, omega, penalty=0.1):
    """The trainer's sequence: compute_group_aggregation_values on the rollout batch, the
    invalid-action penalty on token_level_rewards (apply_invalid_action_penalty), then
    compute_g2po_outcome_advantage."""
    b = graph.batch
    uid, traj, obs, valid = verl_arrays(graph)
    ep = b.traj_return[b.step_traj].astype(np.float64)
    with float64_torch(mod) as torch:
        batch = SimpleNamespace(
            non_tensor_batch={"episode_rewards": ep, "anchor_obs": obs, "traj_uid": traj, "uid": uid},
            batch={"responses": torch.zeros(len(ep), 1)},
        )
        scores, group_idx, next_group_idx = mod.compute_group_aggregation_values(batch)
        tlr = torch.tensor(ep - penalty * (~valid), dtype=torch.float64)[:, None]
        adv, _ = mod.compute_g2po_outcome_advantage(
            token_level_rewards=tlr,
            step_rewards=scores,
            response_mask=torch.ones(len(ep), 1),
            index=uid,
            traj_index=traj,
            group_idx=group_idx,
            next_group_idx=next_group_idx,
            is_action_valid=valid,
            step_advantage_w=omega,
            mode=mode,
        )
    return scores, adv[:, 0].numpy()


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("omega", [1.0, 0.5])
@pytest.mark.parametrize("seed", [7, 8])
def test_equals_the_authors_code(tmp_path, authors, mode, omega, seed):
    g = _graph(tmp_path, batch_rows(seed))
    assert g.batch.traj_truncated.any() and (g.step_next == g.step_node).any()
    scores, want = run_authors(authors, g, mode=mode, omega=omega)
    r = g2po(g, mode=mode, omega=omega)
    np.testing.assert_allclose(r.value, scores, rtol=0, atol=1e-9)  # node values V(s_t)
    np.testing.assert_allclose(r.advantage, want, rtol=0, atol=1e-9)
    assert r.diagnostics["invalid_steps"] > 0


def test_toy_by_hand():
    """§14's toy group (R = 1 on success), mean_norm, no invalid actions (spec vector §14.16)."""
    g = build_graph(load_rollouts(TOY))
    r = g2po(g)
    # Visits (traj, t, T, R): s1 at (0,1,3,1) (1,1,3,0) (2,2,4,0) (3,3,5,1):
    v_s1 = (0.95**2 + 0.95**2) / 4
    # s2 at (0,2,3,1) (2,3,4,0) (3,4,5,1): γ¹ twice.
    v_s2 = (0.95 + 0.95) / 3
    # s4 at (2,1,4,0) (3,1,5,1) (3,2,5,1).
    v_s4 = (0.95**4 + 0.95**3) / 3
    v_s0 = (0.95**3 + 0.95**5) / 4
    np.testing.assert_allclose(r.node_value, [v_s0, v_s1, v_s2, 0.0, v_s4], rtol=0, atol=1e-12)
    # Step 0 of trajectory 0 (s0 → s1): the steps at s0 go to s1, s1, s4, s4.
    y = [v_s1, v_s1, v_s4, v_s4]
    a1 = v_s1 - np.mean(y)
    # Score gains of all 15 steps, in batch order.
    V = {"s0": v_s0, "s1": v_s1, "s2": v_s2, "s3": 0.0, "s4": v_s4, "+": 10.0, "-": 0.0}
    paths = [("s0 s1 s2 +"), ("s0 s1 s3 -"), ("s0 s4 s1 s2 -"), ("s0 s4 s4 s1 s2 +")]
    gains = [V[b] - V[a] for p in paths for a, b in zip(p.split()[:-1], p.split()[1:])]
    a2 = gains[0] - np.mean(gains)
    # Episode term over the 15 rows: R = 1 on 3 + 5 rows.
    a_e = 1.0 - 8 / 15
    assert r.advantage[0] == pytest.approx(a_e + a1 + a2, abs=1e-12)
    assert round(float(r.advantage[0]), 6) == -0.767484  # docs/spec_vectors.md §14.16


def test_permuting_trajectories_changes_nothing(tmp_path):
    rows = batch_rows(9)
    a = g2po(_graph(tmp_path, rows, "a.jsonl"))
    by_traj = {}
    for r in rows:
        by_traj.setdefault((r["group_id"], r["traj_id"]), []).append(r)
    shuffled = [r for k in reversed(list(by_traj)) for r in by_traj[k]]
    b = g2po(_graph(tmp_path, shuffled, "b.jsonl"))
    key = lambda res: res.to_frame().sort_values(["group_id", "traj_id", "step_idx"])["advantage"].to_numpy()  # noqa: E731
    np.testing.assert_allclose(key(a), key(b), rtol=0, atol=1e-12)


def test_group_terms_sum_to_zero(tmp_path):
    """A² is centred over the prompt group and A¹ over each node: both sum to 0 there."""
    g = _graph(tmp_path, batch_rows(7))
    r = g2po(g, omega=1.0)
    sums = np.bincount(g.batch.step_group, weights=r.credit)
    np.testing.assert_allclose(sums, 0.0, atol=1e-9)


def test_without_a_validity_column_no_penalty_applies(tmp_path):
    rows = batch_rows(7)
    g = _graph(tmp_path, rows, "a.jsonl")
    bare = _graph(tmp_path, [{k: v for k, v in r.items() if k != "is_action_valid"} for r in rows], "b.jsonl")
    a = g2po(g, invalid_penalty=0.0, episode_penalty=0.0)
    b = g2po(bare)
    np.testing.assert_allclose(a.advantage, b.advantage, rtol=0, atol=1e-12)
    assert not np.allclose(g2po(g).advantage, b.advantage)


def test_rejects_out_of_range_parameters():
    g = build_graph(load_rollouts(TOY))
    with pytest.raises(EstimatorInputError, match="'gamma' of 'g2po'"):
        g2po(g, gamma=1.5)
    with pytest.raises(EstimatorInputError, match="'mode' of 'g2po'"):
        g2po(g, mode="l2")
