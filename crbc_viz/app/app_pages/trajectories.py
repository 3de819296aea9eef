"""Trajectories page: every rollout of the group as a row of steps coloured by credit under
several estimators side by side (click a cell to choose that step); "why did this fail": a
failed rollout's most negative-credit steps, what the other rollouts did at those anchors and
how it went for them, and where the chosen estimators disagree; then the chosen step's anchor
and the alternatives taken there."""

import streamlit as st

from crbc_viz.ui import view
from crbc_viz.ui.links import events, page_script
from crbc_viz.ui.params import estimator_names
from crbc_viz.ui.selection import URL_FIELDS, rollout_ids, selection_row, set_rollout, set_step
from crbc_viz.ui.sidebar import require_selection
from crbc_viz.ui.text import cells, md
from crbc_viz.views.board import board_html
from crbc_viz.views.graph_values import truncated_steps
from crbc_viz.views.trajectories import failed_frame, step_alternatives, trajectory_table, worst_steps
from crbc_viz.views.why import edge_steps, why_html

#: This page's facts, read by the router without running the page (`crbc_viz.ui.pages.page_facts`):
#: menu order, title, icon, url path (default: the script's name), whether it has its own data
#: choice (no shared sidebar), an element that is there once it has loaded (tests wait on it), and
#: the URL fields the page keeps (name -> session-state key of its control; None: kept by the page
#: itself), which `crbc_viz.ui.view.FIELDS` reads.
PAGE = {
    "order": 3,
    "title": "Trajectories",
    "icon": ":material/timeline:",
    "ready": "[data-testid='stHtml'], [data-testid='stDataFrame']",
    "fields": {
        "est": "traj_estimators",
    },
}

DEFAULT_TRIO = ("crbc", "visit_local", "shortest_path")
MAX_CHIPS = 6


def _on_failed_row(ids: list[str]) -> None:
    state = st.session_state.get("failed_table")
    rows = state.selection.rows if state is not None else []
    if rows:
        set_rollout(ids[rows[0]])


def _on_worst_row(ts: list[int]) -> None:
    state = st.session_state.get("worst_table")
    rows = state.selection.rows if state is not None else []
    if rows:
        set_step(ts[rows[0]])


def failed_rollouts(sel, graph, results) -> None:
    """The group's failed rollouts (click one), then the chosen one's blamed steps."""
    b = graph.batch
    ids = rollout_ids(graph)
    failed = [t for t in range(b.num_trajectories) if not b.traj_success[t]]
    st.subheader("Why did this fail")
    if not failed:
        st.info("Every rollout of this group succeeded.")
        return
    main = results.get(sel.estimator)
    st.caption(f"{len(failed)} of {b.num_trajectories} rollouts failed. Click a row to choose it.")
    st.dataframe(
        cells(failed_frame(graph, failed, main, sel.estimator)),
        key="failed_table",
        on_select=lambda: _on_failed_row([ids[t] for t in failed]),
        selection_mode="single-row",
        hide_index=True,
        width="stretch",
    )
    t = None
    rid = st.session_state.get(URL_FIELDS["rollout"])
    if rid in ids and not b.traj_success[ids.index(rid)]:
        t = ids.index(rid)
    if t is None:
        return
    if isinstance(main, str) or main is None:
        st.warning(f"`{sel.estimator}` could not run, so its blamed steps cannot be listed: {md(main)}")
        return
    ws = worst_steps(graph, results, t, sel.estimator, k=5)
    st.markdown(
        f"**Most negative `{sel.estimator}` credit in {md(ids[t])}** (click a row to choose "
        f"the step; other rollouts at the same anchor, what they did and how it went)"
    )
    if ws.empty:
        st.info("No step of this rollout has a finite credit.")
        return
    st.dataframe(
        ws,
        key="worst_table",
        on_select=lambda: _on_worst_row(ws["t"].tolist()),
        selection_mode="single-row",
        hide_index=True,
        width="stretch",
        column_config={
            c: st.column_config.NumberColumn(c, format="%.4f") for c in ws.columns if c.startswith("credit [")
        },
    )
    dis = int((ws["estimators disagree"] == "yes").sum())
    if len(results) > 1:
        st.caption(f"The chosen estimators disagree in sign at {dis} of these {len(ws)} steps.")


def render() -> None:
    sel = require_selection()
    graph = sel.graph()
    b = graph.batch
    events()
    st.title("Trajectories")
    st.caption(f"Group **{md(sel.group_label)}** · {b.num_trajectories} rollouts")
    names = estimator_names()
    default = [n for n in DEFAULT_TRIO if n in names] or names[:3]
    problems: list = []
    key = view.field(
        "est",
        default,
        decode=lambda s: s.split(",") if s else [],
        options=lambda v: set(v) <= set(names) and len(set(v)) == len(v) <= MAX_CHIPS,
        allowed=f"up to {MAX_CHIPS} different estimator names, comma-separated",
        problems=problems,
    )
    chosen = st.multiselect(
        "Estimators (one labelled credit chip each, top to bottom)", names, key=key, max_selections=MAX_CHIPS
    )
    view.record("est", encode=",".join)
    with st.spinner("Scoring …"):
        results = {n: sel.result(n) for n in dict.fromkeys([*chosen, sel.estimator])}
    for n, r in results.items():
        if isinstance(r, str) and n in chosen:
            st.warning(f"**{n}** — {md(r)}")

    t, i = selection_row(graph, problems)
    shown = {n: results[n] for n in chosen}
    st.html(
        trajectory_table(
            graph,
            shown,
            group=0,
            selected=None if t is None or i is None else (t, i),
            font_px=16 if st.session_state.get(view.OWN_FIELDS["projector"]) else 12,
        )
    )
    st.caption(
        "Each cell: the action, its reward, then one chip per estimator (labelled) coloured "
        "by that step's credit on the shared diverging scale (red negative, blue positive), "
        "each estimator scaled to its own largest |credit| in the group. Click a cell to "
        "choose that step; ← / → move along the rollout."
    )
    failed_rollouts(sel, graph, results)
    if t is None or i is None:
        st.info(
            "Choose a rollout and a step (click a cell, a row above, or use the pickers) to see "
            "its anchor and the alternatives taken there."
        )
        return
    ids = rollout_ids(graph)
    s = int(b.traj_offsets[t]) + i
    st.subheader(f"Step t{i} of rollout {md(ids[t])}")
    n_local = int(graph.step_node[s])
    c1, c2 = st.columns([1, 2])
    with c1:
        st.markdown(
            f"**Anchor s{n_local}** · visited {int(graph.node_visits[n_local])}× · "
            f"{int(graph.node_num_actions[n_local])} distinct actions"
        )
        board = board_html(graph.node_anchor_obs[n_local], cell_px=22)
        if board:
            st.html(board)
        st.code(str(graph.node_anchor_obs[n_local])[:4000], language=None)
        st.page_link(
            page_script("graph"),
            label="Show this anchor in the graph",
            icon=":material/hub:",
            query_params=view.nav_query() or None,
        )
        st.page_link(
            page_script("compare"),
            label="Compare estimators at this step",
            icon=":material/compare_arrows:",
            query_params=view.nav_query() or None,
        )
    with c2:
        st.markdown("**Actions taken from this anchor** (by any rollout of the group)")
        alt = step_alternatives(graph, shown, s)
        st.dataframe(
            cells(alt),
            hide_index=True,
            width="stretch",
            column_config={
                c: st.column_config.NumberColumn(c, format="%.4f")
                for c in alt.columns
                if c.startswith(("Q [", "credit ["))
            },
        )
    # "Why this number": the arithmetic of this step's credit under each estimator shown (the
    # panel a click on its edge opens on the Graph page).
    st.markdown(
        f"**Why this number** (step {i} of rollout {md(ids[t])} first, then the other occurrences "
        f"of its edge)"
    )
    st.html(why_html(graph, shown, edge_steps(graph, s, truncated_steps(graph))))


render()
