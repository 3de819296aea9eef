"""tinker-cookbook ``train_rollout_summaries.jsonl``, written by the cookbook's own
``serialize_rollout_summaries`` and ``TrainingRunStore.write_rollouts``
(tests/fixtures/generators/tinker_cookbook_gen.py): ``ingest`` then ``info`` equal what the
scripted rollouts did (truth.json); a ``stop/<limit>`` metric is a truncation, success is the
last transition's ``correct`` metric, the group-level reward sits on the last step."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from crbc_viz.errors import LoadError
from crbc_viz.io.importers import detect, expand_sources, import_source

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/tinker_cookbook"
TRUTH = json.loads((FIX / "truth.json").read_text())
FILE = FIX / TRUTH["file"]


def cli(*argv: str) -> tuple[int, str, str]:
    from crbc_viz.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("fmt", ["auto", "tinker-cookbook"])
def test_ingest_info_equals_truth(tmp_path, fmt):
    store = str(tmp_path / "store")
    rc, _, err = cli("ingest", str(FILE), "--store", store, "--format", fmt, "-q")
    assert rc == 0, err
    rc, out, err = cli("info", "--store", store, "--train-step", str(TRUTH["train_step"]), "--json")
    assert rc == 0, err
    info = json.loads(out)
    for k in ("groups", "trajectories", "steps", "truncated", "truncation_known"):
        assert info[k] == TRUTH[k], k
    assert info["matching"]["successes"] == TRUTH["successes"]


def test_detected():
    assert detect(str(FILE)) == "tinker-cookbook"


def _rows(path, **options):
    (src,) = expand_sources([str(path)])
    return import_source(src, **options).raw.records


def test_returns_and_the_group_reward_on_the_last_step():
    rows = _rows(FILE)
    by = rows.groupby("traj_id", sort=False)
    assert list(by["episode_return"].first()) == TRUTH["returns"]
    assert list(by["reward"].sum()) == TRUTH["returns"]  # step rewards + final_reward


def test_a_limit_stop_is_a_truncation_and_other_ends_are_not():
    rows = _rows(FILE)
    last = rows.groupby("traj_id", sort=False).last()
    assert int((~last["done"].astype(bool)).sum()) == TRUTH["truncated"]
    # the environment's own cap of 3 guesses ends the episode: a termination
    assert bool(last.loc["train/g0/t2", "done"])
    assert not bool(last.loc["train/g2/t1", "done"])  # the runner's max_turns


def test_run_id_is_the_log_folder():
    assert set(_rows(FILE)["run_id"]) == {"log"}


def _edit(tmp_path, change) -> Path:
    recs = [json.loads(x) for x in FILE.read_text().splitlines()]
    change(recs)
    p = tmp_path / "log/iteration_000003/train_rollout_summaries.jsonl"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return p


def test_success_column_names_another_metric(tmp_path):
    def change(recs):
        for r in recs:
            r["steps"][-1]["metrics"]["judge_ok"] = 1.0

    rows = _rows(_edit(tmp_path, change), success_column="judge_ok")
    assert rows["success"].all()


@pytest.mark.parametrize(
    "where, value, said",
    [
        (("steps", 1, "reward"), "lots", "line 2: field 'steps[1].reward'"),
        (("steps", 1, "episode_done"), "maybe", "line 2: field 'steps[1].episode_done'"),
        (("steps", 1, "metrics", "correct"), 0.5, "line 2: field 'steps[1].metrics.correct'"),
        (("group_idx",), -3, "line 2: field 'group_idx'"),
        (("steps", 0, "step_idx"), 4, "line 2: field 'steps[0].step_idx'"),
        (("total_reward",), None, "line 2: field 'total_reward'"),
    ],
)
def test_a_bad_value_is_one_line_naming_file_line_field(tmp_path, where, value, said):
    def change(recs):
        obj = recs[1]
        for k in where[:-1]:
            obj = obj[k]
        obj[where[-1]] = value

    p = _edit(tmp_path, change)
    with pytest.raises(LoadError) as e:
        _rows(p)
    assert said in str(e.value) and str(p) in str(e.value)
