"""Pure views: plotly figures and HTML strings built from graphs and `CreditResult`s.

Nothing here imports streamlit; the app (``crbc_viz/ui``, ``app_pages``) places what these return.
"""

from .colors import CREDIT_COLORSCALE, credit_color, credit_limit, value_color
from .graph_values import select_nodes
from .graph_view import graph_html
from .layout import layered_layout

__all__ = [
    "CREDIT_COLORSCALE",
    "credit_color",
    "credit_limit",
    "value_color",
    "graph_html",
    "layered_layout",
    "select_nodes",
]
