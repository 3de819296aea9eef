"""rLLM episodes: a folder of JSON files, each one ``Episode.to_dict()`` (or a list of them,
or JSON Lines of them), as rLLM's workflow engine produces them.

``Episode``: ``id`` (``"{task_id}:{rollout_idx}"``), ``task``, ``termination_reason``,
``is_correct``, ``trajectories`` (each ``{uid, name, task, steps, reward, info}``),
``metrics``, ``info``. ``Step``: ``observation``, ``thought``, ``action``, ``model_response``,
``chat_completions``, ``info``, ``reward``, ``done``, ``mc_return``, ``advantage`` (and token
fields, which are dropped).

Canonical mapping: group = ``task_id`` (``task_id:name`` for a named role of a multi-agent
workflow, as rLLM's ``TrajectoryGroup`` does); traj = the episode ``id`` (plus ``#j`` when an
episode has several trajectories of one role); ``step_idx`` = position in ``steps``;
``reward``, ``done``, ``action`` (JSON when not a string), ``model_response`` -> ``response``,
``observation`` -> ``observation``; anchor = ``info["anchor_obs"]`` / ``info["state"]`` when a
workflow logs one, else the observation; success = ``is_correct``; ``episode_return`` =
trajectory ``reward``; scalar ``advantage`` is the trainer's. Training step: ``info`` /
``metrics`` ``global_step``/``train_step``/``step``, else the folder name (``step_12``),
else 0. Run: the nearest non-step parent folder. Trainer keys kept: ``episode_id``,
``trajectory_uid``, ``step``.
"""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .. import _guards
from ..errors import MAX_LISTED, LoadError, Problem
from ..readers import RawTable
from ._common import Imported, run_from_dir, step_from_path, to_text

NAME = "rllm"
SIGNATURE = ("id", "trajectories")
_DEFAULT_NAMES = {None, "", "default_traj_name"}


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def episode_files(folder: str) -> list[str]:
    """The ``.json`` / ``.jsonl`` (optionally ``.gz``) files under ``folder``, sorted."""
    out = []
    for root, _, files in os.walk(folder):
        for f in files:
            low = f.lower()
            if low.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz")) and not f.startswith("."):
                out.append(os.path.join(root, f))
    return sorted(out)


def _load(path: str, problems: list) -> list[tuple[int, dict]]:
    items: list[tuple[int, dict]] = []
    try:
        with io.TextIOWrapper(_guards.open_input(path), encoding="utf-8") as fh:  # capped, regular
            if ".jsonl" in path.lower():
                for i, line in enumerate(fh, start=1):
                    if line.strip():
                        items.append((i, json.loads(line)))
            else:
                doc = json.load(fh)
                docs = doc if isinstance(doc, list) else [doc]
                items = list(enumerate(docs))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError, RecursionError) as exc:
        problems.append(Problem(path, getattr(exc, "lineno", None), None, f"cannot read episode JSON: {exc}"))
    return items


def _train_step(ep: dict, path: str) -> int:
    for holder in (ep.get("info"), ep.get("metrics")):
        if isinstance(holder, dict):
            for k in ("global_step", "train_step", "step"):
                v = holder.get(k)
                if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                    return int(v)
    return step_from_path(path) or 0


def read(path: str) -> Imported:
    files = episode_files(path) if os.path.isdir(path) else [path]
    problems: list[Problem] = []
    rows: list[dict] = []
    lines: list[int] = []
    run = run_from_dir(files[0] if files else path)
    budget = _guards.Budget(path, "item")
    for f in files:
        where = "line" if ".jsonl" in f.lower() else "item"
        for idx, ep in _load(f, problems):
            budget.rows(len(rows), idx)
            budget.problems(problems, idx)
            if not isinstance(ep, dict) or not isinstance(ep.get("id"), str) \
                    or not isinstance(ep.get("trajectories"), list):
                problems.append(Problem(f, idx, "id" if isinstance(ep, dict) else None,
                                        "expected an rLLM Episode object with a string 'id' and a "
                                        "'trajectories' list", where))
                continue
            task_id = ep["id"].split(":")[0]
            tstep = _train_step(ep, f)
            names: dict = {}
            for j, tr in enumerate(ep["trajectories"]):
                if not isinstance(tr, dict) or not isinstance(tr.get("steps"), list):
                    problems.append(Problem(f, idx, f"trajectories[{j}].steps", "expected a list", where))
                    continue
                name = tr.get("name")
                group = task_id if name in _DEFAULT_NAMES else f"{task_id}:{name}"
                k = names[name] = names.get(name, -1) + 1
                traj = ep["id"] if k == 0 else f"{ep['id']}#{k}"
                for s, st in enumerate(tr["steps"]):
                    if not isinstance(st, dict):
                        problems.append(Problem(f, idx, f"trajectories[{j}].steps[{s}]",
                                                "expected a step object", where))
                        continue
                    info = st.get("info") if isinstance(st.get("info"), dict) else {}
                    anchor = info.get("anchor_obs", info.get("state", st.get("observation")))
                    adv = st.get("advantage")
                    rows.append({
                        "run_id": run, "train_step": tstep, "group_id": group, "traj_id": traj,
                        "step_idx": s, "reward": st.get("reward"), "done": st.get("done"),
                        "action": to_text(st.get("action")), "response": to_text(st.get("model_response")),
                        "observation": to_text(st.get("observation")), "anchor_obs": to_text(anchor),
                        "success": bool(ep.get("is_correct", False)),
                        "episode_return": tr.get("reward"),
                        "termination_reason": to_text(ep.get("termination_reason")),
                        "advantage": adv if isinstance(adv, (int, float)) and not isinstance(adv, bool) else None,
                        "src_episode_id": ep["id"], "src_traj_uid": to_text(tr.get("uid")),
                        "src_file": os.path.relpath(f, path) if os.path.isdir(path) else Path(f).name,
                    })
                    lines.append(int(idx))
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    df = pd.DataFrame.from_records(rows) if rows else pd.DataFrame()
    raw = RawTable(path, df, np.asarray(lines, dtype=np.int64), "item", False)
    return Imported(raw, NAME, {"episode_id": "src_episode_id", "trajectory_uid": "src_traj_uid",
                                "step": "step_idx"})
