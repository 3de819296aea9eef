"""Trajectories page: every rollout of the group as a row of steps coloured by credit under
several estimators side by side; pick a step to see its anchor and the alternatives taken
there by other rollouts, with their credits."""
import streamlit as st

from crbc_viz.estimators import registry
from crbc_viz.ui.sidebar import require_selection
from crbc_viz.views.trajectories import outcome_label, step_alternatives, trajectory_table
from crbc_viz.ui.text import md

DEFAULT_TRIO = ("crbc", "visit_local", "shortest_path")


def render() -> None:
    sel = require_selection()
    graph = sel.graph()
    b = graph.batch
    st.title("Trajectories")
    st.caption(f"Group **{md(sel.group_label)}** · {b.num_trajectories} rollouts")
    names = registry.names()
    if "traj_estimators" not in st.session_state:
        st.session_state["traj_estimators"] = [n for n in DEFAULT_TRIO if n in names] or names[:3]
    chosen = st.multiselect("Estimators (one credit chip each, top to bottom)", names,
                            key="traj_estimators", max_selections=6)
    with st.spinner("Scoring …"):
        results = {n: sel.result(n) for n in chosen}
    for n, r in results.items():
        if isinstance(r, str):
            st.warning(f"**{n}** — {md(r)}")

    ids = b.steps["traj_id"].astype(str).to_numpy()[b.traj_offsets[:-1]]
    labels = [f"{ids[t]} ({outcome_label(graph, t)})" for t in range(b.num_trajectories)]
    c1, c2 = st.columns(2)
    t = c1.selectbox("Rollout", range(b.num_trajectories), format_func=lambda i: labels[i],
                     key="traj_pick")
    lo, hi = int(b.traj_offsets[t]), int(b.traj_offsets[t + 1])
    acts = b.steps["action"].fillna("").astype(str).to_numpy() if "action" in b.steps else None
    if st.session_state.get("step_pick", 0) >= hi - lo:
        st.session_state["step_pick"] = 0
    i = c2.selectbox("Step", range(hi - lo), key="step_pick",
                     format_func=lambda k: f"t{k}: {acts[lo + k] if acts is not None else ''}"[:80])
    st.html(trajectory_table(graph, results, group=0, selected=(t, i)))
    st.caption("Each cell: the action, its reward, then one chip per estimator coloured by that "
               "step's credit on the shared diverging scale (red negative, blue positive), each "
               "estimator scaled to its own largest |credit| in the group. Hover a cell for the "
               "full action.")

    s = lo + i
    st.subheader(f"Step t{i} of rollout {md(ids[t])}")
    n_local = int(graph.step_node[s])
    c1, c2 = st.columns([1, 2])
    with c1:
        st.markdown(f"**Anchor s{n_local}** · visited {int(graph.node_visits[n_local])}× · "
                    f"{int(graph.node_num_actions[n_local])} distinct actions")
        st.code(str(graph.node_anchor_obs[n_local])[:4000], language=None)
    with c2:
        st.markdown("**Actions taken from this anchor** (by any rollout of the group)")
        alt = step_alternatives(graph, results, s)
        st.dataframe(alt, hide_index=True, width="stretch",
                     column_config={c: st.column_config.NumberColumn(c, format="%.4f")
                                    for c in alt.columns if c.startswith(("Q [", "credit ["))})


render()
