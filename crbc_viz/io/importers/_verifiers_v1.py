"""verifiers 0.4 (``verifiers.v1``) eval output: ``<output_dir>/<run>/traces.jsonl``.

Written by ``verifiers.v1.utils.trace_store.write_episode`` (read from verifiers 0.4.0 and run
through its ``vf-eval``, tests/fixtures/verifiers_040): one ``Episode`` a line -- ``id``,
``env`` (``id``, ``name``), ``task`` (``type``, ``data``, ``key``, ``hash``), ``group`` (``id``,
when the consumer grouped the episode), ``run`` (``type`` ``eval``, or ``train`` with
``work.step``), ``ok``, ``errors`` and ``traces``: each agent's ``Trace`` with its message graph
``nodes`` (``message``, ``parent``, ``sampled``: a model turn), ``calls`` (``finish_reason``,
``error``), ``rewards`` (name -> ``{score, weight}`` or null), ``stop_condition``, ``ok``,
``agent`` (``name``, ``trainable``).

Canonical mapping: group = ``group.id``, else the task's ``key`` (its content hash: the
episodes of one task); one trajectory per trace of a trainable agent (an untrainable one -- a
simulated user, a judge -- is left out, counted); the turns are the sampled nodes of the trace's
last branch (root to its last leaf; a trace that branched is noted), ``action`` / ``response``
the turn's content (its tool calls when it has no text); anchor = the environment's last
message (user / tool) before the turn on that branch; ``reward`` = verifiers' ``Trace.reward``
(sum of score x weight of the rewards that ran) on the last turn, 0 before; ``episode_return``
the same. Cut, as verifiers' ``Trace.is_truncated``: ``stop_condition`` ``max_turns``,
``max_input_tokens``, ``max_output_tokens``, ``max_total_tokens`` or ``compaction_failed``, or
the last answered call finished with ``length``; an errored trace (``ok`` false) is cut too;
anything else ended. ``train_step`` = ``run.work.step`` of a training run, else 0;
``env_name`` = ``env.id``.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_flag, read_flags
from ..readers import RawTable, read_table
from ._common import Imported, arrow_table, record_columns, run_from_dir, text_id, to_text

__all__ = ["FIELDS", "read_traces", "sniff_traces"]

#: Fields of an episode line that identify the layout.
FIELDS = ("traces", "task", "env")
#: verifiers' ``Trace.is_truncated`` stop conditions.
TRUNCATING = frozenset(
    {"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"}
)
ENV_ROLES = frozenset({"user", "tool"})


def sniff_traces(fields: set[str]) -> bool:
    return set(FIELDS) <= fields


def _text(content):
    """A message's text: a string, or the text parts of a content list joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p.get("text") for p in content if isinstance(p.get("text"), str)]
        if texts:
            return "\n\n".join(texts)
    return to_text(content)


def _is_index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _last_branch(nodes: list) -> tuple[list[int], bool]:
    """Node indices root -> last leaf (the last node no other node names as its parent), and
    whether the graph has more than one leaf."""
    parents = {n.get("parent") for n in nodes if isinstance(n, dict) and _is_index(n.get("parent"))}
    leaves = [i for i in range(len(nodes)) if i not in parents]
    if not leaves:
        return [], False
    path, nid, seen = [], leaves[-1], set()
    while isinstance(nid, int) and 0 <= nid < len(nodes) and nid not in seen:
        seen.add(nid)
        path.append(nid)
        nid = nodes[nid].get("parent") if isinstance(nodes[nid], dict) else None
    return path[::-1], len(leaves) > 1


def _reward(rewards, where: tuple) -> tuple[float, Problem | None]:
    """verifiers' ``Trace.reward``: sum of score x weight over the rewards that ran."""
    if rewards is None:
        return 0.0, None
    if not isinstance(rewards, dict):
        return 0.0, Problem(*where, f"expected an object of named rewards, got {type(rewards).__name__}")
    total = 0.0
    for name, r in rewards.items():
        if r is None:
            continue
        score = r.get("score") if isinstance(r, dict) else None
        weight = r.get("weight", 1.0) if isinstance(r, dict) else None
        ok = all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in (score, weight)
        )
        if not ok:
            return 0.0, Problem(*where, f"reward {name!r}: expected {{score, weight}} numbers, got {r!r:.60}")
        total += float(score) * float(weight)
    return total, None


def _cut(trace: dict, where: tuple) -> tuple[bool, Problem | None]:
    """verifiers' ``Trace.is_truncated``, or an errored trace."""
    flags, bad = read_flags([trace.get("ok", False)])
    if len(bad):
        return False, Problem(*where, f"ok: {not_a_flag(trace.get('ok'))}")
    stop = trace.get("stop_condition")
    if stop is not None and not isinstance(stop, str):
        return False, Problem(*where, f"stop_condition: expected a name, got {stop!r:.40}")
    if stop in TRUNCATING or not flags[0]:
        return True, None
    calls = trace.get("calls") if isinstance(trace.get("calls"), list) else []
    last = next((c for c in reversed(calls) if isinstance(c, dict) and c.get("error") is None), None)
    return bool(last and last.get("finish_reason") == "length"), None


def _group(ep: dict) -> str:
    g = ep.get("group")
    if isinstance(g, dict) and g.get("id") is not None:
        return str(g["id"])
    task = ep.get("task") if isinstance(ep.get("task"), dict) else {}
    for k in ("key", "hash"):
        if isinstance(task.get(k), str):
            return task[k]
    return text_id(task.get("data"), "t")


def _train_step(ep: dict) -> int:
    run = ep.get("run")
    work = run.get("work") if isinstance(run, dict) and run.get("type") == "train" else None
    step = work.get("step") if isinstance(work, dict) else None
    return int(step) if isinstance(step, int) and not isinstance(step, bool) else 0


def _turn_rows(trace: dict, path: list[int], nodes: list) -> list[dict]:
    """One row per sampled node on ``path``: its anchor (the environment's last message
    before it on the path), its action and response."""
    rows, anchor = [], None
    for nid in path:
        node = nodes[nid] if isinstance(nodes[nid], dict) else {}
        msg = node.get("message") if isinstance(node.get("message"), dict) else {}
        role = (
            msg.get("role") if isinstance(msg.get("role"), str) else None
        )  # a role of another type is no role
        if node.get("sampled") and role == "assistant":
            text = _text(msg.get("content"))
            calls = to_text(msg.get("tool_calls")) if msg.get("tool_calls") else None
            # a tool call is a parsed action; text alone names none: keyed by its transition
            rows.append(
                {"anchor_obs": anchor, "observation": anchor, "action": calls, "response": text or calls}
            )
        elif role in ENV_ROLES:
            anchor = _text(msg.get("content"))
    return rows


def _episode_rows(ep: dict, where: tuple, counts: dict, problems: list) -> list[dict]:
    traces = ep.get("traces")
    if not isinstance(traces, list):
        problems.append(
            Problem(*where[:2], "traces", f"expected a list, got {type(traces).__name__}", where[2])
        )
        return []
    group, step = _group(ep), _train_step(ep)
    env = ep.get("env") if isinstance(ep.get("env"), dict) else {}
    out = []
    for k, trace in enumerate(traces):
        at = (*where[:2], f"traces[{k}]", where[2])
        if not isinstance(trace, dict):
            problems.append(Problem(*at[:3], "expected a trace object", at[3]))
            continue
        agent = trace.get("agent") if isinstance(trace.get("agent"), dict) else {}
        if agent.get("trainable") is False:
            counts["untrainable"] += 1
            continue
        nodes = trace.get("nodes") if isinstance(trace.get("nodes"), list) else []
        path, branched = _last_branch(nodes)
        counts["branched"] += branched
        turns = _turn_rows(trace, path, nodes)
        reward, why = _reward(trace.get("rewards"), at[:3])
        cut, why2 = _cut(trace, at[:3])
        for p in (why, why2):
            if p is not None:
                problems.append(Problem(p.path, p.line, p.field, p.message, at[3]))
        if not turns:
            counts["empty"] += 1
            continue
        tid = str(trace.get("id") or f"{ep.get('id')}/{k}")
        for j, row in enumerate(turns):
            last = j == len(turns) - 1
            row.update(
                group_id=group,
                traj_id=tid,
                step_idx=j,
                reward=reward if last else 0.0,
                episode_return=reward,
                done=(not cut) if last else False,
                env_name=to_text(env.get("id")),
                train_step=step,
            )
            out.append(row)
    return out


def read_traces(path: str, name: str) -> Imported:
    """The canonical rows of a verifiers 0.4 ``traces.jsonl`` (importer ``name``).

    Raises:
        LoadError: naming the line and field (``traces[k]``) of every problem.
    """
    raw = read_table(path)
    df = raw.columns
    if not df.rows:
        return Imported(raw, name)
    counts = {"untrainable": 0, "branched": 0, "empty": 0}
    problems: list[Problem] = []
    rows, lines = [], []
    cols = list(df)
    for i, values in enumerate(df.tuples()):
        ep = {c: v for c, v in zip(cols, values) if not (isinstance(v, float) and np.isnan(v))}
        got = _episode_rows(ep, (raw.path, int(raw.line[i]), raw.where), counts, problems)
        rows.extend(got)
        lines.extend([int(raw.line[i])] * len(got))
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    out = record_columns(rows)
    line = np.asarray(lines, np.int64)
    if not rows:
        return Imported(RawTable(raw.path, arrow_table(out, 0), line, raw.where, False, raw.problems), name)
    out["src_line"] = line
    out["run_id"] = run_from_dir(path)
    notes = [
        f"verifiers traces.jsonl: {df.rows} episodes, {len(set(out['traj_id']))} traces; turns = the "
        "sampled (assistant) nodes of each trace's last branch, anchors = the user / tool message "
        "before each, reward (Trace.reward) on the last turn, cut = verifiers' is_truncated "
        "(turn / token limits, a last reply cut by length) or an error"
    ]
    if counts["untrainable"]:
        notes.append(
            f"{counts['untrainable']} trace(s) of untrainable agents (a simulated user, a judge) left out"
        )
    if counts["branched"]:
        notes.append(f"{counts['branched']} trace(s) branch (compaction, retries): their last branch is read")
    if counts["empty"]:
        notes.append(
            f"{counts['empty']} trace(s) with no model turn (an error before the first reply) left out"
        )
    return Imported(
        RawTable(raw.path, arrow_table(out, len(line)), line, raw.where, False, raw.problems),
        name,
        {"line": "src_line", "traces[].id": "traj_id"},
        tuple(notes),
    )
