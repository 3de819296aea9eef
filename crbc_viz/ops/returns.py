"""Per-rollout outcomes, per-step rewards and discounted suffix sums within trajectories.

`discounted_returns` takes numpy arrays and torch tensors (`crbc_viz.ops.xp`): the numpy
recurrence by position for the one, blocked Toeplitz matmuls on the tensor's device for the
other (the one place the two libraries need different algorithms)."""

from __future__ import annotations

import numpy as np
from array_api_compat import is_torch_array

from ..errors import EstimatorInputError
from ..graph import AnchorGraph
from .xp import asarray_like, namespace

__all__ = [
    "trajectory_outcome",
    "step_rewards",
    "discounted_suffix_sums",
    "discounted_returns",
    "blocked_suffix_sums",
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


def discounted_returns(graph: AnchorGraph, reward, gamma: float):
    """R_{i,t} = Σ_{l≥t} γ^(l−t) · r_{i,l} within each trajectory (backwards) ``[S]``.

    A numpy ``reward`` goes through `discounted_suffix_sums`; a torch tensor through
    `blocked_suffix_sums` on its device, in its dtype."""
    if is_torch_array(reward):
        return blocked_suffix_sums(graph, reward, gamma)
    return discounted_suffix_sums(reward, graph.batch.traj_offsets, gamma)


#: Positions per block of `blocked_suffix_sums` (a [B, B] Toeplitz matmul per block).
BLOCK = 64


def blocked_suffix_sums(graph: AnchorGraph, x, decay: float):
    """Σ_{l≥t} decay^(l−t)·x_l within each trajectory ``[S]``, for a tensor ``x`` on a device.

    Each trajectory is cut into blocks of `BLOCK` positions: suffix sums inside a block are
    one matmul of the ``[blocks, B]`` padded values with a ``[B, B]`` discount Toeplitz
    matrix; the sums of the blocks after it are carried back one block index at a time,
    vectorised over trajectories. Memory is O(steps + trajectories·B), whatever the length;
    no per-step Python loop."""
    xp = namespace(x)
    b = graph.batch
    if b.num_steps == 0:
        return xp.asarray(x, copy=True)
    dev, B = x.device, BLOCK
    nblk = (b.traj_len + B - 1) // B
    blk_off = np.r_[0, np.cumsum(nblk)].astype(np.int64)
    pos = b.step_pos
    row = asarray_like(blk_off[:-1][b.step_traj] + pos // B, x)
    col = asarray_like(pos % B, x)
    pad = xp.zeros((int(blk_off[-1]), B), dtype=x.dtype, device=dev)
    pad[row, col] = x
    idx = xp.arange(B, device=dev)
    diff = idx[:, None] - idx[None, :]  # l − t
    dec = xp.asarray(float(decay), dtype=x.dtype, device=dev)
    zero = xp.zeros((), dtype=x.dtype, device=dev)
    U = xp.where(diff >= 0, dec ** xp.astype(xp.where(diff >= 0, diff, 0), x.dtype), zero)
    local = pad @ U  # suffix sums within each block
    carry = xp.zeros(int(blk_off[-1]) + 1, dtype=x.dtype, device=dev)  # sum from a block's start on
    decB = dec**B
    for j in range(int(nblk.max()) - 1, -1, -1):  # block index, last first (not steps)
        t = np.flatnonzero(nblk > j)
        ids = asarray_like(blk_off[t] + j, x)
        nxt = xp.where(asarray_like(nblk[t] > j + 1, x), carry[ids + 1], zero)
        carry[ids] = local[ids, 0] + decB * nxt
    last_blk = asarray_like(pos // B == nblk[b.step_traj] - 1, x)
    tail = xp.where(last_blk, zero, dec ** xp.astype(B - col, x.dtype) * carry[row + 1])
    return local[row, col] + tail


def group_steps(graph: AnchorGraph) -> np.ndarray:
    """Steps of each group ``[G]``: the ``terms`` of `crbc_viz.ops.segments.roundoff_tol` for
    values that come out of a group's closure solve or its discounted sums."""
    b = graph.batch
    return np.diff(b.traj_offsets[b.group_traj_offsets]).astype(np.float64)
