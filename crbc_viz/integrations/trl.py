"""TRL: ``CreditGRPOTrainer``, a ``trl.GRPOTrainer`` whose advantages are step credit from any
registry estimator (read from TRL 1.16's ``_generate_and_score_completions`` contract).

    from crbc_viz.integrations.trl import CreditGRPOTrainer
    trainer = CreditGRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...),
                                train_dataset=..., credit_estimator="crbc", credit_params={"beta": 0.98},
                                credit_steps=my_steps)          # or anchors in the dataset rows

TRL is imported when ``CreditGRPOTrainer`` is first looked up (``import crbc_viz`` or this
module alone import no trainer).

How it works: TRL scores the completions as usual (its rewards are gathered across processes
before this runs); the trainer then replaces ``output["advantages"]`` (``[B]``) by a
``[B, T]`` tensor: each completion token carries the advantage of the environment step it
belongs to. A completion is one trajectory; the ``num_generations`` completions of a prompt are
its group. A completion's reward (TRL's weighted sum of the reward functions, NaN ignored) is
its last step's reward; it succeeded when that is > 0 unless ``success`` says otherwise.
Completions every reward function returned None for get advantage 0, as in TRL.

Steps of a completion, per completion, from ``credit_steps(inputs=, prompts=, completions=,
completion_ids=)`` (a callable returning one dict per local completion) or else from the
dataset row / ``rollout_func`` extra fields of the completion (``crbc_anchors``,
``crbc_actions``, ``crbc_success``, ``crbc_step_starts``):

- ``anchors``: a list with the history-free state before each step (required for multi-step
  credit; without any, a completion is one step from its prompt, the prompt being the anchor);
  one string instead of a list raises, naming the completion, rather than be split into
  characters;
- ``actions`` (optional): a list with each step's action (else keyed by the transition);
- ``success`` (optional): a bool or 0/1 (NaN or text raise naming the completion; None means
  not given: the reward decides);
- ``starts`` (optional): integer token offsets in the completion where each step starts; default: runs
  of TRL's ``tool_mask`` (each model turn between tool results is a step) when tools are used,
  else the whole completion is one step.

The statistics of a group need all its completions, which may sit on several processes: each
process gathers every process's step lists (``accelerate.utils.gather_object``), computes the
credit of the whole generation batch (identical on every process) and keeps its own slice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["CreditGRPOTrainer", "build_trainer_class", "completion_advantages"]  # noqa: F822 (module __getattr__)

_CLASS = None


def __getattr__(name: str):
    if name == "CreditGRPOTrainer":
        return build_trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _steps_list(value, what: str, i: int, *, optional: bool = False):
    """A completion's per-step list (anchors or actions) as a list; a string, a dict or a
    scalar raises naming the completion (``list("abc")`` would make three steps)."""
    import numpy as np

    from ._core import IntegrationInputError

    if value is None and optional:
        return None
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise IntegrationInputError(
            f"TRL completion {i}: {what} is {type(value).__name__} {value!r:.40}; expected a list "
            f"with one entry per step"
        )
    return list(value)


def _local_steps(inputs, prompts, n: int, credit_steps, completions, completion_ids):
    """One dict per local completion: anchors, actions, success, starts."""
    from ._core import IntegrationInputError

    if credit_steps is not None:
        out = list(
            credit_steps(
                inputs=inputs, prompts=prompts, completions=completions, completion_ids=completion_ids
            )
        )
        if len(out) != n:
            raise IntegrationInputError(f"credit_steps returned {len(out)} entries for {n} completions")
        for i, d in enumerate(out):
            if not isinstance(d, dict) or "anchors" not in d:
                raise IntegrationInputError(
                    f"credit_steps: entry {i} is {type(d).__name__}; expected a dict with 'anchors'"
                )
        return [
            {
                **d,
                "anchors": _steps_list(d["anchors"], "anchors", i),
                "actions": _steps_list(d.get("actions"), "actions", i, optional=True),
            }
            for i, d in enumerate(out)
        ]
    out = []
    for i in range(n):
        row = inputs[i] if i < len(inputs) else {}
        if row.get("crbc_anchors") is not None:
            out.append(
                {
                    "anchors": _steps_list(row["crbc_anchors"], "crbc_anchors", i),
                    "actions": _steps_list(row.get("crbc_actions"), "crbc_actions", i, optional=True),
                    "success": row.get("crbc_success"),
                    "starts": row.get("crbc_step_starts"),
                }
            )
        else:  # one step from the prompt
            out.append({"anchors": [prompts[i]], "starts": [0]})
    return out


def _success_values(everyone, reward) -> list | None:
    """Per gathered completion, its given ``success`` (checked as a flag by the credit), else
    whether its reward is > 0; None when no completion gives one."""
    if all(d.get("success") is None for d in everyone):
        return None
    return [
        d["success"] if d.get("success") is not None else bool(reward[i] > 0) for i, d in enumerate(everyone)
    ]


def _as_list(values) -> list:
    """``values`` as a list (the list itself when it is one: no copy)."""
    return values if isinstance(values, list) else list(values)


def completion_advantages(
    mask,
    tool_mask,
    local,
    rewards_per_func,
    reward_weights,
    *,
    num_generations: int,
    process_index: int = 0,
    gather=None,
    estimator: str = "crbc",
    anchor_rule=None,
    **params,
):
    """What `CreditGRPOTrainer` puts in ``output["advantages"]``: ``[n, T]`` float32, each
    completion token carrying its step's credit (zero off ``mask``, and on completions every
    reward function returned None for).

    Args:
        mask: ``[n, T]`` the local completions' ``completion_mask``; ``tool_mask`` TRL's (or
            None).
        local: one dict per local completion (`_local_steps`).
        rewards_per_func: ``[N, F]`` every process's rewards (TRL gathers them); weighted by
            ``reward_weights [F]``, NaN ignored, a completion's reward is its last step's.
        num_generations: completions per prompt (a group). ``process_index``: this process's
            rank (its completions are rows ``rank * n ...`` of the gathered batch); ``gather``:
            ``accelerate.utils.gather_object`` (None: one process).
        anchor_rule: how anchors are matched (`crbc_viz.integrations._core.as_anchor_rule`:
            a rule, its name or `make_rule`'s keywords; None: exact), as ``--anchor-rule``.
    """
    import numpy as np

    from .._extras import require
    from ._core import IntegrationInputError, Turns, _begin, anchor_rule_scope, rows_as_steps, score_steps

    torch = require("torch", "the trainer adapters")

    n = mask.shape[0]
    starts = [d.get("starts") for d in local]
    if any(s is None for s in starts) and tool_mask is None:
        starts = [s if s is not None else [0] for s in starts]
    if all(s is not None for s in starts):
        begin = _begin(mask, starts, what="starts")
    else:  # runs of tool_mask (model turns); explicit starts where given
        begin = _begin(mask, within=tool_mask)
        if any(s is not None for s in starts):
            given = _begin(mask, [s if s is not None else [0] for s in starts], what="starts")
            use = np.array([s is not None for s in starts])
            if isinstance(begin, np.ndarray):
                begin = np.where(use[:, None], given, begin)
            else:
                begin = torch.where(torch.as_tensor(use, device=begin.device)[:, None], given, begin)
    turns = Turns.of_begin(begin)
    mine = [
        {"anchors": _as_list(d["anchors"]), "actions": d.get("actions"), "success": d.get("success"), "n": c}
        for d, c in zip(local, turns.n_steps.tolist())
    ]
    everyone = mine if gather is None else gather(mine)
    N = len(everyone)
    if rewards_per_func.shape[0] != N:
        raise IntegrationInputError(f"{N} completions gathered but {rewards_per_func.shape[0]} rewards")
    w = reward_weights.to(rewards_per_func.device)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    reward = (rewards_per_func * w.unsqueeze(0)).nansum(dim=1).double().cpu().numpy()
    counts = np.array([d["n"] for d in everyone], dtype=np.int64)
    step_reward = np.zeros(int(counts.sum()))
    ends = np.cumsum(counts)
    step_reward[ends[counts > 0] - 1] = reward[counts > 0]  # on each completion's last step
    acts = None
    if any(d["actions"] is not None for d in everyone):
        if not all(d["actions"] is not None for d in everyone):
            raise IntegrationInputError("actions given for some completions only")
        acts = [_as_list(d["actions"]) for d in everyone]
    with anchor_rule_scope(anchor_rule):
        steps = rows_as_steps(
            [i // num_generations for i in range(N)],
            step_reward,
            counts,
            [d["anchors"] for d in everyone],
            actions=acts,
            success=_success_values(everyone, reward),
            source="TRL generation batch",
            names=("anchors", "actions", "success"),
        )
        step_adv = score_steps(steps, estimator, device=mask.device, **params)
    lo, first = process_index * n, np.r_[0, ends]  # this process's rows, and their steps
    adv = turns.spread(step_adv[int(first[lo]) : int(first[lo + n])], mask, torch.float32)
    mine_unscorable = unscorable[lo : lo + n]
    if bool(mine_unscorable.any()):
        adv[mine_unscorable.to(adv.device)] = 0.0
    return adv


def build_trainer_class():
    """The ``CreditGRPOTrainer`` class (imports TRL on first call)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from accelerate.utils import gather_object
    from trl import GRPOTrainer

    from ._core import resolve_params

    class CreditGRPOTrainer(GRPOTrainer):
        """``GRPOTrainer`` with step-credit advantages (module doc of
        ``crbc_viz.integrations.trl``).

        Args (besides GRPOTrainer's):
            credit_estimator: a registry name (``crbc``, ``gigpo``, ``visit_local``, …).
            credit_params: the estimator's hyper-parameters.
            credit_steps: optional callable giving each local completion's steps.
        """

        def __init__(
            self,
            *args,
            credit_estimator: str = "crbc",
            credit_params: dict | None = None,
            credit_steps: Callable[..., list[dict[str, Any]]] | None = None,
            **kwargs,
        ):
            resolve_params(credit_estimator, dict(credit_params or {}))  # bad names fail here
            self.credit_estimator = credit_estimator
            self.credit_params = dict(credit_params or {})
            self.credit_steps = credit_steps
            self._credit_seen = None
            super().__init__(*args, **kwargs)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._credit_seen = (rewards_per_func, inputs, prompts, completions, completion_ids_list)
            return rewards_per_func

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            rewards_per_func, inputs_l, prompts_l, completions_l, ids_l = self._credit_seen
            self._credit_seen = None
            mode = "train" if self.model.training else "eval"
            G = self.num_generations if mode == "train" else self.num_generations_eval
            mask = output["completion_mask"]
            local = _local_steps(inputs_l, prompts_l, mask.shape[0], self.credit_steps, completions_l, ids_l)
            adv = completion_advantages(
                mask,
                output.get("tool_mask"),
                local,
                rewards_per_func,
                self.reward_weights,
                num_generations=G,
                process_index=self.accelerator.process_index,
                gather=gather_object,
                estimator=self.credit_estimator,
                **self.credit_params,
            )
            output["advantages"] = adv
            self._metrics[mode]["credit/abs_mean"].append(float(adv.abs().sum() / mask.sum().clamp(min=1)))
            return output

    CreditGRPOTrainer.__module__ = __name__
    _CLASS = CreditGRPOTrainer
    return _CLASS
