"""The shared sidebar and the app-wide selection (file, group, estimator, parameters), kept in
the URL (``?file=…&group=…&estimator=…&p=…``, see `crbc_viz.ui.view`) so that a view can be
shared as a link.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from ..errors import CrbcVizError
from ..estimators import registry
from . import params as uparams
from . import pipeline, sources, view
from .files import default_sample, discover_samples
from .sources import is_upload, link_ref, resolve_ref  # noqa: F401  (re-exported)
from .text import md, md_lines, short_names

__all__ = [
    "Selection",
    "render_sidebar",
    "selection",
    "require_selection",
    "set_file",
    "set_group",
    "FILE_KEY",
    "GROUP_KEY",
    "ESTIMATOR_KEY",
    "BACKEND_KEY",
    "URL_FIELDS",
    "link_ref",
    "resolve_ref",
    "is_upload",
]

FILE_KEY = "file_ref"
GROUP_KEY = "group_pick"
ESTIMATOR_KEY = "estimator_pick"
BACKEND_KEY = "backend_pick"
#: The session-state key of the estimator's parameter panel (open: its widgets are drawn).
PARAMS_OPEN = "params_open"
#: The sidebar's URL fields (name -> session-state key of its control; None: the file and the
#: parameters, which the sidebar keeps itself), declared to `crbc_viz.ui.view.FIELDS`.
URL_FIELDS = {"file": None, "group": GROUP_KEY, "estimator": ESTIMATOR_KEY, "backend": BACKEND_KEY, "p": None}
view.declare("ui.sidebar", URL_FIELDS)
_SEL = "_selection"
BACKENDS = ("auto", "numpy", "torch", "numba")


@dataclass
class Selection:
    ref: str | None = None
    path: str | None = None  # the source's key (a file path or a store group): see ui.sources
    name: str | None = None
    digest: str | None = None
    batch: object = None
    group: int = 0
    group_label: str = ""
    estimator: str = "crbc"
    params: dict = field(default_factory=dict)
    backend: str = "auto"
    error: str | None = None
    source: sources.Source | None = None  # the checked source (None when the reference was refused)
    load_error: Exception | None = None  # why the source did not load (the error itself)
    error_box: object = None  # the sidebar's placeholder holding ``error``

    @property
    def ok(self) -> bool:
        return self.batch is not None

    def take_error(self) -> str | None:
        """``error``, for a page that says it itself: the sidebar's copy is removed, so that a
        refusal is said once."""
        if self.error_box is not None:
            self.error_box.empty()
        return self.error

    def params_of(self, name: str) -> tuple:
        """Cache key of the parameters to use for estimator ``name``."""
        return pipeline.params_key(self.params if name == self.estimator else uparams.current_params(name))

    def result(self, name: str):
        """``name``'s result on the selected group (or the message why it could not run)."""
        return pipeline.score_group(
            self.digest, self.path, self.group, name, self.params_of(name), self.backend
        )

    def graph(self):
        return pipeline.group_graph(self.digest, self.path, self.group)


def set_file(ref: str) -> None:
    """Callback-safe: choose the log file (the group and the selection reset)."""
    st.session_state[FILE_KEY] = ref
    view.clear("group", "rollout", "step", "anchor")


def set_group(label: str) -> None:
    """Callback-safe: choose a group by label (the selection resets)."""
    st.session_state[GROUP_KEY] = label
    view.clear("rollout", "step", "anchor")


def _on_group_change() -> None:
    view.clear("rollout", "step", "anchor")


def _apply_url_params(name: str, text: str | None, problems: list) -> None:
    """Parameters from the link replace the estimator's current ones."""
    _reset_params(name)
    if text:
        good, bad = uparams.params_from_url(name, text)
        uparams.set_params(name, good)
        problems.extend(bad)


def render_sidebar() -> Selection:
    """Draw the shared sidebar and return (and remember for the pages) the selection."""
    sb = st.sidebar
    sel = Selection()
    problems = st.session_state.pop("_url_problems", [])

    samples = discover_samples()
    default_ref = default_sample(samples)
    if view.is_pending("file") or (FILE_KEY not in st.session_state and view.value("file")):
        st.session_state[FILE_KEY] = view.value("file")
        view.set_value("file", view.value("file"))
    ref = st.session_state.get(FILE_KEY) or default_ref
    if ref is None:
        sel.error = "No rollout file: upload one or give a path on the Data page."
    else:
        src = None
        try:
            src = sources.resolve(ref)
        except (ValueError, CrbcVizError) as e:
            sel.error = str(e)
        if src is not None:
            sel.ref, sel.path, sel.name, sel.source = src.ref, src.key, src.name, src
            try:
                with st.spinner(f"Loading {src.name} …"):
                    sel.digest = pipeline.source_digest(src)
                    sel.batch = pipeline.load_batch(sel.digest, sel.path)
            except CrbcVizError as e:
                sel.error, sel.load_error = f"Could not load {src.name}:\n\n{e}", e
            except (ValueError, OSError) as e:  # changed since it was checked (removed, a link out)
                sel.error = f"Could not load {src.name}: {getattr(e, 'strerror', None) or e}"
    view.set_value("file", None if (sel.ref or ref) == default_ref else link_ref(sel.ref or ref))
    if sel.error:
        sel.error_box = sb.empty()
        sel.error_box.error(md_lines(sel.error))  # names from the URL and values from the log: as text

    sb.caption(f"File: `{sel.name}`" if sel.name else "No file loaded")
    if sel.ok:
        labels = sel.batch.group_labels()  # unique, computed once per batch (200k groups: fast)
        if labels:
            key = view.field("group", labels[0], options=labels, problems=problems)
            short = short_names(labels)
            sel.group_label = sb.selectbox(
                "Group",
                labels,
                key=key,
                format_func=short.__getitem__,
                on_change=_on_group_change,
                help="rollouts of one task (run / train step / group id); a long name keeps "
                "its start and its distinguishing end around …, and the chosen group's full "
                "name is shown under the box",
            )
            view.record("group")
            if short[sel.group_label] != sel.group_label:
                sb.caption(md(sel.group_label))
            sel.group = labels.index(sel.group_label)
        else:
            sel.batch = None
            sb.error("The file holds no groups.")

    names = registry.names()
    default_est = "crbc" if "crbc" in names else names[0]
    est_pending = view.is_pending("estimator")
    key = view.field("estimator", default_est, options=names, problems=problems)
    sel.estimator = sb.selectbox(
        "Estimator",
        names,
        key=key,
        format_func=lambda n: f"{n} — {registry.get(n).title}",
        help="colours the graph; the main method on every page",
    )
    view.record("estimator")
    if view.is_pending("p") or est_pending:
        _apply_url_params(sel.estimator, view.value("p"), problems)
        st.session_state.get(view._PENDING, set()).discard("p")
    sel.params = _params_panel(sb, sel.estimator)
    view.set_value("p", uparams.params_to_url(sel.estimator, sel.params) or None)
    key = view.field("backend", "auto", options=BACKENDS)
    sel.backend = sb.selectbox(
        "Backend",
        BACKENDS,
        key=key,
        help="auto (default): the fastest exact implementation each estimator "
        "has here (CUDA torch, else the compiled numba engine, else torch, "
        "else numpy); numpy: the readable reference; torch / numba: force "
        "that twin (an estimator without one says so)",
    )
    view.record("backend")
    for msg in problems:
        sb.warning(md(msg))
    st.session_state[_SEL] = sel
    return sel


def _params_panel(sb, name: str) -> dict:
    """The parameter panel of estimator ``name``; its values. The widgets are drawn only while
    the panel is open: a closed panel's widgets would be sent and drawn again on every run of
    every page (hidden, ~0.05 s of the browser's time a click, `bench/RESULTS.md`)."""
    box = sb.expander(f"Parameters of {name}", key=PARAMS_OPEN, on_change="rerun")
    if not box.open:
        return uparams.checked_params(name, container=sb)
    with box:
        params = uparams.param_widgets(name)
        st.button("Reset to defaults", key=f"reset.{name}", on_click=_reset_params, args=(name,))
    return params


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
        st.info("No rollout data loaded. Choose a sample, upload a file or give a path on the **Data** page.")
        st.stop()
    return sel
