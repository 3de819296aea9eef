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
    "LAYER_BLANK",
    "layered_page",
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


def fmt_scale(x) -> str:
    """A legend bar's end in plain decimals a person reads: two significant digits, never
    e-notation (``1e-05`` is written ``0.00001``, ``1234.5`` is ``1234``); below 10⁻¹² in size,
    ``<0.000000000001``."""
    x = float(x)
    if not math.isfinite(x):
        return "—"
    if x == 0:
        return "0"
    if abs(x) < 1e-12:
        return f"{'-' if x < 0 else ''}<0.000000000001"
    decimals = max(0, 1 - math.floor(math.log10(abs(x))))
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


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


def page_style(height_px: int, *, fill: bool = False) -> str:
    """The page's layout: the legend and the tools in a row above the canvas (they wrap, never
    overlap), the canvas filling the rest of ``height_px`` (``fill``: of the frame's height)."""
    height = "100vh" if fill else f"{int(height_px)}px"
    return f"""
<style>
  html, body {{ margin: 0; font-family: sans-serif; }}
  body {{ height: {height}; display: flex; flex-direction: column; overflow: hidden; }}
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


#: The height (px) of a canvas that takes its drawing's shape, at least and at most (the page's
#: script, and the shared view's frames: `crbc_viz.views.share.graphs_html`).
FIT_CANVAS_PX = (320, 1100)

PAGE_SCRIPT = """
<script>
// Tooltips are HTML built in Python with every piece of logged text escaped; vis-network 9
// shows string titles as plain text, so turn them into elements: each one the first time
// vis-network asks for it (its popup), not all of them as the page loads (~10 ms a drawing).
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
  // vis-network 9.1: a node's title is options.title, an edge's is title (getTitle reads them).
  function lazy(items, put) {
    var one = null;
    for (var k in items) { one = items[k]; break; }
    var proto = one && Object.getPrototypeOf(one);
    if (!proto || typeof proto.getTitle !== "function") { return false; }
    if (!proto.__crbcLazyTitle) {
      var get = proto.getTitle;
      proto.getTitle = function () {
        var t = get.call(this);
        if (typeof t === "string") { t = el(t); put(this, t); }
        return t;
      };
      proto.__crbcLazyTitle = true;
    }
    return true;
  }
  var body = typeof network !== "undefined" && network && network.body;
  if (!(body && lazy(body.nodes, function (n, t) { n.options.title = t; }))) { fix(nodes); }
  if (!(body && lazy(body.edges, function (e, t) { e.title = t; }))) { fix(edges); }
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
    // No node under a navigation button (the canvas's bottom corners), where it could not be
    // clicked. After a fit the drawing moves up into the room above it (8 px kept); where that
    // is not enough, a canvas that takes the drawing's shape grows at the bottom by what is
    // still needed, at the same scale, and a canvas of fixed height zooms out about its top
    // instead (1 % steps, to 60 % at most) until every node is clear.
    function clearOfButtons() {
      var box = document.getElementById("mynetwork"), c = box.querySelector("canvas");
      if (!c) { return; }
      var cr = c.getBoundingClientRect(), pad = 4, bs = [];
      document.querySelectorAll("#mynetwork .vis-navigation .vis-button").forEach(function (b) {
        var q = b.getBoundingClientRect();
        if (q.width > 0) {
          bs.push([q.left - cr.left - pad, q.top - cr.top - pad, q.right - cr.left + pad, q.bottom - cr.top + pad]);
        }
      });
      if (!bs.length) { return; }
      var s = network.getScale(), top = network.DOMtoCanvas({x: cr.width / 2, y: 0});
      var ns = network.body.nodeIndices.map(function (id) {
        var n = network.body.nodes[id], o = n.options, dot = o.shape === "dot";
        return [n.x - top.x, n.y - top.y, dot ? o.size : n.shape.width / 2, dot ? o.size : n.shape.height / 2];
      });
      // How far below a button's top the lowest node under one reaches, at scale z, with every
      // node d px higher than the view puts it.
      function under(z, d) {
        var most = 0;
        ns.forEach(function (n) {
          var x = n[0] * z + cr.width / 2, y = n[1] * z - d, rx = n[2] * z, ry = n[3] * z;
          bs.forEach(function (b) {
            if (x + rx > b[0] && x - rx < b[2] && y + ry > b[1] && y - ry < b[3]) { most = Math.max(most, y + ry - b[1]); }
          });
        });
        return most;
      }
      // (again after each shift: a node lifted clear of ↓ may reach ↑ above it)
      var extra = 0;
      for (var t = 0; t < 6; t++) {
        var more = Math.ceil(under(s, extra));
        if (!(more > 0)) { break; }
        extra += more;
      }
      if (!(extra > 0)) { return; }
      // the room above the drawing first (8 px kept)
      var high = Math.min.apply(null, ns.map(function (n) { return (n[1] - n[3]) * s; }));
      var lift = Math.max(0, Math.min(extra, Math.floor(high - 8)));
      if (!(fitRatio > 0) && lift >= extra) {
        network.moveTo({scale: s, position: {x: top.x, y: top.y + (lift + cr.height / 2) / s}, animation: false});
        return;
      }
      if (fitRatio > 0) {
        // then a taller canvas
        var grow = extra - lift;
        if (grow > 0) {
          box.style.setProperty("height", (box.clientHeight + grow) + "px", "important");
          network.body.emitter.emit("setSize");
        }
        network.moveTo({scale: s, position: {x: top.x, y: top.y + lift / s + (cr.height + grow) / 2 / s}, animation: false});
        return;
      }
      for (var k = 1; k <= 40; k++) {
        var z = s * (1 - 0.01 * k);
        if (!(under(z, 0) > 0)) {
          network.moveTo({scale: z, position: {x: top.x, y: top.y + cr.height / 2 / z}, animation: false});
          return;
        }
      }
    }
    // The canvas takes the drawing's shape (data-crbc-fit: its height over its width, from
    // the layout's box), within bounds; the body grows with it, and the app's frame with that.
    var fitRatio = parseFloat(document.body.getAttribute("data-crbc-fit") || "0");
    function shape() {
      if (!(fitRatio > 0)) { return; }
      var box = document.getElementById("mynetwork");
      var h = Math.round(Math.min(Math.max(box.clientWidth * fitRatio, __FIT_MIN__), __FIT_MAX__));
      box.style.setProperty("height", h + "px", "important");
      box.style.setProperty("flex", "0 0 auto", "important");
      document.body.style.height = "auto";
    }
    // Labels never cover each other: once drawn at the fitted scale, each label (the chosen
    // and highlighted anchors first, "+n anchors" clusters, then by visits; then edge labels,
    // the highlighted steps first, then by count) keeps its place, moves above its anchor
    // (an edge label: just above or below), shortens to its s-id, or is hidden; the page says
    // how many are hidden (their text stays in the tooltips).
    var orig = {};
    function placeLabels() {
      var t0 = performance.now(), cell = 96, grid = {}, gap = 3;  // gap: between two labels side by side
      function cells(r, f) {
        for (var i = Math.floor(r[0] / cell); i <= Math.floor(r[2] / cell); i++) {
          for (var j = Math.floor(r[1] / cell); j <= Math.floor(r[3] / cell); j++) {
            if (f(i + "," + j)) { return true; }
          }
        }
        return false;
      }
      function free(r) {
        return !cells(r, function (k) {
          return (grid[k] || []).some(function (q) {
            return r[0] - gap < q[2] && q[0] < r[2] + gap && r[1] < q[3] && q[1] < r[3];
          });
        });
      }
      function take(r) { cells(r, function (k) { (grid[k] = grid[k] || []).push(r); return false; }); }
      var todo = [], hidden = 0, nupd = [], eupd = [];
      // The navigation buttons (the canvas's bottom corners) are taken first: no label is
      // placed under one.
      var cr = document.querySelector("#mynetwork canvas").getBoundingClientRect();
      document.querySelectorAll("#mynetwork .vis-navigation .vis-button").forEach(function (b) {
        var br = b.getBoundingClientRect();
        if (!(br.width > 0)) { return; }
        var a = network.DOMtoCanvas({x: br.left - cr.left, y: br.top - cr.top});
        var z = network.DOMtoCanvas({x: br.right - cr.left, y: br.bottom - cr.top});
        take([a.x, a.y, z.x, z.y]);
      });
      network.body.nodeIndices.forEach(function (id) {
        var n = network.body.nodes[id], o = n.options;
        if (o.shape !== "dot") {
          take([n.x - n.shape.width / 2, n.y - n.shape.height / 2, n.x + n.shape.width / 2, n.y + n.shape.height / 2]);
          return;
        }
        var r = 0.85 * o.size;
        take([n.x - r, n.y - r, n.x + r, n.y + r]);
        if (!(("n:" + id) in orig)) { orig["n:" + id] = {label: o.label, v: o.font.vadjust || 0}; }
        if (!o.label) { return; }
        var prio = (o.borderWidth >= 4 ? 3000 : 0) + (String(id).indexOf("cluster:") === 0 ? 2000 : 0) + o.size;
        todo.push({ds: "n", id: id, item: n, prio: prio});
      });
      network.body.edgeIndices.forEach(function (id) {
        var e = network.body.edges[id], o = e.options;
        if (!(("e:" + id) in orig)) { orig["e:" + id] = {label: o.label, v: o.font.vadjust || 0}; }
        if (!o.label || !e.connected) { return; }
        todo.push({ds: "e", id: id, item: e, prio: (/^t[0-9]/.test(String(o.label)) ? 1000 : 0) + o.width});
      });
      todo.sort(function (a, b) { return b.prio - a.prio; });
      todo.forEach(function (t) {
        var z = t.item.labelModule.size, o = t.item.options, k = t.ds + ":" + t.id;
        var rect = [z.left, z.top, z.left + z.width, z.top + z.height];
        var moves = t.ds === "n"
          ? [0, -(z.top - t.item.y) - o.size - 2 - z.height]
          : [0, -(z.height + 2), z.height + 2];
        var texts = [o.label];
        if (t.ds === "n" && o.crbcShort && o.crbcShort !== o.label) { texts.push(o.crbcShort); }
        for (var a = 0; a < texts.length; a++) {
          var w = z.width * (a ? (texts[a].length + 1) / (String(o.label).length + 1) : 1);
          var cx = (rect[0] + rect[2]) / 2;
          for (var m = 0; m < moves.length; m++) {
            var r = [cx - w / 2, rect[1] + moves[m], cx + w / 2, rect[3] + moves[m]];
            if (free(r)) {
              take(r);
              if (a || m) {
                var u = {id: t.id, label: texts[a], font: {vadjust: orig[k].v + moves[m]}};
                (t.ds === "n" ? nupd : eupd).push(u);
              }
              return;
            }
          }
        }
        hidden += 1;  // (vis-network keeps a label replaced by "": a blank one draws nothing)
        (t.ds === "n" ? nupd : eupd).push({id: t.id, label: " "});
      });
      // On the drawn items themselves: a DataSet update makes vis-network re-check every
      // node and edge (tens of ms on a summary); the data sets keep the labels as made.
      nupd.forEach(function (u) { network.body.nodes[u.id].setOptions(u); });
      eupd.forEach(function (u) { network.body.edges[u.id].setOptions(u); });
      document.body.setAttribute("data-crbc-place-ms", (performance.now() - t0).toFixed(1));
      var note = document.getElementById("crbc-hidden");
      if (note) {
        note.textContent = hidden ? hidden + " label" + (hidden > 1 ? "s" : "") +
          " hidden where they would cover others (least visited first; hover for them)" : "";
        note.style.display = hidden ? "" : "none";
      }
    }
    function unplace() {
      function back(items, p) {
        Object.keys(items).forEach(function (id) {
          var o = orig[p + id], x = items[id];
          if (o && (x.options.label !== o.label || (x.options.font.vadjust || 0) !== o.v)) {
            x.setOptions({id: x.id, label: o.label, font: {vadjust: o.v}});
          }
        });
      }
      back(network.body.nodes, "n:"); back(network.body.edges, "e:");
    }
    // Fit once the frame has a width (also when an expander or tab reveals it after the
    // first draw), and again when its width changes (vis-network would shrink the zoom, and
    // the labels with it); the page says it is ready after that first fit.
    var lastW = 0, lastH = 0;
    // How many times vis-network drew the canvas (data-crbc-redraws), and when the page first
    // said it was ready (data-crbc-ready-ms: ms since the frame's navigation began).
    var redraws = 0;
    network.on("afterDrawing", function () {
      redraws += 1;
      document.body.setAttribute("data-crbc-redraws", String(redraws));
    });
    function ready() {
      if (!document.body.hasAttribute("data-crbc-ready-ms")) {
        document.body.setAttribute("data-crbc-ready-ms", performance.now().toFixed(1));
      }
      document.body.setAttribute("data-crbc-ready", "1");
    }
    // Two drawings: one at the fitted scale with the legible label sizes (vis-network finds
    // where each label lands only as it draws it), then the placed labels. The canvas takes
    // its box's size without a drawing (what redraw does first), and fit sizes the nodes
    // itself. A drawing vis-network has already asked for (its first, a fit's, a data set's
    // update) comes on the next frame anyway: it draws the placed labels.
    function draw() {
      var box = document.getElementById("mynetwork");
      // Again if the note on hidden labels changed the canvas's height (vis-network would
      // shrink the zoom, and the labels with it).
      for (var pass = 0; pass < 3; pass++) {
        shape();
        network.body.emitter.emit("setSize");
        // (vis-network never zooms a fit past 1 unless told: a canvas wider than its layout)
        network.fit({animation: false, maxZoomLevel: 4});
        clearOfButtons();
        var w = box.clientWidth, h = box.clientHeight;
        unplace();
        legible();
        var asked = network.renderer.redrawRequested === true;
        network.redraw();
        placeLabels();
        if (box.clientWidth === w && box.clientHeight === h) { break; }
      }
      network.once("afterDrawing", ready);
      if (!asked) { network.redraw(); }
    }
    // The Fit button, and vis-network's own (the bottom-right corner): the drawing's own view
    // again (its labels were placed for it), nodes clear of the buttons.
    window.crbcFit = draw;
    var extend = document.querySelector("#mynetwork .vis-navigation .vis-zoomExtends");
    if (extend) { extend.addEventListener("pointerup", function () { window.requestAnimationFrame(draw); }); }
    var canvasBox = document.getElementById("mynetwork");
    function seen() {
      var w = document.body.clientWidth, h = canvasBox.clientHeight;
      if (w > 0 && (lastW === 0 || Math.abs(w - lastW) > 1 || Math.abs(h - lastH) > 1)) {
        draw();
        h = canvasBox.clientHeight;
      } else if (w === 0) { ready(); }
      lastW = w; lastH = h;
    }
    // The first drawing now, when the frame has a width: the observer's first call then sees
    // the size just drawn.
    if (document.body.clientWidth > 0) { seen(); }
    var watch = new ResizeObserver(seen);
    watch.observe(document.body); watch.observe(canvasBox);
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
PAGE_SCRIPT = PAGE_SCRIPT.replace("__FIT_MIN__", str(FIT_CANVAS_PX[0])).replace(
    "__FIT_MAX__", str(FIT_CANVAS_PX[1])
)


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
        f"<span class='item'>{esc(value_title)}: <span class='lo'>{fmt_scale(value_lo)}</span>"
        f"<span class='bar value' style='background:{bar}'></span><span class='hi'>{fmt_scale(value_hi)}</span>"
        f"{' (near → far)' if not higher_better else ''}</span>"
        f"<span class='item'>credit: {fmt_scale(-credit_lim)}<span class='bar credit' style='background:"
        f"{css_gradient(CREDIT_COLORSCALE)}'></span>+{fmt_scale(credit_lim)}</span>"
        f"<span class='item'><span style='color:{MISSING_COLOR}'>■</span> undefined</span>"
        f"<span class='item'><span style='letter-spacing:-1px'>- - →</span> time limit</span>"
        f"<span class='item' id='crbc-hidden' style='display:none'></span></div>"
    )


_TOOLS = (
    "<div id='crbc-tools'><button onclick=\"(window.crbcFit || function () { network.fit(); })()\">Fit</button>"
    "<button onclick=\"crbcExport('png')\">PNG</button>"
    "<button onclick=\"crbcExport('svg')\">SVG</button></div>"
)


def check_min_label_px(min_label_px) -> None:
    """Raise ValueError naming ``min_label_px`` unless it is a finite number ≥ 0."""
    ok = isinstance(min_label_px, (int, float)) and not isinstance(min_label_px, bool)
    if not (ok and math.isfinite(min_label_px) and min_label_px >= 0):
        raise ValueError(f"min_label_px must be a finite number of px ≥ 0, got {min_label_px!r}")


#: Selectors of vis-network's style sheet for what a drawing never shows: the manipulation
#: toolbar, the configurator, the edit popup (physics and editing are off). Their rules carry
#: ~175 KB of inline icons, a quarter of every drawing's page, parsed again on each redraw.
_UNUSED_VIS_CSS = re.compile(
    r"vis-manipulation|vis-edit-mode|vis-close|vis-configuration|vis-color-picker|vis-label"
    r"|vis-button\.vis-(?:add|delete|connect|back|edit)|vis-separator|vis-none|vis-initialfocus"
)


def trim_vis_css(page: str) -> str:
    """``page`` without the rules of its inline vis-network style sheet that no drawing uses
    (`_UNUSED_VIS_CSS`: a rule goes only when every selector in it is one of those); the
    navigation buttons', the tooltip's and the overlay's rules stay. A page with no such
    sheet is returned as it is."""

    def trim(m: re.Match) -> str:
        css = m.group(2)
        if "vis-network" not in css or "{" not in css:
            return m.group(0)
        kept = [
            f"{sel}{{{body}}}"
            for sel, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css)
            if not all(_UNUSED_VIS_CSS.search(part) for part in sel.split(","))
        ]
        return f"{m.group(1)}{''.join(kept)}</style>"

    return re.sub(r"(<style[^>]*>)(.*?)</style>", trim, page, count=1, flags=re.S)


def finish_page(
    page: str,
    *,
    height_px: int,
    legend: str,
    graph_key: str,
    name: str,
    min_label_px: float,
    fit_ratio: float = 0.0,
    fill_frame: bool = False,
) -> str:
    """pyvis's generated ``page`` made self-contained and laid out: its unused bootstrap CDN
    tags, empty heading and unused vis-network style rules (`trim_vis_css`) dropped (nothing
    reaches the network), the style, the legend and
    tools row above the canvas, the body's data attributes (``graph_key`` for the remembered
    zoom, ``name`` for exports, ``min_label_px``, ``fit_ratio``: > 0 for a canvas whose height
    is its width × ``fit_ratio``, within bounds, the body growing with it; ``fill_frame``: the
    canvas fills the frame's height less the legend row) and `PAGE_SCRIPT`."""
    check_min_label_px(min_label_px)
    page = re.sub(r"<link[^>]*bootstrap[^>]*>\s*", "", page, flags=re.S)
    page = re.sub(r"<script[^>]*bootstrap[^>]*>\s*</script>\s*", "", page, flags=re.S)
    page = re.sub(r"<center>\s*<h1>\s*</h1>\s*</center>\s*", "", page, flags=re.S)
    page = trim_vis_css(page)
    # A canvas that takes its drawing's shape starts short: its frame can grow, not shrink.
    style = page_style(height_px if not fit_ratio > 0 else 340, fill=fill_frame and not fit_ratio > 0)
    page = page.replace("</head>", style + "</head>", 1)
    fname = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
    page = page.replace(
        "<body>",
        f"<body data-crbc-graph='{esc(graph_key)}' data-crbc-name='{esc(fname)}' "
        f"data-crbc-min-label='{float(min_label_px):g}' data-crbc-fit='{float(fit_ratio):.4g}'>"
        f"<div id='crbc-head'>{legend}{_TOOLS}</div>",
        1,
    )
    return page.replace("</body>", PAGE_SCRIPT + "</body>", 1)


#: An empty layer of a `layered_page` stack: nothing to draw, so ready at once.
LAYER_BLANK = (
    "<!doctype html><html><head><style>html, body { background: transparent; }</style></head>"
    "<body data-crbc-ready='1' data-crbc-blank='1'></body></html>"
)

_LAYER_CSS = """
<style>
  /* A layer of a stack: see-through and hidden until its network is drawn, so that the drawing
     under it stays in view meanwhile; then opaque. */
  html { background: transparent !important; }
  body:not([data-crbc-ready='1']) { visibility: hidden; background: transparent !important; }
  body[data-crbc-ready='1'] { background: #fff; }
</style>
"""


def layered_page(page: str) -> str:
    """A graph page (`finish_page`'s) for a stack of frames drawn one above the other: until its
    network has drawn (``data-crbc-ready``) it shows nothing and lets the frame under it show
    through; then it is opaque. A new drawing thus replaces the last one in one frame, never
    through a blank or half-drawn canvas.

    Raises:
        ValueError: ``page`` has no ``<head>`` (not a graph page).
    """
    if "<head>" not in page:
        raise ValueError("layered_page: the page has no <head>; expected a graph page")
    # First in the head: before the page's own scripts are parsed, nothing of it is painted.
    return page.replace("<head>", "<head>" + _LAYER_CSS, 1)
