"""OpenPipe ART trajectory logs: ``<base>/<project>/models/<name>/trajectories/<split>/<step:04d>``
``.parquet`` (``openpipe-art`` 0.5.5 and later) or ``.jsonl`` (0.4.0 ... 0.5.4).

Written by ``write_trajectory_groups_parquet`` (``art/utils/trajectory_logging.py``; called by
``Model.log`` / ``LocalBackend._log``; tests/fixtures/generators/art_gen.py): one row per
trajectory, in group order; exceptions are not written (a group whose every rollout raised
leaves its ``group_index`` unused). Columns: ``group_index`` (the group's place in the logged
list), ``reward``, ``metrics`` / ``metadata`` (JSON text, null when empty), ``tools``, ``logs``,
``messages`` (``role``, ``content``, ``tool_calls`` as JSON text, ``tool_call_id``,
``trainable``: true for a sampled ``Choice``, the model's turn). v1 (0.5.5 ... 0.5.7) has just
these; v2 (0.5.9 ... 0.5.18) adds ``group_metadata``, ``group_metrics``, ``group_logs``. The
JSON Lines of 0.4.0 ... 0.5.4 (``serialize_trajectory_groups``) hold one group per line,
``{"trajectories": [{reward, metrics, metadata, messages_and_choices, ...}]}``, a ``Choice``
as its dict (``finish_reason``, ``message``); its messages are read as ART's own
``migrate_jsonl_to_parquet`` flattens them. Older YAML logs (``.yaml``, 0.3.x and before) are
not read.

Canonical mapping: group = ``group_index`` (prefixed by the split: ``train/g0``); trajectory =
the row (the line and position in JSONL); one step per model turn (an assistant message marked
``trainable``; where a trajectory marks none, every assistant message, noted); a turn's anchor
is the environment's message(s) since the previous assistant message (``user`` / ``tool``,
history-free, SCHEMA.md), its action the tool calls it made (name and arguments), a turn of text
alone has none and is keyed by its transition; ``reward`` on the last turn and as
``episode_return``; ``train_step`` from the file name, ``split`` from its folder, ``run_id``
``<project>/<name>``. Success: ``success_column`` (``--success-column``) names a ``metrics``
key; else the one key named as a success (exactly ``win``, ``won``, ``success``, ``solved``,
``resolved``, ``correct``, ``passed`` ..., any case, ``is_`` allowed) that every trajectory has
and holds only 0/1 / true / false; else reward > the success threshold. What
the file cannot carry: truncation (no finish reason, no turn limit: ``done`` unknown), the
exceptions, ``additional_histories`` (Parquet), the policy versions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from .. import _guards
from ..flags import not_a_flag, read_flags
from ..readers import RawTable, detect_format, max_line_bytes
from ..readers._base import charge_frame
from ..readers.parquet import read_parquet_arrow
from ._common import (
    Imported,
    arrow_table,
    first_json_line,
    loads,
    number_problems,
    present,
    run_from_dir,
    step_from_path,
    to_text,
)
from ._records import jsonl_records
from ._turns import ENV_ROLES

NAME = "art"
#: What the app calls this format.
TITLE = "OpenPipe ART trajectories"
SIGNATURE = ("group_index", "reward", "messages")
FOLDER = False
OPTIONS = ("success_column",)
_LEGACY = ("trajectories",)
#: Metric names read as success (exactly, any case): a name merely containing one
#: (``format_pass``, ``partial_win_rate``) is not guessed.
_SUCCESS_NAME = re.compile(
    r"(is_)?(win|won|success|successful|succeeded|solved|resolved|correct|passed)", re.I
)
#: Bytes charged per message of a row made into Python objects (a dict of five fields).
_MESSAGE_COST = 800


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


def sniff_file(path: str, fields: set[str]) -> bool:
    """ART 0.4.0 ... 0.5.4 JSON Lines: a first line of ``{"trajectories": [...]}`` whose
    trajectories have ``messages_and_choices``."""
    if fields != set(_LEGACY) or detect_format(path) != "jsonl":
        return False
    obj = first_json_line(path)
    trajs = obj.get("trajectories") if obj else None
    return isinstance(trajs, list) and all(isinstance(t, dict) and "messages_and_choices" in t for t in trajs)


class _Rows:
    """The trajectories of a file as the importer reads them: per trajectory its line / row,
    group index, reward, metrics (a dict) and flat messages."""

    def __init__(self, path: str, where: str):
        self.path, self.where = path, where
        self.line: list[int] = []
        self.key: list[str] = []
        self.field: list[
            str
        ] = []  # where the messages are: ``messages``, ``trajectories[k].messages_and_choices``
        self.group: list[int] = []
        self.reward: list = []
        self.metrics: list[dict] = []
        self.messages: list[list[dict]] = []
        self.problems: list[Problem] = []

    def bad(self, line, field, why) -> None:
        self.problems.append(Problem(self.path, line, field, why, self.where))


def _json_dict(rows: _Rows, line: int, field: str, v) -> dict | None:
    """A ``metrics`` / ``metadata`` value: JSON text of an object (Parquet), an object (JSONL),
    or null / empty; None with a problem otherwise."""
    if v is None or v == "":
        return {}
    if isinstance(v, str):
        why = _guards.json_problem(v)
        if why is not None:
            rows.bad(line, field, f"too large or deep to read: {why}")
            return None
        try:
            v = loads(v)
        except (ValueError, RecursionError):
            rows.bad(line, field, "not valid JSON text")
            return None
    if not isinstance(v, dict):
        rows.bad(line, field, f"expected a JSON object, got {type(v).__name__}")
        return None
    return v


def _flat(m) -> dict | None:
    """A legacy message or choice dict as ART's ``migrate_jsonl_to_parquet`` flattens it."""
    if not isinstance(m, dict):
        return None
    if "finish_reason" in m:
        inner = m.get("message")
        if not isinstance(inner, dict):
            return None
        return {
            "role": inner.get("role"),
            "content": inner.get("content"),
            "tool_calls": inner.get("tool_calls"),
            "trainable": True,
        }
    return {
        "role": m.get("role"),
        "content": m.get("content"),
        "tool_calls": m.get("tool_calls"),
        "trainable": False,
    }


def _messages(rows: _Rows, line: int, field: str, v, legacy: bool) -> list[dict] | None:
    if not isinstance(v, list):
        rows.bad(line, field, f"expected a list of messages, got {type(v).__name__}")
        return None
    out = []
    for k, m in enumerate(v):
        f = _flat(m) if legacy else m
        if not isinstance(f, dict) or not isinstance(f.get("role"), str):
            rows.bad(line, f"{field}[{k}]", "expected a message with a role")
            return None
        trainable = f.get("trainable")
        if trainable is not None and not isinstance(trainable, (bool, np.bool_)):
            rows.bad(line, f"{field}[{k}].trainable", not_a_flag(trainable))
            return None
        out.append(f)
    return out


def _add(rows: _Rows, at: tuple[int, str, str], group, traj: dict, legacy: bool) -> None:
    """One trajectory (``traj``: a Parquet row, or a legacy trajectory dict) into ``rows``;
    ``at``: its line (row), key and the prefix of its fields in problems."""
    line, key, pre = at
    field = "messages_and_choices" if legacy else "messages"
    metrics = _json_dict(rows, line, pre + "metrics", traj.get("metrics"))
    msgs = _messages(rows, line, pre + field, traj.get(field), legacy)
    if metrics is None or msgs is None:
        return
    rows.line.append(line)
    rows.key.append(key)
    rows.field.append(pre + field)
    rows.group.append(group)
    rows.reward.append(traj.get("reward"))
    rows.metrics.append(metrics)
    rows.messages.append(msgs)


def _parquet_rows(path: str) -> _Rows:
    table = read_parquet_arrow(path)
    rows = _Rows(path, "row")
    missing = [c for c in SIGNATURE if c not in table.column_names]
    if missing and table.num_rows:
        raise LoadError(
            [
                Problem(
                    path, None, c, f"missing; an ART trajectories Parquet has {', '.join(SIGNATURE)}", "row"
                )
                for c in missing
            ]
        )
    charge_frame(path, table, "row")
    _guards.Budget(path, "row").spend(table.nbytes + _MESSAGE_COST * _count_messages(table))
    for i, r in enumerate(table.to_pylist()):
        g = r.get("group_index")
        if not isinstance(g, int) or isinstance(g, bool) or g < 0:
            rows.bad(i, "group_index", f"expected a whole number >= 0, got {g!r:.40}")
            continue
        _add(rows, (i, f"r{i}", ""), g, r, legacy=False)
    return rows


def _count_messages(table) -> int:
    """How many messages the ``messages`` column holds (0 when it is not a list column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "messages" not in table.column_names:
        return 0
    col = table.column("messages")
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        return 0
    return int(pc.sum(pc.list_value_length(col)).as_py() or 0)


def _jsonl_rows(path: str) -> _Rows:
    recs, lines = jsonl_records(path, max_line_bytes())
    rows = _Rows(path, "line")
    for g, (rec, line) in enumerate(zip(recs, lines)):
        trajs = rec.get("trajectories")
        if not isinstance(trajs, list):
            rows.bad(line, "trajectories", f"expected a list of trajectories, got {type(trajs).__name__}")
            continue
        for k, t in enumerate(trajs):
            if not isinstance(t, dict):
                rows.bad(line, f"trajectories[{k}]", "expected an object")
                continue
            _add(rows, (line, f"l{line}.{k}", f"trajectories[{k}]."), g, t, legacy=True)
    return rows


def _calls(rows: _Rows, line: int, field: str, v) -> list | None:
    """A message's tool calls as ``[{"name", "arguments"}]`` (Parquet: JSON text; JSONL: a
    list); None when it made none; a problem (and None) when they cannot be read."""
    if v is None or v == "" or v == []:
        return None
    if isinstance(v, str):
        why = _guards.json_problem(v)
        try:
            v = None if why else loads(v)
        except (ValueError, RecursionError):
            why = "not valid JSON text"
        if why:
            rows.bad(line, field, why)
            return None
    if not isinstance(v, list):
        rows.bad(line, field, f"expected a list of tool calls, got {type(v).__name__}")
        return None
    out = []
    for c in v:
        f = c.get("function") if isinstance(c, dict) else None
        out.append({"name": f.get("name"), "arguments": f.get("arguments")} if isinstance(f, dict) else c)
    return out


def _anchor(env: list[dict]):
    if not env:
        return None
    texts = [to_text(m.get("content")) for m in env]
    return texts[0] if len(texts) == 1 else texts


def _turns(rows: _Rows, i: int) -> tuple[list, bool]:
    """(each model turn's (anchor, action, response), whether the turns are every assistant
    message because none is marked trainable)."""
    msgs, line = rows.messages[i], rows.line[i]
    every = not any(m.get("role") == "assistant" and m.get("trainable") for m in msgs)
    turns, env = [], []
    for k, m in enumerate(msgs):
        role = m.get("role")
        if role == "assistant":
            if every or m.get("trainable"):
                calls = _calls(rows, line, f"{rows.field[i]}[{k}].tool_calls", m.get("tool_calls"))
                action = json.dumps(calls, ensure_ascii=False, sort_keys=True) if calls else None
                turns.append((_anchor(env), action, to_text(m.get("content"))))
            env = []
        elif role in ENV_ROLES:
            env.append(m)
    return turns, every


def _pick_success(rows: _Rows, success_column: str | None) -> tuple[str | None, str]:
    """(the ``metrics`` key that is success or None, the note)."""
    n = len(rows.metrics)
    if success_column:
        if not any(success_column in m for m in rows.metrics):
            raise LoadError(
                [
                    Problem(
                        rows.path,
                        None,
                        f"metrics.{success_column}",
                        "--success-column names a metric no trajectory has",
                    )
                ]
            )
        return success_column, f"success = metrics.{success_column} (--success-column)"
    named = sorted({k for m in rows.metrics for k in m if isinstance(k, str) and _SUCCESS_NAME.fullmatch(k)})
    usable = [
        k
        for k in named
        if all(k in m for m in rows.metrics) and not len(read_flags([m[k] for m in rows.metrics])[1])
    ]
    if len(usable) == 1:
        k = usable[0]
        wins = int(read_flags([m[k] for m in rows.metrics])[0].sum())
        passed = [x for x in named if x != k]
        return k, (
            f"success = metrics.{k} (the one metric named as a success holding only 0/1 / true / false "
            f"in every trajectory): {wins} of {n}; --success-column overrides"
            + (f"; not {', '.join(passed)}" if passed else "")
        )
    why = (
        f"several such metrics ({', '.join(usable)})"
        if usable
        else "no metric named as a success (win, success, correct ...) holding only flags in every trajectory"
    )
    if named and not usable:
        why += f" (seen: {', '.join(named[:5])})"
    return None, f"{why}: success = reward > the success threshold; name one with --success-column"


def _success(rows: _Rows, key: str | None) -> list:
    """Per trajectory: its flag, or None (the loader's rule) where the key is absent."""
    out: list = []
    for m, line in zip(rows.metrics, rows.line):
        if key is None or key not in m:
            out.append(None)
            continue
        flags, bad = read_flags([m[key]])
        if len(bad):
            rows.bad(line, f"metrics.{key}", not_a_flag(m[key]))
        out.append(bool(flags[0]))
    return out


def _layout(path: str) -> tuple[str | None, str]:
    """(split, run id) from ``<base>/<project>/models/<name>/trajectories/<split>/<file>``;
    elsewhere (None, the run name of the folder)."""
    p = Path(path).resolve()
    parts = p.parts
    if len(parts) >= 6 and parts[-3] == "trajectories" and parts[-5] == "models":
        return parts[-2], f"{parts[-6]}/{parts[-4]}"
    return None, run_from_dir(str(p.parent))


def _frame(rows: _Rows, split: str | None, success: list) -> tuple[dict, list[int], dict]:
    rewards, bad = number_problems(rows.reward, rows.path, rows.line, "reward", rows.where)
    rows.problems += bad
    cols: dict[str, list] = {k: [] for k in ("group_id", "traj_id", "step_idx", "anchor_obs", "action")}
    cols.update(response=[], reward=[], episode_return=[], success=[], metrics=[])
    lines: list[int] = []
    seen = {"no_turns": 0, "every": 0}
    for i in range(len(rows.line)):
        turns, every = _turns(rows, i)
        if np.isnan(rewards[i]) and not bad:
            rows.bad(rows.line[i], "reward", "missing")
        if not turns:
            seen["no_turns"] += 1
            continue
        seen["every"] += every and any(m.get("role") == "assistant" for m in rows.messages[i])
        n, g = len(turns), f"{split or 'art'}/g{rows.group[i]}"
        cols["group_id"] += [g] * n
        cols["traj_id"] += [f"{g}/{rows.key[i]}"] * n
        cols["step_idx"] += list(range(n))
        cols["anchor_obs"] += [t[0] for t in turns]
        cols["action"] += [t[1] for t in turns]
        cols["response"] += [t[2] for t in turns]
        cols["reward"] += [0.0] * (n - 1) + [float(rewards[i])]
        cols["episode_return"] += [float(rewards[i])] * n
        cols["success"] += [success[i]] * n
        cols["metrics"] += [json.dumps(rows.metrics[i], ensure_ascii=False, default=str)] * n
        lines += [rows.line[i]] * n
    return cols, lines, seen


def _notes(rows: _Rows, seen: dict, n_steps: int, version: str) -> list[str]:
    notes = []
    groups = sorted(set(rows.group))
    gaps = sorted(set(range(groups[-1] + 1)) - set(groups)) if groups else []
    if gaps:
        shown = ", ".join(map(str, gaps[:10])) + (" ..." if len(gaps) > 10 else "")
        notes.append(
            f"{len(gaps)} group_index value(s) without a row ({shown}): groups whose every rollout raised "
            "(ART writes no row for an exception)"
        )
    if seen["every"]:
        notes.append(
            f"{seen['every']} trajectory(ies) mark no message trainable (the model's turns were logged as "
            "plain messages): every assistant message is a turn"
        )
    if seen["no_turns"]:
        notes.append(f"{seen['no_turns']} trajectory(ies) without an assistant message: no step, left out")
    notes.append(
        f"ART trajectories ({version}): {n_steps} turns of {len(rows.line) - seen['no_turns']} trajectories, "
        "groups = group_index, reward on the last turn, anchors = the user / tool message(s) before each "
        "turn, truncation not in the file (done unknown)"
    )
    return notes


def read(path: str, *, success_column=None) -> Imported:
    fmt = detect_format(path)
    rows = _parquet_rows(path) if fmt == "parquet" else _jsonl_rows(path)
    if rows.problems:
        raise LoadError(rows.problems[:MAX_LISTED], total=len(rows.problems))
    split, run = _layout(path)
    key, success_note = _pick_success(rows, success_column) if rows.line else (None, "")
    success = _success(rows, key)
    cols, lines, seen = _frame(rows, split, success)
    if rows.problems:
        raise LoadError(rows.problems[:MAX_LISTED], total=len(rows.problems))
    out = dict(cols)
    n = len(lines)
    if not present(out["success"]).any():
        del out["success"]
    if not n or not out:
        return Imported(
            RawTable(path, arrow_table(out, n), np.zeros(0, dtype=np.int64), rows.where, False), NAME
        )
    notes = [success_note]
    step = step_from_path(path)
    if step is None:
        step = 0
        notes.append(f"train_step 0: the file name {Path(path).name!r} is not <step>.parquet")
    out["train_step"] = step
    if split is not None:
        out["split"] = split
    out["run_id"] = run
    out["src_line"] = np.asarray(lines, dtype=np.int64)
    version = (
        "JSON Lines, 0.4-0.5.4"
        if fmt != "parquet"
        else ("Parquet v2, 0.5.9+" if "group_metadata" in _columns(path) else "Parquet v1, 0.5.5-0.5.7")
    )
    notes += _notes(rows, seen, n, version)
    return Imported(
        RawTable(path, arrow_table(out, n), np.asarray(lines, dtype=np.int64), rows.where, False),
        NAME,
        {"line": "src_line"},
        tuple(notes),
    )


def _columns(path: str) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)
