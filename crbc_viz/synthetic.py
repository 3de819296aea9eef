"""Random-MDP rollout groups for tests and benchmarks (documented in bench/README.md).

Each group is one task: a random MDP over ``num_states`` anchors with ``num_actions``
actions per state. State 0 is the start; the goal is the last state. Action 0 of every
state tends to make progress, the others wander; transitions are stochastic with
probability ``p_stochastic``. The generator plants:

- self-loops (an action that leaves the state unchanged, probability ``p_self``),
- back edges (an action that returns to an earlier state, ``p_back``),
- dead ends (a trap state per task with only self-loops and moves to other traps),
- explicit failure exits (an action that ends the episode as a failure, ``p_fail``),
- truncation at ``max_steps``.

Rollouts follow a behaviour policy that takes the progress action with probability
``p_progress`` and a uniform action otherwise. Everything is vectorised over rollouts,
so millions of steps take seconds. Ids are deterministic given ``seed``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .data import Layout, RolloutBatch, batch_from_columns

__all__ = ["random_mdp_batch", "batch_to_rows"]


def random_mdp_batch(
    num_groups: int = 8,
    rollouts: int = 8,
    max_steps: int = 50,
    *,
    num_states: int | None = None,
    num_actions: int = 3,
    p_progress: float = 0.55,
    p_stochastic: float = 0.15,
    p_self: float = 0.15,
    p_back: float = 0.15,
    p_fail: float = 0.03,
    seed: int = 0,
    run_id: str = "synthetic",
    text: bool = True,
) -> RolloutBatch:
    """Generate ``num_groups`` × ``rollouts`` trajectories of up to ``max_steps`` steps.

    Args:
        num_states: anchors per task (default ``max(6, max_steps // 2)``).
        text: build string ids/anchor keys (False keeps categoricals only — faster for
            millions of steps; every column is still present).

    Returns:
        A `RolloutBatch`, built by `crbc_viz.data.batch_from_columns` from the generated
        columns and offsets (outcomes derived from ``done``, ``reward`` and ``success``); the
        schema path's validation pass is not spent on it.
    """
    rng = np.random.default_rng(seed)
    n_s = num_states or max(6, max_steps // 2)
    G, A = num_groups, num_actions
    nxt, fail_exit, alt = _mdp(rng, G, n_s, A, p_self=p_self, p_back=p_back, p_fail=p_fail)
    group_of = np.repeat(np.arange(G), rollouts)
    rec_state, rec_action, success, done_at = _roll_out(
        rng, (nxt, fail_exit, alt), group_of, max_steps, p_progress=p_progress, p_stochastic=p_stochastic
    )
    # Flatten rollout-major: trajectory r's steps are rec_*[0:len_r, r].
    lens = (rec_state >= 0).sum(axis=0)
    keep = lens > 0
    order_r = np.flatnonzero(keep)
    lens = lens[order_r]
    S = int(lens.sum())
    col = np.repeat(order_r, lens)
    row = np.arange(S) - np.repeat(np.cumsum(lens) - lens, lens)
    step_state = rec_state[row, col]
    step_action = rec_action[row, col]
    step_group = group_of[col]
    traj_offsets = np.r_[0, np.cumsum(lens)].astype(np.int64)
    last = traj_offsets[1:] - 1
    done = np.zeros(S, dtype=bool)
    done[last] = done_at[order_r] >= 0
    traj_success = success[order_r]
    reward = np.zeros(S)
    reward[last] = traj_success.astype(np.float64)
    # Anchor hash: (state + 1) is unique within a group; merging is group-scoped anyway.
    step_hash = (step_state + 1).astype(np.uint64)
    traj_group = group_of[order_r]
    group_traj_offsets = np.r_[0, np.cumsum(np.bincount(traj_group, minlength=G))].astype(np.int64)
    traj_local = np.arange(len(order_r)) - group_traj_offsets[traj_group]
    group_ids = np.array([f"task-{i:05d}" for i in range(G)], dtype=object)
    traj_names = np.array([f"r{i}" for i in range(int(traj_local.max(initial=0)) + 1)], dtype=object)
    action_names = np.array([f"a{i}" for i in range(A)], dtype=object)
    state_keys = np.array([f"{i + 1:016x}" for i in range(n_s)], dtype=object)
    step_traj = np.repeat(np.arange(len(order_r)), lens)

    def cat(codes, names):
        return pd.Categorical.from_codes(codes, categories=names) if not text else names[codes]

    steps = pd.DataFrame(
        {
            "run_id": pd.Categorical.from_codes(np.zeros(S, dtype=np.int8), categories=[run_id]),
            "train_step": np.zeros(S, dtype=np.int64),
            "group_id": cat(step_group, group_ids),
            "traj_id": cat(traj_local[step_traj], traj_names),
            "step_idx": row.astype(np.int64),
            "reward": reward,
            "action": cat(step_action, action_names),
            "anchor_key": cat(step_state, state_keys),
            "anchor_obs": cat(step_state, np.array([f"state {i}" for i in range(n_s)], dtype=object)),
            "done": done,
            "success": np.repeat(traj_success, lens),
        }
    )
    groups = pd.DataFrame(
        {"run_id": [run_id] * G, "train_step": np.zeros(G, dtype=np.int64), "group_id": group_ids}
    )
    return batch_from_columns(
        steps,
        layout=Layout.of_lengths(lens, traj_group, G),
        step_anchor_hash=step_hash,
        groups=groups,
        source=f"<{run_id}>",
    )


def _mdp(rng, G: int, n_s: int, A: int, *, p_self: float, p_back: float, p_fail: float):
    """Each task's MDP ``[G, n_s, A]``: the primary successor, whether the action is a failure
    exit, and the alternative successor a stochastic transition takes."""
    goal = n_s - 1
    trap = n_s - 2 if n_s >= 4 else -1
    # Primary successor per (group, state, action).
    nxt = rng.integers(0, n_s, size=(G, n_s, A))
    forward = np.minimum(np.arange(n_s)[None, :] + rng.integers(1, 3, size=(G, n_s)), goal)
    nxt[:, :, 0] = forward
    u = rng.random((G, n_s, A))
    nxt = np.where(u < p_self, np.arange(n_s)[None, :, None], nxt)
    back = rng.integers(0, np.maximum(np.arange(n_s), 1)[None, :, None], size=(G, n_s, A))
    nxt = np.where((u >= p_self) & (u < p_self + p_back), back, nxt)
    fail_exit = rng.random((G, n_s, A)) < p_fail
    fail_exit[:, :, 0] = False
    if trap >= 0:
        # Dead end: from the trap state every action stays or moves between trap and itself.
        nxt[:, trap, :] = trap
        fail_exit[:, trap, :] = False
    alt = rng.integers(0, n_s, size=(G, n_s, A))
    return nxt, fail_exit, alt


def _roll_out(
    rng, mdp: tuple, group_of: np.ndarray, max_steps: int, *, p_progress: float, p_stochastic: float
):
    """The behaviour policy run on every rollout at once (rollout ``r`` in task ``group_of[r]``):
    the states and actions ``[max_steps, R]`` (state -1 past the end), success and the step
    each rollout ended at (-1: truncated)."""
    nxt, fail_exit, alt = mdp
    A, goal = nxt.shape[2], nxt.shape[1] - 1
    R = len(group_of)
    state = np.zeros(R, dtype=np.int64)
    alive = np.ones(R, dtype=bool)
    success = np.zeros(R, dtype=bool)
    done_at = np.full(R, -1, dtype=np.int64)
    rec_state = np.full((max_steps, R), -1, dtype=np.int64)
    rec_action = np.zeros((max_steps, R), dtype=np.int64)
    for t in range(max_steps):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        g, s = group_of[idx], state[idx]
        act = np.where(rng.random(idx.size) < p_progress, 0, rng.integers(0, A, idx.size))
        rec_state[t, idx] = s
        rec_action[t, idx] = act
        x = nxt[g, s, act]
        x = np.where(rng.random(idx.size) < p_stochastic, alt[g, s, act], x)
        failed = fail_exit[g, s, act]
        reached = (x == goal) & ~failed
        ended = failed | reached
        success[idx[reached]] = True
        done_at[idx[ended]] = t
        alive[idx[ended]] = False
        state[idx] = x
    return rec_state, rec_action, success, done_at


def batch_to_rows(batch: RolloutBatch) -> list[dict]:
    """The batch as canonical step rows (for writing test files)."""
    cols = [
        c
        for c in (
            "run_id",
            "train_step",
            "group_id",
            "traj_id",
            "step_idx",
            "reward",
            "action",
            "anchor_obs",
            "done",
            "success",
        )
        if c in batch.steps
    ]
    df = batch.steps[cols].astype(object)
    return [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
        for row in df.to_dict(orient="records")
    ]
