"""rLLM episodes: a folder of JSON files, one episode each (or a list of them, or JSON Lines),
as rLLM's own writers produce them (read from rLLM 38dda579 and 9beb6e0f and run,
tests/fixtures/rllm_38dd and rllm_real):

- ``EpisodeLogger.log_episodes_batch`` (training, ``episode_logging.log_episodes``):
  ``<dir>/episodes/train_step_<N>_epoch_<E>/episode_hash<h>_id<id>.json`` with ``training_step``,
  ``episode_id``, ``task``, ``is_correct``, ``termination_reason``, ``trajectories`` (``name``,
  ``uid``, ``reward``, ``steps``: ``observation``, ``thought``, ``action``, ``reward``, ``done``,
  ``model_response``, ``chat_completions``), and a ``batch_summary.json`` beside them (skipped);
- ``EvalEpisodeStore`` (``rllm eval --save-episodes``): ``<run>/meta.json`` (skipped) and
  ``<run>/episodes/episode_<idx>_<task>.json``, each ``Episode.model_dump()`` (``id``, steps with
  ``input``/``output``/``metadata`` ...);
- ``Episode.to_dict()`` files (``id``, ``info``), as older rLLM versions wrote.

At 38dda579 the training layout is the same less ``session_id`` and ``metadata``, but its
``Workflow`` leaves numpy values in the episode (``is_correct = np.sum(...) > 0``, trajectory
``reward = np.sum(...)``) and ``EpisodeLogger`` dumps with ``default=str``: they arrive as the
text ``"True"`` / ``"False"`` / ``"1"``. Exactly numpy's spellings are read back (noted); any
other text in ``is_correct``, a step's ``done`` or a reward is a problem naming the file, item
and field.

Canonical mapping: group = the task id (the part of the episode id before ``:``; ``task_id:name``
for a named role of a multi-agent workflow, as rLLM's ``TrajectoryGroup`` does); traj = the
episode id (plus ``#j`` when an episode has several trajectories of one role); ``step_idx`` =
position in ``steps``; ``reward``, ``action`` (JSON when not a string), ``model_response`` ->
``response``; success = ``is_correct`` (a JSON true/false or 0/1, or numpy's ``"True"``/``"False"``; null,
text such as ``"false"`` or any other value is a problem naming the file, item and field, never
read as a success; an episode without the field has no success flag, so the loader's rule decides:
the return > the success threshold, noted); ``episode_return`` = trajectory ``reward``.
Truncation: ``termination_reason`` ``max_turns_exceeded`` / ``max_prompt_length_exceeded`` /
``max_response_length_exceeded`` / ``timeout`` is truncated and ``env_done`` is ended (the last
step's ``done`` is set so); other reasons fall back to the steps' ``done`` (a flag, or a problem naming the
step) when some step has one, else truncation is unknown (rLLM's agent-flow engine sets no ``done``). Anchor:
``info``/``metadata`` ``anchor_obs``/``state`` when a workflow logs one, else the observation,
else (the agent-flow engine leaves ``observation`` empty) the last user message of the step's
``chat_completions``, which is the turn's observation; with none of these there are no
anchors, and the import says so. Training step: ``training_step``, else ``info``/``metrics``
``global_step``/``train_step``/``step``, else the folder name, else 0. Exact duplicate steps
(one episode in two files) are dropped with a note; conflicting ones are an error naming both
files. Trainer keys kept: ``episode_id``, ``trajectory_uid``, ``step``.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from .. import _guards
from ..flags import not_a_flag, not_a_number, read_flags, read_numbers
from ..readers import RawTable
from ._common import (
    Imported,
    arrow_table,
    drop_exact_duplicates,
    json_document,
    loads,
    record_columns,
    run_from_dir,
    step_from_path,
    surrogate_note,
    to_text,
)

NAME = "rllm"
#: What the app calls this format.
TITLE = "rLLM episodes"
SIGNATURE = ("id", "trajectories")
#: A folder of episode files is one source (`folder_files`).
FOLDER = True
OPTIONS = ()
_DEFAULT_NAMES = {None, "", "default_traj_name"}
#: Files rLLM writes beside the episodes (EpisodeLogger, EvalEpisodeStore): not episodes.
SIDE_FILES = ("batch_summary.json", "meta.json")
_TRUNCATING = {"max_turns_exceeded", "max_prompt_length_exceeded", "max_response_length_exceeded", "timeout"}
_NUMPY_BOOL_TEXT = {"True": True, "False": False}


def sniff(fields: set[str]) -> bool:
    return "trajectories" in fields and bool({"id", "episode_id"} & fields)


def is_folder_file(path: str) -> bool:
    """Whether ``path`` is an episode file: ``.json`` / ``.jsonl`` (optionally ``.gz``), not
    hidden, not one of `SIDE_FILES`."""
    name = os.path.basename(path)
    low = name.lower()
    return (
        low.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz"))
        and not name.startswith(".")
        and low not in SIDE_FILES
    )


def episode_files(folder: str) -> list[str]:
    """The episode files (`is_folder_file`) under ``folder``, sorted."""
    out = []
    for root, _, files in os.walk(folder):
        out += [os.path.join(root, f) for f in files if is_folder_file(f)]
    return sorted(out)


#: The files of a folder read as one source (the `Importer` protocol's name for `episode_files`).
folder_files = episode_files


def _load(path: str, problems: list, fixed: list) -> list[tuple[int, dict]]:
    """The episodes of one file (lone surrogates replaced, counted in ``fixed``)."""
    items: list[tuple[int, dict]] = []
    try:
        with io.TextIOWrapper(_guards.open_input(path), encoding="utf-8") as fh:  # capped, regular
            if ".jsonl" in path.lower():
                for i, line in enumerate(fh, start=1):
                    if line.strip():
                        items.append((i, loads(_guards.check_json(line, path, i), fixed)))
            else:
                doc = json_document(path, fixed)  # size, memory and depth limits first
                docs = doc if isinstance(doc, list) else [doc]
                items = list(enumerate(docs))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError, RecursionError) as exc:
        problems.append(Problem(path, getattr(exc, "lineno", None), None, f"cannot read episode JSON: {exc}"))
    return items


def _train_step(ep: dict, path: str) -> int:
    v = ep.get("training_step")
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    for holder in (ep.get("info"), ep.get("metadata"), ep.get("metrics")):
        if isinstance(holder, dict):
            for k in ("global_step", "train_step", "step"):
                v = holder.get(k)
                if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                    return int(v)
    return step_from_path(path) or 0


def _last_user(messages):
    if isinstance(messages, list):
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == "user" and m.get("content") not in (None, ""):
                return m["content"]
    return None


def _anchor(st: dict):
    """(anchor, where it came from) of one step, see the module doc."""
    info = st.get("info") if isinstance(st.get("info"), dict) else st.get("metadata")
    info = info if isinstance(info, dict) else {}
    for k in ("anchor_obs", "state"):
        if info.get(k) not in (None, ""):
            return info[k], "info"
    if st.get("observation") not in (None, ""):
        return st["observation"], "observation"
    user = _last_user(st.get("chat_completions"))
    if user is not None:
        return user, "chat"
    return None, None


def _flag(value):
    """``(flag, numpy_text)`` of a logged true/false, ``(None, False)`` when it is not one.

    ``EpisodeLogger`` writes with ``json.dumps(default=str)``, so a numpy bool (``is_correct``
    of rLLM 38dda579's ``Workflow.assign_episode_correctness``: ``np.sum(...) > 0``) arrives as
    the text ``"True"`` / ``"False"``: exactly these two are read, any other text is not a flag.
    """
    if isinstance(value, str):
        return _NUMPY_BOOL_TEXT.get(value), value in _NUMPY_BOOL_TEXT
    (flag,), bad = read_flags([value])
    return (None if len(bad) else bool(flag)), False


def _number(value):
    """``(number, numpy_text)`` of a logged reward, ``(nan, False)`` when it is not one (the one
    rule, `crbc_viz.io.flags.read_numbers`).

    A numpy number written through ``default=str`` (rLLM 38dda579's trajectory ``reward`` is
    ``np.sum`` of the step rewards) arrives as its text, e.g. ``"1"`` or ``"0.5"``.
    """
    if value is None:
        return None, False
    (x,), bad = read_numbers([value])
    if len(bad) or np.isnan(x):
        return float("nan"), False
    return float(x), isinstance(value, str)


def _trajectory_problem(tr, j: int) -> tuple[str, str] | None:
    """(field, why) when trajectory ``j`` is not a trajectory object with a list of step
    objects and a string (or no) ``name``; else None."""
    if not isinstance(tr, dict) or not isinstance(tr.get("steps"), list):
        return f"trajectories[{j}].steps", "expected a list"
    for k, st in enumerate(tr["steps"]):
        if not isinstance(st, dict):
            return f"trajectories[{j}].steps[{k}]", "expected a step object"
    name = tr.get("name")
    if name is not None and not isinstance(name, str):
        return f"trajectories[{j}].name", f"expected a string, got {type(name).__name__}"
    return None


def _advantage(value):
    """A step's logged advantage (shown beside ours), None when it is not a number."""
    if value is None or isinstance(value, (bool, str)):
        return None
    (x,), bad = read_numbers([value], text=False)
    return None if len(bad) or np.isnan(x) else float(x)


def _ends(ep: dict, done: list) -> list:
    """The ``done`` of each step: from the termination reason, else the steps', else None."""
    reason = ep.get("termination_reason")
    reason = reason.get("value") if isinstance(reason, dict) else reason
    reason = str(reason).lower() if reason is not None else None
    if reason in _TRUNCATING or reason == "env_done":
        return [False] * (len(done) - 1) + [reason == "env_done"] if done else []
    if any(d is True for d in done):
        return done
    return [None] * len(done)


def read(path: str) -> Imported:
    files = episode_files(path) if os.path.isdir(path) else [path]
    problems: list[Problem] = []
    rows: list[dict] = []
    lines: list[int] = []
    run = run_from_dir(files[0] if files else path)
    anchors_from: dict = {}
    no_done = 0
    no_correct = 0
    numpy_text = 0
    fixed: list[int] = []
    for f in files:
        where = "line" if ".jsonl" in f.lower() else "item"
        for idx, ep in _load(f, problems, fixed):
            eid = ep.get("id", ep.get("episode_id")) if isinstance(ep, dict) else None
            if not isinstance(eid, str) or not isinstance(ep.get("trajectories"), list):
                problems.append(
                    Problem(
                        f,
                        idx,
                        "id" if isinstance(ep, dict) else None,
                        "expected an rLLM Episode object with a string 'id' (or "
                        "'episode_id') and a 'trajectories' list",
                        where,
                    )
                )
                continue
            task_id = eid.split(":")[0]
            tstep = _train_step(ep, f)
            success = None
            if "is_correct" in ep:
                success, as_text = _flag(ep["is_correct"])
                if success is None:
                    problems.append(Problem(f, idx, "is_correct", not_a_flag(ep["is_correct"]), where))
                    continue
                numpy_text += as_text
            else:
                no_correct += 1
            names: dict = {}
            for j, tr in enumerate(ep["trajectories"]):
                bad = _trajectory_problem(tr, j)
                if bad:
                    problems.append(Problem(f, idx, *bad, where))
                    continue
                name = tr.get("name")
                group = task_id if name in _DEFAULT_NAMES else f"{task_id}:{name}"
                k = names[name] = names.get(name, -1) + 1
                traj = eid if k == 0 else f"{eid}#{k}"
                done, rewards, ret, as_text, bad = _trajectory_values(tr, j)
                numpy_text += as_text
                if bad:
                    problems.extend(Problem(f, idx, field, why, where) for field, why in bad)
                    continue
                ends = _ends(ep, done)
                no_done += bool(tr["steps"]) and ends[-1] is None
                for s, st in enumerate(tr["steps"]):
                    anchor, src = _anchor(st)
                    anchors_from[src] = anchors_from.get(src, 0) + 1
                    adv = st.get("advantage")
                    rows.append(
                        {
                            "run_id": run,
                            "train_step": tstep,
                            "group_id": group,
                            "traj_id": traj,
                            "step_idx": s,
                            "reward": rewards[s],
                            "done": ends[s],
                            "action": to_text(st.get("action")),
                            "response": to_text(st.get("model_response") or st.get("output")),
                            "observation": to_text(st.get("observation")),
                            "anchor_obs": to_text(anchor),
                            "success": success,
                            "episode_return": ret,
                            "termination_reason": to_text(ep.get("termination_reason")),
                            "advantage": _advantage(adv),
                            "src_episode_id": eid,
                            "src_traj_uid": to_text(tr.get("uid")),
                            "src_file": os.path.relpath(f, path) if os.path.isdir(path) else Path(f).name,
                        }
                    )
                    lines.append(int(idx))
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    df = record_columns(rows)
    line = np.asarray(lines, dtype=np.int64)
    df, line, dup_note = drop_exact_duplicates(
        df, line, ("traj_id", "step_idx"), path, "item", "one episode written twice", ignore=("src_file",)
    )
    notes = [dup_note] if dup_note else []
    notes += surrogate_note(fixed)
    notes += _notes(anchors_from, numpy_text, no_correct, no_done)
    raw = RawTable(path, arrow_table(df, len(line)), line, "item", False)
    return Imported(
        raw,
        NAME,
        {"episode_id": "src_episode_id", "trajectory_uid": "src_traj_uid", "step": "step_idx"},
        tuple(notes),
    )


def _trajectory_values(tr: dict, j: int) -> tuple[list, list, float | None, int, list[tuple[str, str]]]:
    """Trajectory ``j``'s step ``done`` flags and rewards, its own reward, how many of those
    values are numpy values written as text, and the ``(field, why)`` of each unreadable one."""
    done, rewards, bad = [], [], []
    numpy_text = 0
    for s, st in enumerate(tr["steps"]):
        d, as_text = (None, False) if st.get("done") is None else _flag(st["done"])
        r, r_text = _number(st.get("reward"))
        numpy_text += as_text + r_text
        if st.get("done") is not None and d is None:
            bad.append((f"trajectories[{j}].steps[{s}].done", not_a_flag(st["done"])))
        if r is not None and np.isnan(r):
            bad.append((f"trajectories[{j}].steps[{s}].reward", not_a_number(st["reward"])))
        done.append(d)
        rewards.append(r)
    ret, r_text = _number(tr.get("reward"))
    numpy_text += r_text
    if ret is not None and np.isnan(ret):
        bad.append((f"trajectories[{j}].reward", not_a_number(tr["reward"])))
    return done, rewards, ret, numpy_text, bad


def _notes(anchors_from: dict, numpy_text: int, no_correct: int, no_done: int) -> list[str]:
    """What the reading assumed or filled in, one note each."""
    notes = []
    if anchors_from.get("chat"):
        notes.append(
            f"{anchors_from['chat']} step(s) have no observation (rLLM's agent-flow "
            "engine leaves it empty): their anchor is the last user message of "
            "chat_completions"
        )
    if anchors_from.get(None):
        notes.append(
            f"{anchors_from[None]} step(s) carry no observation, chat_completions or "
            "info anchor: they have no anchor (nothing merges there)"
        )
    if numpy_text:
        notes.append(
            f"{numpy_text} is_correct / done / reward value(s) are numpy values written as text "
            "(EpisodeLogger's json.dumps(default=str): 'True', 'False', '1', '0.5'): read as the "
            "bool or number they print"
        )
    if no_correct:
        notes.append(
            f"{no_correct} episode(s) have no is_correct: their success is their return "
            "(trajectory reward, else the summed step rewards) > the success threshold"
        )
    if no_done:
        notes.append(
            f"{no_done} trajectory(ies) have neither a termination_reason nor a step "
            "'done': truncation unknown, taken as ended"
        )
    return notes
