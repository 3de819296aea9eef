"""``crbc-viz verify``: the trainer's own logged advantage recomputed from the same rollouts.

Expected agreement comes from the numbers the trainers wrote (TRL 0.29.1 / 1.16.0 runs, the
ms-swift fixtures' advantages, verl-agent's ``compute_advantage``), never from our estimator; a
wrong convention (no Bessel correction, TRL's epsilon replaced) must disagree; a tampered copy
must name exactly the tampered groups; the verl-agent groups that held ``adjust_batch`` padding
copies are found independently in the legacy hook dump (every batch row, copies included)."""

from __future__ import annotations

import collections
import json
import shutil

import pyarrow.parquet as pq
import pytest

from crbc_viz.cli import main
from helpers import ROOT

FIX = ROOT / "tests" / "fixtures"
AGREE = {
    "trl_real": (FIX / "trl_real/trl_run", 12),
    "trl_0291": (FIX / "trl_0291/trl_run", 12),
    "trl_tools": (FIX / "trl_tools/trl_run", 6),
    "swift_real": (FIX / "swift_real/output/completions.jsonl", 8),
    "swift46_multiturn": (FIX / "swift46_multiturn/output/completions.jsonl", 6),
}


def _json(capsys, *args) -> tuple[int, dict]:
    rc = main(["verify", *map(str, args), "--json"])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", sorted(AGREE))
def test_trainer_written_advantages_agree(name, capsys):
    path, groups = AGREE[name]
    rc = main(["verify", str(path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.strip().splitlines()[-1] == f"all {groups} group(s) agree"


@pytest.mark.parametrize(
    "name, param",
    [
        ("trl_real", "grpo.ddof=0"),  # population std instead of torch.std's Bessel correction
        ("trl_tools", "grpo.ddof=0"),
        ("trl_tools", "grpo.eps=1e-6"),  # verl's epsilon instead of TRL's 1e-4
        ("swift_real", "grpo.norm=mean"),  # scale_rewards='none'
    ],
)
def test_a_wrong_convention_disagrees(name, param, capsys):
    rc, doc = _json(capsys, AGREE[name][0], "-p", param)
    assert rc == 1
    assert doc["agree"] is False and doc["groups_disagreeing"] > 0


def _copy_groups(step: int) -> set[str]:
    """uids of the groups whose batch held an ``adjust_batch`` copy: a (traj_uid, step) row that
    appears twice in the legacy hook's dump of every batch row."""
    path = FIX / f"verl_agent_real/legacy_hook/crbc_step_{step:06d}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    seen = collections.Counter((r["uid"], r["traj_uid"], r["step"]) for r in rows)
    return {uid for (uid, _, _), n in seen.items() if n > 1}


def test_verl_agent_names_exactly_the_groups_holding_padding_copies(capsys):
    rc, doc = _json(capsys, FIX / "verl_agent_real/crbc_dump")
    assert rc == 1
    bad = {(g["train_step"], g["group_id"]) for g in doc["groups"] if not g["ok"]}
    expected = {(s, uid) for s in (1, 2) for uid in _copy_groups(s)}
    assert len(expected) == 2 and bad == expected
    assert doc["groups_compared"] == 6
    assert any("adjust_batch" in n for n in doc["notes"])
    # the other groups reproduce verl-agent's GiGPO to float32 round-off
    assert max(g["max_abs"] for g in doc["groups"] if g["ok"]) < 1e-5


def _key(prompt) -> str:
    """A parquet cell of chat messages (numpy arrays of dicts) as comparable text."""
    return json.dumps(prompt, default=lambda o: o.tolist(), sort_keys=True)


def _tampered_trl(tmp_path):
    """trl_tools with the advantage of a few steps changed in 2 groups of train step 1;
    returns (folder, the two groups' prompts)."""
    src = FIX / "trl_tools/trl_run/completions"
    dst = tmp_path / "trl_run" / "completions"
    shutil.copytree(src, dst)
    f = dst / "completions_00001.parquet"
    t = pq.read_table(f).to_pandas()
    prompts = list(dict.fromkeys(t["prompt"].map(_key)))
    hit = [prompts[0], prompts[2]]
    rows = [i for p in hit for i in list(t.index[t["prompt"].map(_key) == p])[:2]]
    t.loc[rows, "advantage"] = t.loc[rows, "advantage"] + 0.01
    import pyarrow as pa

    pq.write_table(pa.Table.from_pandas(t, preserve_index=False), f)
    return dst.parent, hit


def _group_of_prompt(prompts):
    """group_id of each prompt, as the TRL importer keys it (read on the untampered file)."""
    from crbc_viz.io.assemble import build_batch
    from crbc_viz.io.importers import Source, import_source

    f = str(FIX / "trl_tools/trl_run/completions/completions_00001.parquet")
    b = build_batch(import_source(Source(f, "trl", (f,))).raw)
    t = pq.read_table(f).to_pandas()
    first = b.steps[b.steps["step_idx"] == 0]
    by_row = dict(zip(first["src_row"].astype(int), first["group_id"]))
    return {by_row[int(t.index[t["prompt"].map(_key) == p][0])] for p in prompts}


def test_tampered_copy_names_exactly_the_tampered_groups(tmp_path, capsys):
    folder, prompts = _tampered_trl(tmp_path)
    # the TRL importer infers the reward columns from the advantage, which no longer fits them all
    rc, doc = _json(capsys, folder, "--reward-columns", "reward_correct")
    assert rc == 1
    bad = [g for g in doc["groups"] if not g["ok"]]
    assert {g["group_id"] for g in bad} == _group_of_prompt(prompts)
    assert all(g["train_step"] == 1 and g["disagree"] >= 2 for g in bad)  # every turn of 2 completions
    assert all(abs(w["abs_diff"] - 0.01) < 1e-6 for g in bad for w in g["worst"][:2])
    assert doc["groups_disagreeing"] == 2 and doc["groups_compared"] == 6
    rc = main(["verify", str(folder), "--reward-columns", "reward_correct"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 1 and last.startswith("2 of 6 group(s) disagree: ")
    assert sorted(last.split(": ", 1)[1].split(", ")) == sorted(g["label"] for g in bad)


def test_tampered_trl_without_reward_columns_is_one_line(tmp_path, capsys):
    folder, _ = _tampered_trl(tmp_path)
    rc = main(["verify", str(folder)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[0].startswith("error: ") and "--reward-columns" in " ".join(err)


@pytest.mark.parametrize(
    "path",
    [FIX / "swift3_real/output/completions.jsonl", ROOT / "sample_rollouts/toy/toy_group.jsonl"],
)
def test_no_logged_advantage_is_one_line_exit_2(path, capsys):
    rc = main(["verify", str(path)])
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert rc == 2 and cap.out == ""
    assert (
        len(lines) == 1
        and lines[0].startswith("error: ")
        and "carries no trainer-written advantage" in lines[0]
    )


def test_canonical_log_needs_an_estimator(tmp_path, capsys):
    """A canonical log names no trainer: -e chooses; the toy group's GRPO advantage by hand
    (R = 1, 0, 0, 1: mean 1/2, sample std 1/√3, A = ±(√3/2)/(1 + 1e-6·√3))."""
    src = (ROOT / "sample_rollouts/toy/toy_group.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in src]
    a = (3**0.5 / 2) / (1 + 1e-6 * 3**0.5)
    won = {}
    for r in rows:
        won[r["traj_id"]] = won.get(r["traj_id"], False) or bool(r.get("success"))
    for r in rows:
        r["advantage"] = a if won[r["traj_id"]] else -a
    f = tmp_path / "toy_adv.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc = main(["verify", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "-e" in err
    rc, doc = _json(capsys, f, "-e", "grpo")
    assert rc == 0 and doc["agree"] and doc["estimator"] == "grpo"


def test_json_structure(capsys):
    rc, doc = _json(capsys, AGREE["trl_real"][0])
    assert rc == 0
    assert set(doc) >= {
        "source",
        "read",
        "estimator",
        "params",
        "tolerance",
        "agree",
        "groups_compared",
        "groups_disagreeing",
        "train_steps",
        "groups",
        "notes",
    }
    assert doc["estimator"] == "grpo" and doc["params"]["eps"] == 1e-4 and doc["params"]["ddof"] == 1
    assert doc["tolerance"]["atol"] == 2e-4
    assert [r["train_step"] for r in doc["train_steps"]] == [1, 2, 3]
    assert [r["format"] for r in doc["read"]] == ["trl"] * 3
    g = doc["groups"][0]
    assert set(g) == {
        "run_id",
        "train_step",
        "group_id",
        "label",
        "steps",
        "max_abs",
        "mean_abs",
        "disagree",
        "ok",
        "worst",
    }
    assert set(g["worst"][0]) == {"traj_id", "step_idx", "logged", "recomputed", "abs_diff"}


def test_bundled_training_store_agrees_run_by_run(capsys):
    """The bundled run's rows name the estimator that wrote their advantage (through the
    verl-agent adapter, `crbc_viz.integrations.verl_agent.compute_advantage`); verify reads it
    per run. A regression check of our own adapter path against the numpy reference."""
    store = ROOT / "sample_rollouts/training/store"
    rc, doc = _json(capsys, "--store", store, "--run", "gigpo-s0", "--train-step", "3")
    assert rc == 0 and doc["agree"] and doc["estimator"] == "gigpo" and doc["groups_compared"] == 8
    rc, doc = _json(capsys, "--store", store, "--run", "grpo-s0", "--train-step", "1", "-p", "grpo.ddof=0")
    assert rc == 1 and doc["groups_disagreeing"] > 0


def test_docs_state_each_convention_as_the_code_has_it():
    """docs/verify.md's table row of each format names the estimator and every parameter value
    of `CONVENTIONS` (parsed back, numbers compared as numbers)."""
    import re

    from crbc_viz.analysis.verify import CONVENTIONS

    doc = (ROOT / "docs/verify.md").read_text(encoding="utf-8")
    for fmt, c in CONVENTIONS.items():
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{fmt}` |"))
        cell = row.split("|")[2]
        assert f"`{c.estimator}`" in cell, fmt
        stated = dict(re.findall(r"(\w+)=([\w.+-]+)", cell))
        assert set(stated) == set(c.params), fmt
        for k, v in c.params.items():
            assert (float(stated[k]) == v) if isinstance(v, (int, float)) else stated[k] == v, (fmt, k)
