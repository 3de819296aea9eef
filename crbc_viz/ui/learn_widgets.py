"""The Learn page's widgets that hold no lesson of their own: the projector flag, a table that
becomes a large plain table on a projector, a predict-then-reveal question and a lesson's code
block."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..views import learn as V
from . import view

__all__ = ["projector", "table", "ask", "code_block"]


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
