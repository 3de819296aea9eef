"""Multi-turn logs read as turns, with history-free anchors (SCHEMA.md: a turn's anchor is the
environment's last message before it, never the conversation so far).

Fixtures written by each trainer's own code (tests/fixtures/generators/*_gen.py); the expected
values are the generators' truth.json: what the environments recorded while the trainers ran
(turns, solved, how each episode ended, the message each turn answered).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from crbc_viz.cli import main
from crbc_viz.io.assemble import build_batch
from crbc_viz.io.importers import detect, expand_sources, import_source
from helpers import ROOT

FIX = ROOT / "tests" / "fixtures"
KEYS = ("groups", "trajectories", "steps", "successes", "truncated")


def _truth(name: str) -> dict:
    return json.loads((FIX / name / "truth.json").read_text())


def _ingest_info(capsys, tmp_path, path, extra=()) -> tuple[str, dict]:
    store = tmp_path / "st"
    rc = main(["ingest", str(path), "--store", str(store), "-q", *extra])
    out = capsys.readouterr()
    assert rc == 0, out.err
    infos = {}
    for step in _truth_steps(path):
        assert main(["info", "--store", str(store), "--train-step", step, "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        t = d["trajectories"]
        infos[step] = {
            "groups": d["groups"],
            "trajectories": t,
            "steps": d["steps"],
            "successes": round(d["success_rate"] * t),
            "truncated": round(d["truncated_rate"] * t),
        }
    return out.out, infos


def _truth_steps(path) -> list[str]:
    name = path.relative_to(FIX).parts[0]
    return list(_truth(name)["train_steps"])


def _rows(path):
    """(import, the canonical rows of every source under ``path``, in file order)."""
    imps = [import_source(s) for s in expand_sources([path])]
    return imps, [imp.raw.records for imp in imps]


# -- SkyRL step-wise eval dump ------------------------------------------------------------------
SKY = FIX / "skyrl_stepwise" / "export" / "dumped_evals"


@pytest.mark.parametrize("extra", [(), ("--format", "skyrl")], ids=["auto", "named"])
def test_skyrl_stepwise_counts_equal_truth(tmp_path, capsys, extra):
    out, infos = _ingest_info(capsys, tmp_path, SKY, extra)
    if not extra:
        lines = [x for x in out.splitlines() if x.strip().startswith("ingested")]
        assert lines and all("[skyrl] (auto-detected)" in x for x in lines), out
    for step, want in _truth("skyrl_stepwise")["train_steps"].items():
        assert infos[step] == {k: want[k] for k in KEYS}


def test_skyrl_stepwise_turns_and_anchors_are_the_environments_messages():
    truth = _truth("skyrl_stepwise")["trajectories"]
    got = []
    for f in sorted((SKY / "global_step_30_evals").glob("*.jsonl")):
        if f.name == "aggregated_results.jsonl":
            continue
        assert detect(str(f)) == "skyrl"
        (src,) = expand_sources([f], "skyrl")
        df = import_source(src).raw.records
        for _tid, rows in df.groupby("traj_id", sort=False):
            assert rows["step_idx"].tolist() == list(range(len(rows)))
            got.append((f.stem, len(rows), rows["anchor_obs"].tolist()))
    want = sorted((t["data_source"].replace("/", "_"), t["turns"], t["anchors"]) for t in truth)
    assert sorted(got) == want


def test_skyrl_stepwise_response_is_the_models_text_and_rewards_sum_per_turn():
    f = SKY / "global_step_30_evals" / "gsm8k.jsonl"
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    (src,) = expand_sources([f])
    imp = import_source(src)
    df = imp.raw.records
    assert df["response"].tolist() == [x["output_response"].split("<|im_end|>")[0] for x in lines]
    # the dump names no parsed action: each turn is keyed by its transition (SCHEMA.md)
    assert "action" not in df.columns or df["action"].isna().all()
    assert df["reward"].tolist() == [sum(x["score"]) for x in lines]
    b = build_batch(imp.raw)
    assert b.num_trajectories == sum(
        t["data_source"] == "gsm8k" for t in _truth("skyrl_stepwise")["trajectories"]
    )
    assert any("step-wise" in n for n in imp.notes)


def test_skyrl_trajectory_layout_stays_one_step_per_rollout():
    f = FIX / "skyrl_a956" / "export" / "dumped_evals" / "global_step_20_evals" / "gsm8k.jsonl"
    (src,) = expand_sources([f])
    df = import_source(src).raw.records
    assert (df["step_idx"] == 0).all()
    assert np.array_equal(df["anchor_obs"].to_numpy(), df["observation"].to_numpy())


# -- ROLL agent-native dump whose messages hold only the last turn ------------------------------
ROLL_LAST = FIX / "roll_native_last" / "rollout_dump"


@pytest.mark.parametrize("extra", [(), ("--format", "roll")], ids=["auto", "named"])
def test_roll_native_last_turn_counts_equal_truth(tmp_path, capsys, extra):
    out, infos = _ingest_info(capsys, tmp_path, ROLL_LAST, extra)
    if not extra:
        lines = [x for x in out.splitlines() if x.strip().startswith("ingested")]
        assert lines and all("[roll] (auto-detected)" in x for x in lines), out
    for step, want in _truth("roll_native_last")["train_steps"].items():
        assert infos[step] == {k: want[k] for k in KEYS}


def test_roll_native_last_turn_turns_from_step_rewards_and_last_anchor_from_messages():
    truth = _truth("roll_native_last")["trajectories"]
    for step, trajs in truth.items():
        f = ROLL_LAST / f"rollout_dump_data.step_{step}.jsonl"
        assert detect(str(f)) == "roll"
        (src,) = expand_sources([f])
        imp = import_source(src)
        got = []
        for _tid, rows in imp.raw.records.groupby("traj_id", sort=False):
            assert rows["step_idx"].tolist() == list(range(len(rows)))
            anchors = [None if a is None or a != a else a for a in rows["anchor_obs"]]
            got.append((rows["group_id"].iat[0], len(rows), tuple(rows["reward"]), tuple(anchors)))
        # only the last turn's observation is in the dumped messages (the env keeps no history)
        want = [
            (
                t["group"],
                t["turns"],
                tuple(t["step_rewards"]),
                (None,) * (t["turns"] - 1) + (t["anchors"][-1],),
            )
            for t in trajs
        ]
        assert sorted(got, key=repr) == sorted(want, key=repr)
        assert any("hold only their last turns" in n for n in imp.notes)


def test_roll_native_more_turns_in_messages_than_step_rewards_is_an_error(tmp_path):
    from crbc_viz.io import LoadError

    obj = json.loads((ROLL_LAST / "rollout_dump_data.step_1.jsonl").read_text())
    t = json.loads(obj["trajectory_data"][0])
    t["reward_info"]["step_rewards"] = []
    obj["trajectory_data"][0] = json.dumps(t)
    p = tmp_path / "rollout_dump_data.step_1.jsonl"
    p.write_text(json.dumps(obj) + "\n")
    with pytest.raises(LoadError, match="step_rewards"):
        import_source(expand_sources([p])[0])


# -- verifiers 0.4 traces.jsonl -----------------------------------------------------------------
VF04 = FIX / "verifiers_040" / "outputs"
VF04_TRACES = VF04 / "guess-game--fake" / "traces.jsonl"


@pytest.mark.parametrize("extra", [(), ("--format", "verifiers")], ids=["auto", "named"])
def test_verifiers_traces_counts_equal_truth(tmp_path, capsys, extra):
    out, infos = _ingest_info(capsys, tmp_path, VF04, extra)
    if not extra:
        lines = [x for x in out.splitlines() if x.strip().startswith("ingested")]
        assert lines and all("[verifiers] (auto-detected)" in x for x in lines), out
    for step, want in _truth("verifiers_040")["train_steps"].items():
        assert infos[step] == {k: want[k] for k in KEYS}


def test_verifiers_traces_turns_and_anchors_are_the_games_messages():
    assert detect(str(VF04_TRACES)) == "verifiers"
    (src,) = expand_sources([VF04_TRACES])
    df = import_source(src).raw.records
    got = []
    for _tid, rows in df.groupby("traj_id", sort=False):
        assert rows["step_idx"].tolist() == list(range(len(rows)))
        got.append((rows["anchor_obs"].tolist(), rows["reward"].iat[-1] == 1.0))
    want = [(t["anchors"], t["solved"]) for t in _truth("verifiers_040")["trajectories"]]
    assert sorted(got) == sorted(want)
    # the turn's response is the model's reply (text alone names no action: keyed by its
    # transition); the reward sits on the last turn
    assert all(a.startswith(("I think", "<guess>")) for a in df["response"])
    assert df["action"].isna().all()
    assert (df.groupby("traj_id")["reward"].apply(lambda r: (r.iloc[:-1] == 0).all())).all()


def test_verifiers_traces_untrainable_agent_left_out_and_bad_reward_named(tmp_path):
    from crbc_viz.io import LoadError

    eps = [json.loads(x) for x in VF04_TRACES.read_text().splitlines()]
    user = json.loads(json.dumps(eps[0]["traces"][0]))
    user["agent"]["trainable"] = False
    user["id"] = "user-trace"
    eps[0]["traces"].append(user)
    run = tmp_path / "run"
    run.mkdir()
    (run / "traces.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    imp = import_source(expand_sources([run / "traces.jsonl"])[0])
    assert "user-trace" not in set(imp.raw.records["traj_id"])
    assert any("untrainable" in n for n in imp.notes)
    eps[2]["traces"][0]["rewards"] = {"solved": {"score": "1"}}
    (run / "traces.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    with pytest.raises(LoadError, match=r"3.*traces\[0\].*solved"):
        import_source(expand_sources([run / "traces.jsonl"])[0])


def test_skyrl_untemplated_prompt_that_extends_another_is_not_a_turn(tmp_path):
    """Two tasks whose prompt texts (no chat template) are prefix-related stay two rollouts;
    a line whose prompt is the previous prompt plus its response is that rollout's next turn."""
    base = {"score": 0.0, "stop_reason": "stop", "env_class": "g", "env_extras": {}, "data_source": "d"}
    rows = [
        dict(base, input_prompt="question 1", output_response=" answer"),
        dict(base, input_prompt="question 10", output_response=" answer"),
        dict(base, input_prompt="question 10 answer", output_response=" final", score=1.0),
    ]
    p = tmp_path / "dumped_evals" / "global_step_1_evals" / "d.jsonl"
    p.parent.mkdir(parents=True)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = import_source(expand_sources([p])[0]).raw.records
    assert df["step_idx"].tolist() == [0, 0, 1]
    assert df["traj_id"].nunique() == 2
