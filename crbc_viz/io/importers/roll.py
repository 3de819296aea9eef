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

What ROLL writes (read from ROLL 8eb27cc2 and run, tests/fixtures/roll_real):
``dump_rollout_trajectories`` writes ``rollout_dump_data.step_<N>.jsonl`` holding **one JSON
object whose values are lists** (one element per step row, only the columns of
``meta_info["COLUMMNS_CONFIG"]`` plus ``global_step``); such files are unrolled into rows. The
step-wise manager names no columns, so ROLL writes nothing for it: docs/roll_recipe.md adds the
copies ``crbc_traj_group_id`` ... ``crbc_done``, read here as the names without ``crbc_``. Plain
JSONL / Parquet step rows under the same names are read too. Rows may be in any order (``step``
orders them; without it the file is refused); exact duplicate rows are dropped with a note,
conflicting ones are an error naming both. Success = ``episode_scores`` > success_threshold
unless ``success`` is present; without an ``action`` the response text is the edge label.
``done`` / ``terminated`` is a flag (`crbc_viz.io.flags`: a bool or 0/1; in a CSV also the text
true/false): a missing value says nothing, any other value (``"False"`` in a JSON file, 2) is a
problem naming its row, never read as ended.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_flag, read_flags
from ..readers import RawTable, read_table
from ._common import Imported, drop_exact_duplicates, rename, require, run_from_dir, step_from_path, to_text

NAME = "roll"
SIGNATURE = ("traj_group_id", "traj_id")
PREFIX = "crbc_"  # docs/roll_recipe.md: copies that ROLL's dump may pop from the batch
_AGENT_NATIVE = {"trajectory_data", "messages", "tools"}
FIELD_MAP = {
    "traj_group_id": "group_id",
    "step": "step_idx",
    "state_hash": "anchor_key",
    "episode_scores": "episode_return",
    "tags": "env_name",
    "global_step": "train_step",
    "response_text": "response",
}


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields or {PREFIX + f for f in SIGNATURE} <= fields


def _unroll(raw: RawTable) -> tuple[RawTable, str | None]:
    """ROLL's column files (each JSON line an object of equal-length lists) as step rows."""
    df = raw.records
    if df.empty or not all(isinstance(v, (list, np.ndarray)) for v in df.iloc[0]):
        return raw, None
    parts, lines = [], []
    for i in range(len(df)):
        row = df.iloc[i]
        lens = {len(v) for v in row if isinstance(v, (list, np.ndarray))}
        if len(lens) != 1 or not all(isinstance(v, (list, np.ndarray)) for v in row):
            raise LoadError(
                [
                    Problem(
                        raw.path,
                        int(raw.line[i]),
                        None,
                        "a ROLL dump line is one "
                        "object of equal-length lists (one element per row); this "
                        f"one has lists of lengths {sorted(lens)}",
                        raw.where,
                    )
                ]
            )
        parts.append(pd.DataFrame({k: list(v) for k, v in row.items()}))
        lines.append(np.arange(lens.pop()))
    out = pd.concat(parts, ignore_index=True)
    line = np.concatenate(lines) if len(lines) == 1 else np.arange(len(out))
    return (
        RawTable(raw.path, out, line.astype(np.int64), "item", False, raw.problems),
        f"ROLL column file: {len(out)} rows unrolled from {len(df)} object(s) of lists",
    )


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


def _done_flags(col: pd.Series, raw: RawTable) -> np.ndarray:
    """``done`` per row: True / False, None where the row has none; any value that is not a
    flag is a problem naming its row (``bool("False")`` would read a truncated step as ended)."""
    values = col.to_numpy(dtype=object)
    present = ~pd.isna(col).to_numpy()
    flags, bad = read_flags(values[present], text=raw.from_text)
    if len(bad):
        rows = np.flatnonzero(present)[bad]
        raise LoadError(
            [
                Problem(
                    raw.path, int(raw.line[i]), "done", not_a_flag(values[i], text=raw.from_text), raw.where
                )
                for i in rows[:MAX_LISTED]
            ],
            total=len(rows),
        )
    out = np.full(len(values), None, dtype=object)
    out[present] = flags
    return out


def read(path: str) -> Imported:
    raw, note = _unroll(read_table(path))
    notes = [note] if note else []
    cols = set(raw.records.columns)
    strip = {c: c[len(PREFIX) :] for c in cols if c.startswith(PREFIX) and c[len(PREFIX) :] not in cols}
    if strip:
        raw = RawTable(
            raw.path, raw.records.rename(columns=strip), raw.line, raw.where, raw.from_text, raw.problems
        )
    if not raw.records.empty and _AGENT_NATIVE & cols and "traj_id" not in raw.records.columns:
        raise LoadError(
            [
                Problem(
                    raw.path,
                    None,
                    None,
                    "ROLL's agent-native dump (trajectory_data / "
                    "messages / tools) has no step rows; use the step-wise recipe of "
                    "docs/roll_recipe.md",
                )
            ]
        )
    if not raw.records.empty and "step" not in raw.records.columns:
        raise LoadError(
            [
                Problem(
                    raw.path,
                    None,
                    "step",
                    "missing in every row: ROLL's rollouts "
                    "come back in completion order, so without the turn index the "
                    "rows cannot be ordered (docs/roll_recipe.md writes crbc_step)",
                )
            ]
        )
    require(raw, SIGNATURE + ("step", "step_scores"), "ROLL step-wise dump", "see docs/roll_recipe.md")
    df = raw.records.copy()
    if df.empty:
        return Imported(raw, NAME)
    df, line, dup = drop_exact_duplicates(df, raw.line, ("traj_id", "step"), raw.path, raw.where)
    if dup:
        notes.append(dup)
    raw = RawTable(raw.path, df, line, raw.where, raw.from_text, raw.problems)
    steps = df["step"].to_numpy(dtype=object)
    df["reward"] = [
        _scalar(v, s if isinstance(s, (int, np.integer)) else None) for v, s in zip(df["step_scores"], steps)
    ]
    df = df.drop(columns=["step_scores"])
    if "episode_scores" in df.columns:
        df["episode_scores"] = df["episode_scores"].map(_scalar)
    if "done" not in df.columns and "terminated" in df.columns:
        df["done"] = df["terminated"]
    if "done" in df.columns:
        df["done"] = _done_flags(df["done"], raw)
    else:
        notes.append("no done / terminated field: truncation unknown (docs/roll_recipe.md writes crbc_done)")
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
    return Imported(
        RawTable(raw.path, out, raw.line, raw.where, raw.from_text, raw.problems), NAME, keys, tuple(notes)
    )
