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
record them: noted, ``--reward-columns`` overrides); such a column of flags (bools, the text
``true``/``false``) is read as 1/0, the text of a number as the number, and any other value is a
problem naming its line and column. ms-swift 3.4 logs the prompt as the message
list ``messages[:-1]``, which in multi-turn mode holds the earlier turns, so the rollouts of one
group differ in prompt: a message-list prompt is grouped by its first user turn. ms-swift
3.5.0-3.6.4 log the same ``messages[:-1]`` as chat-templated text
(``_apply_chat_template_to_messages_list``; run at v3.6.4, tests/fixtures/swift36_multiturn):
when every prompt is the text of a known template (ChatML, Llama 3) the first user turn is cut
out of it and groups the same way (noted with the count of multi-turn prompts); a text of
another template is grouped by the whole prompt, which splits a multi-turn group (noted).
ms-swift 4.x (read from 4.6.0's wheel, ``_log_rollout`` / ``_apply_chat_template_to_messages_list``
/ ``log``; the same at 3602360a) logs the same chat-templated ``messages[:-1]`` with
``advantages`` and the ``solution`` / ``num_turns`` extras (tests/fixtures/swift46_multiturn).

Turns (history-free anchors, SCHEMA.md): a row is one rollout; its prompt's assistant messages
are its earlier turns and the completion its last, so each assistant turn is a step anchored at
the environment's message before it (the user message, or the tool results: a ChatML user turn
of ``<tool_response>`` blocks), never the prompt so far; the reward sits on the last turn.
A prompt of another template stays one step anchored at the whole prompt.
"""

from __future__ import annotations

import numpy as np

from ...errors import LoadError, Problem
from ..fields import INT_LIMIT
from ..flags import read_numbers
from ..readers import RawTable, read_table
from . import _turns
from ._common import (
    Imported,
    arrow_table,
    concat_parts,
    first_json_line,
    flag_column,
    held,
    numbers,
    numbers_from_text,
    objects,
    present,
    require,
    to_text,
)
from .trl import TEXT_KEPT, _numeric, completion_rows

NAME = "ms-swift"
#: What the app calls this format.
TITLE = "ms-swift completions.jsonl"
SIGNATURE = ("step", "prompt", "completion", "advantages")
FOLDER = False
OPTIONS = ("reward_columns", "success_column")
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


#: (start, end) of a user turn in the chat templates whose text ms-swift 3.5-3.6 logs: ChatML
#: (Qwen, Yi, InternLM2 ...), Llama 3.
_USER_TURN = (
    ("<|im_start|>user\n", "<|im_end|>"),
    ("<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>"),
)


def _first_user_turn(prompt):
    """The content of the first user turn of a message-list prompt or of a chat-templated prompt
    text (a template of `_USER_TURN`), else None."""
    if isinstance(prompt, np.ndarray):
        prompt = prompt.tolist()
    if isinstance(prompt, list):
        for m in prompt:
            if isinstance(m, dict) and m.get("role") == "user":
                return to_text(m.get("content"))
    if isinstance(prompt, str):
        for start, end in _USER_TURN:
            at = prompt.find(start)
            if at >= 0:
                stop = prompt.find(end, at + len(start))
                return prompt[at + len(start) : stop] if stop >= 0 else None
    return None


def _user_turns(prompt) -> int:
    """How many user turns a chat-templated prompt text holds (0 for other prompts)."""
    if isinstance(prompt, str):
        for start, _ in _USER_TURN:
            if start in prompt:
                return prompt.count(start)
    return 0


def _conversation_turns(rows: dict, out: dict, line: np.ndarray):
    """A multi-turn row (the prompt holds the conversation before the last reply: ms-swift logs
    ``messages[:-1]``, as a message list in 3.4, as ChatML / Llama 3 text from 3.5 through 4.6)
    as one step per assistant turn: the prompt's assistant messages and then the completion, each
    anchored at the environment's message before it (`_turns`). A prompt of another template
    stays one step anchored at the whole prompt. Returns (rows, lines, note or None)."""
    turns = []
    for p, c in zip(objects(rows["prompt"]), objects(rows["completion"])):
        msgs = _turns.messages(p) if not isinstance(p, str) else _turns.templated_messages(p)
        if msgs is None or not isinstance(c, str):
            turns.append(None)
            continue
        at = next((k for k, m in enumerate(msgs) if m.get("role") == "assistant"), len(msgs))
        turns.append(_turns.conversation_turns(msgs[:at], [*msgs[at:], {"role": "assistant", "content": c}]))
    rows_out, lines, multi, _ = _turns.expand_turns(out, turns, line)
    if rows_out is out:
        return out, line, None
    return (
        rows_out,
        lines,
        f"conversations read as turns: {len(lines)} assistant turns in {len(line)} completions ({multi} "
        "multi-turn: the prompt's assistant messages are the earlier turns); each turn's anchor is the "
        "user / tool message before it, never the conversation so far",
    )


def _v3_rewards(rows: dict, table: RawTable) -> tuple[dict, list[str], list[str]]:
    """(rows, reward columns, notes) of an ms-swift 3.x file (no ``advantages``): every column
    besides step, prompt and completion is a reward function's, read by the one rule: numbers,
    the text of numbers, and flags (bools, the text true/false) as 1/0 (as ms-swift's
    ``torch.tensor(..., dtype=float32)`` reads them; noted); any other value is a problem naming
    its line and column, never left out of the reward or the success.

    Raises:
        LoadError: a reward column holding a value that is neither a number nor a flag.
    """
    rows, notes = numbers_from_text(rows, skip=TEXT_KEPT)
    flagged = []
    for c in list(rows):
        if c in TEXT_KEPT or c in _numeric(rows):
            continue
        flags, _, _ = flag_column(rows[c])
        if flags is not None:
            rows[c] = np.where(present(objects(rows[c])), flags.astype(np.float64), np.nan)
            flagged.append(c)
        else:
            numbers(objects(rows[c]), table.path, table.line, c, table.where)  # names each bad value
    if flagged:
        notes.append(f"true/false read as 1/0 in reward column(s): {', '.join(flagged)}")
    reward_columns = _numeric({c: v for c, v in rows.items() if c != "step"})
    if reward_columns:
        notes.append(
            f"no advantages logged (ms-swift 3.x): reward = {' + '.join(reward_columns)}, every "
            "numeric column, with unit weights (reward_weights are not in the file); "
            "--reward-columns overrides"
        )
    return rows, reward_columns, notes


def read(path: str, *, reward_columns=None, success_column=None) -> Imported:
    raw = read_table(path)
    require(raw, _V3, "ms-swift completions.jsonl", "one object of lists per logging step")
    df = raw.columns
    if not df.rows:
        return Imported(raw, NAME)
    parts, lines = [], []
    for i in range(df.rows):
        row = df.row(i)
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
                        f"{sorted(set(row) - set(vals))} not lists or lengths "
                        f"{sorted(lens)}",
                        raw.where,
                    )
                ]
            )
        parts.append({k: list(v) for k, v in vals.items()})
        lines.append(np.full(lens.pop(), int(raw.line[i]), dtype=np.int64))
    rows = concat_parts(parts)
    n = len(rows["step"])
    step = read_numbers(objects(rows["step"]))[0]  # ms-swift writes it as text
    whole = np.isfinite(step) & (step == np.round(step)) & (np.abs(step) <= INT_LIMIT)
    if not whole.all():
        bad = int(np.flatnonzero(~whole)[0])
        raise LoadError(
            [
                Problem(
                    raw.path,
                    int(np.concatenate(lines)[bad]),
                    "step",
                    f"not a step number: {held(rows['step'])[bad]!r:.40}",
                    raw.where,
                )
            ]
        )
    table = RawTable(
        raw.path, arrow_table(rows, n), np.concatenate(lines), raw.where, raw.from_text, raw.problems
    )
    pre = []
    if "advantages" not in rows and not reward_columns:
        rows, reward_columns, pre = _v3_rewards(rows, table)
    prompts = objects(rows["prompt"])
    first_user = [_first_user_turn(p) for p in prompts]
    key = None
    if present(first_user).all():
        key = first_user
        if all(isinstance(p, str) for p in prompts):
            turns = np.array([_user_turns(p) for p in prompts], dtype=np.int64)
            pre.append(
                "prompts are chat-templated text (ms-swift 3.5-3.6); "
                f"{int((turns > 1).sum())} hold earlier turns (multi-turn): a group is a run of rows "
                "with one step and first user turn"
            )
        else:
            pre.append(
                "prompts are message lists: a group is a run of rows with one step and first user turn"
            )
    elif all(isinstance(p, str) for p in prompts):
        pre.append(
            "prompts are text of no known chat template (ChatML, Llama 3): a group is a run of rows "
            "with one step and prompt; in multi-turn mode (ms-swift 3.5-3.6: the prompt holds the "
            "earlier turns) that splits each group"
        )
    out, notes = completion_rows(
        table,
        {c: v for c, v in rows.items() if c != "step"},
        step.astype(np.int64),
        reward_columns=reward_columns,
        success_column=success_column,
        adv_col="advantages",
        fmt="ms-swift",
        group_key=key,
    )
    notes[:0] = [f"{n} completions unrolled from {df.rows} logging step line(s)", *pre]
    out, line, note = _conversation_turns(rows, out, table.line)
    if note:
        notes.append(note)
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, raw.from_text, raw.problems),
        NAME,
        {"step": "train_step", "row": "src_row"},
        tuple(notes),
    )
