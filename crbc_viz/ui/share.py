"""The Graph page's "Download this view as HTML": the selected group under the selected
estimator and its parameters, as the self-contained page ``crbc-viz html`` writes
(`crbc_viz.views.share`), built only when the button is clicked."""

from __future__ import annotations

import os
import re

import streamlit as st

from ..views.share import share
from . import pipeline
from .sandbox import read_as

__all__ = ["download_view_button", "view_page"]


def view_page(sel) -> str:
    """The shared page of ``sel``'s group, estimator, parameters and backend, with the source's
    name, how it was read, and (a file) its SHA-256."""
    src = sel.source
    how = read_as(sel.batch)
    sha = None
    if src is not None and not src.is_store and os.path.isfile(src.file):
        sha = pipeline.digest_of(src.file, *src.stamp)
    view = share(
        sel.batch,
        sel.group_label,
        (sel.estimator,),
        params={sel.estimator: dict(sel.params)},
        backend=sel.backend,
        file_name=sel.name or "",
        read_as=(
            f"{how.title} ({'detected' if how.detected else 'chosen'})"
            if how is not None
            else "a group of a log store"
            if src is not None and src.is_store
            else ""
        ),
        notes=how.notes if how is not None else (),
        sha256=sha,
    )
    return view.page()


def download_view_button(sel, where=st) -> None:
    """The download button (disabled, saying why, when the estimator cannot run on the group)."""
    res = sel.result(sel.estimator)
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"crbc-viz_{sel.group_label}_{sel.estimator}")[:120]
    where.download_button(
        "Download this view as HTML",
        data=lambda: view_page(sel),
        file_name=f"{name}.html",
        mime="text/html",
        icon=":material/download:",
        on_click="ignore",
        disabled=isinstance(res, str),
        help=(
            f"{sel.estimator} cannot run on this group"
            if isinstance(res, str)
            else "one self-contained file: this group's graph, its rollouts with per-step credit "
            "and where the data came from; it opens offline (also: `crbc-viz html`)"
        ),
        key="graph_download_html",
    )
