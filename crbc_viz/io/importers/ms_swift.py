"""ms-swift ``GRPOTrainer`` completion logs: ``<output_dir>/completions.jsonl``.

Written by ``GRPOTrainer.log`` with ``log_completions`` (read from ms-swift 3602360a and run
through its ``JsonlWriter``, tests/fixtures/swift_real): **one line per logging step**, a JSON
object of equal-length lists: ``step`` (the global step, as a *string*), ``prompt`` (the
chat-templated prompt), ``completion``, one list per reward function under its name (a
function's ``__name__``, an ORM class's name: ``Format``, ``MathAccuracy`` ...),
``advantages``, and extra logs (``solution``, ``num_turns`` for multi-turn, ``entropy``).
Each line is unrolled into one-step trajectories and read as TRL's completions are
(crbc_viz/io/importers/trl.py): a group is a run of rows with one step and prompt; rewards are
the declared ``--reward-columns`` or the leading numeric columns that reproduce the logged
``advantages``; success is ``--success-column`` or the 0/1 reward column named like a success
(``reward_won``, ``*accuracy*`` ...), else reward > the threshold. Truncation is not logged.

ms-swift 3.x (read from v3.4.1 and v3.5.0, ``GRPOTrainer.log``) writes ``step``, ``prompt``,
``completion`` and the reward columns only: no ``advantages``, no extras. Such a file is
claimed by its first line (``step`` a list of strings); every numeric column is a reward
function's, summed with unit weights (ms-swift's default ``reward_weights``; the file does not
record them: noted, ``--reward-columns`` overrides). ms-swift 3.4 logs the prompt as the message
list ``messages[:-1]``, which in multi-turn mode holds the earlier turns, so the rollouts of one
group differ in prompt: a message-list prompt is grouped by its first user turn.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...errors import LoadError, Problem
from ..readers import RawTable, read_table
from ._common import Imported, first_json_line, require, to_text
from .trl import _numeric, completion_rows

NAME = "ms-swift"
SIGNATURE = ("step", "prompt", "completion", "advantages")
_V3 = ("step", "prompt", "completion")


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def sniff_file(path: str, fields: set[str]) -> bool:
    """ms-swift 3.x: ``step``, ``prompt``, ``completion`` in a JSONL line of lists (no
    ``advantages``), which TRL never writes."""
    if not set(_V3) <= fields:
        return False
    try:
        first = first_json_line(path)
    except (LoadError, OSError):
        return False
    return isinstance(first, dict) and isinstance(first.get("step"), list)


def _first_user_turn(prompt):
    """The content of the first user message of a message-list prompt, else None."""
    if isinstance(prompt, np.ndarray):
        prompt = prompt.tolist()
    if isinstance(prompt, list):
        for m in prompt:
            if isinstance(m, dict) and m.get("role") == "user":
                return to_text(m.get("content"))
    return None


def read(path: str, *, reward_columns=None, success_column=None) -> Imported:
    raw = read_table(path)
    require(raw, _V3, "ms-swift completions.jsonl", "one object of lists per logging step")
    df = raw.records
    if df.empty:
        return Imported(raw, NAME)
    parts, lines = [], []
    for i in range(len(df)):
        row = df.iloc[i]
        vals = {k: v for k, v in row.items() if isinstance(v, (list, np.ndarray))}
        lens = {len(v) for v in vals.values()}
        if len(vals) != len(row) or len(lens) != 1:
            raise LoadError(
                [
                    Problem(
                        raw.path,
                        int(raw.line[i]),
                        None,
                        "an ms-swift completions "
                        "line is one object of equal-length lists; this one has "
                        f"{sorted(set(row.index) - set(vals))} not lists or lengths "
                        f"{sorted(lens)}",
                        raw.where,
                    )
                ]
            )
        parts.append(pd.DataFrame({k: list(v) for k, v in vals.items()}))
        lines.append(np.full(lens.pop(), int(raw.line[i]), dtype=np.int64))
    rows = pd.concat(parts, ignore_index=True)
    step = pd.to_numeric(rows["step"], errors="coerce")
    if step.isna().any():
        bad = int(np.flatnonzero(step.isna().to_numpy())[0])
        raise LoadError(
            [
                Problem(
                    raw.path,
                    int(np.concatenate(lines)[bad]),
                    "step",
                    f"not a step number: {rows['step'].iat[bad]!r}",
                    raw.where,
                )
            ]
        )
    table = RawTable(raw.path, rows, np.concatenate(lines), raw.where, raw.from_text, raw.problems)
    pre = []
    if "advantages" not in rows.columns and not reward_columns:
        reward_columns = _numeric(rows.drop(columns=["step"]))
        if reward_columns:
            pre.append(
                f"no advantages logged (ms-swift 3.x): reward = {' + '.join(reward_columns)}, every "
                "numeric column, with unit weights (reward_weights are not in the file); "
                "--reward-columns overrides"
            )
    first_user = rows["prompt"].map(_first_user_turn)
    key = None
    if first_user.notna().all():
        key = first_user
        pre.append("prompts are message lists: a group is a run of rows with one step and first user turn")
    out, notes = completion_rows(
        table,
        rows.drop(columns=["step"]),
        step.to_numpy(np.int64),
        reward_columns=reward_columns,
        success_column=success_column,
        adv_col="advantages",
        fmt="ms-swift",
        group_key=key,
    )
    notes[:0] = [f"{len(rows)} completions unrolled from {len(df)} logging step line(s)", *pre]
    return Imported(
        RawTable(raw.path, out, table.line, raw.where, raw.from_text, raw.problems),
        NAME,
        {"step": "train_step", "row": "src_row"},
        tuple(notes),
    )
