"""Trends across training as a plotly figure (pure: no streamlit)."""

from __future__ import annotations

import pandas as pd

__all__ = ["trends_figure", "METRICS"]

#: Trend columns drawn by default, with their legend labels.
METRICS = {
    "success_rate": "success rate",
    "shared_step_fraction": "steps at shared anchors",
    "nonzero_credit_fraction": "steps with non-zero credit",
    "credit_abs_mean": "mean |credit|",
    "trainer_adv_abs_mean": "mean |trainer advantage|",
    "disagreement": "disagreement (1 − Spearman)",
}


def trends_figure(
    steps: pd.DataFrame,
    metrics: list[str] | None = None,
    *,
    highlight: int | None = None,
    title: str | None = None,
):
    """Per-train_step metrics, x = ``train_step``, a dashed vertical line at ``highlight``.

    One run: one line per metric on a shared axis (trace names = metric labels). Several runs:
    one panel per metric (own y axis), the runs overlaid in one colour each (trace names = run
    ids, one legend entry per run). Every trace's ``meta`` holds its ``metric`` and ``run_id``.

    Args:
        steps: `crbc_viz.analysis.trends.Trends.steps`.
        metrics: columns to draw (default: `METRICS`; absent columns are skipped).
    """
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    metrics = [m for m in (metrics or METRICS) if m in steps]
    runs = list(dict.fromkeys(steps["run_id"])) if "run_id" in steps else [None]
    several = len(runs) > 1 and len(metrics) > 0
    if several:
        fig = make_subplots(
            rows=len(metrics),
            cols=1,
            shared_xaxes=True,
            vertical_spacing=0.04,
            subplot_titles=[METRICS.get(m, m) for m in metrics],
        )
    else:
        fig = go.Figure()
    palette = qualitative.Plotly
    for k, run in enumerate(runs):
        df = steps if run is None else steps[steps["run_id"] == run]
        df = df.sort_values("train_step")
        for i, m in enumerate(metrics):
            label = METRICS.get(m, m)
            tr = go.Scatter(
                x=df["train_step"],
                y=df[m],
                mode="lines+markers",
                name=str(run) if several else label,
                meta={"metric": m, "run_id": run},
                hovertemplate=(f"{run}<br>" if several else "")
                + "train_step %{x}<br>"
                + label
                + " %{y:.3f}<extra></extra>",
            )
            if several:
                tr.update(
                    line_color=palette[k % len(palette)],
                    legendgroup=str(run),
                    showlegend=i == 0,
                    marker_size=4,
                )
                fig.add_trace(tr, row=i + 1, col=1)
            else:
                fig.add_trace(tr)
    if highlight is not None:
        fig.add_vline(x=highlight, line_dash="dash", line_color="grey")
    if several:
        fig.update_xaxes(title_text="train_step", row=len(metrics), col=1)
        fig.update_layout(
            height=160 * len(metrics) + 80,
            legend_title_text="run",
            hovermode="closest",
            title=title,
            margin=dict(l=40, r=20, t=40 if title else 30, b=40),
        )
    else:
        fig.update_layout(
            title=title,
            xaxis_title="train_step",
            yaxis_title="value",
            legend_title_text="metric",
            hovermode="x unified",
            margin=dict(l=40, r=20, t=40 if title else 20, b=40),
        )
    return fig


def point_targets(fig) -> list[str | None]:
    """The run of each trace of a `trends_figure`, by curve number (None: a one-run figure)."""
    return [(tr.meta or {}).get("run_id") if isinstance(tr.meta, dict) else None for tr in fig.data]


def drill_target(targets: list[str | None], point: dict) -> tuple[str | None, int | None]:
    """(run_id, train_step) a clicked point of a `trends_figure` stands for.

    >>> drill_target(["crbc-s0", "grpo-s0"], {"curve_number": 1, "x": 12, "y": 0.5})
    ('grpo-s0', 12)
    >>> drill_target([None], {"curve_number": 0, "x": 3.0})
    (None, 3)
    """
    k = point.get("curve_number")
    run = targets[k] if isinstance(k, int) and 0 <= k < len(targets) else None
    x = point.get("x")
    try:
        ts = int(round(float(x))) if x is not None else None
    except (TypeError, ValueError):
        ts = None
    return (None if run is None else str(run)), ts
