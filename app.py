"""crbc-viz: browse rollout groups, see the merged anchor graph with its boundaries, compare
credit estimators and read credit on every step.

    streamlit run app.py

A router (``st.navigation``, its own menu hidden) over the page scripts in ``app_pages/``, the
shared sidebar, and the view kept in the URL (`crbc_viz.ui.view`): the sidebar's page links
carry the query string, so a page switch is one history entry and keeps the view.

No traceback reaches a browser: an exception in the sidebar or a page is logged on the server
(``logging.exception``, with the traceback) and the page shows one short message instead
(`PAGE_FAILED`); anything outside that guard is redacted by ``client.showErrorDetails = "none"``
(``.streamlit/config.toml``).
"""

import logging

import streamlit as st

from crbc_viz.ui import view
from crbc_viz.ui.links import page_menu, view_tools
from crbc_viz.ui.sidebar import render_sidebar

st.set_page_config(page_title="crbc-viz", layout="wide")

log = logging.getLogger("crbc_viz.app")

#: What the browser shows when a page fails: no exception type, server path or source line.
PAGE_FAILED = "Something went wrong on this page; details are in the server log."

PAGES = [
    st.Page("app_pages/data.py", title="Data", icon=":material/dataset:", default=True),
    st.Page("app_pages/graph.py", title="Graph", icon=":material/hub:"),
    st.Page("app_pages/trajectories.py", title="Trajectories", icon=":material/timeline:"),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("app_pages/estimators.py", title="Estimators", icon=":material/menu_book:"),
    st.Page(
        "app_pages/training.py", title="Across training", url_path="training", icon=":material/show_chart:"
    ),
    st.Page("app_pages/learn.py", title="Learn", url_path="learn", icon=":material/school:"),
]

#: Pages with their own data choice: the shared file/group/estimator sidebar is not drawn there.
SELF_CONTAINED = {"Learn", "Across training"}


def page_failed(page, exc: Exception, where: str) -> None:
    """Log ``exc`` with its traceback on the server; show the browser `PAGE_FAILED` only.

    Under ``streamlit.testing`` (AppTest) the exception is shown as an exception element
    instead, so that the app's tests still fail on it (they check ``at.exception``)."""
    log.exception("the %s of page %r failed", where, page.title)
    if st.get_option("global.appTest"):
        st.exception(exc)
    else:
        st.error(PAGE_FAILED, icon=":material/error:")


page = st.navigation(PAGES, position="hidden")
view.sync_in()
menu = st.sidebar.container()
try:
    if page.title not in SELF_CONTAINED:
        render_sidebar()
    page.run()
except Exception as e:  # StopException and RerunException are BaseExceptions: they pass
    page_failed(page, e, "body")
finally:
    try:
        page_menu(menu, PAGES, page)
        view_tools(page)
        view.sync_out()
    except Exception as e:
        page_failed(page, e, "menu or link")
