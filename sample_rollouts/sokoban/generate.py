#!/usr/bin/env python3
"""Generate the Sokoban sample rollouts (real ``gym-sokoban`` environment).

Each task (= group) is one 6x6 room produced by gym-sokoban's own room generator
(``SokobanEnv(dim_room=(6, 6), num_boxes=..., max_steps=...)``) after seeding ``random`` and
``numpy.random``.  Eight rollouts are played in that room, every rollout on a fresh
``env.reset()`` under the same seeds (the room is asserted identical).  The policy is a
BFS-optimal solver mixed with epsilon-random actions:

* with probability ``1 - eps`` the expert action: the first action (order up, down, left,
  right) that lowers the exact distance-to-solved of the current state by one.  Distances
  come from an exhaustive BFS over the room's reachable (player, boxes) state graph;
* with probability ``eps`` -- or whenever the state is dead (no solution reachable) -- a
  uniformly random action among the 8 env actions ``push/move up/down/left/right``.

Rows follow ``docs/schema.md``: one JSON object per environment step, ``anchor_obs`` /
``observation`` is the text rendering of the state *before* the step's action, ``reward`` is
the env reward of the step, ``done`` is True only when the room was solved at this step (a
last row with ``done=False`` is a truncation at ``max_steps``).

Usage (inside the generators' venv, see ../requirements.txt)::

    python sample_rollouts/sokoban/generate.py --seed 0 --out sample_rollouts/sokoban/sokoban.jsonl
    python sample_rollouts/sokoban/generate.py --seed 0 --task 3            # one task, stdout
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import random
import sys
from collections import deque

try:  # numpy comes with gym-sokoban; keep this module importable without it (tests skip then)
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

DEFAULT_SEED = 0
NUM_TASKS = 16
ROLLOUTS_PER_TASK = 8
DIM = (6, 6)
RUN_ID = "sokoban-sample"
ENV_NAME = "sokoban"

# env action ids (gym_sokoban ACTION_LOOKUP): 1-4 push up/down/left/right, 5-8 move ...
DIRS = ["up", "down", "left", "right"]
DELTA = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
PUSH_ID = {d: 1 + i for i, d in enumerate(DIRS)}
MOVE_ID = {d: 5 + i for i, d in enumerate(DIRS)}
ACTION_NAMES = [f"push {d}" for d in DIRS] + [f"move {d}" for d in DIRS]


def task_params(task_index: int) -> dict:
    """Per-task knobs (deterministic in the task index)."""
    i = task_index
    max_steps = 15 + (i * 7) % 16  # 15..30
    return {
        "num_boxes": 1 if max_steps <= 20 else 2,  # 6x6 one-box rooms never need > 8 steps
        "max_steps": max_steps,
        "eps": round(0.20 + 0.25 * ((i * 5) % 16) / 15, 3),  # 0.20..0.45
    }


# ----------------------------------------------------------------------------- rendering
def render_text(room_state: np.ndarray, room_fixed: np.ndarray) -> str:
    """Canonical text rendering: # wall, ' ' floor, . target, $ box, * box on target,
    @ player, + player on target.  Rows joined by '\\n'."""
    rows = []
    for r in range(room_state.shape[0]):
        line = []
        for c in range(room_state.shape[1]):
            s, f = int(room_state[r, c]), int(room_fixed[r, c])
            if s == 0:
                ch = "#"
            elif s == 5:
                ch = "+" if f == 2 else "@"
            elif s == 3:
                ch = "*"
            elif s == 4:
                ch = "$"
            elif s == 2:
                ch = "."
            else:
                ch = " "
            line.append(ch)
        rows.append("".join(line))
    return "\n".join(rows)


# ----------------------------------------------------------------------------- solver
class Solver:
    """Exact distance-to-solved for every state reachable from the start state."""

    def __init__(self, room_state: np.ndarray, room_fixed: np.ndarray):
        self.walls = {(r, c) for r, c in zip(*np.nonzero(room_fixed == 0))}
        self.targets = frozenset((int(r), int(c)) for r, c in zip(*np.nonzero(room_fixed == 2)))
        player = tuple(int(x) for x in np.argwhere(room_state == 5)[0])
        boxes = frozenset(
            (int(r), int(c)) for r, c in zip(*np.nonzero((room_state == 3) | (room_state == 4)))
        )
        self.start = (player, boxes)
        # forward enumeration of the reachable graph
        succ, seen, order = {}, {self.start}, deque([self.start])
        while order:
            s = order.popleft()
            succ[s] = {}
            for d in DIRS:
                nxt, _ = self.step(s, d)
                succ[s][d] = nxt
                if nxt not in seen:
                    seen.add(nxt)
                    order.append(nxt)
        self.succ = succ
        # reverse BFS from solved states
        pred = {s: [] for s in succ}
        for s, m in succ.items():
            for t in m.values():
                if t != s:
                    pred[t].append(s)
        self.dist = {}
        q = deque()
        for s in sorted(succ):
            if self.solved(s):
                self.dist[s] = 0
                q.append(s)
        while q:
            t = q.popleft()
            for s in pred[t]:
                if s not in self.dist:
                    self.dist[s] = self.dist[t] + 1
                    q.append(s)

    def solved(self, s) -> bool:
        return s[1] == self.targets

    def step(self, s, d):
        """Successor of state s for moving/pushing in direction d; returns (state, pushed)."""
        (pr, pc), boxes = s
        dr, dc = DELTA[d]
        n = (pr + dr, pc + dc)
        if n in self.walls:
            return s, False
        if n in boxes:
            b = (n[0] + dr, n[1] + dc)
            if b in self.walls or b in boxes:
                return s, False
            return (n, (boxes - {n}) | {b}), True
        return (n, boxes), False

    def expert(self, s):
        """Optimal direction (fixed tie-break order) or None when s is dead/solved."""
        d0 = self.dist.get(s)
        if not d0:
            return None
        for d in DIRS:
            if self.dist.get(self.succ[s][d]) == d0 - 1:
                return d
        return None


def env_state(env):
    player = tuple(int(x) for x in env.player_position)
    rs = env.room_state
    boxes = frozenset((int(r), int(c)) for r, c in zip(*np.nonzero((rs == 3) | (rs == 4))))
    return (player, boxes)


# ----------------------------------------------------------------------------- generation
def _make_env(task_seed: int, num_boxes: int, max_steps: int):
    from gym_sokoban.envs.sokoban_env import SokobanEnv

    random.seed(task_seed)
    np.random.seed(task_seed)
    # the room generator may print retry notices; keep stdout clean for --task output
    with contextlib.redirect_stdout(io.StringIO()):
        env = SokobanEnv(dim_room=DIM, num_boxes=num_boxes, max_steps=max_steps, reset=False)
        env.reset()
    return env


def _reset(env, task_seed: int):
    random.seed(task_seed)
    np.random.seed(task_seed)
    with contextlib.redirect_stdout(io.StringIO()):
        env.reset()


def choose_room(task_index: int, seed: int):
    """Pick the task's room: first sub-seed whose optimal solution has
    max(5, max_steps - 14) .. max_steps - 4 steps (so epsilon-noise makes success uncertain)."""
    p = task_params(task_index)
    for attempt in range(200):
        task_seed = seed * 1_000_003 + task_index * 1_009 + attempt
        env = _make_env(task_seed, p["num_boxes"], p["max_steps"])
        solver = Solver(env.room_state, env.room_fixed)
        opt = solver.dist.get(solver.start)
        if opt is not None and max(5, p["max_steps"] - 14) <= opt <= p["max_steps"] - 4:
            return env, solver, task_seed, opt
    raise RuntimeError(f"no suitable room for task {task_index}")


def generate_task(task_index: int, seed: int = DEFAULT_SEED) -> list[dict]:
    """All rows (8 rollouts) of one task, deterministic in (task_index, seed)."""
    p = task_params(task_index)
    env, solver, task_seed, opt = choose_room(task_index, seed)
    start_text = render_text(env.room_state, env.room_fixed)
    group_id = f"sokoban-task-{task_index:02d}"
    rows: list[dict] = []
    for r in range(ROLLOUTS_PER_TASK):
        _reset(env, task_seed)
        assert render_text(env.room_state, env.room_fixed) == start_text
        rng = random.Random(f"sokoban/{seed}/{task_index}/{r}")
        traj: list[dict] = []
        ret = 0.0
        solved = False
        for t in range(p["max_steps"]):
            s = env_state(env)
            text = render_text(env.room_state, env.room_fixed)
            d = solver.expert(s)
            if d is None or rng.random() < p["eps"]:
                name = rng.choice(ACTION_NAMES)
            else:
                _, pushes = solver.step(s, d)
                name = f"push {d}" if pushes else f"move {d}"
            kind, d_name = name.split()
            aid = PUSH_ID[d_name] if kind == "push" else MOVE_ID[d_name]
            _, reward, env_done, info = env.step(aid, observation_mode="tiny_rgb_array")
            # sanity: our solver model agrees with the env dynamics
            if kind == "push":
                expect = solver.step(s, d_name)[0]
            else:
                nxt, pushed = solver.step(s, d_name)
                expect = s if pushed else nxt
            assert env_state(env) == expect, (task_index, r, t, name)
            solved = solver.solved(env_state(env))
            reward = round(float(reward), 6)
            ret += reward
            traj.append(
                {
                    "group_id": group_id,
                    "traj_id": f"r{r}",
                    "step_idx": t,
                    "action": name,
                    "reward": reward,
                    "done": bool(solved),
                    "observation": text,
                    "anchor_obs": text,
                    "env_name": ENV_NAME,
                    "run_id": RUN_ID,
                    "train_step": 0,
                    "split": "train",
                    "is_action_valid": True,
                    "available_actions": list(ACTION_NAMES),
                    "policy_eps": p["eps"],
                    "max_steps": p["max_steps"],
                }
            )
            if env_done:
                break
        for row in traj:
            row["success"] = bool(solved)
            row["episode_return"] = round(ret, 6)
        rows.extend(traj)
    return rows


def dumps(row: dict) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=True)


def write_rows(rows, out):
    data = "".join(dumps(r) + "\n" for r in rows).encode("utf-8")
    if out is None or out == "-":
        sys.stdout.write(data.decode("utf-8"))
        return
    if out.endswith(".gz"):
        with open(out, "wb") as fh:
            with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
                gz.write(data)
    else:
        with open(out, "wb") as fh:
            fh.write(data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument(
        "--out",
        default=None,
        help="output .jsonl or .jsonl.gz (default: sokoban.jsonl next to this script; stdout with --task)",
    )
    ap.add_argument("--task", type=int, default=None, help="only this task index")
    args = ap.parse_args(argv)
    if args.task is not None:
        write_rows(generate_task(args.task, args.seed), args.out)
        return 0
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "sokoban.jsonl")
    rows = []
    for i in range(NUM_TASKS):
        rows.extend(generate_task(i, args.seed))
    write_rows(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
