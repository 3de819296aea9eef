"""Compare page: estimator A vs B step by step (scatter, Spearman, sign agreement, largest
disagreements), and the finite-depth family K = 0 … ∞ from visit-local averaging to the
closure with the Corollary-3 bound."""
import math

import numpy as np
import pandas as pd
import streamlit as st

from crbc_viz.estimators import registry
from crbc_viz.ui import pipeline
from crbc_viz.ui.params import DEPTH_OPTIONS, INF_LABEL, current_params
from crbc_viz.ui.sidebar import require_selection
from crbc_viz.views.compare import (agreement_by_group, depth_error_figure, depth_lines_figure,
                                    scatter_figure, sign_agreement, spearman, top_disagreements)
from crbc_viz.views.trajectories import step_frame
from crbc_viz.ui.text import md

QUANTITIES = ("credit", "advantage", "value", "q_value")


def _pick(container, label, names, key, default):
    if st.session_state.get(key) not in names:
        st.session_state[key] = default if default in names else names[0]
    return container.selectbox(label, names, key=key)


def estimator_pair(sel) -> None:
    names = registry.names()
    c1, c2, c3 = st.columns(3)
    a = _pick(c1, "Estimator A (x)", names, "cmp_a", sel.estimator)
    b = _pick(c2, "Estimator B (y)", names, "cmp_b", "shortest_path" if sel.estimator != "shortest_path"
              else "visit_local")
    q = c3.selectbox("Quantity", QUANTITIES, key="cmp_q",
                     help="credit = the method's own step term; advantage = what it feeds the loss")
    graph = sel.graph()
    ra, rb = sel.result(a), sel.result(b)
    bad = [(n, r) for n, r in ((a, ra), (b, rb)) if isinstance(r, str)]
    for n, r in bad:
        st.warning(f"**{n}** — {md(r)}")
    if bad:
        return
    df = step_frame(graph, {a: ra, b: rb}, group=0, column=q)
    if a == b:
        df[b + " "] = df[b]
        b = b + " "
    m = st.columns(4)
    m[0].metric("Spearman ρ (this group)", f"{spearman(df[a], df[b]):.3f}")
    m[1].metric("Sign agreement", f"{sign_agreement(df[a], df[b]):.1%}")
    m[2].metric("Steps", len(df))
    with st.spinner("Scoring every group …"):
        fa = pipeline.score_full(sel.digest, sel.path, a.strip(), sel.params_of(a.strip()), sel.backend)
        fb = pipeline.score_full(sel.digest, sel.path, b.strip(), sel.params_of(b.strip()), sel.backend)
    if not isinstance(fa, str) and not isinstance(fb, str):
        full = pipeline.full_graph(sel.digest, sel.path)
        per = agreement_by_group(full.batch.step_group, getattr(fa, q), getattr(fb, q),
                                 full.batch.num_groups)
        m[3].metric("Median ρ over groups", f"{np.nanmedian(per['spearman']):.3f}"
                    if per["spearman"].notna().any() else "—")
    c1, c2 = st.columns([3, 2])
    with c1:
        st.plotly_chart(scatter_figure(df, a, b, quantity=q), key="cmp_scatter")
    with c2:
        st.markdown("**Steps where they disagree most** (percentile-rank gap)")
        top = top_disagreements(df, a, b, k=12)
        st.dataframe(top[["traj_id", "t", "anchor", "action", a, b, "rank gap"]], hide_index=True,
                     width="stretch", column_config={
                         a: st.column_config.NumberColumn(a, format="%.3f"),
                         b: st.column_config.NumberColumn(b, format="%.3f"),
                         "rank gap": st.column_config.NumberColumn("rank gap", format="%.2f")})
    if not isinstance(fa, str) and not isinstance(fb, str):
        with st.expander("Agreement in every group"):
            per.insert(0, "group", [full.batch.group_label(g) for g in per["group_index"]])
            st.dataframe(per.drop(columns=["group_index"]), hide_index=True, width="stretch")


def depth_family(sel) -> None:
    st.subheader("Finite depth: from visit-local averaging (K = 0) to the closure (K = ∞)")
    if "crbc" not in registry.names():
        st.info("The crbc estimator is not registered.")
        return
    params = current_params("crbc")
    beta = float(params["beta"])
    if st.session_state.get("cmp_k") not in DEPTH_OPTIONS:
        st.session_state["cmp_k"] = 0
    k = st.select_slider("Depth K", options=DEPTH_OPTIONS, key="cmp_k",
                         help="V^(K) = T^K V^(0), Q^(K) = B V^(K−1); K = ∞ is the exact closure")
    kmax = DEPTH_OPTIONS[-2]
    with st.spinner("Backing up K = 0 … 30 …"):
        sw = pipeline.depth_sweep(sel.digest, sel.path, sel.group, pipeline.params_key(params), kmax)
    sel_k = None if k == INF_LABEL else int(k)
    bound_k = 0.0 if sel_k is None else float(sw["bound"][sel_k])
    gap_k = 0.0 if sel_k is None else float(sw["err"][sel_k])
    m = st.columns(3)
    m[0].metric("‖A^∞ − A^(K)‖∞", f"{gap_k:.2e}")
    m[1].metric("Corollary 3 bound", "∞ (β = 1)" if math.isinf(bound_k) else f"{bound_k:.2e}",
                help="2β^K/(1−β)·‖T V⁰ − V⁰‖∞")
    m[2].metric("β", f"{beta:g}")
    c1, c2 = st.columns(2)
    with c1:
        n_pairs = len(sw["labels"])
        order = np.argsort(-sw["pair_count"], kind="stable")[:40]
        if n_pairs > 40:
            st.caption(f"The 40 most-taken of {n_pairs} (anchor, action) pairs.")
        st.plotly_chart(depth_lines_figure(sw["depths"], sw["A"][:, order], sw["A_inf"][order],
                                           [sw["labels"][j] for j in order], sel_k), key="cmp_depth")
    with c2:
        st.plotly_chart(depth_error_figure(sw["depths"], sw["err"], sw["bound"], sel_k),
                        key="cmp_depth_err")
    A_k = sw["A_inf"] if sel_k is None else sw["A"][sel_k]
    c_k = sw["credit_inf"] if sel_k is None else sw["credit"][sel_k]
    table = pd.DataFrame({"pair": sw["labels"], "N(s,a)": sw["pair_count"],
                          f"A^({k})": A_k, "A^∞": sw["A_inf"], f"credit^({k})": c_k,
                          "credit^∞": sw["credit_inf"]})
    table["moved"] = (table[f"A^({k})"] - table["A^∞"]).abs()
    with st.expander(f"Pairs at K = {k} (sorted by |A^(K) − A^∞|)", expanded=False):
        st.dataframe(table.sort_values("moved", ascending=False), hide_index=True, width="stretch")


def render() -> None:
    sel = require_selection()
    st.title("Compare estimators")
    st.caption(f"Group **{md(sel.group_label)}**")
    estimator_pair(sel)
    depth_family(sel)


render()
