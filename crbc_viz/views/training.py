"""Trends across training as a plotly figure, and the line that says how a followed store is
doing (pure: no streamlit)."""

from __future__ import annotations

import time

import pandas as pd

__all__ = ["trends_figure", "METRICS", "live_caption", "ago"]

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

    The x axis has one tick per train step while the steps span at most 12 (a run followed
    from its start), plotly's own ticks beyond.

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
    ts = pd.to_numeric(steps["train_step"], errors="coerce").dropna() if "train_step" in steps else []
    if len(ts) and ts.max() - ts.min() <= 12:
        # A run's first steps: one tick per train step (no 0.5 between two steps).
        fig.update_xaxes(tickmode="linear", tick0=int(ts.min()), dtick=1)
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


def ago(seconds: float) -> str:
    """A duration as the page says it.

    >>> [ago(s) for s in (0.4, 12, 90, 7200, 200000)]
    ['just now', '12 s ago', '1 min 30 s ago', '2 h ago', '2 d ago']
    """
    s = max(0.0, float(seconds))
    if s < 1:
        return "just now"
    if s < 60:
        return f"{int(s)} s ago"
    if s < 3600:
        m, r = divmod(int(s), 60)
        return f"{m} min {r} s ago" if r else f"{m} min ago"
    if s < 86400:
        return f"{int(s // 3600)} h ago"
    return f"{int(s // 86400)} d ago"


def live_caption(state: dict, incomplete: int = 0, *, now: float | None = None) -> str:
    """What the Across training page says about its store while it follows it: when the store
    last changed, how many sources are still being written, and the watcher's state.

    Args:
        state: `crbc_viz.store.watch.store_state` (``changed_at``: POSIX time of the newest
            manifest write, ``watch``: `crbc_viz.store.watch.read_status` or None).
        incomplete: the store's incomplete sources (`LogStore.summary`).
        now: POSIX time (default: the clock).

    Sources still being written: with a live watcher, the logs it has seen and not yet
    ingested (a log a killed ingest left incomplete is one of them); without one, the
    incomplete sources (an ingest running now, or interrupted).

    >>> live_caption({"changed_at": 100.0, "watch": None}, 0, now=112.0)
    'Store last changed 12 s ago · no source being written'
    >>> w = {"alive": True, "pending": 2, "age_s": 1.5, "stopped": False}
    >>> live_caption({"changed_at": 100.0, "watch": w}, 1, now=101.0)
    'Store last changed 1 s ago · 2 sources still being written · followed by ingest --watch (seen 1 s ago)'
    >>> live_caption({"changed_at": None, "watch": {"error": "watch.json: not JSON"}}, 0, now=1.0)
    'Store holds no source yet · no source being written · watcher status unreadable: watch.json: not JSON'
    """
    now = time.time() if now is None else now
    parts = []
    changed = state.get("changed_at")
    parts.append(
        "Store holds no source yet" if changed is None else f"Store last changed {ago(now - changed)}"
    )
    watch = state.get("watch")
    alive = isinstance(watch, dict) and bool(watch.get("alive"))
    n = int(watch["pending"]) if alive else int(incomplete)
    if n == 0:
        parts.append("no source being written")
    else:
        parts.append(f"{n} source{'' if n == 1 else 's'} still being written")
    if isinstance(watch, dict) and "error" in watch:
        parts.append(f"watcher status unreadable: {watch['error']}")
    elif alive:
        parts.append(f"followed by ingest --watch (seen {ago(watch['age_s'])})")
    elif isinstance(watch, dict):
        how = "stopped" if watch.get("stopped") else "silent"
        parts.append(f"the ingest --watch that followed it {how} {ago(watch.get('age_s', 0.0))}")
    return " · ".join(parts)
