"""The Learn page's rendered text as a person reads it: math is rendered (between ``$…$`` in
markdown, or st.latex), never caret or underscore notation ("A^∞", "A^(K)", "w_G") in prose,
widget labels, tooltips, tables or figures; numbers carry decimals, never "3.11e-01"."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest
from test_learn import PAGE, REPO, TIMEOUT, _decode, go, learn, ok

#: Caret or underscore notation outside rendered math: "A^G", "β^(T−t+1)", "w_G", "σ_min".
CARET = re.compile(r"\^|(?<![A-Za-z])[A-Za-zσβγμ]_(\{|[A-Za-z0-9]+\b)")
#: Scientific notation: 3.11e-01, 1e-10, 2.5E+03.
SCIENTIFIC = re.compile(r"(?<![\w.])\d+(\.\d+)?[eE][-+]?\d+\b")
_MATH = re.compile(r"\$[^$]*\$")


def _figure_texts(spec: dict) -> list[str]:
    out = []
    lay = spec.get("layout", {})
    out.append(str((lay.get("title") or {}).get("text") or ""))
    out += [str(a.get("text", "")) for a in lay.get("annotations", [])]
    for ax, v in lay.items():
        if ax.startswith(("xaxis", "yaxis")) and isinstance(v, dict):
            out.append(str((v.get("title") or {}).get("text") or ""))
            out += [str(t) for t in v.get("ticktext") or []]
    for tr in spec.get("data", []):
        out += [str(tr.get("name") or ""), str(tr.get("hovertemplate") or "")]
        out.append(str(((tr.get("colorbar") or {}).get("title") or {}).get("text") or ""))
        text = tr.get("text")
        if isinstance(text, list):
            out += [str(x) for row in text for x in (row if isinstance(row, list) else [row])]
        elif text:
            out.append(str(text))
    return out


def page_texts(at) -> list[str]:
    """Every piece of text the page shows, math between ``$…$`` taken out (it is rendered)."""
    out = [m.value for m in at.markdown] + [c.value for c in at.caption]
    out += [h.value for h in at.header] + [h.value for h in at.subheader]
    for kind in ("success", "error", "warning", "info"):
        out += [e.value for e in at.get(kind)]
    for m in at.metric:
        out += [m.label, str(m.value), m.help or ""]
    for kind in ("radio", "selectbox", "multiselect", "select_slider", "slider", "toggle", "button"):
        for w in at.get(kind):
            out += [str(getattr(w, "label", "")), str(getattr(w, "help", "") or "")]
            out += [str(o) for o in getattr(w, "options", []) or []]
    for e in at.get("plotly_chart"):
        out += _figure_texts(_decode(json.loads(e.proto.spec)))
    for t in at.table:
        out += [str(c) for c in t.value.columns]
    return [_MATH.sub(" ", t) for t in out]


def bad_notation(at) -> list[str]:
    return [t for t in page_texts(at) if CARET.search(t) or SCIENTIFIC.search(t)]


@pytest.mark.parametrize("lesson", [1, 3, 4, 5, 6])
def test_no_caret_or_scientific_notation(lesson):
    at = learn(lesson=lesson) if lesson == 5 else go(learn(), lesson)
    assert bad_notation(at) == []
    if lesson == 1:  # Q and V come in lesson 3: lesson 1 names neither, nor Q − V
        assert not [t for t in page_texts(at) if re.search(r"\bQ\b|Q − V|\bV\(", t)]
    if lesson == 4:  # deep in the backups the gap is tiny: still read as decimals
        at.select_slider(key="learn_k").set_value("20").run()
        ok(at)
        assert bad_notation(at) == []


def test_no_caret_in_projector_mode_and_after_an_edit():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({"lesson": "6", "projector": "1", "beta": "0.9", "gamma": "0.9"})
    at.switch_page(PAGE)
    at.run()
    ok(at)
    at.multiselect(key="learn_flip_toy").select("t3").run()
    ok(at)
    at.button(key="learn_add_btn_toy").click().run()
    ok(at)
    assert bad_notation(at) == []
