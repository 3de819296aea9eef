"""The HTML of a graph drawing: tooltips, the legend and tools row, the page's style and its
script (click bridge, remembered zoom, first fit, legible labels, export). Pure: strings in, strings
out. Every piece of logged text is HTML-escaped here (`esc`)."""

from __future__ import annotations

import html
import math
import re

import numpy as np

from ..graph import AnchorGraph
from .board import board_html
from .colors import CREDIT_COLORSCALE, MISSING_COLOR, VALUE_COLORSCALE, css_gradient, reversed_scale

__all__ = [
    "esc",
    "fmt_credit",
    "fmt_value",
    "short_label",
    "node_tip",
    "credit_meaning",
    "page_style",
    "PAGE_SCRIPT",
    "MIN_LABEL_PX",
    "check_min_label_px",
    "legend_html",
    "finish_page",
]

#: Anchor text shown in a tooltip, at most (characters).
_MAX_TIP_CHARS = 1200
#: The smallest label on screen (px) at the first fit: a narrower canvas draws labels larger in
#: canvas units so that they still read at this size (a projector asks for more).
MIN_LABEL_PX = 10.0


def esc(x) -> str:
    """HTML-escape any value (quotes included)."""
    return html.escape("" if x is None else str(x), quote=True)


def fmt_credit(x, nd: int = 4) -> str:
    if x is None:
        return "—"
    x = float(x)
    return "—" if not math.isfinite(x) else f"{x:+.{nd}f}" if nd else f"{x:g}"


def fmt_value(x) -> str:
    if x is None or not math.isfinite(float(x)):
        return "—"
    return f"{float(x):.4f}"


def short_label(anchor, local_id: int, max_chars: int = 12) -> str:
    """The anchor's text when it is short enough for the room between columns, else ``s<id>``."""
    text = str(anchor)
    if len(text) <= max_chars and "\n" not in text:
        return text
    return f"s{local_id}"


def node_tip(
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
            f"<td>{int(graph.pair_count[p])}</td><td>{fmt_value(q[p])}</td>"
            f"<td>{fmt_credit(c[p])}</td></tr>"
        )
    more = f"<div>… {p_hi - p_lo - 12} more actions</div>" if p_hi - p_lo > 12 else ""
    return (
        f"<b>anchor s{local_id}</b>{' (start)' if is_start else ''}<br>"
        f"visits N(s) = {int(graph.node_visits[n])} · distinct actions = "
        f"{int(graph.node_num_actions[n])}<br>V(s) = {fmt_value(v)} <i>({esc(estimator)})</i>"
        f"{board_html(anchor) or ''}<pre class='crbc-anchor'>{esc(anchor)}</pre>"
        f"<table class='crbc-tab'><tr><th>action</th><th>N(s,a)</th><th>Q</th><th>credit</th></tr>"
        f"{''.join(rows)}</table>{more}"
    )


def page_style(height_px: int) -> str:
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


PAGE_SCRIPT = """
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
        msg = {crbc: "pick", kind: "edge", id: String(p.edges[0])};
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
    // Labels legible at the fitted scale: on a canvas narrower than the one the layout was
    // made for (or for a projector's larger minimum), every label is drawn larger in canvas
    // units so that it shows at least data-crbc-min-label px on screen; self-loops grow with
    // their labels so that stacked labels stay apart.
    var minPx = parseFloat(document.body.getAttribute("data-crbc-min-label") || "0");
    var base = {};  // the label size (and self-loop size) each item was drawn with in Python
    function legible() {
      var s = network.getScale();
      if (!(minPx > 0) || !(s > 0)) { return; }
      var want = 1.02 * minPx / s;
      function grow(ds, kind) {
        var upd = [];
        ds.get().forEach(function (x) {
          if (!x.label || !x.font) { return; }
          var k = kind + String(x.id);
          if (!(k in base)) {
            base[k] = {font: x.font.size, loop: x.selfReference ? x.selfReference.size : null};
          }
          var size = Math.max(base[k].font, want);
          if (size === x.font.size) { return; }
          var u = {id: x.id, font: Object.assign({}, x.font, {size: size})};
          if (base[k].loop !== null) {
            u.selfReference = Object.assign({}, x.selfReference, {size: base[k].loop * size / base[k].font});
          }
          upd.push(u);
        });
        ds.update(upd);
      }
      grow(nodes, "n:"); grow(edges, "e:");
    }
    // Fit once the frame has a width (also when an expander or tab reveals it after the
    // first draw); the page says it is ready after that first fit.
    var lastW = 0;
    function ready() { document.body.setAttribute("data-crbc-ready", "1"); }
    new ResizeObserver(function () {
      var w = document.body.clientWidth;
      if (lastW === 0 && w > 0) {
        network.fit({animation: false});
        legible();
        network.once("afterDrawing", ready);
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


def legend_html(
    estimator: str,
    params_text: str,
    value_title: str,
    higher_better: bool,
    value_lo: float,
    value_hi: float,
    credit_lim: float,
) -> str:
    """The legend row: the estimator, the node-value bar (it runs the way its numbers do: for
    "lower is better", d(s), the colours are reversed so that the left end is the colour of the
    left number), the credit bar, the undefined colour and the time-limit edge."""
    bar = css_gradient(VALUE_COLORSCALE if higher_better else reversed_scale(VALUE_COLORSCALE))
    return (
        f"<div id='crbc-legend'><span class='item'><b>{esc(estimator)}</b>"
        f"{(' (' + esc(params_text) + ')') if params_text else ''}</span>"
        f"<span class='item'>{esc(value_title)}: <span class='lo'>{value_lo:.2g}</span>"
        f"<span class='bar value' style='background:{bar}'></span><span class='hi'>{value_hi:.2g}</span>"
        f"{' (near → far)' if not higher_better else ''}</span>"
        f"<span class='item'>credit: {-credit_lim:.2g}<span class='bar credit' style='background:"
        f"{css_gradient(CREDIT_COLORSCALE)}'></span>+{credit_lim:.2g}</span>"
        f"<span class='item'><span style='color:{MISSING_COLOR}'>■</span> undefined</span>"
        f"<span class='item'><span style='letter-spacing:-1px'>- - →</span> time limit</span></div>"
    )


_TOOLS = (
    "<div id='crbc-tools'><button onclick=\"network.fit()\">Fit</button>"
    "<button onclick=\"crbcExport('png')\">PNG</button>"
    "<button onclick=\"crbcExport('svg')\">SVG</button></div>"
)


def check_min_label_px(min_label_px) -> None:
    """Raise ValueError naming ``min_label_px`` unless it is a finite number ≥ 0."""
    ok = isinstance(min_label_px, (int, float)) and not isinstance(min_label_px, bool)
    if not (ok and math.isfinite(min_label_px) and min_label_px >= 0):
        raise ValueError(f"min_label_px must be a finite number of px ≥ 0, got {min_label_px!r}")


def finish_page(
    page: str, *, height_px: int, legend: str, graph_key: str, name: str, min_label_px: float
) -> str:
    """pyvis's generated ``page`` made self-contained and laid out: its unused bootstrap CDN
    tags and empty heading dropped (nothing reaches the network), the style, the legend and
    tools row above the canvas, the body's data attributes (``graph_key`` for the remembered
    zoom, ``name`` for exports, ``min_label_px``) and `PAGE_SCRIPT`."""
    check_min_label_px(min_label_px)
    page = re.sub(r"<link[^>]*bootstrap[^>]*>\s*", "", page, flags=re.S)
    page = re.sub(r"<script[^>]*bootstrap[^>]*>\s*</script>\s*", "", page, flags=re.S)
    page = re.sub(r"<center>\s*<h1>\s*</h1>\s*</center>\s*", "", page, flags=re.S)
    page = page.replace("</head>", page_style(height_px) + "</head>", 1)
    fname = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
    page = page.replace(
        "<body>",
        f"<body data-crbc-graph='{esc(graph_key)}' data-crbc-name='{esc(fname)}' "
        f"data-crbc-min-label='{float(min_label_px):g}'><div id='crbc-head'>{legend}{_TOOLS}</div>",
        1,
    )
    return page.replace("</body>", PAGE_SCRIPT + "</body>", 1)
