"""verl ``trainer.rollout_data_dir`` dumps (``RayPPOTrainer._dump_generations``), verl 0.4.1 to 0.9.1.

One JSONL per training step, ``{global_steps}.jsonl``; one line per sampled response:
``input`` (the decoded prompt, chat template included), ``output`` (the decoded response),
``score`` (the sequence reward: a number; the text of one is read as it, anything else is a
problem naming its line, `crbc_viz.io.flags.read_numbers`), ``step`` (``global_steps``), optionally ``gts`` (ground truth)
and every reward-extra-info key (e.g. ``acc``). Trajectory-level: each line is a one-step
trajectory; lines with the identical ``input`` within a step form a GRPO group (verl repeats
a prompt ``n`` times and does not write its ``uid``). The prompt is the group's single anchor,
so step credit equals the group-relative outcome credit. The layout is the same from 0.4.1 (checked
on its multi-turn rollout, ``tests/fixtures/generators/verl041_gen.py``) to 0.9.1: with
``multi_turn.enable`` a line holds a whole tool-calling conversation (its turns are not
separable, so it is one step) and a rollout cut by the length or turn limit is not marked.
Lines equal in every field are kept (samples of one prompt can coincide), with a note: in a
verl-agent ``rollout_data_dir`` some may be ``adjust_batch`` padding copies, which no field tells
from real steps (``--format verl-agent`` counts them, `repeated_lines`).

verl's TransferQueue trainer (``verl/trainer/ppo/v1/trainer_base.py``, verl 0.9) also writes
``uid`` = ``{uid}_{session}_{index}``: the prompt's uid, one of its ``rollout.n`` sessions, one
agent-loop output (a multi-turn session has several, each carrying the session's score). When
every row has such a key: group = ``uid``, trajectory = ``{uid}_{session}``, ``step_idx`` =
``index`` (rows in any order); the score is the session's, so ``episode_return`` = the score of
its last output and ``reward`` = that score on the last output, 0 before. Two rows with one key
are dropped when identical and an error when not. Truncation is not in the file.

Canonical mapping: ``input`` -> ``anchor_obs`` and ``observation``; ``output`` -> ``response`` (no action: a step is identified by its
transition, SCHEMA.md); ``score`` -> ``reward`` (success = score > success_threshold); ``step`` ->
``train_step``; the run is the dump folder's parent folder name. Trainer keys kept for
export: ``step`` and the file line (``src_line``).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from ..readers import RawTable, read_table
from ._common import (
    Columns,
    Imported,
    arrow_table,
    drop_exact_duplicates,
    held,
    numbers,
    objects,
    require,
    row_texts,
    run_from_dir,
    step_from_path,
    text_id,
    to_text,
)

NAME = "verl"
#: What the app calls this format.
TITLE = "verl rollout_data_dir file"
SIGNATURE = ("input", "output", "score")
FOLDER = False
OPTIONS = ()


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def read(path: str, *, anchors: bool = True) -> Imported:
    raw = read_table(path)
    require(raw, SIGNATURE, "verl rollout_data_dir", "verl's _dump_generations JSONL")
    df = raw.columns
    if not df.rows:
        return Imported(raw, NAME)
    notes = []
    prompt = [to_text(v) for v in objects(df["input"])]
    step = df["step"] if "step" in df else np.full(df.rows, step_from_path(path) or 0, dtype=np.int64)
    group = [text_id(p) for p in prompt]
    out = {c: v for c, v in df.items() if c not in ("input", "output", "score", "step")}
    out.update(
        run_id=run_from_dir(path),
        train_step=step,
        group_id=group,
        traj_id=[f"l{int(x)}" for x in raw.line],
        step_idx=0,
        reward=numbers(df["score"], raw.path, raw.line, "score", raw.where),
        response=[to_text(v) for v in objects(df["output"])],
        observation=prompt,
        done=True,
        src_line=raw.line,
    )
    if anchors:
        out["anchor_obs"] = prompt
    keyed = _session_keys(df)
    if keyed is None:
        if anchors:
            same, bound = repeated_lines(df)
            if same:
                notes.append(
                    f"kept {same} line(s) equal to an earlier line in every field (samples of one prompt "
                    f"can coincide); in a verl-agent rollout_data_dir up to {bound} of them may be "
                    "adjust_batch padding copies, which the file cannot tell apart (--format verl-agent "
                    "counts them)"
                )
        return Imported(
            RawTable(
                raw.path, arrow_table(out, len(raw.line)), raw.line, raw.where, raw.from_text, raw.problems
            ),
            NAME,
            {"step": "train_step", "line": "src_line"},
            tuple(notes),
        )
    uid, traj, index = keyed
    out, line, note = drop_exact_duplicates(
        {**out, "src_uid": df["uid"]}, raw.line, ("src_uid",), raw.path, raw.where
    )
    keep = np.isin(raw.line, line)
    uid, traj, index = uid[keep], traj[keep], index[keep]
    last = _per_traj(traj, index, max) == index
    score = held(out["reward"]).astype(np.float64)
    ret = _per_traj(traj, np.where(last, score, np.nan), _nanmax)
    out.update(
        group_id=uid,
        traj_id=traj,
        step_idx=index,
        reward=np.where(last, score, 0.0),
        episode_return=ret,
        src_line=line,
    )
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, raw.from_text, raw.problems),
        NAME,
        {"uid": "src_uid", "step": "train_step"},
        (note,) if note else (),
    )


def repeated_lines(df: Columns) -> tuple[int, int]:
    """(lines equal to an earlier line in every field, the most of them that can be verl-agent
    ``adjust_batch`` copies). Lines are compared by each field's text (`row_texts`).

    ``adjust_batch(mode="copy")`` appends ``data.select_idxs(np.random.choice(bs, to_add,
    replace=False))``: each real row is copied at most once, so ``m`` lines alike hold at most
    ``m // 2`` copies (verl-agent e03bd50 to 796ed31, ``agent_system/multi_turn_rollout/utils.py``).
    """
    if not df.rows:
        return 0, 0
    sizes = np.array(list(Counter(row_texts(df)).values()), dtype=np.int64)
    return int((sizes - 1).sum()), int((sizes // 2).sum())


def _nanmax(a, b):
    """The larger of two numbers, NaN only when both are (a group's ``max`` skips NaN)."""
    return b if a != a else a if b != b else max(a, b)


def _per_traj(traj: np.ndarray, values: np.ndarray, combine) -> np.ndarray:
    """``values`` combined (``combine``: ``max``, `_nanmax`) over the rows of each trajectory,
    given back on every row of it."""
    acc: dict = {}
    for t, v in zip(traj.tolist(), values.tolist()):
        acc[t] = combine(acc[t], v) if t in acc else v
    return np.array([acc[t] for t in traj.tolist()], dtype=values.dtype)


_KEY = re.compile(r"^(.+)_(\d+)_(\d+)$")


def _session_keys(df):
    """(group, trajectory, index) arrays from verl v1's ``{uid}_{session}_{index}``, or None."""
    if "uid" not in df:
        return None
    m = [(_KEY.match(v) if isinstance(v, str) else None) for v in df["uid"]]
    if not all(m):
        return None
    uid = np.array([x.group(1) for x in m], dtype=object)
    traj = np.array([f"{x.group(1)}_{x.group(2)}" for x in m], dtype=object)
    return uid, traj, np.array([int(x.group(3)) for x in m], dtype=np.int64)
