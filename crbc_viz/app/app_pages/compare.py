"""Compare page: estimator A vs B step by step (scatter, Spearman, sign agreement, largest
disagreements; click a point or a row to choose that step), every estimator at once (rank
correlations and a step × estimator heatmap of the chosen rollout), and the finite-depth
family K = 0 … ∞ from visit-local averaging to the closure with the Corollary-3 bound. The two
heavy sections are computed when opened."""

import pandas as pd
import streamlit as st

from crbc_viz.ui import pipeline, view
from crbc_viz.ui.links import events, export_config
from crbc_viz.ui.params import DEPTH_OPTIONS, INF_LABEL, current_params, estimator_names, params_to_url
from crbc_viz.ui.selection import (
    chosen_rollout,
    rollout_ids,
    row_table,
    selection_row,
    set_rollout,
    step_from_points,
)
from crbc_viz.ui.sidebar import require_selection, set_group
from crbc_viz.ui.text import cells, md
from crbc_viz.views.compare import (
    agreement_by_group,
    both_constant,
    depth_error_figure,
    depth_lines_figure,
    depth_pair_order,
    describe_rho,
    rank_matrix,
    rank_matrix_figure,
    scatter_figure,
    sign_agreement,
    spearman,
    step_estimator_figure,
    top_disagreements,
)
from crbc_viz.views.projector import projector_fonts
from crbc_viz.views.training import dash_undefined
from crbc_viz.views.trajectories import step_frame

#: This page's facts, read by the router without running the page (`crbc_viz.ui.pages.page_facts`):
#: menu order, title, icon, url path (default: the script's name), whether it has its own data
#: choice (no shared sidebar), an element that is there once it has loaded (tests wait on it), and
#: the URL fields the page keeps (name -> session-state key of its control; None: kept by the page
#: itself), which `crbc_viz.ui.view.FIELDS` reads.
PAGE = {
    "order": 4,
    "title": "Compare",
    "icon": ":material/compare_arrows:",
    "ready": ".js-plotly-plot",
    "fields": {
        "a": "cmp_a",
        "b": "cmp_b",
        "q": "cmp_q",
        "k": "cmp_k",
        "depth": "cmp_depth_open",
        "all": "cmp_all_open",
    },
}


def _sized(fig):
    """``fig`` with projector fonts in projector mode (the app's toggle)."""
    return projector_fonts(fig) if st.session_state.get(view.OWN_FIELDS["projector"]) else fig


QUANTITIES = ("credit", "advantage", "value", "q_value")
_BOOL = dict(options=[True, False], decode={"True": True, "False": False}.get, allowed="True or False")


def _label(sel, name: str) -> str:
    """``name`` with its non-default parameters (legends, titles, file names)."""
    p = params_to_url(name, current_params(name) if name != sel.estimator else sel.params)
    return f"{name} ({p.replace(';', ', ')})" if p else name


def _export(sel, *parts: str) -> dict:
    """Plotly config whose image export is named after the group, estimators and parameters."""
    return export_config(sel.group_label, *parts)


def _choose_step(graph, step: int) -> None:
    b = graph.batch
    t = int(b.step_traj[step])
    set_rollout(rollout_ids(graph)[t], int(b.step_pos[step]))


def _on_scatter(graph) -> None:
    ev = st.session_state.get("cmp_scatter")
    pts = (ev or {}).get("selection", {}).get("points", []) if hasattr(ev, "get") else []
    step = step_from_points(pts, st.session_state.get("_scatter_steps") or [])
    if step is not None:
        _choose_step(graph, step)


def _on_top_row(graph, steps: list[int]) -> None:
    state = st.session_state.get("cmp_top")
    rows = state.selection.rows if state is not None else []
    if rows:
        _choose_step(graph, steps[rows[0]])


def _on_group_row(labels: list[str]) -> None:
    state = st.session_state.get("cmp_groups")
    rows = state.selection.rows if state is not None else []
    if rows and 0 <= rows[0] < len(labels):
        set_group(labels[rows[0]])


def estimator_pair(sel, graph, focus_step) -> None:
    names = estimator_names()
    c1, c2, c3 = st.columns(3)
    a = c1.selectbox("Estimator A (x)", names, key=view.field("a", sel.estimator, options=names))
    view.record("a")
    default_b = "shortest_path" if sel.estimator != "shortest_path" else "visit_local"
    b = c2.selectbox(
        "Estimator B (y)",
        names,
        key=view.field("b", default_b if default_b in names else names[0], options=names),
    )
    view.record("b")
    q = c3.selectbox(
        "Quantity",
        QUANTITIES,
        key=view.field("q", "credit", options=list(QUANTITIES)),
        help="credit = the method's own step term; advantage = what it feeds the loss",
    )
    view.record("q")
    ra, rb = sel.result(a), sel.result(b)
    bad = [(n, r) for n, r in ((a, ra), (b, rb)) if isinstance(r, str)]
    for n, r in bad:
        st.warning(f"**{n}** — {md(r)}")
    if bad:
        good = {n: r for n, r in ((a, ra), (b, rb)) if not isinstance(r, str)}
        if good:  # nothing to compare, but the estimator that ran is still shown
            (n,) = good
            st.markdown(f"**{md(n)}** alone ({q} per step of this group):")
            cols = ["traj_id", "t", "action", "anchor", n]
            st.dataframe(
                cells(step_frame(graph, good, group=0, column=q)[cols]), hide_index=True, key="cmp_alone"
            )
        return
    df = step_frame(graph, {a: ra, b: rb}, group=0, column=q)
    if a == b:
        df[b + " "] = df[b]
        b = b + " "
    rho = spearman(df[a], df[b])
    const = both_constant(df, a, b)
    # One row that wraps: at 800 px four side by side cut their labels.
    row = st.container(horizontal=True, gap="medium")
    row.metric("Spearman ρ (this group)", describe_rho(rho, a, b, df), width="content")
    row.metric(
        "Sign agreement",
        "— (both constant)" if const else f"{sign_agreement(df[a], df[b]):.1%}",
        width="content",
    )
    row.metric("Steps", len(df), width="content")
    with st.spinner("Scoring every group …"):
        fa = pipeline.score_full(sel.digest, sel.path, a.strip(), sel.params_of(a.strip()), sel.backend)
        fb = pipeline.score_full(sel.digest, sel.path, b.strip(), sel.params_of(b.strip()), sel.backend)
    per = None
    if not isinstance(fa, str) and not isinstance(fb, str):
        full = pipeline.full_graph(sel.digest, sel.path)
        per = agreement_by_group(full.batch.step_group, getattr(fa, q), getattr(fb, q), full.batch.num_groups)
        defined = per["spearman"].notna()
        row.metric(
            "Median ρ over groups",
            f"{per['spearman'].median():.3f}" if defined.any() else "— (undefined in every group)",
            help=f"over the {int(defined.sum())} of {len(per)} groups where both vary",
            width="content",
        )
    la, lb = _label(sel, a.strip()), _label(sel, b.strip())
    # The table goes under the scatter, at the full width: beside it, an 800 px window has no
    # room for its B column.
    st.session_state["_scatter_steps"] = [
        df.loc[df["success"] == ok, "step"].tolist() for ok in (True, False)
    ]
    fig = scatter_figure(df, a, b, quantity=q, highlight=focus_step, title=f"{la} vs {lb} · {q}")
    fig.update_layout(xaxis_title=f"{la} {q}", yaxis_title=f"{lb} {q}")
    st.plotly_chart(
        _sized(fig),
        key="cmp_scatter",
        on_select=lambda: _on_scatter(graph),
        selection_mode="points",
        config=_export(sel, la, "vs", lb, q),
    )
    st.caption("Click a point to choose that step (ringed when chosen).")
    _disagreement_table(graph, df, a, b, q)
    if per is not None:
        _groups_table(full.batch, per)


def _groups_table(batch, per: pd.DataFrame) -> None:
    """The agreement of A and B in every group of the file, a row each (a click opens that
    group); drawn only while its panel is open (a closed table would be sent and drawn again
    on every run)."""
    box = st.expander(
        "Agreement in every group (click a row to open that group)", key="cmp_groups_open", on_change="rerun"
    )
    if not box.open:
        return
    with box:
        labels = [batch.group_label(g) for g in per["group_index"]]
        per.insert(0, "group", labels)
        shown = per.drop(columns=["group_index"])
        for c in ("spearman", "disagreement"):
            shown[c] = dash_undefined(shown[c])
        tip = "— = undefined: one of the two is constant in this group, so there is no ranking"
        row_table(
            shown,
            key="cmp_groups",
            on_select=lambda: _on_group_row(labels),
            column_config={
                "spearman": st.column_config.TextColumn("spearman", help=tip),
                "disagreement": st.column_config.TextColumn("disagreement", help=tip),
            },
        )


def _disagreement_table(graph, df: pd.DataFrame, a: str, b: str, q: str) -> None:
    """The steps where A and B differ most: the two values and their gap first, every column
    narrow enough that the table shows whole, without scrolling sideways, at 800 px."""
    st.markdown(f"**Steps where they disagree most** (largest |A − B| {q}; click a row)")
    top = top_disagreements(df, a, b, k=12)
    top = top[top["gap"] > 0]
    if top.empty:
        st.info("No disagreement to show: the two give every step the same value here.")
        return
    st.dataframe(
        cells(
            top[["t", a, b, "gap", "traj_id"]].assign(
                at=top["anchor"].astype(str) + " · " + top["action"].astype(str)
            )
        ),
        key="cmp_top",
        on_select=lambda: _on_top_row(graph, top["step"].tolist()),
        selection_mode="single-row",
        hide_index=True,
        width="stretch",
        column_config={
            "t": st.column_config.NumberColumn("t", width=40),
            a: st.column_config.NumberColumn(f"A: {a}", format="%.3f", help=f"A = {a}", width="small"),
            b: st.column_config.NumberColumn(f"B: {b}", format="%.3f", help=f"B = {b}", width="small"),
            "gap": st.column_config.NumberColumn("|A − B|", format="%.3f", width="small"),
            # Narrow too (their whole text on hover), so that no column is out of sight.
            "traj_id": st.column_config.TextColumn("rollout", width="small"),
            "at": st.column_config.TextColumn("anchor · action", width="small"),
        },
    )


def all_estimators(sel, graph, t) -> None:
    st.subheader("All estimators at once")
    if not st.toggle(
        "Compute every estimator on this group",
        key=view.field("all", False, **_BOOL),
        help="runs each registered estimator once on this group (cached)",
    ):
        view.record("all")
        return
    view.record("all")
    names = estimator_names()
    params = tuple((n, sel.params_of(n)) for n in names)
    q = st.session_state.get(PAGE["fields"]["q"], "credit")
    with st.spinner(f"Scoring {len(names)} estimators …"):
        df, failed = pipeline.all_estimators(sel.digest, sel.path, sel.group, params, sel.backend, q)
    ran = [n for n in names if n in df.columns]
    if failed:
        st.warning(
            f"{len(failed)} of {len(names)} estimators cannot run on this group:\n\n"
            + "\n".join(f"- **{n}** cannot run: {md(why)}" for n, why in failed.items())
        )
    if len(ran) >= 2:
        st.plotly_chart(
            _sized(
                rank_matrix_figure(
                    rank_matrix(df, ran),
                    title=f"Spearman ρ of step {q}, {len(ran)} estimators, {len(df)} steps (— : constant here)",
                )
            ),
            key="cmp_matrix",
            config=_export(sel, "rank-matrix", q),
        )
    if t is None:
        st.info("Choose a rollout to see its steps under every estimator.")
        return
    b = graph.batch
    lo, hi = int(b.traj_offsets[t]), int(b.traj_offsets[t + 1])
    rows = df[(df["step"] >= lo) & (df["step"] < hi)]
    heat = rows[ran].copy()
    heat.index = [f"t{int(tt)} · {str(act)[:14]}" for tt, act in zip(rows["t"], rows["action"])]
    heat.columns = [_label(sel, n) for n in ran]
    st.plotly_chart(
        _sized(
            step_estimator_figure(
                heat, title=f"Rollout {rollout_ids(graph)[t]}: step {q} under each estimator (row-scaled)"
            )
        ),
        key="cmp_heat",
        config=_export(sel, "steps", rollout_ids(graph)[t], q),
    )


def depth_family(sel, focus_anchor) -> None:
    st.subheader("Finite depth: from visit-local averaging (K = 0) to the closure (K = ∞)")
    if "crbc" not in estimator_names():
        st.info("The crbc estimator is not registered.")
        return
    if not st.toggle(
        "Compute the depth family",
        key=view.field("depth", False, **_BOOL),
        help="one closure solve and 31 backups on this group (cached)",
    ):
        view.record("depth")
        return
    view.record("depth")
    refusal = pipeline.depth_refusal(sel.digest, sel.path, sel.group)
    if refusal:
        st.warning(f"Not computed: {refusal}.")
        return
    params = current_params("crbc")
    beta = float(params["beta"])
    k = st.select_slider(
        "Depth K",
        options=DEPTH_OPTIONS,
        key=view.field(
            "k",
            0,
            options=DEPTH_OPTIONS,
            decode=lambda s: s if s == INF_LABEL else int(s),
            allowed=f"0 … {DEPTH_OPTIONS[-2]} or {INF_LABEL}",
        ),
        help="V^(K) = T^K V^(0), Q^(K) = B V^(K−1); K = ∞ is the exact closure",
    )
    view.record("k")
    kmax = DEPTH_OPTIONS[-2]
    bar = st.progress(0.0, text="depth family …")
    sw = pipeline.depth_sweep(
        sel.digest,
        sel.path,
        sel.group,
        pipeline.params_key(params),
        kmax,
        _progress=lambda f, text: bar.progress(min(max(f, 0.0), 1.0), text=text),
    )
    bar.empty()
    sel_k = None if k == INF_LABEL else int(k)
    bound_k = 0.0 if sel_k is None else float(sw["bound"][sel_k])
    gap_k = 0.0 if sel_k is None else float(sw["err"][sel_k])
    m = st.columns(3)
    m[0].metric("‖A^∞ − A^(K)‖∞", f"{gap_k:.2e}")
    m[1].metric(
        "Corollary 3 bound",
        "∞ (β = 1)" if bound_k == float("inf") else f"{bound_k:.2e}",
        help="2β^K/(1−β)·‖T V⁰ − V⁰‖∞",
    )
    m[2].metric("β", f"{beta:g}")
    c1, c2 = st.columns(2)
    with c1:
        n_pairs = len(sw["labels"])
        order, mine = depth_pair_order(sw["pair_count"], sw["pair_node"], focus_anchor, 40)
        if focus_anchor is not None:
            st.caption(
                f"The chosen anchor s{focus_anchor}'s {mine} actions first, then the "
                f"most-taken pairs (of {n_pairs})."
            )
        elif n_pairs > 40:
            st.caption(f"The 40 most-taken of {n_pairs} (anchor, action) pairs.")
        st.plotly_chart(
            _sized(
                depth_lines_figure(
                    sw["depths"],
                    sw["pair_adv"][:, order],
                    sw["pair_adv_inf"][order],
                    [sw["labels"][j] for j in order],
                    sel_k,
                )
            ),
            key="cmp_depth",
            config=_export(sel, _label(sel, "crbc"), f"depth-K{k}"),
        )
    with c2:
        st.plotly_chart(
            _sized(depth_error_figure(sw["depths"], sw["err"], sw["bound"], sel_k)),
            key="cmp_depth_err",
            config=_export(sel, _label(sel, "crbc"), "depth-gap"),
        )
    A_k = sw["pair_adv_inf"] if sel_k is None else sw["pair_adv"][sel_k]
    c_k = sw["credit_inf"] if sel_k is None else sw["credit"][sel_k]
    table = pd.DataFrame(
        {
            "pair": sw["labels"],
            "N(s,a)": sw["pair_count"],
            f"A^({k})": A_k,
            "A^∞": sw["pair_adv_inf"],
            f"credit^({k})": c_k,
            "credit^∞": sw["credit_inf"],
        }
    )
    table["moved"] = (table[f"A^({k})"] - table["A^∞"]).abs()
    box = st.expander(f"Pairs at K = {k} (sorted by |A^(K) − A^∞|)", key="cmp_pairs_open", on_change="rerun")
    if box.open:
        box.dataframe(table.sort_values("moved", ascending=False), hide_index=True, width="stretch")


def render() -> None:
    sel = require_selection()
    graph = sel.graph()
    events()
    st.title("Compare estimators")
    st.caption(f"Group **{md(sel.group_label)}**")
    problems: list = []
    t, i = selection_row(graph, problems)
    focus_step = None if t is None or i is None else int(graph.batch.traj_offsets[t]) + i
    focus_anchor = None if focus_step is None else int(graph.step_node[focus_step])
    if focus_step is not None:
        st.markdown(
            f"Chosen: step **t{i}** of rollout **{md(rollout_ids(graph)[t])}** at anchor "
            f"**s{focus_anchor}** (ringed in the scatter; its pairs first in the depth "
            f"family)."
        )
    estimator_pair(sel, graph, focus_step)
    all_estimators(sel, graph, chosen_rollout(graph))
    depth_family(sel, focus_anchor)


render()
