"""Multi-turn completions read as turns, by the history-free rule (SCHEMA.md).

TRL's tool-calling completions and ms-swift's multi-turn prompts carry a whole conversation in
one logged row. `expand_turns` makes one step per assistant turn: its anchor is the
environment's message before it (the ``user`` / ``tool`` messages since the previous turn:
one message, or the results of each of the previous turn's tool calls), never the conversation
so far; its action is the turn's tool calls when it made some; a turn of text alone names no
action (its text is the response) and is keyed by its transition (SCHEMA.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from ._common import objects, take, to_text

#: Roles whose messages come from the environment (a user, a tool's result).
ENV_ROLES = frozenset({"user", "tool", "ipython", "observation", "function", "tool_response"})


@dataclass(frozen=True)
class Turn:
    """One assistant turn: the anchor (env message(s) before it), the action, the response text,
    and whether the environment answered it (False for a tool call left unanswered)."""

    anchor: object
    observation: str | None
    action: str | None
    response: str | None
    answered: bool


def _plain(v):
    """numpy arrays (Parquet lists) as lists, recursively; dicts kept."""
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def messages(value) -> list[dict] | None:
    """A chat message list (dicts with a ``role``), else None."""
    value = _plain(value)
    if (
        isinstance(value, list)
        and value
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value)
    ):
        return value
    return None


def _content(m: dict):
    c = m.get("content")
    return c if isinstance(c, str) else to_text(c)


def _tool_calls(m: dict) -> list | None:
    calls = m.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for c in calls:
        f = c.get("function") if isinstance(c, dict) else None
        if isinstance(f, dict):
            args = f.get("arguments")
            if isinstance(args, dict):  # Parquet structs fill absent keys with None
                args = {k: v for k, v in args.items() if v is not None}
            out.append({"name": f.get("name"), "arguments": args})
        else:
            out.append(c)
    return out


def _answered(t: Turn, answered: bool) -> Turn:
    return Turn(t.anchor, t.observation, t.action, t.response, answered)


def _anchor(env: list[dict]):
    if not env:
        return None
    if len(env) == 1:
        return _content(env[0])
    return [_content(m) for m in env]


def conversation_turns(history: list[dict], generated: list[dict]) -> list[Turn]:
    """The turns of ``generated`` (the messages the rollout produced: assistant turns and the
    environment's answers), after ``history`` (the prompt messages)."""
    env = []
    for m in reversed(history):
        if m.get("role") not in ENV_ROLES:
            break
        env.insert(0, m)
    turns: list[Turn] = []
    for m in generated:
        if m.get("role") == "assistant":
            calls = _tool_calls(m)
            text = _content(m)
            action = json.dumps(calls, ensure_ascii=False, sort_keys=True) if calls else None
            obs = "\n".join(_content(e) or "" for e in env) if env else None
            turns.append(Turn(_anchor(env), obs, action, text, not calls))
            env = []
        elif m.get("role") in ENV_ROLES:
            env.append(m)
            if turns:
                turns[-1] = _answered(turns[-1], True)
    if env and turns:  # the environment answered last and no turn followed: the rollout was cut
        turns[-1] = _answered(turns[-1], False)
    return turns


#: A chat-templated conversation: (message pattern with role and content groups) for ChatML
#: (Qwen, Yi, InternLM2 ...) and Llama 3.
_TEMPLATES = (
    re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.S),
    re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|\Z)", re.S),
)


#: A user message made only of tool results (Qwen2.5 / hermes agent templates render a tool
#: message as ``<tool_response>\n…\n</tool_response>`` inside a user turn).
_TOOL_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.S)


def templated_messages(text) -> list[dict] | None:
    """The messages of a chat-templated text (ChatML or Llama 3), else None. An open assistant
    turn at the end (the generation prompt) is left out; a user turn holding only
    ``<tool_response>`` blocks is one tool message per block."""
    if not isinstance(text, str):
        return None
    for pat in _TEMPLATES:
        found = [(m.group(1), m.group(2)) for m in pat.finditer(text)]
        if found:
            if found[-1][0] == "assistant" and not found[-1][1].strip():
                found = found[:-1]
            out = []
            for r, c in found:
                blocks = _TOOL_RESPONSE.findall(c) if r == "user" else []
                if blocks and not _TOOL_RESPONSE.sub("", c).strip():
                    out += [{"role": "tool", "content": b} for b in blocks]
                else:
                    out.append({"role": r, "content": c})
            return out
    return None


def expand_turns(out: dict, turns: list[list[Turn] | None], line: np.ndarray):
    """One row per turn of each completion row of ``out`` (a dict of columns, for
    `crbc_viz.io.arrow_rows.arrow_table`; ``turns[i]`` None or one turn: the row
    stays as it is). The completion's reward sits on its last turn (0 before), its success and
    advantage on every turn; ``done`` is false before the last turn, and on the last one when the
    environment's answer was cut off.

    Returns:
        (rows, their file lines, how many completions were split into more than one turn, how
        many end on an environment answer cut off).
    """
    if not any(turns):
        return out, line, 0, 0
    counts = np.array([len(t) if t else 1 for t in turns], dtype=np.int64)
    multi = int((counts > 1).sum())
    rows = {c: take(v, np.repeat(np.arange(len(line)), counts)) for c, v in out.items()}
    n = int(counts.sum())
    first = np.r_[0, np.cumsum(counts)[:-1]]
    step = np.arange(n) - np.repeat(first, counts)
    last = step == np.repeat(counts, counts) - 1
    flat = [t for ts, k in zip(turns, counts) for t in (ts or [None] * k)]
    keep = [t is None for t in flat]

    def pick(col, attr):
        before = objects(rows[col], n).tolist() if col in rows else [None] * len(flat)
        return [old if t is None else getattr(t, attr) for old, t in zip(before, flat)]

    rows["anchor_obs"] = [
        old if k or t.anchor is None else t.anchor
        for old, k, t in zip(objects(rows["anchor_obs"], n), keep, flat)
    ]
    rows["observation"] = [
        old if k or (t.observation is None) or s == 0 else t.observation
        for old, k, t, s in zip(objects(rows["observation"], n), keep, flat, step)
    ]
    rows["action"] = pick("action", "action")
    rows["response"] = pick("response", "response")
    rows["step_idx"] = step
    rows["reward"] = np.where(last, objects(rows["reward"], n).astype(np.float64), 0.0)
    answered = np.array([True if t is None else t.answered for t in flat])
    rows["done"] = last & answered
    return rows, np.repeat(line, counts), multi, int((last & ~answered).sum())
