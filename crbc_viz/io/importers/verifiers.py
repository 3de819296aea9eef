"""verifiers / prime-rl evaluation results: ``outputs/evals/<env>--<model>/<id>/results.jsonl``.

Written by verifiers' ``save_utils`` (``state_to_output`` then one JSON line per rollout; read
from verifiers 0.1.10 and 0.3.1 and run, tests/fixtures/verifiers_0110, verifiers_031):
``example_id`` (the dataset row: the group), ``prompt`` and ``completion`` (message lists;
``completion`` holds the whole multi-turn conversation after the prompt), ``reward``,
``metrics`` (also flattened to top-level keys), ``is_truncated``, ``stop_condition``,
``error``, ``task``, ``answer``, ``info``, ``timing``, token usage.

Canonical mapping: group = ``example_id``; one trajectory per line; one step per assistant
message of ``completion`` (``response`` its content; no action: a step is identified by its
transition), anchor and observation = the message before it (the environment's reply, or the prompt's last message for the first turn);
``reward`` = the rollout's reward on the last turn, 0 before (a number or its text,
`crbc_viz.io.flags.read_numbers`; anything else is a problem naming its line) (verifiers scores the rollout, not
its turns); ``episode_return`` = ``reward`` (success = reward > the success threshold);
``env_name`` = ``task``; ``train_step`` 0 (an evaluation carries no training step).

Ended or cut: ``stop_condition`` names the ``@vf.stop`` that ended the rollout.
``max_turns_reached``, ``prompt_too_long`` and ``has_error`` (or an ``error``) are cut
(truncated); any other condition (``has_final_env_response``, an environment's own) ended it.
``is_truncated`` (a flag: bool or 0/1) says a reply was cut by ``max_tokens`` (or the prompt
outgrew the context): it cuts the rollout when no stop condition is written; a rollout the
environment ended after such a reply is read as ended, with a counted note. A single-turn
environment (every rollout one assistant turn, ``SingleTurnEnv`` sets ``max_turns=1``) ends
each rollout at ``max_turns_reached``: there only ``is_truncated`` cuts. A file with neither
field carries no truncation (noted). Rollouts with no assistant message (an error before the
first reply) have no step: left out with a counted note.

Versions: ``example_id`` is written from verifiers 0.1.6; 0.1.2.post1 to 0.1.5 wrote ``id``
(read the same); ``stop_condition`` from 0.1.10 (``save_utils``). verifiers 0.4 (``verifiers.v1``)
no longer writes this file: its ``vf-eval`` writes ``<output_dir>/<run>/traces.jsonl``, one
episode a line with each agent's message graph (fields ``traces``, ``task``, ``env``), read by
`_verifiers_v1` under this importer's name.
"""

from __future__ import annotations

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_flag, not_a_number, read_flags, read_numbers
from ..readers import RawTable, read_table
from ._common import (
    Imported,
    arrow_table,
    peek_fields,
    present,
    record_columns,
    require,
    run_from_dir,
    to_text,
)
from ._verifiers_v1 import read_traces, sniff_traces

NAME = "verifiers"
#: What the app calls this format.
TITLE = "verifiers results.jsonl"
SIGNATURE = ("example_id", "prompt", "completion", "reward")
FOLDER = False
OPTIONS = ()
_OLD = ("id", "prompt", "completion", "reward", "task")  # 0.1.2.post1 .. 0.1.5
CUT = frozenset({"max_turns_reached", "prompt_too_long", "has_error"})


def sniff(fields: set[str]) -> bool:
    return (
        set(SIGNATURE) <= fields
        or (set(_OLD) <= fields and "trajectories" not in fields)
        or sniff_traces(fields)  # verifiers 0.4 traces.jsonl
    )


def _messages(v):
    if isinstance(v, np.ndarray):
        v = v.tolist()
    return v


def _content(m):
    return to_text(m.get("content")) if isinstance(m, dict) else None


def _ended(stop: str | None, errored: bool, cut: bool, *, single_turn: bool, has_trunc: bool) -> bool | None:
    """Whether a rollout ended in the environment (not cut), from its stop condition, its error
    and its ``is_truncated`` flag ``cut``; None when the file says neither."""
    if errored or stop in CUT - {"max_turns_reached"}:
        return False
    if stop == "max_turns_reached":
        return single_turn and not cut
    if stop is not None:
        return True
    if has_trunc:
        return not cut
    return None


def _notes(
    n: int, gid: str, n_empty: int, n_replies_cut: int, *, single_turn: bool, has_stop: bool
) -> list[str]:
    """What the reading of ``n`` rollouts assumed or left out, one note each."""
    notes = []
    if gid == "id":
        notes.append("groups from id (verifiers 0.1.5 and older)")
    if n_empty:
        notes.append(
            f"{n_empty} rollout(s) with no assistant message (an error before the first reply) left out"
        )
    if n_replies_cut:
        notes.append(
            f"{n_replies_cut} rollout(s) had a reply cut by max_tokens (is_truncated) but the "
            "environment ended them (stop_condition): read as ended"
        )
    if single_turn and has_stop:
        notes.append(
            "single-turn rollouts: max_turns_reached is the environment's end; only is_truncated cuts"
        )
    notes.append(
        f"verifiers results: {n} rollouts, turns = the assistant messages of completion, anchors = the "
        "message before each, reward on the last turn, cut = stop_condition max_turns_reached / "
        "prompt_too_long / has_error; train_step 0 (an evaluation)"
    )
    return notes


def _cut_flags(df, bad) -> np.ndarray:
    """``is_truncated`` per rollout ``[n]`` (False where absent); ``bad(row, field, why)`` is told
    of each value that is not a flag."""
    cut_flag = np.zeros(df.rows, dtype=bool)
    if "is_truncated" in df:
        col = df["is_truncated"]
        there = present(col)
        flags, badf = read_flags(col.astype(object)[there])
        for j in np.flatnonzero(there)[badf]:
            bad(j, "is_truncated", not_a_flag(col[j]))
        cut_flag[there] = flags
    return cut_flag


def read(path: str) -> Imported:
    if sniff_traces(peek_fields(path)):
        return read_traces(path, NAME)
    raw = read_table(path)
    df = raw.columns
    if not df.rows:
        return Imported(raw, NAME)
    gid = "example_id" if "example_id" in df else "id"
    require(raw, (gid, "completion", "reward"), "verifiers results.jsonl", "verifiers' save_utils")
    n = df.rows
    problems: list[Problem] = []

    def bad(i, field, why):
        problems.append(Problem(raw.path, int(raw.line[i]), field, why, raw.where))

    # flags and stop conditions, per rollout
    has_trunc = "is_truncated" in df
    cut_flag = _cut_flags(df, bad)
    stops = df["stop_condition"].astype(object) if "stop_condition" in df else np.full(n, None)
    errors = df["error"].astype(object) if "error" in df else np.full(n, None)
    convs, prompts, rewards = [], [], []
    for i in range(n):
        comp = _messages(df["completion"][i])
        if isinstance(comp, str):  # completion-mode environment: one reply
            comp = [{"role": "assistant", "content": comp}]
        if not isinstance(comp, list) or not all(isinstance(m, dict) for m in comp):
            bad(i, "completion", f"expected a list of messages, got {type(comp).__name__}")
            comp = []
        prompt = _messages(df["prompt"][i]) if "prompt" in df else None
        prompts.append(prompt if isinstance(prompt, (list, str)) else None)
        convs.append(comp)
        (r,), badr = read_numbers([df["reward"][i]])
        if len(badr) or np.isnan(r):
            bad(i, "reward", not_a_number(df["reward"][i]) if len(badr) else "missing (null)")
            r = 0.0
        rewards.append(float(r))
        s = stops[i]
        if s is not None and not (isinstance(s, float) and np.isnan(s)) and not isinstance(s, str):
            bad(i, "stop_condition", f"expected the name of a stop condition, got {s!r:.40}")
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))

    turns = [[k for k, m in enumerate(c) if m.get("role") == "assistant"] for c in convs]
    single_turn = all(len(t) <= 1 for t in turns)
    has_stop = "stop_condition" in df
    rows, lines = [], []
    notes: list[str] = []
    n_empty = n_replies_cut = 0
    for i in range(n):
        if not turns[i]:
            n_empty += 1
            continue
        stop = stops[i] if isinstance(stops[i], str) else None
        errored = errors[i] is not None and not (isinstance(errors[i], float) and np.isnan(errors[i]))
        ended = _ended(stop, errored, bool(cut_flag[i]), single_turn=single_turn, has_trunc=has_trunc)
        # a reply cut by max_tokens in a rollout the environment ended
        n_replies_cut += bool(cut_flag[i]) and not errored and stop is not None and stop not in CUT
        prompt = prompts[i]
        before = prompt[-1] if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict) else None
        first_obs = _content(before) if before is not None else to_text(prompt)
        group = str(df[gid][i])
        for k, at in enumerate(turns[i]):
            obs = _content(convs[i][at - 1]) if at > 0 else first_obs
            act = _content(convs[i][at])
            last = k == len(turns[i]) - 1
            rows.append(
                {
                    "group_id": group,
                    "traj_id": f"{group}/{i}",
                    "step_idx": k,
                    "reward": rewards[i] if last else 0.0,
                    "episode_return": rewards[i],
                    "anchor_obs": obs,
                    "observation": obs,
                    "response": act,
                    "done": (ended if last else False),
                    "env_name": to_text(df["task"][i]) if "task" in df else None,
                    "train_step": 0,
                    "src_line": int(raw.line[i]),
                }
            )
            lines.append(int(raw.line[i]))
    out, line = record_columns(rows), np.asarray(lines, np.int64)
    if not rows:
        return Imported(RawTable(raw.path, arrow_table(out, 0), line, raw.where, False, raw.problems), NAME)
    if not has_stop and not has_trunc:
        del out["done"]
        notes.append("no stop_condition or is_truncated (verifiers before 0.1.9): truncation unknown")
    notes += _notes(n, gid, n_empty, n_replies_cut, single_turn=single_turn, has_stop=has_stop)
    out["run_id"] = run_from_dir(path)
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, False, raw.problems),
        NAME,
        {gid: "group_id", "line": "src_line"},
        tuple(notes),
    )
