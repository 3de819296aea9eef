"""The page menu (links that carry the view's query string), the "Copy link" button, and the
bridge that brings clicks inside the graph iframe and the ← / → keys back to Python.

The two small browser pieces are Streamlit custom components (``st.components.v2``): they
run in the app's page, not in an iframe. The graph iframe posts ``{crbc: "pick", kind, id}``
to its parent (see `crbc_viz.views.graph_view`); the bridge turns that into a trigger value,
and `on_pick` / `on_key` update the shared selection before the rerun draws it.
"""

from __future__ import annotations

import streamlit as st

from . import view
from .pages import PAGES_DIR
from .selection import URL_FIELDS, set_rollout, step_by

__all__ = [
    "PAGES_DIR",
    "page_script",
    "page_menu",
    "view_tools",
    "events",
    "on_pick",
    "on_key",
    "step_by",
    "export_config",
    "stack_keeper",
]


def page_script(name: str) -> str:
    """The absolute path of page script ``name`` (``"graph"``) for ``st.Page`` and
    ``st.page_link``: the same page whichever main script runs the app (the checkout's
    ``app.py`` or the package's ``main.py``)."""
    return str(PAGES_DIR / f"{name}.py")


_COPY_HTML = """
<div class="crbc-copy">
  <button type="button" class="crbc-copy-btn">Copy link</button>
  <span class="crbc-copy-note"></span>
  <input class="crbc-copy-link" readonly aria-label="link to this view" style="display:none">
</div>
"""

_COPY_CSS = """
.crbc-copy-btn { font: inherit; padding: 4px 10px; border-radius: 6px; cursor: pointer;
                 border: 1px solid rgba(49,51,63,0.25); background: white; }
.crbc-copy-note { font-size: 12px; margin-left: 6px; color: #2e7d32; }
.crbc-copy-link { display: block; width: 100%; margin-top: 4px; font-size: 11px; }
"""

#: Below this window width the sidebar starts collapsed (Streamlit's own "auto" collapses it
#: only up to its 768 px breakpoint; from there to here the page would lose a third of its width).
NARROW_PX = 1000

_COPY_JS = """
// Once per page load, in a window narrower than NARROW_PX: collapse the sidebar as Streamlit's
// own button does, unless the reader chose a state before (Streamlit keeps that choice under
// localStorage "stSidebarCollapsed-…", and re-reads it whenever the window or the sidebar's
// content changes, so the state this click stores stays while the page is open). Unless the
// reader then opens or closes the sidebar, that state is removed when the page is left: it is
// no reader's choice, and a wider window on the next load opens the sidebar.
function collapseWhenNarrow(tries) {
  if (window.__crbcNarrowDone) { return; }
  // Only the window the page loads in: a window narrowed later keeps the sidebar as it is.
  if (window.innerWidth >= __NARROW_PX__) { window.__crbcNarrowDone = true; return; }
  const own = (k) => k.startsWith("stSidebarCollapsed-");
  const keys = () => { try { return Object.keys(window.localStorage).filter(own); } catch (e) { return []; } };
  if (keys().length) { window.__crbcNarrowDone = true; return; }
  const btn = document.querySelector("[data-testid='stSidebarCollapseButton'] button");
  if (!btn) {
    if (tries > 0) { window.setTimeout(() => collapseWhenNarrow(tries - 1), 100); }
    return;
  }
  window.__crbcNarrowDone = true;
  btn.click();
  let chosen = false;
  document.addEventListener("click", (ev) => {
    const t = ev.target;
    if (ev.isTrusted && t && t.closest && t.closest(
      "[data-testid='stSidebarCollapseButton'], [data-testid='stExpandSidebarButton']")) { chosen = true; }
  }, true);
  window.addEventListener("pagehide", () => {
    if (!chosen) { keys().forEach((k) => { try { window.localStorage.removeItem(k); } catch (e) { /* none */ } }); }
  });
}

// Once per page load: load Streamlit's own plotly chunk (the module its chart element imports
// the first time a page draws a chart) while the first page is drawn, so that opening Compare
// or Across training does not evaluate 4.7 MB of plotly then. The same URL is the same module:
// Streamlit's import finds it loaded. ``rel`` is the chunk's path beside Streamlit's index script
// (`plotly_chunk`); without it, or if the import fails, the chart loads it as before.
function prefetchCharts(rel) {
  if (!rel || window.__crbcCharts) { return; }
  const index = document.querySelector("script[type='module'][src*='/static/js/index.']");
  if (!index) { return; }
  window.__crbcCharts = import(new URL(rel, index.src).href).then(() => "loaded", () => "failed");
}

export default function (component) {
  // A busy server can take many seconds to draw the sidebar: keep looking for 30 s.
  collapseWhenNarrow(300);
  prefetchCharts(component.data && component.data.charts);
  const root = component.parentElement;
  const btn = root.querySelector(".crbc-copy-btn");
  const out = root.querySelector(".crbc-copy-link");
  const note = root.querySelector(".crbc-copy-note");
  btn.onclick = () => {
    const href = window.location.href;
    out.value = href;
    out.style.display = "block";
    out.select();
    const done = (ok) => { note.textContent = ok ? "copied" : "select and copy the link below"; };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(href).then(() => done(true), () => done(false));
    } else { done(false); }
  };
}
"""
_COPY_JS = _COPY_JS.replace("__NARROW_PX__", str(NARROW_PX))

_EVENTS_JS = """
export default function (component) {
  // One listener per browser tab; each mount points it at the newest trigger setter.
  window.__crbcSet = component.setTriggerValue;
  if (window.__crbcEvents) { return; }
  window.__crbcEvents = true;
  let n = 0;
  window.addEventListener("message", (ev) => {
    const m = ev.data;
    if (!m || typeof m.crbc !== "string") { return; }
    window.__crbcViews = window.__crbcViews || {};
    if (m.crbc === "view") { window.__crbcViews[m.key] = {scale: m.scale, pos: m.pos}; return; }
    if (m.crbc === "hello") {
      const v = window.__crbcViews[m.key];
      if (v && ev.source) { ev.source.postMessage({crbc: "restore", key: m.key, scale: v.scale, pos: v.pos}, "*"); }
      return;
    }
    if (m.crbc !== "pick" || typeof m.id !== "string") { return; }
    n += 1;
    window.__crbcSet && window.__crbcSet("pick", {kind: String(m.kind || "node"), id: m.id, n: n});
  });
  // A trajectory cell (st.html, in this page) names its rollout and step.
  document.addEventListener("click", (ev) => {
    // st.html may sit in a shadow root: look along the composed path, not just the target.
    const path = ev.composedPath ? ev.composedPath() : [ev.target];
    const cell = path.find((e) => e && e.getAttribute && e.getAttribute("data-crbc-step"));
    if (!cell) { return; }
    n += 1;
    window.__crbcSet && window.__crbcSet("pick", {kind: "step", id: cell.getAttribute("data-crbc-step"), n: n});
  }, true);
  window.addEventListener("keydown", (ev) => {
    if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") { return; }
    if (ev.altKey || ev.ctrlKey || ev.metaKey) { return; }
    const t = ev.target;
    const tag = t && t.tagName ? t.tagName.toLowerCase() : "";
    if (tag === "input" || tag === "textarea" || tag === "select" || (t && t.isContentEditable)) {
      return;
    }
    if (t && t.closest && t.closest("[role='slider'], [role='listbox'], [role='combobox']")) {
      return;
    }
    n += 1;
    window.__crbcSet && window.__crbcSet("key", {dir: ev.key === "ArrowLeft" ? -1 : 1, n: n});
  });
}
"""


_STACK_JS = """
// The graph stack's keeper (`crbc_viz.ui.learn_widgets.graph_stack`), in the page: on every
// animation frame the layer whose page is the newest drawn one (its <meta name="crbc-layer">
// version, its body data-crbc-ready) is put on top. A layer whose page was just replaced still
// shows its old document until the new one commits, so the order is read from the documents,
// never assumed from the run that sent them.
// While Play runs, also its clock: the next step is asked for (a trigger value, which reruns the
// script) a second after the last one was asked for, not before this run's drawing is on
// screen and not before the run has ended: steps come once a second where a run and a drawing
// take less, and never outrun either.
export default function (component) {
  const { data, setTriggerValue, parentElement } = component;
  const S = window.__crbcStack = window.__crbcStack || {};
  const host = parentElement && parentElement.host ? parentElement.host : parentElement;
  const id = String(data && data.id), play = !!(data && data.play);
  if (S.id !== id) {
    const now = performance.now();
    S.id = id;
    S.play = play;
    S.layer = String(data && data.layer);
    S.set = setTriggerValue;
    S.host = host;
    S.seen = false;
    // From the last step asked for; from now when Play starts (or starts again).
    S.start = S.fired !== undefined && now - S.fired < 5000 ? S.fired : now;
  }
  if (S.loop) { return; }
  S.loop = true;
  const layers = () => {
    const stack = document.querySelector(".st-key-learn_graph_stack");
    if (!stack) { return []; }
    return Array.from(stack.children).map((w) => {
      const f = w.querySelector("iframe");
      let d = null;
      try { d = f && f.contentDocument; } catch (e) { d = null; }
      const m = d && d.querySelector("meta[name='crbc-layer']");
      const ready = !!(d && d.body && d.body.getAttribute("data-crbc-ready") === "1");
      return {w: w, v: m ? Number(m.content) : -1, ready: ready};
    });
  };
  const frame = () => {
    const ls = layers();
    let best = null;
    for (const l of ls) { if (l.ready && l.v >= 0 && (!best || l.v > best.v)) { best = l; } }
    for (const l of ls) {
      const z = l === best ? "2" : "1";
      if (l.w.style.zIndex !== z) { l.w.style.zIndex = z; }
    }
    if (S.play && S.host) {
      if (S.host.isConnected) { S.seen = true; }
      if (S.host.isConnected || !S.seen) {
        const t = performance.now();
        const drawn = ls.some((l) => l.ready && String(l.v) === S.layer) || !ls.length;
        // Never while the script still runs: a run cut short before it wrote the view into the
        // URL would leave the URL one step behind, and the next run would read it as a link
        // opened in place (K one step back).
        const box = document.querySelector("[data-test-script-state]");
        const idle = !box || box.getAttribute("data-test-script-state") !== "running";
        // (a drawing that never says it is ready holds Play 10 s at most)
        if (idle && t >= S.start + __STEP_MS__ && (drawn || t >= S.start + __STEP_MS__ + 10000)) {
          S.play = false;
          S.fired = t;
          // (the last ticks' times, for a test to read: the page's own clock)
          S.ticks = (S.ticks || []).concat([t]).slice(-50);
          S.set("tick", S.id);
        }
      }
    }
    window.requestAnimationFrame(frame);
  };
  window.requestAnimationFrame(frame);
}
"""

#: Play's pace: one step a second (`stack_keeper`, the clock in the page).
PLAY_STEP_S = 1.0
_STACK_JS = _STACK_JS.replace("__STEP_MS__", str(int(PLAY_STEP_S * 1000)))


@st.cache_resource
def plotly_chunk() -> str | None:
    """The path of the module Streamlit's plotly chart element imports, relative to its index
    script (``"./PlotlyChart.<hash>.js"``), read from the installed Streamlit's own bundle; None
    where this Streamlit's bundle names no such file (the page then loads it as it always did)."""
    from pathlib import Path

    return chunk_in(Path(st.__file__).parent / "static", "PlotlyChart")


def chunk_in(static, name: str) -> str | None:
    """``"./<name>.<hash>.js"`` where Streamlit's built frontend under ``static`` (its
    ``index.html``, the index script it loads, and ``static/js``) imports exactly one such
    module and the file is there; else None."""
    import re

    js = static / "static" / "js"
    try:
        index = re.search(r'src="\./static/js/(index\.[\w-]+\.js)"', (static / "index.html").read_text())
        bundle = (js / index.group(1)).read_text(errors="replace") if index else ""
    except OSError:
        return None
    names = set(re.findall(r'"\./(' + re.escape(name) + r'\.[\w-]+\.js)"', bundle))
    if len(names) != 1:
        return None
    (found,) = names
    return f"./{found}" if (js / found).is_file() else None


@st.cache_resource
def _components():
    copy = st.components.v2.component("crbc_copy_link", html=_COPY_HTML, css=_COPY_CSS, js=_COPY_JS)
    bridge = st.components.v2.component("crbc_events", html="<span></span>", js=_EVENTS_JS)
    keeper = st.components.v2.component("crbc_graph_stack", html="<span></span>", js=_STACK_JS)
    return copy, bridge, keeper


def page_menu(container, pages, current) -> None:
    """One link per page in ``container``; each carries the current view's query string."""
    q = view.nav_query()
    with container:
        for p in pages:
            st.page_link(
                p,
                label=p.title,
                icon=p.icon,
                query_params=q or None,
                disabled=p.url_path == current.url_path and p.title == current.title,
            )
        st.divider()


def view_tools(page) -> None:
    """The sidebar's "Copy link" and what the link can and cannot restore. Its script also
    starts the sidebar collapsed in a window narrower than `NARROW_PX` and loads the charts'
    module (`plotly_chunk`), once per page load."""
    from .sidebar import is_upload

    copy, _, _ = _components()
    with st.sidebar:
        copy(key="crbc_copy_link", data={"charts": plotly_chunk()}, height="content")
        ref = view.value("file")
        if is_upload(ref):
            st.caption(
                "This view's file is an upload: the link names it by content and works on "
                "this server while the upload is kept; elsewhere, upload the same file again."
            )
        elif ref and ref.startswith("/"):
            st.caption(
                "This view's file is a path on this server: the link works where that path is readable."
            )


def _trigger(name: str):
    res = st.session_state.get("crbc_events")
    try:
        return res.get(name) if hasattr(res, "get") else getattr(res, name, None)
    except Exception:
        return None


def on_pick() -> None:
    """A node or edge clicked in the graph: it becomes the chosen anchor; when the chosen
    rollout visits it, its first visit there becomes the chosen step."""
    pick = _trigger("pick")
    if not isinstance(pick, dict):
        return
    ident = str(pick.get("id", ""))
    if pick.get("kind") == "step":
        r, _, i = ident.partition(":")
        ids = st.session_state.get("_rollout_ids") or []
        if r.isdigit() and i.isdigit() and int(r) < len(ids):
            set_rollout(ids[int(r)], int(i))
        return
    visits = st.session_state.get("_rollout_anchors") or {}
    if pick.get("kind") == "edge":
        ident, _, _ = ident.partition("->")
    if not ident.isdigit():
        return
    st.session_state[URL_FIELDS["anchor"]] = f"s{int(ident)}"
    if ident in visits:
        st.session_state[URL_FIELDS["step"]] = visits[ident]


def on_key() -> None:
    key = _trigger("key")
    if isinstance(key, dict) and key.get("dir") in (-1, 1):
        step_by(int(key["dir"]))


def events() -> None:
    """Mount the click / key bridge (once per page that has a selection)."""
    _, bridge, _ = _components()
    bridge(key="crbc_events", on_pick_change=on_pick, on_key_change=on_key, height="content")


def export_config(*parts: str) -> dict:
    """Plotly config whose image export is named from ``parts`` (group, estimators with their
    non-default parameters, quantity …), with unsafe characters replaced."""
    import re

    name = "_".join(["crbc-viz", *parts])
    return {
        "toImageButtonOptions": {
            "format": "svg",
            "scale": 2,
            "filename": re.sub(r"[^A-Za-z0-9_.=,-]+", "_", name)[:180],
        }
    }


def stack_keeper(key: str, step: str, layer: int, play: bool, on_tick) -> None:
    """Mount the graph stack's keeper (`crbc_viz.ui.learn_widgets.graph_stack`): in the page,
    the layer holding the newest drawn page goes on top. With ``play``, also Play's clock: it
    calls ``on_tick`` (then reruns the script) `PLAY_STEP_S` after its last tick, once the
    layer ``layer`` has drawn. ``step`` names this run (each run's is new). Paced in the
    browser, Play's steps never come faster than the page draws them (a server that slept its
    second drew K ahead of a graph still loading)."""
    _, _, keeper = _components()
    keeper(
        key=key,
        data={"id": step, "layer": str(layer), "play": bool(play)},
        on_tick_change=on_tick,
        height="content",
    )
