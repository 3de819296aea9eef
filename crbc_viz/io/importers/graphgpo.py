"""GraphGPO's saved rollout batch: a verl-agent ``DataProto`` saved with
``torch.save(dataproto.__dict__, path)`` (``.pth``), the file the GraphGPO authors'
``recipe/GraphGPO/compare_advantages.py`` reads (``DataProto(**torch.load(path))``; the recipe
as carried by zzj1111/alfworldauto 37aec781, a verl-agent fork; tests/fixtures/graphgpo). The
same layout holds any verl-agent recipe's batch (G2PO's, GiGPO's) saved that way.

The dict holds ``batch`` (a ``TensorDict`` of token tensors), ``non_tensor_batch`` (numpy object
arrays, one row per environment step) and ``meta_info``. The rows are what
``TrajectoryCollector.gather_rollout_data`` (``recipe/GraphGPO/rollout_loop.py``) keeps: each
environment's *active* steps (a finished environment's later steps are dropped), in step order,
one environment after another: ``uid`` (the group), ``traj_uid``, ``anchor_obs`` (the state the
step acted from, ``to_hashable``: text or a tuple), ``text_actions`` (the decoded model
response, not a parsed action), ``next_obs`` (the next state's anchor; ``'success'`` on the last
step of an episode whose rewards sum to more than 0), ``rewards`` (the step's environment
reward), ``episode_rewards`` (the episode's sum, on each of its rows), ``episode_lengths``
(its active steps), ``is_action_valid``, ``active_masks``.

Read with ``torch.load(weights_only=True)`` (`_torch_file`), allowing numpy's array rebuild and
inert stand-ins for the ``TensorDict`` (its tensors are not read); any other class is refused
by name, never unpickled.

Canonical mapping: group = ``uid``, trajectory = ``traj_uid``, steps in row order (checked: each
step's ``next_obs`` is the next step's ``anchor_obs``; a batch reordered before it was saved,
``_balance_batch``, is refused naming the trajectory; a batch without ``next_obs``, stock
verl-agent's or G2PO's (Nala-YN/G2PO b8ffaf5 writes neither ``next_obs`` nor ``text_actions``
and saves no batch itself), is read in row order with a note saying it is unchecked);
``text_actions`` -> ``response`` (no parsed action: each step is keyed by its transition); ``rewards`` -> ``reward`` (else
``episode_rewards`` on the last step); ``episode_rewards`` -> ``episode_return``; success =
``episode_rewards > 0`` (GraphGPO's own rule: ``find_success_states_per_task``, the
``'success'`` marker). Rows beyond a trajectory's ``episode_lengths`` that repeat one of its rows
exactly are ``adjust_batch(mode="copy")`` padding copies: dropped and counted. The step limit and
``dones`` are not in the batch: ``done`` is left unknown. ``train_step``: ``meta_info``'s
``global_steps`` where written, else the number in the file name, else 0 (noted).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import MAX_LISTED, LoadError, Problem
from .. import _guards
from ..flags import not_a_flag, read_flags, read_numbers
from ..readers import RawTable
from . import _torch_file
from ._common import (
    Imported,
    arrow_table,
    cumcount,
    held,
    objects,
    present,
    run_from_dir,
    step_from_path,
    take,
    to_text,
)

NAME = "graphgpo"
#: What the app calls this format.
TITLE = "GraphGPO / verl-agent saved batch (.pth)"
SIGNATURE = ("non_tensor_batch", "uid", "traj_uid", "anchor_obs", "episode_rewards")
FOLDER = False
OPTIONS = ()
#: File endings of this format that the table readers do not list (the folder walk reads them).
FILE_SUFFIXES = _torch_file.TORCH_SUFFIXES
_NEEDED = ("uid", "traj_uid", "anchor_obs", "episode_rewards")
_WHERE = "row"


def sniff(fields: set[str]) -> bool:
    return False  # a torch file has no fields a text reader sees: `sniff_file` decides


def sniff_file(path: str, fields: set[str]) -> bool:
    return _torch_file.has_keys(path, SIGNATURE + ("batch", "meta_info"))


def _columns(path: str) -> tuple[dict, dict, int]:
    data = _torch_file.load(path, "GraphGPO saved batch", numpy=True, tensordict=True)
    if not isinstance(data, dict) or not isinstance(data.get("non_tensor_batch"), dict):
        why = "expected a DataProto's __dict__ (batch, non_tensor_batch, meta_info)"
        raise LoadError([Problem(path, None, "non_tensor_batch", why)])
    ntb = data["non_tensor_batch"]
    missing = [k for k in _NEEDED if k not in ntb]
    if missing:
        raise LoadError(
            [
                Problem(
                    path,
                    None,
                    k,
                    f"missing from non_tensor_batch (a GraphGPO batch has {', '.join(_NEEDED)})",
                )
                for k in missing
            ]
        )
    cols: dict[str, list] = {}
    n = None
    for k, v in ntb.items():
        v = v.tolist() if hasattr(v, "tolist") else v
        if not isinstance(v, list) or (n is not None and len(v) != n):
            why = f"expected one value per row ({n} rows)" if n is not None else "expected an array"
            raise LoadError([Problem(path, None, str(k), why)])
        n = len(v)
        cols[str(k)] = v
    cap = _guards.count_setting(_guards.ENV_MAX_ROWS, _guards.MAX_ROWS)
    if (n or 0) > cap:
        raise _guards.limit_error(path, f"more than {cap} rows", _guards.ENV_MAX_ROWS)
    meta = data.get("meta_info") if isinstance(data.get("meta_info"), dict) else {}
    return cols, meta, n or 0


def _ids(values: list, name: str, path: str, problems: list) -> list[str]:
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            problems.append(Problem(path, i, name, f"expected an id (text), got {type(v).__name__}", _WHERE))
        out.append(str(v))
    return out


def _numbers(values: list, name: str, path: str, problems: list) -> np.ndarray:
    nums, bad = read_numbers(np.asarray(values + [None], dtype=object)[:-1])
    for i in bad.tolist():
        problems.append(Problem(path, i, name, f"expected a number, got {type(values[i]).__name__}", _WHERE))
    for i in np.flatnonzero(np.isnan(nums)).tolist():
        if i not in set(bad.tolist()):
            problems.append(Problem(path, i, name, "missing", _WHERE))
    return nums


def _frame(path: str, cols: dict, n: int) -> tuple[dict, list[str], int]:
    problems: list[Problem] = []
    text = {
        "group_id": _ids(cols["uid"], "uid", path, problems),
        "traj_id": _ids(cols["traj_uid"], "traj_uid", path, problems),
        "anchor_obs": [to_text(list(a) if isinstance(a, tuple) else a) for a in cols["anchor_obs"]],
    }
    for name, key in (("next_obs", "next_obs"), ("response", "text_actions")):
        if key in cols:
            text[name] = [to_text(list(a) if isinstance(a, tuple) else a) for a in cols[key]]
    notes = _torch_file.fix_text(text)
    df = {
        **text,
        "episode_return": _numbers(cols["episode_rewards"], "episode_rewards", path, problems),
        "src_row": np.arange(n, dtype=np.int64),
    }
    if "rewards" in cols:
        df["step_reward"] = _numbers(cols["rewards"], "rewards", path, problems)
    if "episode_lengths" in cols:
        df["episode_lengths"] = _numbers(cols["episode_lengths"], "episode_lengths", path, problems)
    if "is_action_valid" in cols:
        vals = np.asarray(cols["is_action_valid"] + [None], dtype=object)[:-1]
        flags, bad = read_flags(vals)
        for i in bad.tolist():
            problems.append(Problem(path, i, "is_action_valid", not_a_flag(vals[i]), _WHERE))
        df["is_action_valid"] = flags
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    df, dropped = _drop_copies(path, df)
    return df, notes, dropped


def _groups(keys) -> dict:
    """Each distinct key's row positions, keys in order of first appearance."""
    out: dict = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}


def _drop_copies(path: str, df: dict) -> tuple[dict, int]:
    """A trajectory's rows past its ``episode_lengths``: ``adjust_batch(mode="copy")`` appends
    copies of rows at the batch's end, so they are its last rows, each repeating one of its
    earlier rows field for field: dropped and counted; anything else is an error."""
    if "episode_lengths" not in df:
        return df, 0
    fields = [c for c in df if c != "src_row"]
    keys = list(zip(*([repr(v) for v in objects(df[c])] for c in fields)))
    n = len(df["src_row"])
    drop = np.zeros(n, dtype=bool)
    problems = []
    lengths = held(df["episode_lengths"])
    for traj, idx in _groups(objects(df["traj_id"])).items():
        want = lengths[idx[0]]
        extra = len(idx) - int(want) if np.isfinite(want) and want >= 0 else 0
        if extra <= 0:
            continue
        real = {keys[i] for i in idx[:-extra]}
        odd = [i for i in idx[-extra:] if keys[i] not in real]
        if odd:
            why = (
                f"traj_uid {traj} has {len(idx)} rows but episode_lengths {int(want)}, and its last "
                f"{extra} row(s) do not all repeat an earlier row: not adjust_batch padding copies"
            )
            problems.append(Problem(path, int(odd[0]), "episode_lengths", why, _WHERE))
        drop[idx[-extra:]] = True
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    keep = np.flatnonzero(~drop)
    return {c: take(v, keep) for c, v in df.items()}, int(drop.sum())


def _order(path: str, df: dict) -> dict:
    """Steps in row order, checked: each step's ``next_obs`` is the next step's ``anchor_obs``."""
    traj = objects(df["traj_id"])
    df["step_idx"] = cumcount(traj)
    if "next_obs" not in df:
        return _outcome(df)
    anchor, nxt_obs = objects(df["anchor_obs"]), objects(df["next_obs"])
    nxt = np.full(len(traj), np.nan, dtype=object)
    for idx in _groups(traj).values():
        nxt[idx[:-1]] = anchor[idx[1:]]
    broken = present(nxt) & (nxt != nxt_obs)  # a missing next_obs differs too
    if broken.any():
        i = int(np.flatnonzero(broken)[0])
        why = (
            f"traj_uid {traj[i]}: this row's next_obs is not the anchor_obs of the "
            "trajectory's next row: the rows are not in step order (a batch reordered by "
            "_balance_batch before it was saved cannot be read; save it before)"
        )
        raise LoadError([Problem(path, int(held(df["src_row"])[i]), "next_obs", why, _WHERE)])
    return _outcome(df)


def _outcome(df: dict) -> dict:
    step = df["step_idx"]
    most: dict = {}
    for k, s in zip(objects(df["traj_id"]).tolist(), step.tolist()):
        most[k] = max(most.get(k, s), s)
    last = np.array([most[k] for k in objects(df["traj_id"]).tolist()], dtype=np.int64) == step
    if "step_reward" in df:
        df["reward"] = df.pop("step_reward")
    else:
        df["reward"] = np.where(last, held(df["episode_return"]), 0.0)
    df["success"] = held(df["episode_return"]) > 0
    return df


def read(path: str) -> Imported:
    cols, meta, n = _columns(path)
    df, notes, dropped = _frame(path, cols, n)
    df = _order(path, df)
    if "next_obs" not in df:
        notes.append("no next_obs (a stock verl-agent / G2PO batch): rows taken in step order unchecked")
    step = meta.get("global_steps")
    if isinstance(step, bool) or not isinstance(step, int):
        step = step_from_path(path)
        if step is None:
            step = 0
            notes.append(f"train_step 0: neither meta_info global_steps nor a number in {Path(path).name!r}")
    df["train_step"] = step
    df["run_id"] = run_from_dir(str(Path(path).parent))
    if dropped:
        notes.append(
            f"dropped {dropped} adjust_batch padding copies (rows past their trajectory's episode_lengths)"
        )
    notes.append(
        f"GraphGPO saved batch: {len(df['src_row'])} steps of {len(set(objects(df['traj_id'])))} trajectories; "
        "success = episode_rewards > 0 (GraphGPO's rule); the step limit is not in the batch (done unknown)"
    )
    line = held(df["src_row"]).astype(np.int64)
    return Imported(
        RawTable(path, arrow_table(df, len(line)), line, _WHERE, False),
        NAME,
        {"uid": "group_id", "traj_uid": "traj_id", "text_actions": "response", "row": "src_row"},
        tuple(notes),
        counts={"copies_dropped": dropped} if "episode_lengths" in df else {},
    )
