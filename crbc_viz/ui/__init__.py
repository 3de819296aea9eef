"""The Streamlit layer: file choice, cached pipeline, parameter widgets, shared sidebar.

Only this package, the page scripts (``app_pages/``) and ``app.py`` import streamlit.
"""
