"""Trends across training as a plotly figure (pure: no streamlit)."""
from __future__ import annotations

import pandas as pd

__all__ = ["trends_figure", "METRICS"]

#: Trend columns drawn by default, with their legend labels.
METRICS = {
    "success_rate": "success rate",
    "shared_step_fraction": "steps at shared anchors",
    "nonzero_credit_fraction": "steps with non-zero credit",
    "disagreement": "disagreement (1 − Spearman)",
}


def trends_figure(steps: pd.DataFrame, metrics: list[str] | None = None, *,
                  highlight: int | None = None, title: str | None = None):
    """Line chart of per-train_step metrics: one line per metric (and per run when the table
    holds several), x = ``train_step``; a dashed vertical line at ``highlight``.

    Args:
        steps: `crbc_viz.store.trends.Trends.steps`.
        metrics: columns to draw (default: `METRICS`).
    """
    import plotly.graph_objects as go

    metrics = list(metrics or METRICS)
    fig = go.Figure()
    runs = list(dict.fromkeys(steps["run_id"])) if "run_id" in steps else [None]
    for run in runs:
        df = steps if run is None else steps[steps["run_id"] == run]
        df = df.sort_values("train_step")
        for m in metrics:
            name = METRICS.get(m, m) + (f" · {run}" if len(runs) > 1 else "")
            fig.add_trace(go.Scatter(x=df["train_step"], y=df[m], mode="lines+markers", name=name,
                                     meta={"metric": m, "run_id": run},
                                     hovertemplate="train_step %{x}<br>" + METRICS.get(m, m)
                                     + " %{y:.3f}<extra></extra>"))
    if highlight is not None:
        fig.add_vline(x=highlight, line_dash="dash", line_color="grey")
    fig.update_layout(title=title, xaxis_title="train_step", yaxis_title="fraction",
                      legend_title_text="metric", hovermode="x unified",
                      margin=dict(l=40, r=20, t=40 if title else 20, b=40))
    return fig
