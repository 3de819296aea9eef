"""Token rows (step 4 of `crbc_viz.integrations._core` for trainers that hold one row of tokens per
trajectory): the token tensors checked, cut into steps by their step starts, and each step's
advantage spread back to its tokens."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .._extras import require
from . import _scoring, _threads
from ._rows import (
    CodedRows,
    IntegrationInputError,
    Steps,
    _action_codes,
    _anchor_codes,
    _assemble,
    _id_codes,
    _is_integer,
    _short,
    row_flags,
)
from ._scoring import as_device, score_steps


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

    if _scoring._on_device(t.device) or t.dtype in (torch.bfloat16, torch.complex32):
        return None
    return t.detach().numpy()


def _all_zero_one(mask) -> bool:
    m = _host(mask)
    if m is None:
        return bool(((mask == 0) | (mask == 1)).all())
    # Every value 0 or 1 exactly when the nonzero values (NaN included) are all ones (in each
    # chunk of rows: a chunk's ones are at most its nonzero values).
    if m.dtype == bool:
        return True
    return all(
        _threads.run(
            lambda lo, hi: np.count_nonzero(m[lo:hi]) == np.count_nonzero(m[lo:hi] == 1),
            _row_spans(m),
        )
    )


def _all_finite(rewards) -> bool:
    torch = require("torch", "the trainer adapters")

    r = _host(rewards)
    if r is None:
        return bool(torch.isfinite(rewards).all())
    return all(_threads.run(lambda lo, hi: bool(np.isfinite(r[lo:hi]).all()), _row_spans(r)))


def _row_spans(a: np.ndarray, max_items: int | None = None) -> list[tuple[int, int]]:
    """Chunks of whole rows of ``a`` (`crbc_viz.integrations._threads.spans`)."""
    return _threads.spans(a.shape[0], int(np.prod(a.shape[1:], dtype=np.int64)), max_items)


def masked_row_sum(rewards, mask):
    """``[B]`` float64 on the rewards' device: each row's sum of ``rewards`` over its
    ``mask == 1`` tokens (``mask`` holds only 0 and 1: `token_tensors`), accumulated in float64
    without a float64 copy of the ``[B, L]`` tensors."""
    torch = require("torch", "the trainer adapters")

    r, m = _host(rewards), _host(mask)
    if r is not None and m is not None:
        parts = _threads.run(
            lambda lo, hi: np.einsum("ij,ij->i", r[lo:hi], m[lo:hi], dtype=np.float64), _row_spans(r)
        )
        return torch.from_numpy(np.concatenate(parts))
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
        out = np.empty(np.broadcast_shapes(v.shape, m.shape), like.dtype)
        if out.ndim != 2:
            return torch.from_numpy(np.multiply(v, m, dtype=like.dtype))

        def part(lo: int, hi: int) -> None:
            vs = v[lo:hi] if v.ndim == out.ndim and v.shape[0] == out.shape[0] else v
            np.multiply(vs, m[lo:hi], out=out[lo:hi], dtype=like.dtype)

        _threads.run(part, _row_spans(out))
        return torch.from_numpy(out)
    return values.to(device=mask.device, dtype=dtype) * mask.to(dtype)


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
        m = torch.from_numpy(_both_on(host, host_w)) if host is not None and host_w is not None else m * w
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
        return _run_starts(host)
    if at is not None:
        begin = torch.zeros(B, L, dtype=torch.bool, device=m.device)
        begin[tuple(torch.as_tensor(x, device=m.device) for x in at)] = True
        return begin
    on = m.bool()
    begin = on.clone()
    begin[:, 1:] &= ~on[:, :-1]
    return begin


def _both_on(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(a != 0) & (b != 0)``, chunk by chunk of rows."""
    out = np.empty(a.shape, bool)

    def part(lo: int, hi: int) -> None:
        np.logical_and(a[lo:hi] != 0, b[lo:hi] != 0, out=out[lo:hi])

    _threads.run(part, _row_spans(a))
    return out


def _run_starts(host: np.ndarray) -> np.ndarray:
    """``[B, L]`` bool: True on the first token of each run of nonzero values of ``host``."""
    begin = np.empty(host.shape, bool)

    def part(lo: int, hi: int) -> None:
        on = host[lo:hi] != 0
        begin[lo:hi] = on
        begin[lo:hi, 1:] &= ~on[:, :-1]

    _threads.run(part, _row_spans(host))
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
        if isinstance(begin, np.ndarray):
            parts = _threads.run(lambda lo, hi: begin[lo:hi].sum(-1, dtype=np.int64), _row_spans(begin))
            n = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        else:
            n = begin.sum(-1).cpu().numpy()
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
        starts = _flat_nonzero(self.begin)  # each step's first token, row after row
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
            B, L = self.begin.shape
            flat = v.reshape(-1)
            chunks = _threads.spans(B, L)
            nonzero = _threads.run(lambda lo, hi: np.flatnonzero(flat[lo * L : hi * L]) + lo * L, chunks)
            if sum(map(len, nonzero)) <= len(flat) // 8:  # sparse (a reward per step): add the nonzero ones
                out = _segment_sums(flat, bounds, nonzero, chunks, L)
            else:
                out = _dense_sums(flat, bounds, B, L)
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
            out = np.empty(B * L, like.dtype)
            flat_mask = m.reshape(-1)

            def part(lo: int, hi: int) -> None:
                a, b = lo * L, hi * L
                s0, s1 = np.searchsorted(bounds, [a, b])  # the segments of these rows
                out[a:b] = np.repeat(vals[s0:s1], np.diff(np.r_[bounds[s0:s1], b]))
                np.multiply(out[a:b], flat_mask[a:b], out=out[a:b], casting="unsafe")

            _threads.run(part, _threads.spans(B, L))
            return torch.from_numpy(out.reshape(B, L))
        cell, valid, K = self._cells()
        grid = torch.zeros(cell.shape[0], K, dtype=torch.float64, device=mask.device)
        grid[torch.as_tensor(valid, device=mask.device)] = torch.as_tensor(
            step_values, device=mask.device
        ).double()
        return masked(torch.gather(grid, 1, cell.to(mask.device)), mask, dtype)


#: Tokens per float64 chunk in `Turns.sums` (bounds its temporary memory: 8 MiB a thread).
_CHUNK_TOKENS = 1 << 20


def _flat_nonzero(a: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(a)`` of a ``[B, L]`` array, chunk by chunk of rows."""
    B, L = a.shape
    parts = _threads.run(lambda lo, hi: np.flatnonzero(a[lo:hi]) + lo * L, _threads.spans(B, L))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _segment_sums(flat, bounds, nonzero, chunks, L: int) -> np.ndarray:
    """Per token segment (``bounds``), the float64 sum of its nonzero values ``flat[nonzero]``
    (``nonzero``: per chunk of rows, the flat indices of its nonzero tokens), added in token
    order: adding a zero changes no sum. A segment lies within one row, so within one chunk."""
    out = np.empty(len(bounds))

    def part(k: int, lo: int, hi: int) -> None:
        s0, s1 = np.searchsorted(bounds, [lo * L, hi * L])
        nz = nonzero[k]
        segment = np.searchsorted(bounds, nz, side="right") - 1 - s0
        out[s0:s1] = np.bincount(segment, weights=flat[nz].astype(np.float64), minlength=s1 - s0)

    _threads.run(lambda lo, hi: part(chunks.index((lo, hi)), lo, hi), chunks)
    return out


def _dense_sums(flat, bounds, B: int, L: int) -> np.ndarray:
    """Per token segment (``bounds``), the float64 sum of all its values, a float64 copy of one
    chunk of rows at a time."""
    out = np.empty(len(bounds))

    def part(r0: int, r1: int) -> None:
        lo, hi = np.searchsorted(bounds, [r0 * L, r1 * L])
        chunk = flat[r0 * L : r1 * L].astype(np.float64)
        with np.errstate(over="ignore"):  # an overflowed sum is refused by `_assemble`
            out[lo:hi] = np.add.reduceat(chunk, bounds[lo:hi] - r0 * L)

    if B and L:
        _threads.run(part, _threads.spans(B, L, _CHUNK_TOKENS))
    return out


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
        CodedRows(
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
        ),
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
