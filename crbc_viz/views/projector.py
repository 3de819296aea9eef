"""Sizes for a projector: figures whose every font is large enough to read from the back of a
lecture room, and titles broken into lines that fit their figure.

Pure: plotly figures in, the same figures out (changed in place and returned); a graph page's
HTML in, the HTML with larger legend and tooltips out; no streamlit.
"""

from __future__ import annotations

import re

from .._extras import require

go = require("plotly.graph_objects", __name__)

__all__ = [
    "PROJECTOR_FONT_SIZE",
    "PROJECTOR_MIN_FONT",
    "TITLE_CHARS",
    "wrap_title",
    "projector_fonts",
    "projector_graph_page",
]

#: Base font size of a projected figure (ticks and axis titles inherit it).
PROJECTOR_FONT_SIZE = 20
#: The smallest text a projected figure (or table) may hold, in px.
PROJECTOR_MIN_FONT = 16
#: Characters of a title line: a 24 px title runs ~10.5 px a character, and a full-width figure
#: is ~460 px wide in an 800 px window beside the sidebar (~780 px at 1280).
TITLE_CHARS = 36


def _visible_len(text: str) -> int:
    return len(re.sub(r"<[^>]*>", "", text))


def wrap_title(text: str, width: int = TITLE_CHARS) -> str:
    """Break ``text`` with ``<br>`` between words so that no line shows more than ``width``
    characters (tags such as ``<sup>`` are not counted and never split; a single longer word
    keeps its own line; a no-break space joins). Plotly does not wrap titles: an unbroken one
    is clipped."""
    if width < 1:
        raise ValueError(f"wrap_title: width must be ≥ 1, got {width}")
    lines: list[str] = []
    for part in text.split("<br>"):
        line = ""
        for word in re.split(r" (?![^<]*>)", part):
            if line and _visible_len(line) + 1 + _visible_len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def projector_fonts(fig: go.Figure, size: int = PROJECTOR_MIN_FONT + 2) -> go.Figure:
    """Raise every font of ``fig`` to at least ``size`` px, set explicitly (a template, such as
    Streamlit's chart theme, cannot shrink it again): the base font, ticks and axis titles to
    at least `PROJECTOR_FONT_SIZE` (ticks the figure sized itself: ``size``); legend, hover labels, trace text, colour bars and
    annotations to at least ``size``. A title is wrapped at `TITLE_CHARS` (unless it holds its
    own line breaks) and set above the plot area, the top margin made to hold it; a horizontal
    legend above the plot moves under it."""
    lay = fig.layout

    def grow(font, least: int) -> None:
        font.size = max(font.size if font.size is not None else 0, least)

    grow(lay.font, PROJECTOR_FONT_SIZE)
    grow(lay.legend.font, size)
    grow(lay.hoverlabel.font, size)
    for ax in [*fig.select_xaxes(), *fig.select_yaxes()]:
        # Ticks a figure made small on purpose (many long labels) grow only to ``size``.
        grow(ax.tickfont, PROJECTOR_FONT_SIZE if ax.tickfont.size is None else size)
        grow(ax.title.font, PROJECTOR_FONT_SIZE)
    for tr in fig.data:
        if hasattr(tr, "textfont"):
            grow(tr.textfont, size)
        for cb in (getattr(tr, "colorbar", None), getattr(getattr(tr, "marker", None), "colorbar", None)):
            if cb is not None and cb.to_plotly_json():  # only a colour bar the figure sets up
                grow(cb.tickfont, size)
    for an in lay.annotations:
        grow(an.font, size)
    if lay.legend.orientation == "h" and lay.legend.y is not None and lay.legend.y > 1:
        # Above the plot, larger entries run into it: at the foot of the figure instead, where
        # plotly grows the bottom margin to hold it under the tick labels and axis title.
        lay.legend.update(y=0, yref="container", yanchor="bottom")
    text = lay.title.text
    if text:
        if "<br>" not in text:
            lay.title.text = wrap_title(text)
        lay.title.update(x=0.01, xanchor="left", y=1.0, yref="paper", yanchor="bottom", automargin=True)
        if lay.title.pad.b is None:
            lay.title.pad.b = 12
    return fig


_GRAPH_CSS = f"""
<style>
  #crbc-head {{ font-size: {PROJECTOR_MIN_FONT}px !important; line-height: {PROJECTOR_MIN_FONT + 6}px !important; }}
  #crbc-legend .bar {{ width: 120px !important; height: 12px !important; }}
  #crbc-tools button {{ font-size: {PROJECTOR_MIN_FONT}px !important; }}
  div.vis-tooltip, table.crbc-tab, pre.crbc-anchor {{ font-size: {PROJECTOR_MIN_FONT}px !important; }}
</style>
"""


def projector_graph_page(page: str) -> str:
    """A `crbc_viz.views.graph_view.graph_html` page for a projector: its legend, tools and
    tooltips at `PROJECTOR_MIN_FONT` px. Its node and edge labels are sized by the drawing
    (``graph_drawing(min_label_px=PROJECTOR_MIN_FONT)``: at least that on screen at the fit).

    Raises:
        ValueError: ``page`` has no ``</head>`` (not a graph page).
    """
    if "</head>" not in page:
        raise ValueError("projector_graph_page: the page has no </head>; expected a graph_html page")
    return page.replace("</head>", _GRAPH_CSS + "</head>", 1)
