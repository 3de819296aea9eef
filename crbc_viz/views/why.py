"""“Why this number”: the arithmetic behind the credit of one step, or of every occurrence of
one drawn edge (s, a, x), with the numbers of this group.

Pure: numbers from an estimator's `CreditResult` and its graph in, an `Why` record and escaped
HTML out. The arithmetic (`Explainer`, `explain`, the `Why` records) is in
`crbc_viz.views.why_explain`, imported here; this module writes it as HTML. Each estimator's
explanation reads what its result exposes (CRBC's V and Q, the per-step value / Q / credit
columns) and computes the rest in one place (μ, σ, the normalisation, the group advantage, the
final combination); `tests/views/test_why.py` checks that every final line equals the
estimator's own credit and advantage.

- CRBC (and visit-local averaging, its depth 0): V(s) as the solve gives it, Q(s, a) as the
  backup over the observed successors (count, P, V, boundary reward), σ(s), the gate, the
  normalisation, A^G and the final credit; visit-local: the suffix returns averaged.
- Shortest path (GraphGPO): d(s), the route from the successor to SUCCESS, R^G, the
  z-score over the source's outgoing occurrences, A^E and the final credit.
- GiGPO: the step group G^S(s) (its members' discounted returns), its mean and F_norm, A^E.
- Any other estimator: what its credit is (the registry's equation) and the values per visit.

`why_page_block` embeds the explanations of a drawing's edges in the graph page (lazy JSON,
bounded by `MAX_WHY_EDGES`), with a panel that a click on an edge opens.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

from ..graph import FAILURE, SUCCESS, AnchorGraph
from .graph_page import esc
from .why_explain import MAX_ROWS, Explainer, Line, Table, Why, _n, edge_steps, explain

__all__ = [
    "MAX_ROWS",
    "MAX_WHY_EDGES",
    "edge_explanation",
    "Line",
    "Table",
    "Why",
    "Explainer",
    "explain",
    "edge_steps",
    "why_html",
    "why_style",
    "why_page_block",
    "open_why",
]

#: Drawn edges whose explanation a graph page embeds, at most (most travelled first).
MAX_WHY_EDGES = 150


# ---------------------------------------------------------------- HTML
_STYLE = """
<style>
  .crbc-why { font-family: sans-serif; font-size: 12px; line-height: 1.45; color: #222; }
  #crbc-why .crbc-why { font-size: inherit; }
  .crbc-why h4 { margin: 0.6em 0 0.15em; font-size: 1.08em; }
  .crbc-why .why-head { font-size: 1.08em; margin-bottom: 0.3em; }
  .crbc-why .why-f { font-family: monospace; font-size: 0.95em; color: #555; margin: 0.15em 0 0.3em; }
  .crbc-why .why-ln { margin: 0.1em 0; }
  .crbc-why .why-x { color: #444; font-family: monospace; font-size: 0.95em; }
  .crbc-why .why-ln b { font-family: monospace; }
  .crbc-why table { border-collapse: collapse; font-size: 0.95em; margin: 0.25em 0 0.5em; }
  .crbc-why td, .crbc-why th { border: 1px solid #ddd; padding: 1px 4px; text-align: right; }
  .crbc-why td.t, .crbc-why th { text-align: left; }
  .crbc-why tr.why-focus td { background: #fff7d6; }
  .crbc-why .why-cap { font-style: italic; color: #555; }
  .crbc-why .why-note { color: #555; }
  .crbc-why section { border-top: 1px solid #ddd; padding-top: 0.25em; margin-top: 0.3em; }
</style>
"""


def why_style() -> str:
    """The panel's style (a ``<style>`` block, its rules scoped to ``.crbc-why``)."""
    return _STYLE


def _math(text) -> str:
    """Escaped ``text`` with its notation set as math: ``A^S`` → A<sup>S</sup>, ``V^(K−1)`` →
    V<sup>(K−1)</sup>, ``σ_min`` → σ<sub>min</sub> (the panel's labels and formulas are ours)."""
    out = re.sub(r"\^(\([^)]*\)|[A-Za-z0-9∞]+)", r"<sup>\1</sup>", esc(text))
    out = re.sub(r"(?<=[A-Za-zα-ωΑ-Ω>])_\(([^)]*)\)", r"<sub>\1</sub>", out)
    return re.sub(r"(?<=[A-Za-zα-ωΑ-Ω>])_([A-Za-z0-9]+)", r"<sub>\1</sub>", out)


def _exact(v: float) -> str:
    """A value for ``data-val``: 12 significant digits (the panel shows 4 decimals)."""
    return format(float(v), ".12g")


def _cell(col: str, v, exact: bool) -> str:
    tag = f"<td data-col='{esc(col)}'" if exact else "<td"
    if isinstance(v, (float, np.floating)):
        signed = col in ("credit", "advantage", "A_G", "A")
        return f"{tag}{f' data-val={_exact(v)!r}' if exact else ''}>{esc(_n(v, signed))}</td>"
    return f"{tag} class='t'>{esc(v)}</td>"


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{_math(h)}</th>" for h in t.header)
    rows = []
    for k, row in enumerate(t.rows):
        cls = " class='why-focus'" if t.focus is not None and k == t.focus else ""
        rows.append(f"<tr{cls}>" + "".join(_cell(c, v, t.exact) for c, v in zip(t.cols, row)) + "</tr>")
    more = f"<div class='why-note'>… {t.more:,} more row(s)</div>" if t.more else ""
    return f"<div class='why-cap'>{_math(t.caption)}</div><table><tr>{head}</tr>{''.join(rows)}</table>{more}"


def _line_html(ln: Line) -> str:
    whole = ln.whole and math.isfinite(ln.value) and float(ln.value).is_integer()
    shown = str(int(ln.value)) if whole else _n(ln.value, ln.signed)
    mid = f" = <span class='why-x'>{_math(ln.expr)}</span>" if ln.expr else ""
    return (
        f"<div class='why-ln' data-why='{esc(ln.key)}' data-val='{_exact(ln.value)}'>"
        f"<span class='why-l'>{_math(ln.label)}</span>{mid} = <b>{esc(shown)}</b></div>"
    )


def _section(w: Why, params_text: str = "") -> str:
    return (
        f"<section data-estimator='{esc(w.estimator)}'><h4>{esc(w.estimator)}"
        f"{(' (' + esc(params_text) + ')') if params_text else ''}</h4>"
        + (f"<div class='why-f'>{_math(w.formula)}</div>" if w.formula else "")
        + "".join(_line_html(ln) for ln in w.lines)
        + (f"<div class='why-note'>{esc(w.note)}</div>" if w.note else "")
        + "".join(_table_html(t) for t in w.tables)
        + "</section>"
    )


def _heading(graph: AnchorGraph, steps: np.ndarray) -> str:
    s0 = int(steps[0])
    n, x, p = int(graph.step_node[s0]), int(graph.step_next[s0]), int(graph.step_pair[s0])
    lo = int(graph.group_node_offsets[int(graph.node_group[n])])
    dst = "SUCCESS" if x == SUCCESS else "FAILURE" if x == FAILURE else f"s{x - lo}"
    action = str(graph.action_names[graph.pair_action[p]])
    b = graph.batch
    t = int(b.step_traj[s0])
    cut = s0 == int(b.traj_offsets[t + 1]) - 1 and bool(b.traj_truncated[t]) and not bool(b.traj_success[t])
    limit = " (time limit: the rollout ran out of steps, counted as FAILURE)" if cut else ""
    return (
        f"<div class='why-head'><b>Why this number</b> · action <b>{esc(action)}</b> at "
        f"s{n - lo} → {esc(dst)}{limit} · {len(steps):,} occurrence(s)</div>"
    )


def why_html(
    graph: AnchorGraph, results: dict, steps, *, style: bool = True, explainers: dict | None = None
) -> str:
    """The panel for ``steps`` (one edge's occurrences, the quoted one first) under each of
    ``results`` (``{name: CreditResult or the reason it could not run}``). Escaped HTML."""
    steps = np.asarray(steps, dtype=np.int64)
    parts = [why_style() if style else "", "<div class='crbc-why'>", _heading(graph, steps)]
    for name, res in results.items():
        if res is None or isinstance(res, str):
            parts.append(
                f"<section data-estimator='{esc(name)}'><h4>{esc(name)}</h4><div class='why-note'>"
                f"It could not run on this group: {esc(res or 'no result')}</div></section>"
            )
            continue
        ex = explainers.get(name) if explainers is not None else None
        if ex is None:
            ex = Explainer(graph, res)
            if explainers is not None:
                explainers[name] = ex
        parts.append(_section(ex.explain(steps)))
    parts.append("</div>")
    return "".join(parts)


# ---------------------------------------------------------------- the graph page's panel
_PANEL = """
<style>
  #crbc-why { display: none; position: absolute; right: 8px; top: 34px; z-index: 10;
              font-size: 12px; width: min(38em, 48vw); max-height: calc(100% - 48px); overflow: auto;
              background: #ffffff; border: 1px solid #999; border-radius: 6px;
              box-shadow: 0 2px 10px rgba(0,0,0,0.25); padding: 6px 10px 8px; box-sizing: border-box; }
  #crbc-why-close { float: right; border: none; background: none; font-size: 16px; cursor: pointer; }
</style>
<div id="crbc-why" role="dialog" aria-label="Why this number">
  <button id="crbc-why-close" type="button" aria-label="close">×</button><div id="crbc-why-body"></div>
</div>
<script type="application/json" id="crbc-why-data">__DATA__</script>
<script>
(function () {
  var box = document.getElementById("crbc-why"), body = document.getElementById("crbc-why-body");
  var data = null;  // parsed on the first click only
  // As large as the page's smallest label asks (a projector's 16 px), never below 12 px.
  var minPx = parseFloat(document.body.getAttribute("data-crbc-min-label") || "0");
  if (minPx > 12) { box.style.fontSize = minPx + "px"; }
  function payload() {
    if (data === null) {
      try { data = JSON.parse(document.getElementById("crbc-why-data").textContent); } catch (e) { data = {}; }
      // The app's explanation of the edge clicked last (computed on the click's rerun).
      var extra = document.getElementById("crbc-why-extra");
      if (extra) {
        try { var x = JSON.parse(extra.textContent); for (var k in x) { data.edges[k] = x[k]; } } catch (e) {}
      }
    }
    return data;
  }
  // The explanations are HTML built in Python with every piece of logged text escaped.
  function show(id) {
    var d = payload(), h = d.edges[id];
    if (h === undefined) {
      h = (d.ids || []).indexOf(id) >= 0 ? d.pending : d.more.indexOf(id) >= 0 ? d.none : d.summed;
    }
    if (!h) { return; }
    body.innerHTML = d.style + h;
    var head = document.getElementById("crbc-head");
    box.style.top = ((head ? head.offsetHeight : 0) + 6) + "px";
    box.setAttribute("data-edge", id);
    box.style.display = "block";
    document.body.setAttribute("data-crbc-why", id);
    pending = id;
    reveal();
  }
  function hide() { box.style.display = "none"; document.body.removeAttribute("data-crbc-why"); pending = null; }
  // The panel never hides the edge it explains: it goes to the side of the canvas away from
  // the edge, and the view pans (scale kept) to put both of the edge's anchors in the part of
  // the canvas the panel leaves free. After each drawing until the person pans or zooms: the
  // first fit and a restored view come after the panel opens on a redrawn page.
  var pending = null;
  function reveal() {
    if (pending === null || typeof network === "undefined" || box.style.display !== "block") { return; }
    var e = network.body.edges[pending], c = document.querySelector("#mynetwork canvas");
    if (!e || !e.from || !e.to || !c) { return; }
    var cr = c.getBoundingClientRect(), s = network.getScale();
    if (!(cr.width > 0) || !(s > 0)) { return; }
    var a = network.canvasToDOM({x: e.from.x, y: e.from.y}), b = network.canvasToDOM({x: e.to.x, y: e.to.y});
    var ra = (e.from.options.size || 0) * s, rb = (e.to.options.size || 0) * s;
    var lo = Math.min(a.x - ra, b.x - rb), hi = Math.max(a.x + ra, b.x + rb);
    var left = (lo + hi) / 2 > cr.width / 2;  // the panel on the side away from the edge
    box.style.left = left ? "8px" : "auto";
    box.style.right = left ? "auto" : "8px";
    box.setAttribute("data-side", left ? "left" : "right");
    var pr = box.getBoundingClientRect(), margin = 12;
    var fl = left ? pr.right - cr.left + margin : margin;
    var fr = left ? cr.width - margin : pr.left - cr.left - margin;
    if (fr - fl < 40 || (lo >= fl && hi <= fr)) { return; }
    var dx = hi - lo <= fr - fl ? (fl + fr) / 2 - (lo + hi) / 2 : (fl + fr) / 2 - (a.x + b.x) / 2;
    var at = network.getViewPosition();
    network.moveTo({position: {x: at.x - dx / s, y: at.y}, scale: s, animation: false});
  }
  if (typeof network !== "undefined") {
    network.on("afterDrawing", reveal);
    network.on("dragStart", function () { pending = null; });
    network.on("zoom", function () { pending = null; });
  }
  document.getElementById("crbc-why-close").addEventListener("click", function () {
    hide();
    // The app reopens the last clicked edge's panel on its next run unless told it was closed.
    if (window.parent !== window) { window.parent.postMessage({crbc: "pick", kind: "why-close", id: ""}, "*"); }
  });
  window.crbcWhy = show;
  if (typeof network !== "undefined") {
    network.on("click", function (p) {
      if (p.nodes && p.nodes.length) { return; }
      if (p.edges && p.edges.length) { show(String(p.edges[0])); }
    });
  }
  var first = document.body.getAttribute("data-crbc-why-open");
  if (first) { show(first); }
})();
</script>
"""


def _json_for_script(obj) -> str:
    """JSON that cannot end its ``<script>`` element or open a comment in it: every ``<`` as
    ``\\u003c`` (the element's text is raw: nothing else there is markup)."""
    return json.dumps(obj, ensure_ascii=False).replace("<", "\\u003c")


_SUMMED = (
    "<div class='crbc-why'><b>Why this number</b>: this edge sums the transitions of several "
    "anchors (a “+n anchors” cluster or a linear chain); click it open to draw its (anchor, "
    "action) edges, each with its arithmetic.</div>"
)


def edge_explanation(graph: AnchorGraph, result, edge_id: str | None) -> str | None:
    """The panel of the drawn (anchor, action) edge ``edge_id`` (a graph page's vis id,
    ``"src->dst#<edge>"`` or ``"…#<edge>t"`` for its time-limit part), or None for another id
    or without a result."""
    import re

    from .graph_values import truncated_steps

    m = re.fullmatch(r"[^#]*->[^#]*#(\d+)(t?)", edge_id or "")
    if m is None or result is None or isinstance(result, str):
        return None
    e, time_part = int(m.group(1)), bool(m.group(2))
    cut = truncated_steps(graph)
    steps = np.flatnonzero((graph.step_edge == e) & (cut == time_part))
    if not steps.size:
        return None
    return why_html(graph, {result.estimator: result}, steps, style=False)


def why_page_block(
    graph: AnchorGraph, result, edges: list[tuple[str, int, bool]], cut: np.ndarray, *, on_click: bool = False
) -> str:
    """The panel of a graph page and its lazy payload (parsed on the first click).

    ``edges``: the drawn (anchor, action) edges as ``(vis edge id, edge id, time-limit
    part?)``; ``cut``: the time-limit steps (`crbc_viz.views.graph_values.truncated_steps`).
    The `MAX_WHY_EDGES` most travelled get their explanation; a click on any other says why
    it has none. ``on_click`` (the app, which reruns on a click): no explanation is built
    here; a click shows "working it out" until the rerun draws the page again with that edge's
    (`edge_explanation`, `open_why`). '' without a result."""
    if result is None:
        return ""
    if on_click:
        pending = "<div class='crbc-why'><b>Why this number</b>: working out this edge's arithmetic …</div>"
        data = {
            "style": why_style(),
            "edges": {},
            "more": [],
            "none": "",
            "summed": _SUMMED,
            "pending": pending,
        }
        data["ids"] = [vis for vis, _, _ in edges]
        return _PANEL.replace("__DATA__", _json_for_script(data))
    order = np.lexsort((cut, graph.step_edge))
    keys = graph.step_edge[order] * 2 + cut[order]
    starts = np.searchsorted(keys, [e * 2 + int(t) for _, e, t in edges])
    ends = np.searchsorted(keys, [e * 2 + int(t) for _, e, t in edges], side="right")
    occ = [order[a:b] for a, b in zip(starts, ends)]
    rank = sorted(range(len(edges)), key=lambda k: -len(occ[k]))
    explainers: dict = {}
    payload = {}
    for k in rank[:MAX_WHY_EDGES]:
        if len(occ[k]):
            steps = np.sort(occ[k])
            payload[edges[k][0]] = why_html(
                graph, {result.estimator: result}, steps, style=False, explainers=explainers
            )
    none = (
        f"<div class='crbc-why'><b>Why this number</b>: this page explains its {MAX_WHY_EDGES} most "
        f"travelled (anchor, action) edges; choose one of this edge's steps on the Trajectories page "
        f"for its arithmetic.</div>"
    )
    more = [edges[k][0] for k in rank[MAX_WHY_EDGES:]]
    data = {"style": why_style(), "edges": payload, "more": more, "none": none, "summed": _SUMMED}
    return _PANEL.replace("__DATA__", _json_for_script(data))


def open_why(page: str, edge_id: str | None, explanation: str | None = None) -> str:
    """``page`` (a graph page with `why_page_block`) opening the panel of ``edge_id`` at load;
    ``explanation``: that edge's panel (`edge_explanation`), for a page drawn ``on_click``."""
    if not edge_id:
        return page
    if explanation is not None:
        extra = f'<script type="application/json" id="crbc-why-extra">{_json_for_script({edge_id: explanation})}</script>'
        # before the panel's script, which reads it as the page is parsed
        page = page.replace('<div id="crbc-why" ', extra + '<div id="crbc-why" ', 1)
    return page.replace("<body ", f"<body data-crbc-why-open='{esc(edge_id)}' ", 1)
