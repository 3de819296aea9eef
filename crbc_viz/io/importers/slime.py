"""slime debug rollout dumps: the ``.pt`` file ``--save-debug-rollout-data <template>`` writes.

Written by ``save_debug_rollout_data`` (``slime/observability/rollout_data_utils.py``,
THUDM/slime 624b824a; tests/fixtures/slime): ``torch.save({"rollout_id": id, "samples":
[sample.to_dict() for sample in data]}, path)``, ``data`` the rollout's samples flattened
(prompt-major: a group's samples in a row), each ``Sample.to_dict()`` (``slime/utils/types.py``)
the sample's fields as plain values: ``group_index``, ``index``, ``rollout_id`` (set only where
one rollout was split into several samples, the "compact" rollouts; None otherwise),
``prompt`` (text, or chat messages), ``response`` (the whole response text: in a multi-turn
sample the model's turns and the tool outputs in one text, told apart only by the token-level
``loss_mask``), ``reward`` (a number, or a dict of which ``--reward-key`` picks one),
``status`` (``completed``, ``truncated``: the length limit cut it, ``aborted``, ``failed``,
``pending``), ``remove_sample``, ``metadata`` ... An evaluation's file has ``eval_<id>`` where
the path template has ``{rollout_id}`` (read as split ``val``), its ``rollout_id`` the number;
its samples carry no ``group_index`` and are grouped by identical prompt.

Read with ``torch.load(weights_only=True)`` (`_torch_file`): plain values and tensors only; a
file that needs any other class is refused by name, never unpickled.

Canonical mapping: group = ``group_index``; trajectory = ``rollout_id`` where set, else
``index`` (slime's own fallback): the samples of one compact rollout are its steps, in the
file's order; a sample's step is one turn. The file carries no turn boundary inside a
multi-turn sample (only token masks, no text per turn): such a sample is one step. Anchor: the
prompt (text), or, for chat messages, the last message's content (history-free, SCHEMA.md); no
parsed action (the response is raw model output), so each step is keyed by its transition.
``reward`` -> the trajectory's last step's reward and ``episode_return`` (a compact rollout's
samples each carry the rollout's reward: it is counted once); success = reward > the success
threshold (the file carries no success flag). ``status``: ``completed`` and ``failed`` ended the
episode (``done``), ``truncated``, ``aborted`` and ``pending`` did not (truncated).
``train_step`` = ``rollout_id``. A dict reward is refused by name: the key slime read is a
command-line option, not in the file.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from .. import _guards
from ..flags import not_a_number, read_numbers
from ..readers import RawTable
from . import _torch_file
from ._common import Imported, arrow_table, cumcount, held, run_from_dir, text_id, to_text

NAME = "slime"
#: What the app calls this format.
TITLE = "slime debug rollout dump (.pt)"
SIGNATURE = ("rollout_id", "samples", "group_index")
FOLDER = False
OPTIONS = ()
#: File endings of this format that the table readers do not list (the folder walk reads them).
FILE_SUFFIXES = _torch_file.TORCH_SUFFIXES

_DONE = {"completed": True, "failed": True, "truncated": False, "aborted": False, "pending": False}
_WHERE = "sample"


def sniff(fields: set[str]) -> bool:
    return False  # a torch file has no fields a text reader sees: `sniff_file` decides


def sniff_file(path: str, fields: set[str]) -> bool:
    return _torch_file.has_keys(path, SIGNATURE + ("response", "status"))


def _plain(v):
    """A tensor or numpy scalar as a Python value; anything else as it is."""
    if hasattr(v, "tolist") and not isinstance(v, (list, tuple, dict, str)):
        return v.tolist()
    return v


def _anchor(prompt):
    """The prompt text, or the last chat message's content."""
    prompt = _plain(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        return to_text(prompt[-1].get("content"))
    return to_text(prompt)


def _key(v, i: int, name: str, path: str, problems: list):
    """An id field (int or text) as text, or None with a problem."""
    v = _plain(v)
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        problems.append(Problem(path, i, name, f"expected an integer id, got {type(v).__name__}", _WHERE))
        return None
    return str(v)


def _reward(v, i: int, path: str, problems: list) -> float:
    v = _plain(v)
    if isinstance(v, dict):
        keys = ", ".join(sorted(map(str, v))[:8])
        why = f"a dict of rewards ({keys}): slime picks one by --reward-key, which the file does not name"
        problems.append(Problem(path, i, "reward", why, _WHERE))
        return float("nan")
    nums, bad = read_numbers(np.asarray([v], dtype=object))
    if len(bad) or np.isnan(nums[0]):
        problems.append(Problem(path, i, "reward", "missing" if v is None else not_a_number(v), _WHERE))
    return float(nums[0])


def _samples(path: str):
    data = _torch_file.load(path, "slime debug rollout dump")
    if not isinstance(data, dict) or not isinstance(data.get("samples"), list):
        why = "expected a dict with a list of samples (slime's save_debug_rollout_data writes one)"
        raise LoadError([Problem(path, None, "samples", why)])
    step = _plain(data.get("rollout_id"))
    if isinstance(step, bool) or not isinstance(step, int):
        raise LoadError(
            [Problem(path, None, "rollout_id", f"expected an integer, got {type(step).__name__}")]
        )
    samples = data["samples"]
    cap = _guards.count_setting(_guards.ENV_MAX_ROWS, _guards.MAX_ROWS)
    if len(samples) > cap:
        raise _guards.limit_error(path, f"more than {cap} samples", _guards.ENV_MAX_ROWS)
    return step, samples


def _rows(path: str, samples: list) -> tuple[dict, list[str]]:
    cols: dict[str, list] = {
        k: [] for k in ("group_id", "traj_id", "anchor_obs", "observation", "response", "status", "reward_in")
    }
    cols["src_sample"] = []
    problems: list[Problem] = []
    removed = by_prompt = 0
    for i, s in enumerate(samples):
        if not isinstance(s, dict):
            problems.append(Problem(path, i, None, f"expected a sample dict, got {type(s).__name__}", _WHERE))
            continue
        if s.get("group_index") is None:  # evaluation samples: grouped by their prompt
            group = text_id(to_text(_plain(s.get("prompt"))) or "")
            by_prompt += 1
        else:
            group = _key(s.get("group_index"), i, "group_index", path, problems)
        rid = s.get("rollout_id")
        traj = _key(
            s.get("index") if rid is None else rid,
            i,
            "index" if rid is None else "rollout_id",
            path,
            problems,
        )
        status = _plain(s.get("status"))
        if not isinstance(status, str) or status not in _DONE:
            got = repr(status[:40]) if isinstance(status, str) else type(status).__name__
            problems.append(
                Problem(path, i, "status", f"expected one of {', '.join(_DONE)}, got {got}", _WHERE)
            )
        reward = _reward(s.get("reward"), i, path, problems)
        removed += bool(_plain(s.get("remove_sample")))
        anchor = _anchor(s.get("prompt"))
        cols["group_id"].append(group)
        cols["traj_id"].append(f"{group}/{traj}")
        cols["anchor_obs"].append(anchor)
        cols["observation"].append(to_text(_plain(s.get("prompt"))))
        cols["response"].append(to_text(_plain(s.get("response"))))
        cols["status"].append(status)
        cols["reward_in"].append(reward)
        cols["src_sample"].append(i)
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    notes = [f"{removed} sample(s) slime marked remove_sample (kept)"] if removed else []
    if by_prompt:
        notes.append(f"{by_prompt} sample(s) without group_index (evaluation): grouped by identical prompt")
    return cols, notes


def _steps(cols: dict) -> dict:
    """One step per sample; a trajectory's samples in file order, its reward on its last step."""
    df = dict(cols)
    traj = list(df["traj_id"])
    df["step_idx"] = step = cumcount(traj)
    count: dict = {}
    for k in traj:
        count[k] = count.get(k, 0) + 1
    last = step == np.array([count[k] - 1 for k in traj], dtype=np.int64)
    reward_in = held(df["reward_in"]).astype(np.float64)
    final = {k: r for k, r, end in zip(traj, reward_in.tolist(), last.tolist()) if end}
    df["reward"] = np.where(last, reward_in, 0.0)
    df["episode_return"] = np.array([final[k] for k in traj], dtype=np.float64)
    done = np.array([bool(_DONE.get(v, np.nan)) for v in df["status"]], dtype=bool)
    df["done"] = np.where(last, done, False)
    del df["reward_in"]
    return df


def read(path: str) -> Imported:
    step, samples = _samples(path)
    cols, notes = _rows(path, samples)
    notes += _torch_file.fix_text(cols)
    df = _steps(cols)
    df["train_step"] = step
    df["run_id"] = run_from_dir(str(Path(path).parent))
    if re.search(r"eval_\d", Path(path).name):  # the writer puts eval_<id> in the template
        df["split"] = "val"
    rows = len(df["traj_id"])
    n = len(set(df["traj_id"]))
    multi = n < rows
    notes.append(
        f"slime debug rollout dump: {rows} samples of {n} rollouts"
        + (" (compact rollouts: a rollout's samples are its steps, in file order)" if multi else "")
        + "; a multi-turn sample is one step (the file has no text per turn); "
        "success = reward > threshold (no success flag in the file)"
    )
    line = held(df["src_sample"]).astype(np.int64)
    return Imported(
        RawTable(path, arrow_table(df, rows), line, _WHERE, False),
        NAME,
        {"index": "src_sample", "status": "status"},
        tuple(notes),
    )
