"""Group-by statistics over integer segment ids: count, mean, std and the z-score."""

from __future__ import annotations

import numpy as np

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
    w = np.ones(len(x)) if weights is None else np.asarray(weights, dtype=np.float64)
    cnt = np.bincount(seg, weights=w, minlength=num)
    mean = np.bincount(seg, weights=w * x, minlength=num) / np.maximum(cnt, 1)
    sq = np.bincount(seg, weights=w * (x - mean[seg]) ** 2, minlength=num)
    return cnt, mean, np.sqrt(sq / np.maximum(cnt - ddof, 1))


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
    magnitude = np.asarray(magnitude, dtype=np.float64)
    tol = SPREAD_ULPS * eps * np.asarray(terms, dtype=np.float64) * magnitude
    return np.where(np.isfinite(tol), tol, 0.0)


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
    x = np.asarray(x, dtype=np.float64)
    seg = np.asarray(seg)
    xmax = np.full(num, -np.inf)
    xmin = np.full(num, np.inf)
    np.maximum.at(xmax, seg, x)
    np.minimum.at(xmin, seg, x)
    mag_el = np.abs(x)
    if magnitude is not None:
        mag_el = np.maximum(mag_el, np.abs(np.asarray(magnitude, dtype=np.float64)))
    mag = np.zeros(num)
    np.maximum.at(mag, seg, mag_el)
    if terms is None:
        n = np.bincount(seg, minlength=num)
    elif np.ndim(terms) == 0:
        n = float(terms)
    else:
        n = np.zeros(num)
        np.maximum.at(n, seg, np.asarray(terms, dtype=np.float64))
    spread = xmax - xmin
    return (xmax >= xmin) & ((spread == 0) | (spread <= roundoff_tol(mag, n)))


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
    x = np.asarray(x, dtype=np.float64)
    cnt, mean, std = segment_stats(x, seg, num, ddof=ddof)
    degenerate = (cnt < 2) | no_spread(x, seg, num, magnitude=magnitude, terms=terms) | (std == 0)
    z = x - mean[seg] if center else x.copy()
    if scale:
        # The degenerate rows are overwritten below; a divisor of 1 there keeps 0/0 out.
        z = z / (np.where(degenerate, 1.0, std)[seg] + eps)
    z = np.where(degenerate[seg], 0.0, z)
    return z, mean, std, cnt
