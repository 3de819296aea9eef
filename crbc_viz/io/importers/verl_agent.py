"""verl-agent (GiGPO's trainer): the crbc dump hook's files, and its ``rollout_data_dir`` JSONL.

Checked on files written by verl-agent's own code at commits e03bd50 (2025-07) and 796ed31
(2026-02): the hook applies unchanged at both, and both dump ``rollout_data_dir`` alike
(``tests/fixtures/generators/verl_agent_e03_gen.py``, ``verl_agent_gen.py``).

**Dump hook** (``docs/verl_agent_hook.md``): one JSONL (or Parquet) per training step,
``crbc_step_<global_steps>.jsonl``, one row per environment step of the trainer's batch, with
the batch's own field names:

=================  =======================================  ====================
verl-agent field   meaning                                  canonical field
=================  =======================================  ====================
``uid``            GRPO group (same task, same env seed)    ``group_id``
``traj_uid``       one rollout                              ``traj_id``
``step``           turn index (written by the hook)         ``step_idx``
``anchor_obs``     history-free env state (GiGPO anchor)    ``anchor_obs``
``rewards``        step reward                              ``reward``
``active_masks``   the env was still running at this step   rows with false are dropped
``is_action_valid`` the action parsed                       ``is_action_valid``
``won``            env info ``won`` (ALFWorld/WebShop...)   ``success``
``done``           env done flag at this step (the hook)    ``done``
``episode_rewards`` trajectory return                       ``episode_return``
``global_step``    trainer step                             ``train_step``
``data_source``    environment name                         ``env_name``
``action``/``response`` parsed action / decoded response   ``action`` / ``response``
``advantage``      the trainer's advantage (token mean)     ``advantage``
=================  =======================================  ====================

Rows come after ``adjust_batch(mode="copy")`` (copies of random rows pad the batch) and
``_balance_batch`` (rows reordered): exact copies of a (``traj_uid``, ``step``) row are dropped
with a counted note (``Imported.counts['copies_dropped']``; a trajectory has one row per turn, so
a second row for one turn is a copy), two different rows for one (``traj_uid``, ``step``) are
an error naming both lines, and a file without ``step`` is an error (its rows cannot be put back in order). ``done``
(the env's flag, written by the hook) marks truncation: a trajectory whose last row has
``done = false`` was cut by ``env.max_steps``; without ``done`` truncation is unknown (noted).
Without ``action`` the last ``<action>…</action>`` of ``response`` is the action (verl-agent's
prompt convention), else none (the step is identified by its transition, SCHEMA.md). ``active_masks`` is a flag (`crbc_viz.io.flags`: a
bool or 0/1; in a CSV also the text true/false): a missing value, NaN or ``"False"`` in a JSON
file is a problem naming its line, never read as active or inactive. ``rewards`` and
``episode_rewards`` are numbers or their text, ``won`` a flag, by the same rule; any other value
is a problem naming its line.

**rollout_data_dir** (verl's ``_dump_generations``: ``{global_steps}.jsonl`` with ``input``,
``output``, ``score``, ``step``): verl-agent writes one line per environment *step* with no
``uid``/``traj_uid``/``anchor_obs``. This best-effort import is a **trajectory view only,
lacking anchors**: every line becomes its own one-step trajectory, grouped by identical
prompt, with no anchor (so nothing merges and step credit is uninformative). Every line is kept:
``adjust_batch`` appends copies of random rows (``np.random.choice(bs, to_add, replace=False)``)
at the end of the batch, but ``_balance_batch`` (``trainer.balance_batch``, on by default)
reorders the whole batch before ``_dump_generations`` writes it, and a copy equals its row in
every written field, so a copy cannot be told from a real step of another rollout that shared
its prompt (state and history), response and score -- most lines alike are such real steps
(checked at e03bd50, 796ed31 and the fork 8ca3a46: ``verl_agent_shared_gen.py``). A row is copied
at most once, so ``m`` lines alike hold at most ``m // 2`` copies: that bound is
``Imported.counts['copies_suspected']``, said in one note. ``--format auto`` reads such a file as
plain verl (the fields are verl's), which keeps every line too and names the bound in its note.
"""

from __future__ import annotations

import re

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_flag, read_flags
from ..readers import RawTable, read_table
from . import verl as _verl
from ._common import (
    Imported,
    arrow_table,
    columns,
    drop_exact_duplicates,
    held,
    number_problems,
    objects,
    present,
    rename,
    require,
    run_from_dir,
    step_from_path,
    take,
)

NAME = "verl-agent"
#: What the app calls this format.
TITLE = "verl-agent dump"
SIGNATURE = ("uid", "traj_uid")
FOLDER = False
OPTIONS = ()

FIELD_MAP = {
    "uid": "group_id",
    "traj_uid": "traj_id",
    "step": "step_idx",
    "rewards": "reward",
    "won": "success",
    "episode_rewards": "episode_return",
    "global_step": "train_step",
    "data_source": "env_name",
}
_ACTION = re.compile(r"<action>(.*?)</action>", re.S | re.I)

NO_ANCHOR_NOTE = (
    "verl-agent rollout_data_dir has no uid / traj_uid / anchor_obs: imported as a "
    "trajectory view only, lacking anchors (each line is a one-step trajectory "
    "grouped by identical prompt). Use the dump hook in docs/verl_agent_hook.md "
    "for step-level credit."
)


def padding_note(bound: int, lines: int) -> str:
    """The one line saying how many of a rollout_data_dir file's lines may be padding copies."""
    return (
        f"up to {bound} of these {lines} lines may be adjust_batch padding copies, kept: a copy equals "
        "a real step that repeats another (same prompt, response and score) in every field; the crbc "
        "dump hook (docs/verl_agent_hook.md) writes traj_uid and step, which tell copies apart"
    )


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def parse_action(response):
    """The last ``<action>…</action>`` of a verl-agent response, else None (no action: the
    step is identified by its transition, SCHEMA.md; the response stays ``response``)."""
    if not isinstance(response, str):
        return response
    found = _ACTION.findall(response)
    return found[-1].strip() if found else None


def _outcomes(df, raw: RawTable, line):
    """``rewards`` / ``episode_rewards`` read as numbers and ``won`` as flags (missing stays
    missing) by the one rule (`crbc_viz.io.flags`); any other value is a problem naming its line.

    Raises:
        LoadError: naming the line and field of each value that is not a number / flag.
    """
    df = dict(df)
    problems = []
    for f in ("rewards", "episode_rewards"):
        if f in df:
            df[f], bad = number_problems(objects(df[f]), raw.path, line, f, raw.where)
            problems += bad
    if "won" in df:
        col = held(df["won"])
        there = present(col) if col.dtype.kind in "Of" else np.ones(len(col), dtype=bool)
        flags, bad = read_flags(col[there], text=raw.from_text)
        rows = np.flatnonzero(there)[bad]
        problems += [
            Problem(raw.path, int(line[i]), "won", not_a_flag(col[i], text=raw.from_text), raw.where)
            for i in rows
        ]
        won = np.full(len(col), None, dtype=object)
        won[there] = flags
        df["won"] = won
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    return df


def read(path: str) -> Imported:
    raw = read_table(path)
    df = raw.columns
    if df.rows and {"input", "output", "score"} <= set(df) and "uid" not in df:
        imp = _verl.read(path, anchors=False)
        _, bound = _verl.repeated_lines(df)
        notes = (NO_ANCHOR_NOTE, *imp.notes)
        if bound:
            notes += (padding_note(bound, df.rows),)
        return Imported(imp.raw, NAME, imp.source_keys, notes, counts={"copies_suspected": bound})
    require(raw, SIGNATURE + ("rewards",), "verl-agent dump", "see docs/verl_agent_hook.md")
    notes = []
    line = raw.line
    df = columns(df)
    if "active_masks" in df:
        keep, bad = read_flags(df["active_masks"], text=raw.from_text)
        if len(bad):
            raise LoadError(
                [
                    Problem(
                        raw.path,
                        int(line[i]),
                        "active_masks",
                        not_a_flag(held(df["active_masks"])[int(i)], text=raw.from_text),
                        raw.where,
                    )
                    for i in bad[:MAX_LISTED]
                ],
                total=len(bad),
            )
        rows = np.flatnonzero(keep)
        df, line = {c: take(v, rows) for c, v in df.items() if c != "active_masks"}, line[keep]
    if "step" not in df:
        raise LoadError(
            [
                Problem(
                    raw.path,
                    None,
                    "step",
                    "missing in every row: verl-agent's "
                    "_balance_batch reorders the rows of a trajectory, so without the "
                    "turn index they cannot be put back in order; dump with the hook "
                    "of docs/verl_agent_hook.md, which writes step",
                )
            ]
        )
    rows = len(line)
    df, line, note = drop_exact_duplicates(
        df,
        line,
        ("traj_uid", "step"),
        raw.path,
        raw.where,
        "verl-agent's adjust_batch(mode='copy') pads the batch with copies of random rows",
    )
    if note:
        notes.append(note)
    df = _outcomes(df, raw, line)
    if "done" not in df and "dones" in df:
        df = {("done" if c == "dones" else c): v for c, v in df.items()}
    if "done" not in df:
        notes.append(
            "no 'done' field: truncation is unknown (a trajectory cut at env.max_steps "
            "looks ended); the hook of docs/verl_agent_hook.md writes done"
        )
    if "action" not in df and "response" in df:
        df["action"] = [parse_action(v) for v in objects(df["response"])]
    out = rename(df, FIELD_MAP)
    if "run_id" not in out:
        out["run_id"] = run_from_dir(path)
    if "train_step" not in out:
        out["train_step"] = step_from_path(path) or 0
    keys = {"uid": "group_id", "traj_uid": "traj_id", "step": "step_idx"}
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, raw.from_text, raw.problems),
        NAME,
        keys,
        tuple(notes),
        counts={"copies_dropped": rows - len(line)},
    )
