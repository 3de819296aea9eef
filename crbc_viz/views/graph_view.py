"""The merged anchor graph of one group as a self-contained pyvis (vis-network) HTML page.

Pure: returns a string; nothing is written to disk. Every piece of logged text that reaches a
tooltip is HTML-escaped, and the node/edge JSON is embedded with ``<``, ``>``, ``&`` and ``'``
escaped as ``\\u003c`` etc. (Jinja's ``tojson``), so it cannot close the script tag.

The work is split along its seams: `crbc_viz.views.graph_values` (the numbers: V per node,
credit per edge), `crbc_viz.views.graph_geometry` (what is drawn and where, from
`crbc_viz.views.layout`), `crbc_viz.views.graph_page` (tooltips, legend, the page's style and
script); this module turns them into vis-network nodes and edges. Physics is off: every
position is computed in Python.

Clicking a node or an edge posts ``{crbc: "pick", kind, id}`` to the parent window (the app turns
it into a selection); the id is the node's global id, the edge's vis id (``"src->dst#…"``), or
for a cluster ``kind: "cluster"`` with id ``"cluster:<lo>"``. A click on an (anchor, action)
edge also opens its "Why this number" panel (`crbc_viz.views.why`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .._extras import require
from ..graph import FAILURE, SUCCESS, AnchorGraph
from ..io.actions import missing_actions
from .colors import FAILURE_COLOR, MISSING_COLOR, SUCCESS_COLOR, credit_color, credit_limit, value_color
from .graph_geometry import FONT, Placement, place, stack_loops
from .graph_page import (
    MIN_LABEL_PX,
    check_min_label_px,
    credit_meaning,
    esc,
    finish_page,
    fmt_credit,
    fmt_value,
    legend_html,
    node_tip,
    short_label,
)
from .graph_values import (
    EdgeCredit,
    node_values,
    pair_values,
    truncated_steps,
    value_meaning,
    value_range,
)
from .layout import (
    FAILURE_ID,
    OPEN_STEP,
    SUCCESS_ID,
    Summary,
    group_edges,
    start_anchors,
)
from .summary_space import ROUNDNESS, chain_label
from .why import why_page_block

__all__ = ["DEFAULT_MAX_NODES", "FRESH_COLOR", "GraphDrawing", "graph_html", "graph_drawing", "summary_note"]

#: Anchors drawn one by one before a group is summarised (`crbc_viz.views.layout.summarise`).
DEFAULT_MAX_NODES = 120
#: A canvas that takes its drawing's shape: the width (canvas px) the layout fills, about the
#: narrowest canvas of the app's Graph page (an 800 px window), so that a wider one shows it at
#: a scale ≥ 1; and the room (px) around the layout's box for node labels, self-loops and
#: the boundaries' boxes.
FIT_WIDTH = 720.0
_FIT_PAD = (90.0, 70.0)


@dataclass(frozen=True)
class GraphDrawing:
    """A drawn group: the page, what it draws (`Summary`), and one sentence saying what the
    summary leaves out ('' when every anchor is drawn)."""

    html: str
    summary: Summary
    note: str
    #: The drawing's height over its width (its canvas's shape) where the layout was made to be
    #: fitted (``fit_canvas`` or ``fill_frame``); 0 otherwise.
    ratio: float = 0.0


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


def _mean(total: float, n: int) -> float:
    return total / n if n else float("nan")


@dataclass(frozen=True)
class _Scene:
    """What every node and edge of one drawing is styled from."""

    graph: AnchorGraph
    group_lo: int
    estimator: str
    node_value: np.ndarray
    pair_q: np.ndarray
    pair_credit: np.ndarray
    value_lo: float
    value_hi: float
    higher_better: bool
    credit_lim: float
    credit_note: str
    starts: frozenset
    highlighting: bool
    selected_node: int | None
    #: Action ids of steps whose log names no action (keyed by their transition, shown as such).
    inferred: frozenset = frozenset()
    #: Anchors that the last click on a cluster drew (marked until the next interaction).
    fresh: frozenset = frozenset()

    def name(self, it) -> str:
        """How an edge's tooltip names a drawn item."""
        if isinstance(it, str):
            return it if it in (SUCCESS_ID, FAILURE_ID) else f"+{it.split(':')[1]} (cluster)"
        return f"s{it - self.group_lo}"


def _anchor_nodes(sc: _Scene, pl: Placement) -> list[dict]:
    """The anchors drawn one by one: colour = value, size = visits, a ring for the chosen anchor,
    the highlighted path and the start anchors."""
    graph, lo, hi = sc.graph, sc.value_lo, sc.value_hi
    drawn = list(pl.summary.anchors)
    vmax = max(int(graph.node_visits[drawn].max()) if drawn else 1, 1)
    out = []
    for n in pl.summary.anchors:
        x, y = pl.pos[n]
        v = sc.node_value[n]
        on_path = n in pl.path_nodes
        fill = value_color(v, lo, hi) if sc.higher_better else value_color(lo + hi - v, lo, hi)
        chosen = sc.selected_node is not None and n == int(sc.selected_node)
        border = (
            "#d81b60"
            if chosen
            else "#000000"
            if on_path
            else ("#1f1f1f" if n in sc.starts else "#888888" if fill == MISSING_COLOR else fill)
        )
        local = n - sc.group_lo
        tip = node_tip(graph, n, local, v, sc.pair_q, sc.pair_credit, sc.estimator, n in sc.starts)
        out.append(
            {
                "id": n,
                "label": short_label(graph.node_anchor_obs[n], local, pl.label_chars),
                # What the page's label placement shortens the label to where it has no room.
                "crbcShort": f"s{local}",
                "title": tip + sc.credit_note,
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
                "borderWidth": 7 if chosen else 4 if on_path else (2 if n in sc.starts else 1),
                "opacity": 1.0 if (not sc.highlighting or on_path) else 0.35,
                "font": {"size": FONT["anchor"], "color": "#222222"},
            }
        )
        if n in sc.fresh:
            out[-1].update(_FRESH, title=_FRESH_TIP + out[-1]["title"])
            if not chosen:
                out[-1]["borderWidth"] = 5
                out[-1]["color"] = {**out[-1]["color"], "border": FRESH_COLOR}
    return out


#: The ring and glow of an anchor that the last click on a cluster drew.
FRESH_COLOR = "#ff6d00"
_FRESH = {"crbcFresh": True, "shadow": {"enabled": True, "color": FRESH_COLOR, "size": 14, "x": 0, "y": 0}}
_FRESH_TIP = "<div><b style='color:#e65100'>just drawn</b> from the cluster you opened</div>"


def _cluster_nodes(sc: _Scene, pl: Placement) -> list[dict]:
    """The "+n anchors" clusters of a summary (a click opens one)."""
    visits = sc.graph.node_visits
    out = []
    for cl in pl.summary.clusters:
        x, y = pl.pos[cl.id]
        names = ", ".join(f"s{m - sc.group_lo}" for m in cl.members[:5])
        out.append(
            {
                "id": cl.id,
                "label": f"+{len(cl.members):,}",
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
                "opacity": 0.35 if sc.highlighting else 1.0,
                "font": {"size": FONT["cluster"], "color": "#333333"},
            }
        )
    return out


def _boundary_nodes(pl: Placement, succ_label: str, fail_label: str) -> list[dict]:
    """The two absorbing boundaries, SUCCESS and FAILURE."""
    out = []
    for bid, col, lab in ((SUCCESS_ID, SUCCESS_COLOR, succ_label), (FAILURE_ID, FAILURE_COLOR, fail_label)):
        x, y = pl.pos[bid]
        out.append(
            {
                "id": bid,
                "label": lab,
                "x": float(x),
                "y": float(y),
                "physics": False,
                "shape": "box",
                "color": {"background": col, "border": "#000000"},
                "title": f"<b>{bid}</b>: absorbing boundary (a rollout ends here)",
                "font": {"size": FONT["boundary"], "color": "#ffffff"},
                "borderWidth": 2,
                "margin": 8,
            }
        )
    return out


def _edge_records(graph: AnchorGraph, group: int, pl: Placement, cred: EdgeCredit) -> list[dict]:
    """One record per drawn edge: an anchor-to-anchor (or boundary) edge apart for its action
    and its time-limit steps (``act`` / ``time``), transitions summed to and from clusters
    (``agg_act`` / ``agg_time``), and one per collapsed linear chain (``chain``)."""
    item = pl.item
    records: list[dict] = []
    agg: dict[tuple, dict] = {}
    for e in group_edges(graph, group).tolist():
        p = int(graph.edge_pair[e])
        a = item.get(int(graph.pair_node[p]))
        x = int(graph.edge_next[e])
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
    for ch in pl.summary.chains:
        steps = np.flatnonzero(
            np.isin(graph.step_node, list(ch.interior))
            | ((graph.step_node == ch.src) & (graph.step_next == ch.interior[0]))
        )
        cc = cred.step_credit[steps]
        cc = cc[np.isfinite(cc)]
        records.append(
            {
                "kind": "chain",
                "chain": ch,
                "src": ch.src,
                "dst": ch.dst,
                "count": int((graph.step_node[steps] == ch.src).sum()),
                "credit": float(cc.mean()) if cc.size else float("nan"),
            }
        )
    return records


def _edge_text(sc: _Scene, r: dict, ts: list, show_action_labels: bool) -> tuple[str, str, str]:
    """(label, tooltip, id) of one edge record; ``ts``: the highlighted rollout's steps on it."""
    graph, est, src, dst, kind = sc.graph, esc(sc.estimator), r["src"], r["dst"], r["kind"]
    credit = fmt_credit(r["credit"])
    if kind in ("act", "time"):
        e, p = r["e"], r["p"]
        action = short = str(graph.action_names[graph.pair_action[p]])
        if int(graph.pair_action[p]) in sc.inferred:  # no action logged: named by its transition
            short = f"→ {sc.name(dst)}"
            action = f"{short} (no action logged: keyed by its transition)"
        ident = f"{src}->{dst}#{e}{'t' if kind == 'time' else ''}"
        if kind == "time":
            label = ("t" + ",".join(map(str, ts)) + " · " if ts else "") + "time limit"
            return (
                label,
                f"<b>time limit</b>: after <b>{esc(action)}</b> at s{src - sc.group_lo}, "
                f"{r['count']} rollout(s) ran out of steps: the step limit, not this action, ended "
                f"them (counted as FAILURE)<br>mean step credit = {credit} <i>({est})</i>",
                ident,
            )
        label = ""
        if ts:
            label = "t" + ",".join(str(t) for t in ts)
        elif show_action_labels and not sc.highlighting:
            label = short if len(short) <= 24 else short[:23] + "…"
        return (
            label,
            f"<b>action</b>: {esc(action)}<br>s{src - sc.group_lo} → {esc(sc.name(dst))}<br>"
            f"N(s,a,x) = {r['count']} of N(s,a) = {int(graph.pair_count[p])}<br>"
            f"Q(s,a) = {fmt_value(sc.pair_q[p])} · credit = {credit} <i>({est})</i>{sc.credit_note}",
            ident,
        )
    if kind == "chain":
        ch = r["chain"]
        names = " → ".join(f"s{m - sc.group_lo}" for m in ch.interior[:6]) + (
            " → …" if len(ch.interior) > 6 else ""
        )
        return (
            chain_label(ch),
            f"<b>a chain of {len(ch.interior)} anchor(s)</b> ({esc(names)}), each with one way in and "
            f"one way out, drawn as one edge of {ch.steps} steps from {esc(sc.name(src))} to "
            f"{esc(sc.name(dst))}; {r['count']} transition(s) enter it · mean step credit = "
            f"{credit} <i>({est})</i>. Click to draw its middle anchor.",
            f"{ch.interior[len(ch.interior) // 2]}->{dst}#{ch.id}",
        )
    return (
        "time limit" if kind == "agg_time" else "",
        f"<b>{r['count']} transition(s)</b> {esc(sc.name(src))} → {esc(sc.name(dst))}"
        f"{' (rollouts that ran out of steps)' if kind == 'agg_time' else ''} · mean step credit = "
        f"{credit} <i>({est})</i>",
        f"{src}->{dst}#{kind}",
    )


def _edges(sc: _Scene, pl: Placement, records: list[dict], cut: np.ndarray, show_action_labels) -> list[dict]:
    """The vis-network edges of ``records``: width = count, colour = mean credit, dashed for a
    time limit, the highlighted rollout's steps written on its edges; self-loops stacked."""
    graph = sc.graph
    path_label: dict[tuple[int, str], list[int]] = {}
    for t, st_ in enumerate(pl.path_steps.tolist()):
        path_label.setdefault((int(graph.step_edge[st_]), "time" if cut[st_] else "act"), []).append(t)
    if show_action_labels is None:
        show_action_labels = len(records) <= 60
    cmax = max((r["count"] for r in records), default=1)
    out, loops = [], {}
    for r in records:
        kind = r["kind"]
        col = credit_color(r["credit"], sc.credit_lim)
        ts = path_label.get((r["e"], kind), []) if kind in ("act", "time") else []
        label, title, ident = _edge_text(sc, r, ts, show_action_labels)
        width = 1.0 + 6.0 * math.sqrt(r["count"] / max(cmax, 1))
        on_path = bool(ts)
        edge = {
            "id": ident,
            "from": r["src"],
            "to": r["dst"],
            "arrows": "to",
            "title": title,
            "label": label,
            "width": width * (1.8 if on_path else 1.0),
            "dashes": [8, 5] if kind in ("time", "agg_time") else False,
            # Hover and selection keep the credit colour (vis-network greys them by default).
            "color": {
                "color": col,
                "highlight": col,
                "hover": col,
                "inherit": False,
                # Summed edges to and from clusters stay in the background of the drawn anchors'.
                "opacity": 0.2
                if sc.highlighting and not on_path
                else 0.45
                if kind.startswith("agg")
                else 1.0,
            },
            # Horizontal: the page's label placement moves it by its upright box.
            "font": {"size": FONT["edge"], "align": "horizontal", "color": "#333333", "strokeWidth": 3},
        }
        if r["src"] == r["dst"]:
            loops.setdefault(r["src"], []).append(edge)
        out.append(edge)
    return out, loops


#: vis-network options: physics off (positions come from Python); curved edges, since a
#: straight edge between two columns can run through the nodes between them and read as a
#: path through them.
_OPTIONS = {
    "physics": {"enabled": False},
    "edges": {
        "smooth": {"enabled": True, "type": "curvedCW", "roundness": ROUNDNESS},
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


@lru_cache(maxsize=4)
def pyvis_templates(template_dir: str):
    """One jinja environment for pyvis's page template, shared by every drawing: pyvis makes a
    new one per `Network`, so each drawing compiled the template again, with the ~0.5 MB
    vis-network library it includes (about 40 % of a drawing's time); the environment keeps
    the compiled templates (and reloads one whose file changed). The same settings as pyvis's
    own, so the page is the same."""
    jinja2 = require("jinja2", "the graph drawing")  # pyvis's own template engine

    return jinja2.Environment(loader=jinja2.FileSystemLoader(template_dir))


def _network(sc: _Scene, pl: Placement, credit, *, height_px, group, labels, show_action_labels, cut):
    """The pyvis ``Network`` of a drawing, its edge records and its vis-network edges."""
    Network = require("pyvis.network", "the graph drawing").Network
    graph = sc.graph
    net = Network(
        height=f"{int(height_px)}px", width="100%", directed=True, cdn_resources="in_line", heading=""
    )
    net.templateEnv = pyvis_templates(net.template_dir)
    # Direct append: pyvis's add_node re-scans the node list per node (quadratic).
    net.nodes.extend(_anchor_nodes(sc, pl) + _cluster_nodes(sc, pl) + _boundary_nodes(pl, *labels))
    net.node_ids = [nd["id"] for nd in net.nodes]
    records = _edge_records(graph, group, pl, credit)
    edges, loops = _edges(sc, pl, records, cut, show_action_labels)
    net.edges.extend(edges)
    stack_loops(loops, pl.pos, {nd["id"]: float(nd.get("size", 0.0)) for nd in net.nodes})
    net.options = _OPTIONS
    return net, records, edges


def _scene(
    graph: AnchorGraph, result, pl: Placement, *, group, estimator, highlight_traj, selected_node, mark_opened
):
    """The `_Scene` of a drawing (values, colour scales, marks) and what its node colour means
    (`value_meaning`: legend title, higher is better, SUCCESS and FAILURE labels)."""
    sl = graph.group_slice(group)
    nv = node_values(graph, result)
    q, c = pair_values(graph, result)
    step_sl = np.flatnonzero(graph.batch.step_group == group)
    meaning = value_meaning(estimator)
    lo, hi = value_range(nv[sl])
    sc = _Scene(
        graph=graph,
        group_lo=sl.start,
        estimator=estimator,
        node_value=nv,
        pair_q=q,
        pair_credit=c,
        value_lo=lo,
        value_hi=hi,
        higher_better=meaning[1],
        credit_lim=credit_limit(result.credit[step_sl] if result is not None else None),
        credit_note=credit_meaning(result),
        starts=frozenset(start_anchors(graph, group)),
        highlighting=highlight_traj is not None,
        selected_node=selected_node,
        inferred=frozenset(np.unique(graph.step_action[missing_actions(graph.batch)]).tolist()),
        fresh=frozenset(pl.summary.opened[-1][1]) if mark_opened and pl.summary.opened else frozenset(),
    )
    return sc, meaning


def _drawn(graph: AnchorGraph, result, pl: Placement, est: str, marks: dict, page_opts: dict) -> GraphDrawing:
    """`graph_drawing` once placed: ``marks`` are its group, highlight, chosen anchor and fresh
    rings, ``page_opts`` its page arguments (the same names)."""
    o = page_opts
    cut = truncated_steps(graph)
    sc, (v_title, higher_better, succ_label, fail_label) = _scene(graph, result, pl, estimator=est, **marks)
    net, records, edges = _network(
        sc,
        pl,
        EdgeCredit(graph, result, cut),
        height_px=o["height_px"],
        group=marks["group"],
        labels=(succ_label, fail_label),
        show_action_labels=o["show_action_labels"],
        cut=cut,
    )
    params_text = o["params_text"]
    fitted = o["fit_canvas"] or o["fill_frame"]
    ratio = (pl.box[1] + _FIT_PAD[1]) / (pl.box[0] + _FIT_PAD[0]) if fitted else 0.0
    page = finish_page(
        net.generate_html(),
        height_px=o["height_px"],
        legend=legend_html(est, params_text, v_title, higher_better, sc.value_lo, sc.value_hi, sc.credit_lim),
        graph_key=o["graph_key"],
        name=f"graph_{est}{('_' + params_text) if params_text else ''}",
        min_label_px=o["min_label_px"],
        fit_ratio=ratio if o["fit_canvas"] and not o["fill_frame"] else 0.0,
        fill_frame=o["fill_frame"],
    )
    # "Why this number": a click on an (anchor, action) edge opens its arithmetic in a panel.
    why = [
        (ed["id"], r["e"], r["kind"] == "time")
        for r, ed in zip(records, edges)
        if r["kind"] in ("act", "time")
    ]
    block = why_page_block(graph, result, why, cut, on_click=o["why_on_click"])
    page = page.replace("</body>", block + "</body>", 1)
    return GraphDrawing(page, pl.summary, summary_note(pl.summary), ratio)


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
    min_label_px: float = MIN_LABEL_PX,
    why_on_click: bool = False,
    mark_opened: bool = False,
    fit_canvas: bool = False,
    fill_frame: bool = False,
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
        opened: the clicks on the "+n anchors" clusters (``cluster:<lo>``): their first depths in
            click order, or ``{lo: clicks}``; what was drawn stays (`crbc_viz.views.summary_space`).
        height_px: page height (the legend row and the canvas).
        show_action_labels: write the action on each edge; default when ≤ 60 edges are drawn.
        estimator: name shown in tooltips and the legend (default ``result.estimator``).
        selected_node: global node id drawn with a thick ring (the chosen anchor).
        params_text: non-default parameters, shown in the legend (e.g. ``beta=0.9``).
        graph_key: names the graph for the parent window's remembered zoom.
        by_step: columns by the highlighted rollout's step (`step_depths`), for large groups.
        min_label_px: the smallest node and edge label on screen (px) at the first fit: on a
            narrow canvas labels are drawn larger in canvas units (16 for a projector).
        why_on_click: build no "Why this number" panel here (the app, which reruns on a click,
            adds the clicked edge's with `crbc_viz.views.why.open_why`); else the
            `crbc_viz.views.why.MAX_WHY_EDGES` most travelled edges' panels are in the page.
        mark_opened: ring the anchors that the last click in ``opened`` drew (`FRESH_COLOR`).
        fit_canvas: the canvas takes the drawing's shape (a `FIT_WIDTH` box as tall as its
            columns need, `crbc_viz.views.layout.fit_box`; embed it in a frame that follows its
            content's height); else the canvas is ``height_px`` less the legend row.
        fill_frame: laid out as for ``fit_canvas``; the canvas fills its frame less the legend
            row (a frame sized from `GraphDrawing.ratio` by CSS: `crbc_viz.views.share`).

    A click posts ``{crbc: "pick", kind, id}`` to the parent window (the module's docstring).

    Returns:
        `GraphDrawing`; no file is written.

    Raises:
        ValueError: ``min_label_px`` is not a finite number ≥ 0.
    """
    require("pyvis.network", "the graph drawing")  # a missing [app] extra: one line, before any work
    check_min_label_px(min_label_px)
    est = estimator or (result.estimator if result is not None else "—")
    pl = place(
        graph,
        group=group,
        height_px=height_px,
        highlight_traj=highlight_traj,
        nodes=nodes,
        max_nodes=max_nodes,
        keep=keep,
        opened=opened,
        selected_node=selected_node,
        by_step=by_step,
        min_label_px=min_label_px,
        fit_width=FIT_WIDTH if fit_canvas or fill_frame else None,
    )
    return _drawn(
        graph,
        result,
        pl,
        est,
        dict(
            group=group, highlight_traj=highlight_traj, selected_node=selected_node, mark_opened=mark_opened
        ),
        dict(
            height_px=height_px,
            show_action_labels=show_action_labels,
            params_text=params_text,
            graph_key=graph_key,
            min_label_px=min_label_px,
            why_on_click=why_on_click,
            fit_canvas=fit_canvas,
            fill_frame=fill_frame,
        ),
    )


def graph_html(graph: AnchorGraph, result=None, **kwargs) -> str:
    """The page of `graph_drawing` (same arguments)."""
    return graph_drawing(graph, result, **kwargs).html
