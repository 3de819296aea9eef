"""Training page: trends of a log store across training steps (success, anchor sharing,
non-zero CRBC credit, estimator disagreement) with a drill-down to one step's groups and a
button that opens a group on the Graph page. While the store changes (``crbc-viz ingest
--watch`` following a run), the page reruns itself: new train steps appear without a reload."""

import streamlit as st

from crbc_viz.ui import pipeline, sources, view
from crbc_viz.ui.sidebar import set_file, set_group
from crbc_viz.ui.text import cells, md_lines
from crbc_viz.views.training import METRICS, drill_target, live_caption, point_targets, trends_figure

#: Seconds between two looks at the store's manifests (a listing; the page reruns on a change).
LIVE_EVERY_S = 3


def render() -> None:
    st.title("Across training")
    default = sources.default_store(st.query_params.get("store"))
    store_dir = st.text_input(
        "Log store folder",
        value=default,
        key="training_store",
        help="a folder made by `crbc-viz ingest LOG... --store DIR`",
    )
    if not store_dir:
        st.info("Give the folder of a log store (`python -m crbc_viz ingest LOG... --store DIR`).")
        return
    try:
        # Listed before the store is read: a change after this reruns the page.
        live = sources.store_state(store_dir)
    except ValueError:
        live = None  # open_store says why, below
    try:
        store = sources.open_store(store_dir)  # confined to the allowed data folders
    except ValueError as e:  # StoreError is one
        st.error(md_lines(e))  # the folder comes from the URL (?store=): shown as text
        return
    view.set_value("store", None if store_dir == sources.BUNDLED_STORE else store_dir)
    info = store.summary()
    if live is not None:
        _follow(store_dir, live["signature"], info["incomplete_sources"])
    if not info["steps"]:
        st.warning("The store holds no steps yet.")
        return
    runs = info["runs"]
    run_key = None
    if len(runs) > 1:
        run_key = view.field("run", runs[0], options=list(runs))
        run = st.selectbox("Run to drill down", runs, key=run_key)
        view.record("run")
    else:
        run = runs[0]
    steps, groups = pipeline.store_trends(str(store.root), store.fingerprint)  # every run, overlaid
    per_run = groups.groupby("run_id")["train_step"].nunique()
    counts = (
        f"{len(per_run)} run(s) × {int(per_run.iloc[0])} training steps"
        if per_run.nunique() <= 1 and len(per_run)
        else "training steps per run: " + ", ".join(f"{r}: {int(n)}" for r, n in per_run.items())
    )
    st.caption(
        f"{info['steps']:,} steps · {counts} · "
        f"{info['sources']} source file(s) · formats: {', '.join(info['formats'])}"
    )
    if len(runs) > 1:
        shown = st.multiselect("Runs overlaid", runs, default=runs, key="training_runs")
        steps = steps[steps["run_id"].isin([str(r) for r in shown])]
    metrics = st.multiselect(
        "Metrics",
        list(METRICS),
        default=list(METRICS),
        format_func=lambda m: METRICS[m],
        key="training_metrics",
    )
    ts_list = sorted({int(t) for t in groups.loc[groups["run_id"] == str(run), "train_step"]})
    step_key = view.field("tstep", ts_list[-1] if ts_list else None, options=ts_list, decode=int)
    follow_key = view.field("follow", False, options=[False, True], decode=_flag, allowed="0 or 1")
    c_step, c_follow = st.columns([3, 1], vertical_alignment="bottom")
    follow = c_follow.toggle(
        "Follow latest",
        key=follow_key,
        help="keep the drill-down on the newest train step as steps land (a click on a trend "
        "point stops following)",
    )
    view.record("follow", encode=lambda v: "1" if v else "0")
    if follow and ts_list:
        st.session_state[step_key] = ts_list[-1]
    pick = c_step.selectbox("Drill down to train_step", ts_list, key=step_key, disabled=follow)
    view.record("tstep")
    fig = trends_figure(steps, metrics, highlight=pick)
    targets, run_ids = point_targets(fig), [str(r) for r in runs]
    st.plotly_chart(
        fig,
        width="stretch",
        key="training_trends",
        selection_mode="points",
        on_select=lambda: _drill_to_point(targets, run_ids, run_key, step_key),
    )
    st.caption("Click a point to drill down to that run and train_step.")
    st.caption(
        "Credit = CRBC step credit recomputed from the logs (non-zero share, mean |credit|); "
        "trainer advantage = the `advantage` field the trainer logged. Disagreement = "
        "1 − Spearman ρ between CRBC and shortest-path step credit, averaged over groups "
        "where both vary."
    )
    g = groups[(groups["train_step"] == pick) & (groups["run_id"] == str(run))].reset_index(drop=True)
    st.subheader(f"Groups of train_step {pick}")
    st.dataframe(cells(g), hide_index=True, width="stretch")
    if g.empty:
        return
    gid = st.selectbox("Group", g["group_id"].tolist(), key="training_group")
    if st.button("Open in the Graph page", key="training_open", type="primary"):
        ref = sources.store_group_ref(store.root, str(run), int(pick), str(gid))
        label = f"{run}/{pick}/{gid}"
        set_file(ref)
        set_group(label)
        st.query_params.update({"file": ref, "group": label})
        st.switch_page("app_pages/graph.py")
    _lookup(store)


def _drill_to_point(targets, runs, run_key, step_key) -> None:
    """A clicked trend point chooses its run and train_step (runs before the rerun, so the
    pickers drawn below take the new values)."""
    event = st.session_state.get("training_trends") or {}
    points = (event.get("selection") or {}).get("points") or []
    if not points:
        return
    run, ts = drill_target(targets, points[0])
    if run is not None and run_key is not None and run in runs:
        st.session_state[run_key] = run
    if ts is not None:
        st.session_state[step_key] = ts
        st.session_state[view.FIELDS["follow"]] = False  # the clicked step, not the newest


def _flag(text: str) -> bool:
    """``1`` / ``0`` in the URL."""
    if text not in ("0", "1"):
        raise ValueError(text)
    return text == "1"


@st.fragment(run_every=LIVE_EVERY_S)
def _follow(store_dir: str, shown: str, incomplete: int) -> None:
    """Every few seconds, one listing of the store's manifests: when it differs from the one
    the page was drawn from, the whole page reruns (trends, drill-down choices; the view in
    the URL is kept); otherwise only this line is redrawn (when the store last changed, how
    many sources are still being written)."""
    try:
        state = sources.store_state(store_dir)
    except ValueError as e:  # the folder went away, or out of the allowed ones
        st.caption(md_lines(f"Not following the store: {e}"))
        return
    if state["signature"] != shown:
        st.rerun()
    st.caption(md_lines(live_caption(state, incomplete)))


def _lookup(store) -> None:
    """Text search over actions and anchors, and every step of a trajectory by its id."""
    st.subheader("Find steps")
    c1, c2 = st.columns(2)
    text = c1.text_input(
        "Action or anchor contains",
        key="training_search",
        help="case-insensitive substring over the whole store",
    )
    traj = c2.text_input("Trajectory id", key="training_traj", help="exact traj_id (any run, step, group)")
    if text:
        hits = store.search_steps(text, limit=200)
        st.caption(f"{len(hits)} step(s){' (first 200)' if len(hits) == 200 else ''}")
        st.dataframe(cells(hits.astype(str)), hide_index=True, width="stretch")
    if traj:
        rows = store.find_trajectory(traj)
        st.caption(
            f"{len(rows)} step(s) of trajectory id {traj!r}"
            if len(rows)
            else f"no trajectory with id {traj!r}"
        )
        if len(rows):
            st.dataframe(cells(rows.astype(str)), hide_index=True, width="stretch")


render()
