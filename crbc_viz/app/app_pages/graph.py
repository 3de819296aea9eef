"""Graph page: the merged anchor-state graph of one group with its SUCCESS / FAILURE
boundaries; node colour = the estimator's state value, size = visits; edge width = count,
colour = credit. Click a node or an edge to choose its anchor; the chosen rollout's path is
highlighted. A large group is summarised (its most visited anchors, linear chains as one edge,
the rest in "+n anchors" clusters that a click opens), and above ~150 anchors the page can
show only the chosen rollout's neighbourhood."""

import pandas as pd
import streamlit as st

from crbc_viz.ui import pipeline, view
from crbc_viz.ui.anchor_panel import anchor_rule_panel
from crbc_viz.ui.links import events, page_script
from crbc_viz.ui.params import params_to_url
from crbc_viz.ui.selection import pick_anchor, pick_rollout, pick_step, step_buttons
from crbc_viz.ui.share import download_view_button
from crbc_viz.ui.sidebar import require_selection
from crbc_viz.ui.text import cells, md
from crbc_viz.views.board import board_html
from crbc_viz.views.graph_page import MIN_LABEL_PX
from crbc_viz.views.graph_values import node_values, value_meaning
from crbc_viz.views.graph_view import DEFAULT_MAX_NODES
from crbc_viz.views.layout import OPEN_STEP
from crbc_viz.views.matching import all_grey, matching_line
from crbc_viz.views.projector import PROJECTOR_MIN_FONT, projector_graph_page
from crbc_viz.views.trajectories import anchor_panel_frame
from crbc_viz.views.why import open_why

#: This page's facts, read by the router without running the page (`crbc_viz.ui.pages.page_facts`):
#: menu order, title, icon, url path (default: the script's name), whether it has its own data
#: choice (no shared sidebar), an element that is there once it has loaded (tests wait on it), and
#: the URL fields the page keeps (name -> session-state key of its control; None: kept by the page
#: itself), which `crbc_viz.ui.view.FIELDS` reads.
PAGE = {
    "order": 2,
    "title": "Graph",
    "icon": ":material/hub:",
    "ready": "iframe",
    "fields": {
        "max_nodes": "graph_max_nodes",
        "labels": "graph_labels",
        "focus": "graph_focus",
        # the anchor-rule panel (ui.anchor_panel)
        "arule": "graph_anchor_rule",
        "afields": "graph_anchor_fields",
        "adrop": "graph_anchor_drop",
        "athr": "graph_anchor_threshold",
        "ascope": "graph_anchor_scope",
        "aclust": "graph_anchor_cluster",
        "aapply": "graph_anchor_apply",
    },
}

HEIGHT = 620
#: Above this many anchors the page offers (and defaults to) the chosen rollout's neighbourhood.
LARGE = 150
_OPENED = "_graph_opened"
_WHY = "_graph_why"


def _pick():
    events_state = st.session_state.get("crbc_events")
    try:
        return (
            events_state.get("pick") if hasattr(events_state, "get") else getattr(events_state, "pick", None)
        )
    except Exception:  # the bridge's state is not there yet
        return None


def why_edge(graph_key: str) -> str | None:
    """The edge whose "Why this number" panel is open in this group's graph: the last edge
    clicked there (the click reruns the page, which redraws the graph with it open), until a
    click on a node or on the panel's close button."""
    store = st.session_state.setdefault(_WHY, {})
    pick = _pick()
    # Each click once (the bridge numbers them), and only in the group it was made in.
    if isinstance(pick, dict) and store.get("_last") != pick.get("n"):
        store["_last"] = pick.get("n")
        ident = str(pick.get("id", ""))
        if pick.get("kind") == "edge" and "#" in ident:
            store[graph_key] = ident
        elif pick.get("kind") in ("node", "cluster", "why-close"):
            store.pop(graph_key, None)
    return store.get(graph_key)


def opened_clusters(graph_key: str) -> tuple[tuple, bool]:
    """(the first depths of the "+n anchors" clusters clicked in this group's graph during the
    session, in click order; whether this run is the one a click triggered). A click is
    counted once (the bridge numbers its messages); its anchors are marked until the next run."""
    store = st.session_state.setdefault(_OPENED, {})
    opened = store.setdefault(graph_key, [])
    if isinstance(opened, dict):  # a session from before clicks were kept in order
        opened = store[graph_key] = [lo for lo, k in sorted(opened.items()) for _ in range(k)]
    events_state = st.session_state.get("crbc_events")
    try:
        pick = (
            events_state.get("pick") if hasattr(events_state, "get") else getattr(events_state, "pick", None)
        )
    except Exception:  # the bridge's state is not there yet
        pick = None
    fresh = False
    if isinstance(pick, dict) and pick.get("kind") == "cluster":
        lo = str(pick.get("id", "")).partition("cluster:")[2]
        seen = (graph_key, pick.get("n"), lo)
        if lo.isdigit() and store.get("_last") != seen:
            store["_last"] = seen
            opened.append(int(lo))
            fresh = True
    return tuple(opened), fresh


def _controls(graph) -> dict:
    """The rollout, step and anchor pickers, then the drawing options (their problems shown):
    ``{traj, step, anchor, max_nodes, show_labels, large, focus}``."""
    problems: list = []
    c1, c2, c3 = st.columns([3, 1.3, 2.6])
    t = pick_rollout(c1, graph, label="Highlight a rollout's path", problems=problems)
    i = pick_step(c2, graph, t, problems=problems)
    anchor = pick_anchor(c3, graph, problems=problems)
    step_buttons(st, graph, t)
    c1, c2, c3 = st.columns([2, 2, 2])
    max_nodes = int(
        c1.number_input(
            "Max anchors drawn",
            min_value=20,
            max_value=2000,
            step=50,
            key=view.field(
                "max_nodes",
                DEFAULT_MAX_NODES,
                decode=int,
                options=lambda n: 20 <= n <= 2000,
                allowed="whole numbers 20 … 2000",
                problems=problems,
            ),
            help="a group with more anchors (or with a depth too crowded to read) is summarised: "
            "half as many of its most visited anchors are drawn, plus the highlighted path and the "
            "chosen anchor with its neighbours; linear chains become one edge with their length, "
            f"the rest gather in “+n anchors” clusters (a click draws {OPEN_STEP} more)",
        )
    )
    view.record("max_nodes")
    labels = c2.selectbox(
        "Action labels",
        ["auto", "on", "off"],
        key=view.field("labels", "auto", options=["auto", "on", "off"]),
        help="auto: on when at most 60 edges are drawn",
    )
    view.record("labels")
    large = graph.num_nodes > LARGE
    focus = False
    if large:
        focus = c3.toggle(
            "Only the rollout's neighbourhood",
            key=view.field(
                "focus",
                True,
                options=[True, False],
                decode={"True": True, "False": False}.get,
                allowed="True or False",
                problems=problems,
            ),
            help=f"above {LARGE} anchors: draw the highlighted rollout's anchors, "
            f"the chosen anchor and their one-step neighbours",
            disabled=t is None and anchor is None,
        )
        view.record("focus")
    for p in problems:
        st.warning(md(p))
    show = {"auto": None, "on": True, "off": False}[labels]
    return {
        "traj": t,
        "step": i,
        "anchor": anchor,
        "max_nodes": max_nodes,
        "show_labels": show,
        "large": large,
        "focus": bool(focus),
    }


def _draw(sel, graph, ctl: dict, ptxt: str) -> None:
    """The drawing, with what it leaves out said above it."""
    t, anchor = ctl["traj"], ctl["anchor"]
    lo = int(graph.group_node_offsets[0])
    focused = bool(ctl["focus"] and (t is not None or anchor is not None))
    gkey = f"{sel.digest}:{sel.group}"
    opened, fresh = ((), False) if focused else opened_clusters(gkey)
    on_projector = bool(st.session_state.get(view.OWN_FIELDS["projector"]))
    with st.spinner("Drawing the graph …"):
        page, drawn, total, note = pipeline.graph_page(
            sel.digest,
            sel.path,
            sel.group,
            sel.estimator,
            sel.params_of(sel.estimator),
            sel.backend,
            highlight_traj=t,
            max_nodes=ctl["max_nodes"],
            show_labels=ctl["show_labels"],
            height_px=HEIGHT,
            selected_node=None if anchor is None else lo + anchor,
            focus=focused,
            params_text=ptxt,
            opened=opened,
            mark_opened=fresh,
            min_label_px=PROJECTOR_MIN_FONT if on_projector else MIN_LABEL_PX,
            fit_canvas=True,
        )
    if focused and drawn < total:
        st.info(
            f"Showing {drawn} of {total} anchors: the chosen rollout, the chosen anchor and their "
            f"neighbours. Edges to hidden anchors are not drawn."
        )
    elif note:
        st.info(
            note
            + (" Or choose a rollout or an anchor to draw its part." if t is None and anchor is None else "")
            + f" Raise *Max anchors drawn* ({ctl['max_nodes']}) to draw more one by one."
        )
    elif ctl["large"] and t is None and anchor is None:
        st.info(f"{total} anchors: choose a rollout or an anchor to focus on its neighbourhood.")
    edge = why_edge(gkey)
    why = None
    if edge:
        args = (sel.digest, sel.path, sel.group, sel.estimator, sel.params_of(sel.estimator), sel.backend)
        why = pipeline.edge_why(*args, edge)
    page = open_why(page, edge, why)
    # The canvas takes the drawing's shape; the frame follows the page's height.
    st.iframe(projector_graph_page(page) if on_projector else page, height="content")
    # Below the drawing, so that the first click on a cluster does not move the drawing down.
    if opened and st.button("Fold the opened clusters", key="graph_fold"):
        st.session_state[_OPENED].pop(gkey, None)
        st.rerun()


def _how_to_read(estimator: str, by_step: bool) -> None:
    title, higher, _, _ = value_meaning(estimator)
    st.caption(
        (
            "Layout: column = the step at which the chosen rollout reaches an anchor (its "
            "neighbours one column later); "
            if by_step
            else "Layout: column = BFS depth from the start anchor (a deep group wraps into rows); "
        )
        + f"SUCCESS and FAILURE on the right. A dashed edge to FAILURE marked *time limit*: the "
        f"rollout ran out of steps there, no action led to FAILURE. Node colour = {title} under "
        f"**{estimator}** "
        f"({'higher is better' if higher else 'nearer is better'}), size = visits; edge "
        f"width = transition count, colour = mean step credit (red negative, blue positive). "
        f"Click a node or an edge to choose its anchor (an edge also opens *Why this number*: the "
        f"arithmetic of its credit); hover for the anchor text, actions, "
        f"counts and credit; drag to pan, scroll to zoom; Fit / PNG / SVG at the top right."
    )


def _anchor_panel(sel, graph, res, anchor: int, step: int | None) -> None:
    """The chosen anchor: its board or text and its actions."""
    lo = int(graph.group_node_offsets[0])
    st.subheader(f"Anchor s{anchor}")
    board = board_html(graph.node_anchor_obs[lo + anchor], cell_px=22)
    if board:
        st.html(board)
    st.code(str(graph.node_anchor_obs[lo + anchor])[:4000], language=None)
    st.dataframe(
        cells(anchor_panel_frame(graph, {sel.estimator: res}, lo + anchor)),
        hide_index=True,
        width="stretch",
    )
    st.page_link(
        page_script("compare"),
        label="Compare estimators at this step" if step is not None else "Compare estimators on this group",
        icon=":material/compare_arrows:",
        query_params=view.nav_query() or None,
    )


def _anchors_table(graph, res, estimator: str) -> None:
    """The estimator's diagnostics and every anchor as a table."""
    if res.diagnostics:
        st.caption(
            "Diagnostics: "
            + " · ".join(
                f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}" for k, v in res.diagnostics.items()
            )
        )
    title = value_meaning(estimator)[0]
    # Drawn only while open: a closed table would be sent and drawn again on every run.
    box = st.expander("Anchors as a table", key="graph_table_open", on_change="rerun")
    if not box.open:
        return
    with box:
        v = node_values(graph, res)
        st.dataframe(
            cells(
                pd.DataFrame(
                    {
                        "anchor": [f"s{n}" for n in range(graph.num_nodes)],
                        "visits": graph.node_visits,
                        "distinct actions": graph.node_num_actions,
                        title: v,
                        "anchor text": [str(a)[:200] for a in graph.node_anchor_obs],
                    }
                )
            ),
            hide_index=True,
            width="stretch",
        )


def render() -> None:
    sel = require_selection()
    events()
    st.title("Anchor graph")
    sel = anchor_rule_panel(sel)
    graph = sel.graph()
    ptxt = params_to_url(sel.estimator, sel.params).replace(";", ", ")
    st.caption(
        f"Group **{md(sel.group_label)}** · {graph.batch.num_trajectories} rollouts · "
        f"{graph.num_nodes} anchors · estimator **{sel.estimator}**" + (f" ({md(ptxt)})" if ptxt else "")
    )
    ctl = _controls(graph)
    res = sel.result(sel.estimator)
    if isinstance(res, str):
        st.warning(f"`{sel.estimator}` cannot colour this graph: {md(res)}")
    row = pipeline.group_matching_row(sel.digest, sel.path, sel.group)
    st.caption("Matching: " + md(matching_line(row)))
    if row["sentence"] and all_grey(res):
        # The data explains why every credit of this estimator is 0: say it in one sentence;
        # the grey graph is still there, one click away.
        st.warning(md(row["sentence"]))
        with st.expander("Draw the graph anyway"):
            _draw(sel, graph, ctl, ptxt)
    else:
        _draw(sel, graph, ctl, ptxt)
    _how_to_read(sel.estimator, bool(ctl["focus"] and ctl["traj"] is not None))
    download_view_button(sel)
    st.page_link(
        page_script("learn"),
        label="Teach with this group: open the lessons on it",
        icon=":material/school:",
        query_params=view.nav_query() | {"data": "group", "lesson": "1"},
    )
    if ctl["anchor"] is not None:
        _anchor_panel(sel, graph, res, ctl["anchor"], ctl["step"])
    if not isinstance(res, str):
        _anchors_table(graph, res, sel.estimator)


render()
