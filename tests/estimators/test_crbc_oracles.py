"""CRBC against independent oracles: Monte Carlo simulation of the empirical chain, a
dict + spsolve implementation, networkx value iteration, brute-force visit-local averages,
and the depth family's convergence to the closure."""

import math
from collections import defaultdict

import numpy as np
import pytest

import crbc_viz
from bench.baselines import crbc_dict_spsolve, crbc_networkx_vi, group_lists
from crbc_viz.estimators.crbc import depth_bound
from crbc_viz.graph import FAILURE, SUCCESS
from crbc_viz.synthetic import random_mdp_batch
from helpers import write_jsonl


def _empirical_chain(batch, g):
    """Transition lists per anchor, from raw rows (no crbc_viz graph code)."""
    trans = defaultdict(list)  # s -> list of successors (one per step occurrence)
    for t in range(batch.group_traj_offsets[g], batch.group_traj_offsets[g + 1]):
        lo, hi = batch.traj_offsets[t], batch.traj_offsets[t + 1]
        hs = batch.step_anchor_hash[lo:hi].tolist()
        for k in range(len(hs)):
            trans[hs[k]].append(hs[k + 1] if k + 1 < len(hs) else ("+" if batch.traj_success[t] else "-"))
    return trans


def test_values_match_monte_carlo_simulation():
    """V(s) = E[β^(steps to z+)] under the empirical chain: simulate it and compare."""
    batch = random_mdp_batch(3, 8, 20, num_states=10, seed=7)
    graph = crbc_viz.build_graph(batch)
    beta = 0.9
    r = crbc_viz.score(graph, "crbc", beta=beta, backend="numpy")
    rng = np.random.default_rng(0)
    n_sims = 4000
    for g in range(3):
        trans = _empirical_chain(batch, g)
        keys = list(trans)
        for s in keys[:6]:
            totals = np.zeros(n_sims)
            for i in range(n_sims):
                cur, disc = s, 1.0
                while True:
                    nxt = trans[cur][rng.integers(len(trans[cur]))]  # μ·P = one uniform occurrence
                    disc *= beta
                    if nxt == "+":
                        totals[i] = disc
                        break
                    if nxt == "-" or disc < 1e-9:
                        break
                    cur = nxt
            node = next(
                n
                for n in range(graph.num_nodes)
                if graph.node_group[n] == g and batch.step_anchor_hash[graph.node_first_step[n]] == s
            )
            se = totals.std(ddof=1) / math.sqrt(n_sims)
            assert abs(r.node_value[node] - totals.mean()) <= 5 * se + 1e-3, (g, s)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_equals_dict_spsolve_baseline(backend):
    batch = random_mdp_batch(20, 8, 30, seed=3)
    want = crbc_dict_spsolve(group_lists(batch), beta=0.95)
    got = crbc_viz.score(batch, "crbc", beta=0.95, backend=backend).advantage
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_values_equal_networkx_value_iteration():
    batch = random_mdp_batch(5, 8, 30, seed=11)
    want = crbc_networkx_vi(group_lists(batch), beta=0.98)
    np.testing.assert_allclose(crbc_viz.score(batch, "crbc").value, want, atol=1e-9)


def test_depth_converges_to_closure_within_corollary_3_bound():
    batch = random_mdp_batch(6, 8, 30, seed=5)
    graph = crbc_viz.build_graph(batch)
    beta = 0.9
    exact = crbc_viz.score(graph, "crbc", beta=beta, backend="numpy")
    a_inf = exact.pair_q - exact.node_value[graph.pair_node]
    errors = []
    for K in (0, 1, 2, 5, 10, 20, 40, 80):
        rk = crbc_viz.score(graph, "crbc", beta=beta, depth=K, backend="numpy")
        err = np.max(np.abs(rk.pair_q - rk.node_value[graph.pair_node] - a_inf))
        assert err <= depth_bound(graph, beta, K) + 1e-12
        errors.append(err)
    assert errors[-1] < 1e-3 * max(errors[0], 1e-12) + 1e-9
    assert errors[-1] < errors[0]


def test_depth_zero_equals_brute_force_visit_local_averages():
    batch = random_mdp_batch(4, 8, 25, seed=9)
    graph = crbc_viz.build_graph(batch)
    beta = 0.98
    r = crbc_viz.score(graph, "visit_local", beta=beta, backend="numpy")
    r0 = crbc_viz.score(graph, "crbc", beta=beta, depth=0, backend="torch")
    np.testing.assert_allclose(r.advantage, r0.advantage, atol=1e-12)
    # Brute force from raw rows: G = β^(T−t+1)·R, pooled per (group, anchor) and (group, anchor, action).
    actions = batch.steps["action"].astype(str).tolist()
    pool_s, pool_sa = defaultdict(list), defaultdict(list)
    keys = []
    for t in range(batch.num_trajectories):
        lo, hi = batch.traj_offsets[t], batch.traj_offsets[t + 1]
        T = hi - lo
        for k in range(T):
            G = beta ** (T - k) * float(batch.traj_success[t])
            s = (batch.traj_group[t], int(batch.step_anchor_hash[lo + k]))
            pool_s[s].append(G)
            pool_sa[s + (actions[lo + k],)].append(G)
            keys.append(s + (actions[lo + k],))
    for step, key in enumerate(keys):
        assert r.value[step] == pytest.approx(np.mean(pool_s[key[:2]]), abs=1e-12)
        assert r.q_value[step] == pytest.approx(np.mean(pool_sa[key]), abs=1e-12)


def test_tree_values_equal_monte_carlo_return(tmp_path):
    """On a tree every anchor's closure value is the mean discounted return of the rollouts
    through it: V(root) = mean_i β^(T_i)·R_i."""
    from helpers import write_jsonl

    lengths, wins = [3, 4, 2, 5, 3], [1, 0, 1, 1, 0]
    rows = []
    for i, (T, w) in enumerate(zip(lengths, wins)):
        for t in range(T):
            rows.append(
                {
                    "group_id": "g",
                    "traj_id": f"r{i}",
                    "step_idx": t,
                    "reward": float(w and t == T - 1),
                    "anchor_obs": "root" if t == 0 else f"r{i}-s{t}",
                    "action": f"go{i}",
                    "done": t == T - 1,
                    "success": bool(w),
                }
            )
    batch = crbc_viz.load_rollouts(write_jsonl(tmp_path / "tree.jsonl", rows))
    for beta in (1.0, 0.9):
        r = crbc_viz.score(batch, "crbc", beta=beta, backend="numpy")
        mc = np.mean([beta**T * w for T, w in zip(lengths, wins)])
        assert r.value[0] == pytest.approx(mc, abs=1e-12)


def test_edge_cases_documented_values():
    # All-failure group: V ≡ 0, A^S ≡ 0, A^G = 0.
    batch = random_mdp_batch(2, 6, 15, seed=4)
    fail = batch.select_groups([0])
    object.__setattr__(fail, "traj_success", np.zeros_like(fail.traj_success))
    r = crbc_viz.score(fail, "crbc")
    assert np.all(r.value == 0) and np.all(r.credit == 0) and np.all(r.advantage == 0)
    # β = 1 is solvable and finite.
    r1 = crbc_viz.score(batch, "crbc", beta=1.0)
    assert np.isfinite(r1.advantage).all() and r1.diagnostics["closure_residual"] < 1e-9


@pytest.mark.parametrize("beta", [0.98, 1.0])
@pytest.mark.parametrize("success", [True, False])
def test_single_step_single_rollout_group(tmp_path, success, beta):
    """One rollout of one step (anchor s, action a, then the boundary), scored alone.

    ESTIMATORS.md §1: a group of size 1 gets mean 0 and std 1, so A^G = R / (1 + eps) with
    verl's eps = 1e-6 (no centring). §3.4: V(s) = Q(s, a) = β·V(boundary) = β·R. §3.9: a
    single-action anchor is gated, so A^S = 0. §3.6 with (w_G, w_S) = (1, 5):
    A = 1·R/(1 + 1e-6) + 5·0."""
    from crbc_viz.estimators import get, registry

    rows = [
        {"group_id": "g", "traj_id": "t", "step_idx": 0, "anchor_obs": "s", "action": "a", "reward": 0.0}
        | {"done": True, "success": success}
    ]
    batch = crbc_viz.load_rollouts(str(write_jsonl(tmp_path / "one.jsonl", rows)))
    assert (batch.num_groups, batch.num_trajectories, batch.num_steps) == (1, 1, 1)
    R = 1.0 if success else 0.0
    for backend in registry.backends(get("crbc")):
        kw = {} if backend == "numpy" else {"device": "cpu"}
        r = crbc_viz.score(batch, "crbc", beta=beta, backend=backend, **kw)
        where = f"crbc[{backend}] beta={beta} success={success}"
        assert r.value.tolist() == [pytest.approx(beta * R, abs=1e-15)], where
        assert r.q_value.tolist() == [pytest.approx(beta * R, abs=1e-15)], where
        assert r.credit.tolist() == [0.0], where
        assert r.advantage.tolist() == [pytest.approx(R / (1 + 1e-6), abs=1e-15)], where
        assert r.diagnostics["gated_fraction"] == 1.0, where


def test_graph_boundaries_and_counts():
    batch = random_mdp_batch(3, 5, 10, seed=8)
    graph = crbc_viz.build_graph(batch)
    last = batch.traj_offsets[1:] - 1
    assert np.all(graph.step_next[last] == np.where(batch.traj_success, SUCCESS, FAILURE))
    assert graph.edge_count.sum() == batch.num_steps
    assert np.all(np.diff(graph.node_group) >= 0)  # groups contiguous
    nxg = graph.to_networkx(0)
    assert {"SUCCESS", "FAILURE"} <= set(nxg.nodes)
    steps0 = batch.traj_offsets[batch.group_traj_offsets[1]]
    assert sum(d["count"] for *_, d in nxg.edges(data=True)) == steps0
