"""The Streamlit layer: file choice, cached pipeline, parameter widgets, shared sidebar.

Only this package, the app (``crbc_viz/app/``: router and page scripts) and ``app.py`` import
streamlit. Without it (``pip install crbc-viz`` is the core), importing this package is one line
naming the extra.
"""

from .._extras import ensure

ensure("streamlit", "the app (crbc_viz.ui)")
