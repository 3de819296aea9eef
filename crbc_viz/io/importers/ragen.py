"""RAGEN validation rollouts as JSONL: ``results/eval/val_rollouts_<timestamp>.jsonl``
(``python -m ragen.llm_agent.agent_proxy`` with ``output.format=jsonl``, or
``save_jsonl_backup``).

Written by ``_save_as_jsonl`` (``ragen/llm_agent/agent_proxy.py``, mll-lab-nu/RAGEN 20daedc4;
tests/fixtures/ragen): one line per environment (``context_window_mode: full``, the default):
``custom_id`` (``traj_<row>``), ``messages`` (OpenAI chat: the history's states as ``user``
messages, each turn's raw LLM output as ``assistant``; a state after the first carries
`` (reward: r)``, the reward of the action taken *from* that state, the history entry's own),
``metadata``: ``env_id``, ``group_id`` (``env_id // group_size``), ``num_turns``,
``total_reward`` (the sum of ``rm_scores``: the trainer's score after its reward normalization
and format penalty), ``success`` (always False: the writer reads ``metrics["success"]``, but the
metrics are keyed ``<tag>/success``), then every metric, ``<tag>/success`` (terminated and not
truncated, as ``EnvStateManager.get_rollout_states`` computes it) among them.

Canonical mapping: group = ``group_id``; trajectory = ``env_id`` (both prefixed by the file's
name: each evaluation numbers its environments from 0); one step per assistant message,
its anchor the state (``user`` message) before it with the `` (reward: r)`` suffix removed
(history-free, SCHEMA.md: the suffix is the turn's own reward, not part of the state); no parsed
action (the raw LLM output is the response), so each turn is keyed by its transition;
``total_reward`` -> the last turn's reward and ``episode_return``; success = ``<tag>/success``
(read as a flag), else, where no ``*/success`` metric is written, the loader's rule (noted).
RAGEN marks a failed episode truncated whether the action limit cut it or the environment
ended it (``status.truncated = not success``), and writes neither ``actions_left`` nor the
limit: ``done`` is left unknown. ``train_step`` 0 (an evaluation).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_flag, read_flags
from ..readers import RawTable, read_table
from ._common import Imported, arrow_table, number_problems, present, require, run_from_dir, to_text

NAME = "ragen"
#: What the app calls this format.
TITLE = "RAGEN val_rollouts JSONL"
SIGNATURE = ("custom_id", "messages", "metadata")
FOLDER = False
OPTIONS = ()

#: The writer's suffix on a state after the first: the reward of the action taken from it.
_REWARD = re.compile(r" \(reward: [^()\n]*\)\Z")


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def _turns(msgs: list) -> tuple[list[str], list[str]]:
    """Each assistant message's anchor (the last user message before it, its reward suffix
    removed) and text."""
    anchors, responses, state, seen = [], [], None, 0
    for m in msgs:
        role, content = m.get("role"), to_text(m.get("content"))
        if role == "user":
            state = content if seen == 0 or content is None else _REWARD.sub("", content)
            seen += 1
        elif role == "assistant":
            anchors.append(state)
            responses.append(content)
    return anchors, responses


def _success(meta: dict):
    """The ``<tag>/success`` value (None where no such metric is written) and its key."""
    keys = [k for k in meta if isinstance(k, str) and k.endswith("/success")]
    return (meta[keys[0]], keys[0]) if keys else (None, None)


def _line(raw: RawTable, i: int, problems: list) -> tuple | None:
    """(messages, metadata) of line ``i``, or None with a problem."""
    df, line = raw.columns, int(raw.line[i])
    msgs, meta = df["messages"][i], df["metadata"][i]
    if isinstance(msgs, np.ndarray):
        msgs = msgs.tolist()
    if not isinstance(meta, dict):
        problems.append(Problem(raw.path, line, "metadata", "expected an object", raw.where))
        return None
    if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
        problems.append(Problem(raw.path, line, "messages", "expected a list of messages", raw.where))
        return None
    for k in ("env_id", "group_id"):
        v = meta.get(k)
        if not isinstance(v, int) or isinstance(v, bool):
            problems.append(
                Problem(raw.path, line, f"metadata.{k}", f"expected an integer, got {v!r:.40}", raw.where)
            )
            return None
    return msgs, meta


def _frame(raw: RawTable) -> tuple[dict, np.ndarray, list[str]]:
    df = raw.columns
    run = Path(raw.path).stem  # two evaluations' group / env ids never merge
    rows: dict[str, list] = {k: [] for k in ("group_id", "traj_id", "step_idx", "anchor_obs", "response")}
    rows.update(observation=[], reward=[], episode_return=[], success=[])
    lines, problems, parsed = [], [], []
    for i in range(df.rows):
        got = _line(raw, i, problems)
        if got is not None:
            parsed.append((i, *got))
    totals, bad = number_problems(
        [m.get("total_reward") for _, _, m in parsed],
        raw.path,
        [raw.line[i] for i, _, _ in parsed],
        "metadata.total_reward",
        raw.where,
    )
    problems += bad
    no_success = 0
    for (i, msgs, meta), total in zip(parsed, totals):
        value, key = _success(meta)
        success = None
        if key is None:
            no_success += 1
        else:
            flags, wrong = read_flags([value])
            if len(wrong):
                problems.append(
                    Problem(raw.path, int(raw.line[i]), f"metadata.{key}", not_a_flag(value), raw.where)
                )
            success = bool(flags[0])
        anchors, responses = _turns(msgs)
        n = len(anchors)
        rows["group_id"] += [f"{run}/g{meta['group_id']}"] * n
        rows["traj_id"] += [f"{run}/e{meta['env_id']}"] * n
        rows["step_idx"] += list(range(n))
        rows["anchor_obs"] += anchors
        rows["observation"] += anchors
        rows["response"] += responses
        rows["reward"] += [0.0] * (n - 1) + [float(total)] * (n > 0)
        rows["episode_return"] += [float(total)] * n
        rows["success"] += [success] * n
        lines += [int(raw.line[i])] * n
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    notes = []
    if no_success:
        notes.append(
            f"{no_success} line(s) without a <tag>/success metric: their success is their total_reward "
            "> the success threshold (metadata.success is not read: the writer always leaves it False)"
        )
    return rows, np.asarray(lines, dtype=np.int64), notes


def read(path: str) -> Imported:
    raw = read_table(path)
    if not raw.columns.rows:
        return Imported(raw, NAME)
    require(raw, SIGNATURE, "RAGEN val_rollouts", "agent_proxy._save_as_jsonl")
    out, line, notes = _frame(raw)
    if not present(out["success"]).any():
        del out["success"]
    out["train_step"] = 0
    out["src_line"] = line
    n = len(set(out["traj_id"]))
    notes.append(
        f"RAGEN val_rollouts: {len(line)} turns of {n} rollouts, groups = metadata.group_id, success = "
        "metadata <tag>/success, reward = total_reward on the last turn, anchors without the (reward: r) "
        "suffix, truncation not in the file (done unknown), train_step 0"
    )
    out["run_id"] = run_from_dir(str(Path(path).parent))
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, False, raw.problems),
        NAME,
        {"line": "src_line"},
        tuple(notes),
    )
