"""Learn page: six short lessons, from trajectory-level credit to the Bellman closure, on the toy
group, one Sokoban group and the rare-route trap. The lesson number lives in the URL
(``/learn?lesson=4``). Edits (flip an outcome, drop a rollout) apply to an in-memory copy.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import streamlit as st

from crbc_viz import build_graph, score
from crbc_viz import teaching as T
from crbc_viz.ui import view
from crbc_viz.ui.links import pause_then_rerun
from crbc_viz.views import learn as V
from crbc_viz.views.graph_view import graph_html

LESSON_KEY = "learn_lesson"
DATA_KEY = "learn_data"
EXPORT_KEY = "learn_export"
K_KEY = "learn_k"
INF = "∞"
K_OPTIONS = [str(k) for k in range(21)] + [INF]
DATASETS = {"toy": "Toy group (§14.1)", "sokoban": f"Sokoban · {T.SOKOBAN_GROUP}"}
RR_DEFAULTS = {"learn_rr_jump": 4, "learn_rr_lucky": 1, "learn_rr_walk": 4, "learn_rr_walk_ok": 3}
GRAPH_HEIGHT = 520
RR_METHODS = {"shortest_path": "shortest path (GraphGPO)", "visit_local": "visit-local (K = 0)",
              "crbc": "CRBC closure (K = ∞)"}
BETA = 0.98


# ---------------------------------------------------------------- cached steps
@st.cache_data(max_entries=32, show_spinner=False)
def base_rows(dataset: str, rr: tuple = ()) -> list[dict]:
    if dataset == "toy":
        return T.read_rows(T.TOY_PATH)
    if dataset == "sokoban":
        return T.sokoban_rows()
    if dataset == "rare_route":
        return T.rare_route_rows(*rr)
    raise ValueError(f"unknown teaching data set {dataset!r}")


@st.cache_data(max_entries=64, show_spinner=False)
def edited_rows(key: tuple) -> list[dict]:
    dataset, rr, flip, drop = key
    return T.apply_edits(base_rows(dataset, rr), flip=flip, drop=drop)


@st.cache_resource(max_entries=64, show_spinner=False)
def graph_of(key: tuple):
    return build_graph(T.batch_from_rows(edited_rows(key)))


@st.cache_resource(max_entries=512, show_spinner=False)
def result_of(key: tuple, name: str, params: tuple = ()):
    return score(graph_of(key), name, backend="numpy", **dict(params))


@st.cache_data(max_entries=64, show_spinner=False)
def family_of(key: tuple, beta: float) -> dict:
    return T.depth_family(graph_of(key), beta=beta, kmax=int(K_OPTIONS[-2]))


@st.cache_data(max_entries=64, show_spinner=False)
def graph_page(key: tuple, name: str, params: tuple, highlight: int | None, filename: str,
               label: str) -> str:
    page = graph_html(graph_of(key), result_of(key, name, params), highlight_traj=highlight,
                      height_px=GRAPH_HEIGHT, estimator=label)
    return V.with_png_button(page, filename)


# ---------------------------------------------------------------- small helpers
def plot(fig, name: str) -> None:
    st.plotly_chart(fig, key=f"learn_fig_{name}", theme=None,
                    config=V.export_config(f"crbc-{name}", st.session_state.get(EXPORT_KEY) or "svg"))


def show_graph(page: str) -> None:
    st.iframe(page, height=GRAPH_HEIGHT + 12)
    st.caption("Node colour = V(s) (dark = 0, yellow = 1), size = visits; edge width = count, "
               "colour = credit (red < 0 < blue). Hover for numbers; **⤓ PNG** saves the drawing.")


def outcome_of(rows: list[dict]) -> dict[str, bool]:
    return {str(r["traj_id"]): bool(r["success"]) for r in rows}


def edits_panel(dataset: str, rows: list[dict]) -> tuple[tuple, tuple]:
    """The "try it" controls: flip outcomes, drop rollouts (multiselects, per data set)."""
    ids = T.traj_ids(rows)
    outcome = outcome_of(rows)
    fk, dk = f"learn_flip_{dataset}", f"learn_drop_{dataset}"
    for name, k in (("flip", fk), ("drop", dk)):
        view.field(name, [], key=k, decode=lambda s: [t for t in s.split(",") if t in ids])
    for k in (fk, dk):  # rollouts that no longer exist (rare-route sizes changed) are forgotten
        if k in st.session_state:
            st.session_state[k] = [t for t in st.session_state[k] if t in ids]
    c1, c2, c3 = st.columns([4, 4, 1.2], vertical_alignment="bottom")
    flip = c1.multiselect("Flip the outcome of", ids, key=fk,
                          format_func=lambda t: f"{t} ({'success' if outcome[t] else 'failure'})",
                          help="success ↔ failure on an in-memory copy; the file is untouched")
    drop = c2.multiselect("Drop rollouts", ids, key=dk,
                          format_func=lambda t: f"{t} ({'success' if outcome[t] else 'failure'})",
                          help="remove them from the group (in memory)")
    c3.button("Reset", key=f"learn_reset_{dataset}", on_click=_reset_edits, args=(dataset,),
              width="stretch")
    view.record("flip", encode=",".join, key=fk)
    view.record("drop", encode=",".join, key=dk)
    if drop and set(ids) <= set(drop):
        st.warning("A group needs at least one rollout: the last one stays.")
        drop = drop[:-1]
    return tuple(sorted(flip)), tuple(sorted(drop))


def _reset_edits(dataset: str) -> None:
    st.session_state[f"learn_flip_{dataset}"] = []
    st.session_state[f"learn_drop_{dataset}"] = []


def try_it(lesson: T.Lesson, dataset: str, rows: list[dict]) -> tuple[tuple, tuple]:
    with st.container(border=True):
        st.markdown(f"**Try it.** {lesson.try_it}")
        return edits_panel(dataset, rows)


def _next_lesson(n: int) -> None:
    st.session_state[LESSON_KEY] = n + 1


def superscripts(text: str) -> str:
    """``A^G`` → A<sup>G</sup>, ``β^(T−t+1)`` → β<sup>(T−t+1)</sup> (the lesson texts are ours)."""
    return re.sub(r"\^(\([^)]*\)|[A-Za-z0-9∞]+)", r"<sup>\1</sup>", text)


def anchor_name(graph, n: int) -> str:
    text = str(graph.node_anchor_obs[n])
    return text if len(text) <= 14 and "\n" not in text else f"s{n}"


# ---------------------------------------------------------------- lessons
def lesson_grpo(lesson, dataset) -> None:
    rows = base_rows(dataset)
    flip, drop = try_it(lesson, dataset, rows)
    key = (dataset, (), flip, drop)
    graph = graph_of(key)
    grpo, cr = result_of(key, "grpo"), result_of(key, "crbc")
    bellman = cr.q_value - cr.value
    plot(V.grpo_figure(graph, grpo.credit, bellman), "grpo")
    failed = ~graph.batch.traj_success[graph.batch.step_traj]
    good = int(np.sum(failed & (bellman > 1e-9)))
    m = st.columns(3)
    m[0].metric("rollouts", graph.batch.num_trajectories)
    m[1].metric("successes", int(graph.batch.traj_success.sum()))
    m[2].metric("good steps blamed (▲)", good,
                help="steps of failed rollouts whose closure advantage Q − V is positive")


def lesson_anchors(lesson, dataset) -> None:
    rows = base_rows(dataset)
    flip, drop = try_it(lesson, dataset, rows)
    key = (dataset, (), flip, drop)
    graph = graph_of(key)
    b = graph.batch
    ids = b.steps["traj_id"].astype(str).to_numpy()[b.traj_offsets[:-1]]
    opts = ["(none)"] + [f"{ids[t]} ({'success' if b.traj_success[t] else 'failure'})"
                         for t in range(b.num_trajectories)]
    pick = st.selectbox("Highlight a rollout", opts,
                        key=view.field("hl", "(none)", options=opts))
    view.record("hl")
    hl = None if pick == "(none)" else opts.index(pick) - 1
    shared = int(np.sum(np.bincount(np.unique(np.stack([graph.step_node, b.step_traj], 1), axis=0)[:, 0],
                                    minlength=graph.num_nodes) >= 2))
    m = st.columns(4)
    m[0].metric("steps", b.num_steps)
    m[1].metric("anchors", graph.num_nodes)
    m[2].metric("shared by ≥ 2 rollouts", shared)
    m[3].metric("with ≥ 2 actions", int(np.sum(graph.node_num_actions >= 2)))
    show_graph(graph_page(key, "crbc", (), hl, f"crbc-anchors-{dataset}", "crbc"))


def lesson_visit_local(lesson, dataset) -> None:
    rows = base_rows(dataset)
    flip, drop = try_it(lesson, dataset, rows)
    key = (dataset, (), flip, drop)
    graph = graph_of(key)
    keys = [str(k) for k in graph.node_anchor_key]
    cand = [n for n in range(graph.num_nodes) if graph.node_num_actions[n] >= 2] or \
        list(range(graph.num_nodes))
    labels = {keys[n]: f"{anchor_name(graph, n)} · {int(graph.node_visits[n])} visits, "
                       f"{int(graph.node_num_actions[n])} actions" for n in cand}
    ak = f"learn_anchor_{dataset}"
    if st.session_state.get(ak) not in labels:
        st.session_state[ak] = keys[T.teaching_anchor(graph, BETA)]
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    pick = c1.selectbox("Anchor", list(labels), key=ak, format_func=labels.get,
                        help="anchors where at least two actions were observed")
    preview = c2.toggle("Preview the closure (lesson 4)", key="learn_preview")
    n = keys.index(pick)
    visits = T.anchor_visits(graph, n, BETA)
    cq = cv = None
    if preview:
        cr = result_of(key, "crbc")
        p_lo, p_hi = int(graph.node_pair_offsets[n]), int(graph.node_pair_offsets[n + 1])
        cq = {str(graph.action_names[graph.pair_action[p]]): float(cr.pair_q[p]) for p in range(p_lo, p_hi)}
        cv = float(cr.node_value[n])
    plot(V.visit_local_figure(visits, anchor_name(graph, n), cq, cv), "visit-local")
    if "\n" in str(graph.node_anchor_obs[n]):
        with st.expander("What the anchor looks like"):
            st.code(str(graph.node_anchor_obs[n]), language=None)
    vl = result_of(key, "visit_local")
    p_lo, p_hi = int(graph.node_pair_offsets[n]), int(graph.node_pair_offsets[n + 1])
    st.dataframe(pd.DataFrame({
        "action": [str(graph.action_names[graph.pair_action[p]]) for p in range(p_lo, p_hi)],
        "visits N(s,a)": graph.pair_count[p_lo:p_hi],
        "Q⁰(s,a)": vl.pair_q[p_lo:p_hi],
        "A⁰ = Q⁰ − V⁰": vl.pair_q[p_lo:p_hi] - vl.node_value[n],
        "step credit A^S": vl.pair_credit[p_lo:p_hi],
    }), hide_index=True, key="learn_vl_table",
        column_config={c: st.column_config.NumberColumn(format="%+.4f")
                       for c in ("Q⁰(s,a)", "A⁰ = Q⁰ − V⁰", "step credit A^S")})


def lesson_depth(lesson, dataset) -> None:
    rows = base_rows(dataset)
    c0, c1, c2, c3 = st.columns([6, 1, 1, 1.2], vertical_alignment="bottom")
    k = c0.select_slider("Backup depth K", options=K_OPTIONS,
                         key=view.field("lk", "0", options=K_OPTIONS),
                         help="K = 0: visit-local averages; each step backs values up one edge; "
                              "∞: the exact closure (one linear solve)")
    view.record("lk")
    c1.button("◀ K", key="learn_k_prev", on_click=_step_k, args=(-1,), help="one backup less",
              width="stretch")
    c2.button("K ▶", key="learn_k_next", on_click=_step_k, args=(1,), help="one backup more",
              width="stretch")
    playing = c3.toggle("Play", key="learn_play", help="back up one step per second up to ∞")
    flip, drop = try_it(lesson, dataset, rows)
    key = (dataset, (), flip, drop)
    fam = family_of(key, BETA)
    sel_k = None if k == INF else int(k)
    gap = 0.0 if sel_k is None else float(fam["err"][sel_k])
    bound = 0.0 if sel_k is None else float(fam["bound"][sel_k])
    m = st.columns(3)
    m[0].metric("observed ‖A^∞ − A^(K)‖∞", f"{gap:.2e}")
    m[1].metric("Corollary-3 bound", f"{bound:.2e}")
    moved = 0 if sel_k in (None, 0) else int(np.sum(
        np.abs(fam["node_value"][sel_k] - fam["node_value"][sel_k - 1]) > 1e-12))
    m[2].metric("anchors whose V moved at this step", moved)
    params = () if sel_k is None else (("depth", float(sel_k)),)
    show_graph(graph_page(key, "crbc", params, None, f"crbc-depth-K{k}-{dataset}",
                          f"crbc K = {k}"))
    if playing:
        if k == INF:
            st.session_state["learn_play_done"] = True
        else:
            _step_k(1)
            pause_then_rerun(1.0)
    c1, c2 = st.columns([1.3, 1])
    with c1:
        plot(V.depth_gap_figure(fam["depths"], fam["err"], fam["bound"], sel_k, BETA), "depth-gap")
    graph = graph_of(key)
    gated = np.flatnonzero(graph.node_num_actions[graph.pair_node] >= 2)
    A_k = fam["pair_adv_inf"] if sel_k is None else fam["pair_adv"][sel_k]
    table = pd.DataFrame({"anchor · action": [T.pair_label(graph, p) for p in gated],
                          f"A^({k})": A_k[gated], "A^∞": fam["pair_adv_inf"][gated]})
    table["sign agrees"] = np.sign(table[f"A^({k})"].round(12)) == np.sign(table["A^∞"].round(12))
    with c2:
        st.markdown(f"**A<sup>({k})</sup> at the {len(gated)} branching (anchor, action) pairs**",
                    unsafe_allow_html=True)
        st.dataframe(table, hide_index=True, key="learn_depth_table",
                     height="auto" if len(table) <= 10 else 400,
                     column_config={c: st.column_config.NumberColumn(format="%+.4f")
                                    for c in (f"A^({k})", "A^∞")})


def _step_k(delta: int) -> None:
    cur = st.session_state.get(K_KEY, "0")
    i = K_OPTIONS.index(cur) if cur in K_OPTIONS else 0
    st.session_state[K_KEY] = K_OPTIONS[max(0, min(len(K_OPTIONS) - 1, i + delta))]
    if st.session_state[K_KEY] == INF:
        st.session_state["learn_play"] = False


def lesson_rare_route(lesson) -> None:
    names = {"learn_rr_jump": "rr_jump", "learn_rr_lucky": "rr_lucky", "learn_rr_walk": "rr_walk",
             "learn_rr_walk_ok": "rr_ok"}
    for k, v in RR_DEFAULTS.items():
        view.field(names[k], v, decode=int, options=lambda x: isinstance(x, int) and 0 <= x <= 10)
    c = st.columns(4)
    n_jump = c[0].slider("rollouts that jump", 1, 10, key="learn_rr_jump")
    st.session_state["learn_rr_lucky"] = min(st.session_state["learn_rr_lucky"], n_jump)
    n_lucky = c[1].slider("… of which land (lucky)", 0, n_jump, key="learn_rr_lucky")
    n_walk = c[2].slider("rollouts that walk around", 1, 10, key="learn_rr_walk")
    st.session_state["learn_rr_walk_ok"] = min(st.session_state["learn_rr_walk_ok"], n_walk)
    n_ok = c[3].slider("… of which arrive", 0, n_walk, key="learn_rr_walk_ok")
    for k in RR_DEFAULTS:
        view.record(names[k])
    rr = (n_jump, n_lucky, n_walk, n_ok)
    rows = base_rows("rare_route", rr)
    flip, drop = try_it(lesson, "rare_route", rows)
    key = ("rare_route", rr, flip, drop)
    graph = graph_of(key)
    credits = {}
    for name, label in RR_METHODS.items():
        r = result_of(key, name)
        credits[label] = tuple(_pair_credit(graph, r, a) for a in (T.TRAP_ACTION, T.SAFE_ACTION))
    plot(V.rare_route_figure(credits, (T.TRAP_ACTION, T.SAFE_ACTION)), "rare-route")
    cr = result_of(key, "crbc")
    sp = result_of(key, "shortest_path")
    qj, qw = (_pair_q(graph, cr, a) for a in (T.TRAP_ACTION, T.SAFE_ACTION))
    st.markdown(
        f"<div style='font-size:1.2rem;line-height:1.5'><b>Closure:</b> Q(start, jump) = {_f(qj)}"
        f" vs Q(start, walk) = {_f(qw)} — each is the discounted success rate of the route as it "
        f"was actually taken. <b>Shortest path:</b> d(ledge) = {_d(graph, sp, 'ledge')} hop vs "
        f"d(corridor 1) = {_d(graph, sp, 'corridor 1')} hops to SUCCESS, whatever the odds.</div>",
        unsafe_allow_html=True)
    table = pd.DataFrame(T.route_table(edited_rows(key), T.TRAP_ANCHOR))
    if not table.empty:
        st.dataframe(table, hide_index=True, key="learn_routes",
                     column_config={"success rate": st.column_config.NumberColumn(format="percent")})
    with st.expander("The graph of this group"):
        show_graph(graph_page(key, "crbc", (), None, "crbc-rare-route", "crbc"))


def _pair_credit(graph, res, action) -> float:
    try:
        p = T.pair_index(graph, T.TRAP_ANCHOR, action)
    except KeyError:
        return float("nan")
    steps = np.flatnonzero(graph.step_pair == p)
    return float(np.mean(res.credit[steps]))


def _pair_q(graph, res, action) -> float:
    try:
        return float(res.pair_q[T.pair_index(graph, T.TRAP_ANCHOR, action)])
    except KeyError:
        return float("nan")


def _d(graph, sp, anchor) -> str:
    for n in range(graph.num_nodes):
        if str(graph.node_anchor_obs[n]) == anchor:
            return str(int(sp.node_value[n]))
    return "—"


def _f(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.3f}"


def lesson_combination(lesson, dataset) -> None:
    rows = base_rows(dataset)
    c = st.columns(4)
    smins = [0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0]
    w_g = c[0].slider("w_G (trajectory)", 0.0, 5.0, step=0.5,
                      key=view.field("wg", 1.0, decode=float, options=lambda x: 0 <= x <= 5))
    w_s = c[1].slider("w_S (step)", 0.0, 10.0, step=0.5,
                      key=view.field("ws", 5.0, decode=float, options=lambda x: 0 <= x <= 10))
    s_min = c[2].select_slider("σ_min", smins, key=view.field("smin", 0.1, decode=float,
                                                              options=smins))
    gate = c[3].slider("gate: ≥ n distinct actions", 1, 4,
                       key=view.field("gate", 2, decode=int, options=range(1, 5)),
                       help="1 = no gate. For this family a single-action anchor already has Q = V, "
                            "so n = 1 vs 2 differs only by round-off; n ≥ 3 silences more anchors")
    for name in ("wg", "ws", "smin", "gate"):
        view.record(name)
    flip, drop = try_it(lesson, dataset, rows)
    key = (dataset, (), flip, drop)
    graph = graph_of(key)
    params = (("min_actions", int(gate)), ("sigma_min", float(s_min)), ("w_group", float(w_g)),
              ("w_step", float(w_s)))
    res = result_of(key, "crbc", params)
    b = graph.batch
    ids = b.steps["traj_id"].astype(str).to_numpy()
    traj_names = [ids[b.traj_offsets[t]] for t in range(b.num_trajectories)]
    opts = ["all rollouts"] + traj_names
    rk = f"learn_comb_traj_{dataset}"
    if st.session_state.get(rk) not in opts:
        failed = [t for t in range(b.num_trajectories) if not b.traj_success[t]]
        st.session_state[rk] = ("all rollouts" if b.num_steps <= 40 else
                                traj_names[failed[0] if failed else 0])
    pick = st.selectbox("Steps shown", opts, key=rk)
    steps = (np.arange(b.num_steps) if pick == "all rollouts"
             else np.arange(b.traj_offsets[traj_names.index(pick)],
                            b.traj_offsets[traj_names.index(pick) + 1]))
    acts = b.steps["action"].fillna("").astype(str).to_numpy()
    # "step k", not "tk": the toy rollouts are themselves named t1 … t4.
    labels = [f"{ids[s]} step {int(b.step_pos[s])} · {acts[s][:12]}" for s in steps]
    step_term = w_s * res.credit[steps]
    group_term = res.advantage[steps] - step_term
    plot(V.combination_figure(labels, group_term, step_term,
                              f"A = {w_g:g}·A<sup>G</sup> + {w_s:g}·A<sup>S</sup>   (σ_min = {s_min:g})"),
         "combination")
    A = res.pair_q - res.node_value[graph.pair_node]
    mu = graph.pair_count / graph.node_visits[graph.pair_node]
    sigma = np.sqrt(np.bincount(graph.pair_node, weights=mu * A ** 2, minlength=graph.num_nodes))
    branching = np.flatnonzero(graph.node_num_actions[graph.pair_node] >= 2)
    st.dataframe(pd.DataFrame({
        "anchor · action": [T.pair_label(graph, p) for p in branching],
        "μ(a|s)": mu[branching], "A = Q − V": A[branching],
        "σ(s)": sigma[graph.pair_node[branching]],
        "gated": graph.node_num_actions[graph.pair_node[branching]] < gate,
        "A^S": res.pair_credit[branching]}), hide_index=True, key="learn_comb_table",
        column_config={c: st.column_config.NumberColumn(format="%+.4f")
                       for c in ("A = Q − V", "σ(s)", "A^S")}
        | {"μ(a|s)": st.column_config.NumberColumn(format="%.2f")})


# ---------------------------------------------------------------- the page
def render() -> None:
    st.title("Learn: credit assignment, step by step")
    top = st.columns([5, 1.3], vertical_alignment="bottom")
    numbers = [ls.number for ls in T.LESSONS]
    problems: list = []
    n = top[0].radio("Lesson", numbers, horizontal=True,
                     key=view.field("lesson", 1, options=numbers, decode=int, problems=problems),
                     format_func=lambda i: f"{i} · {T.LESSONS[i - 1].title.split(':')[0]}")
    view.record("lesson")
    for p in problems:
        st.warning(p)
    top[1].segmented_control("Figure export", ["svg", "png"], default="svg", key=EXPORT_KEY,
                             help="format of the camera button on every chart (for slides)")
    lesson = T.LESSONS[n - 1]
    st.header(f"{lesson.number}. {lesson.title}", divider="gray")
    st.markdown(f"<div style='font-size:1.25rem;line-height:1.55'>{superscripts(lesson.text)}</div>",
                unsafe_allow_html=True)
    if n == 5:
        lesson_rare_route(lesson)
    else:
        dataset = st.radio("Data", list(DATASETS), format_func=DATASETS.get, horizontal=True,
                           key=view.field("data", "toy", options=list(DATASETS)))
        view.record("data")
        {1: lesson_grpo, 2: lesson_anchors, 3: lesson_visit_local, 4: lesson_depth,
         6: lesson_combination}[n](lesson, dataset)
    if n < len(T.LESSONS):
        st.button(f"Next lesson: {n + 1} · {T.LESSONS[n].title.split(':')[0]} →", key="learn_next",
                  on_click=_next_lesson, args=(n,), type="primary")


render()
