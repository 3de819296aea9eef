"""Training page: trends of a log store across training steps (success, anchor sharing,
non-zero CRBC credit, estimator disagreement) with a drill-down to one step's groups and a
button that opens a group on the Graph page. While the store changes (``crbc-viz ingest
--watch`` following a run), the page reruns itself: new train steps appear without a reload."""

import streamlit as st

from crbc_viz.ui import pipeline, sources, view
from crbc_viz.ui.links import page_script
from crbc_viz.ui.selection import row_table
from crbc_viz.ui.text import cells, md, md_lines, short_names
from crbc_viz.views.training import (
    GROUP_COLUMNS,
    METRICS,
    drill_target,
    groups_table,
    live_caption,
    point_targets,
    point_ties,
    steps_table,
    trends_figure,
)

#: This page's facts, read by the router without running the page (`crbc_viz.ui.pages.page_facts`):
#: menu order, title, icon, url path (default: the script's name), whether it has its own data
#: choice (no shared sidebar), an element that is there once it has loaded (tests wait on it), and
#: the URL fields the page keeps (name -> session-state key of its control; None: kept by the page
#: itself), which `crbc_viz.ui.view.FIELDS` reads.
PAGE = {
    "order": 6,
    "title": "Across training",
    "icon": ":material/show_chart:",
    "url_path": "training",
    "own_data": True,
    "ready": ".js-plotly-plot, [data-testid='stAlert']",
    "fields": {
        "store": None,
        "run": "training_run",
        "tstep": "training_step",
        "follow": "training_follow",
        "tgroup": "training_group",
        "truns": "training_runs",
        "metrics": "training_metrics",
        "find": "training_search",
        "traj": "training_traj",
    },
}

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
        shown = st.multiselect("Runs overlaid", runs, key=_list_field("truns", list(runs)))
        view.record("truns", encode=_LIST_SEP.join)
        steps = steps[steps["run_id"].isin([str(r) for r in shown])]
    metrics = st.multiselect(
        "Metrics", list(METRICS), format_func=lambda m: METRICS[m], key=_list_field("metrics", list(METRICS))
    )
    view.record("metrics", encode=_LIST_SEP.join)
    ts_list = sorted({int(t) for t in groups.loc[groups["run_id"] == str(run), "train_step"]})
    step_key = view.field("tstep", ts_list[-1] if ts_list else None, options=ts_list, decode=int)
    follow_key = view.field("follow", False, options=[False, True], decode=_flag, allowed="0 or 1")
    c_step, c_follow = st.columns([3, 2], vertical_alignment="bottom")
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
    drawn = tuple(dict.fromkeys(str(r) for r in steps["run_id"]))
    fig, targets, ties = _trends_view(str(store.root), store.fingerprint, drawn, tuple(metrics), pick, steps)
    run_ids = [str(r) for r in runs]
    st.plotly_chart(
        fig,
        width="stretch",
        key="training_trends",
        selection_mode="points",
        on_select=lambda: _drill_to_point(targets, ties, run_ids, run_key, step_key),
    )
    empty = [METRICS[m] for m in metrics if m in steps and steps[m].isna().all()]
    if empty:
        st.caption("Not drawn (no value in the logs): " + ", ".join(empty) + ".")
    st.caption(
        "Click a point to drill down to that run and train_step (where runs share a point, the "
        "hover names them all and the run already chosen stays chosen)."
    )
    st.caption(
        "Credit = CRBC step credit recomputed from the logs (non-zero share, mean |credit|); "
        "trainer advantage = the `advantage` field the trainer logged. Disagreement = "
        "1 − Spearman ρ between CRBC and shortest-path step credit, averaged over groups "
        "where both vary."
    )
    _drill_down(store, groups, str(run), pick, run_key, step_key)


def _drill_down(store, groups, run: str, pick, run_key, step_key) -> None:
    """The groups of the chosen run's train_step ``pick``: a table to choose one, and the link
    that opens it on the Graph page."""
    g = groups[(groups["train_step"] == pick) & (groups["run_id"] == run)].reset_index(drop=True)
    st.subheader(f"Groups of train_step {pick}")
    if g.empty:
        st.info(f"Run {run} has no groups at train_step {pick}.")
        return
    gids = [str(x) for x in g["group_id"].tolist()]
    group_key = view.field("tgroup", gids[0], options=gids)
    shown = groups_table(g)
    row_table(
        shown,
        key="training_groups",
        on_select=lambda: _pick_row("training_groups", gids, group_key),
        column_config={
            h: st.column_config.Column(h, help=tip)
            if h in ("group", "disagreement") or (h in shown and shown[h].dtype.kind not in "biuf")
            else st.column_config.NumberColumn(h, help=tip, format="%.3f" if "_" in c else None)
            for c, h, tip in GROUP_COLUMNS
        },
    )
    st.caption("Click a row to choose that group.")
    short = short_names(gids, GROUP_CHARS)
    gid = st.selectbox(
        "Group",
        gids,
        key=group_key,
        format_func=short.__getitem__,
        help="a long group id keeps its start and its distinguishing end around …; the chosen "
        "group's full id is shown under the box",
    )
    if short[gid] != gid:
        st.caption(md(gid))
    view.record("tgroup")
    link = st.container()  # filled last: the link carries the whole view, the lookup's included
    _lookup(store, run, pick, run_key, step_key)
    link.page_link(
        page_script("graph"),
        label="Open in the Graph page",
        icon=":material/hub:",
        query_params=graph_query(store.root, run, int(pick), gid),
    )


@st.cache_resource(max_entries=32, show_spinner=False)
def _trends_view(root: str, fingerprint: str, runs: tuple, metrics: tuple, pick, _steps):
    """The trends figure with its click targets, drawn once per store state (``fingerprint``
    changes with every commit: a followed store's new steps are drawn), runs shown, metrics
    and train_step marked; ``_steps`` is the store's trends of those runs. Shared, never
    changed: `st.plotly_chart` sends a copy."""
    fig = trends_figure(_steps, list(metrics), highlight=pick)
    return fig, point_targets(fig), point_ties(fig)


#: Characters of a group id the page's full-width group box shows (at 800 px) before it
#: shortens the id in the middle.
GROUP_CHARS = 60

#: Separator of a list field in the URL (``metrics=success_rate,disagreement``).
_LIST_SEP = ","


def _list_field(name: str, options: list[str]) -> str:
    """A multiselect's URL field: a comma-separated subset of ``options`` (all by default)."""
    return view.field(
        name,
        options,
        decode=lambda s: s.split(_LIST_SEP) if s else [],
        options=lambda v: set(v) <= set(options) and len(set(v)) == len(v),
        allowed="comma-separated names among: " + ", ".join(options),
    )


def graph_query(root, run: str, train_step: int, group_id: str) -> dict[str, str]:
    """The query string of the Graph page on one group of the store: this view (so Back and
    the page menu come back to it) with the file replaced and the group and the selection
    cleared (the file holds that one group). A page link carries it: the click is one history
    entry, and the Graph page finds its URL already right (`st.switch_page` would add an entry
    for the query string on this page first)."""
    q = view.nav_query()
    for name in ("group", "rollout", "step", "anchor"):
        q.pop(name, None)
    q["file"] = sources.store_group_ref(root, run, train_step, group_id)
    return dict(sorted(q.items()))


def _drill_to_point(targets, ties, runs, run_key, step_key) -> None:
    """A clicked trend point chooses its run and train_step (runs before the rerun, so the
    pickers drawn below take the new values)."""
    event = st.session_state.get("training_trends") or {}
    points = (event.get("selection") or {}).get("points") or []
    if not points:
        return
    current = st.session_state.get(run_key) if run_key is not None else None
    run, ts = drill_target(targets, points[0], ties, current=current)
    if run is not None and run_key is not None and run in runs:
        st.session_state[run_key] = run
    if ts is not None:
        st.session_state[step_key] = ts
        st.session_state[PAGE["fields"]["follow"]] = False  # the clicked step, not the newest


def _pick_row(table_key: str, values: list, target_key: str) -> None:
    """A clicked table row chooses its value in the control ``target_key``."""
    state = st.session_state.get(table_key)
    rows = state.selection.rows if state is not None else []
    if rows and 0 <= rows[0] < len(values):
        st.session_state[target_key] = values[rows[0]]


def _drill_to_row(table_key: str, rows, run_key, step_key) -> None:
    """A clicked step row chooses its run, train_step and group in the drill-down."""
    state = st.session_state.get(table_key)
    picked = state.selection.rows if state is not None else []
    if not picked or not 0 <= picked[0] < len(rows):
        return
    row = rows.iloc[picked[0]]
    if run_key is not None and "run_id" in row:
        st.session_state[run_key] = str(row["run_id"])
    if "train_step" in row:
        st.session_state[step_key] = int(row["train_step"])
        st.session_state[PAGE["fields"]["follow"]] = False
    if "group_id" in row:
        st.session_state[PAGE["fields"]["tgroup"]] = str(row["group_id"])


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


def _lookup(store, run: str, train_step: int, run_key, step_key) -> None:
    """Text search over actions and anchors (the whole store), and every step of a trajectory
    by its id at the run and train_step chosen above. A clicked row drills down to its run,
    train_step and group."""
    st.subheader("Find steps")
    c1, c2 = st.columns(2)
    text = c1.text_input(
        "Action or anchor contains",
        key=view.field("find", ""),
        help="case-insensitive substring over the whole store (every run and train step)",
    )
    view.record("find")
    traj = c2.text_input(
        "Trajectory id",
        key=view.field("traj", ""),
        help=f"exact traj_id, in run {run} at train_step {train_step} (chosen above)",
    )
    view.record("traj")
    if text:
        hits = store.search_steps(text, limit=200)
        st.caption(f"{len(hits)} step(s){' (first 200)' if len(hits) == 200 else ''}")
        hits = steps_table(hits)
        st.dataframe(
            cells(hits),
            hide_index=True,
            width="stretch",
            key="training_hits",
            selection_mode="single-row",
            on_select=lambda: _drill_to_row("training_hits", hits, run_key, step_key),
        )
    if traj:
        rows = steps_table(store.find_trajectory(traj), run=run, train_step=train_step)
        where = f"in run {run} at train_step {train_step}"
        st.caption(
            md_lines(
                f"{len(rows)} step(s) of trajectory id {traj!r} {where}"
                if len(rows)
                else f"no trajectory with id {traj!r} {where}"
            )
        )
        if len(rows):
            st.dataframe(
                cells(rows),
                hide_index=True,
                width="stretch",
                key="training_traj_rows",
                selection_mode="single-row",
                on_select=lambda: _drill_to_row("training_traj_rows", rows, run_key, step_key),
            )
        st.caption("Click a row to drill down to its run, train_step and group.")


render()
