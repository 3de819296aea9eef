"""The charts' module the page loads ahead (`crbc_viz.ui.links.plotly_chunk`): read from the
installed Streamlit's own bundle, or nothing where the bundle does not name one file."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from crbc_viz.ui.links import chunk_in, plotly_chunk


def _static(tmp_path: Path, index: str | None, bundle: str | None, files=()) -> Path:
    js = tmp_path / "static" / "js"
    js.mkdir(parents=True)
    if index is not None:
        (tmp_path / "index.html").write_text(index)
    if bundle is not None:
        (js / "index.AB12.js").write_text(bundle)
    for f in files:
        (js / f).write_text("export default 1;")
    return tmp_path


INDEX = '<script type="module" crossorigin src="./static/js/index.AB12.js"></script>'


def test_the_installed_streamlit_names_its_plotly_chunk():
    rel = plotly_chunk()
    assert rel is not None, "this Streamlit's bundle names no PlotlyChart module: the prefetch is off"
    path = Path(st.__file__).parent / "static" / "static" / "js" / rel[2:]
    assert path.is_file() and path.stat().st_size > 1_000_000  # plotly.js itself is in it
    assert "plotly" in path.read_text(errors="replace")[:5_000_000].lower()


def test_one_named_chunk_is_found(tmp_path):
    st_dir = _static(
        tmp_path, INDEX, 'x=()=>import("./PlotlyChart.Zz_9.js");y="./Other.1.js"', ["PlotlyChart.Zz_9.js"]
    )
    assert chunk_in(st_dir, "PlotlyChart") == "./PlotlyChart.Zz_9.js"


def test_nothing_unless_exactly_one_chunk_is_there(tmp_path):
    assert chunk_in(tmp_path, "PlotlyChart") is None  # no index.html
    a = _static(tmp_path / "a", INDEX, None)
    assert chunk_in(a, "PlotlyChart") is None  # no index script
    b = _static(tmp_path / "b", INDEX, 'import("./PlotlyChart.Q1.js")')
    assert chunk_in(b, "PlotlyChart") is None  # named, but not there
    c = _static(
        tmp_path / "c",
        INDEX,
        '"./PlotlyChart.Q1.js","./PlotlyChart.Q2.js"',
        ["PlotlyChart.Q1.js", "PlotlyChart.Q2.js"],
    )
    assert chunk_in(c, "PlotlyChart") is None  # two: which one the chart imports is unknown
    d = _static(tmp_path / "d", "<html></html>", 'import("./PlotlyChart.Q1.js")', ["PlotlyChart.Q1.js"])
    assert chunk_in(d, "PlotlyChart") is None  # the page names no index script
