"""TRL ``GRPOTrainer`` completion logs: ``<output_dir>/completions/completions_<step>.parquet``.

Written by ``GRPOTrainer.log`` when ``GRPOConfig(log_completions=True)`` (read from TRL 0.29.1's
and 1.16.0's source and checked on a real run of each, tests/fixtures/trl_0291 and trl_real):
``step``, ``prompt`` (text or chat messages), ``completion``, one column per reward function
(named after the function), the columns reward functions add through ``log_extra`` (e.g.
``num_turns``; 1.16.0 writes them, 0.29.1 has no ``log_extra``), and ``advantage``. One
row per sampled completion, a one-step trajectory; the ``num_generations`` completions of one
prompt are consecutive rows (TRL's RepeatSampler), so a group is a run of rows with the same
``step`` and ``prompt`` (runs longer than the file's group size, the gcd of the run lengths,
are split). The prompt is the group's anchor.

The file does not say which numeric columns are rewards and which are logged extras, nor the
``reward_weights``. Rewards: the columns named by ``reward_columns`` (``--reward-columns``);
otherwise the leading numeric columns (TRL writes rewards before extras) whose unit-weight sum
reproduces the logged ``advantage`` in every group (TRL's advantage is the group-centred reward,
scaled), which leaves out extras such as ``num_turns`` (when the advantage cannot decide, the
column names do; noted); with no ``advantage`` column they must be declared. Success:
``success_column`` (``--success-column``, a 0/1 column: numbers, bools, or the text ``0``/``1``/
``true``/``false``), else the one reward column holding only 0 and 1 (e.g. ``reward_won``),
else the one other column named like a success (``won``, ``success``, ``correct`` ...) holding
only such flags (a logged extra, or a reward column written as strings), else reward >
the success threshold (noted, naming any success-named column that holds other values). A value
of the success column that is not a flag (NaN, None, ``"yes"``, 2) is a problem naming its row,
never read as a success or a failure (`crbc_viz.io.flags`). Truncation
(completion cut by ``max_completion_length``) is not in the file: every row is taken as ended.
Trainer keys kept: ``step`` and the row within the file (``src_row``).

Conversational completions (TRL 1.x, checked on a 1.16.0 run with ``tools``,
tests/fixtures/trl_tools): ``prompt`` and ``completion`` are message lists; with tools,
``_tool_call_loop`` appends each ``{"role": "tool", "name", "content"}`` result and the next
assistant message to the completion. Each assistant turn is a step (`_turns`): its anchor is the
tool result(s) before it (the prompt's last user message for the first), its action the tool
calls it made (``[{"name", "arguments"}]``) else its text; the reward sits on the last turn. A
completion ending on a tool call left unanswered (``max_tool_calling_iterations`` reached, or the
result dropped as too long) is truncated. A text prompt / completion stays one step.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_flag, read_flags
from ..readers import RawTable, read_table
from . import _turns
from ._common import Imported, require, run_from_dir, step_from_path, text_id, to_text

NAME = "trl"
#: What the app calls this format.
TITLE = "TRL completions parquet"
SIGNATURE = ("prompt", "completion")
_NOT_REWARD = {
    "step",
    "advantage",
    "advantages",
    "prompt",
    "completion",
    "image",
    "images",
    "solution",
    "global_step",
}
_SUCCESS_NAME = re.compile(r"won|success|succeed|correct|accura|solved|pass", re.I)


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def _numeric(df: pd.DataFrame) -> list[str]:
    return [
        c
        for c in df.columns
        if c not in _NOT_REWARD
        and pd.api.types.is_numeric_dtype(df[c])
        and not pd.api.types.is_bool_dtype(df[c])
    ]


def group_runs(step: np.ndarray, prompt: pd.Series) -> tuple[np.ndarray, str | None]:
    """Group index of each row: runs of equal (step, prompt), split into chunks of the gcd of the
    run lengths (two groups of one prompt sampled back to back)."""
    key = pd.Series([f"{s}\x00{p}" for s, p in zip(step, prompt)])
    new = np.r_[True, key.to_numpy()[1:] != key.to_numpy()[:-1]]
    run = np.cumsum(new) - 1
    lengths = np.bincount(run)
    g = math.gcd(*lengths.tolist()) if len(lengths) else 1
    pos = np.arange(len(key)) - np.flatnonzero(new)[run]
    chunk = pos // g
    codes, _ = pd.factorize(pd.Series(list(zip(run, chunk))))
    note = None
    if (lengths > g).any():
        note = (
            f"{int((lengths > g).sum())} run(s) of one prompt longer than the group size {g} "
            "were split into groups of {g} (the same prompt sampled twice)"
        ).replace("{g}", str(g))
    return codes.astype(np.int64), note


def _matches(reward: np.ndarray, adv: np.ndarray, groups: np.ndarray) -> bool:
    """True when, in every group, the logged advantage is a non-negative multiple of the
    group-centred reward (TRL's scale_rewards group / batch / none all are)."""
    for g in np.unique(groups):
        m = groups == g
        c = reward[m] - reward[m].mean()
        a = adv[m]
        tol = 1e-2 * max(1.0, float(np.abs(a).max()))  # logged values may be rounded
        if np.abs(c).max() < 1e-9:
            if np.abs(a).max() > tol:
                return False
            continue
        k = float(a @ c) / float(c @ c)
        if k < 0 or np.abs(a - k * c).max() > tol:
            return False
    return True


_REWARD_NAME = re.compile(r"reward|score|acc|format|correct|won|success|solved|pass", re.I)


def reward_columns_from_advantage(
    df: pd.DataFrame, cand: list[str], groups: np.ndarray, adv_col: str = "advantage"
) -> tuple[list[str] | None, bool]:
    """(reward columns, whether the advantage alone decided) from the logged advantage.

    TRL writes the reward columns first, then the ``log_extra`` columns, so the rewards are a
    prefix of the numeric columns in file order; the prefixes whose sum reproduces the advantage
    are the candidates. When several do (the columns after the shortest are constant within
    every group, so the advantage cannot tell), the longest one whose last column is named like
    a reward (``*reward*``, ``*acc*``, ``*format*`` ...) is taken, else the shortest.
    """
    adv = pd.to_numeric(df[adv_col], errors="coerce").to_numpy(np.float64)
    vals = [pd.to_numeric(df[c], errors="coerce").fillna(0.0).to_numpy(np.float64) for c in cand]
    ok = [k for k in range(1, len(cand) + 1) if _matches(np.sum(vals[:k], axis=0), adv, groups)]
    if not ok:
        return None, False
    if len(ok) == 1:
        return cand[: ok[0]], True
    named = [k for k in ok if _REWARD_NAME.search(cand[k - 1])]
    return cand[: (named[-1] if named else ok[0])], False


def outcome_columns(
    df: pd.DataFrame,
    path: str,
    groups: np.ndarray,
    *,
    reward_columns=None,
    success_column=None,
    adv_col: str = "advantage",
    fmt: str = "TRL",
):
    """(reward columns, success column or None, notes) of a completions table."""
    notes: list[str] = []
    cand = _numeric(df)
    if reward_columns:
        missing = [c for c in reward_columns if c not in df.columns]
        if missing:
            raise LoadError(
                [
                    Problem(
                        path,
                        None,
                        c,
                        f"--reward-columns names a column the file does "
                        f"not have; numeric columns: {', '.join(cand) or 'none'}",
                    )
                    for c in missing
                ]
            )
        rcols = list(reward_columns)
    else:
        if not cand:
            raise LoadError(
                [
                    Problem(
                        path,
                        None,
                        None,
                        f"no reward column: a {fmt} completions file "
                        "has one numeric column per reward function",
                    )
                ]
            )
        if adv_col not in df.columns:
            raise LoadError(
                [
                    Problem(
                        path,
                        None,
                        None,
                        f"cannot tell reward-function columns from "
                        f"logged extras without an '{adv_col}' column; numeric columns: "
                        f"{', '.join(cand)}; name the rewards with --reward-columns",
                    )
                ]
            )
        rcols, decided = reward_columns_from_advantage(df, cand, groups, adv_col)
        if rcols is None:
            raise LoadError(
                [
                    Problem(
                        path,
                        None,
                        adv_col,
                        "no set of numeric columns ("
                        f"{', '.join(cand)}) sums to a reward that reproduces the logged "
                        "advantage (reward_weights other than 1?); name them with "
                        "--reward-columns",
                    )
                ]
            )
        left = [c for c in cand if c not in rcols]
        how = (
            "the columns that reproduce the logged advantage"
            if decided
            else "the advantage fits several column sets here; chosen by column order and name"
        )
        notes.append(
            f"reward = {' + '.join(rcols)} ({how})"
            + (f"; not rewards (logged extras): {', '.join(left)}" if left else "")
            + "; --reward-columns overrides"
        )
    if success_column:
        if success_column not in df.columns:
            raise LoadError(
                [
                    Problem(
                        path, None, success_column, "--success-column names a column the file does not have"
                    )
                ]
            )
        scol = success_column
    else:
        binary = [
            c
            for c in rcols
            if pd.api.types.is_numeric_dtype(df[c])
            and set(pd.to_numeric(df[c], errors="coerce").dropna().unique()) <= {0.0, 1.0}
        ]
        named = [c for c in binary if _SUCCESS_NAME.search(c)]
        pick = named if len(named) == 1 else binary if len(binary) == 1 else []
        scol = pick[0] if pick else None
        if scol:
            notes.append(f"success = {scol} (the 0/1 reward column); --success-column overrides")
        else:
            scol, note = _flag_column(df, rcols)
            notes.append(note)
    if scol is not None:
        col = df[scol]
        _, bad = read_flags(col, text=True)
        if len(bad):
            raise LoadError(
                [
                    Problem(
                        path,
                        int(i),
                        scol,
                        f"success column holds a value that is not a flag: {not_a_flag(col.iat[int(i)], text=True)}",
                        "row",
                    )
                    for i in bad[:MAX_LISTED]
                ],
                total=len(bad),
            )
    return rcols, scol, notes


def _flag_column(df: pd.DataFrame, rcols: list[str]) -> tuple[str | None, str]:
    """(the success column among the non-reward columns, the note): the one column named like a
    success whose values are all flags (bools, 0/1, or the text 0/1/true/false)."""
    named = [
        c for c in df.columns if c not in rcols and c not in _NOT_REWARD and _SUCCESS_NAME.search(str(c))
    ]
    flag_cols, other = [], []
    for c in named:
        col = df[c]
        present = col.notna().to_numpy()
        _, bad = read_flags(col[present], text=True)
        if present.any() and not len(bad):
            flag_cols.append(c)
        else:
            k = int(np.flatnonzero(present)[bad[0]]) if len(bad) else None
            other.append(f"{c} (row {k}: {col.iat[k]!r:.30})" if k is not None else f"{c} (empty)")
    if len(flag_cols) == 1:
        return flag_cols[0], (
            f"success = {flag_cols[0]} (a column of true/false flags, not a reward); --success-column overrides"
        )
    why = (
        f"several columns of flags ({', '.join(flag_cols)})"
        if flag_cols
        else "no 0/1 reward column"
        + (f"; column(s) named like a success hold other values: {', '.join(other)}" if other else "")
    )
    return None, f"{why}: success = reward > the success threshold; name one with --success-column"


def completion_rows(
    raw: RawTable,
    df: pd.DataFrame,
    step: np.ndarray,
    *,
    reward_columns=None,
    success_column=None,
    adv_col: str = "advantage",
    fmt: str = "TRL",
    group_key: pd.Series | None = None,
):
    """Canonical one-step rows of a completions table (TRL, ms-swift): (frame, notes). A group is
    a run of rows with one step and ``group_key`` (default: the prompt)."""
    prompt = df["prompt"].map(to_text)
    completion = df["completion"].map(to_text)
    key = prompt if group_key is None else group_key
    groups, split_note = group_runs(step, key)
    rcols, scol, notes = outcome_columns(
        df,
        raw.path,
        groups,
        reward_columns=reward_columns,
        success_column=success_column,
        adv_col=adv_col,
        fmt=fmt,
    )
    reward = df[rcols].apply(pd.to_numeric, errors="coerce").astype(np.float64).sum(axis=1, min_count=1)
    gid = np.array([text_id(p) for p in key], dtype=object)
    first_chunk = pd.Series(groups).groupby(pd.Series(gid)).transform("min").to_numpy()
    gid = np.where(groups == first_chunk, gid, [f"{g}#{k}" for g, k in zip(gid, groups)])
    out = pd.DataFrame(
        {
            "run_id": run_from_dir(raw.path),
            "train_step": step,
            "group_id": gid,
            "traj_id": [f"r{k}" for k in range(len(df))],
            "step_idx": 0,
            "reward": reward.to_numpy(),
            "anchor_obs": prompt,
            "observation": prompt,
            "response": completion,
            "done": True,
            "src_row": np.arange(len(df), dtype=np.int64),
        }
    )
    if scol is not None:
        out["success"] = read_flags(df[scol], text=True)[0]
    for c in _numeric(df):
        name = f"reward_{c}" if c in rcols else c if c not in out.columns else f"src_{c}"
        out[name] = df[c].to_numpy()
    if adv_col in df.columns:
        out["advantage"] = df[adv_col].to_numpy()
    if split_note:
        notes.append(split_note)
    notes.append(f"{fmt} does not log whether a completion hit the length limit: no truncation")
    return out, notes


def _tool_turns(df: pd.DataFrame, out: pd.DataFrame, line: np.ndarray):
    """TRL 1.x conversational completions (a message list: ``GRPOTrainer._tool_call_loop`` appends
    each tool result and the next assistant message) as one step per assistant turn (`_turns`).
    Returns (rows, lines, note or None)."""
    turns = []
    for p, c in zip(df["prompt"], df["completion"]):
        history, generated = _turns.messages(p), _turns.messages(c)
        turns.append(_turns.conversation_turns(history or [], generated) if generated else None)
    rows, lines, multi, cut = _turns.expand_turns(out, turns, line)
    if rows is out:
        return out, line, None
    note = (
        f"conversational completions read as turns: {len(rows)} assistant turns in {len(out)} completions "
        f"({multi} of more than one turn); each turn's anchor is the user / tool message before it"
    )
    if cut:
        note += (
            f"; {cut} completion(s) cut inside the tool loop (a tool call left unanswered, or a tool result "
            "with no turn after it: the tool-call limit or the length): truncated"
        )
    return rows, lines, note


def read(path: str, *, reward_columns=None, success_column=None) -> Imported:
    raw = read_table(path)
    require(raw, SIGNATURE, "TRL completions", "GRPOTrainer completions_<step>.parquet")
    df = raw.records
    if df.empty:
        return Imported(raw, NAME)
    step = df["step"].to_numpy() if "step" in df.columns else np.full(len(df), step_from_path(path) or 0)
    out, notes = completion_rows(raw, df, step, reward_columns=reward_columns, success_column=success_column)
    out, line, note = _tool_turns(df, out, raw.line)
    if note:
        notes.append(note)
    return Imported(
        RawTable(raw.path, out, line, raw.where, raw.from_text, raw.problems),
        NAME,
        {"step": "train_step", "row": "src_row"},
        tuple(notes),
    )
