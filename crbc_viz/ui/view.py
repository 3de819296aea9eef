"""The view is the URL: every page control is a named field of one view, kept in the query
string, so a link restores the same view in a new browser and Back / Forward walk the real
steps of a session.

How a run goes (``app.py``):

1. `sync_in` reads the query string. It is applied to the view (fields absent from it fall
   back to their defaults) on the session's first run, and whenever it differs from what this
   session last wrote (Back / Forward, or a link opened in place). An empty query string that
   is not a history step (a page switch that dropped it) keeps the current view, and so does
   one this session wrote a few runs ago when the run is not a history step: the browser sent
   it before the latest write reached it (a slider pressed again while the last press's run
   ended), and applying it would undo the press.
2. The sidebar and the page draw their widgets through `field` (the widget gets its value
   from the view, validated against its options) and `record` (the view takes the value
   back). Values that equal their default are left out of the URL.
3. `sync_out` writes the query string once, only when it changed: one browser history entry
   per real change, none for reruns that change nothing. Page links carry the query string
   (`nav_query`), so a page switch is one entry too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import streamlit as st

from . import pages
from .text import md

__all__ = [
    "FIELDS",
    "OWN_FIELDS",
    "declare",
    "sync_in",
    "sync_out",
    "field",
    "record",
    "value",
    "set_value",
    "nav_query",
    "view_link",
    "clear",
    "is_pending",
]

_VIEW = "_view"  # {url name: encoded value}, non-default values only
_WRITTEN = "_qs_written"  # the query dict this session last wrote (None before the first run)
_EARLIER = "_qs_earlier"  # the query dicts it wrote before that, the latest last (`EARLIER_KEPT`)
#: Earlier writes kept: a browser that has not yet shown the latest ones sends one of them.
EARLIER_KEPT = 4
_PENDING = "_view_pending"  # names whose widget must take the URL's value on its next draw
_DEFAULTS = "_view_defaults"  # {url name: encoded default} as last seen by the widget

#: The view's own URL field, on every page: large fonts for a projector (drawn by the router).
OWN_FIELDS = {"projector": "projector_mode"}

#: ``owner -> {name: session-state key}`` of the modules that keep URL fields of their own
#: (`declare`): the sidebar and the shared selection, when imported.
_DECLARED: dict[str, dict[str, str | None]] = {}


def declare(owner: str, fields: dict[str, str | None]) -> None:
    """Add the URL fields ``owner`` keeps (name -> session-state key of its control; None: kept
    by the owner itself): the sidebar and the shared selection call it when imported."""
    _DECLARED[owner] = dict(fields)
    _fields.cache_clear()


@functools.cache
def _fields() -> dict[str, str | None]:
    """Every URL field from the things that keep it: the view's own (`OWN_FIELDS`), those the
    sidebar and the shared selection `declare`, and each page's (the ``fields`` of its ``PAGE``
    facts, `crbc_viz.ui.pages.page_facts`). A name kept by two of them raises, naming both."""
    owners = [("ui.view", OWN_FIELDS), *_DECLARED.items()]
    owners += [(f"page {p['name']}", p.get("fields", {})) for p in pages.page_facts()]
    out: dict[str, str | None] = {}
    where: dict[str, str] = {}
    for owner, fields in owners:
        for name, key in fields.items():
            if name in out:
                raise ValueError(f"URL field {name!r} is declared by {where[name]} and by {owner}")
            out[name], where[name] = key, owner
    return out


class _Fields(Mapping):
    """Every URL field: name -> session-state key of the control that holds it (None: kept by
    its owner itself, as the file and the parameters). Read from the things that keep them
    (`_fields`) when asked; nothing here lists them."""

    def __getitem__(self, name: str) -> str | None:
        return _fields()[name]

    def __iter__(self):
        return iter(_fields())

    def __len__(self) -> int:
        return len(_fields())


FIELDS: Mapping[str, str | None] = _Fields()


def _history_step() -> bool:
    """Whether this run was started by the browser's Back / Forward."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        return bool(getattr(ctx, "is_history_navigation", False))
    except Exception:  # pragma: no cover - internal API moved: treat as an ordinary run
        return False


def _view() -> dict:
    return st.session_state.setdefault(_VIEW, {})


def _current_query() -> dict[str, str]:
    return {k: v for k, v in st.query_params.to_dict().items() if k in FIELDS}


#: The number of this session's script runs (`count_run`).
RUN_KEY = "_app_run"


def count_run() -> int:
    """Count this run of the app (once per run, first thing): what a page drew in the run just
    before this one can be told from what it drew longer ago."""
    n = st.session_state.get(RUN_KEY, 0) + 1
    st.session_state[RUN_KEY] = n
    return n


def sync_in() -> bool:
    """Apply the URL to the view when it is new to this session; True when it was applied."""
    cur = _current_query()
    written = st.session_state.get(_WRITTEN)
    if written is not None and cur == written:
        return False
    if written is not None and not _history_step():
        if not cur:
            return False  # a page switch that dropped the query string: keep the view
        if cur in st.session_state.get(_EARLIER, ()):
            return False  # the browser had not yet shown this session's latest write
    st.session_state[_VIEW] = dict(cur)
    st.session_state[_PENDING] = set(FIELDS)
    return True


def is_pending(name: str) -> bool:
    return name in st.session_state.get(_PENDING, ())


def value(name: str, default: Any = None) -> Any:
    """The view's (encoded) value of field ``name``."""
    return _view().get(name, default)


def set_value(name: str, encoded: str | None) -> None:
    """Set (or with None, drop) a field that is not a widget (file, parameters)."""
    if encoded is None:
        _view().pop(name, None)
    else:
        _view()[name] = encoded
    st.session_state.get(_PENDING, set()).discard(name)


def clear(*names: str) -> None:
    """Reset fields to their defaults (e.g. the selection when the group changes)."""
    for name in names:
        _view().pop(name, None)
        key = FIELDS.get(name)
        if key is not None:
            st.session_state.pop(key, None)


def field(
    name: str,
    default: Any,
    *,
    options=None,
    decode: Callable[[str], Any] = str,
    problems: list | None = None,
    key: str | None = None,
    allowed: str | None = None,
) -> str:
    """Prepare the control of field ``name`` before it is drawn; return its session key.

    The control takes the URL's value after a URL was applied, the view's value when it was
    not drawn on the last run (another page), and ``default`` when the value is not one of
    ``options`` (a list, or a predicate that must match the control's range: a value outside
    it would stop the page). A refused URL value is reported, naming the field, the value and
    ``allowed`` (what the control takes), in ``problems``, or without that list as a warning
    placed where the control is prepared.
    """
    key = key or FIELDS[name]
    pending = st.session_state.setdefault(_PENDING, set())
    if options is None:
        ok = lambda v: True  # noqa: E731
    elif isinstance(options, (list, tuple, set, dict, range)):
        ok = lambda v: v in options  # noqa: E731
    else:
        ok = options  # a predicate

    def from_view():
        if name not in _view():
            return default
        try:
            v = decode(_view()[name])
            fits = v is not None and bool(ok(v))
        except (TypeError, ValueError, OverflowError):
            fits = False
        if not fits:
            why = f"is refused (allowed: {allowed})" if allowed else "is not available here"
            msg = f"{name} = '{_view()[name]}' from the link {why}; showing the default"
            if problems is not None:
                problems.append(msg)
            else:
                st.warning(md(msg))
            _view().pop(name, None)
            return default
        return v

    if name in pending:
        st.session_state[key] = from_view()
        pending.discard(name)
    elif key not in st.session_state:
        st.session_state[key] = from_view()
    elif not ok(st.session_state[key]):
        st.session_state[key] = default
    else:
        # Re-set by code: a widget drawn on another page than last run would otherwise fall
        # back to its default (Streamlit drops page-scoped widget values on a page switch).
        st.session_state[key] = st.session_state[key]
    st.session_state.setdefault(_DEFAULTS, {})[name] = default
    return key


def record(name: str, encode: Callable[[Any], str] = str, key: str | None = None) -> Any:
    """Take the drawn control's value back into the view (dropped when it is the default)."""
    key = key or FIELDS[name]
    v = st.session_state.get(key)
    default = st.session_state.get(_DEFAULTS, {}).get(name)
    if v is None or v == default:
        _view().pop(name, None)
    else:
        _view()[name] = encode(v)
    return v


def nav_query() -> dict[str, str]:
    """The query string of the current view (what page links carry)."""
    return dict(sorted(_view().items()))


def sync_out() -> None:
    """Write the view into the URL once, only when it changed."""
    want = nav_query()
    if want != _current_query():
        st.query_params.from_dict(want)
    before = st.session_state.get(_WRITTEN)
    if before is not None and before != want:
        earlier = [q for q in st.session_state.get(_EARLIER, []) if q != want] + [before]
        st.session_state[_EARLIER] = earlier[-EARLIER_KEPT:]
    st.session_state[_WRITTEN] = want
    # A URL is applied on the run that read it; controls not drawn then (another page, a step
    # picker without a rollout) take the view's value when they are drawn later.
    st.session_state[_PENDING] = set()


def view_link(url_path: str = "") -> str:
    """An absolute link to this view when the browser's address is known, else a relative one."""
    from urllib.parse import urlencode

    base = None
    try:
        base = st.context.url
    except Exception:  # pragma: no cover - no browser context (bare mode)
        base = None
    q = urlencode(nav_query())
    path = (base.rstrip("/") if base else "") + "/" + url_path
    return path + (f"?{q}" if q else "")
