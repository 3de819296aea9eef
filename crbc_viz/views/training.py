"""Trends across training as a plotly figure, and the line that says how a followed store is
doing (pure: no streamlit)."""

from __future__ import annotations

import time

import pandas as pd

from .._extras import require

__all__ = [
    "trends_figure",
    "METRICS",
    "live_caption",
    "ago",
    "steps_table",
    "point_targets",
    "point_ties",
    "drill_target",
]

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
    go = require("plotly.graph_objects", "trends_figure")
    make_subplots = require("plotly.subplots").make_subplots

    # A metric with no value at all (no trainer logged an advantage) draws no line: it gets no
    # legend entry and no empty panel either.
    metrics = [m for m in (metrics or METRICS) if m in steps and steps[m].notna().any()]
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
    # Panel i's axes, as make_subplots names them (row 1: x / y, row 2: x2 / y2, …).
    axes = [("x", "y")] + [(f"x{i}", f"y{i}") for i in range(2, len(metrics) + 1)]
    traces = _trend_traces(steps, metrics, runs, axes, several=several)
    layout = _trend_layout(steps, metrics, axes, several=several, highlight=highlight, title=title)
    fig.add_traces(traces)
    fig.update_layout(layout)
    return fig


def _trend_traces(
    steps: pd.DataFrame, metrics: list[str], runs: list, axes: list, *, several: bool
) -> list[dict]:
    """`trends_figure`'s traces: one per run and metric, as plain dicts (in panel ``axes[i]``
    of metric ``i`` when ``several`` runs are drawn)."""
    palette = require("plotly.colors").qualitative.Plotly
    ties = {m: _hover_runs(steps, m) for m in metrics} if several else {}
    # Traces as plain dicts added in one call: a figure of 30 traces built trace by trace (each
    # validated, then placed in its panel) took most of the page's time.
    traces = []
    for k, run in enumerate(runs):
        df = steps if run is None else steps[steps["run_id"] == run]
        df = df.sort_values("train_step")
        # A run's legend entry goes with its first drawn line (not with one it has no value for).
        first = next((i for i, m in enumerate(metrics) if df[m].notna().any()), 0)
        for i, m in enumerate(metrics):
            label = METRICS.get(m, m)
            tr = dict(
                type="scatter",
                x=df["train_step"],
                y=df[m],
                mode="lines+markers",
                name=str(run) if several else label,
                meta={"metric": m, "run_id": run},
                hovertemplate=("%{customdata[0]}<br>" if several else "")
                + "train_step %{x}<br>"
                + _html(label)
                + " %{y:.3f}"
                + ("%{customdata[1]}" if several else "")
                + "<extra></extra>",
            )
            if several:
                tr.update(
                    customdata=[[_html(run), ties[m][run].get(ts, "")] for ts in df["train_step"]],
                    line={"color": palette[k % len(palette)]},
                    legendgroup=str(run),
                    showlegend=i == first,
                    marker={"size": 4},
                    xaxis=axes[i][0],
                    yaxis=axes[i][1],
                )
            traces.append(tr)
    return traces


def _trend_layout(
    steps: pd.DataFrame,
    metrics: list[str],
    axes: list,
    *,
    several: bool,
    highlight: int | None,
    title: str | None,
) -> dict:
    """`trends_figure`'s layout: the dashed line at ``highlight``, the train-step ticks, and
    the panels' (``several`` runs) or the one axis's titles, legend and size."""
    layout: dict = {}
    if highlight is not None:
        # A dashed line across each panel (what add_vline draws, without its per-panel lookups).
        layout["shapes"] = [
            {
                "type": "line",
                "x0": highlight,
                "x1": highlight,
                "xref": xa,
                "y0": 0,
                "y1": 1,
                "yref": f"{ya} domain",
                "line": {"color": "grey", "dash": "dash"},
            }
            for xa, ya in (axes[: len(metrics)] if several else axes[:1])
        ]
    ts = pd.to_numeric(steps["train_step"], errors="coerce").dropna() if "train_step" in steps else []
    xaxis: dict = {}
    if len(ts) and ts.max() - ts.min() <= 12:
        # A run's first steps: one tick per train step (no 0.5 between two steps).
        xaxis = {"tickmode": "linear", "tick0": int(ts.min()), "dtick": 1}
    if several:
        for i, (xa, _) in enumerate(axes[: len(metrics)]):
            name = "xaxis" + xa[1:]
            layout[name] = {**xaxis, "title": {"text": "train_step"}} if i == len(metrics) - 1 else xaxis
        layout.update(
            height=160 * len(metrics) + 80,
            legend={"title": {"text": "run"}},
            hovermode="closest",
            title=title,
            margin=dict(l=40, r=20, t=40 if title else 30, b=40),
        )
    else:
        layout.update(
            title=title,
            xaxis={**xaxis, "title": {"text": "train_step"}},
            yaxis={"title": {"text": "value"}},
            legend={"title": {"text": "metric"}},
            hovermode="x unified",
            margin=dict(l=40, r=20, t=40 if title else 20, b=40),
        )
    return layout


def _html(text: object) -> str:
    """Text for a plotly hover label: its markup characters and template braces inert."""
    import html

    return html.escape(str(text)).replace("%{", "%&#123;")


def _hover_runs(steps: pd.DataFrame, metric: str) -> dict:
    """``{run: {train_step: hover line}}`` for the traces of ``metric``: the other runs drawn
    at the same point (same train_step, equal value), "" where there is none. Points that
    coincide hide each other; the hover names them all, and a click picks the trace on top,
    the one the hover names first."""
    import numpy as np

    pv = steps.drop_duplicates(["train_step", "run_id"]).pivot(
        index="train_step", columns="run_id", values=metric
    )
    vals = pv.to_numpy(dtype=float)  # [S, R]
    same = np.isclose(vals[:, :, None], vals[:, None, :], rtol=0.0, atol=1e-12)
    same &= ~np.isnan(vals)[:, :, None]
    runs = [str(r) for r in pv.columns]
    out: dict = {r: {} for r in pv.columns}
    for i, j, k in zip(*np.nonzero(same)):
        if j != k:
            out[pv.columns[j]].setdefault(pv.index[i], []).append(runs[k])
    return {
        r: {ts: "<br>same point: " + _html(", ".join(o)) for ts, o in by.items()} for r, by in out.items()
    }


def point_targets(fig) -> list[str | None]:
    """The run of each trace of a `trends_figure`, by curve number (None: a one-run figure)."""
    return [(tr.meta or {}).get("run_id") if isinstance(tr.meta, dict) else None for tr in fig.data]


def point_ties(fig) -> list[dict]:
    """Per trace of a `trends_figure`: ``{train_step: the runs drawn at that same point}`` (the
    trace's own run first), from the hover lines `trends_figure` wrote; empty for one run."""
    out = []
    for tr in fig.data:
        meta = tr.meta if isinstance(tr.meta, dict) else {}
        ties = {}
        if tr.customdata is not None and meta.get("run_id") is not None:
            for x, (_, line) in zip(tr.x, tr.customdata):
                others = line.partition("same point: ")[2]
                if others:
                    ties[int(x)] = [str(meta["run_id"])] + _unhtml(others).split(", ")
        out.append(ties)
    return out


def _unhtml(text: str) -> str:
    import html

    return html.unescape(text.replace("%&#123;", "%{"))


def drill_target(
    targets: list[str | None], point: dict, ties: list[dict] | None = None, current: str | None = None
) -> tuple[str | None, int | None]:
    """(run_id, train_step) a clicked point of a `trends_figure` stands for.

    Where several runs' points coincide (`point_ties`), the click falls on the trace drawn on
    top; when the run already chosen (``current``) is one of them, it stays chosen: a click on
    its own curve never jumps to another run that has the same value there.

    >>> drill_target(["crbc-s0", "grpo-s0"], {"curve_number": 1, "x": 12, "y": 0.5})
    ('grpo-s0', 12)
    >>> drill_target([None], {"curve_number": 0, "x": 3.0})
    (None, 3)
    >>> ties = [{2: ["crbc-s0", "gigpo-s0"]}, {2: ["gigpo-s0", "crbc-s0"]}]
    >>> drill_target(["crbc-s0", "gigpo-s0"], {"curve_number": 1, "x": 2}, ties, current="crbc-s0")
    ('crbc-s0', 2)
    """
    k = point.get("curve_number")
    run = targets[k] if isinstance(k, int) and 0 <= k < len(targets) else None
    x = point.get("x")
    try:
        ts = int(round(float(x))) if x is not None else None
    except (TypeError, ValueError):
        ts = None
    if run is not None and current is not None and ties and ts is not None and isinstance(k, int):
        if k < len(ties) and current in ties[k].get(ts, ()):
            run = current
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


#: Columns a step table leads with, in this order (the rest follow as the store has them).
_LEADING = ("run_id", "train_step", "group_id", "traj_id", "step_idx", "action", "reward", "success")


def steps_table(df: pd.DataFrame, *, run: str | None = None, train_step: int | None = None) -> pd.DataFrame:
    """Steps from the store as the page shows them: the rows of ``run`` at ``train_step`` (each
    filter skipped when None), the store's internal columns (``_part``, ``_row``, ``_source``,
    any name starting with ``_``) left out, the identifying columns first. Numeric and boolean
    columns keep their dtype (a table sorts them as numbers); a text column holding other
    values too (a list, a dict) is written as text.

    >>> df = pd.DataFrame({"_part": ["a", "a", "b"], "reward": [-0.5, 1.0, 0.0],
    ...                    "run_id": ["r1", "r2", "r1"], "train_step": [3, 3, 4]})
    >>> t = steps_table(df, run="r1", train_step=3)
    >>> list(t.columns), t["reward"].tolist(), str(t["reward"].dtype)
    (['run_id', 'train_step', 'reward'], [-0.5], 'float64')
    """
    if df.empty:
        return df.loc[:, [c for c in df.columns if not str(c).startswith("_")]]
    keep = pd.Series(True, index=df.index)
    if run is not None and "run_id" in df:
        keep &= df["run_id"].astype(str) == str(run)
    if train_step is not None and "train_step" in df:
        keep &= pd.to_numeric(df["train_step"], errors="coerce") == train_step
    out = df.loc[keep].reset_index(drop=True)
    cols = [c for c in out.columns if not str(c).startswith("_")]
    cols = [c for c in _LEADING if c in cols] + [c for c in cols if c not in _LEADING]
    out = out.loc[:, cols]
    for c in cols:
        if out[c].dtype == object and not out[c].map(lambda v: v is None or isinstance(v, str)).all():
            out[c] = out[c].map(lambda v: v if v is None else str(v))
    return out


#: How a table shows a value that is not defined (a rank correlation of a constant column).
UNDEFINED = "—"


def dash_undefined(values, digits: int = 3) -> list[str]:
    """Values as a table shows them where some are undefined: fixed ``digits`` decimals,
    `UNDEFINED` for NaN / None (a table would write "None"; the column's tooltip says why).

    >>> dash_undefined([0.5, float("nan"), None, 2])
    ['0.500', '—', '—', '2.000']
    """
    return [UNDEFINED if v is None or pd.isna(v) else f"{float(v):.{digits}f}" for v in values]


#: The drill-down's columns: (column of `Trends.groups`, short header, tooltip), in order.
GROUP_COLUMNS = (
    ("group_id", "group", "the group's id in the log"),
    (
        "disagreement",
        "disagreement",
        "1 − Spearman ρ between CRBC and shortest-path step credit; "
        f"{UNDEFINED} = undefined: one of the two is constant in this group",
    ),
    ("success_rate", "success", "share of the group's rollouts that succeeded"),
    ("shared_step_fraction", "shared", "share of steps at an anchor other rollouts visit too"),
    ("nonzero_credit_fraction", "credit ≠ 0", "share of steps with non-zero CRBC credit"),
    ("credit_abs_mean", "|credit|", "mean |CRBC step credit|"),
    (
        "trainer_adv_abs_mean",
        "|trainer adv|",
        f"mean |advantage| the trainer logged; {UNDEFINED} = the trainer logged no advantage for this group",
    ),
    ("rollouts", "rollouts", "rollouts in the group"),
    ("steps", "steps", "steps in the group"),
)


def groups_table(groups: pd.DataFrame) -> pd.DataFrame:
    """One train step's groups as the drill-down shows them: short headers (`GROUP_COLUMNS`,
    the run and train step are the page's choice, not columns), disagreement next to the
    group so that it shows without scrolling sideways; values stay numbers but disagreement
    (and |trainer adv| where a group has none, which a table would write "None"),
    written with 3 decimals and `UNDEFINED` where it is not defined.

    >>> g = pd.DataFrame({"run_id": ["r"], "train_step": [1], "group_id": ["g"],
    ...                   "success_rate": [0.5], "disagreement": [float("nan")]})
    >>> groups_table(g).columns.tolist()
    ['group', 'disagreement', 'success']
    """
    cols = [(c, h) for c, h, _ in GROUP_COLUMNS if c in groups.columns]
    out = groups.loc[:, [c for c, _ in cols]].set_axis([h for _, h in cols], axis=1).reset_index(drop=True)
    if "disagreement" in out:
        # In [0, 2] with fixed decimals: the text sorts as the numbers do, "—" last.
        out["disagreement"] = dash_undefined(out["disagreement"])
    if "|trainer adv|" in out and out["|trainer adv|"].isna().any():
        # A table writes a missing number as "None": a dash instead, its tooltip says why.
        out["|trainer adv|"] = dash_undefined(out["|trainer adv|"])
    return out
