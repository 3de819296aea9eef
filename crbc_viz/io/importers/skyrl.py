"""SkyRL evaluation dumps: ``<export_path>/dumped_evals/global_step_<N>_evals/<data_source>.jsonl``
(``eval_only/`` for an evaluation run without training).

Written by ``dump_per_dataset_eval_results`` (skyrl-train ``skyrl_train/utils/trainer_utils.py``
at b3280d84, the first; ``skyrl/train/utils/trainer_utils.py`` at a9564572, the same lines;
tests/fixtures/skyrl_b328, skyrl_a956): one line per rollout with ``input_prompt`` and
``output_response`` (decoded token ids: a multi-turn response holds the environment's
observations between the model's turns, which the file does not separate), ``score`` (a number,
or a per-token list), ``stop_reason`` (the inference engine's finish reason of the last turn:
``stop``, ``length`` ...; ``"length"`` also when the conversation outgrew ``max_input_length``),
``env_class``, ``env_extras``, ``data_source``. ``aggregated_results.jsonl`` beside them holds
the metrics only; a folder walk skips it with a note.

Canonical mapping: group = identical ``input_prompt`` within the file (SkyRL writes no uid);
one one-step trajectory per line (turns are not in the file); ``score`` -> ``reward`` (a
per-token list is summed: SkyRL places the turn rewards on tokens), success = score > the
success threshold; ``stop_reason`` ``length`` is truncated, any other string ended, none
(``null``) unknown; ``env_class`` -> ``env_name``; ``train_step`` from the folder name
``global_step_<N>_evals`` (0 for ``eval_only``); anchor = the prompt, so step credit equals the
group's outcome credit.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_number, read_numbers
from ..readers import RawTable, read_table
from ._common import Imported, require, run_from_dir, text_id, to_text

NAME = "skyrl"
#: What the app calls this format.
TITLE = "SkyRL dumped_evals file"
SIGNATURE = ("input_prompt", "output_response", "score", "stop_reason")


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def train_step_of(path: str) -> int | None:
    """N of the folder ``global_step_<N>_evals``; 0 for ``eval_only``; else None."""
    name = Path(path).parent.name
    m = re.fullmatch(r"global_step_(\d+)_evals", name)
    if m:
        return int(m.group(1))
    return 0 if name == "eval_only" else None


def _number(v):
    """The score as one finite number, or the reason it is not one (the one rule of
    `crbc_viz.io.flags.read_numbers`: a number or its text; a per-token list of them is summed)."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    values = v if isinstance(v, list) else [v]
    nums, bad = read_numbers(values)
    if len(bad):
        why = not_a_number(values[int(bad[0])])
        return None, (
            f"a per-token score list holds a value that is not a number: {why}" if v is values else why
        )
    if np.isnan(nums).any():
        return None, "a per-token score list holds a null" if v is values else "missing (null)"
    total = float(nums.sum())
    if not math.isfinite(total):
        return None, f"not a finite number: the per-token scores sum to {total}"
    return total, None


def read(path: str) -> Imported:
    raw = read_table(path)
    df = raw.records
    if df.empty:
        return Imported(raw, NAME)
    require(raw, SIGNATURE, "SkyRL dumped_evals", "dump_per_dataset_eval_results")
    problems, scores, done = [], [], []
    for i in range(len(df)):
        s, why = _number(df["score"].iat[i])
        if why:
            problems.append(Problem(raw.path, int(raw.line[i]), "score", why, raw.where))
        scores.append(s)
        r = df["stop_reason"].iat[i]
        if r is None or (isinstance(r, float) and np.isnan(r)):
            done.append(None)
        elif isinstance(r, str):
            done.append(r != "length")
        else:
            problems.append(
                Problem(
                    raw.path, int(raw.line[i]), "stop_reason", f"expected a string, got {r!r:.40}", raw.where
                )
            )
        prompt = df["input_prompt"].iat[i]
        if not isinstance(prompt, str):
            problems.append(
                Problem(
                    raw.path,
                    int(raw.line[i]),
                    "input_prompt",
                    f"expected text, got {type(prompt).__name__}",
                    raw.where,
                )
            )
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    notes = []
    step = train_step_of(path)
    if step is None:
        step = 0
        notes.append(f"train_step 0: the folder {Path(path).parent.name!r} is not global_step_<N>_evals")
    prompts = df["input_prompt"].tolist()
    group = [text_id(p) for p in prompts]
    out = pd.DataFrame(
        {
            "group_id": group,
            "traj_id": [f"{g}/{int(k)}" for g, k in zip(group, raw.line)],
            "step_idx": 0,
            "reward": scores,
            "episode_return": scores,
            "anchor_obs": prompts,
            "observation": prompts,
            "action": df["output_response"].map(to_text),
            "response": df["output_response"].map(to_text),
            "done": done,
            "env_name": df["env_class"].map(to_text) if "env_class" in df.columns else None,
            "train_step": step,
            "src_line": raw.line.astype(np.int64),
        }
    )
    if out["done"].isna().all():
        out = out.drop(columns=["done"])
        notes.append("no stop_reason: truncation unknown")
    if any(isinstance(v, (list, np.ndarray)) for v in df["score"]):
        notes.append("per-token scores summed into the rollout's reward")
    notes.append(
        f"SkyRL eval dump: {len(df)} rollouts, one step each (turns are not in the file), groups = "
        "identical input_prompt, truncated = stop_reason length"
    )
    out["run_id"] = run_from_dir(str(Path(path).parent.parent))
    return Imported(
        RawTable(raw.path, out, raw.line, raw.where, False, raw.problems),
        NAME,
        {"line": "src_line"},
        tuple(notes),
    )
