"""Group size and rollout length: the sparse / chunked / blocked paths agree with an
independent dense solve and with each other, and `score(batch)` needs no graph up front."""

import math

import numpy as np
import pytest

import crbc_viz
from crbc_viz.estimators import get, names, registry
from crbc_viz.synthetic import random_mdp_batch

torch = pytest.importorskip("torch")


def _close(a, b, what, tol=1e-9):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape, what
    np.testing.assert_allclose(a, b, rtol=0, atol=tol, err_msg=what)


@pytest.fixture(scope="module")
def big():
    """One group of ~1,700 anchors (over every dense threshold: numpy 256, torch 512,
    numba 1024) beside three small groups."""
    b = random_mdp_batch(num_groups=1, rollouts=48, max_steps=120, num_states=3000, p_progress=0.3, seed=5)
    assert crbc_viz.build_graph(b).num_nodes > 1100
    return b


def _dense_oracle(graph, beta):
    """V of (I − βM)V = b by one dense solve per group, M and b counted from the step list
    with Python loops (no code shared with the solver)."""
    V = np.zeros(graph.num_nodes)
    for g in range(graph.num_groups):
        lo, hi = int(graph.group_node_offsets[g]), int(graph.group_node_offsets[g + 1])
        n = hi - lo
        A, rhs, visits = np.eye(n), np.zeros(n), np.zeros(n)
        steps = [k for k in range(graph.batch.num_steps) if lo <= graph.step_node[k] < hi]
        for k in steps:
            visits[graph.step_node[k] - lo] += 1
        for k in steps:
            s, x = graph.step_node[k] - lo, graph.step_next[k]
            if x >= 0:
                A[s, x - lo] -= beta / visits[s]
            elif x == -1:
                rhs[s] += beta / visits[s]
        V[lo:hi] = np.linalg.solve(A, rhs)
    return V


def test_sparse_closure_matches_a_dense_solve(big):
    from crbc_viz.ops.closure import graph_entries, solve_closure

    graph = crbc_viz.build_graph(big)
    oracle = _dense_oracle(graph, 0.97)
    for dense_max in (0, 256, 10**6):  # all sparse, mixed, all dense
        V, res = solve_closure(*graph_entries(graph), graph.group_node_offsets, 0.97, dense_max=dense_max)
        _close(V, oracle, f"dense_max={dense_max}")
        assert res < 1e-10


def test_dense_chunks_match_one_block(monkeypatch):
    import crbc_viz.ops.closure as closure

    graph = crbc_viz.build_graph(random_mdp_batch(num_groups=40, rollouts=6, max_steps=30, seed=3))
    ref, _ = closure.solve_closure(*closure.graph_entries(graph), graph.group_node_offsets, 0.9)
    monkeypatch.setattr(closure, "CHUNK_BYTES", 8 * 64 * 64 * 3)  # three groups per chunk
    got, _ = closure.solve_closure(*closure.graph_entries(graph), graph.group_node_offsets, 0.9)
    _close(got, ref, "chunked")
    _close(ref, _dense_oracle(graph, 0.9), "oracle")


@pytest.mark.parametrize(
    "name",
    [n for n in names() if len(registry.backends(get(n))) > 1],  # every estimator with a twin
)
def test_backends_agree_on_a_large_group(big, name):
    graph = crbc_viz.build_graph(big)
    ref = crbc_viz.score(graph, name, backend="numpy")
    spec = get(name)
    others = [b for b in registry.backends(spec) if b != "numpy"]
    for backend in others:
        got = crbc_viz.score(graph, name, backend=backend, device="cpu")
        for col in ("value", "q_value"):
            _close(getattr(got, col), getattr(ref, col), f"{name}[{backend}] {col}")
        _close(got.advantage, ref.advantage, f"{name}[{backend}] advantage")


def test_torch_chunked_buckets_match(monkeypatch):
    import crbc_viz.backends.torch.crbc as tc
    from crbc_viz.estimators import get

    graph = crbc_viz.build_graph(random_mdp_batch(num_groups=30, rollouts=6, max_steps=30, seed=4))
    ref = crbc_viz.score(graph, "crbc", backend="numpy")
    monkeypatch.setattr(tc, "CHUNK_BYTES", 8 * 64 * 64 * 2)
    _close(tc.crbc_torch(graph, get("crbc").check(), device="cpu").advantage, ref.advantage, "torch chunked")


@pytest.mark.parametrize("name", ["gigpo", "pgpo", "gated_bepo"])
def test_blocked_discounted_sums_on_long_rollouts(name):
    """Rollouts of up to 300 steps span several 64-position blocks of the torch twin."""
    graph = crbc_viz.build_graph(
        random_mdp_batch(num_groups=3, rollouts=4, max_steps=300, num_states=150, p_progress=0.3, seed=6)
    )
    assert graph.batch.traj_len.max() > 200
    ref = crbc_viz.score(graph, name, backend="numpy")
    got = crbc_viz.score(graph, name, backend="torch", device="cpu")
    _close(got.credit, ref.credit, f"{name} credit")


def test_discounted_sum_by_hand():
    from crbc_viz.ops.returns import discounted_returns

    graph = crbc_viz.build_graph(
        random_mdp_batch(
            num_groups=1, rollouts=2, max_steps=150, num_states=200, p_progress=0.2, p_fail=0.0, seed=1
        )
    )
    x = np.random.default_rng(0).normal(size=graph.batch.num_steps)
    got = discounted_returns(graph, torch.as_tensor(x), 0.9).numpy()
    want = np.zeros_like(x)
    b = graph.batch
    for t in range(b.num_trajectories):
        acc = 0.0
        for k in range(b.traj_offsets[t + 1] - 1, b.traj_offsets[t] - 1, -1):
            acc = x[k] + 0.9 * acc
            want[k] = acc
    _close(got, want, "suffix sums", 1e-10)


def test_gae_walk_blocked_matches_kernel(big, monkeypatch):
    """Off the fixed point (random TD) the reference walks blocks of start anchors; a tiny
    block size must not change the bonus, and the compiled kernel agrees."""
    import crbc_viz.estimators.graft as graft
    from crbc_viz.backends.numba.graph import graph_gae_bonus_numba

    graph = crbc_viz.build_graph(big.select_groups([0]))
    td = np.random.default_rng(1).normal(size=graph.batch.num_steps)
    want = graph_gae_bonus_numba(graph, td, 0.9, 0.8)
    monkeypatch.setattr(graft, "_FRONTIER_FLOATS", 5 * graph.num_nodes)  # five start anchors a block
    _close(graft.graph_gae_bonus(graph, td, 0.9, 0.8), want, "blocked walk")


def test_gae_bonus_is_zero_at_the_fixed_point(big):
    """GRAFT's own TD (exact values) has node sums 0 up to rounding, so the bound holds and
    the walk is skipped; walking anyway gives values below the bound."""
    from crbc_viz.backends.numba.graph import gae_bonus_kernel  # noqa: F401 (compiled twin exists)
    from crbc_viz.estimators.graft import gae_inputs, gae_negligible
    from crbc_viz.ops.closure import mean_backup_values, successor_values

    graph = crbc_viz.build_graph(big)
    V, _ = mean_backup_values(graph, 0.99)
    td = 0.99 * successor_values(graph, V) - V[graph.step_node]
    remaining, node_td = gae_inputs(graph, td)
    assert gae_negligible(graph, node_td, remaining, 0.99, 0.95)
    assert np.max(np.abs(node_td)) < 1e-12


def test_score_on_a_batch_builds_no_graph_for_the_engine(big):
    from crbc_viz.graph import is_built

    r = crbc_viz.score(big, "crbc", backend="numba")
    assert not is_built(r.graph)
    frame = r.to_frame()  # the output table needs no graph either
    assert not is_built(r.graph) and len(frame) == big.num_steps
    ref = crbc_viz.score(crbc_viz.build_graph(big), "crbc", backend="numpy")
    _close(r.node_value, ref.node_value, "deferred node values")  # now the graph is built
    _close(r.pair_q, ref.pair_q, "deferred pair Q")
    _close(r.pair_credit, ref.pair_credit, "deferred pair credit")
    assert is_built(r.graph) and r.graph.num_nodes == ref.graph.num_nodes
    assert r.diagnostics["gated_fraction"] == pytest.approx(ref.diagnostics["gated_fraction"])
    import pickle

    back = pickle.loads(pickle.dumps(r))
    _close(back.node_value, ref.node_value, "pickled")


def test_group_of_17k_anchors_in_19k_steps_on_the_reference():
    """A 19k-step group of ~17k anchors (a dense solve would need 2.3 GB)."""
    b = random_mdp_batch(
        num_groups=1, rollouts=160, max_steps=120, num_states=40000, p_progress=0.05, p_fail=0.0, seed=2
    )
    graph = crbc_viz.build_graph(b)
    assert graph.num_nodes > 10_000
    r = crbc_viz.score(graph, "crbc", backend="numpy")
    assert np.isfinite(r.advantage).all() and r.diagnostics["closure_residual"] < 1e-9
    assert math.isfinite(r.diagnostics["gated_fraction"])


@pytest.mark.parametrize("beta", [0.97, 1.0])
def test_iterated_large_groups_match_a_dense_solve(big, monkeypatch, beta):
    """Groups over SPARSE_LU_MAX anchors are iterated to a proven error bound (β < 1) or a
    measured contraction (β = 1); both land within 1e-9 of the dense solve."""
    import crbc_viz.ops.closure as closure

    graph = crbc_viz.build_graph(big)
    monkeypatch.setattr(closure, "SPARSE_LU_MAX", 300)
    V, res = closure.solve_closure(*closure.graph_entries(graph), graph.group_node_offsets, beta)
    _close(V, _dense_oracle(graph, beta), f"iterated β={beta}")
    assert res < 1e-10


def test_which_groups_are_iterated():
    """Over LU_ALWAYS_MAX anchors a group is iterated where ~1,700 sweeps (β = 0.98: 0.98^k
    reaches 2e-15 after 1,676) over its entries stay within ITER_WORK_MAX; β = 1 factorises."""
    from crbc_viz.ops.closure import iterated_groups

    n = np.array([2_000, 2_001, 2_001, 20_001, 5_000])
    e = np.array([10_000, 10_000, 200_000, 10_000_000, 50_000])
    assert iterated_groups(n, e, 0.98).tolist() == [False, True, False, True, True]
    assert iterated_groups(n, e, 1.0).tolist() == [False, False, False, True, False]
    assert iterated_groups(n, e, 0.9999).tolist() == [False, False, False, True, False]


@pytest.mark.parametrize("beta", [0.97, 1.0])
def test_mid_size_groups_iterate_only_where_cheap(big, monkeypatch, beta):
    """With LU_ALWAYS_MAX lowered under the big batch's groups, β < 1 iterates them (no LU) and
    β = 1 factorises them; both land within 1e-9 of the dense solve."""
    import crbc_viz.ops.closure as closure

    graph = crbc_viz.build_graph(big)
    assert np.diff(graph.group_node_offsets).max() > 300
    monkeypatch.setattr(closure, "LU_ALWAYS_MAX", 300)
    used = []
    for name in ("_lu", "_iterate"):
        real = getattr(closure, name)
        monkeypatch.setattr(closure, name, lambda *a, _r=real, _n=name: used.append(_n) or _r(*a))
    V, res = closure.solve_closure(*closure.graph_entries(graph), graph.group_node_offsets, beta)
    assert set(used) == ({"_iterate"} if beta < 1 else {"_lu"})
    _close(V, _dense_oracle(graph, beta), f"β={beta}")
    assert res < 1e-10
