"""The Graph page's anchor-rule panel: choose how anchors are matched (exact, fields, drop,
rtmc, similar, tfidf; README "Anchor rules"), see the merge before it is applied — anchors,
steps at shared anchors and singleton rate before and after, how many anchors merged and the
step whose credit changes most, the numbers ``crbc-viz info --anchor-rule`` prints — and draw
the graph under it. Every value is a field of the view's link (`crbc_viz.ui.view`)."""

from __future__ import annotations

import dataclasses
import json

import streamlit as st

from ..views.anchor_rules import (
    DEFAULT_THRESHOLD,
    RULE_HELP,
    RULE_NAMES,
    change_sentence,
    cli_options,
    cross_task_sentence,
    merged_sentence,
    preview_table,
    ruled_digest,
    spec_of,
)
from . import pipeline, view
from .text import cells, md

__all__ = ["anchor_rule_panel"]

_SCOPES = ["group", "batch"]
_CLUSTERS = ["greedy", "components"]
_BOOL = {"True": True, "False": False}


def _rule_controls(problems: list) -> tuple[dict | None, bool]:
    """The panel's widgets: (the rule's `make_rule` keywords or None for exact, apply it)."""
    c1, c2, c3, c4 = st.columns([1.3, 2.2, 1.3, 1.6])
    name = c1.selectbox(
        "Anchor rule",
        list(RULE_NAMES),
        key=view.field("arule", "exact", options=list(RULE_NAMES), problems=problems),
        help="; ".join(f"{n}: {h}" for n, h in RULE_HELP.items()),
    )
    view.record("arule")
    kw: dict = {}
    if name == "fields":
        kw["fields"] = c2.text_input(
            "Fields kept (a,b.c)",
            key=view.field("afields", "", problems=problems),
            help="object anchors are keyed by these fields only; a dotted path reaches into nested objects",
        )
        view.record("afields")
    elif name == "drop":
        kw["drop"] = c2.text_input(
            "Pattern removed (regex)",
            key=view.field("adrop", r"\s*session=\w+", problems=problems),
            help="every match is removed from text anchors before they are compared",
        )
        view.record("adrop")
    elif name in DEFAULT_THRESHOLD:
        kw["threshold"] = float(
            c2.number_input(
                "Threshold",
                min_value=0.01,
                max_value=1.0,
                step=0.01,
                format="%.2f",
                key=view.field(
                    "athr",
                    DEFAULT_THRESHOLD[name],
                    decode=float,
                    options=lambda v: 0.01 <= v <= 1.0,
                    allowed="numbers 0.01 … 1",
                    problems=problems,
                ),
                help="difflib ratio (similar, below 1) or TF-IDF cosine (tfidf) two anchors need to merge",
            )
        )
        view.record("athr")
        kw["cluster"] = c3.selectbox(
            "Clusters",
            _CLUSTERS,
            key=view.field("aclust", "greedy", options=_CLUSTERS, problems=problems),
            help="greedy: an anchor joins the first similar representative (GiGPO's); "
            "components: chains of similar anchors merge",
        )
        view.record("aclust")
        kw["scope"] = c4.selectbox(
            "Compare within",
            _SCOPES,
            key=view.field("ascope", "group", options=_SCOPES, problems=problems),
            help="group: each task's anchors on their own (the default); batch: across tasks "
            "(warns naming the tasks whose anchors share a key)",
        )
        view.record("ascope")
    apply = st.toggle(
        "Draw the graph under this rule",
        key=view.field("aapply", False, options=[True, False], decode=_BOOL.get, problems=problems),
        disabled=name == "exact",
        help="the graph, its colours and the matching line below use the rule's anchors",
    )
    view.record("aapply")
    return spec_of(name, **kw), bool(apply) and name != "exact"


def _preview(sel, spec: dict) -> bool:
    """Draw the preview of ``spec``; False when the rule cannot be applied (its error shown)."""
    rep = pipeline.anchor_preview(sel.digest, sel.path, json.dumps(spec, sort_keys=True))
    if "error" in rep:
        st.error(md(rep["error"]))
        return False
    left, right = st.columns([2, 3])
    left.dataframe(cells(preview_table(rep)), hide_index=True, width="stretch")
    right.markdown(md(merged_sentence(rep)))
    change = change_sentence(rep)
    right.markdown(md(change) if change else "No step's credit changes.")
    right.caption(
        f"Whole file, {rep['estimator']} credit; the same as `crbc-viz info FILE {cli_options(spec)}`"
    )
    note = cross_task_sentence(rep)
    if note:
        (st.warning if rep.get("scope") == "batch" else st.info)(md(note[0].upper() + note[1:]))
    return True


def anchor_rule_panel(sel):
    """Draw the panel; return ``sel`` itself, or (the rule applied) a copy whose batch, graph
    and results are keyed by the rule (`crbc_viz.views.anchor_rules.ruled_digest`)."""
    problems: list = []
    chosen = view.value("arule") not in (None, "exact")
    with st.expander("Anchor rule: how states are matched", expanded=chosen):
        spec, apply = _rule_controls(problems)
        for p in problems:
            st.warning(md(p))
        if spec is None:
            st.caption("exact: two steps share an anchor when their logged anchors are equal.")
            return sel
        if not _preview(sel, spec):
            return sel
    if not apply:
        return sel
    st.caption(f"Anchors matched by the rule: {md(cli_options(spec))}")
    return dataclasses.replace(sel, digest=ruled_digest(sel.digest, spec))
