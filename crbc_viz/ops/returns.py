"""Per-rollout outcomes, per-step rewards and discounted suffix sums within trajectories."""

from __future__ import annotations

import numpy as np

from ..errors import EstimatorInputError
from ..graph import AnchorGraph

__all__ = [
    "trajectory_outcome",
    "step_rewards",
    "discounted_suffix_sums",
    "discounted_returns",
    "group_steps",
]


def trajectory_outcome(graph: AnchorGraph, outcome: str = "success") -> np.ndarray:
    """R_i per trajectory ``[T]``: success indicator or episode return."""
    b = graph.batch
    if outcome == "success":
        return b.traj_success.astype(np.float64)
    if outcome == "return":
        return b.traj_return.astype(np.float64)
    raise EstimatorInputError(f"outcome must be 'success' or 'return', got {outcome!r}")


def step_rewards(graph: AnchorGraph, kind: str = "env", outcome: str = "success") -> np.ndarray:
    """Per-step rewards ``[S]``: the logged ``reward`` column ('env') or R_i on each
    trajectory's last step and 0 elsewhere ('outcome')."""
    b = graph.batch
    if kind == "env":
        return np.array(b.step_column("reward"), dtype=np.float64)  # a copy
    if kind == "outcome":
        r = np.zeros(b.num_steps)
        r[b.traj_offsets[1:] - 1] = trajectory_outcome(graph, outcome)
        return r
    raise EstimatorInputError(f"step_reward must be 'env' or 'outcome', got {kind!r}")


def discounted_suffix_sums(x: np.ndarray, offsets: np.ndarray, gamma: float) -> np.ndarray:
    """y_t = Σ_{l ≥ t} γ^(l−t) · x_l within each segment ``[offsets[i], offsets[i+1])``.

    Computed backwards by position, every segment at once (one numpy step per position of the
    longest segment, no γ^(−t) rescaling, so any γ in [0, 1] is exact to rounding); a batch
    of a few very long segments falls back to one pass over the steps.
    """
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    offsets = np.asarray(offsets, dtype=np.int64)
    if x.size == 0:
        return out
    lengths = np.diff(offsets)
    longest = int(lengths.max())
    if longest * 16 > x.size:  # few, long segments: the plain recurrence is cheaper
        for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            acc = 0.0
            for s in range(hi - 1, lo - 1, -1):
                acc = out[s] + gamma * acc
                out[s] = acc
        return out
    seg = np.repeat(np.arange(len(lengths)), lengths)
    back = offsets[1:][seg] - 1 - np.arange(x.size)  # steps left after each step
    order = np.argsort(back, kind="stable")
    starts = np.searchsorted(back[order], np.arange(longest + 1))
    for k in range(1, longest):
        idx = order[starts[k] : starts[k + 1]]
        out[idx] += gamma * out[idx + 1]
    return out


def discounted_returns(graph: AnchorGraph, reward: np.ndarray, gamma: float) -> np.ndarray:
    """R_{i,t} = Σ_{l≥t} γ^(l−t) · r_{i,l} within each trajectory (backwards) ``[S]``."""
    return discounted_suffix_sums(reward, graph.batch.traj_offsets, gamma)


def group_steps(graph: AnchorGraph) -> np.ndarray:
    """Steps of each group ``[G]``: the ``terms`` of `crbc_viz.ops.segments.roundoff_tol` for
    values that come out of a group's closure solve or its discounted sums."""
    b = graph.batch
    return np.diff(b.traj_offsets[b.group_traj_offsets]).astype(np.float64)
