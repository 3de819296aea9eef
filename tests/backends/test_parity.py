"""Backend parity: every kernel in the registry's table (``registry.kernels()``: a new twin is
tested here without editing a list) on every device it can run on here agrees with the numpy
reference to 1e-9, on random graphs with cycles, self-loops, dead ends and truncation, at the
defaults and at one-field-at-a-time variations derived from the params dataclass's bounds and
choices. Then the paths outside the table (the sparse fallback, the fused device path) and
``auto``'s choice."""

import importlib.util
import math

import numpy as np
import pytest

import crbc_viz
from crbc_viz.backends.torch import FLOAT32_ATOL
from crbc_viz.estimators import registry
from crbc_viz.synthetic import random_mdp_batch

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_NUMBA = importlib.util.find_spec("numba") is not None
CUDA = False
if HAVE_TORCH:
    import torch

    CUDA = torch.cuda.is_available()
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine (CPU paths still tested)")
DEVICES = {
    "torch": ["cpu"] + (["cuda"] if CUDA else []) if HAVE_TORCH else [],
    "numba": ["cpu"] if HAVE_NUMBA else [],
}

CASES = [
    dict(num_groups=12, rollouts=8, max_steps=30, seed=0),
    dict(num_groups=6, rollouts=5, max_steps=60, num_states=8, p_self=0.4, seed=1),  # dense cycles
    dict(num_groups=9, rollouts=3, max_steps=10, num_states=30, p_progress=0.1, seed=2),  # mostly truncated
    dict(num_groups=4, rollouts=16, max_steps=40, num_states=12, p_back=0.5, p_stochastic=0.5, seed=3),
    dict(num_groups=3, rollouts=1, max_steps=5, seed=4),  # one rollout per group
]
COLUMNS = ("value", "q_value", "credit", "advantage")


@pytest.fixture(scope="module", params=range(len(CASES)))
def graph(request):
    return crbc_viz.build_graph(random_mdp_batch(**CASES[request.param]))


def _all_close(a, b, what):
    np.testing.assert_allclose(a, b, atol=1e-9, rtol=0, equal_nan=True, err_msg=what)


def _scores_close(got, ref, what):
    """Credits and advantages: 1e-9, except that where the reference is a z-score of round-off
    (|ref| < 1e-6: e.g. GRAFT's TD errors at γ = 1, ~1e-15, over std + eps with eps = 1e-6)
    the two solves' last bits may differ by up to 1e-8."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    tiny = np.abs(ref) < 1e-6
    _all_close(got[~tiny], ref[~tiny], what)
    np.testing.assert_allclose(got[tiny], ref[tiny], atol=1e-8, rtol=0, equal_nan=True, err_msg=what)


def variants(spec) -> list[dict]:
    """The defaults, then each field moved on its own: every other choice, the flipped bool,
    and for a number half its default and its upper bound (or, for an infinite default such as
    ``depth``, its lower bound and 3) where those lie in bounds."""
    out = [{}]
    for i in registry.param_infos(spec.params_cls):
        if i.choices:
            out += [{i.name: c} for c in i.choices if c != i.default]
        elif i.type is bool:
            out.append({i.name: not i.default})
        elif i.type in (int, float):
            cands = [i.low, 3] if math.isinf(i.default) else [i.default * 0.5, i.high]
            seen = {i.default}
            for v in cands:
                if (
                    v is None
                    or v in seen
                    or math.isinf(v)
                    or (i.low_open and v == i.low)
                    or (i.high_open and v == i.high)
                ):
                    continue
                if (i.low is not None and v < i.low) or (i.high is not None and v > i.high):
                    continue
                v = int(v) if i.type is int else float(v)
                if v in seen:
                    continue
                seen.add(v)
                out.append({i.name: v})
    return out


def _runs():
    for name, backend, _ in registry.kernels():
        if backend == "numpy" or registry.get(name).requires:
            continue
        for device in DEVICES[backend] or [None]:
            for params in variants(registry.get(name)):
                yield pytest.param(
                    name,
                    backend,
                    device,
                    params,
                    id=f"{name}-{backend}:{device}-{params or 'defaults'}",
                    marks=[pytest.mark.skipif(device is None, reason=f"{backend} is not installed")],
                )


def test_every_twin_is_covered():
    """Each estimator with a twin is exercised: the parametrisation is the kernel table."""
    covered = {p.values[0] for p in _runs()}
    assert covered == {n for n, b, _ in registry.kernels() if b != "numpy" and not registry.get(n).requires}
    assert {"crbc", "grpo", "graft"} <= covered


@pytest.mark.parametrize("name,backend,device,params", list(_runs()))
def test_kernel_matches_numpy(graph, name, backend, device, params):
    ref = crbc_viz.score(graph, name, backend="numpy", **params)
    got = crbc_viz.score(graph, name, backend=backend, device=device, **params)
    assert got.backend == (f"torch:{device}" if backend == "torch" else backend)
    assert got.params == ref.params
    for col in COLUMNS:
        close = _all_close if col in ("value", "q_value") else _scores_close
        close(getattr(got, col), getattr(ref, col), f"{name}[{backend}:{device}] {params} {col}")
    if ref.node_value is not None and got.node_value is not None:
        _all_close(got.node_value, ref.node_value, f"{name}[{backend}:{device}] {params} node_value")
    if "closure_residual" in ref.diagnostics:
        assert got.diagnostics["closure_residual"] < 1e-9


@needs_torch
def test_large_groups_take_the_sparse_path(graph):
    from crbc_viz.backends.numba.crbc import crbc_step_credit
    from crbc_viz.backends.torch.crbc import crbc_torch

    ref = crbc_viz.score(graph, "crbc", backend="numpy")
    p = registry.get("crbc").check()
    _all_close(crbc_torch(graph, p, device="cpu", dense_max=0).advantage, ref.advantage, "torch sparse")
    if HAVE_NUMBA:
        b = graph.batch
        out = crbc_step_credit(
            b.step_anchor_hash,
            graph.step_action,
            b.traj_offsets,
            b.group_traj_offsets,
            b.traj_success,
            dense_max=0,
        )
        _all_close(out["advantage"], ref.advantage, "numba sparse fallback")


@needs_torch
@pytest.mark.parametrize("device", DEVICES["torch"])
def test_fused_device_path_matches_numpy(graph, device):
    from crbc_viz.backends.torch.fused import crbc_step_credit_torch, to_device

    b = graph.batch
    ref = crbc_viz.score(graph, "crbc", backend="numpy")
    args = to_device(
        b.step_anchor_hash, graph.step_action, b.traj_offsets, b.group_traj_offsets, b.traj_success, device
    )
    out = crbc_step_credit_torch(*args)
    for col in COLUMNS:
        _all_close(out[col].cpu().numpy(), getattr(ref, col), f"fused {device} {col}")
    f32 = crbc_step_credit_torch(*args, dtype=torch.float32)
    assert np.max(np.abs(f32["advantage"].cpu().numpy() - ref.advantage)) <= FLOAT32_ATOL


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")
def test_graph_gae_bonus_kernel_matches_reference(graph):
    from crbc_viz.backends.numba.graph import graph_gae_bonus_numba
    from crbc_viz.estimators.graft import graph_gae_bonus

    td = np.random.default_rng(0).normal(size=graph.batch.num_steps)  # off the fixed point
    for gamma, lam in ((0.99, 0.95), (0.9, 0.5), (1.0, 1.0)):
        _all_close(
            graph_gae_bonus_numba(graph, td, gamma, lam),
            graph_gae_bonus(graph, td, gamma, lam),
            f"gae γ={gamma} λ={lam}",
        )


@needs_cuda
def test_auto_prefers_cuda_when_present(graph):
    assert crbc_viz.score(graph, "crbc").backend == "torch:cuda"


@pytest.mark.skipif(not (HAVE_NUMBA and HAVE_TORCH), reason="needs numba and torch installed")
def test_auto_on_cpu_picks_the_fastest_exact_engine(graph, monkeypatch):
    """``auto`` weighs the reference's expected time, by the anchors of each group (its
    solve's cost), against loading the compiled engine; steps alone do not decide."""
    from types import SimpleNamespace

    import crbc_viz.api as api
    from crbc_viz.backends import numba as numba_backend
    from crbc_viz.backends import torch as torch_backend

    if CUDA:
        pytest.skip("auto picks CUDA here")

    def fake(steps, anchors):  # a built graph: only its sizes matter to the choice
        return SimpleNamespace(
            batch=SimpleNamespace(num_steps=steps), group_node_offsets=np.r_[0, np.cumsum(anchors)]
        )

    monkeypatch.setattr(numba_backend, "loaded", lambda: False)
    crbc, sp = registry.get("crbc"), registry.get("shortest_path")
    assert api._auto_backend(crbc, "auto", fake(10, [5])) == "numpy"  # load costs more than the job
    assert api._auto_backend(crbc, "auto", fake(5_000_000, [40] * 4096)) == "numba"
    # Same steps, different anchors: 100 groups of 100 anchors stay on the reference, one
    # group of 150k anchors (a sparse solve of that size) goes to the engine.
    assert api._auto_backend(crbc, "auto", fake(150_000, [100] * 100)) == "numpy"
    assert api._auto_backend(crbc, "auto", fake(150_000, [150_000])) == "numba"
    assert api._auto_backend(crbc, "auto", fake(50_000, [40])) == "numpy"
    assert api._auto_backend(sp, "auto", fake(10**7, [40] * 10**5)) == "torch"
    assert api._auto_backend(sp, "auto", fake(10, [5])) == "numpy"
    assert isinstance(torch_backend.should_run(crbc, fake(10**7, [40] * 10**5), "cpu", crbc.check()), str)
    monkeypatch.setattr(numba_backend, "loaded", lambda: True)
    assert api._auto_backend(crbc, "auto", fake(10, [5])) == "numba"
    assert crbc_viz.score(graph, "crbc").backend == "numba"


def test_a_requested_backend_that_cannot_run_raises_backend_unavailable(graph, monkeypatch):
    from crbc_viz.backends import numba as numba_backend
    from crbc_viz.errors import BackendUnavailable, CrbcVizError

    with pytest.raises(BackendUnavailable, match="estimator 'trace' has no torch backend; it has: numpy"):
        crbc_viz.score(graph, "trace", backend="torch")
    with pytest.raises(BackendUnavailable, match="device='cuda' needs the torch backend"):
        crbc_viz.score(graph, "crbc", backend="numba", device="cuda")
    monkeypatch.setattr(numba_backend, "available", lambda: False)
    with pytest.raises(BackendUnavailable, match="numba is not installed") as e:
        crbc_viz.score(graph, "crbc", backend="numba")
    assert isinstance(e.value, CrbcVizError)
    if not CUDA:
        with pytest.raises(BackendUnavailable):
            crbc_viz.score(graph, "trace", device="cuda")
