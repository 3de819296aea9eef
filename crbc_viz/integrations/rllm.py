"""rLLM (github.com/rllm-org/rllm): step credit on ``TrajectoryGroup``s.

rLLM's ``register_rllm_adv_estimator(name)`` contract is one scalar per trajectory
(``rewards: list[np.ndarray]`` -> advantages of the same shapes), which rLLM then broadcasts to
every step: it cannot carry step credit. Its step-wise path is the precomputed one: when
``algorithm.use_precomputed_advantage=true`` and steps carry ``step.advantage``,
``collect_reward_and_advantage_from_trajectory_groups`` spreads each step's value over that
step's ``response_ids``. `assign_step_advantages` fills ``step.advantage`` for every step of
every group; call it on ``trainer_state.trajectory_groups`` just before the backend's
``compute_advantages`` (e.g. in a backend subclass), see the README.

`register` also registers ``crbc_viz.<name>`` trajectory-level estimators for rLLM's registry:
the mean over a trajectory's steps of the step credit — only for users who want the
estimator's signal without per-step advantages. rLLM's ``algorithm.adv_estimator`` maps an
unknown name to ``OTHER``, so select them per role with ``estimator_map``.

Per step (rLLM ``Step``): the anchor is ``step.observation`` (else ``step.input``), the action
``step.action`` (as text; else keyed by the transition), the reward ``step.reward``; a
trajectory succeeded when ``trajectory.reward`` > 0. Rewards are finite numbers: None, NaN,
infinities and text (``"nan"``, ``"1.0"``) raise naming the group, trajectory and step, never
read as a failure. ``anchor=`` / ``action=`` callables (``fn(step) -> value``) override them.
Trajectories are ordered as rLLM keeps them (the list order of ``trajectory.steps`` is the step
index). Only attribute names are used, so importing this module imports no rLLM.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np

from ._core import (
    CodedRows,
    IntegrationInputError,
    _action_codes,
    _anchor_codes,
    _assemble,
    score_steps,
    with_anchor_rule,
)

__all__ = ["assign_step_advantages", "register"]

_NUMBER = (int, float, np.integer, np.floating)


def _reward(value, where: str) -> float:
    """A finite number (a bool is not a reward), else `IntegrationInputError` naming ``where``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _NUMBER):
        raise IntegrationInputError(
            f"{where}: reward is {type(value).__name__} {value!r:.40}; expected a finite number"
        )
    try:
        out = float(value)
    except OverflowError:
        out = float("inf")
    if not np.isfinite(out):
        raise IntegrationInputError(f"{where}: reward is {out}; expected a finite number")
    return out


def _rewards(values: list, where) -> np.ndarray:
    """``[n]`` float64 of finite numbers, converted at once when every value's type is a number
    type (not bool) and every value is finite; otherwise value by value, the first that is not
    one raising `IntegrationInputError` named by ``where(i)``."""
    kinds = set(map(type, values))
    if all(issubclass(k, _NUMBER) and not issubclass(k, (bool, np.bool_)) for k in kinds):
        try:
            out = np.array(values, dtype=np.float64)
        except OverflowError:
            out = None
        if out is not None and np.isfinite(out).all():
            return out
    return np.array([_reward(v, where(i)) for i, v in enumerate(values)], dtype=np.float64)


def _default_anchor(step):
    obs = getattr(step, "observation", None)
    empty = obs is None or (isinstance(obs, str) and obs == "")
    return getattr(step, "input", None) if empty else obs


def _read(flat: list, name: str) -> list:
    """``getattr(step, name, None)`` of every step, in one C-level pass where every step has the
    attribute."""
    try:
        return list(map(operator.attrgetter(name), flat))
    except AttributeError:
        return [getattr(s, name, None) for s in flat]


def _has_none(values: list) -> bool:
    return any(map(operator.is_, values, itertools.repeat(None)))


def _default_anchors(flat: list) -> list:
    """`_default_anchor` of every step: ``step.observation``, ``step.input`` where that is None
    or the empty string (looked for value by value only when some observation is not a str)."""
    anchors = _read(flat, "observation")
    if set(map(type, anchors)) <= {str}:
        empty = [i for i, a in enumerate(anchors) if not a] if "" in anchors else []
    else:
        empty = [i for i, a in enumerate(anchors) if a is None or (isinstance(a, str) and a == "")]
    for i in empty:
        anchors[i] = getattr(flat[i], "input", None)
    return anchors


def _steps_of(groups, anchor, action):
    """The groups' steps as arrays: group and trajectory codes (one per group / trajectory,
    named ``"<index>:<group_id>"`` / ``"<index>:<uid>"``), step indices, anchors, actions
    (``action``: a function, ``"auto"`` or None), rewards and trajectory outcomes, and the step
    objects in the same order. Each attribute is read in one pass over the flat list of steps."""
    group_names, traj_names, traj_group, traj_len, traj_reward, flat = [], [], [], [], [], []
    where_traj = []
    for gi, group in enumerate(groups):
        gid = getattr(group, "group_id", "") or f"group{gi}"
        group_names.append(f"{gi}:{gid}")
        for ti, traj in enumerate(group.trajectories):
            steps = list(traj.steps)
            traj_names.append(f"{ti}:{getattr(traj, 'uid', ti)}")
            traj_group.append(gi)
            traj_len.append(len(steps))
            traj_reward.append(traj.reward)
            where_traj.append((gid, ti))
            flat.extend(steps)
    traj_len = np.asarray(traj_len, dtype=np.int64)
    traj_start = np.cumsum(traj_len) - traj_len

    def where_step(i: int) -> str:
        t = int(np.searchsorted(traj_start, i, side="right")) - 1
        gid, ti = where_traj[t]
        return f"rLLM group {gid!r}, trajectory {ti}, step {i - int(traj_start[t])}"

    traj_ok = _rewards(traj_reward, lambda t: "rLLM group {!r}, trajectory {}".format(*where_traj[t])) > 0
    anchors = _default_anchors(flat) if anchor is _default_anchor else list(map(anchor, flat))
    if _has_none(anchors):
        i = next(i for i, a in enumerate(anchors) if a is None)
        raise IntegrationInputError(
            f"{where_step(i)}: no anchor (step.observation and step.input are empty; pass anchor=)"
        )
    rewards = _rewards(_read(flat, "reward"), where_step)
    if action == "auto":  # step.action where the step has one, else keyed by its transition
        actions = _read(flat, "action")
    else:
        actions = None if action is None else list(map(action, flat))
    T, S = len(traj_len), len(flat)
    traj = np.repeat(np.arange(T, dtype=np.int64), traj_len)
    out = {
        "group": np.repeat(np.asarray(traj_group, dtype=np.int64), traj_len),
        "group_names": np.array(group_names, dtype=object),
        "traj": traj,
        "traj_names": np.array(traj_names, dtype=object),
        "step": np.arange(S, dtype=np.int64) - np.repeat(traj_start, traj_len),
        "anchors": np.fromiter(anchors, dtype=object, count=S),
        "actions": None if actions is None else np.fromiter(actions, dtype=object, count=S),
        "rewards": rewards,
        "success": traj_ok[traj],
    }
    return out, flat


@with_anchor_rule
def assign_step_advantages(groups, *, estimator: str = "crbc", anchor=None, action="auto", **params):
    """Set ``step.advantage`` (float) on every step of ``groups`` (rLLM ``TrajectoryGroup``s).

    Args:
        groups: the trajectory groups of one training step.
        estimator: a registry name.
        anchor: ``fn(step)`` -> the history-free state; default ``step.observation``.
        anchor_rule: (keyword) how anchors are matched, as in
            `crbc_viz.integrations.verl_agent.compute_advantage`.
        action: ``fn(step)`` -> the action; ``"auto"`` (default) uses ``step.action`` where the
            step has one and keys a step without one by its transition (as the loader does,
            `crbc_viz.io.actions`); None always keys by transition.

    Returns:
        the `crbc_viz.integrations._core.Steps` it scored (for logging / checks).

    Raises:
        IntegrationInputError: a reward (step or trajectory) that is not a finite number, a
            step with no anchor (each naming the group, trajectory and step).
    """
    rows, flat = _steps_of(groups, anchor or _default_anchor, action)
    anchor_code, hashes = _anchor_codes(rows["anchors"])
    steps = _assemble(
        CodedRows(
            rows["group"],
            rows["group_names"],
            rows["traj"],
            rows["traj_names"],
            rows["step"],
            anchor_code,
            hashes,
            rows["rewards"],
            None if rows["actions"] is None else _action_codes(rows["actions"], len(flat)),
            rows["success"],
        ),
        row_reward="step",
        source="rLLM groups",
        anchor_values=rows["anchors"],
    )
    adv = score_steps(steps, estimator, **params).cpu().numpy().tolist()
    for step, v in zip(flat, adv):
        step.advantage = v
    return steps


def register(names=None):
    """Register ``crbc_viz.<name>`` with rLLM's registry (imports rLLM): trajectory-level
    estimators whose value is the mean step credit of each trajectory (rLLM broadcasts it to the
    steps). For per-step advantages use `assign_step_advantages` instead."""
    from rllm.trainer.algorithms.advantage import register_rllm_adv_estimator

    from ..estimators import registry

    out = {}
    for name in names or registry.names():

        def fn(rewards, algorithm_config=None, traj_groups=None, _name=name, **kw):
            if traj_groups is None:
                raise IntegrationInputError(
                    "rLLM passed no traj_groups (needs rLLM with the "
                    "traj_groups keyword, as in its advantage.py)"
                )
            assign_step_advantages(traj_groups, estimator=_name)
            res = [
                np.array(
                    [np.mean([s.advantage for s in tr.steps]) if tr.steps else 0.0 for tr in gr.trajectories]
                )
                for gr in traj_groups
            ]
            return res, res

        fn.__doc__ = (
            f"crbc-viz '{name}': mean step credit per trajectory (rLLM broadcasts one "
            f"scalar per trajectory; per-step: crbc_viz.integrations.rllm."
            f"assign_step_advantages)"
        )
        out[f"crbc_viz.{name}"] = register_rllm_adv_estimator(f"crbc_viz.{name}")(fn)
    return out
