"""Peer estimators (ESTIMATORS.md §2, §4–§12): the spec's hand-computed vectors (§14),
reductions / properties, numpy–torch parity on random graphs, and the registry.

Expected numbers are copied from ESTIMATORS.md §14, kept in docs/spec_vectors.md (and PGPO's
Table 4, §6.5), never recomputed with the implementation's own sub-steps.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

import crbc_viz
from crbc_viz import build_graph, load_rollouts, score
from crbc_viz.estimators import MissingSignalError, get, names, param_infos, registry

TOY = "sample_rollouts/toy/toy_group.jsonl"
SEARCH = "sample_rollouts/search/search_signals.jsonl"
#: The peers (after the family of four) with a torch row, from the registry.
GRAPH_WIDE = tuple(n for n in names()[4:] if "torch" in registry.backends(get(n)))
TOL = 1e-4


# ---------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def toy():
    return build_graph(load_rollouts(TOY))


def _batch(tmp_path, rows, name="b.jsonl"):
    path = tmp_path / name
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return load_rollouts(path)


def _traj(gid, tid, n, success, **per_step):
    """Rows of one trajectory; ``per_step`` maps a field to a list of n values."""
    rows = []
    for k in range(n):
        row = {
            "group_id": gid,
            "traj_id": tid,
            "step_idx": k,
            "anchor_obs": f"{tid}-{k}",
            "action": f"act{k}",
            "reward": 1.0 if (success and k == n - 1) else 0.0,
            "done": k == n - 1,
            "success": success,
        }
        for f, vals in per_step.items():
            row[f] = vals[k]
        rows.append(row)
    return rows


def _toy_steps(g, label):
    """Step indices of the toy trajectories in order, keyed 't1'..'t4'."""
    tid = g.batch.steps["traj_id"].to_numpy()
    return np.flatnonzero(tid == label)


def _pair_value(g, arr, anchor, action):
    obs = g.node_anchor_obs[g.step_node]
    act = g.action_names[g.step_action]
    idx = np.flatnonzero((obs == anchor) & (act == action))
    assert idx.size, (anchor, action)
    vals = arr[idx]
    assert np.ptp(vals) < 1e-12
    return float(vals[0])


def random_batch(tmp_path, seed, *, groups=4, name=None):
    """Random MDP per group: self-loops, back edges, success / failure, truncation."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(groups):
        n_states = int(rng.integers(2, 7))
        n_actions = int(rng.integers(1, 4))
        # next-state table: mostly random (self-loops and back edges included), some terminal
        nxt = rng.integers(0, n_states, size=(n_states, n_actions))
        term = rng.random((n_states, n_actions)) < 0.25
        win = rng.random((n_states, n_actions)) < 0.5
        for t in range(int(rng.integers(2, 7))):
            s = int(rng.integers(0, min(2, n_states)))
            max_len = int(rng.integers(1, 9))
            steps = []
            for k in range(max_len):
                a = int(rng.integers(0, n_actions))
                stochastic = rng.random() < 0.2
                steps.append((s, a))
                if term[s, a] and not stochastic:
                    outcome = bool(win[s, a])
                    done = True
                    break
                s = int(rng.integers(0, n_states)) if stochastic else int(nxt[s, a])
            else:
                outcome, done = False, False  # truncated: a failure
            for k, (s_k, a_k) in enumerate(steps):
                last = k == len(steps) - 1
                reward = float(rng.choice([0.0, 0.0, 0.3]))
                if last and outcome:
                    reward += 1.0
                rows.append(
                    {
                        "group_id": f"g{g}",
                        "traj_id": f"t{t}",
                        "step_idx": k,
                        "anchor_obs": f"state {s_k}",
                        "action": f"a{a_k}",
                        "reward": reward,
                        "done": bool(done and last),
                        "success": outcome,
                    }
                )
    return _batch(tmp_path, rows, name or f"rand{seed}.jsonl")


# ---------------------------------------------------------------- §14.3 GiGPO

GIGPO_AS_STD = {
    "t1": [0.9523, 0.8660, 0.5773],
    "t2": [-0.8638, -0.8660, 0.0],
    "t3": [-0.8638, -1.1536, -0.8660, -1.1547],
    "t4": [0.7752, 0.5324, 0.6211, 0.8660, 0.5773],
}
GIGPO_JOINT = {
    "t1": [1.8183, 1.7320, 1.4434],
    "t2": [-1.7298, -1.7320, -0.8660],
    "t3": [-1.7298, -2.0196, -1.7320, -2.0207],
    "t4": [1.6412, 1.3984, 1.4872, 1.7320, 1.4434],
}
GIGPO_AS_MEAN = {
    "t1": [0.4732, 0.4750, 0.3333],
    "t2": [-0.4293, -0.4750, 0.0],
    "t3": [-0.4293, -0.5866, -0.4750, -0.6667],
    "t4": [0.3853, 0.2707, 0.3159, 0.4750, 0.3333],
}


def test_gigpo_spec_vector_mean_std_norm(toy):
    r = score(toy, "gigpo", backend="numpy", gamma=0.95, mode="mean_std_norm", episode_stats="trajectory")
    for t in GIGPO_AS_STD:
        idx = _toy_steps(toy, t)
        np.testing.assert_allclose(r.credit[idx], GIGPO_AS_STD[t], atol=TOL)
        np.testing.assert_allclose(r.advantage[idx], GIGPO_JOINT[t], atol=TOL)


def test_gigpo_spec_vector_mean_norm(toy):
    r = score(toy, "gigpo", backend="numpy", gamma=0.95, mode="mean_norm")
    for t in GIGPO_AS_MEAN:
        np.testing.assert_allclose(r.credit[_toy_steps(toy, t)], GIGPO_AS_MEAN[t], atol=TOL)
    # mean_norm episode term with the code-default cross-step statistics (§14.2: mean 0.5333)
    idx = _toy_steps(toy, "t1")
    np.testing.assert_allclose(r.advantage[idx] - r.credit[idx], 1 - 0.5333, atol=TOL)


def test_gigpo_distinct_anchors_reduce_to_episode_term(tmp_path):
    rows = _traj("g", "a", 3, True) + _traj("g", "b", 2, False) + _traj("g", "c", 4, True)
    b = _batch(tmp_path, rows)
    for mode in ("mean_norm", "mean_std_norm"):
        r = score(b, "gigpo", backend="numpy", mode=mode, episode_stats="trajectory")
        ep = score(b, "grpo", backend="numpy", norm="mean" if mode == "mean_norm" else "std")
        np.testing.assert_allclose(r.credit, 0.0, atol=1e-12)
        np.testing.assert_allclose(r.advantage, ep.advantage, atol=1e-12)


def test_gigpo_similarity_mode_merges_near_duplicates(tmp_path):
    rows = _traj("g", "a", 2, True) + _traj("g", "b", 2, False)
    rows[0]["anchor_obs"] = "You are in the kitchen. A fridge is here."
    rows[2]["anchor_obs"] = "You are in the kitchen. A fridge is here!"
    b = _batch(tmp_path, rows)
    exact = score(b, "gigpo", backend="numpy")
    sim = score(b, "gigpo", backend="numpy", similarity=True, similarity_thresh=0.9)
    assert exact.credit[0] == 0.0 and sim.credit[0] > 0 > sim.credit[2]
    with pytest.raises(ValueError, match="similarity_thresh"):
        score(b, "gigpo", backend="numpy", similarity=True, similarity_thresh=1.0)


# ---------------------------------------------------------------- §14.6 GRAFT


def test_graft_spec_vector(toy):
    r = score(toy, "graft", backend="numpy", gamma=0.99, gae_lambda=0.95)
    V = dict(zip(toy.node_anchor_obs, r.node_value))
    for s, v in {"s0": 0.4815, "s1": 0.4900, "s2": 0.6600, "s3": 0.0, "s4": 0.4827}.items():
        assert V[s] == pytest.approx(v, abs=TOL)
    td = r.q_value - r.value
    expect_td = {
        ("s0", "a"): 0.0036,
        ("s0", "f"): -0.0036,
        ("s1", "b"): 0.1633,
        ("s1", "d"): -0.4900,
        ("s2", "c"): 0.3300,
        ("s2", "h"): -0.6600,
        ("s3", "e"): 0.0,
        ("s4", "g"): 0.0024,
        ("s4", "i"): -0.0048,
    }
    expect_z = {
        ("s0", "a"): 0.8658,
        ("s0", "f"): -0.8658,
        ("s1", "b"): 0.5,
        ("s1", "d"): -1.5,
        ("s2", "c"): 0.5773,
        ("s2", "h"): -1.1547,
        ("s3", "e"): 0.0,
        ("s4", "g"): 0.5772,
        ("s4", "i"): -1.1544,
    }
    for k in expect_td:
        assert _pair_value(toy, td, *k) == pytest.approx(expect_td[k], abs=TOL)
        assert _pair_value(toy, r.credit, *k) == pytest.approx(expect_z[k], abs=TOL)
    np.testing.assert_array_equal(r.advantage, r.credit)  # no trajectory-level term


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_graft_values_equal_crbc_and_lambda_has_no_effect(tmp_path, seed):
    b = random_batch(tmp_path, seed)
    g = build_graph(b)
    for gamma in (0.9, 0.99):
        r = score(g, "graft", backend="numpy", gamma=gamma, gae_lambda=0.95)
        crbc = score(g, "crbc", backend="numpy", beta=gamma)
        np.testing.assert_allclose(r.node_value, crbc.node_value, atol=1e-10)
        r0 = score(g, "graft", backend="numpy", gamma=gamma, gae_lambda=0.0)
        np.testing.assert_allclose(r.credit, r0.credit, atol=1e-8)


def test_graft_graph_gae_is_not_a_no_op_off_the_fixed_point(toy):
    from crbc_viz.estimators.graft import graph_gae_bonus

    # A constant TD of 1 everywhere: Ā = 1 on every hop, so the bonus is Σ_{k≤rem} (γλ)^k.
    bonus = graph_gae_bonus(toy, np.ones(toy.batch.num_steps), 0.5, 1.0)
    idx = _toy_steps(toy, "t4")
    np.testing.assert_allclose(bonus[idx], [0.9375, 0.875, 0.75, 0.5, 0.0])


def test_graft_singleton_rule(toy):
    r = score(toy, "graft", backend="numpy", gae_lambda=0.0, singleton="raw")
    assert _pair_value(toy, r.credit, "s3", "e") == pytest.approx(0.0, abs=1e-12)
    assert r.diagnostics["singleton_fraction"] == pytest.approx(1 / 15)


# ---------------------------------------------------------------- §14.7 Gated-BEPO


def test_gated_bepo_spec_vector(toy):
    r = score(toy, "gated_bepo", backend="numpy", gamma=0.98, gae_lambda=0.95)
    gae = {
        "t1": [0.4392, 0.4642, 0.3267],
        "t2": [-0.4401, -0.4802, 0.0],
        "t3": [-0.3911, -0.4126, -0.4482, -0.6533],
        "t4": [0.3630, 0.3974, 0.4368, 0.4642, 0.3267],
    }
    a_e = score(toy, "grpo", backend="numpy").advantage
    for t, v in gae.items():
        idx = _toy_steps(toy, t)
        np.testing.assert_allclose(r.credit[idx], v, atol=TOL)
    # gate: only s3 (τ2's last step, one successor) is off → the episode term alone there
    t2_last = _toy_steps(toy, "t2")[-1]
    assert r.advantage[t2_last] == pytest.approx(a_e[t2_last])
    assert r.diagnostics["gated_fraction"] == pytest.approx(1 / 15)


def test_gated_bepo_reductions(toy):
    a_e = score(toy, "grpo", backend="numpy").advantage
    np.testing.assert_allclose(score(toy, "gated_bepo", backend="numpy", rho=0.0).advantage, a_e)
    np.testing.assert_allclose(
        score(toy, "gated_bepo", backend="numpy", min_successors=99, rho=1.0).advantage, a_e
    )
    r = score(toy, "gated_bepo", backend="numpy", rho=1.0, bellman_norm="none")
    on = np.flatnonzero(toy.node_anchor_obs[toy.step_node] != "s3")
    np.testing.assert_allclose(r.advantage[on], r.credit[on])


# ---------------------------------------------------------------- §14.8 / §6.5 PGPO


def test_pgpo_spec_vector(toy):
    r = score(toy, "pgpo", backend="numpy", eta=0.95, gamma=1.0)
    phi = dict(zip(toy.node_anchor_obs, r.node_value))
    for s, v in {"s0": 0.4293, "s1": 0.4750, "s2": 0.6667, "s3": 0.0, "s4": 0.5866}.items():
        assert phi[s] == pytest.approx(v, abs=TOL)
    assert r.diagnostics["task_gate_mean"] == pytest.approx(0.25)
    final = {
        "t1": [0.7358, 0.9910, 0.7217],
        "t2": [-1.0803, -1.2410, 0.0],
        "t3": [-0.6473, -1.2979, -0.7410, -1.4434],
        "t4": [0.9917, 0.8211, 0.4768, 0.9910, 0.7217],
    }
    for t, v in final.items():
        np.testing.assert_allclose(r.advantage[_toy_steps(toy, t)], v, atol=TOL)


def test_pgpo_table4_structure():
    """Table 4 (§6.5): three failed actions of one anchor group. The paper's columns obey
    A = A^S + w·A^φ (no episode term) and w·A^φ is one affine map of δ (one z-score over the
    anchor's outgoing transitions); our estimator is built from exactly those two pieces."""
    a_s = np.array([-0.4648, -0.4648, -0.4648])
    delta = np.array([0.7009, -0.2002, -0.2358])
    w_aphi = np.array([0.7973, -0.6002, -0.6554])
    A = np.array([0.3324, -1.0650, -1.1202])
    np.testing.assert_allclose(a_s + w_aphi, A, atol=2e-4)  # printed to 4 decimals
    slope = np.diff(w_aphi) / np.diff(delta)
    assert slope[0] == pytest.approx(slope[1], rel=2e-3)


# ---------------------------------------------------------------- §14.9 RTMC


def test_rtmc_spec_vector(toy):
    r = score(toy, "rtmc", backend="numpy", gamma=0.99, n_prior=2.0)
    expect = {
        ("s0", "a"): -0.0001,
        ("s0", "f"): -0.0098,
        ("s1", "b"): 0.1633,
        ("s1", "d"): -0.4967,
        ("s2", "c"): 0.4000,
        ("s2", "h"): -0.6000,
        ("s3", "e"): -0.3333,
        ("s4", "g"): -0.1000,
        ("s4", "i"): 0.3802,
    }
    for k, v in expect.items():
        assert _pair_value(toy, r.credit, *k) == pytest.approx(v, abs=TOL)
    np.testing.assert_array_equal(r.advantage, r.credit)


def test_rtmc_reductions(toy):
    # Without the prior, first-visit counts centre A at every state: Σ_a n(s,a)·A(s,a) = 0.
    r = score(toy, "rtmc", backend="numpy", n_prior=0.0)
    from crbc_viz.estimators.rtmc import first_visit_mask

    first = first_visit_mask(toy)
    sums = np.bincount(toy.step_node[first], weights=r.credit[first], minlength=toy.num_nodes)
    np.testing.assert_allclose(sums, 0.0, atol=1e-12)
    # The optional normalisation divides by the population std without centering.
    rn = score(toy, "rtmc", backend="numpy", normalize=True)
    base = score(toy, "rtmc", backend="numpy")
    np.testing.assert_allclose(rn.advantage * np.std(base.credit), base.credit, atol=1e-12)


# ---------------------------------------------------------------- §14.11 TRACE


def _trace_batch(tmp_path):
    rows = _traj("q", "win", 4, True, gold_logprob=[-3.0, -2.0, -2.0, -0.5]) + _traj(
        "q", "lose", 3, False, gold_logprob=[-3.0, -3.5, -4.0]
    )
    return build_graph(_batch(tmp_path, rows))


def test_trace_spec_vector(tmp_path):
    g = _trace_batch(tmp_path)
    idx = _toy_steps(g, "win")
    r = score(g, "trace", backend="numpy")
    np.testing.assert_allclose(r.value[idx], [0.0, 0.3895, 0.3895, 1.6422], atol=TOL)
    np.testing.assert_allclose(r.credit[idx], [1.5122, 1.8368, 2.8528, 0.0], atol=TOL)
    np.testing.assert_allclose(r.advantage[idx], [1.3024, 1.3674, 1.5706, 1.0], atol=TOL)
    r2 = score(g, "trace", backend="numpy", terminal_discount=False)
    np.testing.assert_allclose(r2.credit[idx[:3]], [2.4882, 2.5568, 3.2528], atol=TOL)


def test_trace_k0_fills_only_the_last_transition(tmp_path):
    g = _trace_batch(tmp_path)
    idx = _toy_steps(g, "win")
    r = score(g, "trace", backend="numpy", K=0)
    np.testing.assert_allclose(r.credit[idx], [0.0, 0.0, 2 * 0.8 * 1.0, 0.0], atol=1e-5)


# ---------------------------------------------------------------- §14.12 AgentOPSD


def _opsd_batch(tmp_path, use_pair=False):
    e = [0.5, -0.2, 2.0, 0.0]
    if use_pair:
        main = _traj(
            "q", "main", 4, True, teacher_logprob_sum=[x - 7.0 for x in e], student_logprob_sum=[-7.0] * 4
        )
    else:
        main = _traj("q", "main", 4, True, turn_evidence=e)
    key = "teacher_logprob_sum" if use_pair else "turn_evidence"
    other = {key: [0.1, 0.2]} if not use_pair else {key: [0.0, 0.0], "student_logprob_sum": [0.0, 0.0]}
    rows = (
        main
        + _traj("q", "b", 2, True, **other)
        + _traj("q", "c", 2, False, **other)
        + _traj("q", "d", 2, False, **other)
    )
    return build_graph(_batch(tmp_path, rows, f"opsd{int(use_pair)}.jsonl"))


@pytest.mark.parametrize("use_pair", [False, True])
def test_agentopsd_spec_vector(tmp_path, use_pair):
    g = _opsd_batch(tmp_path, use_pair)
    idx = _toy_steps(g, "main")
    r = score(g, "agentopsd", backend="numpy", ddof=1)
    np.testing.assert_allclose(r.value[idx], [0.6225, 0.5683, 0.9056, 0.8955], atol=TOL)
    np.testing.assert_allclose(r.credit[idx], [0.1225, -0.0541, 0.3373, -0.0101], atol=TOL)
    np.testing.assert_allclose(r.advantage[idx], [0.8776, 0.7906, 0.9526, 0.8123], atol=TOL)
    r0 = score(g, "agentopsd", backend="numpy", ddof=0)
    np.testing.assert_allclose(r0.advantage[idx], [0.8794, 0.7794, 0.9526, 0.8040], atol=TOL)


def test_agentopsd_properties(tmp_path):
    rows = (
        _traj("q", "a", 3, True, turn_evidence=[1.0, -2.0, 0.5])
        + _traj("q", "b", 1, False, turn_evidence=[3.0])
        + _traj("same", "c", 2, True, turn_evidence=[1.0, 1.0])
        + _traj("same", "d", 2, True, turn_evidence=[0.0, 2.0])
    )
    g = build_graph(_batch(tmp_path, rows))
    r = score(g, "agentopsd", backend="numpy")
    a_seq = score(g, "grpo", backend="numpy").advantage
    tid = g.batch.steps["traj_id"].to_numpy()
    assert r.advantage[tid == "b"][0] == pytest.approx(a_seq[tid == "b"][0])  # one turn
    np.testing.assert_array_equal(r.advantage[np.isin(tid, ["c", "d"])], 0.0)  # A_seq = 0
    assert np.all(np.sign(r.advantage) == np.sign(a_seq))  # sign kept


# ---------------------------------------------------------------- §14.13 IAPO


def _iapo_rows(gid="svc"):
    edges = [
        [
            {"to": 1, "type": "support"},
            {"to": 3, "type": "support"},
            {"to": 1, "type": "support"},
        ],  # duplicate: once
        [{"to": 3, "type": "support"}],
        [{"to": 3, "type": "failed"}],
        [],
    ]
    sig = dict(
        num_tokens=[10, 20, 10, 20],
        influence_edges=edges,
        is_error=[False, False, True, False],
        direct_inputs=[1, 0, 0, 0],
    )
    return _traj(gid, "pos", 4, True, **sig) + _traj(gid, "neg", 4, False, **sig)


def test_iapo_spec_vector(tmp_path):
    g = build_graph(_batch(tmp_path, _iapo_rows()))
    r = score(g, "iapo", backend="numpy")
    pos, neg = _toy_steps(g, "pos"), _toy_steps(g, "neg")
    np.testing.assert_allclose(r.credit[pos], [1.0764, 1.0764, 0.6180, 1.0764], atol=TOL)
    np.testing.assert_allclose(r.credit[neg], [0.9024, 0.9024, 1.4879, 0.9024], atol=TOL)
    a_tau = score(g, "grpo", backend="numpy").advantage
    np.testing.assert_allclose(r.advantage, a_tau * r.credit)


def test_iapo_intermediate_features():
    from crbc_viz.estimators.iapo import influence_weights

    w = influence_weights([10, 20, 10, 20], {(0, 1), (0, 3), (1, 3)}, {(2, 3)}, [0, 0, 1, 0], [1, 0, 0, 0])
    np.testing.assert_allclose(w["phi_pos"], [1.3863, 1.0986, 0.0, 1.0986], atol=TOL)
    np.testing.assert_allclose(w["phi_neg"], [0.0, 0.0, 1.0986, 0.0], atol=TOL)
    np.testing.assert_allclose(w["m_pos"], [1.0702, 1.0702, 0.6491, 1.0702], atol=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_iapo_mass_conservation_sign_and_uniform_fallback(seed):
    from crbc_viz.estimators.iapo import influence_weights

    rng = np.random.default_rng(seed)
    T = int(rng.integers(2, 9))
    L = rng.integers(1, 50, size=T)
    sup = {(i, j) for i in range(T) for j in range(i + 1, T) if rng.random() < 0.3}
    err = rng.random(T) < 0.3
    fail = {(i, j) for i in range(T) for j in range(i + 1, T) if err[i] and rng.random() < 0.5}
    w = influence_weights(L, sup, fail, err, rng.integers(0, 3, size=T))
    for k in ("w_pos", "w_neg"):
        assert np.dot(L, w[k]) == pytest.approx(L.sum())
        assert np.all(w[k] > 0)
    flat = influence_weights(L, set(), set(), np.zeros(T), np.zeros(T))
    np.testing.assert_allclose(flat["w_pos"], 1.0)
    np.testing.assert_allclose(flat["w_neg"], 1.0)


# ---------------------------------------------------------------- §14.14 ABC


def _abc_graph(tmp_path):
    rows = _traj("q", "A", 4, True, judge_score=[1.8, 1.0, 0.2, 2.0]) + _traj(
        "q", "B", 3, False, judge_score=[1.0, 1.4, 0.0]
    )
    return build_graph(_batch(tmp_path, rows))


def test_abc_spec_vector(tmp_path):
    g = _abc_graph(tmp_path)
    r = score(g, "abc", backend="numpy", gamma=0.25)
    np.testing.assert_allclose(r.credit[_toy_steps(g, "A")], [0.9140, -0.2816, -0.8234, 1.2494], atol=TOL)
    np.testing.assert_allclose(r.credit[_toy_steps(g, "B")], [-0.0497, 0.1041, -1.4008], atol=TOL)
    np.testing.assert_array_equal(r.advantage, r.credit)
    from crbc_viz.estimators.abc import sft_weight

    np.testing.assert_allclose(sft_weight([1.8, 1.0, 0.2, 2.0]), [1.664, 1.0, 0.336, 1.7616], atol=TOL)


def test_abc_pooled_zscores_sum_to_zero(tmp_path):
    g = _abc_graph(tmp_path)
    r = score(g, "abc", backend="numpy", gamma=0.0)  # γ = 0: A is the pooled z-score itself
    assert r.credit.sum() == pytest.approx(0.0, abs=1e-12)
    assert np.std(r.credit, ddof=1) == pytest.approx(1.0, abs=1e-5)


# ---------------------------------------------------------------- §14.15 TRCA

RUBRIC = [
    {"id": "E1", "category": "evidence"},
    {"id": "E2", "category": "evidence"},
    {"id": "X1", "category": "execution"},
    {"id": "I1", "category": "invalidity"},
]


def test_trca_spec_vector(tmp_path):
    from crbc_viz.estimators.trca import rubric_rewards

    rows = _traj(
        "q", "a", 3, True, rubric_active=[["E1"], ["E1", "I1"], ["E2", "X1"]], rubric=[RUBRIC, None, None]
    )
    g = build_graph(_batch(tmp_path, rows))
    rF, rB, rT = rubric_rewards(g, lam=0.8)
    np.testing.assert_allclose(rF, [0.5, -0.5, 1.5], atol=TOL)
    np.testing.assert_allclose(rB, [0.5, 0.0, 1.5], atol=TOL)
    np.testing.assert_allclose(rT, [0.5, -0.1, 1.5], atol=TOL)
    # Completion-aware return with the env reward 1 on the last step, γ = 0.95.
    r = score(g, "trca", backend="numpy")
    np.testing.assert_allclose(r.q_value, [0.5 - 0.095 + 0.9025 * 2.5, -0.1 + 0.95 * 2.5, 2.5], atol=TOL)


def test_trca_coverage_pays_only_first_coverage(tmp_path):
    from crbc_viz.estimators.trca import rubric_rewards

    rows = _traj(
        "q", "a", 4, False, rubric_active=[["E1"], ["E1"], ["E1", "E2"], ["E2", "E1"]], rubric=[RUBRIC] * 4
    )
    rF, rB, _ = rubric_rewards(build_graph(_batch(tmp_path, rows)))
    np.testing.assert_allclose(rB, [0.5, 0.0, 0.5, 0.0])
    np.testing.assert_allclose(rF, [0.5, 0.5, 1.0, 1.0])
    assert rB.sum() == pytest.approx(1.0)  # bounded: no re-farming


def test_trca_combination_and_singletons(tmp_path):
    rows = _traj("q", "a", 2, True, rubric_active=[["E1"], []], rubric=[RUBRIC, None]) + _traj(
        "q", "b", 2, False, rubric_active=[[], ["I1"]]
    )
    for r_ in rows:
        r_["anchor_obs"] = f"s{r_['step_idx']}"
    g = build_graph(_batch(tmp_path, rows))
    r = score(g, "trca", backend="numpy")
    a_e = score(g, "grpo", backend="numpy").advantage
    np.testing.assert_allclose(r.advantage, a_e + r.credit)
    np.testing.assert_allclose(r.credit, [0.7071, 0.7071, -0.7071, -0.7071], atol=TOL)


# ---------------------------------------------------------------- signals: missing / bad


@pytest.mark.parametrize(
    "name,fields",
    [
        ("trace", ["gold_logprob"]),
        ("agentopsd", ["turn_evidence"]),
        ("abc", ["judge_score"]),
        ("trca", ["rubric_active", "rubric"]),
        ("iapo", ["influence_edges", "is_error", "num_tokens"]),
    ],
)
def test_missing_signal_raises(toy, name, fields):
    assert list(get(name).requires) == fields
    with pytest.raises(MissingSignalError) as ei:
        score(toy, name, backend="numpy")
    assert ei.value.estimator == name and set(ei.value.fields) <= set(fields)


@pytest.mark.parametrize(
    "name,field,bad",
    [
        ("trace", "gold_logprob", 0.5),
        ("abc", "judge_score", 2.5),
        ("abc", "judge_score", None),
        ("agentopsd", "turn_evidence", "x"),
        ("iapo", "num_tokens", 0),
        ("iapo", "is_error", "maybe"),
        ("trca", "rubric_active", ["NOPE"]),
    ],
)
def test_bad_signal_value_names_field_and_step(tmp_path, name, field, bad):
    base = {
        "trace": dict(gold_logprob=[-1.0, -0.5, -0.2]),
        "abc": dict(judge_score=[1.0, 1.2, 0.4]),
        "agentopsd": dict(turn_evidence=[0.1, 0.2, 0.3]),
        "iapo": dict(num_tokens=[5, 5, 5], is_error=[False] * 3, influence_edges=[[], [], []]),
        "trca": dict(rubric_active=[[], [], []], rubric=[RUBRIC, None, None]),
    }[name]
    base = {k: list(v) for k, v in base.items()}
    base[field][1] = bad
    rows = _traj("grp", "tx", 3, True, **base) + _traj(
        "grp", "ty", 3, False, **{k: list(v) if k != field else [v[0]] * 3 for k, v in base.items()}
    )
    g = build_graph(_batch(tmp_path, rows))
    with pytest.raises(ValueError, match=rf"{field}.*traj 'tx', step 1"):
        score(g, name, backend="numpy")


def test_iapo_failed_edge_needs_error_flag(tmp_path):
    rows = _traj(
        "g",
        "t",
        2,
        True,
        num_tokens=[3, 3],
        is_error=[False, False],
        influence_edges=[[{"to": 1, "type": "failed"}], []],
    )
    with pytest.raises(ValueError, match="is_error"):
        score(_batch(tmp_path, rows), "iapo", backend="numpy")


# ---------------------------------------------------------------- parity numpy ↔ torch


def _devices():
    torch = pytest.importorskip("torch")
    devs = [pytest.param("cpu", id="cpu")]
    devs.append(
        pytest.param(
            "cuda",
            id="cuda",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(
                    not torch.cuda.is_available(), reason="torch sees no CUDA device on this machine"
                ),
            ],
        )
    )
    return devs


PARITY_PARAMS = {
    "gigpo": [
        {},
        {"mode": "mean_std_norm", "episode_stats": "trajectory", "gamma": 0.8},
        {"step_reward": "outcome"},
    ],
    "rtmc": [{}, {"normalize": True, "n_prior": 0.5}],
    "graft": [{}, {"gae_lambda": 0.0, "singleton": "zero"}, {"normalize": False, "gamma": 0.9}],
    "gated_bepo": [{}, {"bellman_norm": "none", "rho": 0.3}],
    "pgpo": [{}, {"potential": "loo", "gamma": 0.95}, {"step_reward": "outcome"}],
}


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("name", GRAPH_WIDE)
def test_numpy_torch_parity_on_random_graphs(tmp_path, name, device):
    for seed in range(4):
        g = build_graph(random_batch(tmp_path, 100 + seed))
        for kw in PARITY_PARAMS.get(name, [{}]):
            a = score(g, name, backend="numpy", **kw)
            t = score(g, name, backend="torch", device=device, **kw)
            assert t.backend == f"torch:{device}"  # every result says backend:device
            for f in ("value", "q_value", "credit", "advantage", "node_value", "pair_q"):
                x, y = getattr(a, f), getattr(t, f)
                if x is None:
                    assert y is None, f
                    continue
                np.testing.assert_allclose(
                    y, x, atol=1e-9, rtol=0, equal_nan=True, err_msg=f"{name} {kw} seed {seed} field {f}"
                )


# ---------------------------------------------------------------- registry and sample


def test_every_registered_estimator_is_described():
    assert names()[:4] == ["grpo", "crbc", "visit_local", "shortest_path"]  # the family, then the peers
    for n in names():
        spec = get(n)
        assert spec.paper and spec.equation and spec.section.startswith("§"), n
        assert dataclasses.is_dataclass(spec.params_cls)
        infos = param_infos(spec.params_cls)
        assert all(i.help for i in infos), n
        fn_defaults = {
            k: v.default
            for k, v in __import__("inspect").signature(spec.fn).parameters.items()
            if v.kind == v.KEYWORD_ONLY
        }
        assert fn_defaults == {i.name: i.default for i in infos}, n


@pytest.mark.parametrize("name", names())
def test_every_estimator_runs_on_the_search_sample(name):
    b = load_rollouts(SEARCH)
    assert b.num_groups >= 2
    r = score(b, name, backend="numpy")
    assert r.advantage.shape == (b.num_steps,)
    assert np.all(np.isfinite(r.advantage)) and np.all(np.isfinite(r.credit))
    frame = r.to_frame()
    assert list(frame["estimator"].unique()) == [name]


def test_estimators_do_not_mutate_inputs(toy):
    before = toy.batch.steps.copy(deep=True)
    arrays = {k: getattr(toy, k).copy() for k in ("step_node", "step_next", "edge_count")}
    for n in GRAPH_WIDE:
        score(toy, n, backend="numpy")
    assert toy.batch.steps.equals(before)
    for k, v in arrays.items():
        np.testing.assert_array_equal(getattr(toy, k), v)
    assert crbc_viz.__version__
    assert math.isfinite(score(toy, "gigpo", backend="numpy").advantage.sum())
