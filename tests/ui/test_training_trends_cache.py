"""The Across training page draws its trends figure once per store state: a rerun that
changes nothing the figure shows (a group chosen in the drill-down) reuses it, and a commit to
the store (a new train step landing) draws it again with the new step."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.store import ingest
from crbc_viz.views import training as training_views
from helpers import ROOT


def _step_file(folder, train_step: int):
    rows = [
        {
            "run_id": "live",
            "train_step": train_step,
            "group_id": f"g{g}",
            "traj_id": f"t{train_step}-{g}-{r}",
            "step_idx": i,
            "action": "a" if i else "b",
            "anchor_obs": f"s{g}{i}",
            "reward": float(r == 0 and i == 1),
            "done": i == 1,
            "success": r == 0,
        }
        for g in range(2)
        for r in range(2)
        for i in range(2)
    ]
    path = folder / f"step_{train_step}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
    return path


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(tmp_path / "data"))
    logs, store = tmp_path / "data" / "logs", tmp_path / "data" / "store"
    logs.mkdir(parents=True)
    ingest(store, [_step_file(logs, 0), _step_file(logs, 1)])
    return logs, store


def _xs(x) -> list:
    """A trace's x as sent: a list, or plotly's typed array (``{"dtype", "bdata"}``)."""
    if isinstance(x, dict):
        return np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]).tolist()
    return list(x)


def _drawn_steps(at) -> set[int]:
    (chart,) = at.get("plotly_chart")
    return {int(x) for tr in json.loads(chart.proto.spec)["data"] for x in _xs(tr["x"])}


def test_the_figure_is_drawn_once_per_store_state(store, monkeypatch):
    logs, folder = store
    built = []
    real = training_views.trends_figure
    monkeypatch.setattr(
        training_views, "trends_figure", lambda *a, **k: (built.append(k.get("highlight")), real(*a, **k))[1]
    )
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"store": str(folder), "tstep": "0"})
    at.switch_page("crbc_viz/app/app_pages/training.py")
    at.run()
    assert not at.exception, at.exception
    assert built == [0] and _drawn_steps(at) == {0, 1}
    at.selectbox(key="training_group").select("g1").run()  # the drill-down only
    assert not at.exception and built == [0]
    ingest(folder, [_step_file(logs, 2)])  # a train step lands: the same view, a new store state
    at.run()
    assert not at.exception and built == [0, 0] and _drawn_steps(at) == {0, 1, 2}
