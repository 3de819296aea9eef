"""Graph page: the merged anchor-state graph of one group with its SUCCESS / FAILURE
boundaries; node colour = V(s), size = visits; edge width = count, colour = credit."""
import pandas as pd
import streamlit as st

from crbc_viz.ui import pipeline
from crbc_viz.ui.sidebar import require_selection
from crbc_viz.views.graph_view import node_values
from crbc_viz.views.trajectories import outcome_label
from crbc_viz.ui.text import md

HEIGHT = 620


def traj_options(graph) -> dict:
    b = graph.batch
    ids = b.steps["traj_id"].astype(str).to_numpy()[b.traj_offsets[:-1]]
    return {f"{ids[t]} ({outcome_label(graph, t)}, {int(b.traj_len[t])} steps)": t
            for t in range(b.num_trajectories)}


def render() -> None:
    sel = require_selection()
    graph = sel.graph()
    st.title("Anchor graph")
    st.caption(f"Group **{md(sel.group_label)}** · {graph.batch.num_trajectories} rollouts · "
               f"{graph.num_nodes} anchors · estimator **{sel.estimator}**")
    opts = {"(none)": None, **traj_options(graph)}
    c1, c2, c3 = st.columns([3, 2, 1.4])
    pick = c1.selectbox("Highlight a rollout's path", list(opts), key="graph_traj",
                        help="its anchors get a black ring, its edges are labelled t0, t1, … "
                             "and everything else fades")
    max_nodes = int(c2.number_input("Max anchors drawn", min_value=20, max_value=2000, value=500,
                                    step=50, key="graph_max_nodes",
                                    help="beyond this, the most-visited anchors are kept (plus the "
                                         "highlighted path)"))
    labels = c3.selectbox("Action labels", ["auto", "on", "off"], key="graph_labels",
                          help="auto: on when at most 60 edges are drawn")
    show = {"auto": None, "on": True, "off": False}[labels]
    res = sel.result(sel.estimator)
    if isinstance(res, str):
        st.warning(f"`{sel.estimator}` cannot colour this graph: {md(res)}")
    with st.spinner("Drawing the graph …"):
        page, drawn, total = pipeline.graph_page(sel.digest, sel.path, sel.group, sel.estimator,
                                                 sel.params_of(sel.estimator), sel.backend,
                                                 opts[pick], max_nodes, show, HEIGHT)
    if drawn < total:
        st.info(f"Showing {drawn} of {total} anchors: the {max_nodes} most visited"
                f"{' plus the highlighted path' if opts[pick] is not None else ''}. Edges to hidden "
                f"anchors are not drawn; raise *Max anchors drawn* to see more.")
    st.iframe(page, height=HEIGHT + 12)
    st.caption("Layout: column = BFS depth from the start anchor; SUCCESS (V = 1) and FAILURE "
               "(V = 0) on the right. Node colour = V(s) under the estimator, size = visits; edge "
               "width = transition count, colour = mean step credit (red negative, blue positive). "
               "Hover for the anchor text, actions, counts, V, Q and credit; drag to pan, scroll "
               "to zoom.")
    if not isinstance(res, str):
        if res.diagnostics:
            st.caption("Diagnostics: " + " · ".join(
                f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}"
                for k, v in res.diagnostics.items()))
        with st.expander("Anchors as a table"):
            v = node_values(graph, res)
            st.dataframe(pd.DataFrame({
                "anchor": [f"s{n}" for n in range(graph.num_nodes)],
                "visits": graph.node_visits, "distinct actions": graph.node_num_actions,
                "V": v, "anchor text": [str(a)[:200] for a in graph.node_anchor_obs],
            }), hide_index=True, width="stretch")


render()
