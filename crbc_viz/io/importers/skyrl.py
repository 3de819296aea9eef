"""SkyRL evaluation dumps: ``<export_path>/dumped_evals/global_step_<N>_evals/<data_source>.jsonl``
(``eval_only/`` for an evaluation run without training).

Written by ``dump_per_dataset_eval_results`` (skyrl-train ``skyrl_train/utils/trainer_utils.py``
at b3280d84, the first; ``skyrl/train/utils/trainer_utils.py`` at a9564572, the same lines;
tests/fixtures/skyrl_b328, skyrl_a956, skyrl_stepwise): one line per row of the generator output
with ``input_prompt`` and ``output_response`` (decoded token ids), ``score`` (a number, or a
per-token list), ``stop_reason`` (the inference engine's finish reason: ``stop``, ``length`` ...),
``env_class``, ``env_extras``, ``data_source``. ``aggregated_results.jsonl`` beside them holds
the metrics only; a folder walk skips it with a note. Two layouts, one writer:

- trajectory layout (``evaluate``): one line per rollout; a multi-turn response holds the
  environment's observations between the model's turns, which the file does not separate;
  ``"length"`` also when the conversation outgrew ``max_input_length``.
- step-wise layout (``evaluate_step_wise``, ``generator.step_wise_trajectories=true``): one line
  per turn, a rollout's turns on consecutive lines; the turn's prompt is the whole chat history
  re-templated, its response the model's tokens then the environment's reply, its score a
  per-token list with the step reward on the model's last token, its stop_reason that turn's.
  No trajectory id and no last-step flag are written: a line whose prompt strictly extends the
  previous line's is that rollout's next turn (`turn_starts`).

Canonical mapping: group = identical (first-turn) ``input_prompt`` within the file (SkyRL writes
no uid); ``score`` -> ``reward`` (a per-token list summed); success = the rollout's reward sum >
the success threshold; ``stop_reason`` ``length`` (the last turn's) is truncated, any other
string ended, none (``null``) unknown; ``env_class`` -> ``env_name``; ``train_step`` from the
folder name ``global_step_<N>_evals`` (0 for ``eval_only``). Anchors are history-free: the
environment's last message (user / tool) of the turn's prompt, read from its chat template
(ChatML, Llama 3; `_chat_text`); the step-wise action is the model's part of the response. In
the trajectory layout each rollout is one step whose anchor is the task prompt, so step credit
equals the group's outcome credit.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_number, read_numbers
from ..readers import RawTable, read_table
from ._chat_text import last_env_message, model_part, template_of
from ._common import Imported, arrow_table, held, objects, present, require, run_from_dir, text_id, to_text

NAME = "skyrl"
#: What the app calls this format.
TITLE = "SkyRL dumped_evals file"
SIGNATURE = ("input_prompt", "output_response", "score", "stop_reason")
FOLDER = False
OPTIONS = ()


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def train_step_of(path: str) -> int | None:
    """N of the folder ``global_step_<N>_evals``; 0 for ``eval_only``; else None."""
    name = Path(path).parent.name
    m = re.fullmatch(r"global_step_(\d+)_evals", name)
    if m:
        return int(m.group(1))
    return 0 if name == "eval_only" else None


def _number(v):
    """The score as one finite number, or the reason it is not one (the one rule of
    `crbc_viz.io.flags.read_numbers`: a number or its text; a per-token list of them is summed)."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    values = v if isinstance(v, list) else [v]
    nums, bad = read_numbers(values)
    if len(bad):
        why = not_a_number(values[int(bad[0])])
        return None, (
            f"a per-token score list holds a value that is not a number: {why}" if v is values else why
        )
    if np.isnan(nums).any():
        return None, "a per-token score list holds a null" if v is values else "missing (null)"
    total = float(nums.sum())
    if not math.isfinite(total):
        return None, f"not a finite number: the per-token scores sum to {total}"
    return total, None


def _checked(raw: RawTable) -> tuple[list, list]:
    """Each line's score (a number; a per-token list summed) and whether its turn ended (None:
    no stop_reason).

    Raises:
        LoadError: naming the line and field of each bad score, stop_reason or prompt.
    """
    df = raw.columns
    problems, scores, done = [], [], []
    for i in range(df.rows):
        s, why = _number(df["score"][i])
        if why:
            problems.append(Problem(raw.path, int(raw.line[i]), "score", why, raw.where))
        scores.append(s)
        r = df["stop_reason"][i]
        if r is None or (isinstance(r, float) and np.isnan(r)):
            done.append(None)
        elif isinstance(r, str):
            done.append(r != "length")
        else:
            problems.append(
                Problem(
                    raw.path, int(raw.line[i]), "stop_reason", f"expected a string, got {r!r:.40}", raw.where
                )
            )
        prompt = df["input_prompt"][i]
        if not isinstance(prompt, str):
            problems.append(
                Problem(
                    raw.path,
                    int(raw.line[i]),
                    "input_prompt",
                    f"expected text, got {type(prompt).__name__}",
                    raw.where,
                )
            )
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    return scores, done


def turn_starts(prompts: list[str], responses: list) -> np.ndarray:
    """For each line, the line (index) that starts its trajectory. In the step-wise layout a
    turn's prompt is the whole conversation so far (the chat history re-templated with the
    generation prompt), so a line whose prompt strictly extends the previous line's prompt is
    the next turn of that rollout; any other line starts one (the first turn of a rollout is the
    bare task prompt, equal for the rollouts of a group). A templated prompt ends with the
    generation prompt, which no other task's first prompt extends; text of an unrecognised
    template continues only where it extends the previous prompt by that turn's response."""
    start = np.arange(len(prompts))
    for i in range(1, len(prompts)):
        a, b = prompts[i - 1], prompts[i]
        if len(b) <= len(a) or not b.startswith(a):
            continue
        resp = responses[i - 1]
        if template_of(a) is not None or (isinstance(resp, str) and b.startswith(resp, len(a))):
            start[i] = start[i - 1]
    return start


def _anchors(prompts: list[str], start: np.ndarray) -> tuple[list[str], int]:
    """History-free anchors: the environment's last message (user / tool) of each turn's
    templated prompt; for text of an unrecognised template, the task prompt on a first turn and
    the text the conversation grew by since the previous turn (that turn's response and the
    environment's reply) on a later one. Returns the anchors and how many fell back."""
    out, fallback = [], 0
    for i, p in enumerate(prompts):
        msg = last_env_message(p)
        if msg is None:
            fallback += 1
            msg = p if start[i] == i else p[len(prompts[i - 1]) :]
        out.append(msg)
    return out, fallback


def _frame(df, line: np.ndarray, scores: list, done: list) -> tuple[dict, list[str]]:
    """The canonical rows: one per line, the lines of a trajectory's turns in a row."""
    prompts = df["input_prompt"].tolist()
    start = turn_starts(prompts, df["output_response"].tolist())
    stepwise = bool((start != np.arange(len(start))).any())
    group = [text_id(prompts[s]) for s in start]
    anchors, fallback = _anchors(prompts, start)
    responses = [to_text(v) for v in objects(df["output_response"])]
    last = np.append(start[1:] != start[:-1], True) if len(start) else start.astype(bool)
    notes = []
    out = {
        "group_id": group,
        "traj_id": [f"{g}/{int(line[s])}" for g, s in zip(group, start)],
        "step_idx": np.arange(len(start)) - start,
        "reward": scores,
        "anchor_obs": anchors,
        "observation": prompts,
        "response": responses,
    }
    if stepwise:
        # a turn's response is the model's text, then the environment's reply (its tokens); the
        # file names no parsed action, so each turn is keyed by its transition (SCHEMA.md)
        out["response"] = [model_part(r, template_of(p)) for r, p in zip(responses, prompts)]
        known = any(d is not None for d in done)
        out["done"] = [d if is_last or not known else False for d, is_last in zip(done, last)]
        n = int(last.sum())
        notes.append(
            f"SkyRL step-wise eval dump: {len(start)} turns of {n} rollouts (a rollout's turns are the "
            "lines whose prompt extends the previous line's), groups = identical first-turn "
            "input_prompt, truncated = the last turn's stop_reason length (a cut by max_input_length "
            "or by the turn limit is not in the file)"
        )
    else:
        out["episode_return"] = scores
        out["done"] = done
        notes.append(
            f"SkyRL eval dump: {len(start)} rollouts, one step each (turns are not in the file), groups = "
            "identical input_prompt, truncated = stop_reason length"
        )
    if fallback:
        notes.append(
            f"{fallback} prompt(s) not in a recognised chat template (ChatML, Llama 3): the anchor is "
            "the task prompt on a first turn, else the text added since the previous turn"
        )
    return out, notes


def read(path: str) -> Imported:
    raw = read_table(path)
    df = raw.columns
    if not df.rows:
        return Imported(raw, NAME)
    require(raw, SIGNATURE, "SkyRL dumped_evals", "dump_per_dataset_eval_results")
    scores, done = _checked(raw)
    notes = []
    step = train_step_of(path)
    if step is None:
        step = 0
        notes.append(f"train_step 0: the folder {Path(path).parent.name!r} is not global_step_<N>_evals")
    out, layout_notes = _frame(df, raw.line, scores, done)
    out["env_name"] = held([to_text(v) for v in objects(df["env_class"])]) if "env_class" in df else None
    out["train_step"] = step
    out["src_line"] = raw.line.astype(np.int64)
    if not present(out["done"]).any():
        del out["done"]
        notes.append("no stop_reason: truncation unknown")
    if any(isinstance(v, (list, np.ndarray)) for v in df["score"]):
        notes.append("per-token scores summed into each line's reward")
    notes.extend(layout_notes)
    out["run_id"] = run_from_dir(str(Path(path).parent.parent))
    return Imported(
        RawTable(raw.path, arrow_table(out, len(raw.line)), raw.line, raw.where, False, raw.problems),
        NAME,
        {"line": "src_line"},
        tuple(notes),
    )
