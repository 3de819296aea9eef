"""The app's router: ``st.navigation`` (its own menu hidden) over the page scripts in
``app_pages/``, the shared sidebar, and the view kept in the URL (`crbc_viz.ui.view`): the
sidebar's page links carry the query string, so a page switch is one history entry and keeps
the view. `main` draws one run; the checkout's ``app.py`` and the packaged ``main.py`` call it.

Nothing is fetched from another host: the favicon is an emoji drawn by the browser (a page's
Material icon as favicon would be fetched from fonts.gstatic.com), and the menu's icons come from
the Material Symbols font bundled with Streamlit.

Projector mode (``?projector=1``, a toggle under the page menu) raises the page's root font size
up to `PROJECTOR_ROOT_PX` (Streamlit sizes its text in rem, so every label, table and caption
grows) and tells the pages to draw their figures with large fonts.

No traceback reaches a browser: an exception in the sidebar or a page is logged on the server
(``logging.exception``, with the traceback) and the page shows one short message instead
(`PAGE_FAILED`); anything outside that guard is redacted by ``client.showErrorDetails = "none"``
(``.streamlit/config.toml``; ``streamlit.toml`` here for ``crbc-viz view``).
"""

import logging

import streamlit as st

from crbc_viz.ui import pipeline, view
from crbc_viz.ui.links import page_menu, page_script, view_tools
from crbc_viz.ui.pages import page_facts
from crbc_viz.ui.sidebar import render_sidebar

log = logging.getLogger("crbc_viz.app")

#: What the browser shows when a page fails: no exception type, server path or source line.
PAGE_FAILED = "Something went wrong on this page; details are in the server log."


#: (script in ``app_pages/``, title, url_path or None for the script's name, icon) of every page
#: (`page_facts`); the first is the default page.
PAGE_SPECS = [(p["name"], p["title"], p.get("url_path"), p["icon"]) for p in page_facts()]

#: Pages with their own data choice: the shared file/group/estimator sidebar is not drawn there.
SELF_CONTAINED = {p["title"] for p in page_facts() if p.get("own_data")}

#: Root font size in projector mode: 1.5 % of the window's width, 16 … `PROJECTOR_ROOT_PX` px
#: (19.2 px at 1280 px, where Streamlit's 0.875rem labels become 16.8 px; a narrow window keeps
#: the screen's sizes, or its columns would no longer hold their controls).
PROJECTOR_ROOT_PX = 20
PROJECTOR_CSS = f"""<style>
  html {{ font-size: clamp(16px, 1.5vw, {PROJECTOR_ROOT_PX}px); }}
  [data-testid="stTable"] th, [data-testid="stTable"] td {{ font-size: 1rem; }}
</style>"""


def pages() -> list:
    """The ``st.Page`` of each `PAGE_SPECS` entry (built in a run: a page resolves its script
    against the running main script), each by its script's absolute path."""
    out = []
    for i, (name, title, url_path, icon) in enumerate(PAGE_SPECS):
        kw = {"url_path": url_path} if url_path else {}
        out.append(st.Page(page_script(name), title=title, icon=icon, default=i == 0, **kw))
    return out


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(text)
    return text == "1"


def projector_toggle(box) -> bool:
    """The projector-mode toggle in ``box`` (its value kept in the URL as ``projector=1``);
    when on, the page's CSS grows every font."""
    key = view.field("projector", False, options=[False, True], decode=_flag, allowed="1 (on) or 0 (off)")
    on = box.toggle(
        "Projector mode",
        key=key,
        help="large fonts in every figure, legend, axis and table, for a lecture room",
    )
    view.record("projector", encode=lambda v: "1" if v else "0")
    if on:
        box.markdown(PROJECTOR_CSS, unsafe_allow_html=True)
    return on


def page_failed(page, exc: Exception, where: str) -> None:
    """Log ``exc`` with its traceback on the server; show the browser `PAGE_FAILED` only.

    Under ``streamlit.testing`` (AppTest) the exception is shown as an exception element
    instead, so that the app's tests still fail on it (they check ``at.exception``)."""
    log.exception("the %s of page %r failed", where, page.title)
    if st.get_option("global.appTest"):
        st.exception(exc)
    else:
        st.error(PAGE_FAILED, icon=":material/error:")


def main() -> None:
    """Draw one run of the app: the chosen page, the shared sidebar, the page menu."""
    # A page_icon here keeps Streamlit from using the page's Material icon as favicon (a request
    # to fonts.gstatic.com); an emoji favicon is a data: URL.
    # "auto": Streamlit collapses the sidebar up to 768 px; the "Copy link" component's script
    # collapses it up to `links.NARROW_PX` (1000 px), where it would take a third of the page.
    st.set_page_config(page_title="crbc-viz", page_icon="📊", layout="wide", initial_sidebar_state="auto")
    view.count_run()
    pipeline.engine_loading()
    all_pages = pages()
    page = st.navigation(all_pages, position="hidden")
    view.sync_in()
    menu = st.sidebar.container()
    try:
        projector_toggle(st.sidebar.container())
        if page.title not in SELF_CONTAINED:
            render_sidebar()
        page.run()
    except Exception as e:  # StopException and RerunException are BaseExceptions: they pass
        page_failed(page, e, "body")
    finally:
        try:
            page_menu(menu, all_pages, page)
            view_tools(page)
            view.sync_out()
        except Exception as e:
            page_failed(page, e, "menu or link")
