"""Data page: choose a log (bundled sample, upload, or a server path under the allowed roots),
read its summary, and pick a group from a sortable table."""

import streamlit as st

from crbc_viz.ui import pipeline, view
from crbc_viz.ui.files import (
    ALLOWED_SUFFIXES,
    MAX_UPLOAD_MB,
    allowed_roots,
    discover_samples,
    file_ref,
    resolve_data_path,
    save_upload,
)
from crbc_viz.ui.params import estimator_names
from crbc_viz.ui.sidebar import link_ref, selection, set_file, set_group
from crbc_viz.ui.text import cells, md, md_lines

SOURCES = ("Bundled sample", "Upload", "Server path")


def _on_sample():
    if st.session_state.get("sample_pick"):
        set_file(st.session_state["sample_pick"])


def _on_upload():
    up = st.session_state.get("upload")
    if up is None:
        return
    try:
        ref = file_ref(save_upload(up.name, up.getvalue()))
        set_file(ref)
        # Success is only claimed once the file has loaded (see `_upload_outcome`).
        st.session_state["data_upload"] = (up.name, ref)
    except ValueError as e:
        st.session_state["data_msg"] = ("error", str(e))


def _upload_outcome(sel) -> None:
    pending = st.session_state.pop("data_upload", None)
    if pending is None:
        return
    name, ref = pending
    if sel.ref == ref and sel.ok:
        st.success(
            f"Opened the upload {md(name)}: {sel.batch.num_groups} group(s). Its link names "
            f"it by content (`{md(link_ref(ref))}`) and works on this server only."
        )
    else:
        st.error(f"The upload {md(name)} could not be opened: {md(sel.error or 'unknown error')}")


def _on_path():
    text = st.session_state.get("server_path", "").strip()
    try:
        set_file(file_ref(resolve_data_path(text)))
        st.session_state["data_msg"] = ("success", f"Opened {text}")
    except ValueError as e:
        st.session_state["data_msg"] = ("error", str(e))


def _on_table_select(table_labels):
    state = st.session_state.get("group_table")
    rows = state.selection.rows if state is not None else []
    if rows:
        set_group(table_labels[rows[0]])


def source_picker(sel) -> None:
    src = st.radio("Source", SOURCES, horizontal=True, key="data_source", label_visibility="collapsed")
    if src == "Bundled sample":
        samples = discover_samples()
        if not samples:
            st.warning("No bundled samples under sample_rollouts/.")
        else:
            # The picker shows the open file when it is a sample, else nothing (so every
            # sample, the default one included, can be chosen).
            st.session_state["sample_pick"] = sel.ref if sel.ref in samples else None
            st.selectbox(
                "Sample",
                samples,
                key="sample_pick",
                on_change=_on_sample,
                index=None,
                placeholder="(the open file is not a bundled sample)",
                help="logs bundled with the repository (sample_rollouts/)",
            )
    elif src == "Upload":
        st.file_uploader(
            f"Rollout log ({', '.join(ALLOWED_SUFFIXES)}; ≤ {MAX_UPLOAD_MB} MB)",
            key="upload",
            on_change=_on_upload,
            type=sorted({s.rsplit('.', 1)[-1] for s in ALLOWED_SUFFIXES}),
        )
    else:
        st.text_input(
            "Path on the server",
            key="server_path",
            on_change=_on_path,
            placeholder="/data/rollouts/run1.jsonl.gz",
            help="allowed folders: "
            + ", ".join(str(r) for r in allowed_roots())
            + " (extend with CRBC_VIZ_DATA_ROOTS)",
        )
        st.button("Open", on_click=_on_path)
    msg = st.session_state.pop("data_msg", None)
    if msg:
        getattr(st, msg[0])(md_lines(msg[1]))  # paths and names typed or uploaded: as text


def render() -> None:
    st.title("Rollout data")
    sel = selection()
    source_picker(sel)
    _upload_outcome(sel)
    if not sel.ok:
        st.info(md_lines(sel.error or "No data loaded."))
        return
    names = estimator_names()
    a, b = ("crbc", "shortest_path") if {"crbc", "shortest_path"} <= set(names) else (names[0], names[-1])
    with st.spinner("Scoring every group …"):
        summary, table = pipeline.overview(
            sel.digest, sel.path, a, sel.params_of(a), b, sel.params_of(b), sel.backend
        )
    cols = st.columns(7)
    cols[0].metric("Groups", summary["groups"])
    cols[1].metric("Rollouts", summary["trajectories"])
    cols[2].metric("Steps", summary["steps"])
    cols[3].metric("Anchors", summary["anchors"])
    cols[4].metric("Success rate", f"{summary['success_rate']:.1%}")
    cols[5].metric(
        "Shared steps",
        f"{summary['shared_step_fraction']:.1%}",
        help="steps whose anchor is also visited by another rollout of the group",
    )
    cols[6].metric(
        "Singleton anchors",
        f"{summary['singleton_anchor_fraction']:.1%}",
        help="anchors visited once: no cross-rollout information there",
    )
    for w in summary["warnings"]:
        st.warning(md(w))
    if summary["skipped"]:
        st.warning(f"{summary['skipped']} rows were skipped while loading")

    st.subheader("Groups")
    st.caption(
        f"Click a row to open that group (or use the sidebar). **disagreement** = 1 − "
        f"Spearman ρ between the step credits of `{a}` and `{b}` in the group "
        f"(0 = same ranking, 2 = reversed); **sign agreement** = fraction of steps whose "
        f"credits have the same sign. Click a header to sort."
    )
    shown = table.drop(columns=["group_index", "run_id", "train_step", "group_id"]).copy()
    # Where ρ is undefined (a constant credit: nothing to rank), sign agreement means nothing
    # either; both read "undefined" (the numbers stay sortable underneath).
    shown.loc[shown["disagreement"].isna(), "sign_agreement"] = float("nan")
    styled = cells(shown)
    if styled.size <= 262_144:  # pandas Styler's cell limit: 200k groups are shown unstyled
        styled = styled.style.format(
            {"disagreement": "{:.3f}", "sign_agreement": "{:.1%}"}, na_rep="undefined"
        )
    st.dataframe(
        styled,
        key="group_table",
        on_select=lambda: _on_table_select(list(table["group"])),
        selection_mode="single-row",
        hide_index=True,
        width="stretch",
        column_config={
            "success_rate": st.column_config.ProgressColumn(
                "success rate", min_value=0.0, max_value=1.0, format="percent"
            ),
            "shared_step_fraction": st.column_config.NumberColumn("shared steps", format="percent"),
            "disagreement": st.column_config.Column("disagreement"),
            "sign_agreement": st.column_config.Column("sign agreement"),
        },
    )
    if shown["disagreement"].isna().any():
        st.caption(
            f"undefined: in {int(shown['disagreement'].isna().sum())} group(s) one of the "
            f"two credits is constant (e.g. every rollout failed), so there is no ranking "
            f"to compare."
        )
    st.markdown(f"Selected: **{md(sel.group_label)}**")
    c1, c2, c3 = st.columns(3)
    q = view.nav_query() or None
    c1.page_link("app_pages/graph.py", label="Open its graph", icon=":material/hub:", query_params=q)
    c2.page_link(
        "app_pages/trajectories.py",
        label="Read its trajectories (why rollouts failed)",
        icon=":material/timeline:",
        query_params=q,
    )
    c3.page_link(
        "app_pages/compare.py", label="Compare estimators", icon=":material/compare_arrows:", query_params=q
    )


render()
