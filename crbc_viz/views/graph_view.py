"""The merged anchor graph of one group as a self-contained pyvis (vis-network) HTML page.

Pure: returns a string; nothing is written to disk. Every piece of logged text that reaches a
tooltip is HTML-escaped, and the node/edge JSON is embedded with ``<``, ``>``, ``&`` and ``'``
escaped as ``\\u003c`` etc. (Jinja's ``tojson``), so it cannot close the script tag.

What is drawn and where comes from `crbc_viz.views.layout` (columns by depth, a summary of
large groups); this module turns it into nodes, edges, tooltips, the legend and the page's
script. Physics is off: every position is computed in Python.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass

import numpy as np

from ..graph import FAILURE, SUCCESS, AnchorGraph
from .colors import (
    CREDIT_COLORSCALE,
    FAILURE_COLOR,
    MISSING_COLOR,
    SUCCESS_COLOR,
    VALUE_COLORSCALE,
    credit_color,
    credit_limit,
    css_gradient,
    reversed_scale,
    value_color,
)
from .layout import (
    FAILURE_ID,
    OPEN_STEP,
    SUCCESS_ID,
    Summary,
    group_depths,
    group_edges,
    layered_layout,
    layout_box,
    neighbourhood,
    start_anchors,
    step_depths,
    summarise,
    summary_positions,
)

__all__ = [
    "DEFAULT_MAX_NODES",
    "GraphDrawing",
    "layered_layout",
    "step_depths",
    "select_nodes",
    "neighbourhood",
    "value_meaning",
    "board_html",
    "is_board",
    "graph_html",
    "graph_drawing",
    "summary_note",
    "node_values",
    "edge_credit",
    "pair_values",
    "trajectory_path",
    "value_range",
    "esc",
]

#: Anchors drawn one by one before a group is summarised (`crbc_viz.views.layout.summarise`).
DEFAULT_MAX_NODES = 120
_MAX_TIP_CHARS = 1200
#: Label sizes (canvas px at scale 1): anchors, "+n anchors" clusters, the two boundaries.
_FONT = {"anchor": 16, "cluster": 15, "boundary": 18, "edge": 12}
#: Self-loops at one anchor grow by this much each (px); an edge label is about this wide per
#: character (12 px sans-serif, generous).
_LOOP_STEP = 13.0
_LABEL_PX_PER_CHAR = 7.2


def esc(x) -> str:
    """HTML-escape any value (quotes included)."""
    return html.escape("" if x is None else str(x), quote=True)


def _fmt(x, nd: int = 4) -> str:
    if x is None:
        return "—"
    x = float(x)
    return "—" if not math.isfinite(x) else f"{x:+.{nd}f}" if nd else f"{x:g}"


def _fmt_v(x) -> str:
    if x is None or not math.isfinite(float(x)):
        return "—"
    return f"{float(x):.4f}"


# ---------------------------------------------------------------- per-node / per-edge numbers
def _segment_mean(index: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    s = np.bincount(index[ok], weights=v[ok], minlength=size)
    c = np.bincount(index[ok], minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / np.maximum(c, 1), np.nan)


def node_values(graph: AnchorGraph, result) -> np.ndarray:
    """V per node ``[N]``: the estimator's ``node_value`` where it defines one, else the mean of
    its per-step ``value`` over the node's visits (NaN where undefined)."""
    if result is None:
        return np.full(graph.num_nodes, np.nan)
    if result.node_value is not None:
        return np.asarray(result.node_value, dtype=np.float64)
    return _segment_mean(graph.step_node, result.value, graph.num_nodes)


def pair_values(graph: AnchorGraph, result) -> tuple[np.ndarray, np.ndarray]:
    """(Q, credit) per (node, action) pair ``[P]`` (means over the pair's occurrences where the
    estimator has no per-pair array)."""
    P = graph.pair_node.shape[0]
    if result is None:
        return np.full(P, np.nan), np.full(P, np.nan)
    q = (
        np.asarray(result.pair_q, dtype=np.float64)
        if result.pair_q is not None
        else _segment_mean(graph.step_pair, result.q_value, P)
    )
    c = (
        np.asarray(result.pair_credit, dtype=np.float64)
        if result.pair_credit is not None
        else _segment_mean(graph.step_pair, result.credit, P)
    )
    return q, c


def edge_credit(graph: AnchorGraph, result) -> np.ndarray:
    """Mean step credit over each edge's occurrences ``[E]`` (NaN without a result)."""
    E = graph.edge_pair.shape[0]
    if result is None:
        return np.full(E, np.nan)
    return _segment_mean(graph.step_edge, result.credit, E)


def value_range(values: np.ndarray) -> tuple[float, float]:
    """Colour range for node values: [0, 1] when they all lie there, else their min..max."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return 0.0, 1.0
    lo, hi = float(v.min()), float(v.max())
    if lo >= 0.0 and hi <= 1.0:
        return 0.0, 1.0
    return lo, hi if hi > lo else lo + 1.0


def trajectory_path(graph: AnchorGraph, traj: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, nodes, edges) of trajectory ``traj`` (global index), in step order."""
    lo, hi = int(graph.batch.traj_offsets[traj]), int(graph.batch.traj_offsets[traj + 1])
    steps = np.arange(lo, hi)
    return steps, graph.step_node[steps], graph.step_edge[steps]


# ---------------------------------------------------------------- which anchors
def select_nodes(graph: AnchorGraph, g: int = 0, max_nodes: int = 500, keep=()) -> np.ndarray:
    """Group ``g``'s anchors to draw: all when at most ``max_nodes``, else the ``max_nodes``
    most-visited (ties by id) plus every node in ``keep`` (e.g. a highlighted path)."""
    sl = graph.group_slice(g)
    ids = np.arange(sl.start, sl.stop)
    if ids.size <= max_nodes:
        return ids
    order = np.lexsort((ids, -graph.node_visits[ids]))
    top = ids[order[:max_nodes]]
    return np.unique(np.concatenate([top, np.asarray(list(keep), dtype=np.int64)]))


# ---------------------------------------------------------------- HTML
#: Sokoban text boards (the gym-sokoban / verl-agent rendering): wall, floor, box, target,
#: box on target, player, player on target.
_BOARD_COLOURS = {
    "#": "#5d4037",
    " ": "#f3efe6",
    "_": "#f3efe6",
    "$": "#e0a030",
    ".": "#f3efe6",
    "*": "#e0a030",
    "@": "#1565c0",
    "+": "#1565c0",
}
_BOARD_MARKS = {".": "#d32f2f", "*": "#d32f2f", "+": "#d32f2f"}


def is_board(anchor) -> bool:
    """Whether an anchor's text is a Sokoban board (≥ 3 equal-width rows of board symbols with
    walls and a player)."""
    text = str(anchor)
    rows = text.split("\n")
    return (
        len(rows) >= 3
        and len(rows) <= 40
        and len({len(r) for r in rows}) == 1
        and 3 <= len(rows[0]) <= 40
        and set(text) <= set(_BOARD_COLOURS) | {"\n"}
        and "#" in text
        and ("@" in text or "+" in text)
    )


def board_html(anchor, cell_px: int = 12) -> str:
    """A Sokoban board as a small grid of coloured squares (inline styles only: walls brown,
    boxes amber, targets red dots, the player blue); '' when the text is not a board."""
    if not is_board(anchor):
        return ""
    cells = []
    for row in str(anchor).split("\n"):
        tds = []
        for ch in row:
            mark = _BOARD_MARKS.get(ch)
            dot = (
                (
                    f"<div style='width:{cell_px // 2}px;height:{cell_px // 2}px;margin:auto;"
                    f"border-radius:50%;background:{mark}'></div>"
                )
                if mark
                else ""
            )
            tds.append(
                f"<td style='width:{cell_px}px;height:{cell_px}px;padding:0;"
                f"background:{_BOARD_COLOURS[ch]}'>{dot}</td>"
            )
        cells.append("<tr>" + "".join(tds) + "</tr>")
    return (
        "<table class='crbc-board' style='border-collapse:collapse;margin:4px 0' "
        "title='wall brown · box amber · target red · player blue'>" + "".join(cells) + "</table>"
    )


def _short_label(anchor, local_id: int, max_chars: int = 12) -> str:
    """The anchor's text when it is short enough for the room between columns, else ``s<id>``."""
    text = str(anchor)
    if len(text) <= max_chars and "\n" not in text:
        return text
    return f"s{local_id}"


def _node_tip(
    graph: AnchorGraph,
    n: int,
    local_id: int,
    v: float,
    q: np.ndarray,
    c: np.ndarray,
    estimator: str,
    is_start: bool,
) -> str:
    anchor = str(graph.node_anchor_obs[n])
    if len(anchor) > _MAX_TIP_CHARS:
        anchor = anchor[:_MAX_TIP_CHARS] + " …"
    rows = []
    p_lo, p_hi = int(graph.node_pair_offsets[n]), int(graph.node_pair_offsets[n + 1])
    for p in range(p_lo, min(p_hi, p_lo + 12)):
        rows.append(
            f"<tr><td>{esc(graph.action_names[graph.pair_action[p]])}</td>"
            f"<td>{int(graph.pair_count[p])}</td><td>{_fmt_v(q[p])}</td>"
            f"<td>{_fmt(c[p])}</td></tr>"
        )
    more = f"<div>… {p_hi - p_lo - 12} more actions</div>" if p_hi - p_lo > 12 else ""
    return (
        f"<b>anchor s{local_id}</b>{' (start)' if is_start else ''}<br>"
        f"visits N(s) = {int(graph.node_visits[n])} · distinct actions = "
        f"{int(graph.node_num_actions[n])}<br>V(s) = {_fmt_v(v)} <i>({esc(estimator)})</i>"
        f"{board_html(anchor) or ''}<pre class='crbc-anchor'>{esc(anchor)}</pre>"
        f"<table class='crbc-tab'><tr><th>action</th><th>N(s,a)</th><th>Q</th><th>credit</th></tr>"
        f"{''.join(rows)}</table>{more}"
    )


def _page_style(height_px: int) -> str:
    """The page's layout: the legend and the tools in a row above the canvas (they wrap, never
    overlap), the canvas filling the rest of ``height_px``."""
    return f"""
<style>
  html, body {{ margin: 0; font-family: sans-serif; }}
  body {{ height: {int(height_px)}px; display: flex; flex-direction: column; overflow: hidden; }}
  body > .card {{ flex: 1 1 auto; min-height: 0; width: 100%; border: none !important;
                  display: flex; flex-direction: column; }}
  #mynetwork {{ float: none !important; flex: 1 1 auto; height: auto !important; min-height: 0;
                border: 1px solid #ddd !important; box-sizing: border-box; }}
  #crbc-head {{ display: flex; flex-wrap: nowrap; align-items: flex-start; gap: 8px;
                padding: 3px 6px; font-size: 11px; line-height: 16px; }}
  #crbc-legend {{ flex: 1 1 auto; min-width: 0; }}
  #crbc-legend .item {{ display: inline-block; white-space: nowrap; margin-right: 10px; }}
  #crbc-legend .bar {{ display: inline-block; width: 90px; height: 9px; vertical-align: middle;
                       margin: 0 3px; }}
  #crbc-tools {{ flex: 0 0 auto; white-space: nowrap; }}
  #crbc-tools button {{ font-size: 11px; margin-left: 3px; }}
  div.vis-tooltip {{ max-width: 460px; white-space: normal; font-size: 12px; }}
  pre.crbc-anchor {{ font-size: 11px; background: #f6f6f6; padding: 4px; margin: 4px 0;
                     white-space: pre-wrap; max-height: 220px; overflow: hidden; }}
  table.crbc-tab {{ border-collapse: collapse; font-size: 11px; }}
  table.crbc-tab td, table.crbc-tab th {{ border: 1px solid #ddd; padding: 1px 4px; }}
</style>
"""


_TIP_SCRIPT = """
<script>
// Tooltips are HTML built in Python with every piece of logged text escaped; vis-network 9
// shows string titles as plain text, so turn them into elements here.
(function () {
  if (typeof nodes === "undefined" || typeof edges === "undefined") { return; }
  function el(s) { var d = document.createElement("div"); d.innerHTML = s; return d; }
  function fix(ds) {
    var upd = [];
    ds.get().forEach(function (x) {
      if (typeof x.title === "string") { upd.push({id: x.id, title: el(x.title)}); }
    });
    ds.update(upd);
  }
  fix(nodes); fix(edges);
  if (typeof network !== "undefined") {
    // A click selects: the app (parent window) turns this message into the chosen anchor, or
    // opens a "+n anchors" cluster.
    network.on("click", function (p) {
      var msg = null;
      if (p.nodes && p.nodes.length) {
        var id = String(p.nodes[0]);
        msg = {crbc: "pick", kind: id.indexOf("cluster:") === 0 ? "cluster" : "node", id: id};
      } else if (p.edges && p.edges.length) {
        msg = {crbc: "pick", kind: "edge", id: String(p.edges[0]).split("#")[0]};
      }
      if (msg && window.parent !== window) { window.parent.postMessage(msg, "*"); }
    });
    // Keep zoom and pan across redraws: the parent remembers the last view of this graph.
    var gkey = document.body.getAttribute("data-crbc-graph") || "";
    function tell() {
      if (window.parent === window) { return; }
      window.parent.postMessage({crbc: "view", key: gkey, scale: network.getScale(),
                                 pos: network.getViewPosition()}, "*");
    }
    network.on("dragEnd", tell); network.on("zoom", tell);
    window.addEventListener("message", function (ev) {
      var m = ev.data;
      if (m && m.crbc === "restore" && m.key === gkey && m.scale) {
        network.moveTo({scale: m.scale, position: m.pos, animation: false});
      }
    });
    if (window.parent !== window) { window.parent.postMessage({crbc: "hello", key: gkey}, "*"); }
    // Fit once the frame has a width (also when an expander or tab reveals it after the
    // first draw); the page says it is ready after that first fit.
    var lastW = 0;
    function ready() { document.body.setAttribute("data-crbc-ready", "1"); }
    new ResizeObserver(function () {
      var w = document.body.clientWidth;
      if (lastW === 0 && w > 0) {
        network.once("afterDrawing", ready);
        network.fit({animation: false});
        network.redraw();
      } else if (w === 0) { ready(); }
      lastW = w;
    }).observe(document.body);
    // Export the whole graph (fit first, then restore the view), on a white background.
    window.crbcExport = function (kind, name) {
      var scale = network.getScale(), at = network.getViewPosition();
      network.once("afterDrawing", function () {
        var c = document.querySelector("#mynetwork canvas");
        var o = document.createElement("canvas");
        o.width = c.width; o.height = c.height;
        var x = o.getContext("2d");
        x.fillStyle = "#ffffff"; x.fillRect(0, 0, o.width, o.height); x.drawImage(c, 0, 0);
        var png = o.toDataURL("image/png");
        var a = document.createElement("a");
        a.download = (name || document.body.getAttribute("data-crbc-name") || "graph") + "." + kind;
        if (kind === "png") { a.href = png; }
        else {
          var svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + o.width + "' height='" +
            o.height + "'><image width='" + o.width + "' height='" + o.height + "' href='" +
            png + "'/></svg>";
          a.href = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svg);
        }
        document.body.appendChild(a); a.click(); a.remove();
        network.moveTo({scale: scale, position: at, animation: false});
      });
      network.fit({animation: false});
      network.redraw();
    };
  } else {
    document.body.setAttribute("data-crbc-ready", "1");
  }
})();
</script>
"""


#: What node colour means per estimator: (legend title, higher is better?, SUCCESS label,
#: FAILURE label). Estimators not listed colour by a state value V(s) (higher = better).
VALUE_MEANING = {
    "shortest_path": ("d(s): hops to SUCCESS", False, "SUCCESS\nd = 0", "FAILURE\nd = ∞"),
    "grpo": ("V(s): mean return of the rollouts through s", True, "SUCCESS", "FAILURE"),
}


def credit_meaning(result) -> str:
    """What a tooltip's "credit" is (escaped HTML, '' without a result): the estimator's step
    credit, which for CRBC and visit-local averaging is Q − V divided by max(σ(s), σ_min) and
    gated, so it can be ten times Q − V (0.171 where Q − V = 0.017 and σ_min = 0.1)."""
    if result is None:
        return ""
    p = result.params
    if hasattr(p, "sigma_min") and hasattr(p, "min_actions"):
        return (
            f"<div class='crbc-note'>credit = A<sup>S</sup> = (Q − V) / max(σ(s), σ<sub>min</sub> = "
            f"{float(p.sigma_min):g}), 0 where s has fewer than {int(p.min_actions)} actions: Q − V "
            f"scaled, not Q − V itself <i>({esc(result.estimator)})</i></div>"
        )
    return (
        f"<div class='crbc-note'>credit = {esc(result.estimator)}'s own step credit "
        f"(its formula: Estimators page)</div>"
    )


def value_meaning(estimator: str | None) -> tuple[str, bool, str, str]:
    """(legend title, higher is better, SUCCESS label, FAILURE label) for ``estimator``."""
    return VALUE_MEANING.get(estimator or "", ("V(s)", True, "SUCCESS", "FAILURE"))


@dataclass(frozen=True)
class GraphDrawing:
    """A drawn group: the page, what it draws (`Summary`), and one sentence saying what the
    summary leaves out ('' when every anchor is drawn)."""

    html: str
    summary: Summary
    note: str


def summary_note(summary: Summary) -> str:
    """What a summary draws and what it folds away, for the page ('' when nothing is)."""
    if not summary.summarised:
        return ""
    folded = sum(len(c.members) for c in summary.clusters)
    in_chains = sum(len(c.interior) for c in summary.chains)
    parts = [
        f"Summary of {summary.total:,} anchors: {len(summary.anchors):,} drawn one by one (start "
        f"anchors, the most visited, what you chose)"
    ]
    if summary.chains:
        parts.append(
            f"{len(summary.chains):,} linear chains ({in_chains:,} anchors) drawn as one edge with their length"
        )
    if summary.clusters:
        parts.append(
            f"{folded:,} anchors in {len(summary.clusters):,} “+n anchors” clusters by depth — click one "
            f"to draw {OPEN_STEP} more of it"
        )
    return "; ".join(parts) + "."


def _truncated_steps(graph: AnchorGraph) -> np.ndarray:
    """Steps ``[S]`` after which the rollout ran out of steps (its last step, logged
    ``done=false``, not a success): their edge to FAILURE is a time limit, not an action's."""
    b = graph.batch
    out = np.zeros(b.num_steps, dtype=bool)
    last = b.traj_offsets[1:] - 1
    cut = np.asarray(b.traj_truncated, dtype=bool) & ~np.asarray(b.traj_success, dtype=bool)
    cut &= b.traj_offsets[1:] > b.traj_offsets[:-1]
    out[last[cut]] = True
    return out


class _Credit:
    """Sums of the finite step credits per edge, apart for time-limit steps."""

    def __init__(self, graph: AnchorGraph, result, cut: np.ndarray):
        E = graph.edge_pair.shape[0]
        c = np.full(graph.batch.num_steps, np.nan) if result is None else np.asarray(result.credit, float)
        ok = np.isfinite(c)
        self.step_credit = c
        self.sum = {}
        self.num = {}
        for part, mask in (("act", ~cut), ("time", cut)):
            m = ok & mask
            self.sum[part] = np.bincount(graph.step_edge[m], weights=c[m], minlength=E)
            self.num[part] = np.bincount(graph.step_edge[m], minlength=E)
        self.count = {
            "act": np.bincount(graph.step_edge[~cut], minlength=E),
            "time": np.bincount(graph.step_edge[cut], minlength=E),
        }


def _mean(total: float, n: int) -> float:
    return total / n if n else float("nan")


def _stack_loops(loops: dict, pos: dict, sizes: dict) -> None:
    """Self-loops nest straight up, one `_LOOP_STEP` larger each, so that their labels (drawn
    at the top of each loop) sit one above the other; an anchor whose labels would touch those
    of an anchor placed before it (left to right) starts its stack higher."""
    placed: list[tuple[float, float, float]] = []  # (x, label height, half width) of each label

    def clash(x: float, top: float, half: float) -> bool:
        return any(abs(x - px) < half + ph and abs(top - py) < _LOOP_STEP for px, py, ph in placed)

    for n in sorted(loops, key=lambda it: (pos[it][0], pos[it][1])):
        x, y = pos[n][0], pos[n][1] - sizes.get(n, 0.0)  # a loop starts at the node's rim
        half = [
            _LABEL_PX_PER_CHAR * len(str(e["label"])) / 2.0 + 4.0 if e["label"] else 0.0 for e in loops[n]
        ]
        base = 0
        while base < 40 and any(h and clash(x, y - _LOOP_STEP * (base + k), h) for k, h in enumerate(half)):
            base += 1
        for k, edge in enumerate(loops[n]):
            edge["selfReference"] = {"size": 14.0 + _LOOP_STEP * (base + k), "angle": math.pi / 2}
            if half[k]:
                placed.append((x, y - _LOOP_STEP * (base + k), half[k]))


def graph_drawing(
    graph: AnchorGraph,
    result=None,
    *,
    group: int = 0,
    highlight_traj: int | None = None,
    nodes=None,
    max_nodes: int = DEFAULT_MAX_NODES,
    keep=(),
    opened: dict | None = None,
    height_px: int = 620,
    show_action_labels: bool | None = None,
    estimator: str | None = None,
    selected_node: int | None = None,
    params_text: str = "",
    graph_key: str = "",
    by_step: bool = False,
) -> GraphDrawing:
    """The anchor graph of group ``group`` as a standalone HTML page (vis-network inlined).

    Args:
        graph: the anchor graph (usually a one-group graph).
        result: a `CreditResult` on ``graph`` (node colour = V, edge colour = credit), or None.
        group: group index in ``graph``.
        highlight_traj: global trajectory index whose path is drawn and emphasised (others fade).
        nodes: draw exactly these global node ids (a filtered view: no summary; edges to
            other anchors are left out). Default: `crbc_viz.views.layout.summarise`.
        max_nodes: anchors drawn one by one before the group is summarised.
        keep: global node ids the summary always draws (besides the highlighted path and the
            chosen anchor with its neighbours).
        opened: ``{lo: clicks}`` on the summary's "+n anchors" clusters (``lo``: the first
            depth a cluster gathers, its id ``cluster:<lo>``).
        height_px: page height (the legend row and the canvas).
        show_action_labels: write the action on each edge; default when ≤ 60 edges are drawn.
        estimator: name shown in tooltips and the legend (default ``result.estimator``).
        selected_node: global node id drawn with a thick ring (the chosen anchor).
        params_text: non-default parameters, shown in the legend (e.g. ``beta=0.9``).
        graph_key: names the graph for the parent window's remembered zoom.
        by_step: columns by the highlighted rollout's step (`step_depths`), for large groups.

    Clicking a node or an edge posts ``{crbc: "pick", kind, id}`` to the parent window (the
    app turns it into a selection); the id is the node's global id, ``"src->dst"``, or for a
    cluster ``kind: "cluster"`` with id ``"cluster:<lo>"``.

    Returns:
        `GraphDrawing`; no file is written.
    """
    from pyvis.network import Network

    est = estimator or (result.estimator if result is not None else "—")
    sl = graph.group_slice(group)
    b = graph.batch
    path_steps = np.zeros(0, dtype=np.int64)
    if highlight_traj is not None:
        path_steps, _, _ = trajectory_path(graph, int(highlight_traj))
    path_nodes = set(graph.step_node[path_steps].tolist())
    stepwise = by_step and highlight_traj is not None
    if nodes is not None:
        shown = sorted({int(n) for n in nodes if sl.start <= int(n) < sl.stop})
        depth = step_depths(graph, int(highlight_traj), shown) if stepwise else group_depths(graph, group)
        summary = Summary(tuple(shown), (), (), sl.stop - sl.start, depth)
    else:
        want = {int(n) for n in keep} | path_nodes
        if selected_node is not None:
            want |= set(neighbourhood(graph, [int(selected_node)], group).tolist())
        depth = (
            step_depths(graph, int(highlight_traj), range(sl.start, sl.stop))
            if stepwise
            else group_depths(graph, group)
        )
        summary = summarise(
            graph,
            group,
            max_nodes=max_nodes,
            keep=want,
            opened=opened,
            depths=depth,
            box=layout_box(height_px),
        )
    pos = summary_positions(graph, group, summary, box=layout_box(height_px))
    item = summary.item_of()
    drawn = set(summary.anchors)
    # Room for a label: the usual distance between neighbouring columns (a 16 px label needs
    # about 9 px per character).
    xs = np.unique(np.round([pos[it][0] for it in pos if it not in (SUCCESS_ID, FAILURE_ID)], 1))
    gap = float(np.median(np.diff(xs))) if xs.size > 1 else 200.0
    max_chars = int(min(12, max(4, gap // 9)))

    nv = node_values(graph, result)
    q, c = pair_values(graph, result)
    cut = _truncated_steps(graph)
    cred = _Credit(graph, result, cut)
    step_sl = np.flatnonzero(b.step_group == group)
    limit = credit_limit(result.credit[step_sl] if result is not None else None)
    v_title, higher_better, succ_label, fail_label = value_meaning(est)
    c_note = credit_meaning(result)
    lo, hi = value_range(nv[sl])
    starts = start_anchors(graph, group)
    highlighting = highlight_traj is not None

    net = Network(
        height=f"{int(height_px)}px", width="100%", directed=True, cdn_resources="in_line", heading=""
    )
    vmax = max(int(graph.node_visits[list(drawn)].max()) if drawn else 1, 1)
    for n in summary.anchors:
        local = n - sl.start
        x, y = pos[n]
        v = nv[n]
        on_path = n in path_nodes
        fill = value_color(v, lo, hi) if higher_better else value_color(lo + hi - v, lo, hi)
        chosen = selected_node is not None and n == int(selected_node)
        border = (
            "#d81b60"
            if chosen
            else "#000000"
            if on_path
            else ("#1f1f1f" if n in starts else "#888888" if fill == MISSING_COLOR else fill)
        )
        # Direct append: pyvis's add_node re-scans the node list per node (quadratic).
        net.nodes.append(
            {
                "id": n,
                "label": _short_label(graph.node_anchor_obs[n], local, max_chars),
                "title": _node_tip(graph, n, local, v, q, c, est, n in starts) + c_note,
                "x": float(x),
                "y": float(y),
                "physics": False,
                "shape": "dot",
                "size": float(8 + 12 * math.sqrt(graph.node_visits[n] / vmax)),
                "color": {
                    "background": fill,
                    "border": border,
                    "highlight": {"background": fill, "border": "#000000"},
                    "hover": {"background": fill, "border": "#000000"},
                },
                "borderWidth": 7 if chosen else 4 if on_path else (2 if n in starts else 1),
                "opacity": 1.0 if (not highlighting or on_path) else 0.35,
                "font": {"size": _FONT["anchor"], "color": "#222222"},
            }
        )
    visits = graph.node_visits
    for cl in summary.clusters:
        x, y = pos[cl.id]
        names = ", ".join(f"s{m - sl.start}" for m in cl.members[:5])
        net.nodes.append(
            {
                "id": cl.id,
                "label": f"+{len(cl.members):,}\nanchors",
                "title": (
                    f"<b>+{len(cl.members):,} anchors</b> at depth "
                    f"{cl.lo if cl.lo == cl.hi else f'{cl.lo}–{cl.hi}'} are not drawn one by one "
                    f"(visits {int(visits[cl.members[-1]])}–{int(visits[cl.members[0]])} each; the most "
                    f"visited: {esc(names)}). Click to draw the {OPEN_STEP} most visited of them."
                ),
                "x": float(x),
                "y": float(y),
                "physics": False,
                "shape": "dot",
                "size": float(10 + 4 * math.log10(len(cl.members) + 1)),
                "color": {
                    "background": "#f4f4f4",
                    "border": "#777777",
                    "highlight": {"background": "#e8e8e8", "border": "#000000"},
                    "hover": {"background": "#e8e8e8", "border": "#000000"},
                },
                "shapeProperties": {"borderDashes": [4, 3]},
                "borderWidth": 2,
                "opacity": 0.35 if highlighting else 1.0,
                "font": {"size": _FONT["cluster"], "color": "#333333"},
            }
        )
    for bid, col, lab in ((SUCCESS_ID, SUCCESS_COLOR, succ_label), (FAILURE_ID, FAILURE_COLOR, fail_label)):
        x, y = pos[bid]
        net.nodes.append(
            {
                "id": bid,
                "label": lab,
                "x": float(x),
                "y": float(y),
                "physics": False,
                "shape": "box",
                "color": {"background": col, "border": "#000000"},
                "title": f"<b>{bid}</b>: absorbing boundary (a rollout ends here)",
                "font": {"size": _FONT["boundary"], "color": "#ffffff"},
                "borderWidth": 2,
                "margin": 8,
            }
        )
    net.node_ids = [nd["id"] for nd in net.nodes]

    def name(it) -> str:
        if isinstance(it, str):
            return it if it in (SUCCESS_ID, FAILURE_ID) else f"+{it.split(':')[1]} (cluster)"
        return f"s{it - sl.start}"

    path_label: dict[tuple[int, str], list[int]] = {}
    for t, st_ in enumerate(path_steps.tolist()):
        path_label.setdefault((int(graph.step_edge[st_]), "time" if cut[st_] else "act"), []).append(t)

    records: list[dict] = []
    agg: dict[tuple, dict] = {}
    for e in group_edges(graph, group).tolist():
        p = int(graph.edge_pair[e])
        s = int(graph.pair_node[p])
        x = int(graph.edge_next[e])
        a = item.get(s)
        bb = SUCCESS_ID if x == SUCCESS else FAILURE_ID if x == FAILURE else item.get(x)
        if a is None or bb is None or str(a).startswith("chain:") or str(bb).startswith("chain:"):
            continue
        for part in ("act", "time"):
            n_occ = int(cred.count[part][e])
            if not n_occ:
                continue
            if isinstance(a, int) and (isinstance(bb, int) or bb in (SUCCESS_ID, FAILURE_ID)):
                records.append(
                    {
                        "kind": part,
                        "e": e,
                        "p": p,
                        "src": a,
                        "dst": bb,
                        "count": n_occ,
                        "credit": _mean(cred.sum[part][e], int(cred.num[part][e])),
                    }
                )
            elif a != bb:
                r = agg.setdefault(
                    (a, bb, part),
                    {"kind": "agg_" + part, "src": a, "dst": bb, "count": 0, "sum": 0.0, "num": 0},
                )
                r["count"] += n_occ
                r["sum"] += float(cred.sum[part][e])
                r["num"] += int(cred.num[part][e])
    for r in agg.values():
        r["credit"] = _mean(r["sum"], r["num"])
        records.append(r)
    for ch in summary.chains:
        inner = set(ch.interior)
        steps = np.flatnonzero(
            np.isin(graph.step_node, list(inner))
            | ((graph.step_node == ch.src) & (graph.step_next == ch.interior[0]))
        )
        enter = int((graph.step_node[steps] == ch.src).sum())
        cc = cred.step_credit[steps]
        cc = cc[np.isfinite(cc)]
        records.append(
            {
                "kind": "chain",
                "chain": ch,
                "src": ch.src,
                "dst": ch.dst,
                "count": enter,
                "credit": float(cc.mean()) if cc.size else float("nan"),
            }
        )
    if show_action_labels is None:
        show_action_labels = len(records) <= 60
    cmax = max((r["count"] for r in records), default=1)
    loops: dict = {}
    for r in records:
        src, dst = r["src"], r["dst"]
        col = credit_color(r["credit"], limit)
        width = 1.0 + 6.0 * math.sqrt(r["count"] / max(cmax, 1))
        kind = r["kind"]
        label, on_path = "", False
        dashes: bool | list = False
        if kind in ("act", "time"):
            e, p = r["e"], r["p"]
            action = str(graph.action_names[graph.pair_action[p]])
            ts = path_label.get((e, kind), [])
            on_path = bool(ts)
            if kind == "time":
                dashes = [8, 5]
                label = ("t" + ",".join(map(str, ts)) + " · " if ts else "") + "time limit"
                title = (
                    f"<b>time limit</b>: after <b>{esc(action)}</b> at s{src - sl.start}, "
                    f"{r['count']} rollout(s) ran out of steps: the step limit, not this action, ended "
                    f"them (counted as FAILURE)<br>mean step credit = {_fmt(r['credit'])} <i>({esc(est)})</i>"
                )
            else:
                if ts:
                    label = "t" + ",".join(str(t) for t in ts)
                elif show_action_labels and not highlighting:
                    label = action if len(action) <= 24 else action[:23] + "…"
                title = (
                    f"<b>action</b>: {esc(action)}<br>s{src - sl.start} → {esc(name(dst))}<br>"
                    f"N(s,a,x) = {r['count']} of N(s,a) = {int(graph.pair_count[p])}<br>"
                    f"Q(s,a) = {_fmt_v(q[p])} · credit = {_fmt(r['credit'])} <i>({esc(est)})</i>{c_note}"
                )
            ident = f"{src}->{dst}#{e}{'t' if kind == 'time' else ''}"
        elif kind == "chain":
            ch = r["chain"]
            mid = ch.interior[len(ch.interior) // 2]
            label = f"⋯ {ch.steps} steps"
            names = " → ".join(f"s{m - sl.start}" for m in ch.interior[:6]) + (
                " → …" if len(ch.interior) > 6 else ""
            )
            title = (
                f"<b>a chain of {len(ch.interior)} anchor(s)</b> ({esc(names)}), each with one way in and "
                f"one way out, drawn as one edge of {ch.steps} steps from {esc(name(src))} to "
                f"{esc(name(dst))}; {r['count']} transition(s) enter it · mean step credit = "
                f"{_fmt(r['credit'])} <i>({esc(est)})</i>. Click to draw its middle anchor."
            )
            ident = f"{mid}->{dst}#{ch.id}"
        else:
            if kind == "agg_time":
                dashes = [8, 5]
                label = "time limit"
            title = (
                f"<b>{r['count']} transition(s)</b> {esc(name(src))} → {esc(name(dst))}"
                f"{' (rollouts that ran out of steps)' if kind == 'agg_time' else ''} · mean step credit = "
                f"{_fmt(r['credit'])} <i>({esc(est)})</i>"
            )
            ident = f"{src}->{dst}#{kind}"
        edge = {
            "id": ident,
            "from": src,
            "to": dst,
            "arrows": "to",
            "title": title,
            "label": label,
            "width": width * (1.8 if on_path else 1.0),
            "dashes": dashes,
            # Hover and selection keep the credit colour (vis-network greys them by default).
            "color": {
                "color": col,
                "highlight": col,
                "hover": col,
                "inherit": False,
                # Summed edges to and from clusters stay in the background of the drawn anchors'.
                "opacity": 0.2 if highlighting and not on_path else 0.45 if kind.startswith("agg") else 1.0,
            },
            "font": {"size": _FONT["edge"], "align": "middle", "color": "#333333", "strokeWidth": 3},
        }
        if src == dst:
            loops.setdefault(src, []).append(edge)
        net.edges.append(edge)
    _stack_loops(loops, pos, {nd["id"]: float(nd.get("size", 0.0)) for nd in net.nodes})
    net.options = {
        "physics": {"enabled": False},
        # Curved edges: a straight edge between two columns can run through the nodes between
        # them and read as a path through them.
        "edges": {
            "smooth": {"enabled": True, "type": "curvedCW", "roundness": 0.18},
            "arrows": {"to": {"enabled": True, "scaleFactor": 0.6}},
            "selfReference": {"size": 14, "angle": math.pi / 2},
        },
        "interaction": {
            "hover": True,
            "tooltipDelay": 80,
            "dragNodes": True,
            "navigationButtons": True,
            "keyboard": False,
        },
        "layout": {"improvedLayout": False},
    }
    page = net.generate_html()
    # No network access is needed: drop pyvis's unused bootstrap CDN tags and empty headings.
    page = re.sub(r"<link[^>]*bootstrap[^>]*>\s*", "", page, flags=re.S)
    page = re.sub(r"<script[^>]*bootstrap[^>]*>\s*</script>\s*", "", page, flags=re.S)
    page = re.sub(r"<center>\s*<h1>\s*</h1>\s*</center>\s*", "", page, flags=re.S)
    page = page.replace("</head>", _page_style(height_px) + "</head>", 1)
    # The value bar runs the way its numbers do: for "lower is better" (d(s)) the colours are
    # reversed so that the left end is the colour of the left number.
    bar = css_gradient(VALUE_COLORSCALE if higher_better else reversed_scale(VALUE_COLORSCALE))
    legend = (
        f"<div id='crbc-legend'><span class='item'><b>{esc(est)}</b>"
        f"{(' (' + esc(params_text) + ')') if params_text else ''}</span>"
        f"<span class='item'>{esc(v_title)}: <span class='lo'>{lo:.2g}</span>"
        f"<span class='bar value' style='background:{bar}'></span><span class='hi'>{hi:.2g}</span>"
        f"{' (near → far)' if not higher_better else ''}</span>"
        f"<span class='item'>credit: {-limit:.2g}<span class='bar credit' style='background:"
        f"{css_gradient(CREDIT_COLORSCALE)}'></span>+{limit:.2g}</span>"
        f"<span class='item'><span style='color:{MISSING_COLOR}'>■</span> undefined</span>"
        f"<span class='item'><span style='letter-spacing:-1px'>- - →</span> time limit</span></div>"
    )
    tools = (
        "<div id='crbc-tools'><button onclick=\"network.fit()\">Fit</button>"
        "<button onclick=\"crbcExport('png')\">PNG</button>"
        "<button onclick=\"crbcExport('svg')\">SVG</button></div>"
    )
    fname = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"graph_{est}{('_' + params_text) if params_text else ''}")
    page = page.replace(
        "<body>",
        f"<body data-crbc-graph='{esc(graph_key)}' data-crbc-name='{esc(fname)}'>"
        f"<div id='crbc-head'>{legend}{tools}</div>",
        1,
    )
    page = page.replace("</body>", _TIP_SCRIPT + "</body>", 1)
    return GraphDrawing(page, summary, summary_note(summary))


def graph_html(graph: AnchorGraph, result=None, **kwargs) -> str:
    """The page of `graph_drawing` (same arguments)."""
    return graph_drawing(graph, result, **kwargs).html
