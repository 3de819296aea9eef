"""Data page: choose a log (bundled sample, upload, or a server path under the allowed roots),
read its summary, and pick a group from a sortable table.

Uploads and server paths are read as ``crbc-viz ingest`` reads them: the importers detect the
format (canonical logs and trainers' dumps), or the Import options name it; a server path may
be an rLLM episodes folder, or a log store (opened on the Across training page). A file that
cannot be opened is said once, by the name the user knows it by, with the ``crbc-viz ingest``
command to try.
"""

import streamlit as st

from crbc_viz.ui import pipeline, view
from crbc_viz.ui.files import (
    ALLOWED_SUFFIXES,
    MAX_UPLOAD_MB,
    NO_TORCH,
    TORCH_INSTALLED,
    default_sample,
    discover_samples,
    file_ref,
    is_store_folder,
    resolve_data_source,
    roots_help,
    save_upload,
)
from crbc_viz.ui.links import page_script
from crbc_viz.ui.params import estimator_names
from crbc_viz.ui.sandbox import read_as, split_read_key
from crbc_viz.ui.sidebar import FILE_KEY, link_ref, selection, set_file, set_group
from crbc_viz.ui.sources import (
    FOLDER_FORMATS,
    FORMAT_TITLES,
    STORE_PREFIX,
    ReadOptions,
    file_part,
    ingest_command,
    is_upload,
    load_error_text,
    read_key,
)
from crbc_viz.ui.text import cells, md, md_lines
from crbc_viz.views.matching import degenerate_line, matching_line
from crbc_viz.views.training import dash_undefined
from crbc_viz.views.verify import verify_headline, verify_table

#: This page's facts, read by the router without running the page (`crbc_viz.ui.pages.page_facts`):
#: menu order, title, icon, url path (default: the script's name), whether it has its own data
#: choice (no shared sidebar), an element that is there once it has loaded (tests wait on it), and
#: the URL fields the page keeps (name -> session-state key of its control; None: kept by the page
#: itself), which `crbc_viz.ui.view.FIELDS` reads.
PAGE = {
    "order": 1,
    "title": "Data",
    "icon": ":material/dataset:",
    "ready": "[data-testid='stDataFrame']",
    "fields": {},
}

SOURCES = ("Bundled sample", "Upload", "Server path")
#: What a trainer writes that an upload may be (a folder format's folder is a server path).
TRAINER_FILES = ", ".join(t for f, t in FORMAT_TITLES.items() if f != "canonical" and f not in FOLDER_FORMATS)
#: The Import options' widgets: format, reward columns, success column, field map.
OPT_FORMAT, OPT_REWARDS, OPT_SUCCESS = "import_format", "import_rewards", "import_success"
OPT_MAP, OPT_MAP_FILE = "import_map", "import_map_file"


def _options() -> ReadOptions:
    """The Import options as set (ValueError naming a bad one)."""
    return ReadOptions.from_text(
        st.session_state.get(OPT_FORMAT) or "auto",
        st.session_state.get(OPT_REWARDS) or "",
        st.session_state.get(OPT_SUCCESS) or "",
        st.session_state.get(OPT_MAP) or "",
    )


def _on_map_file():
    """A map file (``--map-file``) loaded into the field map box, then the file read again."""
    up = st.session_state.get(OPT_MAP_FILE)
    if up is None:
        return
    data = up.getvalue()
    if len(data) > 1 << 20:
        st.session_state["data_msg"] = ("error", "Import options: a map file is at most 1 MiB")
        return
    st.session_state[OPT_MAP] = data.decode("utf-8", errors="replace")
    _on_options()


def _on_sample():
    if st.session_state.get("sample_pick"):
        set_file(st.session_state["sample_pick"])


def _on_upload():
    up = st.session_state.get("upload")
    if up is None:
        return
    try:
        ref = read_key(file_ref(save_upload(up.name, up.getvalue())), _options())
        set_file(ref)
        # Success is only claimed once the file has loaded (see `_opened`).
        st.session_state["data_upload"] = (up.name, ref)
    except ValueError as e:
        st.session_state["data_msg"] = ("error", str(e))


def _on_path():
    text = st.session_state.get("server_path", "").strip()
    st.session_state.pop("data_store", None)
    try:
        path = resolve_data_source(text)
        if is_store_folder(path):
            st.session_state["data_store"] = (text, file_ref(path))
            return
        ref = read_key(file_ref(path), _options())
        set_file(ref)
        st.session_state["data_path"] = (text, ref)
    except ValueError as e:
        st.session_state["data_msg"] = ("error", str(e))


def _open_ref() -> str | None:
    """The reference of the open file (the sidebar's choice, else its default sample)."""
    return st.session_state.get(FILE_KEY) or default_sample()


def _on_options():
    """Read the open file again with the new options (a bundled sample or a store group is
    left as it is: the options then apply to the next file opened)."""
    try:
        opts = _options()
    except ValueError as e:
        st.session_state["data_msg"] = ("error", f"Import options: {e}")
        return
    ref = _open_ref()
    if not ref or ref.startswith(STORE_PREFIX):
        return
    try:
        inner = split_read_key(ref)[0]
    except ValueError:
        return  # a malformed reference: the sidebar says why
    if is_upload(inner) or inner not in discover_samples():
        set_file(read_key(file_part(inner), opts))


def _on_table_select(table_labels):
    state = st.session_state.get("group_table")
    rows = state.selection.rows if state is not None else []
    if rows:
        set_group(table_labels[rows[0]])


def _option_widgets(sel) -> None:
    """The Import options (``crbc-viz ingest``'s ``--format``, ``--reward-columns``,
    ``--success-column``), taken from the open file's reference when first drawn."""
    if OPT_FORMAT not in st.session_state:
        opts = sel.source.options if sel.source is not None else ReadOptions()
        st.session_state[OPT_FORMAT] = opts.fmt
        st.session_state[OPT_REWARDS] = ",".join(opts.reward_columns)
        st.session_state[OPT_SUCCESS] = opts.success_column or ""
        st.session_state[OPT_MAP] = opts.field_map.replace("; ", "\n")
    changed = st.session_state[OPT_FORMAT] != "auto" or bool(
        st.session_state[OPT_REWARDS] or st.session_state[OPT_SUCCESS] or st.session_state[OPT_MAP]
    )
    with st.expander("Import options", expanded=changed):
        st.caption(
            "As `crbc-viz ingest` takes them; they apply to the open file (read again) and to the "
            "files opened next."
        )
        st.selectbox(
            "Format (--format)",
            ("auto", *FORMAT_TITLES),
            key=OPT_FORMAT,
            on_change=_on_options,
            format_func=lambda f: "auto: detect from the file's fields" if f == "auto" else FORMAT_TITLES[f],
        )
        c1, c2 = st.columns(2)
        c1.text_input(
            "Reward columns (--reward-columns)",
            key=OPT_REWARDS,
            on_change=_on_options,
            placeholder="auto: the columns that reproduce the logged advantage",
            help="TRL and ms-swift files: the reward-function columns, comma-separated",
        )
        c2.text_input(
            "Success column (--success-column)",
            key=OPT_SUCCESS,
            on_change=_on_options,
            placeholder="auto: the one 0/1 reward column",
            help="TRL and ms-swift files: the 0/1 column that is success; ART and tinker-cookbook: the metrics key",
        )
        m1, m2 = st.columns([3, 2])
        m1.text_area(
            "Field map (--map)",
            key=OPT_MAP,
            on_change=_on_options,
            placeholder="group_id=meta.task\ntraj_id=episode\nstep_idx=t\nreward=r",
            help="Any other log: target=path, one a line (a dotted path into each record; "
            "steps=turns for a list of steps per record, ^.path for the record around a step, "
            "step_idx=@order), or a map file's TOML. README: Field maps.",
        )
        m2.file_uploader("Map file (--map-file)", type=["toml"], key=OPT_MAP_FILE, on_change=_on_map_file)


def source_picker(sel) -> str:
    """Draw the source choice; return the source kind chosen."""
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
            f"A rollout log or a trainer's dump ({', '.join(ALLOWED_SUFFIXES)}; ≤ {MAX_UPLOAD_MB} MB)",
            key="upload",
            on_change=_on_upload,
            type=sorted({s.rsplit('.', 1)[-1] for s in ALLOWED_SUFFIXES}),
            help=f"a canonical log, or a file a trainer wrote: {TRAINER_FILES} (an rLLM episodes "
            "folder: give it as a server path)",
        )
        if not TORCH_INSTALLED:
            st.caption(NO_TORCH)
        _option_widgets(sel)
    else:
        st.text_input(
            "Path on the server (a file, an rLLM episodes folder or a log store)",
            key="server_path",
            on_change=_on_path,
            placeholder="/data/rollouts/run1.jsonl.gz",
            help="allowed folders: " + roots_help(),
        )
        st.button("Open", on_click=_on_path)
        _option_widgets(sel)
        store = st.session_state.get("data_store")
        if store and store[0] == st.session_state.get("server_path", "").strip():
            st.info(f"{md(store[0])} is a log store: its runs are shown on the Across training page.")
            st.page_link(
                page_script("training"),
                label="Open this store on Across training",
                icon=":material/show_chart:",
                query_params={**view.nav_query(), "store": store[1]},
            )
    msg = st.session_state.pop("data_msg", None)
    if msg:
        getattr(st, msg[0])(md_lines(msg[1]))  # paths and names typed or uploaded: as text
    return src


def _problems_text(err: Exception) -> str:
    """A load error as said on the page: one problem on one line, several one per line."""
    text = load_error_text(err)
    return md_lines(text) if "\n" in text else md(text)


def _refusal(sel) -> None:
    """Say once why the open file did not load: by the name the user knows it by, with the
    ``crbc-viz ingest`` command to try."""
    if sel.source is None or sel.load_error is None:  # the reference was refused: the sidebar says why
        st.info("No data loaded. Choose a sample, upload a file or give a path on the server above.")
        return
    sel.take_error()
    upload = is_upload(sel.ref)
    what = f"The upload {md(sel.name)}" if upload else md(sel.source.file)
    st.error(f"{what} could not be opened: {_problems_text(sel.load_error)}")
    shown = sel.name if upload else sel.source.file
    st.caption(
        "From the command line, into a log store (the Across training page opens it; "
        "`crbc-viz info --store crbc-store` lists what was read):"
    )
    st.code(ingest_command(shown, sel.source.options), language="bash")


def _opened(sel, kind: str, opened) -> None:
    """The outcome of the upload or server path just opened, once it has loaded."""
    name, ref = opened
    if sel.ref != ref or not sel.ok:
        return
    how = read_as(sel.batch)
    as_what = f", read as {how.title}" if how is not None else ""
    if kind == "upload":
        st.success(
            f"Opened the upload {md(name)}: {sel.batch.num_groups} group(s){as_what}. Its link names "
            f"it by content (`{md(link_ref(ref))}`) and works on this server only."
        )
    else:
        st.success(f"Opened {md(name)}: {sel.batch.num_groups} group(s){as_what}.")


def _read_as(sel) -> None:
    """How the open file was read (the importer, detected or chosen) and the importer's notes."""
    how = read_as(sel.batch)
    if how is None:
        return
    why = "detected from its fields" if how.detected else "chosen in Import options"
    st.markdown(f"Read as: **{md(how.title)}** ({why})")
    for note in how.notes:
        st.caption(md(note))


def _matching(sel) -> None:
    """How well the file's steps merged into anchors, and the groups whose credit is
    degenerate for a reason the data explains."""
    summary, _ = pipeline.matching(sel.digest, sel.path)
    st.caption("Matching: " + md(matching_line(summary)))
    deg = degenerate_line(summary["degenerate_groups"])
    if deg:
        st.caption(md(deg) + " (the Graph page says why for each)")


def _logged_vs_recomputed(sel) -> None:
    """For a file that carries the trainer's own advantage: that advantage against its
    estimator recomputed on the same rollouts (``crbc-viz verify``), disagreeing groups first."""
    out = pipeline.verification(sel.digest, sel.path)
    if out is None:
        return
    with st.expander("Logged vs recomputed advantage", expanded=not isinstance(out, str) and not out[0].ok):
        if isinstance(out, str):
            st.caption("The file carries the trainer's advantage, but it cannot be recomputed: " + md(out))
            return
        v, what = out
        (st.success if v.ok else st.warning)(md(verify_headline(v, what)))
        for note in v.notes:
            st.caption(md(note))
        st.dataframe(cells(verify_table(v)), hide_index=True, width="stretch", key="verify_table")
        st.caption(
            "The same check on the command line, per train step: `crbc-viz verify FILE` (docs/verify.md)."
        )


def _metrics(summary: dict) -> None:
    """The log's counts and rates, one row of metrics."""
    # One row that wraps (at 800 px the seven would not fit side by side: values were cut).
    row = st.container(horizontal=True, gap="medium")
    row.metric("Groups", summary["groups"], width="content")
    row.metric("Rollouts", summary["trajectories"], width="content")
    row.metric("Steps", summary["steps"], width="content")
    row.metric("Anchors", summary["anchors"], width="content")
    row.metric("Success rate", f"{summary['success_rate']:.1%}", width="content")
    row.metric(
        "Shared steps",
        f"{summary['shared_step_fraction']:.1%}",
        help="steps whose anchor is also visited by another rollout of the group",
        width="content",
    )
    row.metric(
        "Singleton anchors",
        f"{summary['singleton_anchor_fraction']:.1%}",
        help="anchors visited once: no cross-rollout information there",
        width="content",
    )


def render() -> None:
    st.title("Rollout data")
    sel = selection()
    kind = source_picker(sel)
    opened = [(k, st.session_state.pop(f"data_{k}", None)) for k in ("upload", "path")]
    if kind == "Upload" and st.session_state.get("upload") is None:
        st.info(
            f"Choose a file to upload: a canonical rollout log, or the file a trainer wrote "
            f"({TRAINER_FILES}). Its format is detected from its fields."
        )
        return
    if not sel.ok:
        _refusal(sel)
        return
    for k, pending in opened:
        if pending:
            _opened(sel, k, pending)
    names = estimator_names()
    a, b = ("crbc", "shortest_path") if {"crbc", "shortest_path"} <= set(names) else (names[0], names[-1])
    with st.spinner("Scoring every group …"):
        summary, table = pipeline.overview(
            sel.digest, sel.path, a, sel.params_of(a), b, sel.params_of(b), sel.backend
        )
    _metrics(summary)
    _read_as(sel)
    _matching(sel)
    _logged_vs_recomputed(sel)
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
    # either; both read "—", and their tooltips say why (a table would write "None").
    undefined = shown["disagreement"].isna()
    shown["disagreement"] = dash_undefined(shown["disagreement"])
    shown["sign_agreement"] = dash_undefined(shown["sign_agreement"].mask(undefined))
    why = (
        f"— = undefined: in this group one of the two credits ({a}, {b}) is constant (e.g. every "
        f"rollout failed) or not given (the estimator could not run), so there is no ranking to compare"
    )
    st.dataframe(
        cells(shown),
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
            "disagreement": st.column_config.TextColumn(
                "disagreement", help=f"1 − Spearman ρ of the two credits (0 … 2). {why}"
            ),
            "sign_agreement": st.column_config.TextColumn(
                "sign agreement", help=f"fraction of steps whose credits have the same sign. {why}"
            ),
        },
    )
    if undefined.any():
        st.caption(
            f"— (undefined): in {int(undefined.sum())} group(s) one of the "
            f"two credits is constant (e.g. every rollout failed) or not given, so there is no ranking "
            f"to compare."
        )
    st.markdown(f"Selected: **{md(sel.group_label)}**")
    row = pipeline.group_matching_row(sel.digest, sel.path, sel.group)
    if row["sentence"]:
        st.warning(md(row["sentence"]))
    # One row that wraps (no fixed thirds): each link keeps its whole label at any width.
    c1 = c2 = c3 = st.container(horizontal=True, gap="medium")
    q = view.nav_query() or None
    c1.page_link(page_script("graph"), label="Open its graph", icon=":material/hub:", query_params=q)
    c2.page_link(
        page_script("trajectories"),
        label="Read its trajectories (why rollouts failed)",
        icon=":material/timeline:",
        query_params=q,
    )
    c3.page_link(
        page_script("compare"), label="Compare estimators", icon=":material/compare_arrows:", query_params=q
    )


render()
