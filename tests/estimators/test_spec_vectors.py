"""docs/spec_vectors.md §14.2, §14.4, §14.5, §14.10 (ESTIMATORS.md §14) — hand-computed vectors on
the toy group, to 1e-4."""

import numpy as np
import pytest

import crbc_viz
from crbc_viz.ops import group_advantage
from helpers import TOY, toy_nodes, toy_pairs

BACKENDS = ["numpy", "torch"]


@pytest.fixture(scope="module")
def graph():
    return crbc_viz.build_graph(crbc_viz.load_rollouts(TOY))


def by_traj(graph, values):
    b = graph.batch
    return [list(values[b.traj_offsets[t] : b.traj_offsets[t + 1]]) for t in range(b.num_trajectories)]


def test_grpo_14_2(graph):
    np.testing.assert_allclose(group_advantage(graph), [0.8660, -0.8660, -0.8660, 0.8660], atol=1e-4)
    np.testing.assert_allclose(group_advantage(graph, ddof=0), [1, -1, -1, 1], atol=1e-4)
    np.testing.assert_allclose(group_advantage(graph, norm="mean"), [0.5, -0.5, -0.5, 0.5], atol=1e-4)
    np.testing.assert_allclose(
        group_advantage(graph, stats="cross_steps"), [0.9037, -1.0328, -1.0328, 0.9037], atol=1e-4
    )
    r = crbc_viz.score(graph, "grpo")
    assert np.isnan(r.value).all() and np.isnan(r.q_value).all()
    np.testing.assert_allclose(r.advantage[:3], 0.8660, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_crbc_14_4(graph, backend):
    r = crbc_viz.score(graph, "crbc", backend=backend)
    nodes, pairs = toy_nodes(graph), toy_pairs(graph)
    V = {"s0": 0.4636, "s1": 0.4802, "s2": 0.6533, "s3": 0.0, "s4": 0.4659}
    for s, v in V.items():
        assert r.node_value[nodes[s]] == pytest.approx(v, abs=1e-4)
    Q = {
        ("s0", "a"): 0.4706,
        ("s0", "f"): 0.4566,
        ("s1", "b"): 0.6403,
        ("s1", "d"): 0.0,
        ("s2", "c"): 0.9800,
        ("s2", "h"): 0.0,
        ("s3", "e"): 0.0,
        ("s4", "g"): 0.4706,
        ("s4", "i"): 0.4566,
    }
    AS = {
        ("s0", "a"): 0.0699,
        ("s0", "f"): -0.0699,
        ("s1", "b"): 0.5774,
        ("s1", "d"): -1.7321,
        ("s2", "c"): 0.7071,
        ("s2", "h"): -1.4142,
        ("s3", "e"): 0.0,
        ("s4", "g"): 0.0466,
        ("s4", "i"): -0.0932,
    }
    for k, q in Q.items():
        assert r.pair_q[pairs[k]] == pytest.approx(q, abs=1e-4), k
        assert r.pair_credit[pairs[k]] == pytest.approx(AS[k], abs=1e-4), k
    expected = [
        [1.2155, 3.7528, 4.4016],
        [-0.5166, -9.5263, -0.8660],
        [-1.2155, -0.6331, 2.0207, -7.9371],
        [0.5166, 0.4001, 1.0990, 3.7528, 4.4016],
    ]
    for got, want in zip(by_traj(graph, r.advantage), expected):
        np.testing.assert_allclose(got, want, atol=1e-4)
    assert r.diagnostics["closure_residual"] < 1e-12


@pytest.mark.parametrize("backend", BACKENDS)
def test_crbc_finite_depth_14_5(graph, backend):
    pairs = toy_pairs(graph)
    table = {
        0: (0.0093, -0.1506, 0.3012),
        1: (-0.0691, -0.0461, 0.0921),
        2: (-0.0179, -0.0119, 0.0238),
        3: (-0.0011, -0.0008, 0.0015),
        10: (0.0070, 0.0047, -0.0093),
    }
    for K, want in table.items():
        r = crbc_viz.score(graph, "crbc", backend=backend, depth=K)
        A = r.pair_q - r.node_value[graph.pair_node]
        got = [A[pairs[("s0", "a")]], A[pairs[("s4", "g")]], A[pairs[("s4", "i")]]]
        np.testing.assert_allclose(got, want, atol=1e-4, err_msg=f"K={K}")
        # "(s1,·) and (s2,·) identical at every K": A(s1,b) = +0.1601, A(s2,c) = +0.3267
        assert A[pairs[("s1", "b")]] == pytest.approx(0.1601, abs=1e-4)
        assert A[pairs[("s2", "c")]] == pytest.approx(0.3267, abs=1e-4)


def test_shortest_path_14_10(graph):
    r = crbc_viz.score(graph, "shortest_path")
    nodes, pairs = toy_nodes(graph), toy_pairs(graph)
    d = {"s2": 1, "s1": 2, "s0": 3, "s4": 3, "s3": 4}
    for s, v in d.items():
        assert r.node_value[nodes[s]] == v
    want = {
        ("s0", "a"): 0.8659,
        ("s0", "f"): -0.8659,
        ("s1", "b"): 0.5,
        ("s1", "d"): -1.5,
        ("s2", "c"): 0.5773,
        ("s2", "h"): -1.1547,
        ("s3", "e"): 0.0,
        ("s4", "g"): 0.5772,
        ("s4", "i"): -1.1545,
    }
    for step in range(graph.batch.num_steps):
        p = graph.step_pair[step]
        key = next(k for k, v in pairs.items() if v == p)
        assert r.credit[step] == pytest.approx(want[key], abs=1e-4), key
    # τ2's first step (s0-a) with A^E added: −0.0002 (§14.10).
    t2 = graph.batch.traj_offsets[1]
    assert r.advantage[t2] == pytest.approx(-0.0002, abs=1e-4)
