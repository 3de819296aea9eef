"""Estimators page: a table of contents, then one card per registered estimator, generated
from the registry (the same text as the project's ``docs/estimators.md``)."""

import streamlit as st

from crbc_viz.ui.files import REPO_ROOT
from crbc_viz.views.reference import (
    anchor_of,
    edge_cases,
    estimators_markdown,
    params_table,
    source_of,
    spec_backends,
    specs,
)

#: This page's facts, read by the router without running the page (`crbc_viz.ui.pages.page_facts`):
#: menu order, title, icon, url path (default: the script's name), whether it has its own data
#: choice (no shared sidebar), an element that is there once it has loaded (tests wait on it), and
#: the URL fields the page keeps (name -> session-state key of its control; None: kept by the page
#: itself), which `crbc_viz.ui.view.FIELDS` reads.
PAGE = {
    "order": 5,
    "title": "Estimators",
    "icon": ":material/menu_book:",
    "ready": "[data-testid='stDataFrame']",
    "fields": {},
}


def card(spec) -> None:
    with st.container(border=True):
        st.subheader(spec.title, anchor=anchor_of(spec.title))
        st.markdown(
            f"`{spec.name}` · spec section {spec.section} · backends: {', '.join(spec_backends(spec))}"
        )
        st.markdown(f"**Paper:** {spec.paper}")
        st.code(spec.equation, language=None, wrap_lines=True)
        st.markdown("**Parameters**")
        st.dataframe(params_table(spec), hide_index=True, width="stretch")
        st.markdown(
            "**Needs logged fields:** "
            + (
                ", ".join(f"`{f}`" for f in spec.requires)
                if spec.requires
                else "none beyond the schema's required fields and the anchors"
            )
        )
        notes = edge_cases(spec.fn)
        if notes:
            st.markdown(f"**Edge cases:** {notes}")
        with st.expander("Source"):
            code, why = source_of(spec)
            if code is None:
                st.caption(f"source unavailable: {why}")
            else:
                st.code(code, language="python")


def render() -> None:
    st.title("Estimators")
    all_specs = specs()
    st.caption(
        f"{len(all_specs)} registered estimators, in registry order. Parameters, defaults and "
        f"bounds come from each estimator's params dataclass."
    )
    docs = REPO_ROOT / "docs"
    st.markdown(
        "The same reference is in the project as `docs/estimators.md` (with how to read "
        "credit, value and advantage), and the log format in `docs/schema.md`."
    )
    c1, c2 = st.columns(2)
    c1.download_button(
        "Download estimators.md",
        estimators_markdown(),
        file_name="estimators.md",
        mime="text/markdown",
        key="est_doc",
    )
    if (docs / "schema.md").is_file():
        c2.download_button(
            "Download schema.md",
            (docs / "schema.md").read_text(encoding="utf-8"),
            file_name="schema.md",
            mime="text/markdown",
            key="schema_doc",
        )
    with st.container(border=True):
        st.markdown(
            "**Contents**\n\n"
            + "\n".join(f"- [{s.title}](#{anchor_of(s.title)}) (`{s.name}`)" for s in all_specs)
        )
    for spec in all_specs:
        card(spec)


render()
