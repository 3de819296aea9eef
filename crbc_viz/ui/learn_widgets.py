"""The Learn page's widgets that hold no lesson of their own: the projector flag, a table that
becomes a large plain table on a projector, a predict-then-reveal question and a lesson's code
block, and a graph drawn in two stacked frames."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..views import learn as V
from . import view

__all__ = ["projector", "table", "ask", "code_block", "graph_stack"]


def projector() -> bool:
    """Whether the view is in projector mode (the app's sidebar toggle, kept in the URL)."""
    return bool(st.session_state.get(view.OWN_FIELDS["projector"], False))


def table(df: pd.DataFrame, key: str, formats: dict[str, str] | None = None, height=None) -> None:
    """A table: interactive (``st.dataframe``, number ``formats`` as printf strings) or, in
    projector mode, a plain HTML table whose text the page's CSS makes large."""
    formats = formats or {}
    if projector():
        text = {
            c: (lambda v: f"{v:.0%}") if f == "percent" else (lambda v, f=f: f % v)
            for c, f in formats.items()
        }
        text |= {c: (lambda v: "yes" if v else "no") for c in df.columns if df[c].dtype == bool}
        st.table(df.style.format({c: f for c, f in text.items() if c in df.columns}), hide_index=True)
        return
    st.dataframe(
        df,
        hide_index=True,
        key=key,
        height=height if height is not None else "auto",
        column_config={
            c: st.column_config.NumberColumn(format="percent" if f == "percent" else f)
            for c, f in formats.items()
        },
    )


def ask(pred, key: str) -> str | None:
    """Predict, then reveal: the lesson's question (no answer chosen at first); once answered,
    whether it was right and why. The key carries the options, so new data asks afresh."""
    key = V.prediction_key(pred, key)
    with st.container(border=True, key=f"{key}_box"):
        choice = st.radio(f"**Predict first.** {pred.question}", pred.options, index=None, key=key)
        if choice is None:
            st.caption("Choose an answer; the figure shows it, and why is said here.")
        elif choice == pred.answer:
            st.success(f"**Right: {pred.answer}.** {pred.why}")
        else:
            st.error(f"**The answer is {pred.answer}.** {pred.why}")
    return choice


def code_block(code: str) -> None:
    """The lesson's numbers as a short crbc_viz program (the tests run it and compare)."""
    with st.expander("The code behind these numbers (crbc_viz only)"):
        st.code(code, language="python")


#: The stacked frames' state in the session: {"name", "pages": [two pages], "top": 0 | 1,
#: "version": the number of the drawing on top, "source": its page as given, "run": the app run
#: that drew it (`crbc_viz.ui.view.count_run`)}.
STACK_KEY = "_learn_graph_stack"


def graph_stack(page: str, name: str, height: int) -> int:
    """The graph ``page`` in two frames stacked in one place, the newest drawn page on top
    (`crbc_viz.views.learn.layered_page`: see-through until drawn; the page's keeper,
    `crbc_viz.ui.links.stack_keeper`, orders them): a new drawing (a step of Play, K ▶)
    replaces the last one at once instead of blanking the graph while it loads. A
    page equal to the one on top changes nothing; a new ``name`` (another lesson, data set or
    mode) starts the stack again. The frame under the top one keeps its page, so the browser
    keeps its drawing (the same page string leaves an iframe as it is).

    Returns:
        The version of the drawing on top, which its page carries (``<meta name="crbc-layer">``)
        for `crbc_viz.ui.links.stack_keeper` (Play's clock) to wait on.
    """
    run = st.session_state.get(view.RUN_KEY, 0)
    old = st.session_state.get(STACK_KEY)
    if old and old["run"] != run - 1:
        old = None  # not drawn in the last run (another page or lesson): its frames are gone
    if old and old["name"] == name and old["source"] == page:
        stack = old
    else:
        version = st.session_state[STACK_KEY]["version"] + 1 if STACK_KEY in st.session_state else 0
        layer = V.layered_page(page).replace(
            "<head>", f"<head><meta name='crbc-layer' content='{version}'>", 1
        )
        if not old or old["name"] != name:
            pages, top = [layer, V.LAYER_BLANK], 0
        else:
            top = 1 - old["top"]
            pages = list(old["pages"])
            pages[top] = layer
        stack = {"name": name, "pages": pages, "top": top, "version": version, "source": page}
    stack = {**stack, "run": run}
    st.session_state[STACK_KEY] = stack
    st.html(
        "<style>"
        ".st-key-learn_graph_stack { display: grid !important; grid-template-columns: 100%; width: 100%; }"
        ".st-key-learn_graph_stack > * { grid-area: 1 / 1; width: 100%; min-width: 0; }"
        "</style>"
    )
    with st.container(key="learn_graph_stack"):
        for i, p in enumerate(stack["pages"]):
            with st.container(key=f"learn_graph_layer{i}"):
                st.iframe(p, height=height)
    return stack["version"]
