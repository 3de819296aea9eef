"""What every trainer adapter shares: trainer rows -> canonical steps -> credit -> rows.

A trainer hands over one row per environment step (verl-agent, ROLL, rLLM's step-wise path) or
one row per trajectory that the adapter first cuts into steps (verl, TRL). Rows may be
duplicated (verl-agent's ``adjust_batch``, ROLL's ``batch_adjust_mode="copy"``) and shuffled
(``_balance_batch``). Here:

1. rows become canonical steps (SCHEMA.md fields ``group_id``, ``traj_id``, ``step_idx``,
   ``reward``, ``anchor_key``, ``action``, ``success``): statistics are computed on the unique
   (trajectory, step) rows — exact copies are dropped, copies that differ raise, naming both
   rows; steps are ordered by the explicit step index (none, or gaps: refused);
2. the unique steps are assembled with the project's own loader (`crbc_viz.io.schema.
   build_batch`), so anchors hash, success and validation are exactly what ``crbc-viz score``
   does on the same rows written to a file;
3. the estimator runs through `crbc_viz.api.score` (CPU: the compiled numba engine where the
   estimator has one), or, for ``crbc`` on a CUDA device, through the fused device path
   (`crbc_viz.backends.torch.fused`), so the solve stays on the GPU;
4. each unique step's advantage goes back to every row that carried it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..data import RolloutBatch
from ..errors import BackendUnavailable, CrbcVizError
from ..io.anchors import anchor_hash64
from ..io.fields import MAX_STEP_IDX
from ..io.flags import not_a_flag, read_flags
from ..io.readers import RawTable
from ..io.schema import build_batch

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
    "broadcast",
    "token_tensors",
    "any_per_trajectory",
    "row_flags",
    "row_numbers",
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
        return self.batch.steps[cols].copy()


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


def _ids(x, name: str, n: int) -> np.ndarray:
    arr = _to_numpy(x, name, n)
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(np.isnan(arr))
        if len(bad):  # "nan" would merge every such row into one id
            raise IntegrationInputError(f"{name}: row {int(bad[0])} is NaN (an id is required)")
    if arr.dtype.kind == "S":
        arr = arr.astype(object)
    if arr.dtype.kind == "O":
        if pd.api.types.infer_dtype(arr, skipna=False) == "string":
            return arr  # already strings (uids): no copy
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
    return arr.astype(str).astype(object)


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Codes of the (a, b) pairs in first-occurrence order (without building tuples)."""
    ca, _ = pd.factorize(a)
    cb, ub = pd.factorize(b)
    codes, _ = pd.factorize(ca.astype(np.int64) * (len(ub) + 1) + cb)
    return codes.astype(np.int64)


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


def anchor_hashes(anchors: np.ndarray) -> np.ndarray:
    """uint64 anchor hash per row (`crbc_viz.io.anchors.anchor_hash64`); strings are hashed once
    per distinct value."""
    n = len(anchors)
    if (
        n
        and all(isinstance(a, str) for a in anchors[: min(n, 64)])
        and pd.api.types.infer_dtype(anchors, skipna=False) == "string"
    ):
        codes, uniques = pd.factorize(anchors)
        return np.fromiter((anchor_hash64(u) for u in uniques), np.uint64, len(uniques))[codes]
    out = np.empty(n, np.uint64)
    for i, a in enumerate(anchors):
        if a is None or (isinstance(a, float) and math.isnan(a)):
            raise IntegrationInputError(f"anchor_obs: row {i} has no anchor")
        try:
            out[i] = anchor_hash64(a)
        except (RecursionError, ValueError, TypeError, OverflowError) as exc:
            raise IntegrationInputError(
                f"anchor_obs: row {i} cannot be canonicalised ({type(exc).__name__})"
            ) from None
    return out


def transition_actions(
    traj_key: np.ndarray, step: np.ndarray, hashes: np.ndarray, success: np.ndarray
) -> np.ndarray:
    """Actions keyed by their transition, for rows without an action: ``"->"`` + the next
    step's anchor key, or ``"->SUCCESS"`` / ``"->FAILURE"`` after a trajectory's last step.

    Two steps from one anchor then share an action exactly when they led to the same next state
    (exact in deterministic environments such as Sokoban; distinct actions with the same effect
    are merged, which is what a state-based credit cannot tell apart anyway).
    ``traj_key``, ``step``, ``hashes`` and ``success`` (per row) are over unique rows.
    """
    order = np.lexsort((step, traj_key))
    tk = traj_key[order]
    nxt_same = np.r_[tk[1:] == tk[:-1], False]
    out = np.empty(len(order), dtype=object)
    nh = np.r_[hashes[order][1:], np.uint64(0)]
    keys = np.array([f"->{h:016x}" for h in nh], dtype=object)
    end = np.where(success[order], "->SUCCESS", "->FAILURE").astype(object)
    out[order] = np.where(nxt_same, keys, end)
    return out


def _conflicts(first: np.ndarray, u: np.ndarray, fields: dict[str, np.ndarray], traj, step, source):
    """Rows that repeat a (trajectory, step) must equal its first row in every field."""
    dup = np.flatnonzero(first[u] != np.arange(len(u)))
    if not len(dup):
        return 0
    rep = first[u[dup]]
    msgs = []
    for name, col in fields.items():
        a, b = col[dup], col[rep]
        same = (a == b) if a.dtype.kind != "f" else ((a == b) | (np.isnan(a) & np.isnan(b)))
        for k in np.flatnonzero(~np.asarray(same, bool))[:_MAX_LISTED]:
            r, r0 = int(dup[k]), int(rep[k])
            msgs.append(
                f"rows {r0} and {r} are both step {int(step[r])} of trajectory "
                f"{traj[r]!r} but differ in {name} ({col[r0]!r} vs {col[r]!r})"
            )
    if msgs:
        raise IntegrationInputError(
            f"{source}: conflicting duplicate rows (only exact copies "
            f"can be merged):\n  " + "\n  ".join(msgs[:_MAX_LISTED])
        )
    return len(dup)


def _per_traj_constant(values: np.ndarray, traj_code: np.ndarray, name: str, traj, source):
    """Per trajectory, the one value all its rows carry (differing rows raise)."""
    first = pd.Series(np.arange(len(traj_code))).groupby(traj_code, sort=True).first().to_numpy()
    ref = values[first][traj_code]
    bad = np.flatnonzero(ref != values)
    if len(bad):
        r = int(bad[0])
        r0 = int(first[traj_code[r]])
        raise IntegrationInputError(
            f"{source}: {name} differs within trajectory {traj[r]!r} "
            f"(row {r0}: {values[r0]!r}, row {r}: {values[r]!r}); it must "
            f"be one value per trajectory"
        )
    return values[first]


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
        reward: ``[B]`` finite reward of each row (see ``row_reward``).
        actions: ``[B]`` optional action of each step (any values; compared as text). Without
            it, actions are keyed by their transition (`transition_actions`).
        success: ``[B]`` optional outcome of the row's trajectory, each a bool or 0/1
            (`crbc_viz.io.flags`); else the trajectory's return > 0.
        row_reward: ``step`` or ``episode`` (`ROW_REWARD`).
        source: names the batch in error messages (``"<source>:row <i>"``).

    Raises:
        IntegrationInputError: missing step index, an id that is NaN or not UTF-8, a step index
            out of range, a reward that is not a finite number, a success that is not a flag,
            conflicting duplicates, a trajectory whose success (or episode return) differs
            between rows, gaps in a trajectory's steps (from the loader, naming the row).
    """
    if row_reward not in ROW_REWARD:
        raise IntegrationInputError(f"row_reward must be one of {', '.join(ROW_REWARD)}, got {row_reward!r}")
    g = _ids(group, "index", len(group) if hasattr(group, "__len__") else None)
    n = len(g)
    t = _ids(traj, "traj_index", n)
    s = _step_index(step, n)
    r = row_numbers(reward, "reward", n, source)
    h = anchor_hashes(_to_numpy(anchors, "anchor_obs", n).astype(object))
    a = None if actions is None else _to_numpy(actions, "actions", n).astype(str).astype(object)
    ok = None if success is None else row_flags(success, "success", n, source)

    # Trajectory and (trajectory, step) codes, first-occurrence order.
    tcode = _pair_codes(g, t)
    key = tcode * (int(s.max()) + 1 if n else 1) + s
    u, _ = pd.factorize(key)
    U = int(u.max()) + 1 if n else 0
    first = np.full(U, n, np.int64)
    np.minimum.at(first, u, np.arange(n))
    fields = {"anchor_obs": h, "reward": r}
    if a is not None:
        fields["action"] = a
    if ok is not None:
        fields["success"] = ok
    dups = _conflicts(first, u, fields, t, s, source)
    if ok is not None:
        _per_traj_constant(ok, tcode, "success", t, source)
    ft = tcode[first]
    if row_reward == "episode":
        ret = _per_traj_constant(r[first], ft, "the episode return", t[first], source)
    else:
        ret = np.bincount(ft, weights=r[first], minlength=int(ft.max()) + 1 if U else 0)
    traj_ok = ok[first][_first_of(ft)] if ok is not None else ret > 0.0

    table = pd.DataFrame(
        {
            "group_id": g[first],
            "traj_id": t[first],
            "step_idx": s[first],
            "reward": r[first],
            "anchor_key": [f"{x:016x}" for x in h[first]],
        }
    )
    if row_reward == "episode":
        last = _is_last(ft, s[first])
        table["reward"] = np.where(last, r[first], 0.0)
        table["episode_return"] = r[first]
    table["action"] = a[first] if a is not None else transition_actions(ft, s[first], h[first], traj_ok[ft])
    if ok is not None:
        table["success"] = ok[first]
    table["__u"] = np.arange(U)
    raw = RawTable(path=source, records=table, line=first, where="row", from_text=False)
    batch = build_batch(raw)
    pos = np.empty(U, np.int64)
    pos[batch.steps["__u"].to_numpy(dtype=np.int64)] = np.arange(batch.num_steps)
    return Steps(batch=batch, row_step=pos[u], duplicates=int(dups))


def any_per_trajectory(group, traj, flags, *, name: str = "won", source: str = "trainer batch") -> np.ndarray:
    """Per row: whether any row of its trajectory has the flag (an env's per-step ``won``; each
    a bool or 0/1, else it raises naming the row)."""
    g = _ids(group, "index", len(group) if hasattr(group, "__len__") else None)
    n = len(g)
    code = _pair_codes(g, _ids(traj, "traj_index", n))
    f = row_flags(flags, name, n, source)
    hit = np.zeros(int(code.max()) + 1 if n else 0, bool)
    np.logical_or.at(hit, code, f)
    return hit[code]


def _first_of(codes: np.ndarray) -> np.ndarray:
    """For codes 0..K-1, the position of each code's first occurrence ``[K]``."""
    K = int(codes.max()) + 1 if len(codes) else 0
    first = np.full(K, len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return first


def _is_last(traj_code: np.ndarray, step: np.ndarray) -> np.ndarray:
    K = int(traj_code.max()) + 1 if len(traj_code) else 0
    mx = np.full(K, -1, np.int64)
    np.maximum.at(mx, traj_code, step)
    return step == mx[traj_code]


def resolve_params(estimator: str, params: dict):
    """The estimator's spec and checked params (unknown names / bounds raise here, early)."""
    from ..estimators import registry

    spec = registry.get(estimator)
    return spec, registry.make_params(spec, **params)


def as_device(device, default=None):
    """``device`` (a ``torch.device``, a string, or None for ``default``, else the CPU) as a
    ``torch.device``; only the CPU and CUDA devices this machine has are accepted."""
    import torch

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
    frame = b.steps
    if len(frame) != S or "action" not in frame.columns:
        raise IntegrationInputError(
            f"steps: batch.steps: expected {S} rows with an 'action' column, got {len(frame)} rows"
        )
    _in_range("row_step", _array("row_step", steps.row_step, "iu"), S)


def score_steps(steps: Steps, estimator: str = "crbc", *, device=None, **params):
    """Advantage of every input row ``[B]``: a torch tensor on ``device`` (a ``torch.device``,
    a string, or None for the CPU).

    CPU: the compiled numba engine where the estimator has one (else the fastest exact backend
    `crbc_viz.api.score` picks). CUDA: ``crbc`` at exact depth runs fused on the device
    (`crbc_viz.backends.torch.fused`: merge, batched solve and credit there; only the step keys
    are uploaded); other estimators use their batched torch twin on the device (the numpy
    reference where an estimator has none) and the result is moved to the device.

    Raises:
        IntegrationInputError: ``steps`` is not a `Steps` whose arrays agree (lengths, dtypes,
            offsets and indices in range; `check_steps`), or ``device`` is not a CPU or CUDA
            device.
        BackendUnavailable: a CUDA device that this machine does not have.
    """
    import torch

    from ..api import score

    check_steps(steps)
    dev = as_device(device)
    spec, p = resolve_params(estimator, params)
    batch = steps.batch
    if dev.type == "cuda":
        if spec.name == "crbc" and math.isinf(p.depth):
            adv = _fused_crbc(batch, dev, p)
        else:
            backend = "torch" if spec.torch_fn is not None else "numpy"
            res = score(
                batch, estimator, backend=backend, device=str(dev) if backend == "torch" else "cpu", **params
            )
            adv = torch.as_tensor(res.advantage, dtype=torch.float64, device=dev)
        return adv[torch.as_tensor(steps.row_step, device=dev)]
    from ..backends.numba import available

    backend = "numba" if (spec.numba_fn is not None and available()) else "auto"
    res = score(batch, estimator, backend=backend, device="cpu", **params)
    return torch.as_tensor(np.asarray(res.advantage, np.float64)[steps.row_step], device=dev)


def _fused_crbc(batch: RolloutBatch, dev, p):
    from ..backends.torch.fused import crbc_step_credit_torch, to_device

    codes, _ = pd.factorize(batch.steps["action"].astype(str).to_numpy())
    arrays = to_device(
        batch.step_anchor_hash,
        codes,
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
    import torch

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
    bad = ~((mask == 0) | (mask == 1)).all(-1)
    if bad.any():
        r = int(torch.nonzero(bad)[0, 0])
        v = mask[r][~((mask[r] == 0) | (mask[r] == 1))][0].item()
        raise IntegrationInputError(f"{m_name}: row {r} holds {v!r}; expected 0 or 1 on every token")
    if rewards.is_floating_point():
        bad = ~torch.isfinite(rewards).all(-1)
        if bad.any():
            r = int(torch.nonzero(bad)[0, 0])
            raise IntegrationInputError(f"{r_name}: row {r} holds a non-finite reward")
    return rewards, mask


def broadcast(row_adv, response_mask, dtype=None):
    """``[B]`` row advantages -> ``[B, L]`` token advantages, zero outside the response mask."""
    import torch

    mask = torch.as_tensor(response_mask)
    if mask.ndim != 2 or mask.shape[0] != row_adv.shape[0]:
        raise IntegrationInputError(
            f"response_mask: expected [B, L] with B = {row_adv.shape[0]} rows, got shape {tuple(mask.shape)}"
        )
    dtype = dtype or (mask.dtype if mask.is_floating_point() else torch.float32)
    return row_adv.to(device=mask.device, dtype=dtype).unsqueeze(-1) * mask.to(dtype)


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


def token_steps(mask, starts=None, *, what: str = "step starts"):
    """Per token, the step of its row it belongs to ``[B, L]`` (int64), and steps per row ``[B]``.

    Without ``starts``, a step starts where a run of ``mask == 1`` starts (one assistant turn
    between masked-out environment / tool tokens). ``starts`` gives, per row, the token offsets
    where its steps start instead (integers; None, NaN or text raise naming the row). A token
    belongs to the last step started at or before it; tokens before the first step belong to
    step 0.
    """
    import torch

    m = torch.as_tensor(mask)
    if m.ndim != 2:
        raise IntegrationInputError(f"response_mask: expected a [B, L] tensor, got shape {tuple(m.shape)}")
    m = m.bool()
    B, L = m.shape
    if starts is None:
        begin = m.clone()
        begin[:, 1:] &= ~m[:, :-1]
    else:
        if isinstance(starts, (str, bytes, dict)) or len(starts) != B:
            got = len(starts) if hasattr(starts, "__len__") else type(starts).__name__
            raise IntegrationInputError(f"{what}: expected one list of offsets per row ({B}), got {got}")
        begin = torch.zeros(B, L, dtype=torch.bool)
        for r, s in enumerate(starts):
            begin[r, torch.as_tensor(_offsets_of_row(s, r, L, what))] = True
        begin = begin.to(m.device)
    n_steps = begin.sum(-1)
    tok_step = (torch.cumsum(begin.long(), -1) - 1).clamp(min=0)
    return tok_step, n_steps


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
    import torch

    a_name, x_name, s_name = (*names, "success")[:3]
    rewards = torch.as_tensor(token_rewards)
    if rewards.ndim != 2 or tuple(tok_step.shape) != tuple(rewards.shape):
        raise IntegrationInputError(
            f"{source}: token rewards {tuple(rewards.shape)} and token steps {tuple(tok_step.shape)} "
            f"must be one [B, L] shape"
        )
    if rewards.is_floating_point() and not torch.isfinite(rewards).all():
        r = int(torch.nonzero(~torch.isfinite(rewards).all(-1))[0, 0])
        raise IntegrationInputError(f"{source}: row {r} holds a non-finite reward")
    B = rewards.shape[0]
    K = max(int(n_steps.max()) if B else 0, 1)
    ts = tok_step.clamp(max=K - 1).to(rewards.device)
    step_r = torch.zeros(B, K, dtype=torch.float64, device=rewards.device)
    step_r.scatter_add_(1, ts, rewards.double())
    counts = n_steps.cpu().numpy().astype(np.int64)
    for label, per_row in zip((a_name, x_name), (anchors, actions)):
        if per_row is None:
            continue
        if isinstance(per_row, (str, bytes, dict)) or len(per_row) != B:
            got = len(per_row) if hasattr(per_row, "__len__") else type(per_row).__name__
            raise IntegrationInputError(f"{source}: {label}: expected one list per row ({B}), got {got}")
        for r in range(B):
            item = per_row[r]
            if not isinstance(item, (list, tuple, np.ndarray)):
                raise IntegrationInputError(
                    f"{source}: row {r}: {label} is a {type(item).__name__} ({_short(item)}); "
                    f"expected a list with one entry per step"
                )
            if len(item) != counts[r]:
                raise IntegrationInputError(f"{source}: row {r}: {len(item)} {label} for {counts[r]} steps")
    row = np.repeat(np.arange(B), counts)
    step = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts)
    flat_anchor = np.empty(len(row), dtype=object)
    flat_anchor[:] = [a for r in range(B) for a in anchors[r]]
    valid = torch.arange(K, device=rewards.device)[None, :] < n_steps.to(rewards.device)[:, None]
    flat_r = step_r[valid].cpu().numpy()
    flat_a = None
    if actions is not None:
        flat_a = np.empty(len(row), dtype=object)
        flat_a[:] = [str(a) for r in range(B) for a in actions[r]]
    flat_s = None if success is None else row_flags(success, s_name, B, source)[row]
    grp = _ids(index, "index", B)[row]
    dev = as_device(device, default=rewards.device)
    steps = canonical_steps(
        grp, row, step, flat_anchor, flat_r, actions=flat_a, success=flat_s, source=source
    )
    step_adv = score_steps(steps, estimator, device=dev, **params)
    grid = torch.zeros(B, K, dtype=torch.float64, device=dev)
    grid[valid.to(dev)] = step_adv
    return torch.gather(grid, 1, ts.to(dev))
