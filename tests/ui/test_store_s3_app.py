"""The app opens a log store on S3 (``?store=s3://BUCKET/PREFIX``) when ``CRBC_VIZ_DATA_ROOTS``
holds an ``s3://`` root it lies under, against a real S3 server (tests/s3_server.py), and
refuses one outside every root; the ``:`` of an s3 URL does not split the roots."""

from __future__ import annotations

import json
import os

import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.store import StoreError, ingest
from crbc_viz.ui import files, sources
from helpers import ROOT

pytestmark = pytest.mark.timeout(600)


def step_file(folder, train_step: int):
    """A log of one train step: two groups of two rollouts of two steps."""
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
def s3_store(s3, tmp_path, monkeypatch):
    """A store on S3 under an allowed s3:// root (beside a local root), and one outside it."""
    base = s3.url("app")
    allowed, outside = f"{base}/allowed", f"{base}/allowed-not"
    logs = tmp_path / "logs"
    logs.mkdir()
    ingest(f"{allowed}/store", [step_file(logs, 0), step_file(logs, 1)])
    ingest(f"{outside}/store", [step_file(logs, 2)])
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", os.pathsep.join([str(tmp_path / "local"), allowed]))
    return f"{allowed}/store", f"{outside}/store", tmp_path


def test_the_roots_hold_s3_urls_beside_folders(s3_store):
    store, outside, tmp_path = s3_store
    assert (tmp_path / "local").resolve() in files.allowed_roots()
    assert not any("crbc-test" in str(r) or "s3:" in str(r) for r in files.allowed_roots())
    bucket, prefix = store[len("s3://") :].split("/", 1)
    assert files.allowed_s3_roots() == [(bucket, prefix.rsplit("/", 1)[0])]
    st = sources.open_store(store)
    assert st.summary()["steps"] == 16 and str(st.root) == store
    for bad in (outside, store.rsplit("/", 2)[0], store + "/../../allowed-not/store", "s3://other-bucket/x"):
        with pytest.raises((ValueError, StoreError)) as e:
            sources.open_store(bad)
        assert "\n" not in str(e.value)


def test_the_training_page_opens_a_store_on_s3(s3_store):
    store, outside, _ = s3_store
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"store": store})
    at.run()
    at.switch_page("crbc_viz/app/app_pages/training.py")
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "Store last changed" in text
    # a group of the store opens on the Graph page through its reference
    ref = sources.store_group_ref(store, "live", 1, "g0")
    src = sources.resolve(ref)
    assert src.is_store and sources.open_batch(src.key).num_steps == 4  # 2 rollouts of 2 steps
    graph = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    graph.query_params.update({"file": ref})
    graph.run()
    graph.switch_page("crbc_viz/app/app_pages/graph.py")
    graph.run()
    assert not graph.exception and not graph.error, (graph.exception, [e.value for e in graph.error])
    assert any("live/1/g0" in c.value for c in graph.sidebar.caption)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"store": outside})
    at.run()
    at.switch_page("crbc_viz/app/app_pages/training.py")
    at.run()
    assert any("outside the allowed data folders" in e.value for e in at.error)
