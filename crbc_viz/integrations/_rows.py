"""Trainer rows -> canonical steps, assembled as a `RolloutBatch` (steps 1-2 of
`crbc_viz.integrations._core`): ids, step indices, anchors and actions checked and factorised,
duplicates and conflicts found, the unique steps placed in batch order and assembled as Arrow."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..data import RolloutBatch
from ..errors import CrbcVizError
from ..io.actions import first_seen
from ..io.anchor_rules import AnchorRule, make_rule, using
from ..io.anchor_rules import active as active_rule
from ..io.anchor_rules import rule_hash64 as anchor_hash64  # the rule in force (exact by default)
from ..io.assemble import assemble_arrow, dictionary, place_steps
from ..io.fields import MAX_ABS_REWARD, MAX_STEP_IDX
from ..io.flags import not_a_flag, read_flags
from . import _threads

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
    a missing value, None or NaN, gets code -1; strings: chunk by chunk in threads,
    `crbc_viz.integrations._threads.factorize`)."""
    codes, uniques = _threads.factorize(values)
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
    try:  # one pass: the factorisation marks a missing action (pandas' isna values) with -1
        codes, uniques = _factorize(arr)
    except TypeError:  # unhashable values
        codes, uniques = None, None
    if uniques is not None and all(isinstance(u, str) for u in uniques):
        return codes, uniques  # text (the usual case), codes in first-occurrence order
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
        CodedRows(g, g_names, t, t_names, s, anchor, hashes, r, act, ok),
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


class CodedRows(NamedTuple):
    """Checked, factorised trainer rows, each field ``[B]`` (one entry per row) unless named."""

    g: np.ndarray  # group id codes into ``g_names``
    g_names: np.ndarray
    t: np.ndarray  # trajectory id codes into ``t_names``
    t_names: np.ndarray
    s: np.ndarray  # step indices
    anchor: np.ndarray  # anchor codes into ``hashes``
    hashes: np.ndarray  # [A] uint64 hash of each distinct anchor
    r: np.ndarray  # finite rewards
    act: tuple | None  # None or (codes, names)
    ok: np.ndarray | None  # None or success flags


def _assemble(rows: CodedRows, *, row_reward: str, source: str, anchor_values=None) -> Steps:
    """Checked, factorised rows -> `Steps` (`canonical_steps`' steps 2-3). ``anchor_values``: the
    rows' anchors, kept as the ``anchor_obs`` column when the rule in force compares texts."""
    g, g_names, t, t_names, s, anchor, hashes, r, act, ok = rows
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


def _is_integer(v) -> bool:
    """An int (not a bool), or a float with an integer value."""
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (int, np.integer)):
        return True
    return isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer()
