""" "Why this number" on the Trajectories page (AppTest): the chosen step's panel, one section per
estimator shown, with the step's final credit from ESTIMATORS.md §14.4 (toy group)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]
TOY = "sample_rollouts/toy/toy_group.jsonl"


def test_the_chosen_step_gets_its_panel():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.query_params["file"] = TOY
    at.run()
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    assert not any("crbc-why" in h.proto.body for h in at.get("html"))  # no step chosen yet
    at.selectbox(key="rollout_pick").select("t4").run()
    at.selectbox(key="step_pick").select(2).run()
    assert not at.exception, [e.value for e in at.exception]
    panels = [h.proto.body for h in at.get("html") if "class='crbc-why'" in h.proto.body]
    assert len(panels) == 1
    panel = panels[0]
    for name in ("crbc", "visit_local", "shortest_path"):
        assert f"<section data-estimator='{name}'>" in panel
    # τ4's step 2 is s4 -g→ s1: its CRBC credit 1·A^G + 5·A^S = 0.8660 + 5 × 0.0466 = 1.0990.
    crbc = panel.split("<section data-estimator='crbc'>")[1].split("</section>")[0]
    assert "action <b>g</b> at s4 → s1" in panel and "<b>+1.0990</b>" in crbc
    assert "<td data-col='traj_id' class='t'>t4</td><td data-col='step_idx' class='t'>2</td>" in crbc


def test_an_edge_click_with_its_full_id_still_chooses_its_anchor(monkeypatch):
    """The graph page posts an edge's whole vis id (``src->dst#edge``, which names the panel to
    reopen after the rerun): the click still chooses the edge's source anchor, and the panel's
    close message chooses nothing."""
    from crbc_viz.ui import links

    state = {"_rollout_anchors": {"3": 2}, "_rollout_ids": ["t1", "t2"], "step_pick": 0, "rollout_pick": "t2"}
    monkeypatch.setattr(links.st, "session_state", state)
    state["crbc_events"] = {"pick": {"kind": "edge", "id": "3->FAILURE#6t", "n": 1}}
    links.on_pick()
    assert (state["anchor_pick"], state["step_pick"]) == ("s3", 2)
    before = dict(state)
    state["crbc_events"] = {"pick": {"kind": "why-close", "id": "", "n": 2}}
    links.on_pick()
    assert {k: v for k, v in state.items() if k != "crbc_events"} == {
        k: v for k, v in before.items() if k != "crbc_events"
    }
