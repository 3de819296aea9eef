"""Learn page: six short lessons, from trajectory-level credit to the Bellman closure, on the toy
group, one Sokoban group and the rare-route trap. The lesson number lives in the URL
(``/learn?lesson=4``). Edits (flip an outcome, drop a rollout, add a rollout through an anchor,
the discounts β and γ: `crbc_viz.ui.learn_edits`) apply to an in-memory copy.

Projector mode (``?projector=1``, the sidebar's toggle) draws every figure, legend and table
with large fonts: tables as plain HTML tables (``st.table``, their text sized by the page's
CSS), lesson 4's figure and table one under the other.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from crbc_viz.ui import pipeline, view
from crbc_viz.ui.learn_edits import BETA, beta_control, edits_of, try_it
from crbc_viz.ui.learn_widgets import ask, code_block, graph_stack, projector, table
from crbc_viz.ui.links import stack_keeper
from crbc_viz.ui.pipeline import LEARN_GRAPH_HEIGHT as GRAPH_HEIGHT
from crbc_viz.ui.pipeline import LEARN_KMAX
from crbc_viz.ui.pipeline import learn_edited_rows as edited_rows
from crbc_viz.ui.pipeline import learn_family as family_of
from crbc_viz.ui.pipeline import learn_graph as graph_of
from crbc_viz.ui.pipeline import learn_graph_page as graph_page
from crbc_viz.ui.pipeline import learn_result as result_of
from crbc_viz.ui.pipeline import learn_rows as base_rows
from crbc_viz.ui.text import md
from crbc_viz.views import learn as V

T = V.T

#: This page's facts, read by the router without running the page (`crbc_viz.ui.pages.page_facts`):
#: menu order, title, icon, url path (default: the script's name), whether it has its own data
#: choice (no shared sidebar), an element that is there once it has loaded (tests wait on it), and
#: the URL fields the page keeps (name -> session-state key of its control; None: kept by the page
#: itself), which `crbc_viz.ui.view.FIELDS` reads.
PAGE = {
    "order": 7,
    "title": "Learn",
    "icon": ":material/school:",
    "url_path": "learn",
    "own_data": True,
    "ready": "iframe, .js-plotly-plot, [data-testid='stTable'], [data-testid='stDataFrame']",
    "fields": {
        # flip / drop / add are keyed per data set: their key is given at the call
        "lesson": "learn_lesson",
        "data": "learn_data",
        "lk": "learn_k",
        "beta": "learn_beta",
        "gamma": "learn_gamma",
        "hl": "learn_highlight",
        "flip": None,
        "drop": None,
        "add": None,
        "rr_jump": "learn_rr_jump",
        "rr_lucky": "learn_rr_lucky",
        "rr_walk": "learn_rr_walk",
        "rr_ok": "learn_rr_walk_ok",
        "wg": "learn_wg",
        "ws": "learn_ws",
        "smin": "learn_smin",
        "gate": "learn_gate",
    },
}

LESSON_KEY = "learn_lesson"
EXPORT_KEY = "learn_export"
K_KEY = "learn_k"
PLAY_KEY = "learn_play"
#: Set by Play's clock (`crbc_viz.ui.links.stack_keeper`) before the run it starts: that run
#: advances K by one.
PLAY_TICK = "_learn_play_tick"
#: The version of lesson 4's graph drawing on top (`graph_stack`), for Play's clock.
PLAY_LAYER = "_learn_play_layer"
INF = "∞"
K_OPTIONS = [str(k) for k in range(LEARN_KMAX + 1)] + [INF]
DATASETS = {"toy": "Toy group (§14.1)", "sokoban": f"Sokoban · {V.SOKOBAN_GROUP}"}
RR_DEFAULTS = {"learn_rr_jump": 4, "learn_rr_lucky": 1, "learn_rr_walk": 4, "learn_rr_walk_ok": 3}
#: The range of each rare-route slider ("… of which" is further capped by the count above it).
RR_RANGES = {
    "learn_rr_jump": (1, 10),
    "learn_rr_lucky": (0, 10),
    "learn_rr_walk": (1, 10),
    "learn_rr_walk_ok": (0, 10),
}
RR_METHODS = {
    "shortest_path": "shortest path (GraphGPO)",
    "visit_local": "visit-local (K = 0)",
    "crbc": "CRBC closure (K = ∞)",
}
#: The group the Graph page shows (set by `render` from the link's file and group; empty when
#: none loads): ``{"rr": (digest, source key, group index), "label", "name"}``.
GROUP: dict = {}


def viewed_group() -> dict | None:
    """The group of the shared view (the Graph page's file and group, kept in the link), so
    that a lecturer can explain a real training log; None when it does not load."""
    return pipeline.learn_viewed_group(view.value("file"), view.value("group"))


def rr_of(dataset: str) -> tuple:
    """The data set's parameters in the cache key: the viewed group's for ``group``."""
    return GROUP["rr"] if dataset == "group" else ()


def code_rr(dataset: str) -> tuple:
    """What a code block needs to load the viewed group: (file name, group index)."""
    return (GROUP["name"], GROUP["rr"][-1]) if dataset == "group" else ()


def _code(lesson: int, dataset: str, edits: tuple, **more) -> str:
    """Lesson ``lesson``'s code block on ``dataset`` with this run's edits (flip, drop, add)."""
    more.setdefault("rr", code_rr(dataset))
    return T.lesson_code(lesson, dataset, flip=edits[0], drop=edits[1], add=edits[2], **more)


# ---------------------------------------------------------------- small helpers
def plot(fig, name: str) -> None:
    st.plotly_chart(
        fig,
        key=f"learn_fig_{name}",
        theme=None,
        config=V.export_config(f"crbc-{name}", st.session_state.get(EXPORT_KEY) or "svg"),
    )


def show_graph(page: str, stack: str | None = None) -> None:
    """The lesson's graph; with ``stack`` (a name for what it shows), in two stacked frames that
    swap without a blank in between (`graph_stack`: Play's steps)."""
    page = V.projector_graph(page) if projector() else page
    if stack is None:
        st.iframe(page, height=GRAPH_HEIGHT + 12)
    else:
        st.session_state[PLAY_LAYER] = graph_stack(page, f"{stack}-{projector()}", GRAPH_HEIGHT + 12)
    st.caption(
        "Node colour = V(s) (dark = 0, yellow = 1), size = visits; edge width = count, "
        "colour = credit (red < 0 < blue). Hover for numbers; **PNG** / **SVG** above the "
        "drawing save the whole graph."
    )


def _next_lesson(n: int) -> None:
    st.session_state[LESSON_KEY] = n + 1


# ---------------------------------------------------------------- lessons
def lesson_grpo(lesson, dataset) -> None:
    rows = base_rows(dataset, rr_of(dataset))
    edits, beta, _ = try_it(
        lesson,
        dataset,
        rows,
        rr_of(dataset),
        note="Here the heatmap is GRPO's (no discount); β moves only the ▲ marks, which come "
        "from the closure (lesson 4).",
    )
    key = (dataset, rr_of(dataset), *edits)
    graph = graph_of(key)
    grpo, cr = result_of(key, "grpo"), result_of(key, "crbc", (("beta", beta),))
    bellman = cr.q_value - cr.value
    ask(T.lesson_prediction(1, graph), f"learn_predict_1_{dataset}")
    plot(V.grpo_figure(graph, grpo.credit, bellman, projector=projector()), "grpo")
    good = V.good_steps_blamed(graph, bellman)
    m = st.columns(3)
    m[0].metric("rollouts", graph.batch.num_trajectories)
    m[1].metric("successes", int(graph.batch.traj_success.sum()))
    m[2].metric("steps marked ▲", good, help=f"▲ marks {V.MARK_RULE}")
    code_block(_code(1, dataset, edits))


def lesson_anchors(lesson, dataset) -> None:
    rows = base_rows(dataset, rr_of(dataset))
    edits, beta, _ = try_it(
        lesson,
        dataset,
        rows,
        rr_of(dataset),
        note="Here β recolours the graph's edges (CRBC credit); the anchors and counts do not depend on it.",
    )
    key = (dataset, rr_of(dataset), *edits)
    graph = graph_of(key)
    ask(T.lesson_prediction(2, graph), f"learn_predict_2_{dataset}")
    opts = ["(none)"] + V.rollout_options(graph)
    pick = st.selectbox("Highlight a rollout", opts, key=view.field("hl", "(none)", options=opts))
    view.record("hl")
    hl = None if pick == "(none)" else opts.index(pick) - 1
    counts = V.anchor_counts(graph)
    m = st.columns(4)
    m[0].metric("steps", counts["steps"])
    m[1].metric("anchors", counts["anchors"])
    m[2].metric("shared by ≥ 2 rollouts", counts["shared"])
    m[3].metric("with ≥ 2 actions", counts["branching"])
    bp = (("beta", beta),)
    show_graph(graph_page(key, "crbc", bp, hl, f"crbc-anchors-b{beta:g}-{dataset}", "crbc"))
    code_block(_code(2, dataset, edits))


def lesson_visit_local(lesson, dataset) -> None:
    rows = base_rows(dataset, rr_of(dataset))
    key = (dataset, rr_of(dataset), *edits_of(dataset, rows))
    graph = graph_of(key)
    labels = V.branching_anchors(graph)
    ak = f"learn_anchor_{dataset}"
    if st.session_state.get(ak) not in labels:
        st.session_state[ak] = V.default_anchor(graph, BETA)
    c1, c2, c3 = st.columns([3, 2, 2], vertical_alignment="bottom")
    beta = beta_control(c3)
    bp = (("beta", beta),)
    pick = c1.selectbox(
        "Anchor",
        list(labels),
        key=ak,
        format_func=labels.get,
        help="anchors where at least two actions were observed",
    )
    preview = c2.toggle("Preview the closure (lesson 4)", key="learn_preview")
    edits, _, _ = try_it(
        lesson,
        dataset,
        rows,
        rr_of(dataset),
        beta=beta,
        note="Here β (above) sets every visit's return G; γ does not enter this lesson's figure.",
    )
    n = V.node_of_key(graph, pick)
    ask(T.lesson_prediction(3, graph, beta=beta, node=n), f"learn_predict_3_{dataset}_{n}")
    visits = V.anchor_visits(graph, n, beta)
    cq, cv = V.pair_values(graph, result_of(key, "crbc", bp), n) if preview else (None, None)
    plot(V.visit_local_figure(visits, V.anchor_name(graph, n), cq, cv, projector=projector()), "visit-local")
    board = V.anchor_text(graph, n)
    if board is not None:
        with st.expander("What the anchor looks like"):
            st.code(board, language=None)
    table(
        V.visit_local_table(graph, result_of(key, "visit_local", bp), n),
        "learn_vl_table",
        {"Q⁰(s,a)": "%.3f"} | {c: "%+.3f" for c in ("A⁰ = Q⁰ − V⁰", "step credit Aˢ")},
    )
    code_block(
        _code(
            3,
            dataset,
            edits,
            beta=beta,
            node=n,
            node_name=V.anchor_name(graph, n),
        )
    )


def lesson_depth(lesson, dataset) -> bool:
    """Lesson 4; True while Play runs (the page then reruns itself a second after this run
    began).

    The K control sits right above the graph (nothing between them), so that during Play the
    slider and the node values it changes are on one screen; the backup's equation with this
    group's numbers follows the graph, then the gap, the bound and the try-it controls."""
    rows = base_rows(dataset, rr_of(dataset))
    if st.session_state.pop(PLAY_TICK, False) and st.session_state.get(PLAY_KEY):
        # Play's step happens here, before the K control and the Play toggle are drawn: once a
        # widget exists in a run, its state can no longer be set.
        _step_k(1)
    edits = edits_of(dataset, rows)
    key = (dataset, rr_of(dataset), *edits)
    graph = graph_of(key)
    node = _backup_anchor(graph, dataset)
    beta = beta_control(st.columns([1, 1.4])[0])
    ask(T.lesson_prediction(4, graph, beta=beta, node=node), f"learn_predict_4_{dataset}_{node}")
    k, playing = _k_controls()
    fam = family_of(key, beta)
    sel_k = None if k == INF else int(k)
    params = (("beta", beta),) + (() if sel_k is None else (("depth", float(sel_k)),))
    show_graph(
        graph_page(key, "crbc", params, None, f"crbc-depth-K{k}-b{beta:g}-{dataset}", f"crbc K = {k}"),
        stack=f"depth-{dataset}",
    )
    _backup_equation(graph, fam, node, sel_k, dataset, beta)
    gap = 0.0 if sel_k is None else float(fam["err"][sel_k])
    bound = 0.0 if sel_k is None else float(fam["bound"][sel_k])
    m = st.columns(3)
    m[0].metric(
        "largest gap to the closure",
        f"{gap:.3f}",
        help="the largest |A at K − A at K = ∞| over the (anchor, action) pairs",
    )
    m[1].metric(
        "guaranteed bound on the gap",
        f"{bound:.3f}",
        help="2βᴷ/(1 − β) times the largest change of any anchor's value in the first backup "
        "(‖TV⁰ − V⁰‖, Corollary 3 of the CRBC paper): the gap to the closure after K backups "
        "can never exceed it",
    )
    m[2].metric("anchors whose V moved at this step", V.moved_anchors(fam, sel_k))
    try_it(
        lesson,
        dataset,
        rows,
        rr_of(dataset),
        beta=beta,
        note="Here β (above the graph) sets every backup and the bound; γ does not enter this "
        "lesson's figures.",
    )
    # Side by side on a screen; one under the other on a projector (each at full width).
    c1, c2 = (st.container(), st.container()) if projector() else st.columns([1.3, 1])
    with c1:
        plot(
            V.depth_gap_figure(
                fam["depths"],
                fam["err"],
                fam["bound"],
                sel_k,
                beta,
                projector=projector(),
                title_chars=V.TITLE_CHARS if projector() else 30,
            ),
            "depth-gap",
        )
    pairs = V.depth_table(graph, fam, sel_k, k)
    with c2:
        st.markdown(f"**{V.depth_column(k)} at the {len(pairs)} branching (anchor, action) pairs**")
        table(
            pairs,
            "learn_depth_table",
            {c: "%+.3f" for c in (V.depth_column(k), V.CLOSURE_COLUMN)},
            height="auto" if len(pairs) <= 10 else 400,
        )
    code_block(_code(4, dataset, edits, beta=beta, k=sel_k))
    return playing and k != INF


def _k_controls() -> tuple[str, bool]:
    """The K slider, ◀ K / K ▶ and Play in one row (it wraps: each keeps its whole label)."""
    c0, cb = st.columns([4, 4.4] if projector() else [6, 3.2], vertical_alignment="bottom")
    c1 = c2 = c3 = cb.container(horizontal=True, vertical_alignment="center")
    k = c0.select_slider(
        "Backup depth K",
        options=K_OPTIONS,
        on_change=_stop_play_at_closure,
        key=view.field("lk", "0", options=K_OPTIONS, allowed=f"0 … {LEARN_KMAX} or {INF}"),
        help="K = 0: visit-local averages; each step backs values up one edge; "
        "∞: the exact closure (one linear solve)",
    )
    view.record("lk")
    c1.button(
        "◀ K", key="learn_k_prev", on_click=_step_k, args=(-1,), help="one backup less", width="content"
    )
    c2.button("K ▶", key="learn_k_next", on_click=_step_k, args=(1,), help="one backup more", width="content")
    playing = c3.toggle(
        "Play", key=PLAY_KEY, on_change=_on_play, help="back up one step per second up to ∞ (from 0 at ∞)"
    )
    return k, playing


def _backup_anchor(graph, dataset: str) -> int:
    """The anchor whose backup lesson 4 writes out (the lesson-3 teaching anchor by default)."""
    labels = V.branching_anchors(graph)
    ak = f"learn_backup_anchor_{dataset}"
    if st.session_state.get(ak) not in labels:
        st.session_state[ak] = V.default_anchor(graph, BETA)
    return V.node_of_key(graph, st.session_state[ak])


def _backup_equation(graph, fam: dict, node: int, sel_k: int | None, dataset: str, beta: float) -> None:
    """One Bellman backup at the chosen anchor, with this group's numbers."""
    labels = V.branching_anchors(graph)
    c1, _ = st.columns([1, 1.4])
    c1.selectbox(
        "Backup written out at",
        list(labels),
        key=f"learn_backup_anchor_{dataset}",
        format_func=labels.get,
    )
    with st.container():  # the equation at full width, one line per action
        if sel_k == 0:
            st.markdown(
                f"At K = 0 each visit is valued by its own suffix and the visits are averaged at "
                f"their anchor: $V^{{(0)}}$ = {fam['node_value'][0][node]:.3f} here (lesson 3). "
                "Press K ▶ for the first backup."
            )
        else:
            v_prev = fam["node_value_inf"] if sel_k is None else fam["node_value"][sel_k - 1]
            st.latex(T.backup_latex(graph, v_prev, node, beta, sel_k))
            if sel_k is None:
                st.caption("At the closure one more backup gives the same values: they have settled.")


def _step_k(delta: int) -> None:
    """One backup more or less (a callback, or Play's step before the widgets are drawn)."""
    cur = st.session_state.get(K_KEY, "0")
    i = K_OPTIONS.index(cur) if cur in K_OPTIONS else 0
    st.session_state[K_KEY] = K_OPTIONS[max(0, min(len(K_OPTIONS) - 1, i + delta))]
    _stop_play_at_closure()


def _on_tick() -> None:
    """Play's clock: the run it starts takes one step (unless Play was stopped meanwhile)."""
    if st.session_state.get(PLAY_KEY):
        st.session_state[PLAY_TICK] = True


def _stop_play_at_closure() -> None:
    if st.session_state.get(K_KEY) == INF:
        st.session_state[PLAY_KEY] = False


def _on_play() -> None:
    """Play from K = ∞ starts again at 0."""
    if st.session_state.get(PLAY_KEY) and st.session_state.get(K_KEY) == INF:
        st.session_state[K_KEY] = K_OPTIONS[0]


def _cap(key: str, cap: int, from_link: bool, names: dict) -> None:
    """A "… of which" count cannot exceed the count above it; a link's larger value is reported."""
    v = st.session_state[key]
    if v > cap:
        if from_link:
            st.warning(
                md(f"{names[key]} = '{v}' from the link is more than the {cap} above it; showing {cap}")
            )
        st.session_state[key] = cap


def lesson_rare_route(lesson) -> None:
    names = {
        "learn_rr_jump": "rr_jump",
        "learn_rr_lucky": "rr_lucky",
        "learn_rr_walk": "rr_walk",
        "learn_rr_walk_ok": "rr_ok",
    }
    from_link = {k: view.is_pending(names[k]) for k in RR_DEFAULTS}
    for k, v in RR_DEFAULTS.items():
        lo, hi = RR_RANGES[k]
        view.field(
            names[k],
            v,
            decode=int,
            options=lambda x, lo=lo, hi=hi: lo <= x <= hi,
            allowed=f"whole numbers {lo} … {hi}",
        )
    c = st.columns(4)
    n_jump = c[0].slider("rollouts that jump", *RR_RANGES["learn_rr_jump"], key="learn_rr_jump")
    _cap("learn_rr_lucky", n_jump, from_link["learn_rr_lucky"], names)
    n_lucky = c[1].slider("… of which land (lucky)", 0, n_jump, key="learn_rr_lucky")
    n_walk = c[2].slider("rollouts that walk around", *RR_RANGES["learn_rr_walk"], key="learn_rr_walk")
    _cap("learn_rr_walk_ok", n_walk, from_link["learn_rr_walk_ok"], names)
    n_ok = c[3].slider("… of which arrive", 0, n_walk, key="learn_rr_walk_ok")
    for k in RR_DEFAULTS:
        view.record(names[k])
    rr = (n_jump, n_lucky, n_walk, n_ok)
    rows = base_rows("rare_route", rr)
    edits, beta, _ = try_it(
        lesson,
        "rare_route",
        rows,
        rr,
        note="Here β discounts the closure's and visit-local's values of both routes; "
        "shortest-path credit ignores it.",
    )
    key = ("rare_route", rr, *edits)
    bp = {name: (("beta", beta),) if name != "shortest_path" else () for name in RR_METHODS}
    nums = V.rare_route_numbers(
        graph_of(key),
        {label: result_of(key, name, bp[name]) for name, label in RR_METHODS.items()},
        result_of(key, "crbc", bp["crbc"]),
        result_of(key, "shortest_path"),
    )
    ask(T.lesson_prediction(5, graph_of(key), credits=nums["credits"]), "learn_predict_5")
    plot(
        V.rare_route_figure(nums["credits"], (V.TRAP_ACTION, V.SAFE_ACTION), projector=projector()),
        "rare-route",
    )
    qj, qw = nums["q"]
    st.markdown(
        f"<div style='font-size:1.2rem;line-height:1.5'><b>Closure:</b> Q(start, jump) = {qj}"
        f" vs Q(start, walk) = {qw} — each is the discounted success rate of the route as it "
        f"was actually taken. <b>Shortest path:</b> d(ledge) = {nums['d_ledge']} hop vs "
        f"d(corridor 1) = {nums['d_corridor']} hops to SUCCESS, whatever the odds.</div>",
        unsafe_allow_html=True,
    )
    routes = pd.DataFrame(V.route_table(edited_rows(key), V.TRAP_ANCHOR))
    if not routes.empty:
        table(routes, "learn_routes", {"success rate": "percent"})
    with st.expander("The graph of this group"):
        show_graph(graph_page(key, "crbc", bp["crbc"], None, f"crbc-rare-route-b{beta:g}", "crbc"))
    code_block(_code(5, "rare_route", edits, rr=rr, beta=beta))


def lesson_combination(lesson, dataset) -> None:
    rows = base_rows(dataset, rr_of(dataset))
    c = st.columns(4)
    smins = [0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0]
    w_g = c[0].slider(
        "trajectory weight $w_G$",
        0.0,
        5.0,
        step=0.5,
        key=view.field("wg", 1.0, decode=float, options=lambda x: 0 <= x <= 5, allowed="[0, 5]"),
    )
    w_s = c[1].slider(
        "step weight $w_S$",
        0.0,
        10.0,
        step=0.5,
        key=view.field("ws", 5.0, decode=float, options=lambda x: 0 <= x <= 10, allowed="[0, 10]"),
    )
    s_min = c[2].select_slider(
        "floor $\\sigma_{\\min}$",
        smins,
        key=view.field("smin", 0.1, decode=float, options=smins, allowed=", ".join(map(str, smins))),
    )
    gate = c[3].slider(
        "gate: ≥ n distinct actions",
        1,
        4,
        key=view.field("gate", 2, decode=int, options=range(1, 5), allowed="1, 2, 3, 4"),
        help="1 = no gate. For this family a single-action anchor already has Q = V, "
        "so n = 1 vs 2 differs only by round-off; n ≥ 3 silences more anchors",
    )
    for name in ("wg", "ws", "smin", "gate"):
        view.record(name)
    edits, beta, _ = try_it(
        lesson,
        dataset,
        rows,
        rr_of(dataset),
        note="Here β discounts CRBC's Q and V, so it moves Aˢ; GRPO's Aᴳ ignores it.",
    )
    key = (dataset, rr_of(dataset), *edits)
    graph = graph_of(key)
    params = (
        ("beta", float(beta)),
        ("min_actions", int(gate)),
        ("sigma_min", float(s_min)),
        ("w_group", float(w_g)),
        ("w_step", float(w_s)),
    )
    res = result_of(key, "crbc", params)
    ask(T.lesson_prediction(6, graph), f"learn_predict_6_{dataset}")
    opts = ["all rollouts"] + V.rollout_names(graph)
    rk = f"learn_comb_traj_{dataset}"
    if st.session_state.get(rk) not in opts:
        st.session_state[rk] = V.default_combination_rollout(graph) or "all rollouts"
    pick = st.selectbox("Steps shown", opts, key=rk)
    labels, group_term, step_term = V.combination_steps(
        graph, res, None if pick == "all rollouts" else pick, w_s
    )
    plot(
        V.combination_figure(
            labels,
            group_term,
            step_term,
            f"A = {w_g:g}·Aᴳ + {w_s:g}·Aˢ   (σₘᵢₙ = {s_min:g})",
            projector=projector(),
        ),
        "combination",
    )
    ungated = result_of(key, "crbc", tuple((k, 1 if k == "min_actions" else v) for k, v in params))
    comb = V.combination_table(graph, res, ungated)
    table(
        comb,
        "learn_comb_table",
        {c: "%+.3f" for c in ("A = Q − V", V.GATE_OFF_COLUMN, "Aˢ")} | {"μ(a|s)": "%.2f", "σ(s)": "%.3f"},
    )
    silenced = comb[(comb[V.GATE_OFF_COLUMN] - comb["Aˢ"]).abs() > 1e-9]["anchor · action"].tolist()
    st.caption(
        (
            f"The gate at {gate} actions silences {', '.join(map(md, silenced))}: their Aˢ is 0, the column "
            "before it shows what they had without the gate."
        )
        if silenced
        else f"The gate at {gate} action{'s' if gate > 1 else ''} silences nothing here: an anchor "
        "where one action was observed has Q = V already, so its Aˢ is 0 with or without the gate. "
        "Raise the gate to 3 and the two-action anchors fall silent."
    )
    code_block(
        _code(
            6,
            dataset,
            edits,
            beta=beta,
            params=dict(params),
        )
    )
    quiz()


def quiz() -> None:
    """The short quiz that closes the set."""
    st.subheader("Quiz: the whole set in four questions", divider="gray")
    for i, q in enumerate(T.QUIZ):
        ask(q, f"learn_quiz_{i}")


# ---------------------------------------------------------------- the page
def render() -> None:
    st.title("Learn: credit assignment, step by step")
    top = st.columns([4.5, 1.6], vertical_alignment="bottom")
    numbers = [ls.number for ls in V.LESSONS]
    problems: list = []
    n = top[0].radio(
        "Lesson",
        numbers,
        horizontal=True,
        key=view.field("lesson", 1, options=numbers, decode=int, problems=problems),
        format_func=lambda i: f"{i} · {V.LESSONS[i - 1].title.split(':')[0]}",
    )
    view.record("lesson")
    for p in problems:
        st.warning(md(p))
    top[1].segmented_control(
        "Figure export",
        ["svg", "png"],
        default="svg",
        key=EXPORT_KEY,
        help="format of the camera button on every chart (for slides)",
    )
    lesson = V.LESSONS[n - 1]
    st.header(f"{lesson.number}. {lesson.title}", divider="gray")
    st.markdown(lesson.text)  # math between $…$, rendered by Streamlit
    playing = False
    if n == 5:
        lesson_rare_route(lesson)
    else:
        group = viewed_group()
        GROUP.clear()
        GROUP.update(group or {})
        datasets = DATASETS | ({"group": f"This group · {group['label']}"} if group else {})
        dataset = st.radio(
            "Data",
            list(datasets),
            format_func=datasets.get,
            horizontal=True,
            key=view.field("data", "toy", options=list(datasets)),
            help="“This group” is the group the Graph page shows (its file and group are in the link)",
        )
        view.record("data")
        lessons = {
            1: lesson_grpo,
            2: lesson_anchors,
            3: lesson_visit_local,
            4: lesson_depth,
            6: lesson_combination,
        }
        playing = bool(lessons[n](lesson, dataset))
    if n < len(V.LESSONS):
        st.button(
            f"Next lesson: {n + 1} · {V.LESSONS[n].title.split(':')[0]} →",
            key="learn_next",
            on_click=_next_lesson,
            args=(n,),
            type="primary",
        )
    if n == 4:
        # The stack's keeper; while playing, the next step a second after the last, once this
        # run's drawing is on screen.
        step = f"{st.session_state.get(K_KEY)}-{st.session_state.get(view.RUN_KEY)}"
        stack_keeper("learn_graph_stack_keeper", step, st.session_state.get(PLAY_LAYER, 0), playing, _on_tick)
    if not playing:
        st.session_state.pop(PLAY_TICK, None)


render()
