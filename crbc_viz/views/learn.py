"""Figures of the Learn page, sized for a projector (large fonts, few labels).

Pure: each function returns a plotly Figure or an HTML string; nothing imports streamlit.
Colours come from `colors` (the one diverging credit scale of the app).
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from ..graph import AnchorGraph
from .colors import (CREDIT_COLORSCALE, FAILURE_COLOR, SUCCESS_COLOR, credit_color, credit_limit)
from .graph_view import esc

__all__ = ["FONT_SIZE", "export_config", "with_png_button", "grpo_figure", "visit_local_figure",
           "depth_gap_figure", "rare_route_figure", "combination_figure"]

#: Base font size of every Learn figure (readable from the back of a lecture room).
FONT_SIZE = 18
_POS, _NEG, _GREY = CREDIT_COLORSCALE[-1][1], CREDIT_COLORSCALE[0][1], "#9a9a9a"


def export_config(filename: str, fmt: str = "svg") -> dict:
    """plotly ``config`` whose camera button downloads ``filename.<fmt>`` (``svg`` or ``png``,
    2× scale) for slides."""
    if fmt not in ("svg", "png"):
        raise ValueError(f"export format must be 'svg' or 'png', got {fmt!r}")
    return {"displaylogo": False,
            "toImageButtonOptions": {"format": fmt, "filename": filename, "scale": 2},
            "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def _style(fig: go.Figure, height: int, title: str | None = None) -> go.Figure:
    # Title on top, legend under the plot: they never overlap, whatever the width.
    fig.update_layout(height=height, font={"size": FONT_SIZE, "color": "#222"},
                      template="plotly_white",
                      margin={"l": 10, "r": 10, "t": 70 if title else 30, "b": 10},
                      title={"text": title, "x": 0.01, "xanchor": "left", "y": 0.98,
                             "yanchor": "top", "font": {"size": FONT_SIZE + 4}} if title else None,
                      legend={"orientation": "h", "y": -0.24, "yanchor": "top", "x": 0,
                              "font": {"size": FONT_SIZE - 2}},
                      hoverlabel={"font_size": FONT_SIZE - 2})
    return fig


_PNG_BUTTON = """
<button id="crbc-png" title="Download the drawing as PNG (for slides)"
  style="position:absolute;bottom:8px;right:8px;z-index:6;font-size:14px;padding:4px 10px;
         background:#fff;border:1px solid #999;border-radius:4px;cursor:pointer">⤓ PNG</button>
<script>
(function () {
  var btn = document.getElementById("crbc-png");
  // The whole graph, not the part in view: `crbcExport` (graph_view) fits, draws, restores.
  btn.onclick = function () { if (window.crbcExport) { window.crbcExport("png", "__NAME__"); } };
})();
</script>
"""


_PROJECTOR = """
<style>
  #crbc-legend { font-size: 13px !important; padding: 5px 8px !important; }
  #crbc-legend .bar { width: 120px !important; height: 11px !important; }
</style>
<script>
// Projector sizes: scale every node and edge label (their sizes are set per item).
(function () {
  if (typeof nodes === "undefined" || typeof edges === "undefined") { return; }
  function big(ds, f) {
    ds.update(ds.get().map(function (x) {
      var font = Object.assign({}, x.font || {});
      font.size = Math.round((font.size || 14) * f);
      return {id: x.id, font: font};
    }));
  }
  big(nodes, 1.4); big(edges, 1.6);
})();
</script>
"""


def with_png_button(page: str, filename: str, projector: bool = True) -> str:
    """Add a "⤓ PNG" button to a `graph_html` page: it saves the vis-network canvas (white
    background, without the HTML legend) via ``canvas.toDataURL``. With ``projector``, node
    and edge labels are scaled up (×1.4, ×1.6) and the legend is enlarged."""
    safe = "".join(ch for ch in filename if ch.isalnum() or ch in "-_") or "graph"
    extra = _PNG_BUTTON.replace("__NAME__", safe) + (_PROJECTOR if projector else "")
    return page.replace("</body>", extra + "</body>", 1)


# ---------------------------------------------------------------- lesson 1
def grpo_figure(graph: AnchorGraph, group_adv: np.ndarray, bellman_adv: np.ndarray | None = None,
                *, group: int = 0, max_steps: int = 16) -> go.Figure:
    """Rollouts × steps heatmap of the GRPO advantage (one colour per row), each cell labelled
    with its action; ``▲`` marks steps of failed rollouts whose Bellman advantage
    ``bellman_adv [S]`` (Q − V) is positive — good moves blamed anyway."""
    b = graph.batch
    t_lo, t_hi = int(b.group_traj_offsets[group]), int(b.group_traj_offsets[group + 1])
    width = int(min(b.traj_len[t_lo:t_hi].max(initial=1), max_steps))
    ids = b.steps["traj_id"].astype(str).to_numpy()
    acts = (b.steps["action"].fillna("").astype(str).to_numpy() if "action" in b.steps
            else np.full(b.num_steps, ""))
    z = np.full((t_hi - t_lo, width), np.nan)
    text = [[""] * width for _ in range(t_hi - t_lo)]
    ylab = []
    n_marked = 0
    for row, t in enumerate(range(t_lo, t_hi)):
        s_lo, s_hi = int(b.traj_offsets[t]), int(b.traj_offsets[t + 1])
        ok = bool(b.traj_success[t])
        ylab.append(f"{ids[s_lo]} {'✓' if ok else '✗'}")
        for i, s in enumerate(range(s_lo, min(s_hi, s_lo + width))):
            z[row, i] = group_adv[s]
            good = bellman_adv is not None and not ok and bellman_adv[s] > 1e-9
            n_marked += good
            a = acts[s] if len(acts[s]) <= 12 else acts[s][:11] + "…"
            text[row][i] = ("▲ " if good else "") + a
    lim = credit_limit(z)
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"t{i}" for i in range(width)], y=ylab, text=text, texttemplate="%{text}",
        textfont={"size": FONT_SIZE - 4}, colorscale=CREDIT_COLORSCALE, zmin=-lim, zmax=lim,
        xgap=2, ygap=2, colorbar={"title": {"text": "A<sup>G</sup>"}, "thickness": 16},
        hovertemplate="%{y} · %{x}<br>%{text}<br>A^G = %{z:+.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title=None)
    fig.update_xaxes(side="top", title=None)
    title = "GRPO: one number per rollout, copied to every step"
    if bellman_adv is not None:
        title += f" (▲ = good step in a failed rollout: {n_marked})"
    return _style(fig, height=max(300, 70 + 56 * (t_hi - t_lo)), title=title)


# ---------------------------------------------------------------- lesson 3
def visit_local_figure(visits: dict, anchor_name: str, closure_q: dict | None = None,
                       closure_v: float | None = None) -> go.Figure:
    """The realized returns G of every visit of one anchor (dots, one column per action), their
    per-action means Q⁰(s,a) (bars) and the anchor mean V⁰(s) (dashed line); the closure's
    Q(s,a) and V(s) as hollow diamonds / dotted line when given (a preview of lesson 4)."""
    actions = list(visits["q0"])
    v0 = visits["v0"]
    fig = go.Figure()
    q0 = [visits["q0"][a] for a in actions]
    lim = credit_limit([q - v0 for q in q0])
    xs_bar = list(range(len(actions)))
    fig.add_trace(go.Bar(x=xs_bar, y=q0, name="Q⁰(s,a): mean of G",
                         marker={"color": [credit_color(q - v0, lim) for q in q0]}, width=0.6,
                         text=[f"A⁰ {q - v0:+.2f}" for q in q0], textposition="outside",
                         textfont={"size": FONT_SIZE - 2}, customdata=actions,
                         hovertemplate="%{customdata}<br>Q⁰ = %{y:.4f}<extra></extra>"))
    # Dots spread evenly within each action's column.
    xs = np.zeros(len(visits["G"]))
    for j, a in enumerate(actions):
        idx = [i for i, x in enumerate(visits["action"]) if x == a]
        xs[idx] = j + (np.linspace(-0.22, 0.22, len(idx)) if len(idx) > 1 else 0.0)
    fig.add_trace(go.Scatter(
        x=xs, y=visits["G"], mode="markers", name="one visit's G = β<sup>T−t+1</sup>·R",
        marker={"size": 16, "color": [SUCCESS_COLOR if s else FAILURE_COLOR for s in visits["success"]],
                "line": {"width": 1.5, "color": "#fff"}},
        customdata=np.stack([visits["traj"], visits["t"]], axis=1) if len(visits["G"]) else None,
        hovertemplate="rollout %{customdata[0]} · t%{customdata[1]}<br>G = %{y:.4f}<extra></extra>"))
    fig.add_hline(y=v0, line_dash="dash", line_color="#333", line_width=2,
                  annotation_text=f"V⁰(s) = {v0:.3f}", annotation_position="top right",
                  annotation_font_size=FONT_SIZE - 2)
    if closure_q:
        fig.add_trace(go.Scatter(x=[actions.index(a) for a in actions if a in closure_q],
                                 y=[closure_q[a] for a in actions if a in closure_q],
                                 mode="markers", name="closure Q(s,a) (lesson 4)",
                                 marker={"symbol": "diamond-open", "size": 20, "color": "#000",
                                         "line": {"width": 3}}))
    if closure_v is not None and math.isfinite(closure_v):
        fig.add_hline(y=closure_v, line_dash="dot", line_color="#777",
                      annotation_text=f"closure V(s) = {closure_v:.3f}",
                      annotation_position="bottom right", annotation_font_size=FONT_SIZE - 4)
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(actions))), ticktext=actions,
                     title=None)
    top = max([*visits["G"].tolist(), *q0, 0.0]) if len(visits["G"]) else 1.0
    fig.update_yaxes(title="realized return G", range=[-0.05, max(1.05, top * 1.25)])
    return _style(fig, 480, f"Visits of anchor {anchor_name}: what their own suffixes say")


# ---------------------------------------------------------------- lesson 4
def depth_gap_figure(depths, err: np.ndarray, bound: np.ndarray, selected_k: int | None,
                     beta: float) -> go.Figure:
    """Observed ‖A^∞ − A^(K)‖∞ and the Corollary-3 bound against K on a log axis, with the
    current K marked (K = ∞: gap 0, shown as a note)."""
    depths = list(depths)
    floor = 1e-16
    fig = go.Figure()
    b = np.asarray(bound, dtype=np.float64)
    if np.isfinite(b).any():
        fig.add_trace(go.Scatter(x=depths, y=np.where(np.isfinite(b), np.maximum(b, floor), np.nan),
                                 mode="lines", name="Corollary-3 bound",
                                 line={"color": _NEG, "dash": "dash", "width": 3}))
    fig.add_trace(go.Scatter(x=depths, y=np.maximum(err, floor), mode="lines+markers",
                             name="observed ‖A<sup>∞</sup> − A<sup>(K)</sup>‖<sub>∞</sub>", line={"color": _POS, "width": 3},
                             marker={"size": 8}))
    if selected_k is not None and 0 <= selected_k < len(depths):
        fig.add_trace(go.Scatter(x=[selected_k], y=[max(err[selected_k], floor)], mode="markers",
                                 name=f"K = {selected_k}", marker={"size": 20, "color": "#000",
                                                                   "symbol": "circle-open",
                                                                   "line": {"width": 3}}))
        fig.add_vline(x=selected_k, line_dash="dot", line_color="#555")
    else:
        fig.add_annotation(text="K = ∞: the closure itself (gap 0)", xref="paper", yref="paper",
                           x=0.98, y=0.95, showarrow=False, font={"size": FONT_SIZE - 2})
    fig.update_yaxes(type="log", dtick=2, exponentformat="power", title="sup-norm gap (log)")
    fig.update_xaxes(title="backup depth K", dtick=2)
    return _style(fig, 460, f"Gap to the closure shrinks like β<sup>K</sup> (β = {beta:g})")


# ---------------------------------------------------------------- lesson 5
def rare_route_figure(credits: dict, actions: tuple[str, str]) -> go.Figure:
    """Grouped bars: each estimator's step credit (``credits[name] = (credit of actions[0],
    credit of actions[1])``) for the trapped and the safe action at the start anchor."""
    names = list(credits)
    fig = go.Figure()
    for k, (act, col) in enumerate(zip(actions, ("#b35806", "#542788"))):
        vals = [credits[n][k] for n in names]
        fig.add_trace(go.Bar(x=names, y=vals, name=act, marker={"color": col},
                             text=[f"{v:+.2f}" for v in vals], textposition="outside",
                             textfont={"size": FONT_SIZE}))
    fig.add_hline(y=0, line_color="#000", line_width=1)
    lim = max([abs(v) for n in names for v in credits[n]] + [1e-9])
    fig.update_yaxes(title="step credit at ‘start’", range=[-1.35 * lim, 1.35 * lim],
                     zeroline=False)
    fig.update_layout(barmode="group", bargap=0.3)
    return _style(fig, 460, "Same anchor, same data — opposite verdicts on the jump")


# ---------------------------------------------------------------- lesson 6
def combination_figure(labels: list[str], group_term: np.ndarray, step_term: np.ndarray,
                       title: str) -> go.Figure:
    """Per step: the trajectory term w_G·A^G and the step term w_S·A^S as bars side by side
    (stacked), with their sum — the advantage the policy loss uses — as a black diamond."""
    total = group_term + step_term
    lim = credit_limit(step_term)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=group_term, name="w<sub>G</sub>·A<sup>G</sup> (trajectory)",
                         marker={"color": _GREY}))
    # The step bars take the credit colour of their sign; the legend shows both colours.
    fig.add_trace(go.Bar(x=labels, y=step_term, name="w<sub>S</sub>·A<sup>S</sup> (step)",
                         marker={"color": [credit_color(v, lim) for v in step_term]},
                         showlegend=False, legendgroup="step"))
    fig.add_trace(go.Scatter(x=labels, y=total, mode="markers",
                             name="A = w<sub>G</sub>·A<sup>G</sup> + w<sub>S</sub>·A<sup>S</sup>",
                             marker={"symbol": "diamond", "size": 14, "color": "#000"}))
    for name, v in (("w<sub>S</sub>·A<sup>S</sup> > 0 (step)", lim or 1.0),
                    ("w<sub>S</sub>·A<sup>S</sup> < 0 (step)", -(lim or 1.0))):
        fig.add_trace(go.Bar(x=[None], y=[None], name=name, legendgroup="step",
                             marker={"color": credit_color(v, lim or 1.0)}))
    fig.update_layout(barmode="relative")
    fig.add_hline(y=0, line_color="#000", line_width=1)
    fig.update_xaxes(tickangle=-45, tickfont={"size": FONT_SIZE - 5})
    fig.update_yaxes(title="advantage")
    return _style(fig, 500, title)


def outcome_badge(ok: bool) -> str:
    """A small coloured HTML badge for an outcome (escaped, inline style)."""
    col = SUCCESS_COLOR if ok else FAILURE_COLOR
    return (f"<span style='background:{col};color:#fff;padding:1px 6px;border-radius:3px'>"
            f"{esc('success' if ok else 'failure')}</span>")
