"""Loaders: every format, every validation error named with file, line/row and field."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest

import crbc_viz
from crbc_viz.io import LoadError, anchor_key, load_rollouts
from helpers import TOY, write_jsonl


def rows_ok():
    return [json.loads(line) for line in TOY.read_text().splitlines()]


def problems_of(path, **kw):
    with pytest.raises(LoadError) as exc:
        load_rollouts(path, **kw)
    return exc.value.problems, str(exc.value)


def test_toy_loads_in_every_format(tmp_path):
    ref = load_rollouts(TOY)
    df = pd.DataFrame(rows_ok())
    df.to_parquet(tmp_path / "t.parquet")
    df.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "t.json").write_text(json.dumps(rows_ok()))
    (tmp_path / "o.json").write_text(json.dumps({"steps": rows_ok()}))
    with gzip.open(tmp_path / "t.jsonl.gz", "wt") as fh:
        fh.write(TOY.read_text())
    # Trajectory rows: one object per trajectory with a "steps" list.
    trajs = {}
    for r in rows_ok():
        t = trajs.setdefault(
            r["traj_id"], {"group_id": r["group_id"], "traj_id": r["traj_id"], "run_id": "toy", "steps": []}
        )
        t["steps"].append({k: v for k, v in r.items() if k not in ("group_id", "traj_id", "run_id")})
    write_jsonl(tmp_path / "traj.jsonl", list(trajs.values()))
    want = crbc_viz.score(ref, "crbc").advantage
    for name in ("t.parquet", "t.csv", "t.json", "o.json", "t.jsonl.gz", "traj.jsonl"):
        b = load_rollouts(tmp_path / name)
        assert b.num_steps == 15 and b.num_trajectories == 4, name
        assert list(b.traj_success) == [True, False, False, True], name
        np.testing.assert_allclose(crbc_viz.score(b, "crbc").advantage, want, atol=1e-12, err_msg=name)


def test_rows_are_sorted_and_ids_follow_first_occurrence(tmp_path):
    rows = rows_ok()[::-1]
    b = load_rollouts(write_jsonl(tmp_path / "rev.jsonl", rows))
    assert list(b.trajectories["traj_id"]) == ["t4", "t3", "t2", "t1"]
    assert list(b.steps["step_idx"][:5]) == [0, 1, 2, 3, 4]


def test_missing_required_field_names_line_and_field(tmp_path):
    rows = rows_ok()
    del rows[2]["reward"]
    probs, text = problems_of(write_jsonl(tmp_path / "m.jsonl", rows))
    assert any(p.line == 3 and p.field == "reward" and "missing" in p.message for p in probs)
    assert "m.jsonl:line 3: field 'reward'" in text


def test_required_column_absent_everywhere(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "traj_id"} for r in rows_ok()]
    probs, text = problems_of(write_jsonl(tmp_path / "nt.jsonl", rows))
    assert probs[0].field == "traj_id" and "every row" in probs[0].message


@pytest.mark.parametrize(
    "field,value,expect",
    [
        ("reward", "1.0", "expected a number"),
        ("reward", True, "bool"),
        ("step_idx", 1.5, "expected an integer"),
        ("step_idx", "0", "expected an integer"),
        ("group_id", 1.5, "expected a string id"),
        ("traj_id", None, "missing"),
        ("done", "maybe", "expected true/false"),
        ("action", 3, "expected a string"),
        ("anchor_obs", 3.5, "expected a string, array or object"),
    ],
)
def test_wrong_types(tmp_path, field, value, expect):
    rows = rows_ok()
    rows[4][field] = value
    probs, _ = problems_of(write_jsonl(tmp_path / "w.jsonl", rows))
    assert any(p.line == 5 and p.field == field and expect in p.message for p in probs), probs


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_reward(tmp_path, value):
    lines = TOY.read_text().splitlines()
    lines[6] = lines[6].replace('"reward": 0.0', f'"reward": {value}')
    (tmp_path / "nf.jsonl").write_text("\n".join(lines) + "\n")
    probs, _ = problems_of(tmp_path / "nf.jsonl")
    assert any(
        p.line == 7 and p.field == "reward" and ("finite" in p.message or "missing" in p.message)
        for p in probs
    )


def test_duplicate_and_gapped_step_idx(tmp_path):
    rows = rows_ok()
    rows[1]["step_idx"] = 0  # t1: 0, 0, 2 → duplicate
    rows[7]["step_idx"] = 5  # t3: 0, 5, 2, 3 → not contiguous
    probs, _ = problems_of(write_jsonl(tmp_path / "d.jsonl", rows))
    assert any(p.field == "step_idx" and "duplicate" in p.message and p.line in (1, 2) for p in probs)
    assert any(p.field == "step_idx" and "contiguous" in p.message for p in probs)


def test_negative_step_idx(tmp_path):
    rows = rows_ok()
    rows[0]["step_idx"] = -1
    probs, _ = problems_of(write_jsonl(tmp_path / "n.jsonl", rows))
    assert any(p.line == 1 and p.field == "step_idx" and ">= 0" in p.message for p in probs)


def test_every_problem_is_collected(tmp_path):
    rows = rows_ok()
    rows[0]["reward"] = "x"
    rows[5]["group_id"] = None
    lines = [json.dumps(r) for r in rows] + ["{not json", "[1, 2]"]
    (tmp_path / "many.jsonl").write_text("\n".join(lines) + "\n")
    probs, text = problems_of(tmp_path / "many.jsonl")
    found = {(p.line, p.field) for p in probs}
    assert {(1, "reward"), (6, "group_id"), (16, None), (17, None)} <= found
    assert "invalid JSON" in text and "expected a JSON object" in text


def test_empty_and_unreadable_files(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    assert "no step rows" in problems_of(tmp_path / "e.jsonl")[1]
    (tmp_path / "fake.jsonl.gz").write_text("plain text")
    assert "not gzip" in problems_of(tmp_path / "fake.jsonl.gz")[1]
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    assert "UTF-8" in problems_of(tmp_path / "bin.jsonl")[1]
    (tmp_path / "x.txt").write_text("a")
    assert "unknown file type" in problems_of(tmp_path / "x.txt")[1]
    assert "no such file" in problems_of(tmp_path / "absent.jsonl")[1]
    (tmp_path / "bad.parquet").write_text("nope")
    assert "Parquet" in problems_of(tmp_path / "bad.parquet")[1]
    (tmp_path / "bad.json").write_text('{"a": 1}')
    assert "'steps' array" in problems_of(tmp_path / "bad.json")[1]
    (tmp_path / "trunc.json").write_text('[{"group_id": "g"')
    assert "invalid JSON" in problems_of(tmp_path / "trunc.json")[1]


def test_csv_rows_and_text_values(tmp_path):
    df = pd.DataFrame(rows_ok())
    df["reward"] = df["reward"].astype(object)
    df.loc[3, "reward"] = "abc"
    df.to_csv(tmp_path / "c.csv", index=False)
    probs, text = problems_of(tmp_path / "c.csv")
    assert any(p.where == "row" and p.line == 4 and p.field == "reward" for p in probs)
    assert "c.csv:row 4: field 'reward'" in text


def test_parquet_row_numbers(tmp_path):
    df = pd.DataFrame(rows_ok())
    df["step_idx"] = df["step_idx"].astype(float)
    df.loc[2, "step_idx"] = 0.5
    df.to_parquet(tmp_path / "p.parquet")
    probs, _ = problems_of(tmp_path / "p.parquet")
    assert any(p.where == "row" and p.line == 2 and p.field == "step_idx" for p in probs)


def test_lenient_skips_bad_rows_and_their_trajectories(tmp_path):
    rows = rows_ok()
    rows[4]["reward"] = "bad"  # inside t2
    b = load_rollouts(write_jsonl(tmp_path / "l.jsonl", rows), lenient=True)
    assert b.num_trajectories == 3 and "t2" not in set(b.steps["traj_id"])
    assert len(b.skipped) == 1 and "line 5" in b.skipped[0]


def test_success_from_return_and_truncation(tmp_path):
    rows = rows_ok()
    for r in rows:
        r.pop("success")
    b = load_rollouts(write_jsonl(tmp_path / "s.jsonl", rows))
    assert list(b.traj_success) == [True, False, False, True]  # sum of rewards > 0
    rows[2]["done"] = False  # t1 truncated
    b = load_rollouts(write_jsonl(tmp_path / "s2.jsonl", rows))
    assert b.traj_truncated[0] and not b.traj_truncated[1]


def test_anchor_keys_canonical_and_precomputed(tmp_path):
    assert anchor_key("room  \n") == anchor_key("room")
    assert anchor_key({"b": 1, "a": 2}) == anchor_key({"a": 2, "b": 1})
    assert anchor_key([[1, 2], [3, 4]]) == anchor_key(np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert anchor_key([[1, 2], [3, 4]]) != anchor_key([1, 2, 3, 4])  # shape is hashed
    assert len(anchor_key("x")) == 16
    rows = rows_ok()
    for r in rows:
        r["state_hash"] = "h-" + r.pop("anchor_obs")
    b = load_rollouts(write_jsonl(tmp_path / "k.jsonl", rows))
    ref = load_rollouts(TOY)
    np.testing.assert_allclose(crbc_viz.score(b, "crbc").advantage, crbc_viz.score(ref, "crbc").advantage)


def test_anchors_merge_only_within_a_group(tmp_path):
    rows = rows_ok() + [dict(r, group_id="other") for r in rows_ok()]
    g = crbc_viz.build_graph(load_rollouts(write_jsonl(tmp_path / "two.jsonl", rows)))
    assert g.num_nodes == 10 and g.num_groups == 2


def test_missing_anchors_warn_and_do_not_merge(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "anchor_obs"} for r in rows_ok()]
    b = load_rollouts(write_jsonl(tmp_path / "na.jsonl", rows))
    assert b.warnings and "no anchor_obs" in b.warnings[0]
    assert crbc_viz.build_graph(b).num_nodes == 15


def test_unknown_fields_are_kept(tmp_path):
    rows = [dict(r, my_extra={"x": 1}) for r in rows_ok()]
    b = load_rollouts(write_jsonl(tmp_path / "x.jsonl", rows))
    assert "my_extra" in b.steps.columns


def test_json_array_with_lone_surrogate_loads_with_a_note(tmp_path):
    rows = rows_ok()
    text = json.dumps(rows).replace('"a"', '"a\\ud800"', 1)  # a lone UTF-16 surrogate escape
    (tmp_path / "sur.json").write_text(text)
    b = load_rollouts(tmp_path / "sur.json")
    assert b.num_steps == 15 and "a\ufffd" in set(b.steps["action"])
    assert any("surrogate" in w for w in b.warnings)


def test_json_document_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    (tmp_path / "big.json").write_text(json.dumps(rows_ok() * 2000))  # ~3 MiB
    monkeypatch.setenv("CRBC_VIZ_MAX_JSON_MB", "1")
    probs, text = problems_of(tmp_path / "big.json")
    assert "larger than the limit of 1 MiB" in text and "JSONL" in text
    monkeypatch.setenv("CRBC_VIZ_MAX_JSON_MB", "8")
    with pytest.raises(LoadError, match="duplicate step_idx"):  # within the limit it parses
        load_rollouts(tmp_path / "big.json")
