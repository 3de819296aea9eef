"""Canonical steps -> credit (step 3 of `crbc_viz.integrations._core`): the estimator through
`crbc_viz.api.score`, on the CPU or on a CUDA device (`_on_device`); which kernel runs there is
the kernel table's choice (`crbc_viz.estimators.registry.kernel_for`)."""

from __future__ import annotations

import numpy as np

from .._extras import require
from ..data import RolloutBatch
from ..errors import BackendUnavailable
from ..io.anchor_rules import active as active_rule
from ._rows import IntegrationInputError, Steps, _id_codes, _pair_codes, _short, row_flags
from .cadence import _after_scoring


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

    One call of `crbc_viz.api.score`, on a backend chosen by where the result goes. CPU: the
    compiled numba engine where the estimator has one (else the fastest exact backend ``auto``
    picks). On a device (`_on_device`: CUDA): the estimator's torch backend there (the numpy
    reference where it has none, its result moved to the device); the kernel table picks the
    row within it, so ``crbc`` at exact depth runs fused on the device (merge, batched solve and
    credit there; only the step keys are uploaded) and ``crbc`` at a finite depth its batched
    twin. Every N-th call hands the scored batch to the logger
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
    spec, _ = resolve_params(estimator, params)
    batch = steps.batch
    if active_rule().merge is not None:  # RTMC signatures, similarity: re-key the whole batch
        from ..anchor_merge import merge_anchors

        batch = merge_anchors(batch, active_rule())
    backend, where = _where(spec, dev)
    res = score(batch, estimator, backend=backend, device=where, **params)
    _after_scoring(batch)
    return torch.as_tensor(np.asarray(res.advantage, np.float64)[steps.row_step], device=dev)


def _where(spec, dev) -> tuple[str, str]:
    """The ``(backend, device)`` `score_steps` asks `crbc_viz.api.score` for."""
    if _on_device(dev):
        return ("torch", str(dev)) if spec.torch_fn is not None else ("numpy", "cpu")
    from ..backends.numba import available

    return ("numba" if spec.numba_fn is not None and available() else "auto"), "cpu"
