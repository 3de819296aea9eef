"""AReaL rollout dumps (``rollout.dump_to_file=true``): ``<log dir>/rollout/<version>/<task_id>.jsonl``
(``eval-rollout/`` for evaluation), a folder of them per run.

Written by ``WorkflowExecutor._dump_trajectory`` (``areal/infra/workflow_executor.py``,
inclusionAI/AReaL 4aef98d8; tests/fixtures/areal) once per finished task: the task's trajectory
batch (``GroupedRolloutWorkflow``: ``group_size`` episodes of the task concatenated) appended to
the file of its ``task_id`` in the folder of its ``tail_version`` (the newest policy version
that sampled a token of it: the training step), one line per row: ``task_id``, ``sample_idx``
(the row; rows with no tokens or an empty completion are skipped, so the numbers may jump),
``seqlen``, ``prompt_len``, ``head_version``, ``tail_version``, ``reward``, ``prompt`` and
``completion`` (decoded text; the prompt is the tokens before the last ``sum(loss_mask)``
tokens, so in a multi-turn row, whose loss mask has holes, part of the conversation lands in
the prompt).

Canonical mapping: group = one call of the writer (one task's batch): the file's lines up to
the next line whose ``sample_idx`` does not grow (a second call appending to the same file);
trajectory = the line, one step (the row's completion: one episode for the RLVR and multi-turn
workflows; an agent workflow exporting individual interactions writes one row per model call
with nothing saying which episode it belongs to, so each is read as its own trajectory);
anchor = the prompt text; no parsed action, so each step is keyed by its transition;
``reward`` -> ``reward`` and ``episode_return``; success = reward > the success threshold (no
success flag in the file). ``train_step`` = the version folder's number (not the file name,
which is the task id); a file outside a version folder takes its lines' ``tail_version``.
Truncation is not in the file: ``done`` is left unknown. ``eval-rollout`` files are split
``val``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_number
from ..readers import RawTable, read_table
from ._common import Imported, arrow_table, numbers, require, run_from_dir, to_text

NAME = "areal"
#: What the app calls this format.
TITLE = "AReaL rollout dump (rollout/<version>/<task_id>.jsonl)"
SIGNATURE = ("task_id", "sample_idx", "tail_version", "prompt", "completion")
FOLDER = False
OPTIONS = ()


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def _ints(raw: RawTable, name: str) -> np.ndarray:
    """An integer column, each bad value named by line."""
    col = raw.columns[name].astype(object)
    out = np.zeros(len(col), dtype=np.int64)
    problems = []
    for i, v in enumerate(col):
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and abs(int(v)) < 2**62:
            out[i] = int(v)
        else:
            why = f"expected an integer, got {type(v).__name__} {str(v)[:40]!r}"
            problems.append(Problem(raw.path, int(raw.line[i]), name, why, raw.where))
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    return out


def _step(path: str, tail: np.ndarray, raw: RawTable) -> tuple[int, list[str]]:
    """The version folder's number, else the lines' ``tail_version`` (noted)."""
    folder = Path(path).parent.name
    if folder.isdigit():
        step = int(folder)
        off = int((tail != step).sum())
        note = (
            [f"{off} line(s) whose tail_version is not their folder's {step}: read as step {step}"]
            if off
            else []
        )
        return step, note
    if len(set(tail.tolist())) > 1:
        i = int(np.flatnonzero(tail != tail[0])[0])
        why = f"lines of more than one tail_version ({tail[0]}, {tail[i]}) outside a version folder"
        raise LoadError([Problem(path, int(raw.line[i]), "tail_version", why, raw.where)])
    return int(tail[0]), [f"train_step {int(tail[0])} from tail_version: {folder!r} is not a version folder"]


def _frame(raw: RawTable, task: np.ndarray, sample: np.ndarray, reward: np.ndarray) -> dict:
    df = raw.columns
    call = np.zeros(df.rows, dtype=np.int64)
    call[1:] = np.cumsum((sample[1:] <= sample[:-1]) | (task[1:] != task[:-1]))
    kind = Path(raw.path).parent.parent.name or "rollout"
    version = Path(raw.path).parent.name
    group = [f"{kind}/{version}/{t}" + (f"#{c}" if c else "") for t, c in zip(task.tolist(), call.tolist())]
    anchors = [to_text(v) for v in df["prompt"].tolist()]
    return {
        "group_id": group,
        "traj_id": [f"{g}/{s}" for g, s in zip(group, sample.tolist())],
        "step_idx": np.zeros(df.rows, dtype=np.int64),
        "reward": reward,
        "episode_return": reward,
        "anchor_obs": anchors,
        "observation": anchors,
        "response": [to_text(v) for v in df["completion"].tolist()],
        "src_line": raw.line.astype(np.int64),
        "sample_idx": sample,
        "task_id": task,
    }


def _texts(raw: RawTable) -> None:
    problems = []
    for name in ("prompt", "completion"):
        for i, v in enumerate(raw.columns[name].tolist()):
            if not isinstance(v, str):
                why = f"expected text, got {type(v).__name__}"
                problems.append(Problem(raw.path, int(raw.line[i]), name, why, raw.where))
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))


def read(path: str) -> Imported:
    raw = read_table(path)
    if not raw.columns.rows:
        return Imported(raw, NAME)
    require(raw, SIGNATURE + ("reward",), "AReaL rollout dump", "WorkflowExecutor._dump_trajectory")
    task, sample, tail = (_ints(raw, k) for k in ("task_id", "sample_idx", "tail_version"))
    reward = numbers(raw.columns["reward"], raw.path, raw.line, "reward", raw.where)
    missing = np.flatnonzero(np.isnan(reward))
    if len(missing):
        i = int(missing[0])
        v = raw.columns["reward"][i]
        why = "missing" if v is None else not_a_number(v)
        raise LoadError([Problem(raw.path, int(raw.line[i]), "reward", why, raw.where)], total=len(missing))
    _texts(raw)
    step, notes = _step(path, tail, raw)
    df = _frame(raw, task, sample, reward)
    df["train_step"] = step
    df["run_id"] = run_from_dir(str(Path(path).parent))
    if Path(path).parent.parent.name == "eval-rollout":
        df["split"] = "val"
    calls = len(set(df["group_id"]))
    notes.append(
        f"AReaL rollout dump: {len(df['group_id'])} rows of {calls} task batch(es), one step each; "
        "success = reward > threshold, no truncation in the file (done unknown)"
    )
    return Imported(
        RawTable(raw.path, arrow_table(df), df["src_line"], raw.where, False, raw.problems),
        NAME,
        {"line": "src_line", "task_id": "task_id", "sample_idx": "sample_idx"},
        tuple(notes),
    )
