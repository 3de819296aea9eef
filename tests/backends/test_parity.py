"""Backend parity: the numpy reference, the batched torch twin (CPU and CUDA), the compiled
numba engine and the fused device path agree on random graphs with cycles, self-loops,
dead ends and truncation."""
import math

import numpy as np
import pytest

import crbc_viz
from crbc_viz.backend.numba_crbc import crbc_step_credit
from crbc_viz.synthetic import random_mdp_batch

torch = pytest.importorskip("torch")
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine (CPU paths still tested)")
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])

CASES = [
    dict(num_groups=12, rollouts=8, max_steps=30, seed=0),
    dict(num_groups=6, rollouts=5, max_steps=60, num_states=8, p_self=0.4, seed=1),       # dense cycles
    dict(num_groups=9, rollouts=3, max_steps=10, num_states=30, p_progress=0.1, seed=2),  # mostly truncated
    dict(num_groups=4, rollouts=16, max_steps=40, num_states=12, p_back=0.5, p_stochastic=0.5, seed=3),
    dict(num_groups=3, rollouts=1, max_steps=5, seed=4),                                  # one rollout per group
]


@pytest.fixture(scope="module", params=range(len(CASES)))
def graph(request):
    return crbc_viz.build_graph(random_mdp_batch(**CASES[request.param]))


def _all_close(a, b, what):
    np.testing.assert_allclose(a, b, atol=1e-9, rtol=0, err_msg=what)


@pytest.mark.parametrize("name,params", [("crbc", {}), ("crbc", {"depth": 0}), ("crbc", {"depth": 3}),
                                         ("crbc", {"beta": 1.0}), ("visit_local", {"beta": 0.9}),
                                         ("crbc", {"min_actions": 1, "sigma_min": 0.01})])
@pytest.mark.parametrize("device", DEVICES)
def test_torch_matches_numpy(graph, name, params, device):
    ref = crbc_viz.score(graph, name, backend="numpy", **params)
    got = crbc_viz.score(graph, name, backend="torch", device=device, **params)
    for col in ("value", "q_value", "credit", "advantage"):
        _all_close(getattr(got, col), getattr(ref, col), f"{name} {params} {device} {col}")
    assert got.backend == f"torch:{device}"


@pytest.mark.parametrize("params", [{}, {"depth": 0}, {"depth": 4}, {"beta": 1.0}])
def test_numba_matches_numpy(graph, params):
    ref = crbc_viz.score(graph, "crbc", backend="numpy", **params)
    got = crbc_viz.score(graph, "crbc", backend="numba", **params)
    for col in ("value", "q_value", "credit", "advantage"):
        _all_close(getattr(got, col), getattr(ref, col), f"numba {params} {col}")
    _all_close(got.node_value, ref.node_value, "node_value")
    if math.isinf(params.get("depth", math.inf)):
        assert got.diagnostics["closure_residual"] < 1e-9


def test_large_groups_take_the_sparse_path(graph):
    from crbc_viz.backend.torch_crbc import crbc_torch

    ref = crbc_viz.score(graph, "crbc", backend="numpy")
    _all_close(crbc_torch(graph, device="cpu", dense_max=0).advantage, ref.advantage, "torch sparse")
    b = graph.batch
    out = crbc_step_credit(b.step_anchor_hash, graph.step_action, b.traj_offsets, b.group_traj_offsets,
                           b.traj_success, dense_max=0)
    _all_close(out["advantage"], ref.advantage, "numba sparse fallback")


@pytest.mark.parametrize("device", DEVICES)
def test_fused_device_path_matches_numpy(graph, device):
    from crbc_viz.backend.torch_fused import crbc_step_credit_torch, to_device

    b = graph.batch
    ref = crbc_viz.score(graph, "crbc", backend="numpy")
    args = to_device(b.step_anchor_hash, graph.step_action, b.traj_offsets, b.group_traj_offsets,
                     b.traj_success, device)
    out = crbc_step_credit_torch(*args)
    for col in ("value", "q_value", "credit", "advantage"):
        _all_close(out[col].cpu().numpy(), getattr(ref, col), f"fused {device} {col}")
    f32 = crbc_step_credit_torch(*args, dtype=torch.float32)
    assert np.max(np.abs(f32["advantage"].cpu().numpy() - ref.advantage)) < 1e-3  # stated float32 tolerance


@needs_cuda
def test_auto_prefers_cuda_when_present(graph):
    assert crbc_viz.score(graph, "crbc").backend == "torch:cuda"


def test_auto_on_cpu_picks_the_fastest_exact_engine(graph, monkeypatch):
    """``auto`` weighs the reference's expected time, by the anchors of each group (its
    solve's cost), against loading the compiled engine; steps alone do not decide."""
    from types import SimpleNamespace

    import crbc_viz.api as api
    from crbc_viz.estimators import get

    if CUDA:
        pytest.skip("auto picks CUDA here")

    def fake(steps, anchors):  # a built graph: only its sizes matter to the choice
        return SimpleNamespace(batch=SimpleNamespace(num_steps=steps),
                               group_node_offsets=np.r_[0, np.cumsum(anchors)])

    monkeypatch.setattr(api, "_numba_loaded", lambda: False)
    crbc = get("crbc")
    assert api._auto_backend(crbc, "auto", fake(10, [5])) == "numpy"       # load costs more than the job
    assert api._auto_backend(crbc, "auto", fake(5_000_000, [40] * 4096)) == "numba"
    # Same steps, different anchors: 100 groups of 100 anchors stay on the reference, one
    # group of 150k anchors (a sparse solve of that size) goes to the engine.
    assert api._auto_backend(crbc, "auto", fake(150_000, [100] * 100)) == "numpy"
    assert api._auto_backend(crbc, "auto", fake(150_000, [150_000])) == "numba"
    assert api._auto_backend(crbc, "auto", fake(50_000, [40])) == "numpy"
    assert api._auto_backend(get("shortest_path"), "auto", fake(10**7, [40] * 10**5)) == "torch"
    assert api._auto_backend(get("shortest_path"), "auto", fake(10, [5])) == "numpy"
    monkeypatch.setattr(api, "_numba_loaded", lambda: True)
    assert api._auto_backend(crbc, "auto", fake(10, [5])) == "numba"
    assert crbc_viz.score(graph, "crbc").backend == "numba"
@pytest.mark.parametrize("name,params", [("graft", {}), ("graft", {"gae_lambda": 0.5, "gamma": 0.9}),
                                         ("gated_bepo", {}), ("visit_local", {})])
def test_numba_peers_match_numpy(graph, name, params):
    ref = crbc_viz.score(graph, name, backend="numpy", **params)
    got = crbc_viz.score(graph, name, backend="numba", **params)
    assert got.backend == "numba"
    # Values/Q agree to 1e-9; credits are z-scores whose near-zero spreads amplify float noise,
    # so they are compared after the same σ floor the estimator uses.
    for col in ("value", "q_value"):
        _all_close(getattr(got, col), getattr(ref, col), f"{name} {col}")
    np.testing.assert_allclose(got.advantage, ref.advantage, atol=1e-6, err_msg=name)


def test_graph_gae_bonus_kernel_matches_reference(graph):
    from crbc_viz.backend.numba_graph import graph_gae_bonus_numba
    from crbc_viz.estimators.graft import graph_gae_bonus

    td = np.random.default_rng(0).normal(size=graph.batch.num_steps)   # off the fixed point
    for gamma, lam in ((0.99, 0.95), (0.9, 0.5), (1.0, 1.0)):
        _all_close(graph_gae_bonus_numba(graph, td, gamma, lam), graph_gae_bonus(graph, td, gamma, lam),
                   f"gae γ={gamma} λ={lam}")


@pytest.mark.parametrize("name,params", [
    ("grpo", {}), ("grpo", {"norm": "mean"}), ("grpo", {"ddof": 0, "stats": "cross_steps"}),
    ("grpo", {"outcome": "return"}),
    ("shortest_path", {}), ("shortest_path", {"omega": 0.8, "exponent": "d"}),
    ("shortest_path", {"ddof": 0, "w_group": 0.0})])
@pytest.mark.parametrize("device", DEVICES)
def test_core_vectorised_estimators_torch_twins(graph, name, params, device):
    ref = crbc_viz.score(graph, name, backend="numpy", **params)
    got = crbc_viz.score(graph, name, backend="torch", device=device, **params)
    assert got.backend == f"torch:{device}"
    for col in ("value", "q_value", "credit", "advantage"):
        np.testing.assert_allclose(getattr(got, col), getattr(ref, col), atol=1e-9, rtol=0,
                                   equal_nan=True, err_msg=f"{name} {params} {col}")
