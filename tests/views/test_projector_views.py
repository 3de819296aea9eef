"""Projector mode in the views (no rendering): `projector_fonts` leaves no font of a figure
under 16 px and sets each size explicitly (so Streamlit's chart theme, a template, cannot
shrink it), keeps titles and legends off the plot; the trajectory table takes its text size."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz import teaching as T
from crbc_viz.views.compare import (
    depth_error_figure,
    rank_matrix_figure,
    scatter_figure,
    step_estimator_figure,
)
from crbc_viz.views.projector import projector_fonts
from crbc_viz.views.trajectories import step_frame, trajectory_table


@pytest.fixture(scope="module")
def toy():
    g = build_graph(load_rollouts(T.TOY_PATH))
    return g, {n: score(g, n, backend="numpy") for n in ("crbc", "visit_local")}


def explicit_sizes(fig: go.Figure) -> list:
    lay = fig.layout
    sizes = [lay.font.size, lay.legend.font.size, lay.hoverlabel.font.size]
    for ax in [*fig.select_xaxes(), *fig.select_yaxes()]:
        sizes += [ax.tickfont.size, ax.title.font.size]
    sizes += [an.font.size for an in lay.annotations]
    sizes += [tr.textfont.size for tr in fig.data if hasattr(tr, "textfont")]
    return sizes


def compare_figures(toy) -> list[go.Figure]:
    g, res = toy
    df = step_frame(g, res)
    m = pd.DataFrame([[1.0, 0.5], [0.5, 1.0]], index=["crbc", "visit_local"], columns=["crbc", "visit_local"])
    heat = pd.DataFrame({"crbc": [0.1, -0.2], "visit_local": [0.3, 0.0]}, index=["step 0 · a", "step 1 · b"])
    return [
        scatter_figure(
            df, "crbc", "visit_local", title="crbc vs visit_local · credit, every step of the group"
        ),
        depth_error_figure(
            list(range(4)), np.array([1.0, 0.1, 0.01, 0.001]), np.array([2.0, 1.0, 0.5, 0.2]), 1
        ),
        rank_matrix_figure(m, title="Spearman ρ"),
        step_estimator_figure(heat, title="Rollout t1: step credit under each estimator (row-scaled)"),
    ]


def test_projector_fonts_sets_every_size_explicitly_and_at_least_16(toy):
    for fig in compare_figures(toy):
        before = explicit_sizes(fig)
        assert None in before or min(before) < 16  # the screen figures rely on defaults
        sizes = explicit_sizes(projector_fonts(fig))
        assert None not in sizes and min(sizes) >= 16, (fig.layout.title.text, sizes)


def test_projector_titles_wrap_above_the_plot_and_the_legend_moves_under_it(toy):
    scatter = compare_figures(toy)[0]
    assert scatter.layout.legend.y > 1  # above the plot on screen
    fig = projector_fonts(scatter)
    title = fig.layout.title
    assert title.text == "crbc vs visit_local · credit, every<br>step of the group"
    assert title.yref == "paper" and title.yanchor == "bottom" and title.automargin is True
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0
    # No colour bar appears where the figure had none (markers of one colour).
    assert all(not tr.marker.colorbar.to_plotly_json() for tr in fig.data)


def test_trajectory_table_text_size(toy):
    g, res = toy
    sizes = lambda page: {int(x) for x in re.findall(r"font-size:(\d+)px", page)}  # noqa: E731
    assert sizes(trajectory_table(g, res)) == {12}
    assert sizes(trajectory_table(g, res, font_px=16)) == {16}
    for bad in (0, 5, 200):
        with pytest.raises(ValueError, match="font_px"):
            trajectory_table(g, res, font_px=bad)
