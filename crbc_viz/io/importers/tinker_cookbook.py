"""tinker-cookbook RL rollout summaries: ``<log_path>/iteration_<NNNNNN>/<base>_rollout_summaries.jsonl``
(``<base>`` ``train`` or ``eval_<name>``; before March 2026
``<log_path>/<base>_iteration_<NNNNNN>_rollout_summaries.jsonl``), beside ``metrics.jsonl``.

Written by ``serialize_rollout_summaries`` (``tinker_cookbook/rl/rollout_logging.py``) and
``TrainingRunStore.write_rollouts`` (thinking-machines-lab/tinker-cookbook 9dfcc3a2;
tests/fixtures/generators/tinker_cookbook_gen.py): one line per trajectory, ``schema_version``
1: ``split``, ``iteration``, ``group_idx``, ``traj_idx``, ``tags``, ``sampling_client_step``,
``total_reward`` (the step rewards plus the group-level ``final_reward``),
``trajectory_metrics``, ``final_ob_len`` and ``steps``: per transition ``step_idx``,
``ob_len`` / ``ac_len`` (token counts), ``reward``, ``episode_done``, ``metrics``, ``logs``.

Canonical mapping: group = ``group_idx`` (prefixed by the split), trajectory = ``traj_idx``, one
step per transition, its ``reward`` (the last one plus ``final_reward``), ``episode_return`` =
``total_reward``, ``train_step`` = ``iteration``. The rollout loop marks the last transition
``episode_done`` however the episode ended and writes ``stop/<reason>`` in its metrics; a
reason among the cookbook's limit stops (``DEFAULT_LIMIT_STOP_REASONS``: ``max_tokens``,
``max_sampled_tokens``, ``max_turns``, ``max_tool_calls``, ``rollout_timeout``) is a truncation
(``done`` false on the last step), any other end a termination. Success: the last transition's
``metrics["correct"]`` (the key the cookbook's own evaluation reads,
``recipes/search_tool/offline_eval.py``), or the key ``success_column``
(``--success-column``) names, read as a flag; where it is absent, reward > the success
threshold. What the file cannot carry: the observations and actions (token counts only: no
anchors, each step is its own state, nothing merges; the transcripts are in
``<base>_logtree.json``, not read), the rollouts a tolerant strategy dropped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from ..flags import not_a_flag, not_a_number, read_flags, read_numbers
from ..readers import RawTable, max_line_bytes
from ._common import Imported, arrow_table, run_from_dir
from ._records import jsonl_records

NAME = "tinker-cookbook"
#: What the app calls this format.
TITLE = "tinker-cookbook rollout summaries"
SIGNATURE = ("schema_version", "group_idx", "traj_idx", "total_reward", "steps")
FOLDER = False
OPTIONS = ("success_column",)
#: ``DEFAULT_LIMIT_STOP_REASONS`` (``tinker_cookbook/rl/rollout_limits.py``): a budget cut it off.
LIMIT_STOPS = frozenset(
    {"max_tokens", "max_sampled_tokens", "max_turns", "max_tool_calls", "rollout_timeout"}
)
SUCCESS_METRIC = "correct"


def sniff(fields: set[str]) -> bool:
    return set(SIGNATURE) <= fields


class _Out:
    def __init__(self, path: str):
        self.path = path
        self.cols: dict[str, list] = {
            k: []
            for k in (
                "group_id",
                "traj_id",
                "step_idx",
                "reward",
                "done",
                "episode_return",
                "success",
                "train_step",
                "split",
                "ob_len",
                "ac_len",
                "logs",
            )
        }
        self.lines: list[int] = []
        self.problems: list[Problem] = []
        self.counts = {"truncated": 0, "no_success": 0, "with_success": 0}

    def bad(self, line: int, field: str, why: str) -> None:
        self.problems.append(Problem(self.path, line, field, why))


def _whole(out: _Out, line: int, field: str, v) -> int | None:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        out.bad(line, field, f"expected a whole number >= 0, got {v!r:.40}")
        return None
    return v


def _steps(out: _Out, line: int, steps) -> list[dict] | None:
    if not isinstance(steps, list) or not steps:
        out.bad(line, "steps", "expected a non-empty list of transitions")
        return None
    for k, s in enumerate(steps):
        if not isinstance(s, dict):
            out.bad(line, f"steps[{k}]", "expected an object")
            return None
        if s.get("step_idx") != k or isinstance(s.get("step_idx"), bool):
            out.bad(
                line,
                f"steps[{k}].step_idx",
                f"expected {k} (the transition's place), got {s.get('step_idx')!r:.40}",
            )
            return None
        for f in ("metrics", "logs"):
            if s.get(f) is not None and not isinstance(s.get(f), dict):
                out.bad(line, f"steps[{k}].{f}", f"expected an object, got {type(s.get(f)).__name__}")
                return None
    return steps


def _flag(out: _Out, line: int, field: str, v) -> bool | None:
    flags, bad = read_flags([v])
    if len(bad):
        out.bad(line, field, not_a_flag(v))
        return None
    return bool(flags[0])


def _end(out: _Out, line: int, last: dict, k: int, key: str) -> tuple[bool | None, bool | None]:
    """(done of the last transition, success) from its ``episode_done`` and metrics."""
    metrics = last.get("metrics") or {}
    done = _flag(out, line, f"steps[{k}].episode_done", last.get("episode_done"))
    stops = [m[5:] for m, v in metrics.items() if isinstance(m, str) and m.startswith("stop/") and v]
    if done and any(s in LIMIT_STOPS for s in stops):
        done = False
    if done is False:
        out.counts["truncated"] += 1
    success = None
    if key in metrics:
        success = _flag(out, line, f"steps[{k}].metrics.{key}", metrics[key])
        out.counts["with_success"] += 1
    else:
        out.counts["no_success"] += 1
    return done, success


def _record(out: _Out, rec: dict, line: int, key: str) -> None:
    group, traj = (
        _whole(out, line, "group_idx", rec.get("group_idx")),
        _whole(out, line, "traj_idx", rec.get("traj_idx")),
    )
    it = _whole(out, line, "iteration", rec.get("iteration"))
    split = rec.get("split")
    if not isinstance(split, str):
        out.bad(line, "split", f"expected text, got {split!r:.40}")
    steps = _steps(out, line, rec.get("steps"))
    if None in (group, traj, it, steps) or not isinstance(split, str):
        return
    values = [s.get("reward") for s in steps] + [rec.get("final_reward", 0.0), rec.get("total_reward")]
    names = [f"steps[{k}].reward" for k in range(len(steps))] + ["final_reward", "total_reward"]
    nums, bad = read_numbers(values)
    for i in bad.tolist():
        out.bad(line, names[i], not_a_number(values[i]))
    if len(bad) or np.isnan(nums).any():
        if not len(bad):
            out.bad(line, names[int(np.flatnonzero(np.isnan(nums))[0])], "missing")
        return
    n = len(steps)
    done, success = _end(out, line, steps[-1], n - 1, key)
    mid = [
        _flag(out, line, f"steps[{k}].episode_done", s.get("episode_done")) for k, s in enumerate(steps[:-1])
    ]
    g = f"{split}/g{group}"
    c = out.cols
    c["group_id"] += [g] * n
    c["traj_id"] += [f"{g}/t{traj}"] * n
    c["step_idx"] += list(range(n))
    c["reward"] += [float(x) for x in nums[: n - 1]] + [float(nums[n - 1] + nums[n])]
    c["done"] += mid + [done]
    c["episode_return"] += [float(nums[n + 1])] * n
    c["success"] += [success] * n
    c["train_step"] += [it] * n
    c["split"] += [split] * n
    c["ob_len"] += [s.get("ob_len") if _count(s.get("ob_len")) else None for s in steps]
    c["ac_len"] += [s.get("ac_len") if _count(s.get("ac_len")) else None for s in steps]
    c["logs"] += [json.dumps(s.get("logs") or {}, ensure_ascii=False, default=str) for s in steps]
    out.lines += [line] * n


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53


def _run_id(path: str) -> str:
    """The log folder: the parent of ``iteration_<N>/``, or the file's folder."""
    parent = Path(path).resolve().parent
    if re.fullmatch(r"iteration_\d+", parent.name):
        parent = parent.parent
    return run_from_dir(str(parent / "x"))


def read(path: str, *, success_column=None) -> Imported:
    recs, lines = jsonl_records(path, max_line_bytes())
    out = _Out(path)
    key = success_column or SUCCESS_METRIC
    for rec, line in zip(recs, lines):
        missing = [f for f in SIGNATURE if f not in rec]
        if missing:
            out.bad(
                line, missing[0], f"missing; a tinker-cookbook rollout summary has {', '.join(SIGNATURE)}"
            )
            continue
        _record(out, rec, line, key)
    if out.problems:
        raise LoadError(out.problems[:MAX_LISTED], total=len(out.problems))
    df = dict(out.cols)
    line = np.asarray(out.lines, dtype=np.int64)
    if not len(line) or not df:
        return Imported(RawTable(path, arrow_table(df, len(line)), line, "line", False), NAME)
    if success_column and not out.counts["with_success"]:
        raise LoadError(
            [
                Problem(
                    path,
                    None,
                    f"metrics.{success_column}",
                    "--success-column names a metric no last transition has",
                )
            ]
        )
    notes = []
    if out.counts["with_success"] == 0:
        del df["success"]
        notes.append(f"no last transition has metrics.{key}: success = reward > the success threshold")
    elif out.counts["no_success"]:
        notes.append(
            f"{out.counts['no_success']} trajectory(ies) without metrics.{key} on their last transition: "
            "success = reward > the success threshold for them"
        )
    df["run_id"] = _run_id(path)
    df["src_line"] = line
    n = len(recs)
    notes.append(
        f"tinker-cookbook rollout summaries: {len(line)} transitions of {n} trajectories, success = last "
        f"transition's metrics.{key}, {out.counts['truncated']} truncated (a stop/<limit> metric), no "
        "anchors (the summaries hold token counts, not text: nothing merges; the transcripts are in "
        "<base>_logtree.json)"
    )
    return Imported(
        RawTable(path, arrow_table(df, len(line)), line, "line", False),
        NAME,
        {"line": "src_line"},
        tuple(notes),
    )
