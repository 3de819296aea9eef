"""The Across training page following a store (AppTest; the browser run is
tests/e2e/test_training_live.py): "follow latest" keeps the drill-down on the newest train step
as steps land, from the URL too; without it the chosen step stays; the page says when the
store changed and how many sources are still being written, from the watcher's status file,
which it reads only inside the allowed folders."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.store import ingest
from helpers import ROOT


def step_file(folder, train_step: int):
    rows = []
    for g in range(2):
        for r in range(2):
            for i in range(2):
                rows.append(
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
                )
    path = folder / f"step_{train_step}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
    return path


@pytest.fixture
def live_store(tmp_path, monkeypatch):
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(tmp_path / "data"))
    logs, store = tmp_path / "data" / "logs", tmp_path / "data" / "store"
    logs.mkdir(parents=True)
    ingest(store, [step_file(logs, 0), step_file(logs, 1)])
    return logs, store


def page(query: dict) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update(query)
    at.run()
    at.switch_page("crbc_viz/app/app_pages/training.py")
    at.run()
    assert not at.exception, at.exception
    return at


def captions(at) -> str:
    return " | ".join(c.value for c in at.caption)


def test_follow_latest_moves_the_drill_down_to_new_steps(live_store):
    logs, store = live_store
    at = page({"store": str(store), "follow": "1"})
    assert at.toggle(key="training_follow").value is True
    box = at.selectbox(key="training_step")
    assert box.value == 1 and box.disabled
    ingest(store, [step_file(logs, 2)])
    at.run()
    assert not at.exception
    assert at.selectbox(key="training_step").value == 2
    assert any("train_step 2" in s.value for s in at.subheader)
    assert at.query_params.get("follow") in ("1", ["1"])


def test_without_follow_the_chosen_step_stays(live_store):
    logs, store = live_store
    at = page({"store": str(store), "tstep": "0"})
    assert at.toggle(key="training_follow").value is False
    assert at.selectbox(key="training_step").value == 0
    ingest(store, [step_file(logs, 2)])
    at.run()
    box = at.selectbox(key="training_step")
    assert box.value == 0 and list(box.options) == ["0", "1", "2"] and not box.disabled
    at.toggle(key="training_follow").set_value(True).run()
    assert at.selectbox(key="training_step").value == 2


def test_a_bad_follow_value_in_the_link_is_refused(live_store):
    _, store = live_store
    at = page({"store": str(store), "follow": "yes"})
    assert any("follow = 'yes' from the link is refused (allowed: 0 or 1)" in w.value for w in at.warning)
    assert at.toggle(key="training_follow").value is False


def test_the_page_says_when_the_store_changed_and_what_is_being_written(live_store):
    _, store = live_store
    at = page({"store": str(store)})
    assert "Store last changed" in captions(at) and "no source being written" in captions(at)
    now = dt.datetime.now(dt.UTC).isoformat()
    status = {
        "updated_at": now,
        "heartbeat_s": 30.0,
        "pending": 2,
        "pending_paths": ["step_3.jsonl", "step_4.jsonl"],
        "ingested": 2,
        "replaced": 0,
        "present": 0,
        "failed": 0,
    }
    (store / "watch.json").write_text(json.dumps(status))
    at.run()
    assert "2 sources still being written" in captions(at) and "followed by ingest --watch" in captions(at)
    (store / "watch.json").write_text(json.dumps({**status, "stopped_at": now}))
    at.run()
    assert "the ingest --watch that followed it stopped" in captions(at)


def test_a_status_file_linked_out_of_the_allowed_folders_is_not_read(live_store, tmp_path):
    _, store = live_store
    outside = tmp_path / "secret.json"
    outside.write_text('{"pending": 7}')
    os.symlink(outside, store / "watch.json")
    at = page({"store": str(store)})
    assert "resolves outside the allowed data folders; not read" in captions(at)
