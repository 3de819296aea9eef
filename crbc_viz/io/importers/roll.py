"""ROLL (alibaba/ROLL) agentic pipeline, step-wise dumps: one row per environment step with
the fields of ROLL's ``non_tensor_batch`` in step-wise (GiGPO) mode.

=====================  ===========================================  ==================
ROLL field             meaning                                      canonical field
=====================  ===========================================  ==================
``traj_group_id``      ``{tag}_{group_id}_{episode_id}_{seed}``     ``group_id``
``traj_id``            ``{traj_group_id}_{env_id}``                 ``traj_id``
``step``               turn index                                   ``step_idx``
``state_hash``         hash of the env state (GiGPO anchor)         ``anchor_key``
``step_scores``        this step's score (a number, or the          ``reward``
                       trajectory's per-step list: element ``step``)
``episode_scores``     trajectory score (number or 1-list)          ``episode_return``
``tags``               environment tag                              ``env_name``
``done``/``terminated`` episode ended (``truncated`` = not done)    ``done``
``global_step``        trainer step (else from the file name)      ``train_step``
``response_text``/``action``, ``messages_list``                     ``response``/``action``, ``observation``
=====================  ===========================================  ==================

What ROLL writes (read from ROLL 8eb27cc2 and run, tests/fixtures/roll_real):
``dump_rollout_trajectories`` writes ``rollout_dump_data.step_<N>.jsonl`` holding **one JSON
object whose values are lists** (one element per step row, only the columns of
``meta_info["COLUMMNS_CONFIG"]`` plus ``global_step``); such files are unrolled into rows. The
step-wise manager names no columns, so ROLL writes nothing for it: docs/roll_recipe.md adds the
copies ``crbc_traj_group_id`` ... ``crbc_done``, read here as the names without ``crbc_``. Plain
JSONL / Parquet step rows under the same names are read too. Rows may be in any order (``step``
orders them; without it the file is refused); exact duplicate rows are dropped with a note,
conflicting ones are an error naming both. ``step_scores`` / ``episode_scores`` (and the
agent-native ``reward_info.step_rewards``) are numbers or their text (`crbc_viz.io.flags.read_numbers`);
anything else is a problem naming its row. Success = ``episode_scores`` > success_threshold
unless ``success`` is present; without an ``action`` a step is identified by its transition
(SCHEMA.md; the response text stays ``response``, as the ROLL adapter keys it).
``done`` / ``terminated`` is a flag (`crbc_viz.io.flags`: a bool or 0/1; in a CSV also the text
true/false): a missing value says nothing, any other value (``"False"`` in a JSON file, 2) is a
problem naming its row, never read as ended.

ROLL's agent-native manager (``AgentNativeStepEnvManager``, 8eb27cc2) names its own columns:
``trajectory_data`` (JSON: ``env_info``, ``length_info.terminated/truncated``,
``reward_info.step_rewards``, ``failure_info``, ``metrics``), ``messages``, ``tools``,
``exp_name``; ROLL's ``remove_nan_items`` keeps one element per trajectory. Read as: group =
``{tag}_{group_id}_{episode_id}_{seed}`` of ``env_info``, one turn per assistant message of the
conversation, anchor = the message before it (the observation), reward = its step reward,
ended = ``terminated and not truncated`` (flags: bools or 0/1). The ``messages`` ROLL dumps
are the last step's input messages and its reply (``formulate_rollouts``, 8eb27cc2 and v0.3.0):
the whole conversation only where the env keeps the history in its observation (ROLL's sokoban
``native_env``). Where they hold fewer assistant turns than ``reward_info.step_rewards`` (one per
step the env took), the turns are the step rewards and the messages' turns are the last ones;
the earlier turns have no anchor or response in the file (noted; tests/fixtures/roll_native_last).
"""

from __future__ import annotations

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from .. import _guards
from ..flags import not_a_flag, not_a_number, read_flags, read_numbers
from ..readers import RawTable, read_table
from ._common import (
    Imported,
    arrow_table,
    columns,
    concat_parts,
    drop_exact_duplicates,
    held,
    loads,
    numbers,
    objects,
    present,
    record_columns,
    rename,
    require,
    run_from_dir,
    step_from_path,
    surrogate_note,
    to_text,
)

NAME = "roll"
#: What the app calls this format.
TITLE = "ROLL dump"
SIGNATURE = ("traj_group_id", "traj_id")
FOLDER = False
OPTIONS = ()
PREFIX = "crbc_"  # docs/roll_recipe.md: copies that ROLL's dump may pop from the batch
_AGENT_NATIVE = {"trajectory_data", "messages", "tools"}
FIELD_MAP = {
    "traj_group_id": "group_id",
    "step": "step_idx",
    "state_hash": "anchor_key",
    "episode_scores": "episode_return",
    "tags": "env_name",
    "global_step": "train_step",
    "response_text": "response",
}


def sniff(fields: set[str]) -> bool:
    return (
        set(SIGNATURE) <= fields
        or {PREFIX + f for f in SIGNATURE} <= fields
        or {"trajectory_data", "messages"} <= fields  # AgentNativeStepEnvManager
    )


def _unroll(raw: RawTable) -> tuple[RawTable, str | None, dict]:
    """ROLL's column files (each JSON line an object of equal-length lists) as step rows, and
    the rows' columns (for `arrow_table`)."""
    df = raw.columns
    if not df.rows or not all(isinstance(v, (list, np.ndarray)) for v in df.row(0).values()):
        return raw, None, columns(df)
    parts, lines = [], []
    for i in range(df.rows):
        row = df.row(i)
        lens = {len(v) for v in row.values() if isinstance(v, (list, np.ndarray))}
        if len(lens) != 1 or not all(isinstance(v, (list, np.ndarray)) for v in row.values()):
            raise LoadError(
                [
                    Problem(
                        raw.path,
                        int(raw.line[i]),
                        None,
                        "a ROLL dump line is one "
                        "object of equal-length lists (one element per row); this "
                        f"one has lists of lengths {sorted(lens)}",
                        raw.where,
                    )
                ]
            )
        parts.append({k: list(v) for k, v in row.items()})
        lines.append(np.arange(lens.pop()))
    out = concat_parts(parts)
    n = sum(len(x) for x in lines)
    line = np.concatenate(lines) if len(lines) == 1 else np.arange(n)
    return (
        RawTable(raw.path, arrow_table(out, n), line.astype(np.int64), "item", False, raw.problems),
        f"ROLL column file: {n} rows unrolled from {df.rows} object(s) of lists",
        out,
    )


def _scalar(v, idx=None):
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        if not v:
            return None
        if idx is not None and 0 <= idx < len(v):
            return v[idx]
        return v[-1]
    return v


def _last_message(msgs, role):
    if isinstance(msgs, np.ndarray):
        msgs = msgs.tolist()
    if isinstance(msgs, list):
        for m in reversed(msgs):
            if isinstance(m, dict) and m.get("role") == role:
                return to_text(m.get("content"))
    return None


def _done_flags(col, raw: RawTable, line: np.ndarray) -> np.ndarray:
    """``done`` per row (``line``: each row's line): True / False, None where the row has none;
    any value that is not a flag is a problem naming its row (``bool("False")`` would read a
    truncated step as ended)."""
    values = objects(col)
    there = present(values)
    flags, bad = read_flags(values[there], text=raw.from_text)
    if len(bad):
        rows = np.flatnonzero(there)[bad]
        raise LoadError(
            [
                Problem(raw.path, int(line[i]), "done", not_a_flag(values[i], text=raw.from_text), raw.where)
                for i in rows[:MAX_LISTED]
            ],
            total=len(rows),
        )
    out = np.full(len(values), None, dtype=object)
    out[there] = flags
    return out


def _json_cell(raw: RawTable, values, i: int, field: str, want: type, fixed: list | None = None):
    """The JSON text in ``field`` (its values ``values``) of row ``i``, parsed after the depth
    and item guards (lone surrogates replaced by U+FFFD, counted in ``fixed``)."""
    v = values[i]
    where = raw.path, int(raw.line[i]), field
    if not isinstance(v, str):
        raise LoadError([Problem(*where, f"expected a JSON string, got {type(v).__name__}", raw.where)])
    why = _guards.json_problem(v)
    if why is not None:
        raise LoadError([Problem(*where, f"too large or deep to read: {why}", raw.where)])
    try:
        obj = loads(v, fixed)
    except (ValueError, RecursionError):
        raise LoadError([Problem(*where, "not valid JSON text", raw.where)]) from None
    if not isinstance(obj, want):
        raise LoadError(
            [Problem(*where, f"expected a JSON {want.__name__}, got {type(obj).__name__}", raw.where)]
        )
    return obj


def _turns(conversation: list) -> list[tuple[str | None, str | None]]:
    """(observation, response) of each assistant message of a conversation: the message before
    it (the user / tool observation) and its own content."""
    out = []
    for k, m in enumerate(conversation):
        if isinstance(m, dict) and m.get("role") == "assistant":
            prev = conversation[k - 1] if k and isinstance(conversation[k - 1], dict) else {}
            out.append((to_text(prev.get("content")), to_text(m.get("content"))))
    return out


def _native_trajectory(
    at: tuple, where: str, env: dict, rinfo: dict, length: dict, turns: list
) -> tuple[Problem | None, np.ndarray | None, list, bool]:
    """One agent-native trajectory's checked step rewards, its turns (padded at the front with
    ``(None, None)`` where its messages hold only the last turns) and whether the env ended it;
    or the `Problem` (at ``at``) that keeps it out."""

    def problem(why: str):
        return Problem(*at, "trajectory_data", why, where), None, turns, False

    missing = [k for k in ("tag", "group_id", "episode_id", "seed", "env_id") if k not in env]
    if missing:
        return problem(f"env_info lacks {', '.join(missing)}")
    step_rewards = rinfo.get("step_rewards")
    if not isinstance(step_rewards, list) or len(step_rewards) < len(turns):
        n = len(step_rewards) if isinstance(step_rewards, list) else step_rewards
        return problem(
            f"reward_info.step_rewards ({n!r:.40}) does not give one reward per assistant "
            f"turn of messages ({len(turns)})"
        )
    step_rewards, bad = read_numbers(step_rewards)
    if len(bad) or np.isnan(step_rewards).any():
        k = int(bad[0]) if len(bad) else int(np.flatnonzero(np.isnan(step_rewards))[0])
        why = not_a_number(rinfo["step_rewards"][k]) if len(bad) else "missing (null)"
        return problem(f"reward_info.step_rewards[{k}]: {why}")
    if len(turns) < len(step_rewards):
        turns = [(None, None)] * (len(step_rewards) - len(turns)) + turns
    flags, bad = read_flags([length.get("terminated"), length.get("truncated")])
    if len(bad):
        k = ("terminated", "truncated")[int(bad[0])]
        return problem(f"length_info.{k}: {not_a_flag(length.get(k))}")
    # stop_reason MAX_STEPS is set at the step limit even when the env ended the episode
    # on that step: truncated is what says it was cut
    return None, step_rewards, turns, bool(flags[0]) and not bool(flags[1])


def _agent_native(raw: RawTable, df: dict, path: str, notes: list[str]) -> Imported:
    """ROLL's ``AgentNativeStepEnvManager`` dump (its columns ``df``): one element per trajectory
    (ROLL's ``remove_nan_items`` keeps only each trajectory's last step row, the one that holds
    ``trajectory_data`` and ``messages``) as step rows."""
    require(raw, ("trajectory_data", "messages"), "ROLL agent-native dump", "AgentNativeStepEnvManager")
    rows, lines, problems, fixed = [], [], [], []
    short = unseen = 0  # trajectories whose messages hold only their last turns; turns not in them
    steps = held(df["global_step"]) if "global_step" in df else None
    trajs, messages = held(df["trajectory_data"]), held(df["messages"])
    for i in range(len(raw.line)):
        traj = _json_cell(raw, trajs, i, "trajectory_data", dict, fixed)
        msgs = _json_cell(raw, messages, i, "messages", list, fixed)
        conversation = msgs[-1] if msgs and isinstance(msgs[-1], list) else []
        env = traj.get("env_info") if isinstance(traj.get("env_info"), dict) else {}
        length = traj.get("length_info") if isinstance(traj.get("length_info"), dict) else {}
        rinfo = traj.get("reward_info") if isinstance(traj.get("reward_info"), dict) else {}
        at = (raw.path, int(raw.line[i]))
        turns = _turns(conversation)
        problem, step_rewards, padded, ended = _native_trajectory(at, raw.where, env, rinfo, length, turns)
        if problem is not None:
            problems.append(problem)
            continue
        if len(padded) > len(turns):
            # ROLL dumps the last step's input messages and its reply: an env whose observation
            # keeps no history leaves only the last turns there; the turns are the step rewards
            unseen += len(padded) - len(turns)
            short += 1
        turns = padded
        group = f"{env['tag']}_{env['group_id']}_{env['episode_id']}_{env['seed']}"
        tid = traj.get("trajectory_id") or f"{group}_{env['env_id']}"
        for k, ((obs, resp), r) in enumerate(zip(turns, step_rewards)):
            rows.append(
                {
                    "group_id": group,
                    "traj_id": str(tid),
                    "step_idx": k,
                    "reward": float(r),
                    "anchor_obs": obs,
                    "observation": obs,
                    "response": resp,
                    "done": ended if k == len(turns) - 1 else False,
                    "env_name": env["tag"],
                    "train_step": steps[i] if steps is not None else None,
                }
            )
            lines.append(int(raw.line[i]))
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    out = record_columns(rows)
    if not rows:
        return Imported(
            RawTable(
                raw.path, arrow_table(out, 0), np.zeros(0, np.int64), raw.where, raw.from_text, raw.problems
            ),
            NAME,
        )
    if not present(out["train_step"]).any():
        out["train_step"] = step_from_path(path) or 0
    out["run_id"] = run_from_dir(path)
    notes += surrogate_note(fixed)
    notes.append(
        f"ROLL agent-native dump: {len(raw.line)} trajectories, turns = the assistant messages of "
        "messages, anchors = the observation before each turn, step rewards from "
        "reward_info.step_rewards, truncated = not (terminated and not truncated)"
    )
    if short:
        notes.append(
            f"{short} trajectories' messages hold only their last turns (the env's observation keeps "
            f"no history): {unseen} earlier turns come from reward_info.step_rewards, without "
            "anchor or response (not in the file)"
        )
    keys = {"trajectory_id": "traj_id"}
    return Imported(
        RawTable(
            raw.path,
            arrow_table(out, len(lines)),
            np.asarray(lines, np.int64),
            raw.where,
            raw.from_text,
            raw.problems,
        ),
        NAME,
        keys,
        tuple(notes),
    )


def read(path: str) -> Imported:
    raw, note, df = _unroll(read_table(path))
    notes = [note] if note else []
    cols = set(df)
    strip = {c: c[len(PREFIX) :] for c in cols if c.startswith(PREFIX) and c[len(PREFIX) :] not in cols}
    if strip:
        df = {strip.get(c, c): v for c, v in df.items()}
        raw = RawTable(
            raw.path, arrow_table(df, len(raw.line)), raw.line, raw.where, raw.from_text, raw.problems
        )
    n = len(raw.line) if df else 0
    if n and _AGENT_NATIVE & cols and "traj_id" not in df:
        return _agent_native(raw, df, path, notes)
    if n and "step" not in df:
        raise LoadError(
            [
                Problem(
                    raw.path,
                    None,
                    "step",
                    "missing in every row: ROLL's rollouts "
                    "come back in completion order, so without the turn index the "
                    "rows cannot be ordered (docs/roll_recipe.md writes crbc_step)",
                )
            ]
        )
    require(raw, SIGNATURE + ("step", "step_scores"), "ROLL step-wise dump", "see docs/roll_recipe.md")
    if not n:
        return Imported(raw, NAME)
    df, line, dup = drop_exact_duplicates(df, raw.line, ("traj_id", "step"), raw.path, raw.where)
    if dup:
        notes.append(dup)
    steps = objects(df["step"])
    scores = [
        _scalar(v, s if isinstance(s, (int, np.integer)) else None)
        for v, s in zip(objects(df["step_scores"]), steps)
    ]
    df["reward"] = numbers(scores, raw.path, line, "step_scores", raw.where)
    del df["step_scores"]
    if "episode_scores" in df:
        ep = objects([_scalar(v) for v in objects(df["episode_scores"])]).tolist()
        df["episode_scores"] = numbers(ep, raw.path, line, "episode_scores", raw.where)
    if "done" not in df and "terminated" in df:
        df["done"] = df["terminated"]
    if "done" in df:
        df["done"] = _done_flags(df["done"], raw, line)
    else:
        notes.append("no done / terminated field: truncation unknown (docs/roll_recipe.md writes crbc_done)")
    if "messages_list" in df:
        msgs = objects(df["messages_list"])
        if "response_text" not in df:
            df["response_text"] = [_last_message(m, "assistant") for m in msgs]
        df["observation"] = [_last_message(m, "user") for m in msgs]
        del df["messages_list"]
    out = rename(df, FIELD_MAP)
    if "run_id" not in out:
        out["run_id"] = run_from_dir(path)
    if "train_step" not in out:
        out["train_step"] = step_from_path(path) or 0
    keys = {"traj_group_id": "group_id", "traj_id": "traj_id", "step": "step_idx"}
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, raw.from_text, raw.problems),
        NAME,
        keys,
        tuple(notes),
    )
