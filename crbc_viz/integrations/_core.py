"""What every trainer adapter shares: trainer rows -> canonical steps -> credit -> rows.

A trainer hands over one row per environment step (verl-agent, ROLL, rLLM's step-wise path) or
one row per trajectory that the adapter first cuts into steps (verl, TRL). Rows may be
duplicated (verl-agent's ``adjust_batch``, ROLL's ``batch_adjust_mode="copy"``) and shuffled
(``_balance_batch``). Here:

1. rows become canonical steps (SCHEMA.md fields ``group_id``, ``traj_id``, ``step_idx``,
   ``reward``, ``anchor_key``, ``action``, ``success``): statistics are computed on the unique
   (trajectory, step) rows — exact copies are dropped, copies that differ raise, naming both
   rows; steps are ordered by the explicit step index (none, or gaps: refused);
2. the unique steps are assembled from the arrays the trainer already holds: ids, anchors and
   actions are factorised once (a hash table per column, ``pandas.factorize``: the only pandas
   on this path), each distinct anchor is hashed once (`crbc_viz.io.anchors.anchor_hash64`, as
   the loader hashes it), the rows are placed in batch order by counting
   (`crbc_viz.io.assemble.place_steps`) and the batch keeps its step columns as Arrow
   (`crbc_viz.io.assemble.assemble_arrow`: no frame unless someone reads ``batch.steps``).
   The checks are the loader's (`crbc_viz.io.assemble.build_batch`) on the same rows (step
   indices contiguous from 0, rewards finite and at most `MAX_ABS_REWARD`), so the credit is
   what ``crbc-viz score`` gives those rows written to a file;
3. the estimator runs on the CPU through `crbc_viz.api.score` (the compiled numba engine where
   the estimator has one); on a device (`_on_device`: a CUDA device), ``crbc`` at exact depth
   runs fused there (`crbc_viz.backends.torch.fused`) and any other estimator through its
   batched torch twin there (the numpy reference where it has none);
4. each unique step's advantage goes back to every row that carried it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from .._extras import require
from ..data import RolloutBatch
from ..errors import BackendUnavailable, CrbcVizError
from ..io.actions import first_seen, transition_actions
from ..io.anchor_rules import AnchorRule, make_rule, using
from ..io.anchor_rules import active as active_rule
from ..io.anchor_rules import rule_hash64 as anchor_hash64  # the rule in force (exact by default)
from ..io.assemble import assemble_arrow, dictionary, place_steps
from ..io.fields import MAX_ABS_REWARD, MAX_STEP_IDX
from ..io.flags import not_a_flag, read_flags
from .cadence import _after_scoring

__all__ = [
    "Steps",
    "IntegrationInputError",
    "canonical_steps",
    "score_steps",
    "check_steps",
    "as_device",
    "ROW_REWARD",
    "transition_actions",
    "token_steps",
    "trajectory_credit",
    "rows_as_steps",
    "Turns",
    "masked",
    "masked_row_sum",
    "broadcast",
    "token_tensors",
    "any_per_trajectory",
    "row_flags",
    "row_numbers",
    "with_anchor_rule",
    "anchor_rule_scope",
    "as_anchor_rule",
]

#: How a row's reward is read: ``step`` — the row carries its own step's reward (a trajectory's
#: return is the sum over its steps); ``episode`` — every row carries its whole episode's return
#: (verl-agent's EpisodeRewardManager writes ``episode_rewards`` on every step's last token).
ROW_REWARD = ("step", "episode")
_MAX_LISTED = 5


class IntegrationInputError(CrbcVizError, ValueError):
    """A trainer batch that cannot be turned into canonical steps faithfully."""


@dataclass(frozen=True, eq=False)
class Steps:
    """Canonical steps of a trainer batch.

    Attributes:
        batch: the unique steps as a `RolloutBatch` (``batch.steps`` is one canonical row each).
        row_step: ``[B]`` the batch step (index into ``batch.steps``) each input row carries.
        duplicates: input rows dropped as exact copies of another row.
    """

    batch: RolloutBatch
    row_step: np.ndarray
    duplicates: int

    def canonical_rows(self) -> pd.DataFrame:
        """The unique steps as canonical rows (what ``crbc-viz score`` would read)."""
        cols = [
            c
            for c in (
                "group_id",
                "traj_id",
                "step_idx",
                "reward",
                "anchor_key",
                "action",
                "success",
                "episode_return",
            )
            if c in self.batch.steps
        ]
        out = self.batch.steps[cols].copy()
        for c in out.columns:  # text columns held as Arrow dictionaries arrive as categoricals
            if isinstance(out[c].dtype, (pd.CategoricalDtype, pd.StringDtype)):
                out[c] = out[c].astype(object)
        return out


def _to_numpy(x, name: str, n: int | None = None) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    if isinstance(x, (str, bytes, dict)) or x is None:
        raise IntegrationInputError(
            f"{name}: expected one value per row (a list, array or tensor), got {type(x).__name__}"
        )
    try:
        arr = np.asarray(x) if not isinstance(x, np.ndarray) else x
    except (ValueError, TypeError) as exc:  # ragged nested lists: one object per row
        if not hasattr(x, "__len__") or not hasattr(x, "__getitem__"):
            raise IntegrationInputError(f"{name}: not an array of one value per row ({exc})") from None
        arr = np.empty(len(x), dtype=object)
        for i in range(len(x)):
            arr[i] = x[i]
    if arr.ndim > 1 and n is not None and arr.shape[0] == n:  # one array-valued item per row
        items = np.empty(n, dtype=object)
        for i in range(n):
            items[i] = arr[i]
        arr = items
    if arr.ndim != 1:
        raise IntegrationInputError(
            f"{name}: expected a 1-D array of one value per row, got shape {arr.shape}"
        )
    if n is not None and arr.shape[0] != n:
        raise IntegrationInputError(f"{name}: expected {n} values (one per row), got {arr.shape[0]}")
    return arr


def _rows(bad, describe) -> str:
    """``row i <why>`` for the first few bad rows, and how many more there are."""
    shown = "; ".join(f"row {int(i)} {describe(int(i))}" for i in bad[:_MAX_LISTED])
    more = len(bad) - _MAX_LISTED
    return shown + (f"; and {more} more row(s)" if more > 0 else "")


def _items(values):
    """A list or tuple as an object array of its items (``np.asarray([True, "false"])`` would
    turn the bool into the text ``'True'``); anything else as it is."""
    if not isinstance(values, (list, tuple)):
        return values
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return arr


def row_flags(values, name: str, n: int, source: str) -> np.ndarray:
    """``[n]`` bool flags (`crbc_viz.io.flags`: a bool or 0/1); anything else raises naming the
    rows. No trainer adapter reads text flags: the trainers hand over bools or numbers."""
    arr = _to_numpy(_items(values), name, n)
    flags, bad = read_flags(arr)
    if len(bad):
        raise IntegrationInputError(
            f"{source}: {name}: {_rows(bad, lambda i: f'is not a flag ({not_a_flag(arr[i])})')}"
        )
    return flags


def row_numbers(values, name: str, n: int, source: str) -> np.ndarray:
    """``[n]`` float64 of finite numbers (bools, integers, floats); text, None, NaN and
    infinities raise naming the rows."""
    arr = _to_numpy(_items(values), name, n)
    if arr.dtype.kind == "O":
        kinds = (bool, int, float, np.bool_, np.integer, np.floating)
        bad = [i for i, v in enumerate(arr) if not isinstance(v, kinds)]
        if bad:
            raise IntegrationInputError(
                f"{source}: {name}: "
                f"{_rows(bad, lambda i: f'is not a number ({type(arr[i]).__name__} {_short(arr[i])})')}"
            )
    elif arr.dtype.kind not in "biuf":
        raise IntegrationInputError(f"{source}: {name}: expected numbers, got an array of {arr.dtype}")
    try:
        out = arr.astype(np.float64)
    except OverflowError:
        out = np.array([float("inf") if abs(v) > 1e308 else float(v) for v in arr], np.float64)
    bad = np.flatnonzero(~np.isfinite(out))
    if len(bad):
        raise IntegrationInputError(f"{source}: {name}: {_rows(bad, lambda i: f'is not finite ({out[i]})')}")
    return out


def _short(v, n: int = 40) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(codes [n] int64, uniques [K] object)`` in first-occurrence order (one hash-table pass;
    a missing value, None or NaN, gets code -1)."""
    codes, uniques = pd.factorize(values)
    return codes.astype(np.int64, copy=False), np.asarray(uniques, dtype=object)


def _text_codes(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(codes, names)`` when every value of the object array ``arr`` is a string, else None.
    Factorised first, and only the distinct values looked at: a non-string equal to a string
    (``1 == 1.0 == True``, merged by hashing) is then never merged silently, since any
    non-string among the distinct values sends the caller to its value-by-value path."""
    if arr.dtype.kind != "O":
        return None
    try:
        codes, uniques = _factorize(arr)
    except TypeError:  # unhashable values (lists, dicts, arrays)
        return None
    if (len(codes) and codes.min() < 0) or not all(isinstance(u, str) for u in uniques):
        return None
    return codes, uniques


def _id_codes(x, name: str, n: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(codes [n], names [K])`` of an id column: rows whose ids are equal as text share a
    code (first-occurrence order); ``names`` are the ids as text. NaN, None and bytes that are
    not UTF-8 raise naming the row."""
    arr = _to_numpy(x, name, n)
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(np.isnan(arr))
        if len(bad):  # "nan" would merge every such row into one id
            raise IntegrationInputError(f"{name}: row {int(bad[0])} is NaN (an id is required)")
    if arr.dtype.kind in "iu":  # integers are equal exactly when their digits are
        codes, uniques = _factorize(arr)
        return codes, np.array([str(v) for v in uniques.tolist()], dtype=object)
    text = _text_codes(arr)
    if text is not None:  # strings (uids): the usual case
        return text
    if arr.dtype.kind == "S":
        arr = arr.astype(object)
    if arr.dtype.kind == "O":
        bad = pd.isna(pd.Series(arr)).to_numpy()
        if bad.any():
            raise IntegrationInputError(f"{name}: row {int(np.flatnonzero(bad)[0])} has no value")
        if any(isinstance(v, bytes) for v in arr):
            arr = arr.copy()
            for i, v in enumerate(arr):
                if isinstance(v, bytes):
                    try:
                        arr[i] = v.decode("utf-8")
                    except UnicodeDecodeError:
                        raise IntegrationInputError(
                            f"{name}: row {i} is bytes that are not UTF-8 text ({_short(v)})"
                        ) from None
    return _factorize(arr.astype(str).astype(object))


def _group_codes(group: np.ndarray, traj_code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_id_codes` of the rows' group ids, read through their trajectories where it can: when
    every row carries the same group id (compared, not hashed: the id objects a trainer repeats
    on a trajectory's rows compare by identity) as its trajectory's first row, and those are
    strings, only the trajectories' ids are factorised. Otherwise every row's id is."""
    n = len(group)
    if group.dtype == object and n:
        first = np.full(int(traj_code.max()) + 1, n, np.int64)
        np.minimum.at(first, traj_code, np.arange(n, dtype=np.int64))
        per_traj = group[first]
        text = _text_codes(per_traj)
        try:
            same = text is not None and bool(np.all(group == per_traj[traj_code]))
        except (TypeError, ValueError):  # ids that do not compare as one value each (arrays)
            same = False
        if same:
            codes, names = text
            return codes[traj_code], names
    return _id_codes(group, "index", n)


def _pair_codes(group_code: np.ndarray, traj_code: np.ndarray) -> np.ndarray:
    """Trajectory codes ``[n]`` of the (group, trajectory id) pairs, first-occurrence order: the
    trajectory id codes themselves when no id is used in two groups (the usual case), else the
    pairs factorised."""
    if not len(traj_code):
        return traj_code
    T = int(traj_code.max()) + 1
    traj_group = np.full(T, -1, np.int64)
    traj_group[traj_code] = group_code
    if (traj_group[traj_code] == group_code).all():
        return traj_code
    codes, _ = pd.factorize(group_code * T + traj_code)
    return codes.astype(np.int64, copy=False)


def _step_index(step, n: int) -> np.ndarray:
    if step is None:
        raise IntegrationInputError(
            "step_index is required: the trainer's rows are shuffled (and may be padded with "
            "copies), so a trajectory's order cannot be recovered without each row's step "
            "number; record it in the rollout loop (see crbc_viz/integrations/README or the "
            "module docstring)"
        )
    arr = _to_numpy(step, "step_index", n)
    if arr.dtype.kind == "b":
        raise IntegrationInputError("step_index: expected integers, got booleans")
    if arr.dtype.kind in "iu":
        big = np.flatnonzero(arr > MAX_STEP_IDX)
        if len(big):
            raise IntegrationInputError(
                f"step_index: row {int(big[0])} is {int(arr[big[0]])}, above the largest step "
                f"index {MAX_STEP_IDX}"
            )
        out = arr.astype(np.int64)
    else:
        if arr.dtype.kind == "O":
            k = next((i for i, v in enumerate(arr) if not _is_integer(v)), None)
            if k is not None:
                raise IntegrationInputError(f"step_index: row {k} is not an integer ({_short(arr[k])})")
        try:
            f = arr.astype(np.float64)
        except (TypeError, ValueError, OverflowError):
            raise IntegrationInputError("step_index: expected integers") from None
        bad = ~np.isfinite(f) | (f != np.round(f)) | (np.abs(f) > MAX_STEP_IDX)
        if bad.any():
            raise IntegrationInputError(
                f"step_index: row {int(np.flatnonzero(bad)[0])} is not an "
                f"integer from 0 to {MAX_STEP_IDX} ({_short(arr[np.flatnonzero(bad)[0]])})"
            )
        out = f.astype(np.int64)
    if n and out.min() < 0:
        raise IntegrationInputError(f"step_index: row {int(np.argmin(out))} is negative ({out.min()})")
    return out


def _anchor_codes(anchors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(codes [n], hashes [K] uint64)``: each row's anchor as a code into the hashes of the
    distinct anchors (`crbc_viz.io.anchors.anchor_hash64`). Strings (the usual case) are
    factorised and each distinct one hashed once; other anchors (lists, dicts, arrays) are
    hashed row by row. An anchor that is missing or cannot be canonicalised raises naming the
    row."""
    text = _text_codes(anchors)
    if text is not None:
        codes, uniques = text
        hashes = np.empty(len(uniques), np.uint64)
        for k, u in enumerate(uniques):
            try:
                hashes[k] = anchor_hash64(u)
            except (RecursionError, ValueError, TypeError, OverflowError) as exc:
                raise IntegrationInputError(
                    f"anchor_obs: row {int(np.argmax(codes == k))} cannot be canonicalised "
                    f"({type(exc).__name__})"
                ) from None
        return codes, hashes
    out = np.empty(len(anchors), np.uint64)
    for i, a in enumerate(anchors):
        if a is None or (isinstance(a, float) and math.isnan(a)):
            raise IntegrationInputError(f"anchor_obs: row {i} has no anchor")
        try:
            out[i] = anchor_hash64(a)
        except (RecursionError, ValueError, TypeError, OverflowError) as exc:
            raise IntegrationInputError(
                f"anchor_obs: row {i} cannot be canonicalised ({type(exc).__name__})"
            ) from None
    codes, hashes = pd.factorize(out)
    return codes.astype(np.int64, copy=False), np.asarray(hashes, dtype=np.uint64)


def anchor_hashes(anchors: np.ndarray) -> np.ndarray:
    """uint64 anchor hash per row (`crbc_viz.io.anchors.anchor_hash64`); strings are hashed once
    per distinct value."""
    codes, hashes = _anchor_codes(anchors)
    return hashes[codes]


def _action_codes(actions, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(codes [n], names [K])`` of the actions compared as text (``1`` and ``"1"`` are one
    action); a missing action (None or NaN) has code -1: its step is keyed by its transition
    (`crbc_viz.io.actions`)."""
    arr = _to_numpy(actions, "actions", n)
    if arr.dtype.kind != "O":
        arr = arr.astype(object)
    missing = np.asarray(pd.isna(arr), dtype=bool).reshape(-1)
    present = arr[~missing]
    text = _text_codes(present)
    codes_p, names = text if text is not None else _factorize(present.astype(str).astype(object))
    codes = np.full(len(arr), -1, np.int64)
    codes[~missing] = codes_p
    return codes, names


def _conflicts(first: np.ndarray, row_step: np.ndarray, fields: dict, traj_name, step, source) -> int:
    """Rows that repeat a (trajectory, step) must equal its first row in every field; returns
    how many rows are such copies. ``fields``: name -> (values [n], how to show value i)."""
    dup = np.flatnonzero(first[row_step] != np.arange(len(row_step)))
    if not len(dup):
        return 0
    rep = first[row_step[dup]]
    msgs = []
    for name, (col, show) in fields.items():
        for k in np.flatnonzero(col[dup] != col[rep])[:_MAX_LISTED]:
            r, r0 = int(dup[k]), int(rep[k])
            msgs.append(
                f"rows {r0} and {r} are both step {int(step[r])} of trajectory "
                f"{traj_name(r)!r} but differ in {name} ({show(r0)!r} vs {show(r)!r})"
            )
    if msgs:
        raise IntegrationInputError(
            f"{source}: conflicting duplicate rows (only exact copies "
            f"can be merged):\n  " + "\n  ".join(msgs[:_MAX_LISTED])
        )
    return len(dup)


def _one_per_traj(values: np.ndarray, first_row: np.ndarray, rows: np.ndarray, what: str, traj_name, source):
    """Each row's value must equal the one its trajectory's first row carries (``first_row``:
    per row, that row; ``rows``: the input row each value came from, for the message)."""
    bad = np.flatnonzero(values[first_row] != values)
    if len(bad):
        k, k0 = int(bad[0]), int(first_row[bad[0]])
        v0, v = values[k0].item(), values[k].item()
        raise IntegrationInputError(
            f"{source}: {what} differs within trajectory {traj_name(int(rows[k]))!r} "
            f"(row {int(rows[k0])}: {v0!r}, row {int(rows[k])}: {v!r}); it must be one value "
            f"per trajectory"
        )


def canonical_steps(
    group,
    traj,
    step,
    anchors,
    reward,
    *,
    actions=None,
    success=None,
    row_reward: str = "step",
    source: str = "trainer batch",
) -> Steps:
    """Trainer rows -> unique canonical steps, assembled as a `RolloutBatch`.

    Args:
        group: ``[B]`` group id of each row (the prompt / task uid).
        traj: ``[B]`` trajectory id (unique within its group).
        step: ``[B]`` int step index within the trajectory (0-based, contiguous, at most
            ``MAX_STEP_IDX``). Required.
        anchors: ``[B]`` the history-free state each step acted in (str, list, dict or array).
        reward: ``[B]`` finite reward of each row (see ``row_reward``), at most
            `MAX_ABS_REWARD` in magnitude (the loader's bound).
        actions: ``[B]`` optional action of each step (any values; compared as text). Without
            it, actions are keyed by their transition (`transition_actions`).
        success: ``[B]`` optional outcome of the row's trajectory, each a bool or 0/1
            (`crbc_viz.io.flags`); else the trajectory's return > 0.
        row_reward: ``step`` or ``episode`` (`ROW_REWARD`).
        source: names the batch in error messages (``"<source>: row <i>"``).

    Raises:
        IntegrationInputError: missing step index, an id that is NaN or not UTF-8, a step index
            out of range, a reward that is not a finite number or is beyond `MAX_ABS_REWARD`,
            a success that is not a flag, conflicting duplicates, a trajectory whose success
            (or episode return) differs between rows, gaps in a trajectory's steps (naming the
            row and the field, as the loader does).
    """
    if row_reward not in ROW_REWARD:
        raise IntegrationInputError(f"row_reward must be one of {', '.join(ROW_REWARD)}, got {row_reward!r}")
    g_arr = _to_numpy(group, "index", len(group) if hasattr(group, "__len__") else None)
    n = len(g_arr)
    t, t_names = _id_codes(traj, "traj_index", n)
    g, g_names = _group_codes(g_arr, t)
    s = _step_index(step, n)
    r = row_numbers(reward, "reward", n, source)
    anchor_arr = _to_numpy(anchors, "anchor_obs", n)
    anchor, hashes = _anchor_codes(anchor_arr if anchor_arr.dtype == object else anchor_arr.astype(object))
    act = None if actions is None else _action_codes(actions, n)
    ok = None if success is None else row_flags(success, "success", n, source)
    return _assemble(
        g,
        g_names,
        t,
        t_names,
        s,
        anchor,
        hashes,
        r,
        act,
        ok,
        row_reward=row_reward,
        source=source,
        anchor_values=anchor_arr,
    )


def as_anchor_rule(rule) -> AnchorRule:
    """An adapter's ``anchor_rule=``: an `AnchorRule`, a rule name (``"rtmc"``, ``"similar"``
    ...: its defaults) or a dict of `crbc_viz.io.anchor_rules.make_rule`'s keywords
    (``{"name": "similar", "threshold": 0.9}``, ``{"drop": [r"\\bsession=\\w+"]}``)."""
    if isinstance(rule, AnchorRule):
        return rule
    if isinstance(rule, str):
        return make_rule(rule)
    if isinstance(rule, dict):
        return make_rule(**rule)
    raise IntegrationInputError(
        f"anchor_rule: expected an AnchorRule, a rule name or a dict of make_rule's keywords, "
        f"got {type(rule).__name__}"
    )


def anchor_rule_scope(rule):
    """The block in which an adapter keys anchors by ``rule`` (`as_anchor_rule`; None: the
    rule in force, exact by default)."""
    import contextlib

    return contextlib.nullcontext() if rule is None else using(as_anchor_rule(rule))


def with_anchor_rule(fn):
    """An adapter that takes ``anchor_rule=`` (`anchor_rule_scope`): its anchors are keyed by
    the rule, as ``--anchor-rule`` keys a log."""
    import functools

    @functools.wraps(fn)
    def adapter(*args, anchor_rule=None, **kwargs):
        with anchor_rule_scope(anchor_rule):
            return fn(*args, **kwargs)

    return adapter


def _anchor_texts(values, first: np.ndarray):
    """The ``anchor_obs`` column a similarity rule compares (``str`` of each unique step's
    anchor, as the loader's column gives ``str(obs)``), or None when the rule in force needs
    none."""
    if values is None or not active_rule().needs_text:
        return None
    import pyarrow as pa

    vals = np.asarray(values, dtype=object)[first]
    return pa.array([v if isinstance(v, str) else str(v) for v in vals], type=pa.string())


def _assemble(
    g, g_names, t, t_names, s, anchor, hashes, r, act, ok, *, row_reward: str, source: str, anchor_values=None
) -> Steps:
    """Checked, factorised rows -> `Steps` (`canonical_steps`' steps 2-3): ``g``/``t`` id codes
    into ``g_names``/``t_names``, ``s`` step indices, ``anchor`` codes into ``hashes``, ``r``
    finite rewards, ``act`` None or (codes, names), ``ok`` None or flags; all ``[B]``.
    ``anchor_values``: the rows' anchors, kept as the ``anchor_obs`` column when the rule in
    force compares texts."""
    n = len(g)
    if n == 0:
        raise IntegrationInputError(f"{source}: no steps (an empty batch has no credit to give)")
    big = np.flatnonzero(~(np.abs(r) <= MAX_ABS_REWARD))  # NaN too (a sum that overflowed)
    if len(big):
        why = f"beyond the largest magnitude {MAX_ABS_REWARD:g} (the loader's bound)"
        raise IntegrationInputError(f"{source}: reward: {_rows(big, lambda i: f'is {r[i]:g}, {why}')}")
    traj = _pair_codes(g, t)

    def traj_name(row: int) -> str:
        return t_names[t[row]]

    placed = place_steps(g, traj, s)
    if placed.gap is not None:
        row, want, got = placed.gap
        raise IntegrationInputError(
            f"{source}: row {row}: step_idx: not contiguous from 0: expected {want}, got {got} in "
            f"trajectory {traj_name(row)!r} of group {g_names[g[row]]!r} (a trajectory's steps "
            f"are 0, 1, ..., n-1)"
        )
    first, row_step, lay = placed.first, placed.row_step, placed.layout
    fields = {
        "anchor_obs": (hashes[anchor], lambda i: f"{int(hashes[anchor[i]]):016x}"),
        "reward": (r, lambda i: float(r[i])),
    }
    if act is not None:
        fields["action"] = (act[0], lambda i: act[1][act[0][i]])
    if ok is not None:
        fields["success"] = (ok, lambda i: bool(ok[i]))
    dups = _conflicts(first, row_step, fields, traj_name, s, source)
    if ok is not None:
        traj_first = np.full(int(traj.max()) + 1, n, np.int64)
        np.minimum.at(traj_first, traj, np.arange(n, dtype=np.int64))
        _one_per_traj(ok, traj_first[traj], np.arange(n), "success", traj_name, source)

    # The unique steps, in batch order.
    step_traj, starts = lay.step_traj, lay.traj_offsets[:-1]
    reward = r[first]
    if row_reward == "episode":
        _one_per_traj(reward, starts[step_traj], first, "the episode return", traj_name, source)
        traj_return = reward[starts]
    else:
        traj_return = np.add.reduceat(reward, starts) if len(reward) else np.zeros(0)
    traj_success = ok[first][starts] if ok is not None else traj_return > 0.0
    step_anchor = anchor[first]
    anchor_code, anchor_used = first_seen(step_anchor, len(hashes))
    S, G = len(first), len(lay.group_traj_offsets) - 1
    # A traj_id may repeat across groups: the dictionary holds each name once.
    traj_code, traj_names = pd.factorize(np.asarray(t_names[t[first[starts]]], dtype=object))
    group_first = first[starts[lay.group_traj_offsets[:-1]]]
    columns = {
        "run_id": dictionary(np.zeros(S, np.int64), [Path(source).name.split(".")[0]]),
        "train_step": _arrow_array(np.zeros(S, np.int64)),
        "group_id": dictionary(lay.traj_group[step_traj], g_names[g[group_first]]),
        "traj_id": dictionary(traj_code[step_traj], traj_names),
        "step_idx": _arrow_array(s[first]),
        "reward": _arrow_array(reward),
        "anchor_key": dictionary(anchor_code, [f"{h:016x}" for h in hashes[anchor_used].tolist()]),
        # As the trainer gave them, null where it gave none: `crbc_viz.graph.action_ids` keys
        # those steps by their transition (`crbc_viz.io.actions`), as the loader does.
        "action": _action_array(None if act is None else act[0][first], None if act is None else act[1], S),
    }
    texts = _anchor_texts(anchor_values, first)
    if texts is not None:
        columns["anchor_obs"] = texts
    if row_reward == "episode":
        is_last = np.zeros(S, bool)
        is_last[lay.traj_offsets[1:] - 1] = True
        columns["reward"] = _arrow_array(np.where(is_last, reward, 0.0))
        columns["episode_return"] = _arrow_array(reward)
    group_columns = {
        "run_id": dictionary(np.zeros(G, np.int64), [Path(source).name.split(".")[0]]),
        "train_step": _arrow_array(np.zeros(G, np.int64)),
        "group_id": dictionary(np.arange(G), g_names[g[group_first]]),
    }
    batch = assemble_arrow(
        columns,
        lay,
        group_columns=group_columns,
        step_anchor_hash=hashes[step_anchor],
        traj_success=traj_success,
        traj_truncated=np.zeros(len(starts), bool),
        traj_return=traj_return,
        source=source,
    )
    return Steps(batch=batch, row_step=row_step, duplicates=int(dups))


def _arrow_array(values: np.ndarray):
    """`crbc_viz._arrow.array` (pyarrow is imported when a batch is assembled, not with this
    module)."""
    from .._arrow import array

    return array(values)


def _action_array(codes, names, S: int):
    """The ``action`` column of ``S`` unique steps: a dictionary array of ``names[codes]``,
    null where the code is -1 (everywhere when ``codes`` is None: no actions given)."""
    import pyarrow as pa

    if codes is None:
        return pa.nulls(S, pa.string())
    missing = codes < 0
    full = dictionary(np.where(missing, 0, codes), list(names) if len(names) else [""])
    if not missing.any():
        return full
    indices = pa.array(np.where(missing, 0, codes).astype(np.int32), mask=missing)
    return pa.DictionaryArray.from_arrays(indices, full.dictionary)


def any_per_trajectory(group, traj, flags, *, name: str = "won", source: str = "trainer batch") -> np.ndarray:
    """Per row: whether any row of its trajectory has the flag (an env's per-step ``won``; each
    a bool or 0/1, else it raises naming the row)."""
    g, _ = _id_codes(group, "index", len(group) if hasattr(group, "__len__") else None)
    n = len(g)
    code = _pair_codes(g, _id_codes(traj, "traj_index", n)[0])
    f = row_flags(flags, name, n, source)
    hit = np.zeros(int(code.max()) + 1 if n else 0, bool)
    np.logical_or.at(hit, code, f)
    return hit[code]


def resolve_params(estimator: str, params: dict):
    """The estimator's spec and checked params (unknown names / bounds raise here, early)."""
    from ..estimators import registry

    spec = registry.get(estimator)
    return spec, registry.make_params(spec, **params)


def as_device(device, default=None):
    """``device`` (a ``torch.device``, a string, or None for ``default``, else the CPU) as a
    ``torch.device``; only the CPU and CUDA devices this machine has are accepted."""
    torch = require("torch", "the trainer adapters")

    if device is None:
        return torch.device(default) if default is not None else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise IntegrationInputError(
            f"device: expected 'cpu', 'cuda' or 'cuda:<n>', got {_short(device)}"
        ) from None
    if dev.type not in ("cpu", "cuda"):
        raise IntegrationInputError(f"device: expected the CPU or a CUDA device, got {dev}")
    if dev.type == "cuda" and (
        not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()
    ):
        raise BackendUnavailable(
            f"device: {dev} was asked for, but this machine has "
            f"{torch.cuda.device_count() if torch.cuda.is_available() else 'no'} CUDA device(s)"
        )
    return dev


def _array(name: str, arr, kind: str, length: int | None = None) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.dtype.kind not in kind:
        what = (
            f"{arr.dtype}[{', '.join(map(str, arr.shape))}]"
            if isinstance(arr, np.ndarray)
            else type(arr).__name__
        )
        raise IntegrationInputError(f"steps: {name}: expected a 1-D numpy array of kind {kind!r}, got {what}")
    if length is not None and len(arr) != length:
        raise IntegrationInputError(f"steps: {name}: expected {length} values, got {len(arr)}")
    return arr


def _in_range(name: str, arr: np.ndarray, hi: int) -> None:
    bad = np.flatnonzero((arr < 0) | (arr >= hi))
    if len(bad):
        raise IntegrationInputError(
            f"steps: {name}: row {int(bad[0])} is {int(arr[bad[0]])}, outside 0..{hi - 1}"
        )


def _offsets(name: str, arr: np.ndarray, end: int) -> None:
    if len(arr) == 0 or arr[0] != 0 or arr[-1] != end or (np.diff(arr) < 0).any():
        raise IntegrationInputError(
            f"steps: {name}: expected non-decreasing offsets from 0 to {end}, got {_short(arr.tolist())}"
        )


def check_steps(steps) -> None:
    """That ``steps`` is a `Steps` whose arrays agree, before any of them indexes another.

    Checks the arrays `score_steps` reads: ``row_step [B]`` integers in ``0..S-1``; the batch's
    ``step_traj [S]`` (integers in ``0..T-1``), ``step_anchor_hash [S]`` (uint64),
    ``traj_offsets [T+1]`` and ``group_traj_offsets [G+1]`` (non-decreasing from 0 to S, T),
    ``traj_group [T]`` (integers in ``0..G-1``), ``traj_success [T]`` (bool) and one ``steps``
    row (with an ``action``) per step.

    Raises:
        IntegrationInputError: naming the argument (and the first bad row).
    """
    if not isinstance(steps, Steps):
        raise IntegrationInputError(
            f"steps: expected the Steps that canonical_steps returns, got {type(steps).__name__}"
        )
    b = steps.batch
    if not isinstance(b, RolloutBatch):
        raise IntegrationInputError(f"steps: batch: expected a RolloutBatch, got {type(b).__name__}")
    offsets = _array("batch.traj_offsets", b.traj_offsets, "iu")
    groups = _array("batch.group_traj_offsets", b.group_traj_offsets, "iu")
    step_traj = _array("batch.step_traj", b.step_traj, "iu")
    S, T, G = len(step_traj), len(offsets) - 1, len(groups) - 1
    _offsets("batch.traj_offsets", offsets, S)
    _offsets("batch.group_traj_offsets", groups, T)
    _in_range("batch.step_traj", step_traj, T)
    hashes = _array("batch.step_anchor_hash", b.step_anchor_hash, "u", S)
    if hashes.dtype != np.uint64:
        raise IntegrationInputError(f"steps: batch.step_anchor_hash: expected uint64, got {hashes.dtype}")
    _in_range("batch.traj_group", _array("batch.traj_group", b.traj_group, "iu", T), G)
    _array("batch.traj_success", b.traj_success, "b", T)
    arrow = b.arrow_steps  # the rows as Arrow while no frame was asked for: no frame built here
    rows, columns = (
        (arrow.num_rows, arrow.column_names) if arrow is not None else (len(b.steps), b.steps.columns)
    )
    if rows != S or "action" not in columns:
        raise IntegrationInputError(
            f"steps: batch.steps: expected {S} rows with an 'action' column, got {rows} rows"
        )
    _in_range("row_step", _array("row_step", steps.row_step, "iu"), S)


def _on_device(dev) -> bool:
    """Whether `score_steps` takes the device branch for ``dev`` (a ``torch.device``): on a
    CUDA device. The one place the branch is chosen: tests replace it to run the device branch
    on CPU tensors, the same code a GPU runs."""
    return dev.type == "cuda"


def score_steps(steps: Steps, estimator: str = "crbc", *, device=None, **params):
    """Advantage of every input row ``[B]``: a torch tensor on ``device`` (a ``torch.device``,
    a string, or None for the CPU).

    CPU: the compiled numba engine where the estimator has one (else the fastest exact backend
    `crbc_viz.api.score` picks). On a device (`_on_device`: CUDA): ``crbc`` at exact depth runs
    fused there (`crbc_viz.backends.torch.fused`: merge, batched solve and credit on the
    device; only the step keys are uploaded); other estimators (and ``crbc`` at a finite depth)
    use their batched torch twin there (the numpy reference where an estimator has none, its
    result moved to the device). Every N-th call hands the scored batch to the logger
    `crbc_viz.integrations.log_every` set (off by default).

    Raises:
        IntegrationInputError: ``steps`` is not a `Steps` whose arrays agree (lengths, dtypes,
            offsets and indices in range; `check_steps`), or ``device`` is not a CPU or CUDA
            device.
        BackendUnavailable: a CUDA device that this machine does not have.
    """
    torch = require("torch", "the trainer adapters")

    from ..api import score

    check_steps(steps)
    dev = as_device(device)
    spec, p = resolve_params(estimator, params)
    batch = steps.batch
    if active_rule().merge is not None:  # RTMC signatures, similarity: re-key the whole batch
        from ..anchor_merge import merge_anchors

        batch = merge_anchors(batch, active_rule())
    if _on_device(dev):
        if spec.name == "crbc" and math.isinf(p.depth):
            adv = _fused_crbc(batch, dev, p)
        else:
            backend = "torch" if spec.torch_fn is not None else "numpy"
            res = score(
                batch, estimator, backend=backend, device=str(dev) if backend == "torch" else "cpu", **params
            )
            adv = torch.as_tensor(res.advantage, dtype=torch.float64, device=dev)
        _after_scoring(batch)
        return adv[torch.as_tensor(steps.row_step, device=dev)]
    from ..backends.numba import available

    backend = "numba" if (spec.numba_fn is not None and available()) else "auto"
    res = score(batch, estimator, backend=backend, device="cpu", **params)
    _after_scoring(batch)
    return torch.as_tensor(np.asarray(res.advantage, np.float64)[steps.row_step], device=dev)


def _fused_crbc(batch: RolloutBatch, dev, p):
    from ..backends.torch.fused import crbc_step_credit_torch, to_device
    from ..graph import action_ids

    arrays = to_device(
        batch.step_anchor_hash,
        action_ids(batch)[0],
        batch.traj_offsets,
        batch.group_traj_offsets,
        batch.traj_success,
        device=str(dev),
    )
    out = crbc_step_credit_torch(
        *arrays,
        beta=p.beta,
        sigma_min=p.sigma_min,
        w_group=p.w_group,
        w_step=p.w_step,
        min_actions=p.min_actions,
    )
    return out["advantage"]


def token_tensors(token_level_rewards, response_mask, names=("token_level_rewards", "response_mask")):
    """``(rewards, mask)`` as tensors on the rewards' device, after checking that both are
    ``[B, L]`` of one shape (no broadcasting a ``[B, 1]`` mask), the mask holds only 0 and 1 and
    the rewards are finite (each failure names the argument and the first bad row)."""
    torch = require("torch", "the trainer adapters")

    r_name, m_name = names
    try:
        rewards = torch.as_tensor(token_level_rewards)
        mask = torch.as_tensor(response_mask, device=rewards.device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise IntegrationInputError(f"{r_name} / {m_name}: not tensors ({exc})") from None
    if rewards.ndim != 2:
        raise IntegrationInputError(f"{r_name}: expected a [B, L] tensor, got shape {tuple(rewards.shape)}")
    if tuple(mask.shape) != tuple(rewards.shape):
        raise IntegrationInputError(
            f"{m_name}: shape {tuple(mask.shape)} differs from {r_name}'s {tuple(rewards.shape)} "
            f"(one mask value per token)"
        )
    if rewards.dtype == torch.bool or rewards.is_complex():
        raise IntegrationInputError(f"{r_name}: expected real numbers, got {rewards.dtype}")
    if not _all_zero_one(mask):  # one pass over the tensor; rows looked at only to name one
        bad = ~((mask == 0) | (mask == 1)).all(-1)
        r = int(torch.nonzero(bad)[0, 0])
        v = mask[r][~((mask[r] == 0) | (mask[r] == 1))][0].item()
        raise IntegrationInputError(f"{m_name}: row {r} holds {v!r}; expected 0 or 1 on every token")
    if rewards.is_floating_point() and not _all_finite(rewards):
        r = int(torch.nonzero(~torch.isfinite(rewards).all(-1))[0, 0])
        raise IntegrationInputError(f"{r_name}: row {r} holds a non-finite reward")
    return rewards, mask


def _host(t) -> np.ndarray | None:
    """A numpy view of tensor ``t`` when the host reads it (a CPU tensor of a dtype numpy has),
    else None: the caller then runs the torch code (a device: `_on_device`). On the host numpy
    is used for the whole-tensor passes: one thread, no intra-op pool to wait on when the
    trainer's other threads hold the cores."""
    torch = require("torch", "the trainer adapters")

    if _on_device(t.device) or t.dtype in (torch.bfloat16, torch.complex32):
        return None
    return t.detach().numpy()


def _all_zero_one(mask) -> bool:
    m = _host(mask)
    if m is None:
        return bool(((mask == 0) | (mask == 1)).all())
    # Every value 0 or 1 exactly when the nonzero values (NaN included) are all ones.
    return m.dtype == bool or np.count_nonzero(m) == np.count_nonzero(m == 1)


def _all_finite(rewards) -> bool:
    torch = require("torch", "the trainer adapters")

    r = _host(rewards)
    return bool(torch.isfinite(rewards).all() if r is None else np.isfinite(r).all())


def masked_row_sum(rewards, mask):
    """``[B]`` float64 on the rewards' device: each row's sum of ``rewards`` over its
    ``mask == 1`` tokens (``mask`` holds only 0 and 1: `token_tensors`), accumulated in float64
    without a float64 copy of the ``[B, L]`` tensors."""
    torch = require("torch", "the trainer adapters")

    r, m = _host(rewards), _host(mask)
    if r is not None and m is not None:
        return torch.from_numpy(np.einsum("ij,ij->i", r, m, dtype=np.float64))
    kept = torch.where(mask != 0, rewards, torch.zeros((), dtype=rewards.dtype, device=rewards.device))
    return kept.sum(-1, dtype=torch.float64)


def broadcast(row_adv, response_mask, dtype=None):
    """``[B]`` row advantages -> ``[B, L]`` token advantages of ``dtype`` (default the mask's
    float dtype, else float32) on the mask's device, zero outside the response mask."""
    torch = require("torch", "the trainer adapters")

    mask = torch.as_tensor(response_mask)
    if mask.ndim != 2 or mask.shape[0] != row_adv.shape[0]:
        raise IntegrationInputError(
            f"response_mask: expected [B, L] with B = {row_adv.shape[0]} rows, got shape {tuple(mask.shape)}"
        )
    return masked(row_adv.unsqueeze(-1), mask, dtype)


def masked(values, mask, dtype=None):
    """``values * mask`` as ``dtype`` (default the mask's float dtype, else float32) on the
    mask's device: ``values`` ``[B, L]`` (or ``[B, 1]``, one value per row) cast first, so a
    token keeps its value exactly where the mask is 1 and is 0 elsewhere."""
    torch = require("torch", "the trainer adapters")

    dtype = dtype or (mask.dtype if mask.is_floating_point() else torch.float32)
    m, like = _host(mask), _host(torch.empty(0, dtype=dtype))
    if m is not None and like is not None:
        v = values.detach().cpu().numpy().astype(like.dtype)
        return torch.from_numpy(np.multiply(v, m, dtype=like.dtype))
    return values.to(device=mask.device, dtype=dtype) * mask.to(dtype)


def _is_integer(v) -> bool:
    """An int (not a bool), or a float with an integer value."""
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (int, np.integer)):
        return True
    return isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer()


def _offsets_of_row(s, r: int, L: int, what: str) -> np.ndarray:
    """One row's step starts as int64 offsets (integers only; None, NaN, text refused)."""
    if hasattr(s, "detach"):
        s = s.detach().cpu().numpy()
    if s is None or isinstance(s, (str, bytes, dict)):
        raise IntegrationInputError(
            f"{what}: row {r}: expected a list of token offsets, got {type(s).__name__} {_short(s)}"
        )
    try:
        arr = np.asarray(s).reshape(-1)
    except (ValueError, TypeError):
        raise IntegrationInputError(f"{what}: row {r}: expected a flat list of token offsets") from None
    items = arr.tolist()
    for v in items:
        if not _is_integer(v):
            raise IntegrationInputError(
                f"{what}: row {r}: offsets must be integers, got {type(v).__name__} {_short(v)}"
            )
    out = [int(v) for v in items]
    if out and (min(out) < 0 or max(out) >= L or any(b <= a for a, b in zip(out, out[1:]))):
        raise IntegrationInputError(
            f"{what}: row {r}: offsets must increase within 0..{L - 1}, got {_short(out, 80)}"
        )
    return np.asarray(out, dtype=np.int64)


def _begin(mask, starts=None, *, what: str = "step starts", within=None):
    """``[B, L]`` bool, True on each token where a step starts (numpy on the host, a tensor on
    a device: `_host`): the first token of each run of ``mask == 1`` (and ``within == 1``,
    when given: TRL's tool mask), or the given ``starts`` (per row, increasing integer token
    offsets; None, NaN or text raise naming the row)."""
    torch = require("torch", "the trainer adapters")

    m = torch.as_tensor(mask)
    if within is not None:
        w = torch.as_tensor(within, device=m.device)
        host, host_w = _host(m), _host(w)
        m = (
            torch.from_numpy((host != 0) & (host_w != 0))
            if host is not None and host_w is not None
            else m * w
        )
    if m.ndim != 2:
        raise IntegrationInputError(f"response_mask: expected a [B, L] tensor, got shape {tuple(m.shape)}")
    B, L = m.shape
    at = None  # (row, offset) of every given step start
    if starts is not None:
        if isinstance(starts, (str, bytes, dict)) or len(starts) != B:
            got = len(starts) if hasattr(starts, "__len__") else type(starts).__name__
            raise IntegrationInputError(f"{what}: expected one list of offsets per row ({B}), got {got}")
        offsets = [_offsets_of_row(s, r, L, what) for r, s in enumerate(starts)]
        counts = np.fromiter(map(len, offsets), np.int64, B)
        at = (np.repeat(np.arange(B), counts), np.concatenate([np.zeros(0, np.int64), *offsets]))
    host = _host(m)
    if host is not None:
        if at is not None:
            begin = np.zeros((B, L), bool)
            begin[at] = True
            return begin
        on = host != 0
        begin = on.copy()
        begin[:, 1:] &= ~on[:, :-1]
        return begin
    if at is not None:
        begin = torch.zeros(B, L, dtype=torch.bool, device=m.device)
        begin[tuple(torch.as_tensor(x, device=m.device) for x in at)] = True
        return begin
    on = m.bool()
    begin = on.clone()
    begin[:, 1:] &= ~on[:, :-1]
    return begin


def token_steps(mask, starts=None, *, what: str = "step starts"):
    """Per token, the step of its row it belongs to ``[B, L]`` (int64), and steps per row ``[B]``.

    Without ``starts``, a step starts where a run of ``mask == 1`` starts (one assistant turn
    between masked-out environment / tool tokens). ``starts`` gives, per row, the token offsets
    where its steps start instead (integers; None, NaN or text raise naming the row). A token
    belongs to the last step started at or before it; tokens before the first step belong to
    step 0. Both tensors are on the mask's device.
    """
    torch = require("torch", "the trainer adapters")

    begin = _begin(mask, starts, what=what)
    if isinstance(begin, np.ndarray):
        tok_step = np.cumsum(begin, axis=-1, dtype=np.int64)
        np.maximum(tok_step - 1, 0, out=tok_step)
        return torch.from_numpy(tok_step), torch.from_numpy(begin.sum(-1, dtype=np.int64))
    return (torch.cumsum(begin.long(), -1) - 1).clamp(min=0), begin.sum(-1)


@dataclass(frozen=True, eq=False)
class Turns:
    """The steps of rows that are whole trajectories (verl, TRL), cut from their tokens: a step
    starts at each ``begin`` token and runs to the next one (or the row's end); tokens before a
    row's first step belong to it (as `token_steps` assigns them). Steps are numbered row after
    row, ``S = n_steps.sum()`` in all.

    On the host the steps are token segments of the flattened ``[B, L]`` grid (``bounds``: no
    per-token step index is built); on a device (`_on_device`) the per-token step index
    `token_steps` gives, in torch.

    Attributes:
        n_steps: ``[B]`` int64 steps per row.
        begin: ``[B, L]`` bool (numpy on the host, a tensor on a device).
    """

    n_steps: np.ndarray
    begin: object

    @classmethod
    def of(cls, mask, starts=None, *, what: str = "step starts") -> Turns:
        """The turns of ``mask`` (`_begin`: runs of ``mask == 1``, or the given ``starts``)."""
        begin = _begin(mask, starts, what=what)
        return cls.of_begin(begin)

    @classmethod
    def of_begin(cls, begin) -> Turns:
        n = begin.sum(-1, dtype=np.int64) if isinstance(begin, np.ndarray) else begin.sum(-1).cpu().numpy()
        return cls(n_steps=np.asarray(n, dtype=np.int64), begin=begin)

    @property
    def num_steps(self) -> int:
        return int(self.n_steps.sum())

    @cached_property
    def _bounds(self):
        """``(bounds [M], is_step [M])``: where each token segment of the flattened grid starts
        (strictly increasing from 0; every row start is one) and which segments are steps (the
        others: rows without a step)."""
        B, L = self.begin.shape
        starts = np.flatnonzero(self.begin)  # each step's first token, row after row
        row_first = np.cumsum(self.n_steps) - self.n_steps  # index of each row's first step
        has = self.n_steps > 0
        starts[row_first[has]] = np.flatnonzero(has) * L  # tokens before a row's first step: in it
        empty = np.flatnonzero(~has) * L
        if not len(empty):
            return starts, None
        bounds = np.concatenate([starts, empty])
        order = np.argsort(bounds, kind="stable")
        return bounds[order], order < len(starts)

    def sums(self, token_values) -> np.ndarray:
        """``[S]`` float64: each step's sum of ``token_values`` ``[B, L]`` (every token of the
        step, masked or not), accumulated in float64."""
        torch = require("torch", "the trainer adapters")

        v = _host(torch.as_tensor(token_values))
        if isinstance(self.begin, np.ndarray) and v is not None:
            bounds, is_step = self._bounds
            flat = v.reshape(-1)
            B, L = self.begin.shape
            nonzero = np.flatnonzero(flat)
            if len(nonzero) <= len(flat) // 8:  # sparse (a reward per step): add the nonzero ones
                # In token order, as the dense sum adds them: adding a zero changes no sum.
                segment = np.searchsorted(bounds, nonzero, side="right") - 1
                out = np.bincount(segment, weights=flat[nonzero].astype(np.float64), minlength=len(bounds))
                return out if is_step is None else out[is_step]
            out = np.empty(len(bounds))
            rows = max(1, _CHUNK_TOKENS // max(L, 1))  # float64 copies of one chunk of rows at a time
            for r0 in range(0, B, rows):
                lo, hi = np.searchsorted(bounds, [r0 * L, min(r0 + rows, B) * L])
                chunk = flat[r0 * L : min(r0 + rows, B) * L].astype(np.float64)
                with np.errstate(over="ignore"):  # an overflowed sum is refused by `_assemble`
                    out[lo:hi] = np.add.reduceat(chunk, bounds[lo:hi] - r0 * L)
            return out if is_step is None else out[is_step]
        cell, valid, K = self._cells()
        values = torch.as_tensor(token_values, device=cell.device)
        grid = torch.zeros(cell.shape[0], K, dtype=torch.float64, device=cell.device)
        grid.scatter_add_(1, cell, values.double())
        return grid[torch.as_tensor(valid, device=cell.device)].cpu().numpy()

    def _cells(self):
        """Device: ``(cell [B, L], valid [B, K], K)``: each token's step slot, clamped to the
        ``K`` slots, and which slots are steps."""
        torch = require("torch", "the trainer adapters")

        K = max(int(self.n_steps.max()) if len(self.n_steps) else 0, 1)
        begin = torch.as_tensor(self.begin)
        cell = (torch.cumsum(begin.long(), -1) - 1).clamp(min=0, max=K - 1)
        return cell, np.arange(K)[None, :] < self.n_steps[:, None], K

    def spread(self, step_values, mask, dtype=None):
        """``[B, L]`` tensor of ``dtype`` (`masked`'s default) on the mask's device: each token
        carries its step's value from ``step_values`` ``[S]`` (cast to ``dtype`` first), times
        the mask; tokens of rows without a step carry 0."""
        torch = require("torch", "the trainer adapters")

        mask = torch.as_tensor(mask)
        dtype = dtype or (mask.dtype if mask.is_floating_point() else torch.float32)
        m, like = _host(mask), _host(torch.empty(0, dtype=dtype))
        if isinstance(self.begin, np.ndarray) and m is not None and like is not None:
            bounds, is_step = self._bounds
            vals = torch.as_tensor(step_values).detach().cpu().numpy().astype(like.dtype)
            if is_step is not None:
                full = np.zeros(len(bounds), like.dtype)
                full[is_step] = vals
                vals = full
            B, L = self.begin.shape
            out = np.repeat(vals, np.diff(np.r_[bounds, B * L]))
            np.multiply(out, m.reshape(-1), out=out, casting="unsafe")
            return torch.from_numpy(out.reshape(B, L))
        cell, valid, K = self._cells()
        grid = torch.zeros(cell.shape[0], K, dtype=torch.float64, device=mask.device)
        grid[torch.as_tensor(valid, device=mask.device)] = torch.as_tensor(
            step_values, device=mask.device
        ).double()
        return masked(torch.gather(grid, 1, cell.to(mask.device)), mask, dtype)


#: Tokens per float64 chunk in `Turns.sums` (bounds its temporary memory: 8 MiB).
_CHUNK_TOKENS = 1 << 20


def trajectory_credit(
    index,
    token_rewards,
    tok_step,
    n_steps,
    anchors,
    *,
    actions=None,
    success=None,
    estimator: str = "crbc",
    device=None,
    source: str = "batch",
    names=("anchors", "actions", "success"),
    **params,
):
    """Credit for rows that are whole trajectories (verl, TRL), per token ``[B, L]`` float64.

    Args:
        index: ``[B]`` group of each row. The row itself is the trajectory.
        token_rewards: ``[B, L]`` finite; a step's reward is the sum over its tokens.
        tok_step, n_steps: from `token_steps`.
        anchors: per row, a list (tuple, array) with one anchor per step; ``actions`` likewise
            (optional); ``success`` one flag per row (optional, a bool or 0/1; else the row's
            summed reward > 0).
        names: what the trainer calls ``anchors``, ``actions`` and ``success`` (in messages).

    Returns:
        ``[B, L]`` tensor on ``device`` (default the rewards' device): each token carries its
        step's advantage (not yet masked).

    Raises:
        IntegrationInputError: naming the argument and the row: a per-row entry that is not a
            list (one string would be split into characters), one whose length is not the
            row's step count, a success that is not a flag, a non-finite reward.
    """
    torch = require("torch", "the trainer adapters")

    rewards = torch.as_tensor(token_rewards)
    if rewards.ndim != 2 or tuple(tok_step.shape) != tuple(rewards.shape):
        raise IntegrationInputError(
            f"{source}: token rewards {tuple(rewards.shape)} and token steps {tuple(tok_step.shape)} "
            f"must be one [B, L] shape"
        )
    if rewards.is_floating_point() and not _all_finite(rewards):
        r = int(torch.nonzero(~torch.isfinite(rewards).all(-1))[0, 0])
        raise IntegrationInputError(f"{source}: row {r} holds a non-finite reward")
    counts = torch.as_tensor(n_steps).cpu().numpy().astype(np.int64)
    K = max(int(counts.max()) if len(counts) else 0, 1)
    valid = np.arange(K)[None, :] < counts[:, None]  # [B, K]: the (row, step) slots that exist
    cell = torch.as_tensor(tok_step).clamp(max=K - 1)  # [B, L]: each token's step slot
    dev = as_device(device, default=rewards.device)
    steps = rows_as_steps(
        index,
        _step_sums(rewards, cell, K)[valid],
        counts,
        anchors,
        actions=actions,
        success=success,
        source=source,
        names=names,
    )
    step_adv = score_steps(steps, estimator, device=dev, **params)
    return _per_token(step_adv, valid, cell, dev)


def rows_as_steps(
    index,
    step_reward: np.ndarray,
    counts: np.ndarray,
    anchors,
    *,
    actions=None,
    success=None,
    source: str = "batch",
    names=("anchors", "actions", "success"),
) -> Steps:
    """`Steps` of rows that are whole trajectories: row ``r`` has ``counts[r]`` steps, whose
    rewards are ``step_reward`` ``[S]`` (row after row) and whose anchors (and optional
    actions) are the per-row lists ``anchors[r]`` (``actions[r]``); ``success`` one flag per
    row (optional); ``index`` the group of each row. Checks as `trajectory_credit`."""
    a_name, x_name, s_name = (*names, "success")[:3]
    B = len(counts)
    for label, per_row in zip((a_name, x_name), (anchors, actions)):
        if per_row is not None:
            _check_lists(per_row, counts, label, source)
    S = int(counts.sum())
    row = np.repeat(np.arange(B, dtype=np.int64), counts)
    step = np.arange(S, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    anchor_values = _flat(anchors, B, S)
    anchor, hashes = _anchor_codes(anchor_values)
    act = None if actions is None else _action_codes(_flat(actions, B, S), S)
    ok = None if success is None else row_flags(success, s_name, B, source)[row]
    group, group_names = _id_codes(index, "index", B)
    # Each row is one trajectory, named by its row number.
    return _assemble(
        group[row],
        group_names,
        row,
        np.array([str(r) for r in range(B)], dtype=object),
        step,
        anchor,
        hashes,
        np.asarray(step_reward, dtype=np.float64),
        act,
        ok,
        row_reward="step",
        source=source,
        anchor_values=anchor_values,
    )


def _step_sums(rewards, cell, K: int) -> np.ndarray:
    """``[B, K]`` float64: per row, the sum of its tokens' rewards in each step slot."""
    torch = require("torch", "the trainer adapters")

    r, c = _host(rewards), _host(cell)
    B = rewards.shape[0]
    if r is not None and c is not None:
        flat = (np.arange(B, dtype=np.int64)[:, None] * K + c).ravel()
        return np.bincount(flat, weights=r.ravel(), minlength=B * K).reshape(B, K)
    out = torch.zeros(B, K, dtype=torch.float64, device=rewards.device)
    out.scatter_add_(1, cell.to(rewards.device), rewards.double())
    return out.cpu().numpy()


def _per_token(step_adv, valid: np.ndarray, cell, dev):
    """``[B, L]`` float64 on ``dev``: each token's step advantage (``step_adv [S]`` in the
    order of the ``valid [B, K]`` slots)."""
    torch = require("torch", "the trainer adapters")

    B, K = valid.shape
    a, c = _host(step_adv), _host(cell)
    if a is not None and c is not None:
        grid = np.zeros(B * K)
        grid[valid.ravel()] = a
        out = grid[(np.arange(B, dtype=np.int64)[:, None] * K + c)]
        return torch.from_numpy(out).to(dev)
    grid = torch.zeros(B, K, dtype=torch.float64, device=dev)
    grid[torch.as_tensor(valid, device=dev)] = step_adv
    return torch.gather(grid, 1, cell.to(dev))


def _check_lists(per_row, counts: np.ndarray, label: str, source: str) -> None:
    """Each row's entry is a list (tuple, array) of ``counts[r]`` items, else raise naming the
    row: one string would be split into characters. The types and lengths are read in one pass
    each; rows are looked at one by one only to name a bad one."""
    B = len(counts)
    if isinstance(per_row, (str, bytes, dict)) or not hasattr(per_row, "__len__") or len(per_row) != B:
        got = len(per_row) if hasattr(per_row, "__len__") else type(per_row).__name__
        raise IntegrationInputError(f"{source}: {label}: expected one list per row ({B}), got {got}")
    if not all(issubclass(k, (list, tuple, np.ndarray)) for k in set(map(type, per_row))):
        r, item = next((r, x) for r, x in enumerate(per_row) if not isinstance(x, (list, tuple, np.ndarray)))
        raise IntegrationInputError(
            f"{source}: row {r}: {label} is a {type(item).__name__} ({_short(item)}); "
            f"expected a list with one entry per step"
        )
    bad = np.flatnonzero(np.fromiter(map(len, per_row), np.int64, B) != counts)
    if len(bad):
        r = int(bad[0])
        raise IntegrationInputError(f"{source}: row {r}: {len(per_row[r])} {label} for {counts[r]} steps")


def _flat(per_row, B: int, S: int) -> np.ndarray:
    """``[S]`` object array of the per-row lists' entries, row after row (lengths checked by
    `_check_lists`). Each entry stays one item, whatever it holds (lists of equal length are
    not turned into a 2-D array)."""
    return np.fromiter(itertools.chain.from_iterable(per_row), dtype=object, count=S)
