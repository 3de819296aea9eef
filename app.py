"""crbc-viz: browse rollout groups, see the merged anchor graph with its boundaries, compare
credit estimators and read credit on every step.

    streamlit run app.py

A router (``st.navigation``, its own menu hidden) over the page scripts in ``app_pages/``, the
shared sidebar, and the view kept in the URL (`crbc_viz.ui.view`): the sidebar's page links
carry the query string, so a page switch is one history entry and keeps the view.
"""

import streamlit as st

from crbc_viz.ui import view
from crbc_viz.ui.links import page_menu, view_tools
from crbc_viz.ui.sidebar import render_sidebar

st.set_page_config(page_title="crbc-viz", layout="wide")

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

page = st.navigation(PAGES, position="hidden")
view.sync_in()
menu = st.sidebar.container()
if page.title not in SELF_CONTAINED:
    render_sidebar()
try:
    page.run()
finally:
    page_menu(menu, PAGES, page)
    view_tools(page)
    view.sync_out()
