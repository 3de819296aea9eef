"""Group-by statistics over integer segment ids: count, mean, std and the z-score."""

from __future__ import annotations

import numpy as np

__all__ = ["segment_stats", "segment_zscore", "no_spread"]


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


def no_spread(x: np.ndarray, seg: np.ndarray, num: int) -> np.ndarray:
    """Whether every member of each segment has the same value ``[num]`` (an exact test, no
    tolerance; an empty segment gives False)."""
    x = np.asarray(x, dtype=np.float64)
    xmax = np.full(num, -np.inf)
    xmin = np.full(num, np.inf)
    np.maximum.at(xmax, seg, x)
    np.minimum.at(xmin, seg, x)
    return xmax == xmin


def segment_zscore(
    x: np.ndarray,
    seg: np.ndarray,
    num: int,
    *,
    ddof: int = 1,
    eps: float = 1e-6,
    center: bool = True,
    scale: bool = True,
):
    """(x − mean_seg) / (std_seg + eps) per segment; segments with < 2 members or no
    spread (all values equal, or a std that rounds to 0) give exactly 0, whatever ``eps``
    (0 included).

    Returns:
        ``(z [len(x)], mean [num], std [num], count [num])``.
    """
    x = np.asarray(x, dtype=np.float64)
    cnt, mean, std = segment_stats(x, seg, num, ddof=ddof)
    degenerate = (cnt < 2) | no_spread(x, seg, num) | (std == 0)
    z = x - mean[seg] if center else x.copy()
    if scale:
        # The degenerate rows are overwritten below; a divisor of 1 there keeps 0/0 out.
        z = z / (np.where(degenerate, 1.0, std)[seg] + eps)
    z = np.where(degenerate[seg], 0.0, z)
    return z, mean, std, cnt
