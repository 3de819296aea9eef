"""The shared sidebar and the app-wide selection (file, group, estimator, parameters), kept in
the URL (``?file=…&group=…&estimator=…&p=…``) so that a view can be shared as a link.

Reading order on every run: the URL is read once per session (restoring the selection), the
sidebar widgets draw from session state, then the URL is rewritten from the selection.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from ..estimators import registry
from ..io import LoadError
from . import params as uparams
from . import pipeline
from .files import default_sample, discover_samples, file_ref, resolve_data_path

__all__ = ["Selection", "render_sidebar", "selection", "require_selection", "set_file", "set_group",
           "FILE_KEY", "GROUP_KEY", "ESTIMATOR_KEY", "BACKEND_KEY"]

FILE_KEY = "file_ref"
GROUP_KEY = "group_pick"
ESTIMATOR_KEY = "estimator_pick"
BACKEND_KEY = "backend_pick"
_SEL = "_selection"
BACKENDS = ("auto", "numpy", "torch", "numba")


@dataclass
class Selection:
    ref: str | None = None
    path: str | None = None
    digest: str | None = None
    batch: object = None
    group: int = 0
    group_label: str = ""
    estimator: str = "crbc"
    params: dict = field(default_factory=dict)
    backend: str = "auto"
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.batch is not None

    def params_of(self, name: str) -> tuple:
        """Cache key of the parameters to use for estimator ``name``."""
        return pipeline.params_key(self.params if name == self.estimator else uparams.current_params(name))

    def result(self, name: str):
        """``name``'s result on the selected group (or the message why it could not run)."""
        return pipeline.score_group(self.digest, self.path, self.group, name, self.params_of(name),
                                    self.backend)

    def graph(self):
        return pipeline.group_graph(self.digest, self.path, self.group)


def set_file(ref: str) -> None:
    """Callback-safe: choose the log file (the group resets to the file's first)."""
    st.session_state[FILE_KEY] = ref
    st.session_state.pop(GROUP_KEY, None)


def set_group(label: str) -> None:
    """Callback-safe: choose a group by label."""
    st.session_state[GROUP_KEY] = label


def _read_url_once() -> None:
    if st.session_state.get("_url_read"):
        return
    st.session_state["_url_read"] = True
    qp = st.query_params
    if qp.get("file"):
        st.session_state[FILE_KEY] = qp["file"]
    if qp.get("group"):
        st.session_state[GROUP_KEY] = qp["group"]
        st.session_state["_url_group"] = qp["group"]
    est = qp.get("estimator")
    if est:
        if est in registry.names():
            st.session_state[ESTIMATOR_KEY] = est
        else:
            st.session_state["_url_problems"] = [f"unknown estimator '{est}' in the link; valid: "
                                                 f"{', '.join(registry.names())}"]
    if qp.get("p") and st.session_state.get(ESTIMATOR_KEY, "crbc") in registry.names():
        name = st.session_state.get(ESTIMATOR_KEY, "crbc")
        good, problems = uparams.params_from_url(name, qp["p"])
        uparams.set_params(name, good)
        st.session_state.setdefault("_url_problems", []).extend(problems)


def _write_url(sel: Selection) -> None:
    want = {}
    if sel.ref:
        want["file"] = sel.ref
    if sel.ok:
        want["group"] = sel.group_label
    want["estimator"] = sel.estimator
    p = uparams.params_to_url(sel.estimator, sel.params)
    if p:
        want["p"] = p
    for k, v in want.items():
        if st.query_params.get(k) != v:
            st.query_params[k] = v
    if "p" not in want and "p" in st.query_params:
        del st.query_params["p"]


def render_sidebar() -> Selection:
    """Draw the shared sidebar and return (and remember for the pages) the selection."""
    _read_url_once()
    sb = st.sidebar
    sel = Selection()
    for msg in st.session_state.pop("_url_problems", []):
        sb.warning(msg)

    samples = discover_samples()
    ref = st.session_state.get(FILE_KEY) or default_sample(samples)
    if ref is None:
        sel.error = "No rollout file: upload one or give a path on the Data page."
    else:
        try:
            path = resolve_data_path(ref)
        except ValueError as e:
            sel.error = str(e)
            path = None
        if path is not None:
            sel.ref, sel.path = file_ref(path), str(path)
            stat = os.stat(path)
            sel.digest = pipeline.digest_of(sel.path, stat.st_mtime_ns, stat.st_size)
            try:
                with st.spinner(f"Loading {Path(path).name} …"):
                    sel.batch = pipeline.load_batch(sel.digest, sel.path)
            except LoadError as e:
                sel.error = f"Could not load {Path(path).name}:\n\n{e}"
    if sel.error:
        sb.error(sel.error)

    sb.caption(f"File: `{Path(sel.path).name}`" if sel.path else "No file loaded")
    if sel.ok:
        labels = [sel.batch.group_label(g) for g in range(sel.batch.num_groups)]
        url_group = st.session_state.pop("_url_group", None)
        if st.session_state.get(GROUP_KEY) not in labels:
            if url_group is not None or st.session_state.get(GROUP_KEY):
                sb.warning(f"group '{st.session_state.get(GROUP_KEY)}' is not in this file; "
                           f"showing the first group")
            st.session_state[GROUP_KEY] = labels[0] if labels else None
        if labels:
            sel.group_label = sb.selectbox("Group", labels, key=GROUP_KEY,
                                           help="rollouts of one task (run / train step / group id)")
            sel.group = labels.index(sel.group_label)
        else:
            sel.batch = None
            sb.error("The file holds no groups.")

    names = registry.names()
    if st.session_state.get(ESTIMATOR_KEY) not in names:
        st.session_state[ESTIMATOR_KEY] = "crbc" if "crbc" in names else names[0]
    sel.estimator = sb.selectbox("Estimator", names, key=ESTIMATOR_KEY,
                                 format_func=lambda n: f"{n} — {registry.get(n).title}",
                                 help="colours the graph; the main method on every page")
    with sb.expander(f"Parameters of {sel.estimator}", expanded=False):
        sel.params = uparams.param_widgets(sel.estimator)
        st.button("Reset to defaults", key=f"reset.{sel.estimator}", on_click=_reset_params,
                  args=(sel.estimator,))
    if st.session_state.get(BACKEND_KEY) not in BACKENDS:
        st.session_state[BACKEND_KEY] = "auto"
    sel.backend = sb.selectbox("Backend", BACKENDS, key=BACKEND_KEY,
                               help="auto (default): the fastest exact implementation each estimator "
                                    "has here (CUDA torch, else the compiled numba engine, else torch, "
                                    "else numpy); numpy: the readable reference; torch / numba: force "
                                    "that twin (an estimator without one says so)")
    _write_url(sel)
    st.session_state[_SEL] = sel
    return sel


def _reset_params(name: str) -> None:
    st.session_state.get("_params", {}).pop(name, None)
    for k in [k for k in st.session_state if str(k).startswith(f"param.{name}.")]:
        del st.session_state[k]


def selection() -> Selection:
    """The selection made by this run's sidebar."""
    return st.session_state.get(_SEL) or Selection(error="no selection yet")


def require_selection() -> Selection:
    """The selection, or stop the page with a pointer to the Data page when nothing is loaded."""
    sel = selection()
    if not sel.ok:
        st.info("No rollout data loaded. Choose a sample, upload a file or give a path on the "
                "**Data** page.")
        st.stop()
    return sel
