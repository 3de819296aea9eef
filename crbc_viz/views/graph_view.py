"""The merged anchor graph of one group as a self-contained pyvis (vis-network) HTML page.

Pure: returns a string; nothing is written to disk. Every piece of logged text that reaches a
tooltip is HTML-escaped, and the node/edge JSON is embedded with ``<``, ``>``, ``&`` and ``'``
escaped as ``\\u003c`` etc. (Jinja's ``tojson``), so it cannot close the script tag.

Layout (computed here, physics off): depth = BFS hops from the group's start anchors; x by
depth, y spread within a depth (ordered by the mean position of each node's predecessors to
reduce crossings); SUCCESS and FAILURE at the right.
"""

from __future__ import annotations

import html
import math
import re
from collections import deque

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
    value_color,
)

__all__ = [
    "layered_layout",
    "step_depths",
    "select_nodes",
    "neighbourhood",
    "value_meaning",
    "board_html",
    "is_board",
    "graph_html",
    "node_values",
    "edge_credit",
    "pair_values",
    "trajectory_path",
    "value_range",
    "esc",
]

#: Boundary node ids in the drawn graph.
SUCCESS_ID, FAILURE_ID = "SUCCESS", "FAILURE"
_MAX_TIP_CHARS = 1200


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


# ---------------------------------------------------------------- layout
def _group_edges(graph: AnchorGraph, g: int) -> np.ndarray:
    sl = graph.group_slice(g)
    p_lo, p_hi = graph.node_pair_offsets[sl.start], graph.node_pair_offsets[sl.stop]
    return np.flatnonzero((graph.edge_pair >= p_lo) & (graph.edge_pair < p_hi))


def _depths(graph: AnchorGraph, g: int) -> dict[int, int]:
    """BFS hops from the group's start anchors (the first step of each trajectory)."""
    b = graph.batch
    t_lo, t_hi = int(b.group_traj_offsets[g]), int(b.group_traj_offsets[g + 1])
    starts = np.unique(graph.step_node[b.traj_offsets[t_lo:t_hi]])
    sl = graph.group_slice(g)
    edges = _group_edges(graph, g)
    src = graph.pair_node[graph.edge_pair[edges]]
    dst = graph.edge_next[edges]
    adj: dict[int, list[int]] = {}
    for s, d in zip(src.tolist(), dst.tolist()):
        if d >= 0 and d != s:
            adj.setdefault(s, []).append(d)
    depth = {int(s): 0 for s in starts.tolist()}
    queue = deque(depth)
    while queue:
        u = queue.popleft()
        for v in adj.get(u, ()):
            if v not in depth:
                depth[v] = depth[u] + 1
                queue.append(v)
    far = max(depth.values(), default=-1) + 1
    for n in range(sl.start, sl.stop):  # not reachable from a start (cannot happen for valid logs)
        depth.setdefault(n, far)
    return depth


def step_depths(graph: AnchorGraph, traj: int, nodes) -> dict[int, int]:
    """Columns by step: the rollout ``traj``'s anchors at the step it first reaches them, every
    other node of ``nodes`` one column after the earliest of its neighbours on that path."""
    _, path, _ = trajectory_path(graph, int(traj))
    depth: dict[int, int] = {}
    for i, n in enumerate(path.tolist()):
        depth.setdefault(int(n), i)
    g = int(graph.node_group[int(path[0])]) if path.size else 0
    edges = _group_edges(graph, g)
    src = graph.pair_node[graph.edge_pair[edges]].tolist()
    dst = graph.edge_next[edges].tolist()
    for s_, d_ in zip(src, dst):
        if d_ < 0:
            continue
        for a, b in ((s_, d_), (d_, s_)):
            if a in depth and b not in depth:
                depth[b] = min(depth.get(b, 10**9), depth[a] + 1)
    far = max(depth.values(), default=-1) + 1
    return {int(n): depth.get(int(n), far) for n in nodes}


def layered_layout(
    graph: AnchorGraph,
    g: int = 0,
    *,
    nodes=None,
    x_gap: float = 180.0,
    y_gap: float = 90.0,
    depths: dict | None = None,
) -> dict:
    """Fixed positions ``{node id: (x, y)}`` for group ``g``'s anchors plus ``"SUCCESS"`` and
    ``"FAILURE"``.

    Args:
        graph: the anchor graph.
        g: group index in ``graph``.
        nodes: the (global) node ids to place; default all of the group's anchors. Depths are
            always computed on the whole group, so a filtered drawing keeps its columns.
        x_gap, y_gap: pixels between layers and between nodes of a layer.
        depths: columns to use instead of BFS hops (e.g. `step_depths`).
    """
    depth = _depths(graph, g) if depths is None else depths
    keep = sorted(depth) if nodes is None else sorted(int(n) for n in nodes)
    visits = graph.node_visits
    edges = _group_edges(graph, g)
    preds: dict[int, list[int]] = {}
    for s, d in zip(graph.pair_node[graph.edge_pair[edges]].tolist(), graph.edge_next[edges].tolist()):
        if d >= 0 and d != s:
            preds.setdefault(d, []).append(s)
    layers: dict[int, list[int]] = {}
    for n in keep:
        layers.setdefault(depth[n], []).append(n)
    pos: dict = {}
    rank: dict[int, float] = {}
    for d in sorted(layers):
        members = layers[d]

        def key(n):
            ps = [rank[p] for p in preds.get(n, ()) if p in rank]
            return (sum(ps) / len(ps) if ps else -1.0, -int(visits[n]), n)

        members.sort(key=key)
        k = len(members)
        for i, n in enumerate(members):
            rank[n] = float(i) - (k - 1) / 2.0
            pos[n] = (d * x_gap, rank[n] * y_gap)
    right = (max(layers, default=-1) + 1) * x_gap
    pos[SUCCESS_ID] = (right, -y_gap)
    pos[FAILURE_ID] = (right, y_gap)
    return pos


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


def neighbourhood(graph: AnchorGraph, nodes, g: int = 0) -> np.ndarray:
    """``nodes`` plus every anchor one transition before or after one of them (group ``g``)."""
    want = {int(n) for n in nodes}
    edges = _group_edges(graph, g)
    src = graph.pair_node[graph.edge_pair[edges]]
    dst = graph.edge_next[edges]
    near = set(want)
    for s_, d_ in zip(src.tolist(), dst.tolist()):
        if d_ >= 0 and (s_ in want or d_ in want):
            near.update((s_, d_))
    return np.asarray(sorted(near), dtype=np.int64)


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


def _short_label(anchor, local_id: int) -> str:
    text = str(anchor)
    if len(text) <= 18 and "\n" not in text:
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


_TIP_SCRIPT = """
<style>
  body { margin: 0; font-family: sans-serif; }
  #mynetwork { float: none !important; border: 1px solid #ddd !important;
                box-sizing: border-box; }
  .card { border: none !important; }
  div.vis-tooltip { max-width: 460px; white-space: normal; font-size: 12px; }
  pre.crbc-anchor { font-size: 11px; background: #f6f6f6; padding: 4px; margin: 4px 0;
                    white-space: pre-wrap; max-height: 220px; overflow: hidden; }
  table.crbc-tab { border-collapse: collapse; font-size: 11px; }
  table.crbc-tab td, table.crbc-tab th { border: 1px solid #ddd; padding: 1px 4px; }
  #crbc-legend { position: absolute; top: 6px; left: 8px; z-index: 5; font-size: 11px;
                 background: rgba(255,255,255,0.88); padding: 4px 6px; border: 1px solid #ddd; }
  #crbc-tools { position: absolute; top: 6px; right: 8px; z-index: 5; }
  #crbc-tools button { font-size: 11px; margin-left: 3px; }
  #crbc-legend .bar { display: inline-block; width: 110px; height: 9px; vertical-align: middle; }
</style>
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
    // A click selects: the app (parent window) turns this message into the chosen anchor.
    network.on("click", function (p) {
      var msg = null;
      if (p.nodes && p.nodes.length) { msg = {crbc: "pick", kind: "node", id: String(p.nodes[0])}; }
      else if (p.edges && p.edges.length) {
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
    // Refit when the frame is revealed (an expander or tab opened after the first draw).
    var lastW = 0;
    new ResizeObserver(function () {
      var w = document.body.clientWidth;
      if (lastW === 0 && w > 0) { network.fit({animation: false}); }
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
  }
  document.body.setAttribute("data-crbc-ready", "1");
})();
</script>
"""


#: What node colour means per estimator: (legend title, higher is better?, SUCCESS label,
#: FAILURE label). Estimators not listed colour by a state value V(s) (higher = better).
VALUE_MEANING = {
    "shortest_path": ("d(s): hops to SUCCESS", False, "SUCCESS\nd = 0", "FAILURE\nd = ∞"),
    "grpo": ("V(s): mean return of the rollouts through s", True, "SUCCESS", "FAILURE"),
}


def value_meaning(estimator: str | None) -> tuple[str, bool, str, str]:
    """(legend title, higher is better, SUCCESS label, FAILURE label) for ``estimator``."""
    return VALUE_MEANING.get(estimator or "", ("V(s)", True, "SUCCESS", "FAILURE"))


def _gradient(scale) -> str:
    return "linear-gradient(to right, " + ", ".join(f"{c} {100 * t:.0f}%" for t, c in scale) + ")"


def graph_html(
    graph: AnchorGraph,
    result=None,
    *,
    group: int = 0,
    highlight_traj: int | None = None,
    nodes=None,
    height_px: int = 620,
    show_action_labels: bool | None = None,
    estimator: str | None = None,
    selected_node: int | None = None,
    params_text: str = "",
    graph_key: str = "",
    by_step: bool = False,
) -> str:
    """The anchor graph of group ``group`` as a standalone HTML page (vis-network inlined).

    Args:
        graph: the anchor graph (usually a one-group graph).
        result: a `CreditResult` on ``graph`` (node colour = V, edge colour = credit), or None.
        group: group index in ``graph``.
        highlight_traj: global trajectory index whose path is emphasised (others fade).
        nodes: global node ids to draw (`select_nodes`); default all of the group's anchors.
        height_px: canvas height.
        show_action_labels: write the action on each edge; default when ≤ 60 edges are drawn.
        estimator: name shown in tooltips and the legend (default ``result.estimator``).
        selected_node: global node id drawn with a thick ring (the chosen anchor).
        params_text: non-default parameters, shown in the legend (e.g. ``beta=0.9``).
        by_step: columns by the highlighted rollout's step (`step_depths`), for large groups.

    Clicking a node or an edge posts ``{crbc: "pick", kind, id}`` to the parent window (the
    app turns it into a selection); the id is the node's global id, or ``"src->dst"``.

    Returns:
        HTML text; no file is written.
    """
    from pyvis.network import Network

    est = estimator or (result.estimator if result is not None else "—")
    sl = graph.group_slice(group)
    keep = np.arange(sl.start, sl.stop) if nodes is None else np.asarray(sorted(nodes), dtype=np.int64)
    keep_set = set(keep.tolist())
    # Spread layers vertically so the drawing's aspect roughly matches the canvas (~16:9).
    depth = (
        _depths(graph, group)
        if not (by_step and highlight_traj is not None)
        else step_depths(graph, int(highlight_traj), keep.tolist())
    )
    layer_sizes = np.bincount([depth[n] for n in keep.tolist()]) if keep.size else np.ones(1, int)
    x_gap = 180.0
    y_gap = float(
        np.clip(x_gap * (len(layer_sizes) + 1) * 0.55 / max(int(layer_sizes.max()), 1), 70.0, 220.0)
    )
    pos = layered_layout(
        graph,
        group,
        nodes=keep,
        x_gap=x_gap,
        y_gap=y_gap,
        depths=depth if by_step and highlight_traj is not None else None,
    )
    nv = node_values(graph, result)
    q, c = pair_values(graph, result)
    ec = edge_credit(graph, result)
    b = graph.batch
    step_sl = np.flatnonzero(b.step_group == group)
    limit = credit_limit(result.credit[step_sl] if result is not None else None)
    v_title, higher_better, succ_label, fail_label = value_meaning(est)
    lo, hi = value_range(nv[sl])
    t_lo, t_hi = int(b.group_traj_offsets[group]), int(b.group_traj_offsets[group + 1])
    starts = set(graph.step_node[b.traj_offsets[t_lo:t_hi]].tolist())

    path_nodes: set[int] = set()
    path_edges: dict[int, list[int]] = {}
    if highlight_traj is not None:
        _, pn, pe = trajectory_path(graph, int(highlight_traj))
        path_nodes = set(pn.tolist())
        for t, e in enumerate(pe.tolist()):
            path_edges.setdefault(e, []).append(t)
    highlighting = highlight_traj is not None

    net = Network(
        height=f"{int(height_px)}px", width="100%", directed=True, cdn_resources="in_line", heading=""
    )
    vmax = max(int(graph.node_visits[keep].max()) if keep.size else 1, 1)
    for n in keep.tolist():
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
        net.add_node(
            n,
            label=_short_label(graph.node_anchor_obs[n], local),
            title=_node_tip(graph, n, local, v, q, c, est, n in starts),
            x=float(x),
            y=float(y),
            physics=False,
            shape="dot",
            size=float(10 + 22 * math.sqrt(graph.node_visits[n] / vmax)),
            color={
                "background": fill,
                "border": border,
                "highlight": {"background": fill, "border": "#000000"},
            },
            borderWidth=7 if chosen else 4 if on_path else (2 if n in starts else 1),
            opacity=1.0 if (not highlighting or on_path) else 0.35,
            font={"size": 16, "color": "#222222"},
        )
    for bid, col, lab in ((SUCCESS_ID, SUCCESS_COLOR, succ_label), (FAILURE_ID, FAILURE_COLOR, fail_label)):
        x, y = pos[bid]
        net.add_node(
            bid,
            label=lab,
            x=float(x),
            y=float(y),
            physics=False,
            shape="box",
            color={"background": col, "border": "#000000"},
            title=f"<b>{bid}</b>: absorbing boundary (a rollout ends here)",
            font={"size": 18, "color": "#ffffff"},
            borderWidth=2,
            margin=8,
        )

    edges = _group_edges(graph, group)
    drawn = [
        e
        for e in edges.tolist()
        if graph.pair_node[graph.edge_pair[e]] in keep_set
        and (graph.edge_next[e] < 0 or graph.edge_next[e] in keep_set)
    ]
    if show_action_labels is None:
        show_action_labels = len(drawn) <= 60
    cmax = max((int(graph.edge_count[e]) for e in drawn), default=1)
    for e in drawn:
        p = int(graph.edge_pair[e])
        s = int(graph.pair_node[p])
        x = int(graph.edge_next[e])
        dst = SUCCESS_ID if x == SUCCESS else FAILURE_ID if x == FAILURE else x
        dst_name = dst if isinstance(dst, str) else f"s{x - sl.start}"
        action = str(graph.action_names[graph.pair_action[p]])
        col = credit_color(ec[e], limit)
        on_path = e in path_edges
        label = ""
        if on_path:
            label = "t" + ",".join(str(t) for t in path_edges[e])
        elif show_action_labels and not highlighting:
            label = action if len(action) <= 24 else action[:23] + "…"
        width = 1.0 + 6.0 * math.sqrt(graph.edge_count[e] / cmax)
        title = (
            f"<b>action</b>: {esc(action)}<br>s{s - sl.start} → {esc(dst_name)}<br>"
            f"N(s,a,x) = {int(graph.edge_count[e])} of N(s,a) = {int(graph.pair_count[p])}<br>"
            f"Q(s,a) = {_fmt_v(q[p])} · credit = {_fmt(ec[e])} <i>({esc(est)})</i>"
        )
        # Direct append: pyvis's add_edge re-scans the node list per edge (quadratic).
        net.edges.append(
            {
                "id": f"{s}->{dst}#{e}",
                "from": s,
                "to": dst,
                "arrows": "to",
                "title": title,
                "label": label,
                "width": width * (1.8 if on_path else 1.0),
                "color": {
                    "color": col,
                    "highlight": col,
                    "opacity": 1.0 if (not highlighting or on_path) else 0.2,
                },
                "font": {"size": 12, "align": "middle", "color": "#333333", "strokeWidth": 3},
            }
        )
    net.options = {
        "physics": {"enabled": False},
        # Curved edges: a straight edge between two columns can run through the nodes between
        # them and read as a path through them.
        "edges": {
            "smooth": {"enabled": True, "type": "curvedCW", "roundness": 0.18},
            "arrows": {"to": {"enabled": True, "scaleFactor": 0.6}},
            "selfReference": {"size": 14},
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
    left, right = (lo, hi) if higher_better else (hi, lo)
    legend = (
        f"<div id='crbc-legend'><b>{esc(est)}</b>"
        f"{(' (' + esc(params_text) + ')') if params_text else ''} · {esc(v_title)}: {left:.2g}"
        f"<span class='bar' style='background:{_gradient(VALUE_COLORSCALE)}'></span>{right:.2g}"
        f"{' (near → far)' if not higher_better else ''}"
        f" &nbsp; credit: {-limit:.2g}<span class='bar' style='background:"
        f"{_gradient(CREDIT_COLORSCALE)}'></span>+{limit:.2g}"
        f" &nbsp; <span style='color:{MISSING_COLOR}'>■</span> undefined</div>"
    )
    page = page.replace('<div id="mynetwork"', legend + '<div id="mynetwork"', 1)
    tools = (
        "<div id='crbc-tools'><button onclick=\"network.fit()\">Fit</button>"
        "<button onclick=\"crbcExport('png')\">PNG</button>"
        "<button onclick=\"crbcExport('svg')\">SVG</button></div>"
    )
    page = page.replace('<div id="mynetwork"', tools + '<div id="mynetwork"', 1)
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"graph_{est}{('_' + params_text) if params_text else ''}")
    page = page.replace(
        "<body>", f"<body data-crbc-graph='{esc(graph_key)}' data-crbc-name='{esc(name)}'>", 1
    )
    page = page.replace("</body>", _TIP_SCRIPT + "</body>", 1)
    return page
