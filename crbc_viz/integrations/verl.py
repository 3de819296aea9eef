"""verl (PyPI ``verl`` 0.9.x): step credit as a registered advantage estimator.

``pip install crbc-viz`` next to verl registers ``crbc`` and ``crbc_viz.<name>`` for every
registry estimator (``crbc_viz.grpo``, ``crbc_viz.gigpo``, …) through the ``verl.plugins``
entry point (`crbc_viz.integrations.verl_plugin`, loaded by ``import verl``; no
``VERL_USE_EXTERNAL_MODULES`` needed). Select one with ``algorithm.adv_estimator=crbc`` and
pass hyper-parameters as ``+algorithm.crbc_params.beta=0.95`` (any of the estimator's params).
This module itself imports no verl.

**Rows are whole trajectories.** A verl batch row is one multi-turn rollout; its response holds
every assistant turn, with the environment's (tool) tokens between them masked out by
``response_mask``. So, per row:

- steps: each maximal run of ``response_mask == 1`` is one environment step (one assistant
  turn), in order. Where turns are not delimited by the mask, give
  ``non_tensor_batch["crbc_step_starts"]``: per row, the response-token offset where each step
  starts (a step runs to the next start).
- a step's reward: the sum of ``token_level_rewards`` over its tokens (a token belongs to the
  last step started at or before it), so an outcome reward on the last token is the last
  step's reward.

What the user adds to ``non_tensor_batch`` (in an agent loop: ``AgentLoopOutput.extra_fields``,
which verl copies into ``non_tensor_batch`` key by key):

- ``crbc_anchors`` (required): per row, a list with the history-free environment state before
  each step (one per step: the text observation, a board string, a dict, an array); a row
  given as one string (not a list) raises, naming the row, rather than be split into characters.
- ``crbc_actions`` (optional): per row, a list with each step's action (e.g. the parsed tool
  call); else actions are keyed by their transition (next anchor / SUCCESS / FAILURE).
- ``crbc_success`` (optional): per row, whether the rollout succeeded, a bool or 0/1 (NaN,
  None or text raise naming the row: never read as a success or a failure); else its summed
  reward > 0.
- ``crbc_step_starts`` (optional): per row, a list of integer token offsets (see above).

verl 0.9.1 hands an estimator only ``token_level_rewards``, ``response_mask``, ``index`` (uid)
and ``config`` — ``non_tensor_batch`` only to ``gdpo``. `tests/trainer_patches/verl-0.9.1.patch`
is the one-line change to ``verl/trainer/ppo/ray_trainer.py`` that also passes it to a function
marked ``needs_non_tensor_batch`` (ours are); without it the estimator raises, saying so.
"""

from __future__ import annotations

from .._extras import require
from ._core import (
    IntegrationInputError,
    Turns,
    as_device,
    rows_as_steps,
    score_steps,
    token_tensors,
    with_anchor_rule,
)

__all__ = [
    "compute_advantage",
    "make_estimator",
    "ANCHORS",
    "ACTIONS",
    "SUCCESS",
    "STEP_STARTS",
    "PARAMS_KEY",
]

ANCHORS, ACTIONS, SUCCESS, STEP_STARTS = "crbc_anchors", "crbc_actions", "crbc_success", "crbc_step_starts"
#: ``algorithm.<PARAMS_KEY>``: the estimator's hyper-parameters in verl's config.
PARAMS_KEY = "crbc_params"


def _per_row(nt: dict, key: str, B: int, required: bool):
    if key not in nt or nt[key] is None:
        if required:
            raise IntegrationInputError(
                f"non_tensor_batch has no '{key}': put, per row, a list with the history-free "
                f"state before each step there (an agent loop's extra_fields['{key}'])"
            )
        return None
    v = nt[key]
    if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__len__"):
        raise IntegrationInputError(
            f"non_tensor_batch['{key}']: expected one entry per row, got {type(v).__name__}"
        )
    if len(v) != B:
        raise IntegrationInputError(f"non_tensor_batch['{key}']: {len(v)} entries for {B} rows")
    return v


@with_anchor_rule
def compute_advantage(
    token_level_rewards,
    response_mask,
    index=None,
    config=None,
    *,
    non_tensor_batch=None,
    estimator: str = "crbc",
    device=None,
    **params,
):
    """Step credit of a verl batch (rows = whole trajectories), broadcast over each step's tokens.

    Args:
        token_level_rewards: ``[B, L]`` tensor.
        response_mask: ``[B, L]``: 1 on the model's tokens, 0 on padding and env/tool tokens.
        index: ``[B]`` the group uid (``non_tensor_batch["uid"]``).
        config: verl's ``algorithm`` config; ``config.crbc_params`` (a mapping), if present,
            holds the estimator's hyper-parameters (``params`` given here win).
        non_tensor_batch: the batch's ``non_tensor_batch`` with ``crbc_anchors`` (and
            optionally ``crbc_actions``, ``crbc_success``, ``crbc_step_starts``; module doc).
        estimator: a registry name.
        device: where the result goes; default the rewards' device.
        anchor_rule: how anchors are matched (README "Anchor rules"): an `AnchorRule`, a rule
            name (``"rtmc"``) or `make_rule`'s keywords (``{"name": "similar", "threshold":
            0.9}``); None keys them exactly, as ``crbc-viz score`` without ``--anchor-rule``.

    Returns:
        ``(advantages, returns)``: the same ``[B, L]`` tensor, zero outside ``response_mask``.
        A token's value is the ``advantage`` ``crbc-viz score`` gives its step on the canonical
        rows (group = uid, trajectory = row, step = turn).

    Raises:
        IntegrationInputError: no ``non_tensor_batch`` or ``crbc_anchors``; a ``response_mask``
            not of the rewards' ``[B, L]`` shape or not 0/1; a non-finite reward; a NaN or
            non-UTF-8 uid; per row, an entry that is not a list, or whose length is not the
            row's step count; a ``crbc_success`` that is not a flag; ``crbc_step_starts`` that
            are not increasing integer offsets (each naming the key and the row).
    """
    torch = require("torch", "the trainer adapters")

    if non_tensor_batch is None:
        raise IntegrationInputError(
            "verl passed no non_tensor_batch to this estimator: verl 0.9.1 passes it only to "
            "'gdpo'. Apply tests/trainer_patches/verl-0.9.1.patch (one line in "
            "verl/trainer/ppo/ray_trainer.py compute_advantage), or call this function with "
            "non_tensor_batch=data.non_tensor_batch"
        )
    rewards, mask = token_tensors(token_level_rewards, response_mask)
    B = rewards.shape[0]
    nt = non_tensor_batch
    if index is None:
        index = nt.get("uid")
    if index is None:
        raise IntegrationInputError(
            "no group index: pass index=uid (verl does when non_tensor_batch has 'uid')"
        )
    anchors = _per_row(nt, ANCHORS, B, True)
    acts = _per_row(nt, ACTIONS, B, False)
    succ = _per_row(nt, SUCCESS, B, False)
    starts = _per_row(nt, STEP_STARTS, B, False)
    cfg_params = {}
    if config is not None and hasattr(config, "get") and config.get(PARAMS_KEY) is not None:
        cfg_params = {str(k): v for k, v in dict(config.get(PARAMS_KEY)).items()}
    turns = Turns.of(mask, starts, what=STEP_STARTS)
    steps = rows_as_steps(
        index,
        turns.sums(rewards),
        turns.n_steps,
        anchors,
        actions=acts,
        success=succ,
        source="verl batch",
        names=(ANCHORS, ACTIONS, SUCCESS),
    )
    dev = as_device(device, default=rewards.device)
    step_adv = score_steps(steps, estimator, device=dev, **{**cfg_params, **params})
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    adv = turns.spread(step_adv, mask.to(dev), dtype)
    return adv, adv


def make_estimator(estimator: str):
    """A verl-signature function for ``estimator`` (what the plugin registers)."""

    def fn(token_level_rewards, response_mask, index=None, config=None, non_tensor_batch=None, **kw):
        kw = {k: v for k, v in kw.items() if k not in ("reward_baselines", "batch")}
        return compute_advantage(
            token_level_rewards,
            response_mask,
            index,
            config,
            non_tensor_batch=non_tensor_batch,
            estimator=estimator,
            **kw,
        )

    fn.__name__ = f"compute_{estimator.replace('.', '_')}_advantage"
    fn.__qualname__ = fn.__name__
    fn.__doc__ = f"crbc-viz '{estimator}' step credit for verl (see crbc_viz.integrations.verl)."
    fn.needs_non_tensor_batch = True
    fn.crbc_viz_estimator = estimator
    return fn
