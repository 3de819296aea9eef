"""The ``ops`` primitives against independent oracles: brute-force double loops, per-segment
``numpy`` statistics and ESTIMATORS.md's hand-computed toy vector (never the primitives' own steps)."""

from pathlib import Path

import numpy as np
import pytest

import crbc_viz
from crbc_viz.ops import (
    discounted_suffix_sums,
    group_advantage,
    mean_backup_values,
    segment_stats,
    segment_zscore,
    successor_values,
    trajectory_outcome,
)

TOY = Path(__file__).resolve().parents[2] / "sample_rollouts" / "toy" / "toy_group.jsonl"


def brute_suffix(x, offsets, gamma):
    out = np.zeros(len(x))
    for lo, hi in zip(offsets[:-1], offsets[1:]):
        for t in range(lo, hi):
            out[t] = sum(gamma ** (l - t) * x[l] for l in range(t, hi))
    return out


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.97, 1.0])
@pytest.mark.parametrize(
    "lengths",
    [
        [1, 3, 7, 2, 5] * 20,  # many short: the by-position path
        [200, 1, 3],  # one long: the recurrence fallback
        [4],
    ],
)
def test_discounted_suffix_sums_equal_the_double_loop(gamma, lengths):
    rng = np.random.default_rng(len(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    x = rng.normal(size=offsets[-1])
    np.testing.assert_allclose(
        discounted_suffix_sums(x, offsets, gamma), brute_suffix(x, offsets, gamma), rtol=1e-12, atol=1e-12
    )


def test_discounted_suffix_sums_of_nothing_is_empty():
    assert discounted_suffix_sums(np.zeros(0), np.array([0]), 0.9).shape == (0,)


def test_segment_stats_and_zscore_match_per_segment_numpy():
    rng = np.random.default_rng(3)
    seg = rng.integers(0, 9, size=300)
    seg[seg == 4] = 5  # segment 4 empty
    seg[np.flatnonzero(seg == 7)[1:]] = 8  # segment 7 has one member
    x = rng.normal(size=300)
    x[seg == 2] = 1.25  # segment 2 has no spread
    cnt, mean, std = segment_stats(x, seg, 9)
    z, *_ = segment_zscore(x, seg, 9)
    for k in range(9):
        m = seg == k
        assert cnt[k] == m.sum()
        if m.sum() == 0:
            assert mean[k] == 0 and std[k] == 0
            continue
        assert mean[k] == pytest.approx(x[m].mean(), abs=1e-12)
        if m.sum() >= 2:
            assert std[k] == pytest.approx(x[m].std(ddof=1), abs=1e-12)
        want = (
            np.zeros(m.sum())
            if m.sum() < 2 or np.ptp(x[m]) == 0
            else (x[m] - x[m].mean()) / (x[m].std(ddof=1) + 1e-6)
        )
        np.testing.assert_allclose(z[m], want, atol=1e-12)


def test_weighted_segment_stats_equal_repeating_each_element():
    x, seg, w = np.array([1.0, 0.0, 3.0]), np.array([0, 0, 1]), np.array([3, 1, 2])
    cnt, mean, std = segment_stats(x, seg, 2, ddof=0, weights=w)
    rep = np.repeat(x[:2], w[:2])
    assert cnt.tolist() == [4, 2]
    assert mean[0] == pytest.approx(rep.mean()) and std[0] == pytest.approx(rep.std())


def test_group_advantage_is_the_toy_vector():
    graph = crbc_viz.build_graph(crbc_viz.load_rollouts(TOY))
    np.testing.assert_allclose(group_advantage(graph), [0.866, -0.866, -0.866, 0.866], atol=5e-4)
    # Dr.GRPO: no division; cross_steps: lengths 3,3,4,5 weigh the mean to 8/15.
    np.testing.assert_allclose(group_advantage(graph, norm="mean"), [0.5, -0.5, -0.5, 0.5])
    R = trajectory_outcome(graph)
    assert R.tolist() == [1.0, 0.0, 0.0, 1.0]
    adv = group_advantage(graph, stats="cross_steps", norm="mean")
    np.testing.assert_allclose(adv, R - 8 / 15)


def test_mean_backup_values_solve_the_toy_bellman_equations():
    """V(s) = γ Σ N(s→x)/N(s) V(x): each node's value is the mean of its visits' successor values."""
    graph = crbc_viz.build_graph(crbc_viz.load_rollouts(TOY))
    V, res = mean_backup_values(graph, 1.0)
    assert res < 1e-12
    succ = successor_values(graph, V)
    # A step's successor value is 1 on a success exit, 0 on a failure exit.
    last = graph.batch.traj_offsets[1:] - 1
    np.testing.assert_array_equal(succ[last], trajectory_outcome(graph))
    # Every node's value is the visit-weighted mean of its successors' values (γ = 1).
    for n in range(graph.num_nodes):
        steps = np.flatnonzero(graph.step_node == n)
        assert V[n] == pytest.approx(succ[steps].mean(), abs=1e-12)
    assert np.all((V >= 0) & (V <= 1))
