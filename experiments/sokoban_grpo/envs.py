"""Tasks the trainer plays: real gym-sokoban rooms, and a tiny in-repo chain for tests.

A *task* is one group's environment: every rollout of a group restarts the same task.
Interface (duck-typed)::

    task.task_id: str            # the group_id of its rollouts
    task.actions: tuple[str, ...]
    task.max_steps: int
    task.reset() -> str          # the start state's anchor text
    task.step(a: int) -> (anchor text after the action, reward, solved)

The anchor text is the history-free state; the tabular policy is keyed by it, and it is
logged as ``anchor_obs``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import random
import sys
import warnings
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
_GENERATOR = REPO_ROOT / "sample_rollouts" / "sokoban" / "generate.py"

#: gym-sokoban action ids used by the policy: "push <dir>" moves when no box is in front, so
#: these four cover every transition of the room (ids 5-8 only move, 0 is a no-op).
SOKOBAN_ACTIONS = ("up", "down", "left", "right")
_SOKOBAN_IDS = (1, 2, 3, 4)


def sokoban_generator():
    """The sample generator's module (`render_text`, `Solver`, `env_state`), loaded by path so
    the trainer renders anchors exactly as ``sample_rollouts/sokoban`` does."""
    name = "crbc_sample_sokoban_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _GENERATOR)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


class SokobanTask:
    """One gym-sokoban room. The room is generated once (gym-sokoban's own generator after
    seeding ``random`` / ``numpy.random`` with ``room_seed``); every rollout restarts it by
    restoring the start arrays and the counters ``SokobanEnv.reset`` sets, then steps the
    real env."""

    actions = SOKOBAN_ACTIONS

    def __init__(self, task_id: str, room_seed: int, *, dim: tuple[int, int], num_boxes: int, max_steps: int):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from gym_sokoban.envs.sokoban_env import SokobanEnv
        self.task_id, self.room_seed, self.max_steps = task_id, int(room_seed), int(max_steps)
        random.seed(room_seed)
        np.random.seed(room_seed)
        with contextlib.redirect_stdout(io.StringIO()):  # the generator prints retry notices
            self.env = SokobanEnv(dim_room=tuple(dim), num_boxes=num_boxes, max_steps=max_steps, reset=False)
            self.env.reset()
        self._start = self.env.room_state.copy()
        gen = sokoban_generator()
        self._render = gen.render_text
        solver = gen.Solver(self.env.room_state, self.env.room_fixed)
        self.optimal = solver.dist.get(solver.start)  # shortest solution (None: unsolvable)
        self.num_states = len(solver.succ)

    def reset(self) -> str:
        e = self.env
        e.room_state = self._start.copy()
        e.player_position = np.argwhere(e.room_state == 5)[0]
        e.num_env_steps, e.reward_last, e.boxes_on_target = 0, 0, 0
        return self._render(e.room_state, e.room_fixed)

    def step(self, a: int) -> tuple[str, float, bool]:
        _, reward, _, info = self.env.step(_SOKOBAN_IDS[a], observation_mode="tiny_rgb_array")
        solved = bool(self.env._check_if_all_boxes_on_target())
        return self._render(self.env.room_state, self.env.room_fixed), float(reward), solved


def sokoban_pool(
    seed: int,
    size: int,
    *,
    dim=(6, 6),
    num_boxes: int = 1,
    max_steps: int = 15,
    min_opt: int = 4,
    max_opt: int = 7,
) -> list[SokobanTask]:
    """``size`` rooms for run seed ``seed``: room seeds ``seed * 1_000_003 + 7919 * k + j``
    (j = 0, 1, ...: the first whose shortest solution has ``min_opt..max_opt`` steps)."""
    pool = []
    for k in range(size):
        for j in range(500):
            t = SokobanTask(
                f"room-{k:02d}",
                seed * 1_000_003 + 7919 * k + j,
                dim=dim,
                num_boxes=num_boxes,
                max_steps=max_steps,
            )
            if t.optimal is not None and min_opt <= t.optimal <= max_opt:
                pool.append(t)
                break
        else:  # pragma: no cover - gym-sokoban always yields some room in range
            raise RuntimeError(f"no room with a {min_opt}..{max_opt}-step solution for task {k}")
    return pool


class ChainTask:
    """A deterministic corridor for tests (no gym-sokoban): cells ``0..length``, start 0,
    goal ``length``; ``right`` moves +1, ``left`` -1 (not below 0), ``stay`` stays. Reward 1
    on reaching the goal (solved), else 0. The right credit is known: ``right`` is the only
    action that makes progress, at every cell."""

    actions = ("right", "left", "stay")

    def __init__(self, task_id: str, length: int = 4, max_steps: int = 8):
        self.task_id, self.length, self.max_steps = task_id, int(length), int(max_steps)
        self.pos = 0

    def _text(self) -> str:
        return "".join(
            "@" if i == self.pos else ("G" if i == self.length else ".") for i in range(self.length + 1)
        )

    def reset(self) -> str:
        self.pos = 0
        return self._text()

    def step(self, a: int) -> tuple[str, float, bool]:
        self.pos = min(self.length, self.pos + 1) if a == 0 else max(0, self.pos - 1) if a == 1 else self.pos
        solved = self.pos == self.length
        return self._text(), 1.0 if solved else 0.0, solved


def chain_pool(seed: int, size: int, *, length: int = 4, max_steps: int = 8) -> list[ChainTask]:
    """``size`` identical corridors (distinct group ids); ``seed`` is unused (deterministic)."""
    return [ChainTask(f"chain-{k:02d}", length, max_steps) for k in range(size)]


POOLS = {"sokoban": sokoban_pool, "chain": chain_pool}
