#!/usr/bin/env python3
"""Generate the TextWorld cooking sample rollouts (real ``textworld`` games).

Each task (= group) is one cooking game compiled offline with ``tw-make tw-cooking`` (options
per task in ``TASKS``; games go to a temporary folder and are deleted afterwards).  Eight
rollouts are played per game with ``textworld.start`` and
``EnvInfos(facts, admissible_commands, policy_commands, won, lost, description, inventory)``.
The policy mixes an expert with epsilon-random play:

* with probability ``1 - eps``: the first command of TextWorld's own ``policy_commands`` (the
  shortest winning plan from the *current* state);
* with probability ``eps`` -- or when no winning plan is left -- a uniformly random command
  among the (sorted) ``admissible_commands``.

Rows follow ``docs/schema.md``.  ``anchor_obs`` is a history-free world state: the
sorted list of the game's facts (``str(Proposition)``), one per line.  ``observation`` is the
text the agent saw before the step (ASCII-art banner stripped from the first one); ``reward``
is the score gained by the step; ``done`` is True when the game ended at this step (won or
lost); a last row with ``done=False`` is a truncation at ``max_steps``.

Usage (inside the generators' venv, see ../requirements.txt)::

    python sample_rollouts/textworld/generate.py --seed 0 --out sample_rollouts/textworld/textworld_cooking.jsonl.gz
    python sample_rollouts/textworld/generate.py --seed 0 --task 2              # one task, stdout
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

DEFAULT_SEED = 0
ROLLOUTS_PER_TASK = 8
RUN_ID = "textworld-sample"
ENV_NAME = "textworld-cooking"

# tw-cooking options per task: (recipe, take, go, flags, max_steps, eps)
TASKS = [
    (1, 1, 1, ["--open"], 20, 0.30),
    (2, 1, 1, ["--cut"], 22, 0.25),
    (2, 2, 1, ["--cook"], 24, 0.35),
    (1, 1, 6, ["--open"], 25, 0.30),
    (2, 2, 1, ["--cut", "--cook"], 25, 0.20),
    (3, 2, 1, ["--cut", "--open"], 26, 0.40),
    (2, 1, 6, [], 28, 0.30),
    (3, 3, 1, ["--cook"], 28, 0.25),
    (1, 1, 6, ["--cut", "--cook"], 30, 0.35),
    (3, 2, 1, ["--cut", "--cook", "--open"], 30, 0.45),
]
NUM_TASKS = len(TASKS)


def task_params(task_index: int, seed: int = DEFAULT_SEED) -> dict:
    recipe, take, go, flags, max_steps, eps = TASKS[task_index]
    return {
        "recipe": recipe,
        "take": take,
        "go": go,
        "flags": list(flags),
        "max_steps": max_steps,
        "eps": eps,
        "game_seed": seed * 1000 + 17 * task_index + 1,
    }


def _tw_make() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "tw-make")
    return exe if os.path.exists(exe) else (shutil.which("tw-make") or "tw-make")


def make_game(task_index: int, seed: int, folder: str) -> str:
    p = task_params(task_index, seed)
    out = os.path.join(folder, f"task{task_index:02d}.z8")
    cmd = [
        _tw_make(),
        "tw-cooking",
        "--recipe",
        str(p["recipe"]),
        "--take",
        str(p["take"]),
        "--go",
        str(p["go"]),
        *p["flags"],
        "--split",
        "train",
        "--seed",
        str(p["game_seed"]),
        "--output",
        out,
        "-f",
        "--silent",
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def strip_banner(text: str) -> str:
    """Drop the leading ASCII-art banner (lines with no lowercase letter) and the trailing
    ``>`` prompt (with the status line that follows it on the first turn)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and not any(ch.islower() for ch in lines[i]):
        i += 1
    kept = []
    for line in lines[i:]:
        if line.lstrip().startswith(">"):  # command prompt (+ status line on the first turn)
            break
        kept.append(line.rstrip())
    return "\n".join(kept).strip()


def anchor_of(state) -> str:
    return "\n".join(sorted(str(f) for f in state.facts))


def generate_task(task_index: int, seed: int = DEFAULT_SEED, games_dir: str | None = None) -> list[dict]:
    """All rows (8 rollouts) of one task, deterministic in (task_index, seed)."""
    import textworld

    p = task_params(task_index, seed)
    tmp = None
    if games_dir is None:
        tmp = games_dir = tempfile.mkdtemp(prefix="crbc-tw-")
    try:
        game = make_game(task_index, seed, games_dir)
        infos = textworld.EnvInfos(
            facts=True,
            admissible_commands=True,
            policy_commands=True,
            won=True,
            lost=True,
            description=True,
            inventory=True,
        )
        env = textworld.start(game, request_infos=infos)
        group_id = f"textworld-task-{task_index:02d}"
        rows: list[dict] = []
        for r in range(ROLLOUTS_PER_TASK):
            rng = random.Random(f"textworld/{seed}/{task_index}/{r}")
            state = env.reset()
            obs = strip_banner(state.feedback)
            traj, ret, prev_score, won = [], 0.0, 0, False
            for t in range(p["max_steps"]):
                admissible = sorted(state.admissible_commands or [])
                plan = list(state.policy_commands or [])
                if plan and rng.random() >= p["eps"]:
                    cmd, source = plan[0], "expert"
                else:
                    cmd, source = rng.choice(admissible), "random"
                row = {
                    "group_id": group_id,
                    "traj_id": f"r{r}",
                    "step_idx": t,
                    "action": cmd,
                    "observation": obs,
                    "anchor_obs": anchor_of(state),
                    "available_actions": admissible,
                    "is_action_valid": cmd in admissible,
                    "env_name": ENV_NAME,
                    "run_id": RUN_ID,
                    "train_step": 0,
                    "split": "train",
                    "policy_eps": p["eps"],
                    "policy_source": source,
                    "max_steps": p["max_steps"],
                }
                state, score, game_done = env.step(cmd)
                reward = float(score - prev_score)
                prev_score = score
                ret += reward
                row["reward"] = reward
                row["done"] = bool(game_done)
                traj.append(row)
                obs = strip_banner(state.feedback)
                if game_done:
                    won = bool(state.won)
                    break
            for row in traj:
                row["success"] = won
                row["episode_return"] = ret
            rows.extend(traj)
        env.close()
        return rows
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


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
        help="output .jsonl or .jsonl.gz (default: textworld_cooking.jsonl.gz next to "
        "this script; stdout with --task)",
    )
    ap.add_argument("--task", type=int, default=None, help="only this task index")
    args = ap.parse_args(argv)
    if args.task is not None:
        write_rows(generate_task(args.task, args.seed), args.out)
        return 0
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "textworld_cooking.jsonl.gz")
    rows = []
    with tempfile.TemporaryDirectory(prefix="crbc-tw-") as games:
        for i in range(NUM_TASKS):
            rows.extend(generate_task(i, args.seed, games))
    write_rows(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
