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
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import LoadError, Problem
from ..readers import RawTable, read_table
from ._common import Imported, require
from .trl import completion_rows

NAME = "ms-swift"
SIGNATURE = ("step", "prompt", "completion", "advantages")


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def read(path: str, *, reward_columns=None, success_column=None) -> Imported:
    raw = read_table(path)
    require(raw, SIGNATURE, "ms-swift completions.jsonl", "one object of lists per logging step")
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
    out, notes = completion_rows(
        table,
        rows.drop(columns=["step"]),
        step.to_numpy(np.int64),
        reward_columns=reward_columns,
        success_column=success_column,
        adv_col="advantages",
        fmt="ms-swift",
    )
    notes.insert(0, f"{len(rows)} completions unrolled from {len(df)} logging step line(s)")
    return Imported(
        RawTable(raw.path, out, table.line, raw.where, raw.from_text, raw.problems),
        NAME,
        {"step": "train_step", "row": "src_row"},
        tuple(notes),
    )
