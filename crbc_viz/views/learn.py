"""Figures of the Learn page, sized for a lecture room (large fonts, few labels), and larger
still in projector mode (``projector=True``: every legend, tick and axis label at least
`PROJECTOR_MIN_FONT` px).

Pure: each function returns a plotly Figure or an HTML string; nothing imports streamlit.
Colours come from `colors` (the one diverging credit scale of the app).
"""

from __future__ import annotations

import math
import re

import numpy as np

from .. import teaching as T
from .._extras import require
from ..graph import AnchorGraph
from .colors import CREDIT_COLORSCALE, FAILURE_COLOR, SUCCESS_COLOR, credit_color, credit_limit
from .graph_page import LAYER_BLANK, layered_page
from .learn_tables import (  # noqa: F401  (the lessons' tables and names; re-exported)
    CLOSURE_COLUMN,
    GATE_OFF_COLUMN,
    anchor_counts,
    anchor_name,
    anchor_text,
    branching_anchors,
    combination_steps,
    combination_table,
    default_anchor,
    default_combination_rollout,
    depth_column,
    depth_table,
    good_steps_blamed,
    moved_anchors,
    node_of_key,
    pair_values,
    prediction_key,
    rare_route_numbers,
    rollout_names,
    rollout_options,
    superscripts,
    visit_local_table,
)
from .projector import PROJECTOR_FONT_SIZE, PROJECTOR_MIN_FONT, TITLE_CHARS, projector_fonts, wrap_title

go = require("plotly.graph_objects", __name__)

__all__ = [
    "LAYER_BLANK",
    "layered_page",
    "FONT_SIZE",
    "PROJECTOR_FONT_SIZE",
    "PROJECTOR_MIN_FONT",
    "TITLE_CHARS",
    "MARK_RULE",
    "export_config",
    "with_png_button",
    "projector_graph",
    "wrap_title",
    "verdict_title",
    "grpo_figure",
    "visit_local_figure",
    "depth_gap_figure",
    "rare_route_figure",
    "combination_figure",
    "LESSONS",
    "SOKOBAN_GROUP",
    "TRAP_ACTION",
    "SAFE_ACTION",
    "TRAP_ANCHOR",
    "rollout_names",
    "node_of_key",
    "default_combination_rollout",
    "traj_ids",
    "route_table",
    "superscripts",
    "anchor_name",
    "good_steps_blamed",
    "rollout_options",
    "anchor_counts",
    "branching_anchors",
    "default_anchor",
    "anchor_text",
    "pair_values",
    "visit_local_table",
    "anchor_visits",
    "moved_anchors",
    "depth_table",
    "depth_column",
    "CLOSURE_COLUMN",
    "GATE_OFF_COLUMN",
    "readable",
    "rare_route_numbers",
    "combination_steps",
    "combination_table",
    "prediction_key",
]

# The lessons and their data sets (re-exported: the page imports views, not teaching).
LESSONS = T.LESSONS
MARK_RULE = T.MARK_RULE
SOKOBAN_GROUP = T.SOKOBAN_GROUP
TRAP_ACTION, SAFE_ACTION, TRAP_ANCHOR = T.TRAP_ACTION, T.SAFE_ACTION, T.TRAP_ANCHOR
traj_ids, route_table, anchor_visits = T.traj_ids, T.route_table, T.anchor_visits

#: Base font size of every Learn figure (readable from the back of a lecture room).
FONT_SIZE = 18
_POS, _NEG, _GREY = CREDIT_COLORSCALE[-1][1], CREDIT_COLORSCALE[0][1], "#9a9a9a"


def export_config(filename: str, fmt: str = "svg") -> dict:
    """plotly ``config`` whose camera button downloads ``filename.<fmt>`` (``svg`` or ``png``,
    2× scale) for slides."""
    if fmt not in ("svg", "png"):
        raise ValueError(f"export format must be 'svg' or 'png', got {fmt!r}")
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": fmt, "filename": filename, "scale": 2},
        "modeBarButtonsToRemove": ["lasso2d", "select2d"],
    }


def _style(
    fig: go.Figure,
    height: int,
    title: str | None = None,
    *,
    projector: bool = False,
    title_chars: int = TITLE_CHARS,
    axis_on_top: bool = False,
) -> go.Figure:
    """Fonts, margins, title and legend of a Learn figure. Title on top (wrapped, the margin
    grown to hold its lines; above the tick labels of an ``axis_on_top``), legend under the
    plot: they never overlap, whatever the width. In projector mode every font is raised to at
    least `PROJECTOR_MIN_FONT`."""
    base = PROJECTOR_FONT_SIZE if projector else FONT_SIZE
    title_size = base + 4
    text = wrap_title(title, title_chars) if title else None
    n_lines = text.count("<br>") + 1 if text else 0
    fig.update_layout(
        height=height + (n_lines - 1) * int(title_size * 1.3),
        font={"size": base, "color": "#222"},
        template="plotly_white",
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        # Above the plot area, the top margin grown to hold every line of it.
        title={
            "text": text,
            "x": 0.01,
            "xanchor": "left",
            "y": 1.0,
            "yref": "paper",
            "yanchor": "bottom",
            "automargin": True,
            # An axis on top holds one row of unturned tick labels and its title.
            "pad": {"b": 12 + (int(3.2 * base) if axis_on_top else 0)},
            "font": {"size": title_size},
        }
        if text
        else None,
        # At the foot of the figure: plotly grows the bottom margin to hold it under the ticks.
        legend={
            "orientation": "h",
            "yref": "container",
            "y": 0,
            "yanchor": "bottom",
            "x": 0,
            "font": {"size": base - 2},
        },
        hoverlabel={"font_size": base - 2},
    )
    return projector_fonts(fig) if projector else fig


_EXPORT_NAME = """
<script>
// The graph's own PNG / SVG buttons save the whole graph under this lesson's name.
document.body.setAttribute("data-crbc-name", "__NAME__");
</script>
"""


_PROJECTOR = """
<style>
  #crbc-head { font-size: 16px !important; line-height: 22px !important; }
  #crbc-legend .bar { width: 120px !important; height: 12px !important; }
  #crbc-tools button { font-size: 16px !important; }
  div.vis-tooltip, table.crbc-tab { font-size: 16px !important; }
</style>
"""


def with_png_button(page: str, filename: str, projector: bool = False) -> str:
    """Name the export of a `graph_html` page: its own PNG / SVG buttons (in the row above the
    drawing, clear of the zoom buttons in its corners) save the whole graph as ``filename``.
    With ``projector``, see `projector_graph`."""
    safe = "".join(ch for ch in filename if ch.isalnum() or ch in "-_") or "graph"
    page = page.replace("</body>", _EXPORT_NAME.replace("__NAME__", safe) + "</body>", 1)
    return projector_graph(page) if projector else page


def projector_graph(page: str) -> str:
    """A `graph_html` page for a projector: legend, tools and tooltips at 16 px, and every node
    and edge label at least `PROJECTOR_MIN_FONT` px on screen at the fitted scale (the page's
    smallest label, which its script applies in canvas units: a fixed factor on a canvas
    drawn at a scale below 1 left them at 12–15 px)."""
    page = re.sub(
        r"data-crbc-min-label='[^']*'", f"data-crbc-min-label='{PROJECTOR_MIN_FONT:g}'", page, count=1
    )
    # In the head: a style parsed after the page's script would grow the legend row after the
    # first fit, shrinking the canvas and vis-network's zoom with it.
    if "</head>" in page:
        return page.replace("</head>", _PROJECTOR + "</head>", 1)
    return page.replace("</body>", _PROJECTOR + "</body>", 1)


# ---------------------------------------------------------------- lesson 1
def grpo_figure(
    graph: AnchorGraph,
    group_adv: np.ndarray,
    bellman_adv: np.ndarray | None = None,
    *,
    group: int = 0,
    max_steps: int = 16,
    projector: bool = False,
) -> go.Figure:
    """Rollouts × steps heatmap of the GRPO advantage (one colour per row), each cell labelled
    with its action; ``▲`` marks `MARK_RULE` (``bellman_adv [S]`` = the closure's Q − V) —
    good moves blamed anyway. Columns are "step 0", "step 1", …: rollout ids such as the toy
    group's ``t1`` would read as step names otherwise."""
    b = graph.batch
    t_lo, t_hi = int(b.group_traj_offsets[group]), int(b.group_traj_offsets[group + 1])
    width = int(min(b.traj_len[t_lo:t_hi].max(initial=1), max_steps))
    ids = b.steps["traj_id"].astype(str).to_numpy()
    acts = (
        b.steps["action"].fillna("").astype(str).to_numpy()
        if "action" in b.steps
        else np.full(b.num_steps, "")
    )
    z = np.full((t_hi - t_lo, width), np.nan)
    text = [[""] * width for _ in range(t_hi - t_lo)]
    ylab = []
    n_marked = 0
    for row, t in enumerate(range(t_lo, t_hi)):
        s_lo, s_hi = int(b.traj_offsets[t]), int(b.traj_offsets[t + 1])
        ok = bool(b.traj_success[t])
        ylab.append(f"{ids[s_lo]} {'✓' if ok else '✗'} {group_adv[s_lo]:+.2f}")
        for i, s in enumerate(range(s_lo, min(s_hi, s_lo + width))):
            z[row, i] = group_adv[s]
            good = bellman_adv is not None and not ok and bellman_adv[s] > 1e-9
            n_marked += good
            a = acts[s] if len(acts[s]) <= 12 else acts[s][:11] + "…"
            text[row][i] = ("▲ " if good else "") + a
    lim = credit_limit(z)
    cols = [f"step {i}" for i in range(width)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=cols,
            y=ylab,
            text=text,
            texttemplate="%{text}",
            textfont={"size": FONT_SIZE - 4},
            colorscale=CREDIT_COLORSCALE,
            zmin=-lim,
            zmax=lim,
            xgap=2,
            ygap=2,
            colorbar={"title": {"text": "A<sup>G</sup>"}, "thickness": 16},
            hovertemplate="rollout %{y} · %{x}<br>%{text}<br>Aᴳ = %{z:+.3f}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", title=None)
    # Tick labels are the step numbers under an axis title "step", never turned: a turned label
    # is taller than the room the title leaves above the plot. Past 8 columns every k-th is shown.
    k = -(-width // 8)
    fig.update_xaxes(
        side="top",
        title={"text": "step", "standoff": 4},
        tickangle=0,
        tickmode="array",
        tickvals=cols[::k],
        ticktext=[str(i) for i in range(0, width, k)],
    )
    title = "GRPO: one number per rollout, copied to every step"
    if bellman_adv is not None:
        title += f" · {n_marked} step{'' if n_marked == 1 else 's'} marked ▲"
    return _style(
        fig, height=max(300, 70 + 56 * (t_hi - t_lo)), title=title, projector=projector, axis_on_top=True
    )


# ---------------------------------------------------------------- lesson 3
def visit_local_figure(
    visits: dict,
    anchor_name: str,
    closure_q: dict | None = None,
    closure_v: float | None = None,
    *,
    projector: bool = False,
) -> go.Figure:
    """The realized returns G of every visit of one anchor (dots, one column per action), their
    per-action means Q⁰(s,a) (bars) and the anchor mean V⁰(s) (dashed line); the closure's
    Q(s,a) and V(s) as hollow diamonds / dotted line when given (a preview of lesson 4)."""
    actions = list(visits["q0"])
    v0 = visits["v0"]
    fig = go.Figure()
    q0 = [visits["q0"][a] for a in actions]
    lim = credit_limit([q - v0 for q in q0])
    xs_bar = list(range(len(actions)))
    fig.add_trace(
        go.Bar(
            x=xs_bar,
            y=q0,
            name="Q⁰(s,a): mean of G",
            marker={"color": [credit_color(q - v0, lim) for q in q0]},
            width=0.6,
            customdata=actions,
            hovertemplate="%{customdata}<br>Q⁰ = %{y:.4f}<extra></extra>",
        )
    )
    # Dots spread evenly within each action's column.
    xs = np.zeros(len(visits["G"]))
    for j, a in enumerate(actions):
        idx = [i for i, x in enumerate(visits["action"]) if x == a]
        xs[idx] = j + (np.linspace(-0.22, 0.22, len(idx)) if len(idx) > 1 else 0.0)
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=visits["G"],
            mode="markers",
            name="one visit's G = β<sup>T−t+1</sup>·R",
            marker={
                "size": 16,
                "color": [SUCCESS_COLOR if s else FAILURE_COLOR for s in visits["success"]],
                "line": {"width": 1.5, "color": "#fff"},
            },
            customdata=np.stack([visits["traj"], visits["t"]], axis=1) if len(visits["G"]) else None,
            hovertemplate="rollout %{customdata[0]} · step %{customdata[1]}<br>G = %{y:.4f}<extra></extra>",
        )
    )
    # The line's label sits right of the plot area, on white: never on a bar or under a dot.
    fig.add_hline(y=v0, line_dash="dash", line_color="#333", line_width=2)
    fig.add_annotation(
        text=f"V⁰(s)<br>= {v0:.3f}",
        xref="paper",
        x=1.0,
        xanchor="left",
        y=v0,
        yref="y",
        showarrow=False,
        align="left",
        font={"size": FONT_SIZE - 2, "color": "#222"},
        bgcolor="#fff",
    )
    if closure_q:
        fig.add_trace(
            go.Scatter(
                x=[actions.index(a) for a in actions if a in closure_q],
                y=[closure_q[a] for a in actions if a in closure_q],
                mode="markers",
                name="closure Q(s,a) (lesson 4)",
                marker={"symbol": "diamond-open", "size": 20, "color": "#000", "line": {"width": 3}},
            )
        )
    if closure_v is not None and math.isfinite(closure_v):
        fig.add_hline(y=closure_v, line_dash="dot", line_color="#777")
        fig.add_annotation(
            text=f"closure V(s)<br>= {closure_v:.3f}",
            xref="paper",
            x=1.0,
            xanchor="left",
            y=closure_v,
            yref="y",
            yanchor="top" if closure_v < v0 else "bottom",
            showarrow=False,
            align="left",
            font={"size": FONT_SIZE - 4, "color": "#222"},
            bgcolor="#fff",
        )
    # Each action's A⁰ under its name, clear of the bars and the dots.
    ticks = [f"{a}<br>A⁰ = {q - v0:+.2f}" for a, q in zip(actions, q0)]
    # Dots at G = 0 sit clear above the axis, their labels a gap further down: never on a dot.
    fig.update_xaxes(
        tickmode="array", tickvals=list(range(len(actions))), ticktext=ticks, title=None, ticklabelstandoff=10
    )
    top = max([*visits["G"].tolist(), *q0, 0.0]) if len(visits["G"]) else 1.0
    fig.update_yaxes(title="realized return G", range=[-0.15, max(1.05, top * 1.25)])
    fig = _style(
        fig, 480, f"Visits of anchor {anchor_name}: what their own suffixes say", projector=projector
    )
    fig.update_layout(margin={"r": 130})
    return fig


# ---------------------------------------------------------------- lesson 4
def readable(x: float) -> str:
    """A number as a person reads it: three decimals, or ``< 0.001`` (never ``3.11e-01``)."""
    x = float(x)
    if not math.isfinite(x):
        return "—"
    if x != 0 and abs(x) < 0.0005:
        return "< 0.001" if x > 0 else "> −0.001"
    return f"{x:.3f}"


def depth_gap_figure(
    depths,
    err: np.ndarray,
    bound: np.ndarray,
    selected_k: int | None,
    beta: float,
    *,
    projector: bool = False,
    title_chars: int = TITLE_CHARS,
) -> go.Figure:
    """Observed ‖A^∞ − A^(K)‖∞ and its guaranteed bound 2β^K/(1 − β)·‖TV⁰ − V⁰‖∞ (the bound on
    the gap to the closure after K backups, `analysis.depth.depth_bound`) against K on a log
    axis, with the current K marked (K = ∞: gap 0, shown as a note). The title says that the
    bound, not the gap, shrinks like β^K. Hover text reads in decimals (`readable`)."""
    depths = list(depths)
    floor = 1e-16
    fig = go.Figure()
    b = np.asarray(bound, dtype=np.float64)
    if np.isfinite(b).any():
        fig.add_trace(
            go.Scatter(
                x=depths,
                y=np.where(np.isfinite(b), np.maximum(b, floor), np.nan),
                mode="lines",
                name="guaranteed bound 2βᴷ/(1 − β)·‖TV⁰ − V⁰‖",
                line={"color": _NEG, "dash": "dash", "width": 3},
                customdata=[readable(x) for x in b],
                hovertemplate="K = %{x}<br>bound = %{customdata}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=depths,
            y=np.maximum(err, floor),
            mode="lines+markers",
            name="observed gap ‖A<sup>∞</sup> − A<sup>(K)</sup>‖<sub>∞</sub>",
            line={"color": _POS, "width": 3},
            marker={"size": 8},
            customdata=[readable(x) for x in err],
            hovertemplate="K = %{x}<br>gap = %{customdata}<extra></extra>",
        )
    )
    if selected_k is not None and 0 <= selected_k < len(depths):
        fig.add_trace(
            go.Scatter(
                x=[selected_k],
                y=[max(err[selected_k], floor)],
                mode="markers",
                name=f"K = {selected_k}",
                marker={"size": 20, "color": "#000", "symbol": "circle-open", "line": {"width": 3}},
            )
        )
        fig.add_vline(x=selected_k, line_dash="dot", line_color="#555")
    else:
        fig.add_annotation(
            text="K = ∞: the closure itself (gap 0)",
            xref="paper",
            yref="paper",
            x=0.98,
            y=0.95,
            showarrow=False,
            font={"size": FONT_SIZE - 2},
        )
    fig.update_yaxes(type="log", dtick=2, exponentformat="power", title="sup-norm gap (log)")
    # Ticks chosen by plotly for the width at hand (a fixed step crowds a narrow column).
    fig.update_xaxes(title="backup depth K", range=[-0.5, max(depths, default=0) + 0.5])
    return _style(
        fig,
        460,
        f"Gap to the closure, under a bound that shrinks like β<sup>K</sup> (β\u00a0=\u00a0{beta:g})",
        projector=projector,
        title_chars=title_chars,
    )


# ---------------------------------------------------------------- lesson 5
def verdict_title(credits: dict, action: str) -> str:
    """What the estimators say about ``action`` (the first of each ``credits[name]`` pair):
    "opposite verdicts" only while one praises it (credit > 0) and another blames it (< 0)."""
    vals = {n: c[0] for n, c in credits.items() if math.isfinite(c[0])}
    pos = [n for n, v in vals.items() if v > 1e-12]
    neg = [n for n, v in vals.items() if v < -1e-12]
    head = "Same anchor, same data — "
    if not vals:
        return f"No rollout takes ‘{action}’ here: no verdict on it"
    if pos and neg:
        return head + f"opposite verdicts on ‘{action}’"
    if pos:
        return head + f"every estimator here praises ‘{action}’"
    if neg:
        return head + f"every estimator here blames ‘{action}’"
    return head + f"no estimator here gives ‘{action}’ credit either way"


def rare_route_figure(credits: dict, actions: tuple[str, str], *, projector: bool = False) -> go.Figure:
    """Grouped bars: each estimator's step credit (``credits[name] = (credit of actions[0],
    credit of actions[1])``) for the trapped and the safe action at the start anchor, under a
    title that says whether they agree on the trapped action (`verdict_title`)."""
    names = list(credits)
    fig = go.Figure()
    for k, (act, col) in enumerate(zip(actions, ("#b35806", "#542788"))):
        vals = [credits[n][k] for n in names]
        fig.add_trace(
            go.Bar(
                x=names,
                y=vals,
                name=act,
                marker={"color": col},
                text=[f"{v:+.2f}" for v in vals],
                textposition="outside",
                textfont={"size": FONT_SIZE},
            )
        )
    fig.add_hline(y=0, line_color="#000", line_width=1)
    lim = max([abs(v) for n in names for v in credits[n]] + [1e-9])
    fig.update_yaxes(title="step credit at ‘start’", range=[-1.35 * lim, 1.35 * lim], zeroline=False)
    fig.update_layout(barmode="group", bargap=0.3)
    return _style(fig, 460, verdict_title(credits, actions[0]), projector=projector)


# ---------------------------------------------------------------- lesson 6
def combination_figure(
    labels: list[str], group_term: np.ndarray, step_term: np.ndarray, title: str, *, projector: bool = False
) -> go.Figure:
    """Per step: the trajectory term w_G·A^G and the step term w_S·A^S as bars side by side
    (stacked), with their sum — the advantage the policy loss uses — as a black diamond."""
    total = group_term + step_term
    lim = credit_limit(step_term)
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=labels, y=group_term, name="w<sub>G</sub>·A<sup>G</sup> (trajectory)", marker={"color": _GREY}
        )
    )
    # The step bars take the credit colour of their sign; the legend shows both colours.
    fig.add_trace(
        go.Bar(
            x=labels,
            y=step_term,
            name="w<sub>S</sub>·A<sup>S</sup> (step)",
            marker={"color": [credit_color(v, lim) for v in step_term]},
            showlegend=False,
            legendgroup="step",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=total,
            mode="markers",
            name="A = w<sub>G</sub>·A<sup>G</sup> + w<sub>S</sub>·A<sup>S</sup>",
            marker={"symbol": "diamond", "size": 14, "color": "#000"},
        )
    )
    for name, v in (
        ("w<sub>S</sub>·A<sup>S</sup> > 0 (step)", lim or 1.0),
        ("w<sub>S</sub>·A<sup>S</sup> < 0 (step)", -(lim or 1.0)),
    ):
        fig.add_trace(
            go.Bar(
                x=[None],
                y=[None],
                name=name,
                legendgroup="step",
                marker={"color": credit_color(v, lim or 1.0)},
            )
        )
    fig.update_layout(barmode="relative")
    fig.add_hline(y=0, line_color="#000", line_width=1)
    fig.update_xaxes(tickangle=-45, tickfont={"size": FONT_SIZE - 5})
    fig.update_yaxes(title="advantage")
    return _style(fig, 500, title, projector=projector)
