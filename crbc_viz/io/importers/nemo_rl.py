"""NeMo-RL training-data dumps: ``train_data_step<N>.jsonl`` in the log dir.

Written by ``Logger.log_batched_dict_as_jsonl`` (``nemo_rl/utils/logger.py``) from the
``log_data`` that ``grpo_train`` builds (``nemo_rl/algorithms/grpo.py``, NVIDIA-NeMo/RL
7ea279ab; tests/fixtures/nemo_rl): one line per sampled rollout, each field a one-row slice of
the batch (``"rewards": [1.0]``, ``"content": [[...]]``): ``content`` (the rollout's message
contents, prompt first; the roles are not written), ``rewards`` (the rollout's total reward;
with dynamic sampling the unfiltered total, ``filtered_rewards`` beside it), ``input_lengths``,
``token_ids``, ``token_loss_mask`` (1 on the model's tokens), ``sample_loss_mask``,
``advantages``, the log-probs, ``idx``; ``agent_ref`` with NeMo-Gym.

Turns: the runs of 1 in ``token_loss_mask`` (within ``input_lengths``) are the model's messages,
the runs of 0 after the first one the environment's (one message each, as
``run_multi_turn_rollout`` appends); the messages before are the prompt. A turn's anchor is the
environment's last message before it (history-free, SCHEMA.md); the file names no parsed
action, so each turn is keyed by its transition. A line whose messages do not reconcile with
its mask is one step anchored on its last prompt message, with a note.

Canonical mapping: group = identical prompt messages within the file (NeMo-RL writes no uid;
a group's rollouts are consecutive lines); trajectory = the line (``idx``); ``rewards`` -> the
last turn's reward and ``episode_return`` (success = reward > the success threshold);
``train_step`` from the file name. Truncation is not in the file (``truncated`` stays in the
batch): ``done`` is left unknown.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..readers import RawTable, read_table
from ._common import (
    Imported,
    arrow_table,
    numbers,
    objects,
    require,
    run_from_dir,
    step_from_path,
    text_id,
    to_text,
)

NAME = "nemo-rl"
#: What the app calls this format.
TITLE = "NeMo-RL train_data_step file"
SIGNATURE = ("content", "rewards", "token_loss_mask", "input_lengths")
FOLDER = False
OPTIONS = ()


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def _row(v):
    """The one row of a one-row slice (``[x]`` -> x); anything else as it is."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    return v[0] if isinstance(v, list) and len(v) == 1 else v


def _runs(mask: list, length: int) -> tuple[int, int]:
    """(model runs, environment runs after the first model run) of the loss mask's first
    ``length`` tokens."""
    model = env = 0
    prev = None
    for t in mask[:length]:
        on = bool(t)
        if on != prev:
            if on:
                model += 1
            elif model:
                env += 1
        prev = on
    return model, env


def _turns(msgs: list, mask, length) -> tuple[int, list[str], list[str]] | None:
    """(prompt length, each turn's anchor, each turn's response), or None where the mask and
    the messages do not reconcile."""
    if not isinstance(mask, list) or not isinstance(length, int) or isinstance(length, bool):
        return None
    model, env = _runs(mask, length)
    prompt = len(msgs) - model - env
    if model < 1 or prompt < 1 or env not in (model - 1, model):
        return None
    anchors = [to_text(msgs[prompt - 1 + 2 * j]) for j in range(model)]
    responses = [to_text(msgs[prompt + 2 * j]) for j in range(model)]
    return prompt, anchors, responses


def _frame(raw: RawTable, rewards: np.ndarray) -> tuple[dict, np.ndarray, list[str]]:
    df = raw.columns
    rows: dict[str, list] = {k: [] for k in ("group_id", "traj_id", "step_idx", "reward", "episode_return")}
    rows.update(anchor_obs=[], observation=[], response=[])
    lines, problems, fallback = [], [], 0
    for i in range(df.rows):
        msgs = _row(df["content"][i])
        line = int(raw.line[i])
        if not isinstance(msgs, list) or not msgs:
            problems.append(
                Problem(raw.path, line, "content", "expected a list of message contents", raw.where)
            )
            continue
        got = _turns(msgs, _row(df["token_loss_mask"][i]), _row(df["input_lengths"][i]))
        if got is None:
            fallback += 1
            got = (len(msgs) - 1, [to_text(msgs[-2] if len(msgs) > 1 else msgs[0])], [to_text(msgs[-1])])
        prompt, anchors, responses = got
        group = text_id([to_text(m) for m in msgs[: max(prompt, 1)]])
        n = len(anchors)
        rows["group_id"] += [group] * n
        rows["traj_id"] += [f"{group}/{line}"] * n
        rows["step_idx"] += list(range(n))
        rows["reward"] += [0.0] * (n - 1) + [float(rewards[i])]
        rows["episode_return"] += [float(rewards[i])] * n
        rows["anchor_obs"] += anchors
        rows["observation"] += anchors
        rows["response"] += responses
        lines += [line] * n
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    notes = []
    if fallback:
        notes.append(
            f"{fallback} line(s) whose messages do not match their token_loss_mask: one step each, "
            "anchored on the last prompt message"
        )
    return rows, np.asarray(lines, dtype=np.int64), notes


def read(path: str) -> Imported:
    raw = read_table(path)
    df = raw.columns
    if not df.rows:
        return Imported(raw, NAME)
    require(raw, SIGNATURE, "NeMo-RL train_data_step", "Logger.log_batched_dict_as_jsonl")
    rewards = numbers(
        objects([_row(v) for v in objects(df["rewards"])]), raw.path, raw.line, "rewards", raw.where
    )
    out, line, notes = _frame(raw, rewards)
    step = step_from_path(path)
    if step is None:
        step = 0
        notes.append(f"train_step 0: the file name {Path(path).name!r} is not train_data_step<N>.jsonl")
    out["train_step"] = step
    out["src_line"] = line
    n = len(set(out["traj_id"]))
    notes.append(
        f"NeMo-RL train_data_step dump: {len(line)} turns of {n} rollouts (turns from token_loss_mask), "
        "groups = identical prompt messages, no truncation in the file (done unknown)"
    )
    out["run_id"] = run_from_dir(str(Path(path).parent))
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, False, raw.problems),
        NAME,
        {"line": "src_line"},
        tuple(notes),
    )
