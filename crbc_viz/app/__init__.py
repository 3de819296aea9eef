"""The Streamlit app as the package ships it: the router (`crbc_viz.app.router`), its page
scripts (``app_pages/``), the script Streamlit runs (``main.py``) and the server settings
(``streamlit.toml``, the same as the checkout's ``.streamlit/config.toml``), so that
``crbc-viz view`` serves the app from an installed package. The checkout's ``app.py`` is a thin
entry that runs the same router (``make run``, ``streamlit run app.py``).

Importing this package imports no streamlit.
"""

from pathlib import Path

__all__ = ["APP_DIR", "MAIN_SCRIPT", "STREAMLIT_CONFIG"]

APP_DIR = Path(__file__).resolve().parent
#: The script ``crbc-viz view`` gives ``streamlit run``.
MAIN_SCRIPT = APP_DIR / "main.py"
#: The server and client settings ``crbc-viz view`` passes as ``streamlit run`` flags.
STREAMLIT_CONFIG = APP_DIR / "streamlit.toml"
