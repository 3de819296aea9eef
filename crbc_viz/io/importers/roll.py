"""ROLL (alibaba/ROLL) agentic pipeline, step-wise dumps: one row per environment step with
the fields of ROLL's ``non_tensor_batch`` in step-wise (GiGPO) mode.

=====================  ===========================================  ==================
ROLL field             meaning                                      canonical field
=====================  ===========================================  ==================
``traj_group_id``      ``{tag}_{group_id}_{episode_id}_{seed}``     ``group_id``
``traj_id``            ``{traj_group_id}_{env_id}``                 ``traj_id``
``step``               turn index                                   ``step_idx``
``state_hash``         hash of the env state (GiGPO anchor)         ``anchor_key``
``step_scores``        this step's score (a number, or the          ``reward``
                       trajectory's per-step list: element ``step``)
``episode_scores``     trajectory score (number or 1-list)          ``episode_return``
``tags``               environment tag                              ``env_name``
``done``/``terminated`` episode ended (``truncated`` = not done)    ``done``
``global_step``        trainer step (else from the file name)      ``train_step``
``response_text``/``action``, ``messages_list``                     ``response``/``action``, ``observation``
=====================  ===========================================  ==================

Assumptions (ROLL has no single dump format; these follow its field names): JSONL or
Parquet; success = ``episode_scores`` > success_threshold unless ``success`` is present;
without an ``action`` the response text is the edge label.
"""
from __future__ import annotations

import numpy as np

from ..readers import RawTable, read_table
from ._common import Imported, rename, require, run_from_dir, step_from_path, to_text

NAME = "roll"
SIGNATURE = ("traj_group_id", "traj_id")
FIELD_MAP = {"traj_group_id": "group_id", "step": "step_idx", "state_hash": "anchor_key",
             "episode_scores": "episode_return", "tags": "env_name", "global_step": "train_step",
             "response_text": "response"}


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def _scalar(v, idx=None):
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        if not v:
            return None
        if idx is not None and 0 <= idx < len(v):
            return v[idx]
        return v[-1]
    return v


def _last_message(msgs, role):
    if isinstance(msgs, np.ndarray):
        msgs = msgs.tolist()
    if isinstance(msgs, list):
        for m in reversed(msgs):
            if isinstance(m, dict) and m.get("role") == role:
                return to_text(m.get("content"))
    return None


def read(path: str) -> Imported:
    raw = read_table(path)
    require(raw, SIGNATURE + ("step", "step_scores"), "ROLL step-wise dump", "step-wise non_tensor_batch")
    df = raw.records.copy()
    if df.empty:
        return Imported(raw, NAME)
    steps = df["step"].to_numpy(dtype=object)
    df["reward"] = [_scalar(v, s if isinstance(s, (int, np.integer)) else None)
                    for v, s in zip(df["step_scores"], steps)]
    df = df.drop(columns=["step_scores"])
    if "episode_scores" in df.columns:
        df["episode_scores"] = df["episode_scores"].map(_scalar)
    if "done" not in df.columns and "terminated" in df.columns:
        df["done"] = df["terminated"]
    if "messages_list" in df.columns:
        if "response_text" not in df.columns:
            df["response_text"] = df["messages_list"].map(lambda m: _last_message(m, "assistant"))
        df["observation"] = df["messages_list"].map(lambda m: _last_message(m, "user"))
        df = df.drop(columns=["messages_list"])
    if "action" not in df.columns and "response_text" in df.columns:
        df["action"] = df["response_text"]
    out = rename(df, FIELD_MAP)
    if "run_id" not in out.columns:
        out["run_id"] = run_from_dir(path)
    if "train_step" not in out.columns:
        out["train_step"] = step_from_path(path) or 0
    keys = {"traj_group_id": "group_id", "traj_id": "traj_id", "step": "step_idx"}
    return Imported(RawTable(raw.path, out, raw.line, raw.where, raw.from_text, raw.problems),
                    NAME, keys)
