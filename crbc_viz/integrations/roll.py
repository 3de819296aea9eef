"""ROLL (github.com/alibaba/ROLL, agentic pipeline): step credit as ``response_level_rewards``.

ROLL has no estimator registry: `tests/trainer_patches/roll-8eb27cc.patch` adds ``"crbc"`` to
the ``adv_estimator`` literal (and to the estimators that need old log-probs, as GiGPO does), a
``crbc_params`` config field, and a branch in ``compute_response_level_rewards`` that calls
`response_level_advantages` below; ``compute_advantage`` then spreads each row's value over its
response tokens as it does for GiGPO (``compute_reinforce_return``; keep ``gamma`` = 1 so every
token of a step gets the step's credit).

ROLL's agentic batch has one row per environment step with ``traj_group_id`` (the group),
``traj_id``, ``step``, ``state_hash`` (the anchor) and ``step_scores`` (the step's reward) in
``non_tensor_batch``; ``batch_adjust_mode="copy"`` appends copies of rows. Statistics are
computed on the unique (traj_id, step) rows and every row gets its step's credit. Success:
``non_tensor_batch["success"]`` per row if present (each a bool or 0/1: NaN, None or text such
as ``"False"`` raise naming the row, never read as a success or a failure), else
``episode_scores`` > 0 if present (finite numbers), else the trajectory's summed
``step_scores`` > 0. Actions: keyed by the transition (ROLL's rows carry no parsed action),
unless ``non_tensor_batch["action"]`` is present.
"""

from __future__ import annotations

from .._extras import require
from ._core import (
    IntegrationInputError,
    canonical_steps,
    row_flags,
    row_numbers,
    score_steps,
    with_anchor_rule,
)

__all__ = ["response_level_advantages", "REQUIRED_KEYS"]

REQUIRED_KEYS = ("traj_group_id", "traj_id", "step", "state_hash", "step_scores")


@with_anchor_rule
def response_level_advantages(batch, *, estimator: str = "crbc", device=None, **params):
    """``[B]`` float32 tensor of step credit for a ROLL ``DataProto`` (or anything with a
    ``non_tensor_batch`` dict and a ``batch`` of tensors), on the batch's device.
    ``anchor_rule=`` (keyword): how anchors are matched, as in
    `crbc_viz.integrations.verl_agent.compute_advantage`.

    Raises:
        IntegrationInputError: a required key is missing, conflicting duplicate rows, gaps,
            a ``success`` that is not a flag, a score that is not a finite number (each naming
            the key and the row).
    """
    torch = require("torch", "the trainer adapters")

    nt = batch.non_tensor_batch
    missing = [k for k in REQUIRED_KEYS if k not in nt]
    if missing:
        raise IntegrationInputError(
            f"ROLL batch: non_tensor_batch has no {', '.join(missing)} (the "
            f"agentic env manager writes them per step)"
        )
    n = len(nt["traj_group_id"])
    success = None
    if "success" in nt:
        success = row_flags(nt["success"], "non_tensor_batch['success']", n, "ROLL batch")
    elif "episode_scores" in nt:
        success = row_numbers(nt["episode_scores"], "non_tensor_batch['episode_scores']", n, "ROLL batch") > 0
    steps = canonical_steps(
        nt["traj_group_id"],
        nt["traj_id"],
        nt["step"],
        nt["state_hash"],
        row_numbers(nt["step_scores"], "non_tensor_batch['step_scores']", n, "ROLL batch"),
        actions=nt.get("action"),
        success=success,
        source="ROLL batch",
    )
    if device is None:
        try:
            device = next(iter(batch.batch.values())).device
        except (AttributeError, StopIteration, TypeError):
            device = None
    return score_steps(steps, estimator, device=device, **params).to(torch.float32)
