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
column names do; noted); with no ``advantage`` column they must be declared. Values follow the
one rule of `crbc_viz.io.flags`: a column of numbers written as text (``"0.0"``, ``"1.0"``) is a
column of numbers (noted); a reward value that is not a number (``"x"``, ``True``, ``[]``) is a
problem naming its row and column, as is a column named like a reward that mixes numbers with
other values. Success: ``success_column`` (``--success-column``, a 0/1 column: numbers, bools,
or the text ``0``/``1``/``true``/``false``), else the one reward column named like a success
(``won``, ``success``, ``correct``, ``accuracy`` ...) holding only 0 and 1 (e.g. ``reward_won``),
else the one other column so named holding only flags (a logged extra), else the one 0/1 reward
column, else reward > the success threshold. The note counts the successes and names every
column named like a success that was passed over, with why and its counts: a fallback is never
silent. A value of the success column that is not a flag (NaN, None, ``"yes"``, 2) is a problem
naming its row, never read as a success or a failure. Truncation
(completion cut by ``max_completion_length``) is not in the file: every row is taken as ended.
Trainer keys kept: ``step`` and the row within the file (``src_row``).

Conversational completions (TRL 1.x, checked on a 1.16.0 run with ``tools``,
tests/fixtures/trl_tools): ``prompt`` and ``completion`` are message lists; with tools,
``_tool_call_loop`` appends each ``{"role": "tool", "name", "content"}`` result and the next
assistant message to the completion. Each assistant turn is a step (`_turns`): its anchor is the
tool result(s) before it (the prompt's last user message for the first), its action the tool
calls it made (``[{"name", "arguments"}]``); a turn of text alone names no action and is keyed by
its transition (SCHEMA.md); the reward sits on the last turn. A
completion ending on a tool call left unanswered (``max_tool_calling_iterations`` reached, or the
result dropped as too long) is truncated. A text prompt / completion stays one step.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_flag, not_a_number, read_flags, read_numbers
from ..readers import RawTable, read_table
from . import _turns
from ._common import (
    Imported,
    arrow_table,
    columns,
    flag_column,
    held,
    kind,
    number_problems,
    numbers_from_text,
    objects,
    require,
    run_from_dir,
    step_from_path,
    text_id,
    to_text,
)

NAME = "trl"
#: What the app calls this format.
TITLE = "TRL completions parquet"
SIGNATURE = ("prompt", "completion")
FOLDER = False
OPTIONS = ("reward_columns", "success_column")
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
#: Columns whose text stays text (the text of a number there is an answer, not a reward).
TEXT_KEPT = (_NOT_REWARD - {"advantage", "advantages"}) | {"prompt", "completion"}
_SUCCESS_NAME = re.compile(r"won|success|succeed|correct|accura|solved|pass", re.I)


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def _numeric(df: dict) -> list[str]:
    """The columns of numbers (not flags) that may be rewards."""
    return [c for c, col in df.items() if c not in _NOT_REWARD and kind(col) in "iufc"]


def group_runs(step: np.ndarray, prompt) -> tuple[np.ndarray, str | None]:
    """Group index of each row: runs of equal (step, prompt), split into chunks of the gcd of the
    run lengths (two groups of one prompt sampled back to back)."""
    key = np.array([f"{s}\x00{p}" for s, p in zip(step, prompt)], dtype=object)
    new = np.r_[True, key[1:] != key[:-1]]
    run = np.cumsum(new) - 1
    lengths = np.bincount(run)
    g = math.gcd(*lengths.tolist()) if len(lengths) else 1
    pos = np.arange(len(key)) - np.flatnonzero(new)[run]
    chunk = pos // g
    seen: dict[tuple, int] = {}
    codes = np.array(
        [seen.setdefault(k, len(seen)) for k in zip(run.tolist(), chunk.tolist())], dtype=np.int64
    )
    note = None
    if (lengths > g).any():
        note = (
            f"{int((lengths > g).sum())} run(s) of one prompt longer than the group size {g} "
            "were split into groups of {g} (the same prompt sampled twice)"
        ).replace("{g}", str(g))
    return codes.astype(np.int64), note


def _matches(reward: np.ndarray, adv: np.ndarray, groups: np.ndarray) -> bool:
    """True when, in every group, the logged advantage is a non-negative multiple of the
    group-centred reward (TRL's scale_rewards group / batch / none all are). Groups are read
    in order of their number, each one's rows in file order (a stable sort, then one slice per
    group: linear in the rows, not rows x groups)."""
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    reward, adv = reward[order], adv[order]
    bounds = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1], True]).tolist()
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        c = reward[lo:hi] - reward[lo:hi].mean()
        a = adv[lo:hi]
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
    df: dict, cand: list[str], groups: np.ndarray, adv_col: str = "advantage"
) -> tuple[list[str] | None, bool]:
    """(reward columns, whether the advantage alone decided) from the logged advantage.

    TRL writes the reward columns first, then the ``log_extra`` columns, so the rewards are a
    prefix of the numeric columns in file order; the prefixes whose sum reproduces the advantage
    are the candidates. When several do (the columns after the shortest are constant within
    every group, so the advantage cannot tell), the longest one whose last column is named like
    a reward (``*reward*``, ``*acc*``, ``*format*`` ...) is taken, else the shortest.
    """
    adv = read_numbers(objects(df[adv_col]))[0]  # not a number: NaN, which fits nothing
    vals = [np.nan_to_num(read_numbers(objects(df[c]))[0]) for c in cand]
    with np.errstate(all="ignore"):  # values near the float range: their fit fails, quietly
        ok = [k for k in range(1, len(cand) + 1) if _matches(np.sum(vals[:k], axis=0), adv, groups)]
    if not ok:
        return None, False
    if len(ok) == 1:
        return cand[: ok[0]], True
    named = [k for k in ok if _REWARD_NAME.search(cand[k - 1])]
    return cand[: (named[-1] if named else ok[0])], False


def outcome_columns(
    df,
    path: str,
    groups: np.ndarray,
    *,
    reward_columns=None,
    success_column=None,
    adv_col: str = "advantage",
    fmt: str = "TRL",
    lines=None,
    where: str = "row",
):
    """(reward columns, success column or None, notes) of a completions table whose numbers
    written as text are already numbers (`numbers_from_text`). ``lines[i]``: the line of row
    ``i`` (default: the row itself, ``where`` = ``row``).

    Raises:
        LoadError: a reward column holding a value that is not a number, a success column one
            that is not a flag, or no reward columns to be found; each named.
    """
    notes: list[str] = []
    df = columns(df)
    lines = np.arange(len(groups)) if lines is None else lines
    cand = _numeric(df)
    _refuse_mixed(df, path, lines, where, reward_columns, cand, success_column)
    if reward_columns:
        missing = [c for c in reward_columns if c not in df]
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
        rcols, note = _reward_columns_found(df, path, groups, cand, adv_col, fmt)
        notes.append(note)
    reward = reward_sum(df, rcols, path, lines, where)
    scol, note = _success_from(df, path, lines, where, success_column, rcols, reward)
    if note is not None:
        notes.append(note)
    return rcols, scol, notes


def _reward_columns_found(
    df: dict, path: str, groups: np.ndarray, cand: list[str], adv_col: str, fmt: str
) -> tuple[list[str], str]:
    """The reward columns among the numeric ``cand`` (those whose sum reproduces the logged
    advantage) and the note that says how they were chosen.

    Raises:
        LoadError: no numeric column, no advantage column, or no set of columns that fits it.
    """
    if not cand:
        raise LoadError(
            [
                Problem(
                    path,
                    None,
                    None,
                    f"no reward column: a {fmt} completions file has one numeric column per reward function",
                )
            ]
        )
    if adv_col not in df:
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
    return rcols, (
        f"reward = {' + '.join(rcols)} ({how})"
        + (f"; not rewards (logged extras): {', '.join(left)}" if left else "")
        + "; --reward-columns overrides"
    )


def _success_from(
    df: dict, path: str, lines, where: str, success_column, rcols: list[str], reward: np.ndarray
) -> tuple[str | None, str | None]:
    """The success column (``success_column``, else the one `_success_column` finds) and the
    note of that finding, None for one given.

    Raises:
        LoadError: the column given is missing, or the column holds a value that is not a flag.
    """
    if success_column:
        if success_column not in df:
            raise LoadError(
                [
                    Problem(
                        path, None, success_column, "--success-column names a column the file does not have"
                    )
                ]
            )
        scol, note = success_column, None
    else:
        scol, note = _success_column(df, rcols, reward)
    if scol is not None:
        col = held(df[scol])
        _, bad = read_flags(col, text=True)
        if len(bad):
            raise LoadError(
                [
                    Problem(
                        path,
                        int(lines[int(i)]),
                        scol,
                        f"success column holds a value that is not a flag: {not_a_flag(col[int(i)], text=True)}",
                        where,
                    )
                    for i in bad[:MAX_LISTED]
                ],
                total=len(bad),
            )
    return scol, note


def reward_sum(df: dict, rcols: list[str], path: str, lines, where: str = "row") -> np.ndarray:
    """``[n]`` the summed reward of the ``rcols`` (NaN ignored, as TRL's ``nansum``; NaN where every
    one is missing), each value read by the one rule (`crbc_viz.io.importers._common.numbers`).

    Raises:
        LoadError: a value that is not a number, named by its row and column.
    """
    problems, cols = [], []
    for c in rcols:
        nums, bad = number_problems(objects(df[c]), path, lines, c, where)
        problems += bad
        cols.append(nums)
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    if not cols:
        return np.full(len(lines), np.nan)
    stack = np.vstack(cols)
    return np.where(np.isnan(stack).all(axis=0), np.nan, np.nansum(stack, axis=0))


def _refuse_mixed(df: dict, path: str, lines, where: str, declared, numeric, success) -> None:
    """A column named like a reward (or declared one) that holds numbers and values that are
    neither numbers nor flags (``0.5`` and ``"abc"``) is refused, naming the rows: leaving it
    out of the reward, or reading its text as 0, would change the outcome silently. The declared
    success column (``success``) is checked as flags instead."""
    problems = []
    for c in df:
        if c in TEXT_KEPT or c in numeric or c == success:
            continue
        if not (_REWARD_NAME.search(str(c)) or (declared and c in declared)):
            continue
        values = objects(df[c])
        nums, bad = read_numbers(values)
        if len(bad) == len(values) or flag_column(df[c])[0] is not None:
            continue  # no number at all (text, flags): not a reward column, noted where it matters
        problems += [
            Problem(path, int(lines[i]), c, f"a reward column: {not_a_number(values[i])}", where)
            for i in bad.tolist()
        ]
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))


def _passed_over(df: dict, c: str, info: tuple) -> str:
    """Why the column ``c`` named like a success is not the success column, with its counts."""
    flags, nbad, first = info
    n = len(held(df[c]))
    if flags is not None:
        return f"{c} (also flags: {int(flags.sum())} of {n} would succeed)"
    if first is None:
        return f"{c} (empty)"
    return f"{c} (row {first}: {held(df[c])[first]!r:.30}) [{nbad} of {n} rows not flags]"


def _success_column(df: dict, rcols: list[str], reward: np.ndarray) -> tuple[str | None, str]:
    """(the success column or None, the note). In order: the one reward column named like a
    success (``reward_won``, ``*accuracy*``) holding only 0/1; else the one other column so
    named holding only flags (bools, 0/1, the text true/false: a logged extra); else the one
    0/1 reward column; else none (reward > the success threshold). The note gives the count of
    successes and names every column named like a success that was passed over, with why and
    its counts: a fallback is never silent."""
    n = len(reward)
    named = [
        c
        for c in df
        if c not in _NOT_REWARD and c not in ("prompt", "completion") and _SUCCESS_NAME.search(str(c))
    ]
    info = {c: flag_column(df[c]) for c in named}
    usable = [c for c in named if info[c][0] is not None]
    named_rewards = [c for c in usable if c in rcols]
    named_other = [c for c in usable if c not in rcols]
    binary = [c for c in rcols if c in _numeric(df) and flag_column(df[c])[0] is not None]
    pick, why = None, ""
    if len(named_rewards) == 1:
        pick, why = named_rewards[0], "the 0/1 reward column named like a success"
    elif not named_rewards and len(named_other) == 1:
        pick, why = named_other[0], "a column of true/false flags, not a reward"
    elif not usable and len(binary) == 1:
        pick, why = binary[0], "the 0/1 reward column"
    others = [_passed_over(df, c, info[c]) for c in named if c != pick]
    if pick is not None:
        k = int(flag_column(df[pick])[0].sum())
        return pick, (
            f"success = {pick} ({why}): {k} of {n} completions; --success-column overrides"
            + (f"; not {', '.join(others)}" if others else "")
        )
    if len(usable) > 1:
        head = f"several columns of flags ({', '.join(usable)})"
    else:
        head = "no 0/1 reward column" + (
            f"; column(s) named like a success hold other values: {', '.join(others)}" if others else ""
        )
    k = int((reward > 0).sum())
    return None, (
        f"{head}: success = reward > the success threshold ({k} of {n} completions have reward > 0); "
        "name one with --success-column"
    )


def completion_rows(
    raw: RawTable,
    df,
    step: np.ndarray,
    *,
    reward_columns=None,
    success_column=None,
    adv_col: str = "advantage",
    fmt: str = "TRL",
    group_key=None,
):
    """Canonical one-step rows of a completions table (TRL, ms-swift; a reader's `Columns` or a dict
    of columns): (the columns, for `arrow_table`; notes). A group is
    a run of rows with one step and ``group_key`` (default: the prompt). Numbers written as text
    (a reward column of ``"0.0"`` / ``"1.0"``) are read as numbers first, noted."""
    df, text_notes = numbers_from_text(df, skip=TEXT_KEPT)
    prompt = [to_text(v) for v in objects(df["prompt"])]
    completion = [to_text(v) for v in objects(df["completion"])]
    n = len(prompt)
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
        lines=raw.line,
        where=raw.where,
    )
    notes[:0] = text_notes
    reward = reward_sum(df, rcols, raw.path, raw.line, raw.where)
    gid = np.array([text_id(p) for p in key], dtype=object)
    lowest: dict = {}
    for g, k in zip(gid.tolist(), groups.tolist()):
        lowest[g] = min(lowest.get(g, k), k)
    first_chunk = np.array([lowest[g] for g in gid.tolist()], dtype=np.int64)
    gid = np.where(groups == first_chunk, gid, [f"{g}#{k}" for g, k in zip(gid, groups)])
    out = {
        "run_id": run_from_dir(raw.path),
        "train_step": step,
        "group_id": gid,
        "traj_id": [f"r{k}" for k in range(n)],
        "step_idx": 0,
        "reward": reward,
        "anchor_obs": prompt,
        "observation": prompt,
        "response": completion,
        "done": True,
        "src_row": np.arange(n, dtype=np.int64),
    }
    if scol is not None:
        out["success"] = read_flags(held(df[scol]), text=True)[0]
    for c in _numeric(df):
        name = f"reward_{c}" if c in rcols else c if c not in out else f"src_{c}"
        out[name] = held(df[c])
    if adv_col in df:
        out["advantage"] = held(df[adv_col])
    if split_note:
        notes.append(split_note)
    notes.append(f"{fmt} does not log whether a completion hit the length limit: no truncation")
    return out, notes


def _tool_turns(df, out: dict, line: np.ndarray):
    """TRL 1.x conversational completions (a message list: ``GRPOTrainer._tool_call_loop`` appends
    each tool result and the next assistant message) as one step per assistant turn (`_turns`).
    Returns (rows, lines, note or None)."""
    turns = []
    for p, c in zip(objects(df["prompt"]), objects(df["completion"])):
        history, generated = _turns.messages(p), _turns.messages(c)
        turns.append(_turns.conversation_turns(history or [], generated) if generated else None)
    rows, lines, multi, cut = _turns.expand_turns(out, turns, line)
    if rows is out:
        return out, line, None
    note = (
        f"conversational completions read as turns: {len(lines)} assistant turns in {len(line)} completions "
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
    df = raw.columns
    if not df.rows:
        return Imported(raw, NAME)
    step = df["step"] if "step" in df else np.full(df.rows, step_from_path(path) or 0)
    out, notes = completion_rows(raw, df, step, reward_columns=reward_columns, success_column=success_column)
    out, line, note = _tool_turns(df, out, raw.line)
    if note:
        notes.append(note)
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, raw.from_text, raw.problems),
        NAME,
        {"step": "train_step", "row": "src_row"},
        tuple(notes),
    )
