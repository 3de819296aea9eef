"""Group-by statistics over integer segment ids: count, mean, std and the z-score.

Written once for numpy arrays and torch tensors (`crbc_viz.ops.xp`): the torch backend calls
these same functions on its tensors, on any device."""

from __future__ import annotations

import numpy as np

from .xp import float_array, namespace, seg_max, seg_min, seg_sum, unit_roundoff

__all__ = [
    "segment_stats",
    "segment_zscore",
    "no_spread",
    "roundoff_tol",
    "F64_EPS",
    "F32_EPS",
    "SPREAD_ULPS",
]


def segment_stats(
    x: np.ndarray, seg: np.ndarray, num: int, *, ddof: int = 1, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(count [num], mean [num], std [num])`` of ``x`` per segment ``seg`` (ids in [0, num)).

    ``weights`` (optional, per element) weigh the count, the mean and the squared deviations
    alike (verl-agent's cross-steps statistics weigh rollouts by length). The std divides by
    ``max(count − ddof, 1)``; an empty segment has mean 0 and std 0.
    """
    x = float_array(x)
    xp = namespace(x)
    w = xp.ones_like(x) if weights is None else float_array(weights, like=x)
    cnt = seg_sum(w, seg, num)
    mean = seg_sum(w * x, seg, num) / xp.clip(cnt, min=1)
    sq = seg_sum(w * (x - mean[seg]) ** 2, seg, num)
    return cnt, mean, xp.sqrt(sq / xp.clip(cnt - ddof, min=1))


#: Round-off unit of float64 and of float32 (the float32 paths of the torch backend).
F64_EPS = float(np.finfo(np.float64).eps)
F32_EPS = float(np.finfo(np.float32).eps)
#: Round-off units allowed per term behind a value (see `roundoff_tol`).
SPREAD_ULPS = 4.0


def roundoff_tol(magnitude, terms, *, eps: float = F64_EPS):
    """The largest spread that is round-off: ``SPREAD_ULPS · eps · terms · magnitude``.

    The one rule of "no spread within round-off" (docs/estimators.md, "Zero spread"): a set of
    values whose max − min is at most this has no spread, and every estimator that divides by a
    spread (a std, a z-score, max(σ, σ_min), |A|) gives exactly 0 there. ``magnitude`` is the
    size of what the values were computed from (at least their own largest |x|), ``terms`` the
    number of floating-point steps that can each add one rounding to them: the members of a
    segment of logged values; the steps of the group behind values from a closure solve or a
    discounted sum (the solve's error grows with the empirical chain's absorption time, which
    the group's steps bound). A non-finite magnitude allows no spread but 0.
    """
    magnitude = float_array(magnitude)
    xp = namespace(magnitude)
    terms = terms if isinstance(terms, (int, float)) else float_array(terms, like=magnitude)
    tol = SPREAD_ULPS * eps * terms * magnitude
    return xp.where(xp.isfinite(tol), tol, 0.0)


def no_spread(
    x: np.ndarray,
    seg: np.ndarray,
    num: int,
    *,
    magnitude: np.ndarray | None = None,
    terms: np.ndarray | float | None = None,
) -> np.ndarray:
    """Whether each segment's values agree within round-off ``[num]``: max − min ≤
    `roundoff_tol`, with the segment's largest |x| or ``magnitude`` (per element) and its
    largest ``terms`` (per element, or one number; by default the segment's members). Equal
    values always qualify; an empty segment gives False."""
    x = float_array(x)
    xp = namespace(x)
    seg = np.asarray(seg) if isinstance(x, np.ndarray) else seg
    xmax = seg_max(x, seg, num, -np.inf)
    xmin = seg_min(x, seg, num, np.inf)
    mag_el = xp.abs(x)
    if magnitude is not None:
        mag_el = xp.maximum(mag_el, xp.abs(float_array(magnitude, like=x)))
    mag = seg_max(mag_el, seg, num, 0.0)
    if terms is None:
        n = seg_sum(xp.ones_like(x), seg, num)
    elif isinstance(terms, (int, float)) or np.ndim(terms) == 0:
        n = float(terms)
    else:
        n = seg_max(float_array(terms, like=x), seg, num, 0.0)
    spread = xmax - xmin
    return (xmax >= xmin) & ((spread == 0) | (spread <= roundoff_tol(mag, n, eps=unit_roundoff(x))))


def segment_zscore(
    x: np.ndarray,
    seg: np.ndarray,
    num: int,
    *,
    ddof: int = 1,
    eps: float = 1e-6,
    center: bool = True,
    scale: bool = True,
    magnitude: np.ndarray | None = None,
    terms: np.ndarray | float | None = None,
):
    """(x − mean_seg) / (std_seg + eps) per segment; segments with < 2 members or no
    spread (values that agree within round-off, `no_spread` with ``magnitude`` and
    ``terms``, or a std that rounds to 0) give exactly 0, whatever ``eps`` (0 included).

    Returns:
        ``(z [len(x)], mean [num], std [num], count [num])``.
    """
    x = float_array(x)
    xp = namespace(x)
    cnt, mean, std = segment_stats(x, seg, num, ddof=ddof)
    degenerate = (cnt < 2) | no_spread(x, seg, num, magnitude=magnitude, terms=terms) | (std == 0)
    z = x - mean[seg] if center else xp.asarray(x, copy=True)
    if scale:
        # The degenerate rows are overwritten below; a divisor of 1 there keeps 0/0 out.
        z = z / (xp.where(degenerate, 1.0, std)[seg] + eps)
    z = xp.where(degenerate[seg], 0.0, z)
    return z, mean, std, cnt
