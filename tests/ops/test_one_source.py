"""The segment statistics and the group advantage are written once (`crbc_viz.ops`, over the
array API) and the torch backend runs that one copy: the same functions on numpy arrays and on
torch tensors give the same numbers, and a change to the one copy reaches the torch path."""

from __future__ import annotations

import numpy as np
import pytest

from crbc_viz import build_graph
from crbc_viz.api import score
from crbc_viz.ops import advantage, segments
from crbc_viz.synthetic import random_mdp_batch

torch = pytest.importorskip("torch")


def _brute_zscore(x, seg, num, ddof, eps):
    """Per segment by hand: < 2 members or equal values → 0, else (x − mean) / (std + eps)."""
    out = np.zeros(len(x))
    for s in range(num):
        idx = np.flatnonzero(seg == s)
        v = x[idx]
        if len(v) < 2 or v.max() == v.min():
            continue
        out[idx] = (v - v.mean()) / (v.std(ddof=ddof) + eps)
    return out


@pytest.mark.parametrize("ddof", [0, 1])
def test_segment_zscore_is_one_function_for_numpy_and_torch(ddof):
    rng = np.random.default_rng(5)
    seg = rng.integers(0, 40, size=500)
    x = rng.normal(size=500)
    x[seg == 3] = 0.25  # a segment with no spread
    z_np = segments.segment_zscore(x, seg, 40, ddof=ddof, eps=1e-6)[0]
    z_t = segments.segment_zscore(torch.as_tensor(x), torch.as_tensor(seg), 40, ddof=ddof, eps=1e-6)[0]
    assert isinstance(z_np, np.ndarray) and isinstance(z_t, torch.Tensor)
    np.testing.assert_allclose(z_np, _brute_zscore(x, seg, 40, ddof, 1e-6), rtol=0, atol=1e-12)
    np.testing.assert_allclose(z_t.numpy(), z_np, rtol=0, atol=1e-12)
    assert np.all(z_np[seg == 3] == 0) and torch.all(z_t[torch.as_tensor(seg == 3)] == 0)


def test_float32_tensors_use_float32_round_off():
    """1 + 1 ulp of float32 is round-off on a float32 path, a real spread in float64."""
    x = np.array([1.0, 1.0 + 2**-23], dtype=np.float64)
    seg = np.zeros(2, dtype=np.int64)
    assert not segments.no_spread(x, seg, 1)[0]
    assert bool(segments.no_spread(torch.tensor(x, dtype=torch.float32), torch.as_tensor(seg), 1)[0])


def test_group_advantage_by_hand_on_numpy_and_torch():
    """Spec §1 on a hand group: outcomes 1, 0, 0, 1 → ±0.866 (mean 0.5, sample std 0.5774);
    a one-rollout group has mean 0 and std 1, as verl's (1 → 1 / (1 + eps)); an all-equal
    group → 0 whatever eps."""
    R = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    g = np.array([0, 0, 0, 0, 1, 2, 2])
    want = np.array([0.5, -0.5, -0.5, 0.5, 0, 0, 0]) / (np.sqrt(1 / 3) + 1e-6)
    want[4] = 1 / (1 + 1e-6)
    for arr in (np.asarray, torch.as_tensor):
        got = advantage.outcome_advantage(arr(R), arr(g), 3, eps=1e-6)
        got = got.numpy() if hasattr(got, "numpy") else got
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_a_change_to_the_one_copy_reaches_the_torch_backend(monkeypatch):
    """The torch GRPO twin computes nothing of its own: doubling the one copy doubles it."""
    g = build_graph(random_mdp_batch(6, 4, 12, seed=2))
    before = score(g, "grpo", backend="torch", device="cpu").advantage
    one = advantage.outcome_advantage
    monkeypatch.setattr(advantage, "outcome_advantage", lambda *a, **k: 2 * one(*a, **k))
    after = score(g, "grpo", backend="torch", device="cpu").advantage
    assert np.any(before != 0)
    np.testing.assert_allclose(after, 2 * before, rtol=0, atol=1e-12)


def _double_first(fn):
    """``fn`` with its (first) output doubled."""

    def doubled(*a, **k):
        out = fn(*a, **k)
        return (2 * out[0], *out[1:]) if isinstance(out, tuple) else 2 * out

    return doubled


#: (estimator, module attribute its one copy calls, mutation of that attribute).
MUTATIONS = [
    ("grpo", "group_advantage", _double_first),
    ("shortest_path", "segment_zscore", _double_first),
    ("gigpo", "discounted_returns", _double_first),
    ("pgpo", "anchor_potentials", _double_first),
    ("rtmc", "first_visit_mask", lambda fn: lambda graph: np.ones(graph.batch.num_steps, dtype=bool)),
    ("gated_bepo", "distinct_successors", lambda fn: lambda graph: fn(graph) + 1),
    ("graft", "segment_zscore", _double_first),
]


@pytest.mark.parametrize("name, attr, mutate", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_change_to_an_estimators_one_copy_reaches_its_torch_row(monkeypatch, name, attr, mutate):
    """Each vectorised estimator is written once (`crbc_viz.estimators.<name>`): a mutation of
    what its one copy calls moves the torch row's numbers with the numpy reference's."""
    import importlib

    module = importlib.import_module(f"crbc_viz.estimators.{name}")
    g = build_graph(random_mdp_batch(6, 4, 12, seed=2, p_self=0.3))
    before = score(g, name, backend="torch", device="cpu").advantage
    monkeypatch.setattr(module, attr, mutate(getattr(module, attr)))
    after = score(g, name, backend="torch", device="cpu")
    assert after.backend == "torch:cpu"
    assert np.max(np.abs(after.advantage - before)) > 1e-3, "the mutation did not reach the torch row"
    ref = score(g, name, backend="numpy")
    np.testing.assert_allclose(after.advantage, ref.advantage, rtol=0, atol=1e-9)
