"""TRL ``GRPOTrainer`` completion logs: ``<output_dir>/completions/completions_<step>.parquet``.

Columns as TRL documents them: ``step`` (training step), ``prompt`` (text, or a list of chat
messages), ``completion`` (text or messages), one column per reward function (named after it)
with its reward, and ``advantage`` (TRL's group-normalised advantage). One row per sampled
completion: a one-step trajectory. Rows with the same ``step`` and ``prompt`` are one GRPO
group (trajectory id ``r<row>``, the row in the file) (TRL does not log a group id); the prompt is the group's anchor.

Canonical mapping: ``reward`` = the sum of the reward-function columns (every numeric column
other than ``step`` / ``advantage``; TRL's ``reward_weights`` are not in the file, so weights
other than 1 are not reproduced — documented gap); ``prompt`` -> ``anchor_obs`` and
``observation``; ``completion`` -> ``action`` and ``response``; ``advantage`` is the trainer's
advantage; run = the trainer's ``output_dir`` name. Trainer keys kept: ``step`` and the row
within the file (``src_row``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import LoadError, Problem
from ..readers import RawTable, read_table
from ._common import Imported, require, run_from_dir, step_from_path, text_id, to_text

NAME = "trl"
SIGNATURE = ("prompt", "completion")
_NOT_REWARD = {"step", "advantage", "prompt", "completion", "image", "images"}


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def read(path: str) -> Imported:
    raw = read_table(path)
    require(raw, SIGNATURE, "TRL completions", "GRPOTrainer completions_<step>.parquet")
    df = raw.records
    if df.empty:
        return Imported(raw, NAME)
    reward_cols = [c for c in df.columns if c not in _NOT_REWARD
                   and pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
    if not reward_cols:
        raise LoadError([Problem(raw.path, None, None, "no reward column: a TRL completions file "
                                 "has one numeric column per reward function besides step/advantage")])
    reward = df[reward_cols].astype(np.float64).sum(axis=1, min_count=1)
    prompt = df["prompt"].map(to_text)
    completion = df["completion"].map(to_text)
    step = (df["step"].to_numpy() if "step" in df.columns
            else np.full(len(df), step_from_path(path) or 0))
    group = np.array([text_id(p) for p in prompt], dtype=object)
    out = pd.DataFrame({
        "run_id": run_from_dir(path), "train_step": step, "group_id": group,
        "traj_id": [f"r{k}" for k in range(len(df))], "step_idx": 0, "reward": reward.to_numpy(),
        "anchor_obs": prompt, "observation": prompt, "action": completion,
        "response": completion, "done": True, "src_row": np.arange(len(df), dtype=np.int64),
    })
    for c in reward_cols:
        out[f"reward_{c}"] = df[c].to_numpy()
    if "advantage" in df.columns:
        out["advantage"] = df["advantage"].to_numpy()
    return Imported(RawTable(raw.path, out, raw.line, raw.where, raw.from_text, raw.problems),
                    NAME, {"step": "train_step", "row": "src_row"})
