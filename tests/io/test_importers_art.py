"""OpenPipe ART trajectory logs, written by ART's own writers (tests/fixtures/generators/art_gen.py:
``write_trajectory_groups_parquet`` of openpipe-art 0.5.7 (Parquet v1) and 0.5.18 (v2),
``serialize_trajectory_groups`` of 0.5.4 (JSON Lines)): ``ingest`` then ``info`` equal what the
scripted rollouts did (truth_*.json); one step per model turn, anchored on the environment's
message before it; success is the ``win`` metric, not the (progress) reward."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crbc_viz.errors import LoadError
from crbc_viz.io.importers import detect, expand_sources, import_source

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/art"
TRUTH = {v: json.loads((FIX / f"truth_{v}.json").read_text()) for v in ("v1", "v2", "jsonl")}


def _file(v: str) -> Path:
    return FIX / TRUTH[v]["file"]


def cli(*argv: str) -> tuple[int, str, str]:
    """``crbc-viz ARGV`` in this process (the command's own code): (exit, stdout, stderr)."""
    from crbc_viz.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("fmt", ["auto", "art"])
@pytest.mark.parametrize("version", ["v1", "v2", "jsonl"])
def test_ingest_info_equals_truth(tmp_path, version, fmt):
    truth = TRUTH[version]
    store = str(tmp_path / "store")
    rc, _, err = cli("ingest", str(_file(version)), "--store", store, "--format", fmt, "-q")
    assert rc == 0, err
    rc, out, err = cli("info", "--store", store, "--train-step", str(truth["train_step"]), "--json")
    assert rc == 0, err
    info = json.loads(out)
    for k in ("groups", "trajectories", "steps", "truncated", "truncation_known"):
        assert info[k] == truth[k], (version, k)
    assert info["matching"]["successes"] == truth["successes"]


@pytest.mark.parametrize("version", ["v1", "v2", "jsonl"])
def test_detected(version):
    assert detect(str(_file(version))) == "art"


def _rows(path, **options):
    (src,) = expand_sources([str(path)])
    return import_source(src, **options).raw.records


@pytest.mark.parametrize("version", ["v1", "v2", "jsonl"])
def test_per_turn_anchors_equal_truth(version):
    rows = _rows(_file(version))
    got = [list(t.sort_values("step_idx")["anchor_obs"]) for _, t in rows.groupby("traj_id", sort=False)]
    assert got == TRUTH[version]["anchors"]


def test_layout_gives_step_split_and_run():
    rows = _rows(_file("v2"))
    assert set(rows["train_step"]) == {12}
    assert set(rows["split"]) == {"train"}
    assert set(rows["run_id"]) == {"corridor/agent-002"}
    assert rows["group_id"].iloc[0] == "train/g0"


def test_tool_calls_are_the_action_and_text_turns_have_none():
    v2 = _rows(_file("v2"))
    first = json.loads(v2["action"].iloc[0])
    assert first == [{"name": "move", "arguments": json.dumps({"direction": "right"})}]
    assert _rows(_file("v1"))["action"].isna().all()


def test_identical_rollouts_are_two_trajectories():
    """Rollouts 0 and 2 of the first v1 group took the same walk: both are real trajectories."""
    rows = _rows(_file("v1"))
    g0 = rows[rows["group_id"] == "train/g0"]
    assert g0["traj_id"].nunique() == 4


def test_success_is_the_win_metric_not_the_reward():
    """A walk that never reached the goal has a positive progress reward and fails."""
    rows = _rows(_file("v1"))
    last = rows.groupby("traj_id", sort=False).last()
    assert ((last["reward"] > 0) & ~last["success"].astype(bool)).any()
    assert int(last["success"].sum()) == TRUTH["v1"]["successes"]


def _rewrite(src: Path, dest: Path, change) -> Path:
    t = pq.read_table(src)
    rows = t.to_pylist()
    change(rows)
    dest.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), dest)
    return dest


def _with_metrics(tmp_path, update) -> Path:
    def change(rows):
        for r in rows:
            m = json.loads(r["metrics"])
            update(m)
            r["metrics"] = json.dumps(m)

    return _rewrite(_file("v1"), tmp_path / "m/p/models/n/trajectories/train/0003.parquet", change)


def test_success_column_overrides(tmp_path):
    p = _with_metrics(tmp_path, lambda m: m.update(solved=1))
    # two metrics named as a success: neither is guessed
    assert "success" not in _rows(p).columns
    rows = _rows(p, success_column="solved")
    assert rows["success"].all()


def test_a_metric_merely_containing_a_success_word_is_not_guessed(tmp_path):
    p = _with_metrics(tmp_path, lambda m: m.update(format_pass=m.pop("win")))
    assert "success" not in _rows(p).columns  # reward > threshold instead


def test_success_column_naming_no_metric_is_an_error(tmp_path):
    store = str(tmp_path / "store")
    rc, _, err = cli("ingest", str(_file("v2")), "--store", store, "--success-column", "nope", "-q")
    assert rc == 2 and "metrics.nope" in err


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("reward", "lots", "row 1: field 'reward'"),
        ("metrics", "{not json", "row 1: field 'metrics'"),
        ("group_index", -1, "row 1: field 'group_index'"),
        ("messages", [{"role": None, "content": "x"}], "row 1: field 'messages[0]'"),
    ],
)
def test_a_bad_value_is_one_line_naming_file_row_field(tmp_path, field, value, said):
    t = pq.read_table(_file("v1"))
    rows = t.to_pylist()
    if field == "reward":  # one column type: rewards as the text of numbers (read as numbers)
        for r in rows:
            r["reward"] = str(r["reward"])
    rows[1][field] = value
    dest = tmp_path / "0003.parquet"
    pq.write_table(pa.Table.from_pylist(rows), dest)
    with pytest.raises(LoadError) as e:
        _rows(dest)
    assert said in str(e.value) and str(dest) in str(e.value)


def test_a_bad_legacy_value_names_its_line_and_trajectory(tmp_path):
    lines = _file("jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["trajectories"][1]["metrics"] = ["not", "an", "object"]
    lines[1] = json.dumps(rec)
    p = tmp_path / "0001.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(LoadError) as e:
        _rows(p)
    assert "line 2: field 'trajectories[1].metrics'" in str(e.value)


def test_other_trajectories_files_are_not_claimed(tmp_path):
    """A JSON Lines file whose lines hold just ``trajectories`` is ART's only when they carry
    ``messages_and_choices``."""
    p = tmp_path / "0001.jsonl"
    p.write_text(json.dumps({"trajectories": [{"steps": []}]}) + "\n")
    with pytest.raises(LoadError):
        detect(str(p))


def test_no_trainable_message_reads_every_assistant_turn(tmp_path):
    def change(rows):
        for r in rows:
            for m in r["messages"]:
                m["trainable"] = False

    p = _rewrite(_file("v1"), tmp_path / "0003.parquet", change)
    (src,) = expand_sources([str(p)])
    imp = import_source(src)
    assert len(imp.raw.records) == TRUTH["v1"]["steps"]
    assert any("mark no message trainable" in n for n in imp.notes)


def test_an_exception_only_group_is_named():
    (src,) = expand_sources([str(_file("v1"))])
    assert any("group_index value(s) without a row (2)" in n for n in import_source(src).notes)


def test_a_bad_legacy_tool_call_names_its_message(tmp_path):
    lines = _file("jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["trajectories"][1]["messages_and_choices"][2]["message"]["tool_calls"] = "{bad"
    lines[0] = json.dumps(rec)
    p = tmp_path / "0001.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(LoadError) as e:
        _rows(p)
    assert "line 1: field 'trajectories[1].messages_and_choices[2].tool_calls'" in str(e.value)
