"""The Learn page's data as rows: the bundled groups read from disk, the rare-route trap made
as data, and edits (flipped outcomes, dropped rollouts) applied to an in-memory copy, loaded as a
batch (`crbc_viz.teaching` re-exports all of it).

Pure: no streamlit. Files on disk are only read (`read_rows`); an edited group is loaded from a
temporary JSONL that is deleted before `batch_from_rows` returns.
"""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from .io import load_rollouts

__all__ = [
    "REPO_ROOT",
    "TOY_PATH",
    "SOKOBAN_PATH",
    "RARE_ROUTE_PATH",
    "SOKOBAN_GROUP",
    "TRAP_ANCHOR",
    "TRAP_ACTION",
    "SAFE_ACTION",
    "read_rows",
    "sokoban_rows",
    "rare_route_rows",
    "write_rows",
    "traj_ids",
    "success_bonus",
    "apply_edits",
    "ADD_RULE",
    "added_rollout",
    "parse_add",
    "format_add",
    "batch_from_rows",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
TOY_PATH = REPO_ROOT / "sample_rollouts" / "toy" / "toy_group.jsonl"
SOKOBAN_PATH = REPO_ROOT / "sample_rollouts" / "sokoban" / "sokoban.jsonl"
RARE_ROUTE_PATH = REPO_ROOT / "sample_rollouts" / "toy" / "rare_route.jsonl"
#: The Sokoban teaching group: 6 successes and 2 failures over 18 anchors, 7 of which see ≥ 2
#: actions (the smallest sample group with ≥ 2 of each outcome and a shared branching anchor).
SOKOBAN_GROUP = "sokoban-task-00"

#: The rare-route trap: at ``start`` the agent can ``jump the gap`` (short, but it rarely lands)
#: or ``walk around`` (three steps longer, usually arrives).
TRAP_ANCHOR = "start"
TRAP_ACTION = "jump the gap"
SAFE_ACTION = "walk around"


# ---------------------------------------------------------------- rows in, rows out
def read_rows(path: str | os.PathLike, group_id: str | None = None) -> list[dict]:
    """The JSON rows of a JSONL log (only ``group_id``'s rows if given), in file order."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if group_id is None or row.get("group_id") == group_id:
                    rows.append(row)
    return rows


def sokoban_rows() -> list[dict]:
    """The rows of the Sokoban teaching group (`SOKOBAN_GROUP`)."""
    return read_rows(SOKOBAN_PATH, SOKOBAN_GROUP)


def rare_route_rows(
    n_jump: int = 4, n_lucky: int = 1, n_walk: int = 4, n_walk_success: int = 3
) -> list[dict]:
    """The rare-route trap as rows of one group (ESTIMATORS.md §3a, CRBC's criticism).

    At ``start`` there are two actions:

    - ``jump the gap`` → ``ledge``, then ``leap`` → SUCCESS (lucky, ``n_lucky`` of ``n_jump``
      rollouts) or → FAILURE (the others). Two steps.
    - ``walk around`` → ``corridor 1`` → ``corridor 2`` → ``corridor 3`` → SUCCESS
      (``n_walk_success`` of ``n_walk``); the others ``take the wrong door`` at ``corridor 3``
      → FAILURE. Four steps.

    With the defaults, d(ledge) = 1 < d(corridor 1) = 3, so shortest-path credit prefers the jump,
    while the jump lands 1 time in 4 and the walk arrives 3 times in 4, so the closure's
    Q(start, jump) = β²/4 < Q(start, walk) = 3β⁴/4 and CRBC penalises it.

    Rollouts are ordered jumps first; ``traj_id`` is ``j0…`` / ``w0…`` so a route is visible in
    its name. Reward 1 on the successful last step, else 0; ``success`` on every row.
    """
    if not (1 <= n_jump and 0 <= n_lucky <= n_jump and 1 <= n_walk and 0 <= n_walk_success <= n_walk):
        raise ValueError(
            f"rare_route_rows needs 1 ≤ n_jump, 0 ≤ n_lucky ≤ n_jump, 1 ≤ n_walk, "
            f"0 ≤ n_walk_success ≤ n_walk; got n_jump={n_jump}, n_lucky={n_lucky}, "
            f"n_walk={n_walk}, n_walk_success={n_walk_success}"
        )
    rows: list[dict] = []

    def add(traj: str, path: list[tuple[str, str]], ok: bool) -> None:
        for i, (anchor, action) in enumerate(path):
            last = i == len(path) - 1
            rows.append(
                {
                    "run_id": "teach",
                    "train_step": 0,
                    "group_id": "rare-route",
                    "traj_id": traj,
                    "step_idx": i,
                    "anchor_obs": anchor,
                    "action": action,
                    "reward": 1.0 if (ok and last) else 0.0,
                    "done": last,
                    "success": ok,
                    "env_name": "rare-route trap (crbc_viz.teaching)",
                }
            )

    for j in range(n_jump):
        add(f"j{j}", [(TRAP_ANCHOR, TRAP_ACTION), ("ledge", "leap")], j < n_lucky)
    for w in range(n_walk):
        ok = w < n_walk_success
        add(
            f"w{w}",
            [
                (TRAP_ANCHOR, SAFE_ACTION),
                ("corridor 1", "go on"),
                ("corridor 2", "go on"),
                ("corridor 3", "open the exit" if ok else "take the wrong door"),
            ],
            ok,
        )
    return rows


def write_rows(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Write rows as JSONL (one ``json.dumps(row, sort_keys=True)`` per line)."""
    path = Path(path)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    return path


def traj_ids(rows: list[dict]) -> list[str]:
    """Trajectory ids in first-occurrence order."""
    return list(dict.fromkeys(str(r["traj_id"]) for r in rows))


def _last_rows(rows: list[dict]) -> dict[str, dict]:
    last: dict[str, dict] = {}
    for r in rows:
        t = str(r["traj_id"])
        if t not in last or r["step_idx"] >= last[t]["step_idx"]:
            last[t] = r
    return last


def success_bonus(rows: list[dict]) -> float:
    """How much the last step's reward differs between a success and a failure in these rows
    (median last reward of successes − of failures; 1.0 when one outcome is missing)."""
    last = _last_rows(rows).values()
    ok = [float(r.get("reward", 0.0)) for r in last if r.get("success")]
    bad = [float(r.get("reward", 0.0)) for r in last if not r.get("success")]
    if not ok or not bad:
        return 1.0
    return float(np.median(ok) - np.median(bad))


#: How a rollout is added through an anchor (said on the Learn page; `added_rollout` does it).
ADD_RULE = (
    "The new rollout copies the first rollout that reaches the chosen anchor, step by step up "
    "to that anchor and the action it took there; that step is its last, and it ends in the "
    "outcome you choose (SUCCESS or FAILURE)."
)


def parse_add(text: str) -> tuple[str, int, bool]:
    """``"t1@2:S"`` → ``("t1", 2, True)`` (``F``: a failure); the inverse of `format_add`.

    Raises:
        ValueError: not of the form ``<rollout>@<step>:S|F``.
    """
    m = re.fullmatch(r"(.+)@(\d+):([SF])", str(text))
    if not m:
        raise ValueError(f"an added rollout is written <rollout>@<step>:S or :F, got {text!r}")
    return m.group(1), int(m.group(2)), m.group(3) == "S"


def format_add(spec) -> str:
    """``("t1", 2, True)`` → ``"t1@2:S"``."""
    src, step, ok = spec
    return f"{src}@{int(step)}:{'S' if ok else 'F'}"


def _outcome_reward(rows: list[dict], ok: bool) -> float:
    """The last reward of a rollout with outcome ``ok`` in these rows (their median; 1.0 for a
    success and 0.0 for a failure when none has that outcome)."""
    last = [float(r.get("reward", 0.0)) for r in _last_rows(rows).values() if bool(r.get("success")) == ok]
    return float(np.median(last)) if last else (1.0 if ok else 0.0)


def added_rollout(rows: list[dict], spec, new_id: str) -> list[dict]:
    """The rows of a rollout added through an anchor (`ADD_RULE`): ``spec`` = (source rollout,
    step index of its visit of the anchor, success). Rollout ``source``'s steps up to and
    including that step are copied under ``new_id`` (their rewards kept); the last one ends the
    rollout (``done``) with the reward of that outcome (`_outcome_reward`); every row carries the outcome.

    Raises:
        ValueError: no such rollout, or it has no step of that index.
    """
    src, step, ok = str(spec[0]), int(spec[1]), bool(spec[2])
    steps = sorted((r for r in rows if str(r["traj_id"]) == src), key=lambda r: r["step_idx"])
    if not any(int(r["step_idx"]) == step for r in steps):
        raise ValueError(f"add a rollout: rollout {src!r} has no step {step}; the rows hold {traj_ids(rows)}")
    out = []
    for r in steps:
        if int(r["step_idx"]) > step:
            break
        r = copy.deepcopy(r)
        last = int(r["step_idx"]) == step
        r.update(traj_id=new_id, success=ok, done=last)
        if last:
            r["reward"] = _outcome_reward(rows, ok)
        out.append(r)
    total = sum(float(r.get("reward", 0.0)) for r in out)
    for r in out:
        if r.get("episode_return") is not None:
            r["episode_return"] = total
    return out


def apply_edits(rows: list[dict], *, flip=(), drop=(), add=()) -> list[dict]:
    """A new list of rows with the outcome of the rollouts in ``flip`` reversed, those in
    ``drop`` removed and the rollouts of ``add`` appended; ``rows`` is not modified.

    ``add`` holds (source rollout, step, success) triples (`added_rollout`, copied from the
    unedited ``rows``); they are named ``new1``, ``new2``, … in that order.

    Flipping sets ``success`` on every row of the rollout, moves its last reward (and
    ``episode_return`` where logged) by ± `success_bonus`, and marks a new success ``done``.

    Raises:
        ValueError: an id that is not a rollout of ``rows``, or every rollout dropped.
    """
    ids = traj_ids(rows)
    flip, drop = {str(t) for t in flip}, {str(t) for t in drop}
    unknown = sorted((flip | drop) - set(ids))
    if unknown:
        raise ValueError(f"apply_edits: unknown rollout(s) {unknown}; the rows hold {ids}")
    if ids and set(ids) <= drop:
        raise ValueError("apply_edits: dropping every rollout leaves no group")
    bonus = success_bonus(rows)
    out = []
    for r in rows:
        t = str(r["traj_id"])
        if t in drop:
            continue
        r = copy.deepcopy(r)
        if t in flip:
            now = not bool(r.get("success"))
            sign = 1.0 if now else -1.0
            r["success"] = now
            if "episode_return" in r and r["episode_return"] is not None:
                r["episode_return"] = float(r["episode_return"]) + sign * bonus
        out.append(r)
    # The last step carries the outcome's reward; a new success terminates there.
    orig_last = _last_rows(rows)
    new_last = _last_rows(out)
    for t in flip - drop:
        r, o = new_last[t], orig_last[t]
        now = bool(r["success"])
        r["reward"] = float(o.get("reward", 0.0)) + (bonus if now else -bonus)
        if now:
            r["done"] = True
    for i, spec in enumerate(add, 1):
        out.extend(added_rollout(rows, spec, _new_id(ids, i)))
    return out


def _new_id(ids: list[str], i: int) -> str:
    """``new<i>``, primed until it is no rollout's id already."""
    name = f"new{i}"
    while name in ids:
        name += "′"
    return name


def batch_from_rows(rows: list[dict], **load_kwargs):
    """Load rows through the ordinary loader, from a temporary JSONL deleted on return."""
    with tempfile.TemporaryDirectory(prefix="crbc-teach-") as d:
        path = write_rows(Path(d) / "rows.jsonl", rows)
        return load_rollouts(path, **load_kwargs)
