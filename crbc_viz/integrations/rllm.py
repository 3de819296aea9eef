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

import numpy as np

from ._core import IntegrationInputError, canonical_steps, score_steps

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


def _default_anchor(step):
    obs = getattr(step, "observation", None)
    return obs if obs not in (None, "") else getattr(step, "input", None)


def _steps_of(groups, anchor, action):
    g, t, k, anc, act, rew, ok, refs = [], [], [], [], [], [], [], []
    for gi, group in enumerate(groups):
        gid = getattr(group, "group_id", "") or f"group{gi}"
        for ti, traj in enumerate(group.trajectories):
            traj_ok = _reward(traj.reward, f"rLLM group {gid!r}, trajectory {ti}") > 0
            for si, step in enumerate(traj.steps):
                a = anchor(step)
                if a is None:
                    raise IntegrationInputError(
                        f"rLLM group {gid!r}, trajectory {ti}, step {si}: no "
                        f"anchor (step.observation and step.input are empty; "
                        f"pass anchor=)"
                    )
                g.append(f"{gi}:{gid}")
                t.append(f"{ti}:{getattr(traj, 'uid', ti)}")
                k.append(si)
                anc.append(a)
                act.append(None if action is None else action(step))
                rew.append(
                    _reward(getattr(step, "reward", None), f"rLLM group {gid!r}, trajectory {ti}, step {si}")
                )
                ok.append(traj_ok)
                refs.append(step)
    anchors = np.empty(len(anc), dtype=object)
    anchors[:] = anc
    actions = None if action is None else np.array([str(a) for a in act], dtype=object)
    return g, t, k, anchors, actions, np.asarray(rew), np.asarray(ok, bool), refs


def assign_step_advantages(groups, *, estimator: str = "crbc", anchor=None, action="auto", **params):
    """Set ``step.advantage`` (float) on every step of ``groups`` (rLLM ``TrajectoryGroup``s).

    Args:
        groups: the trajectory groups of one training step.
        estimator: a registry name.
        anchor: ``fn(step)`` -> the history-free state; default ``step.observation``.
        action: ``fn(step)`` -> the action; ``"auto"`` (default) uses ``step.action`` when every
            step has one, else keys actions by their transition; None always keys by transition.

    Returns:
        the `crbc_viz.integrations._core.Steps` it scored (for logging / checks).
    """
    anchor = anchor or _default_anchor
    if action == "auto":
        every = all(
            getattr(s, "action", None) is not None
            for gr in groups
            for tr in gr.trajectories
            for s in tr.steps
        )
        action = (lambda s: s.action) if every else None
    g, t, k, anchors, actions, rew, ok, refs = _steps_of(groups, anchor, action)
    steps = canonical_steps(g, t, k, anchors, rew, actions=actions, success=ok, source="rLLM groups")
    adv = score_steps(steps, estimator, **params).cpu().numpy()
    for step, v in zip(refs, adv):
        step.advantage = float(v)
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
