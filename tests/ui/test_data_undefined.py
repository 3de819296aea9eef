"""The Data page's group table says "—" for an undefined disagreement (never "None" / NaN),
with a tooltip saying why, through `streamlit.testing.v1.AppTest`."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]


def _rows(group: str, outcomes: list[bool]) -> list[dict]:
    """One rollout per outcome, s0 -a-> s1 -(b if it succeeds else c)-> end."""
    rows = []
    for i, ok in enumerate(outcomes):
        for k, (obs, act) in enumerate((("s0", "a"), ("s1", "b" if ok else "c"))):
            last = k == 1
            rows.append(
                {
                    "run_id": "r",
                    "train_step": 0,
                    "group_id": group,
                    "traj_id": f"{group}-t{i}",
                    "step_idx": k,
                    "anchor_obs": obs,
                    "action": act,
                    "reward": 1.0 if (last and ok) else 0.0,
                    "done": last,
                    "success": ok,
                }
            )
    return rows


def test_undefined_disagreement_reads_as_a_dash_with_its_reason(tmp_path, monkeypatch):
    # "mixed": successes and failures, so both credits vary; "lost": every rollout failed, so
    # every credit is the same and the rank correlation (disagreement) is undefined.
    path = tmp_path / "two_groups.jsonl"
    rows = _rows("mixed", [True, False, True, False]) + _rows("lost", [False, False, False])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(tmp_path))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.query_params["file"] = str(path)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(d for d in at.dataframe if "disagreement" in d.value.columns)
    df = table.value.set_index("group")
    lost = next(g for g in df.index if g.endswith("lost"))
    mixed = next(g for g in df.index if g.endswith("mixed"))
    assert df.loc[lost, "disagreement"] == "—" and df.loc[lost, "sign_agreement"] == "—"
    assert df.loc[mixed, "disagreement"] != "—" and 0.0 <= float(df.loc[mixed, "disagreement"]) <= 2.0
    assert not df.isna().any().any()  # no cell left to be drawn as "None"
    config = json.loads(table.proto.columns)
    assert "undefined" in config["disagreement"]["help"] and "constant" in config["disagreement"]["help"]
    assert "undefined" in config["sign_agreement"]["help"]
