"""verl-agent (github.com/langfengQ/verl-agent): CRBC — or any registry estimator — in place of
GiGPO, with the same inputs as ``gigpo.core_gigpo.compute_gigpo_outcome_advantage``.

verl-agent has no estimator registry; `tests/trainer_patches/verl-agent-796ed31.patch` adds
``crbc`` to its ``AdvantageEstimator`` enum and the no-critic list, a branch in
``ray_trainer.compute_advantage`` that calls `compute_advantage` below, and one line in the
rollout loop that records each step's index (``step``), which verl-agent's batch lacks.

Its batch has one row per environment step, with the episode's uid (``uid``, the group), the
trajectory's uid (``traj_uid``) and the history-free observation (``anchor_obs``). By the
time advantages are computed, ``adjust_batch(mode="copy")`` has appended copies of random rows
(to make the batch divisible by the data-parallel size) and ``_balance_batch`` has reordered
the rows. Here the statistics are computed on the unique (traj_uid, step) rows — exact copies
are dropped, differing copies raise — and every row, copies included, gets its step's credit.
"""

from __future__ import annotations

from .._extras import require
from ._core import (
    any_per_trajectory,
    as_device,
    broadcast,
    canonical_steps,
    masked_row_sum,
    score_steps,
    token_tensors,
    with_anchor_rule,
)

__all__ = ["compute_advantage"]


@with_anchor_rule
def compute_advantage(
    token_level_rewards,
    response_mask,
    anchor_obs,
    index,
    traj_index,
    step_index,
    *,
    actions=None,
    success=None,
    won=None,
    estimator: str = "crbc",
    device=None,
    row_reward: str = "step",
    **params,
):
    """Step credit of a verl-agent batch, broadcast over each row's response tokens.

    Args:
        token_level_rewards: ``[B, L]`` tensor; a row's reward is its sum over the response
            mask (verl-agent puts the reward on the step's last response token).
        response_mask: ``[B, L]`` 0/1 tensor of the row's response tokens.
        anchor_obs: ``[B]`` numpy object array: the history-free observation of each step
            (``non_tensor_batch["anchor_obs"]``; strings, lists, dicts or arrays — hashed as
            ``crbc-viz`` hashes ``anchor_obs``; merged only within a group).
        index: ``[B]`` group uid (``non_tensor_batch["uid"]``).
        traj_index: ``[B]`` trajectory uid (``non_tensor_batch["traj_uid"]``).
        step_index: ``[B]`` int: the step's position in its trajectory, from 0 (the rollout
            loop's ``_step``; the patch stores it as ``non_tensor_batch["step"]``). Required:
            rows arrive shuffled, so without it the order cannot be recovered — None raises.
        actions: optional ``[B]`` action of each step (e.g. the env projection's action
            string); compared as text. When absent, a step's action is keyed by its transition:
            the next step's anchor, or SUCCESS / FAILURE after the trajectory's last step — two
            rollouts that left an anchor for the same next state took the same action (exact
            for deterministic environments such as Sokoban; distinct actions with one effect
            are merged).
        success: optional ``[B]`` flags (bools or 0/1; NaN, None or text raise naming the
            row): the row's trajectory succeeded (e.g. the env's ``won``). Else a trajectory
            succeeded when its summed reward (over its unique steps) is > 0; with
            ``row_reward="episode"``, when the episode return is > 0.
        won: optional ``[B]`` flags (bools or 0/1): the env's per-step ``won`` flag (the patch
            records it); a trajectory succeeded when any of its steps has it. Ignored when
            ``success`` is given.
        estimator: any registry name (``crbc_viz.estimators.registry.names()``).
        device: where the result goes; default ``token_level_rewards.device``. On CUDA,
            ``crbc`` runs fused on the device; on the CPU, the compiled numba engine.
        row_reward: ``"step"`` (default): a row's reward is its step's reward.
            ``"episode"``: every row carries its whole episode's return, as verl-agent's
            ``EpisodeRewardManager`` writes ``episode_rewards`` (the rows of one trajectory
            must then agree — not so with ``use_kl_in_reward``, whose per-token KL penalty
            makes the row sums differ: pass ``success`` / ``won`` and keep ``"step"`` there);
            the canonical rows put it on the last step.
        **params: the estimator's hyper-parameters (e.g. ``beta=0.98``, ``w_step=5.0``).
        anchor_rule: how anchors are matched (README "Anchor rules"): an `AnchorRule`, a rule
            name (``"rtmc"``) or `make_rule`'s keywords (``{"name": "similar", "threshold":
            0.9}``); None keys them exactly, as ``crbc-viz score`` without ``--anchor-rule``.

    Returns:
        ``(advantages, returns)``: both the same ``[B, L]`` tensor (no critic, as GiGPO),
        in ``token_level_rewards``' float dtype, zero outside ``response_mask``. Each row's
        value equals ``crbc-viz score``'s ``advantage`` for that (group, trajectory, step) on
        the de-duplicated canonical rows (`crbc_viz.integrations._core.Steps.canonical_rows`).

    Raises:
        IntegrationInputError: no step index, conflicting duplicate rows, gaps in a
            trajectory's steps, success differing within a trajectory, a success / won that is
            not a flag, a ``response_mask`` not of the rewards' ``[B, L]`` shape or not 0/1,
            a non-finite reward, a NaN or non-UTF-8 id, a step index out of range.
    """
    torch = require("torch", "the trainer adapters")

    rewards, mask = token_tensors(token_level_rewards, response_mask)
    row_reward_sum = masked_row_sum(rewards, mask)
    if success is None and won is not None:
        success = any_per_trajectory(index, traj_index, won, name="won", source="verl-agent batch")
    steps = canonical_steps(
        index,
        traj_index,
        step_index,
        anchor_obs,
        row_reward_sum,
        actions=actions,
        success=success,
        row_reward=row_reward,
        source="verl-agent batch",
    )
    dev = as_device(device, default=rewards.device)
    row_adv = score_steps(steps, estimator, device=dev, **params)
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    adv = broadcast(row_adv, mask.to(dev), dtype=dtype)
    return adv, adv
