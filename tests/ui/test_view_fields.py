"""Each URL field is a fact of the thing that keeps it: a page's fields are in its ``PAGE`` facts
(``fields``), the sidebar's and the shared selection's in their modules (``URL_FIELDS``, declared
to the view when imported), the view's own (projector) in `crbc_viz.ui.view.OWN_FIELDS`;
`crbc_viz.ui.view.FIELDS` is read from them, and nothing lists them a second time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from crbc_viz.ui import pages, selection, sidebar, view


@pytest.fixture
def fresh_fields():
    """`view.FIELDS` read again from its owners (and once more after the test)."""
    view._fields.cache_clear()
    yield
    view._fields.cache_clear()


def test_the_view_fields_are_those_of_their_owners(fresh_fields):
    owners = [view.OWN_FIELDS, sidebar.URL_FIELDS, selection.URL_FIELDS]
    owners += [p["fields"] for p in pages.page_facts()]  # every page states its fields, maybe none
    names = [n for fields in owners for n in fields]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert dict(view.FIELDS) == {n: k for fields in owners for n, k in fields.items()}


def test_a_field_stated_on_a_new_page_reaches_the_view(fresh_fields, monkeypatch):
    facts = pages.page_facts()
    extra = {"name": "probe", "order": 99, "title": "Probe", "icon": "", "fields": {"zz": "probe_zz"}}
    monkeypatch.setattr(pages, "page_facts", lambda: [*facts, extra])
    assert view.FIELDS["zz"] == "probe_zz" and "zz" in set(view.FIELDS)


def test_a_field_stated_twice_is_refused_naming_both(fresh_fields, monkeypatch):
    facts = pages.page_facts()
    extra = {"name": "probe", "order": 99, "title": "Probe", "icon": "", "fields": {"group": "x"}}
    monkeypatch.setattr(pages, "page_facts", lambda: [*facts, extra])
    with pytest.raises(ValueError, match=r"'group' is declared by ui\.sidebar and by page probe"):
        view.FIELDS["group"]


def test_the_view_module_names_no_field_of_a_page_or_of_the_sidebar():
    tree = ast.parse(Path(view.__file__).read_text(encoding="utf-8"))
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    kept = {**sidebar.URL_FIELDS, **selection.URL_FIELDS}
    for p in pages.page_facts():
        kept |= p["fields"]
    others = set(kept) | {k for k in kept.values() if k}
    assert not strings & others, sorted(strings & others)
