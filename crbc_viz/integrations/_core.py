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
from ..errors import CrbcVizError
from ..io.anchors import anchor_hash64
from ..io.readers import RawTable
from ..io.schema import build_batch

__all__ = [
    "Steps",
    "IntegrationInputError",
    "canonical_steps",
    "score_steps",
    "ROW_REWARD",
    "transition_actions",
    "token_steps",
    "trajectory_credit",
    "broadcast",
    "any_per_trajectory",
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
    arr = np.asarray(x) if not isinstance(x, np.ndarray) else x
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


def _ids(x, name: str, n: int) -> np.ndarray:
    arr = _to_numpy(x, name, n)
    if arr.dtype.kind == "O":
        if pd.api.types.infer_dtype(arr, skipna=False) == "string":
            return arr  # already strings (uids): no copy
        bad = pd.isna(pd.Series(arr)).to_numpy()
        if bad.any():
            raise IntegrationInputError(f"{name}: row {int(np.flatnonzero(bad)[0])} has no value")
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
    if arr.dtype.kind in "iu":
        out = arr.astype(np.int64)
    else:
        try:
            f = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise IntegrationInputError("step_index: expected integers") from None
        bad = ~np.isfinite(f) | (f != np.round(f))
        if bad.any():
            raise IntegrationInputError(
                f"step_index: row {int(np.flatnonzero(bad)[0])} is not an "
                f"integer ({arr[np.flatnonzero(bad)[0]]!r})"
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
        step: ``[B]`` int step index within the trajectory (0-based, contiguous). Required.
        anchors: ``[B]`` the history-free state each step acted in (str, list, dict or array).
        reward: ``[B]`` float reward of each row (see ``row_reward``).
        actions: ``[B]`` optional action of each step (any values; compared as text). Without
            it, actions are keyed by their transition (`transition_actions`).
        success: ``[B]`` optional bool outcome of the row's trajectory; else the trajectory's
            return > 0.
        row_reward: ``step`` or ``episode`` (`ROW_REWARD`).
        source: names the batch in error messages (``"<source>:row <i>"``).

    Raises:
        IntegrationInputError: missing step index, conflicting duplicates, a trajectory whose
            success (or episode return) differs between rows, gaps in a trajectory's steps
            (from the loader, naming the row).
    """
    if row_reward not in ROW_REWARD:
        raise IntegrationInputError(f"row_reward must be one of {', '.join(ROW_REWARD)}, got {row_reward!r}")
    g = _ids(group, "index", len(group))
    n = len(g)
    t = _ids(traj, "traj_index", n)
    s = _step_index(step, n)
    r = _to_numpy(reward, "reward", n).astype(np.float64)
    if not np.isfinite(r).all():
        raise IntegrationInputError(
            f"{source}: row {int(np.flatnonzero(~np.isfinite(r))[0])} has a non-finite reward"
        )
    h = anchor_hashes(_to_numpy(anchors, "anchor_obs", n).astype(object))
    a = None if actions is None else _to_numpy(actions, "actions", n).astype(str).astype(object)
    ok = None if success is None else _to_numpy(success, "success", n)
    if ok is not None:
        if ok.dtype.kind != "b":
            if not np.isin(ok, [0, 1, True, False]).all():
                raise IntegrationInputError("success: expected booleans")
        ok = ok.astype(bool)

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


def any_per_trajectory(group, traj, flags) -> np.ndarray:
    """Per row: whether any row of its trajectory has the flag (an env's per-step ``won``)."""
    n = len(flags)
    code = _pair_codes(_ids(group, "index", n), _ids(traj, "traj_index", n))
    f = _to_numpy(flags, "won", n).astype(bool)
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


def score_steps(steps: Steps, estimator: str = "crbc", *, device=None, **params):
    """Advantage of every input row ``[B]``: a torch tensor on ``device`` (a ``torch.device``,
    a string, or None for the CPU).

    CPU: the compiled numba engine where the estimator has one (else the fastest exact backend
    `crbc_viz.api.score` picks). CUDA: ``crbc`` at exact depth runs fused on the device
    (`crbc_viz.backends.torch.fused`: merge, batched solve and credit there; only the step keys
    are uploaded); other estimators use their batched torch twin on the device (the numpy
    reference where an estimator has none) and the result is moved to the device.
    """
    import torch

    from ..api import score

    dev = torch.device(device) if device is not None else torch.device("cpu")
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


def broadcast(row_adv, response_mask, dtype=None):
    """``[B]`` row advantages -> ``[B, L]`` token advantages, zero outside the response mask."""
    import torch

    mask = torch.as_tensor(response_mask)
    dtype = dtype or (mask.dtype if mask.is_floating_point() else torch.float32)
    return row_adv.to(device=mask.device, dtype=dtype).unsqueeze(-1) * mask.to(dtype)


def token_steps(mask, starts=None, *, what: str = "step starts"):
    """Per token, the step of its row it belongs to ``[B, L]`` (int64), and steps per row ``[B]``.

    Without ``starts``, a step starts where a run of ``mask == 1`` starts (one assistant turn
    between masked-out environment / tool tokens). ``starts`` gives, per row, the token offsets
    where its steps start instead. A token belongs to the last step started at or before it;
    tokens before the first step belong to step 0.
    """
    import torch

    m = torch.as_tensor(mask).bool()
    B, L = m.shape
    if starts is None:
        begin = m.clone()
        begin[:, 1:] &= ~m[:, :-1]
    else:
        begin = torch.zeros(B, L, dtype=torch.bool)
        for r, s in enumerate(starts):
            s = np.asarray(s, dtype=np.int64).reshape(-1)
            if len(s) and (s.min() < 0 or s.max() >= L or np.any(np.diff(s) <= 0)):
                raise IntegrationInputError(
                    f"{what}: row {r}: offsets must increase within 0..{L - 1}, got {s.tolist()}"
                )
            begin[r, torch.as_tensor(s)] = True
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
    names=("anchors", "actions"),
    **params,
):
    """Credit for rows that are whole trajectories (verl, TRL), per token ``[B, L]`` float64.

    Args:
        index: ``[B]`` group of each row. The row itself is the trajectory.
        token_rewards: ``[B, L]``; a step's reward is the sum over its tokens.
        tok_step, n_steps: from `token_steps`.
        anchors: per row, a sequence with one anchor per step; ``actions`` likewise (optional);
            ``success`` one bool per row (optional; else the row's summed reward > 0).

    Returns:
        ``[B, L]`` tensor on ``device`` (default the rewards' device): each token carries its
        step's advantage (not yet masked).
    """
    import torch

    rewards = torch.as_tensor(token_rewards)
    B = rewards.shape[0]
    K = max(int(n_steps.max()) if B else 0, 1)
    ts = tok_step.clamp(max=K - 1).to(rewards.device)
    step_r = torch.zeros(B, K, dtype=torch.float64, device=rewards.device)
    step_r.scatter_add_(1, ts, rewards.double())
    counts = n_steps.cpu().numpy().astype(np.int64)
    for label, per_row in zip(names, (anchors, actions)):
        if per_row is None:
            continue
        for r in range(B):
            if len(per_row[r]) != counts[r]:
                raise IntegrationInputError(
                    f"{source}: row {r}: {len(per_row[r])} {label} for {counts[r]} steps"
                )
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
    flat_s = None if success is None else _to_numpy(success, "success", B).astype(bool)[row]
    grp = _ids(index, "index", B)[row]
    steps = canonical_steps(
        grp, row, step, flat_anchor, flat_r, actions=flat_a, success=flat_s, source=source
    )
    dev = rewards.device if device is None else torch.device(device)
    step_adv = score_steps(steps, estimator, device=dev, **params)
    grid = torch.zeros(B, K, dtype=torch.float64, device=dev)
    grid[valid.to(dev)] = step_adv
    return torch.gather(grid, 1, ts.to(dev))
