"""The one colour vocabulary of the app: a diverging scale for credit (shared by the graph,
the trajectory table and every plotly chart), a sequential scale for values, and the two
boundary colours.

Pure: no streamlit, no plotting library needed to compute a colour.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "CREDIT_COLORSCALE",
    "VALUE_COLORSCALE",
    "SUCCESS_COLOR",
    "FAILURE_COLOR",
    "MISSING_COLOR",
    "credit_limit",
    "credit_color",
    "value_color",
    "text_color_for",
    "interpolate",
    "reversed_scale",
    "css_gradient",
]

#: Diverging credit scale: red = negative, neutral grey = 0, blue = positive (RdBu ends; the
#: midpoint is a mid grey rather than white so that zero-credit edges stay visible on white).
CREDIT_COLORSCALE: list[list] = [
    [0.0, "#b2182b"],
    [0.25, "#e0826a"],
    [0.5, "#c8c8c8"],
    [0.75, "#6fa8d6"],
    [1.0, "#2166ac"],
]
#: Sequential value scale (viridis-like, low = dark purple, high = yellow).
VALUE_COLORSCALE: list[list] = [
    [0.0, "#440154"],
    [0.25, "#3b528b"],
    [0.5, "#21918c"],
    [0.75, "#5ec962"],
    [1.0, "#fde725"],
]
SUCCESS_COLOR = "#1a9850"
FAILURE_COLOR = "#4d4d4d"
MISSING_COLOR = "#efefef"


def _hex_to_rgb(h: str) -> tuple[int, int, int]:
    h = h.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def interpolate(scale: list[list], t: float) -> str:
    """The colour at position ``t`` in [0, 1] of a plotly-style scale, as ``#rrggbb``."""
    t = min(max(float(t), 0.0), 1.0)
    for (t0, c0), (t1, c1) in zip(scale[:-1], scale[1:]):
        if t <= t1:
            w = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
            r0, g0, b0 = _hex_to_rgb(c0)
            r1, g1, b1 = _hex_to_rgb(c1)
            return f"#{round(r0 + w * (r1 - r0)):02x}{round(g0 + w * (g1 - g0)):02x}{round(b0 + w * (b1 - b0)):02x}"
    return scale[-1][1]


def reversed_scale(scale: list[list]) -> list[list]:
    """The same colours run the other way: the colour at ``t`` is the original's at ``1 - t``."""
    return [[1.0 - float(t), c] for t, c in reversed(scale)]


def css_gradient(scale: list[list]) -> str:
    """A left-to-right CSS ``linear-gradient`` of a plotly-style scale."""
    return "linear-gradient(to right, " + ", ".join(f"{c} {100 * float(t):.0f}%" for t, c in scale) + ")"


def credit_limit(*arrays, floor: float = 1e-9) -> float:
    """Symmetric colour limit: the largest finite |credit| over ``arrays`` (1.0 when none)."""
    m = 0.0
    for a in arrays:
        if a is None:
            continue
        a = np.asarray(a, dtype=np.float64)
        a = a[np.isfinite(a)]
        if a.size:
            m = max(m, float(np.max(np.abs(a))))
    return m if m > floor else 1.0


def credit_color(x: float, limit: float) -> str:
    """Diverging colour of credit ``x`` on [-limit, +limit]; grey for NaN / None."""
    if x is None or not math.isfinite(float(x)):
        return MISSING_COLOR
    return interpolate(CREDIT_COLORSCALE, 0.5 + 0.5 * float(x) / limit)


def value_color(v: float, low: float, high: float) -> str:
    """Sequential colour of value ``v`` on [low, high]; grey for NaN / None."""
    if v is None or not math.isfinite(float(v)):
        return MISSING_COLOR
    span = high - low
    return interpolate(VALUE_COLORSCALE, 0.5 if span <= 0 else (float(v) - low) / span)


def text_color_for(bg: str) -> str:
    """Black or white, whichever reads better on ``bg``."""
    r, g, b = _hex_to_rgb(bg)
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"
