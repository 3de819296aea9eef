"""Comparing two estimators step by step, and the finite-depth family K = 0 … ∞.

Pure: statistics as numbers / DataFrames, charts as plotly Figures.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .._extras import require
from ..analysis.agreement import agreement_by_group, rankdata, sign_agreement, spearman  # noqa: F401
from .colors import CREDIT_COLORSCALE, SUCCESS_COLOR

go = require("plotly.graph_objects", __name__)

FAILED_STEP_COLOR = "#762a83"

__all__ = [
    "spearman",
    "sign_agreement",
    "agreement_by_group",
    "top_disagreements",
    "both_constant",
    "depth_pair_order",
    "scatter_figure",
    "depth_lines_figure",
    "depth_error_figure",
    "rank_matrix",
    "rank_matrix_figure",
    "step_estimator_figure",
    "describe_rho",
]


def both_constant(df: pd.DataFrame, a: str, b: str) -> bool:
    """Whether columns ``a`` and ``b`` are both constant (True for no rows): no ranking to compare."""
    return all(np.ptp(df[x].to_numpy(float)) == 0 for x in (a, b)) if len(df) else True


def depth_pair_order(
    pair_count: np.ndarray, pair_node: np.ndarray, focus_anchor: int | None, k: int = 40
) -> tuple[np.ndarray, int]:
    """The ``k`` pairs the depth-lines chart draws: the most-taken, with the chosen anchor's pairs
    first when there is one; and how many pairs that anchor has."""
    order = np.argsort(-pair_count, kind="stable")[:k]
    if focus_anchor is None:
        return order, 0
    mine = np.flatnonzero(pair_node == focus_anchor)
    order = np.concatenate([mine, [j for j in order if j not in set(mine.tolist())]])[:k].astype(int)
    return order, int(mine.size)


def top_disagreements(df: pd.DataFrame, a: str, b: str, k: int = 10) -> pd.DataFrame:
    """The ``k`` steps where ``a`` and ``b`` differ most: sorted by the absolute gap
    ``|a − b|`` (column ``gap``), larger first, steps in their order on a tie; the percentile
    ranks' gap is kept as ``rank gap`` (it ties on every step of a constant stretch, so it
    does not rank). Steps where either value is undefined (NaN) are left out.

    >>> d = pd.DataFrame({"A": [0.0, 1.0, 0.5, 0.2], "B": [0.0, -1.0, 0.5, 0.1]})
    >>> top_disagreements(d, "A", "B", k=2)["gap"].tolist()
    [2.0, 0.1]
    """
    out = df[df[a].notna() & df[b].notna()].copy()
    out[f"rank [{a}]"] = out[a].rank(pct=True)
    out[f"rank [{b}]"] = out[b].rank(pct=True)
    out["rank gap"] = (out[f"rank [{a}]"] - out[f"rank [{b}]"]).abs()
    out["gap"] = (out[a].astype(float) - out[b].astype(float)).abs()
    return out.sort_values("gap", ascending=False, kind="stable").head(k).reset_index(drop=True)


#: Up to this many steps the scatter is drawn as SVG; above, with WebGL. A WebGL context costs
#: a page more to start (in a browser without a GPU, a software renderer) than SVG costs to
#: draw a few thousand points; above that SVG slows down.
SVG_MAX_POINTS = 2000


def scatter_figure(
    df: pd.DataFrame,
    a: str,
    b: str,
    *,
    quantity: str = "credit",
    highlight: int | None = None,
    title: str = "",
) -> go.Figure:
    """Per-step scatter of estimator ``a`` vs ``b`` (columns of ``df`` from ``step_frame``);
    successful rollouts' steps in green, failed in grey; ``highlight`` (a ``step`` id) ringed.
    SVG up to `SVG_MAX_POINTS` steps, WebGL above."""
    fig = go.Figure()
    trace = go.Scatter if len(df) <= SVG_MAX_POINTS else go.Scattergl
    for ok, name, col in (
        (True, "step of a successful rollout", SUCCESS_COLOR),
        (False, "step of a failed rollout", FAILED_STEP_COLOR),
    ):
        d = df[df["success"] == ok]
        fig.add_trace(
            trace(
                x=d[a],
                y=d[b],
                mode="markers",
                name=name,
                marker={"color": col, "size": 7, "opacity": 0.7},
                customdata=np.stack([d["traj_id"], d["t"], d["action"], d["anchor"], d["step"]], axis=-1)
                if len(d)
                else None,
                hovertemplate=(
                    "rollout %{customdata[0]} · t%{customdata[1]} · %{customdata[3]}<br>"
                    "action %{customdata[2]}<br>"
                    + f"{a}: "
                    + "%{x:.4f}<br>"
                    + f"{b}: "
                    + "%{y:.4f}<extra></extra>"
                ),
            )
        )
    if highlight is not None and (df["step"] == highlight).any():
        d = df[df["step"] == highlight]
        fig.add_trace(
            go.Scatter(
                x=d[a],
                y=d[b],
                mode="markers",
                name="selected step",
                marker={"size": 16, "color": "rgba(0,0,0,0)", "line": {"color": "#000", "width": 2}},
            )
        )
    fig.add_hline(y=0, line_width=1, line_color="#bbb")
    fig.add_vline(x=0, line_width=1, line_color="#bbb")
    fig.update_layout(
        xaxis_title=f"{a} {quantity}",
        yaxis_title=f"{b} {quantity}",
        height=420,
        title=title or None,
        clickmode="event+select",
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        legend={"orientation": "h", "y": 1.08},
    )
    return fig


def depth_lines_figure(
    depths, pair_adv: np.ndarray, pair_adv_inf: np.ndarray, labels, selected_k: int | None = None
) -> go.Figure:
    """A^(K)(s,a) against K for each pair (one line each), with the closure value A^∞ as a
    dotted end mark; lines are coloured by the sign and size of A^∞ on the credit scale."""
    from .colors import credit_color, credit_limit

    depths = list(depths)
    lim = credit_limit(pair_adv_inf)
    fig = go.Figure()
    for j, lab in enumerate(labels):
        col = credit_color(pair_adv_inf[j], lim)
        fig.add_trace(
            go.Scatter(
                x=depths,
                y=pair_adv[:, j],
                mode="lines",
                name=str(lab),
                line={"color": col, "width": 1.5},
                showlegend=len(labels) <= 12,
                hovertemplate=f"{lab}" + "<br>K=%{x}: A=%{y:.4f}<extra></extra>",
            )
        )
    if len(labels):
        fig.add_trace(
            go.Scatter(
                x=[depths[-1] + 1.5] * len(labels),
                y=pair_adv_inf,
                mode="markers",
                name="A^∞ (closure)",
                marker={"symbol": "line-ew-open", "size": 14, "color": "#000"},
                hovertemplate="A^∞ = %{y:.4f}<extra></extra>",
            )
        )
    if selected_k is not None:
        fig.add_vline(x=selected_k, line_dash="dash", line_color="#555")
    fig.update_layout(
        xaxis_title="depth K (right: ∞)",
        yaxis_title="A^(K)(s,a) = Q^(K) − V^(K)",
        height=420,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        legend={"orientation": "h", "y": 1.1},
    )
    return fig


def depth_error_figure(
    depths, err: np.ndarray, bound: np.ndarray, selected_k: int | None = None
) -> go.Figure:
    """‖A^∞ − A^(K)‖∞ against K beside its guaranteed bound 2β^K/(1−β)·‖TV0 − V0‖∞ (log y): after
    K backups the gap to the closure is at most 2β^K/(1−β) times the largest change of any
    anchor's value in the first backup (Corollary 3 of the CRBC paper)."""
    fig = go.Figure()
    floor = 1e-12
    fig.add_trace(
        go.Scatter(
            x=list(depths),
            y=np.maximum(err, floor),
            mode="lines+markers",
            name="‖A^∞ − A^(K)‖∞ (observed)",
            line={"color": CREDIT_COLORSCALE[-1][1]},
        )
    )
    b = np.asarray(bound, dtype=np.float64)
    if np.isfinite(b).any():
        fig.add_trace(
            go.Scatter(
                x=list(depths),
                y=np.where(np.isfinite(b), b, np.nan),
                mode="lines",
                name="Corollary 3 bound",
                line={"color": CREDIT_COLORSCALE[0][1], "dash": "dash"},
            )
        )
    if selected_k is not None:
        fig.add_vline(x=selected_k, line_dash="dash", line_color="#555")
    fig.update_yaxes(type="log", dtick=1, exponentformat="power")
    fig.update_layout(
        xaxis_title="depth K",
        yaxis_title="sup-norm gap",
        height=420,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        legend={"orientation": "h", "y": 1.1},
    )
    return fig


def rank_matrix(df: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """Spearman ρ between every pair of the columns ``names`` of ``df`` (NaN where a column is
    constant: no ranking to compare)."""
    m = pd.DataFrame(np.nan, index=names, columns=names)
    for i, a in enumerate(names):
        for b in names[i:]:
            r = (
                spearman(df[a], df[b])
                if a != b
                else (1.0 if np.ptp(df[a].to_numpy(dtype=float)) > 0 else math.nan)
            )
            m.loc[a, b] = m.loc[b, a] = r
    return m


def rank_matrix_figure(m: pd.DataFrame, *, title: str = "") -> go.Figure:
    """The rank-correlation matrix as a labelled heatmap (−1 … 1; blank where undefined)."""
    z = m.to_numpy(dtype=np.float64)
    text = [["—" if not math.isfinite(v) else f"{v:.2f}" for v in row] for row in z]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(m.columns),
            y=list(m.index),
            zmin=-1,
            zmax=1,
            colorscale=CREDIT_COLORSCALE,
            text=text,
            texttemplate="%{text}",
            hovertemplate="%{y} vs %{x}: ρ = %{text}<extra></extra>",
            colorbar={"title": "ρ"},
        )
    )
    fig.update_layout(
        height=120 + 34 * len(m),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        title=title or None,
        yaxis={"autorange": "reversed"},
    )
    return fig


def step_estimator_figure(values: pd.DataFrame, *, title: str = "") -> go.Figure:
    """Step × estimator heatmap: rows = estimators, columns = steps (``t0 · action``); each
    row scaled to its own largest |credit| (scales differ between methods), the value printed."""
    z = values.to_numpy(dtype=np.float64).T
    lim = np.nanmax(np.abs(z), axis=1, keepdims=True) if z.size else np.ones((0, 1))
    lim = np.where(np.isfinite(lim) & (lim > 0), lim, 1.0)
    text = [["—" if not math.isfinite(v) else f"{v:+.2f}" for v in row] for row in z]
    fig = go.Figure(
        go.Heatmap(
            z=z / lim,
            x=list(values.index),
            y=list(values.columns),
            zmin=-1,
            zmax=1,
            colorscale=CREDIT_COLORSCALE,
            text=text,
            texttemplate="%{text}",
            showscale=False,
            hovertemplate="%{y} at %{x}: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        height=120 + 30 * values.shape[1],
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        title=title or None,
        yaxis={"autorange": "reversed"},
        xaxis={"type": "category"},
    )
    return fig


def describe_rho(rho: float, a: str, b: str, df: pd.DataFrame) -> str:
    """ρ as text, or why it is undefined (a constant side, too few steps)."""
    if math.isfinite(rho):
        return f"{rho:.3f}"
    n = int((np.isfinite(df[a].to_numpy(float)) & np.isfinite(df[b].to_numpy(float))).sum())
    if n < 2:
        return "undefined (fewer than 2 steps)"
    const = [x for x in dict.fromkeys((a, b)) if np.ptp(df[x].to_numpy(float)) == 0]
    return f"undefined ({' and '.join(const)} constant here)" if const else "undefined"
