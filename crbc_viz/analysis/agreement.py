"""Agreement between two estimators' step credit: Spearman ρ (average ranks for ties), 1 − ρ
("disagreement") and sign agreement, for one set of steps or per group in one vectorised pass.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["rankdata", "spearman", "sign_agreement", "group_spearman", "agreement_by_group"]

_EPS = 1e-9


def rankdata(x) -> np.ndarray:
    """Average ranks (1-based; ties share the mean of their positions), as
    ``scipy.stats.rankdata`` — without importing scipy.stats (about a second) on the app's
    first page."""
    return pd.Series(np.asarray(x, dtype=np.float64)).rank(method="average").to_numpy()


def group_spearman(group: np.ndarray, a, b, num_groups: int) -> np.ndarray:
    """Spearman's ρ of ``a`` vs ``b`` within each group ``[num_groups]``: Pearson on average ranks
    within the group, over the steps where both are finite. NaN where either side is constant
    or fewer than 2 such steps remain."""
    group = np.asarray(group, dtype=np.int64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    g, a, b = group[ok], a[ok], b[ok]
    df = pd.DataFrame({"g": g, "a": a, "b": b})
    ra = df.groupby("g")["a"].rank(method="average").to_numpy()
    rb = df.groupby("g")["b"].rank(method="average").to_numpy()
    n = np.bincount(g, minlength=num_groups).astype(np.float64)
    ma = np.bincount(g, ra, num_groups) / np.maximum(n, 1)
    mb = np.bincount(g, rb, num_groups) / np.maximum(n, 1)
    da, db = ra - ma[g], rb - mb[g]
    cov = np.bincount(g, da * db, num_groups)
    va, vb = np.bincount(g, da * da, num_groups), np.bincount(g, db * db, num_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = cov / np.sqrt(va * vb)
    rho[(va <= _EPS) | (vb <= _EPS) | (n < 2)] = np.nan
    return np.clip(rho, -1.0, 1.0)


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties); NaN when either side is constant
    or fewer than 2 finite pairs remain."""
    a = np.asarray(a, dtype=np.float64)
    return float(group_spearman(np.zeros(a.shape[0], np.int64), a, b, 1)[0])


def _signs(x: np.ndarray, tol: float) -> np.ndarray:
    return np.where(np.abs(x) <= tol, 0, np.sign(x))


def sign_agreement(a, b, tol: float = 1e-12) -> float:
    """Fraction of steps whose credits have the same sign (−, 0 within ``tol``, +)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    if not ok.any():
        return math.nan
    return float(np.mean(_signs(a[ok], tol) == _signs(b[ok], tol)))


def agreement_by_group(step_group: np.ndarray, a, b, num_groups: int, tol: float = 1e-12) -> pd.DataFrame:
    """Per group: Spearman ρ, 1 − ρ ("disagreement"), sign agreement of ``a`` vs ``b`` and the
    number of steps (one vectorised pass over all groups)."""
    step_group = np.asarray(step_group, dtype=np.int64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    rho = group_spearman(step_group, a, b, num_groups)
    ok = np.isfinite(a) & np.isfinite(b)
    same = (_signs(a, tol) == _signs(b, tol)) & ok
    n_ok = np.bincount(step_group[ok], minlength=num_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        sign = np.where(
            n_ok > 0, np.bincount(step_group[same], minlength=num_groups) / np.maximum(n_ok, 1), np.nan
        )
    return pd.DataFrame(
        {
            "group_index": np.arange(num_groups),
            "spearman": rho,
            "disagreement": 1.0 - rho,
            "sign_agreement": sign,
            "steps": np.bincount(step_group, minlength=num_groups).astype(int),
        }
    )
