"""verl ``trainer.rollout_data_dir`` dumps (``RayPPOTrainer._dump_generations``).

One JSONL per training step, ``{global_steps}.jsonl``; one line per sampled response:
``input`` (the decoded prompt, chat template included), ``output`` (the decoded response),
``score`` (the sequence reward), ``step`` (``global_steps``), optionally ``gts`` (ground truth)
and every reward-extra-info key (e.g. ``acc``). Trajectory-level: each line is a one-step
trajectory; lines with the identical ``input`` within a step form a GRPO group (verl repeats
a prompt ``n`` times and does not write its ``uid``). The prompt is the group's single anchor,
so step credit equals the group-relative outcome credit.

Canonical mapping: ``input`` -> ``anchor_obs`` and ``observation``; ``output`` -> ``action``
and ``response``; ``score`` -> ``reward`` (success = score > success_threshold); ``step`` ->
``train_step``; the run is the dump folder's parent folder name. Trainer keys kept for
export: ``step`` and the file line (``src_line``).
"""
from __future__ import annotations

import pandas as pd

from ..readers import RawTable, read_table
from ._common import Imported, require, run_from_dir, step_from_path, text_id, to_text

NAME = "verl"
SIGNATURE = ("input", "output", "score")


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def read(path: str, *, anchors: bool = True) -> Imported:
    raw = read_table(path)
    require(raw, SIGNATURE, "verl rollout_data_dir", "verl's _dump_generations JSONL")
    df = raw.records
    if df.empty:
        return Imported(raw, NAME)
    prompt = df["input"].map(to_text)
    step = df["step"] if "step" in df.columns else pd.Series([step_from_path(path) or 0] * len(df))
    group = [text_id(p) for p in prompt]
    out = df.drop(columns=[c for c in ("input", "output", "score", "step") if c in df.columns])
    out = out.assign(
        run_id=run_from_dir(path), train_step=step.to_numpy(), group_id=group,
        traj_id=[f"l{int(x)}" for x in raw.line], step_idx=0, reward=df["score"].to_numpy(),
        action=df["output"].map(to_text), response=df["output"].map(to_text),
        observation=prompt, done=True, src_line=raw.line,
    )
    if anchors:
        out["anchor_obs"] = prompt
    return Imported(RawTable(raw.path, out, raw.line, raw.where, raw.from_text, raw.problems),
                    NAME, {"step": "train_step", "line": "src_line"})
