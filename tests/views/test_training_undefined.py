"""The Across-training drill-down and trends where the trainer logged no advantage (the bundled
Sokoban sample): the table shows a dash with a tooltip, never "None", and the trends figure has
no legend entry for a line it cannot draw."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crbc_viz.views.training import GROUP_COLUMNS, METRICS, UNDEFINED, groups_table, trends_figure


def _groups(adv) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": ["r", "r"],
            "train_step": [0, 0],
            "group_id": ["g0", "g1"],
            "disagreement": [0.5, 1.0],
            "success_rate": [0.5, 1.0],
            "trainer_adv_abs_mean": adv,
        }
    )


def test_no_trainer_advantage_reads_as_a_dash_with_its_reason():
    for adv in ([None, None], [np.nan, np.nan]):
        t = groups_table(_groups(pd.Series(adv, dtype=object if adv[0] is None else float)))
        assert t["|trainer adv|"].tolist() == [UNDEFINED, UNDEFINED]
        assert "None" not in t.astype(str).to_numpy().ravel().tolist()
    t = groups_table(_groups([0.25, None]))
    assert t["|trainer adv|"].tolist() == ["0.250", UNDEFINED]
    tip = {h: tip for _, h, tip in GROUP_COLUMNS}["|trainer adv|"]
    assert UNDEFINED in tip and "no advantage" in tip
    # Logged everywhere: the column stays numeric.
    assert groups_table(_groups([0.25, 0.5]))["|trainer adv|"].tolist() == [0.25, 0.5]


def _steps(runs) -> pd.DataFrame:
    rows = []
    for r in runs:
        for ts in range(3):
            rows.append(
                {
                    "run_id": r,
                    "train_step": ts,
                    "success_rate": 0.1 * ts,
                    "credit_abs_mean": 0.2,
                    "trainer_adv_abs_mean": np.nan,
                }
            )
    return pd.DataFrame(rows)


def test_no_legend_entry_for_a_line_never_drawn():
    fig = trends_figure(_steps(["r"]), list(METRICS))
    names = [tr.name for tr in fig.data if tr.showlegend is not False]
    assert METRICS["trainer_adv_abs_mean"] not in names
    assert METRICS["success_rate"] in names
    assert all(np.isfinite(np.asarray(tr.y, dtype=float)).any() for tr in fig.data)


def test_several_runs_no_empty_panel():
    fig = trends_figure(_steps(["a", "b"]), ["trainer_adv_abs_mean", "success_rate"])
    titles = [a.text for a in fig.layout.annotations]
    assert METRICS["trainer_adv_abs_mean"] not in titles
    shown = [tr.name for tr in fig.data if tr.showlegend is not False]
    assert shown == ["a", "b"]  # one legend entry per run, each on a drawn line
