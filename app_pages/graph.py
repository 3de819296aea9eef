"""Graph page: the merged anchor-state graph of one group with its SUCCESS / FAILURE
boundaries; node colour = the estimator's state value, size = visits; edge width = count,
colour = credit. Click a node or an edge to choose its anchor; the chosen rollout's path is
highlighted, and above ~150 anchors the page can show only that rollout's neighbourhood."""

import pandas as pd
import streamlit as st

from crbc_viz.ui import pipeline, view
from crbc_viz.ui.links import events
from crbc_viz.ui.params import params_to_url
from crbc_viz.ui.selection import pick_anchor, pick_rollout, pick_step, step_buttons
from crbc_viz.ui.sidebar import require_selection
from crbc_viz.ui.text import cells, md
from crbc_viz.views.graph_view import board_html, node_values, value_meaning
from crbc_viz.views.trajectories import anchor_panel_frame

HEIGHT = 620
#: Above this many anchors the page offers (and defaults to) the chosen rollout's neighbourhood.
LARGE = 150


def render() -> None:
    sel = require_selection()
    graph = sel.graph()
    events()
    st.title("Anchor graph")
    ptxt = params_to_url(sel.estimator, sel.params).replace(";", ", ")
    st.caption(
        f"Group **{md(sel.group_label)}** · {graph.batch.num_trajectories} rollouts · "
        f"{graph.num_nodes} anchors · estimator **{sel.estimator}**" + (f" ({md(ptxt)})" if ptxt else "")
    )
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
            key=view.field("max_nodes", 500, decode=int),
            help="beyond this, the most-visited anchors are kept (plus the "
            "highlighted path and the chosen anchor)",
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
            key=view.field("focus", True, options=[True, False], decode=lambda s: s == "True"),
            help=f"above {LARGE} anchors: draw the highlighted rollout's anchors, "
            f"the chosen anchor and their one-step neighbours",
            disabled=t is None and anchor is None,
        )
        view.record("focus")
    for p in problems:
        st.warning(md(p))
    show = {"auto": None, "on": True, "off": False}[labels]
    res = sel.result(sel.estimator)
    if isinstance(res, str):
        st.warning(f"`{sel.estimator}` cannot colour this graph: {md(res)}")
    lo = int(graph.group_node_offsets[0])
    with st.spinner("Drawing the graph …"):
        page, drawn, total = pipeline.graph_page(
            sel.digest,
            sel.path,
            sel.group,
            sel.estimator,
            sel.params_of(sel.estimator),
            sel.backend,
            t,
            max_nodes,
            show,
            HEIGHT,
            None if anchor is None else lo + anchor,
            bool(focus and (t is not None or anchor is not None)),
            ptxt,
        )
    if drawn < total:
        st.info(
            f"Showing {drawn} of {total} anchors"
            + (
                ": the chosen rollout, the chosen anchor and their neighbours."
                if focus and (t is not None or anchor is not None)
                else f": the {max_nodes} most visited plus the highlighted path. Raise *Max anchors "
                f"drawn* to see more."
            )
            + " Edges to hidden anchors are not drawn."
        )
    elif large and t is None and anchor is None:
        st.info(f"{total} anchors: choose a rollout or an anchor to focus on its neighbourhood.")
    st.iframe(page, height=HEIGHT + 12)
    title, higher, _, _ = value_meaning(sel.estimator)
    by_step = bool(focus and t is not None)
    st.caption(
        (
            "Layout: column = the step at which the chosen rollout reaches an anchor (its "
            "neighbours one column later); "
            if by_step
            else "Layout: column = BFS depth from the start anchor; "
        )
        + f"SUCCESS and FAILURE on the right. Node colour = {title} under **{sel.estimator}** "
        f"({'higher is better' if higher else 'nearer is better'}), size = visits; edge "
        f"width = transition count, colour = mean step credit (red negative, blue positive). "
        f"Click a node or an edge to choose its anchor; hover for the anchor text, actions, "
        f"counts and credit; drag to pan, scroll to zoom; Fit / PNG / SVG at the top right."
    )
    if anchor is not None:
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
            "app_pages/compare.py",
            label="Compare estimators at this step" if i is not None else "Compare estimators on this group",
            icon=":material/compare_arrows:",
            query_params=view.nav_query() or None,
        )
    if not isinstance(res, str):
        if res.diagnostics:
            st.caption(
                "Diagnostics: "
                + " · ".join(
                    f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}"
                    for k, v in res.diagnostics.items()
                )
            )
        with st.expander("Anchors as a table"):
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


render()
