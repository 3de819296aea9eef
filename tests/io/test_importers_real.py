"""Importers against files written by the trainers' own code (tests/fixtures/*_real, made by
tests/fixtures/generators/*_gen.py; each names the trainer version/commit it ran).

The expected counts are the generators' truth.json: what the environments / reward functions
recorded while the trainers ran, never re-derived from the dump files. The trainer packages
are not needed here: only the committed outputs are read.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from crbc_viz.cli import main
from crbc_viz.io import LoadError
from crbc_viz.io.assemble import build_batch
from crbc_viz.io.importers import expand_sources, import_source
from helpers import ROOT

FIX = ROOT / "tests" / "fixtures"
KEYS = ("groups", "trajectories", "steps", "successes", "truncated")


def _truth(name, *section):
    t = json.loads((FIX / name / "truth.json").read_text())
    for s in section:
        t = t[s]
    return t


# (fixture, path ingested, truth section, importer auto-detection must pick, counts lost)
CASES = [
    ("verl_agent_real", "verl_agent_real/crbc_dump", ("train_steps",), "verl-agent", ()),
    # the old hook: no done (truncation lost), adjust_batch copies in the file
    ("verl_agent_real", "verl_agent_real/legacy_hook", ("train_steps",), "verl-agent", ("truncated",)),
    ("trl_real", "trl_real/trl_run", ("train_steps",), "trl", ()),
    ("trl_0291", "trl_0291/trl_run", ("train_steps",), "trl", ()),
    # TRL 1.16.0 with tools: one step per assistant turn, a cut tool loop is truncation
    ("trl_tools", "trl_tools/trl_run", ("train_steps",), "trl", ()),
    ("verl_real", "verl_real/rollout", ("rollout",), "verl", ()),
    ("verl_real", "verl_real/rollout_v1", ("rollout_v1",), "verl", ()),
    # verl 0.4.1 multi-turn: one line per conversation, a rollout cut by a limit is not marked
    ("verl_041", "verl_041/rollout", ("rollout",), "verl", ("truncated",)),
    ("verl_agent_e03", "verl_agent_e03/crbc_dump", ("train_steps",), "verl-agent", ()),
    ("rllm_real", "rllm_real/train_logs", ("train_steps",), "rllm", ()),
    ("rllm_real", "rllm_real/eval_run", ("eval",), "rllm", ()),
    ("rllm_38dd", "rllm_38dd/train_logs", ("train_steps",), "rllm", ()),
    ("roll_real", "roll_real/rollout_dump", ("train_steps",), "roll", ()),
    ("roll_real_cec", "roll_real_cec/rollout_dump", ("train_steps",), "roll", ()),
    ("roll_native", "roll_native/rollout_dump", ("train_steps",), "roll", ()),
    ("swift_real", "swift_real/output", ("train_steps",), "ms-swift", ()),
    ("swift3_real", "swift3_real/output", ("train_steps",), "ms-swift", ()),
    ("swift36_multiturn", "swift36_multiturn/output", ("train_steps",), "ms-swift", ()),
    ("swift46_multiturn", "swift46_multiturn/output", ("train_steps",), "ms-swift", ()),
    ("verifiers_0110", "verifiers_0110/outputs", ("train_steps",), "verifiers", ()),
    ("verifiers_031", "verifiers_031/outputs", ("train_steps",), "verifiers", ()),
    ("skyrl_b328", "skyrl_b328/export/dumped_evals", ("train_steps",), "skyrl", ()),
    ("skyrl_a956", "skyrl_a956/export/dumped_evals", ("train_steps",), "skyrl", ()),
]


def _ingest(capsys, store, *paths, extra=()):
    rc = main(["ingest", *map(str, paths), "--store", str(store), "-q", *extra])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out


def _info(capsys, store, step):
    assert main(["info", "--store", str(store), "--train-step", str(step), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    t = d["trajectories"]
    return {
        "groups": d["groups"],
        "trajectories": t,
        "steps": d["steps"],
        "successes": round(d["success_rate"] * t),
        "truncated": round(d["truncated_rate"] * t),
    }


@pytest.mark.parametrize("fixture,path,section,fmt,lost", CASES, ids=[c[1] for c in CASES])
def test_ingest_then_info_equals_truth(tmp_path, capsys, fixture, path, section, fmt, lost):
    if not (FIX / path).exists():
        pytest.fail(f"fixture {path} missing")
    truth = _truth(fixture, *section)
    out = _ingest(capsys, tmp_path / "st", FIX / path)
    lines = [x for x in out.out.splitlines() if x.strip().startswith("ingested")]
    assert lines and all(f"[{fmt}] (auto-detected)" in x for x in lines), out.out
    for step, want in truth.items():
        want = {k: (0 if k in lost else want[k]) for k in KEYS}
        assert _info(capsys, tmp_path / "st", step) == want, (path, step)


@pytest.mark.parametrize("fixture,path,section,fmt,lost", CASES, ids=[c[1] for c in CASES])
def test_ingest_with_named_format_equals_truth(tmp_path, capsys, fixture, path, section, fmt, lost):
    truth = _truth(fixture, *section)
    _ingest(capsys, tmp_path / "st", FIX / path, extra=("--format", fmt))
    for step, want in truth.items():
        want = {k: (0 if k in lost else want[k]) for k in KEYS}
        assert _info(capsys, tmp_path / "st", step) == want, (path, step)


def test_folder_skips_a_file_no_importer_claims_with_a_note(tmp_path, capsys):
    run = tmp_path / "output"
    shutil.copytree(FIX / "swift3_real" / "output", run)
    (run / "aggregated_results.jsonl").write_text('{"dataset": "gsm8k", "pass_at_1": 0.5}\n')
    for extra in ((), ("--format", "ms-swift")):
        (src,) = expand_sources([run], extra[-1] if extra else "auto")
        note = " ".join(import_source(src).notes)
        assert "skipped 1 file(s)" in note and "aggregated_results.jsonl" in note, note
        _ingest(capsys, tmp_path / f"st{len(extra)}", run, extra=extra)
        for step, want in _truth("swift3_real", "train_steps").items():
            assert _info(capsys, tmp_path / f"st{len(extra)}", step) == {k: want[k] for k in KEYS}
    only = tmp_path / "only"
    only.mkdir()
    (only / "aggregated_results.jsonl").write_text('{"dataset": "gsm8k", "pass_at_1": 0.5}\n')
    with pytest.raises(LoadError, match="cannot detect the log format"):
        expand_sources([only])


# -- verl-agent ---------------------------------------------------------------------------------
VA = FIX / "verl_agent_real"


def _bound_from_text(path):
    """At most how many lines can be adjust_batch copies, by brute force on the raw text: a row
    is copied at most once (``np.random.choice(bs, to_add, replace=False)``), so ``m`` equal
    lines hold at most ``m // 2`` copies."""
    return sum(m // 2 for m in collections.Counter(path.read_text().splitlines()).values())


def test_verl_agent_rollout_data_dir_keeps_every_line_and_bounds_the_copies():
    """verl-agent e03bd50's own rollout_data_dir dump, padded by its own adjust_batch(mode="copy")
    and reordered by _balance_batch: a copy equals its row in every field and sits anywhere, so
    every line is kept; here no two real steps are alike (the generator checked), so the bound
    on the copies is exactly the number adjust_batch appended."""
    for step, t in _truth("verl_agent_e03", "train_steps").items():
        path = FIX / "verl_agent_e03" / "rollout" / f"{step}.jsonl"
        lines = t["steps"] + t["adjust_batch_copies"]
        assert t["adjust_batch_copies"] > 0 and len(path.read_text().splitlines()) == lines
        imp, b = _load(path, "verl-agent")
        assert b.num_trajectories == b.num_steps == lines
        assert imp.counts.get("copies_suspected", 0) == t["adjust_batch_copies"] == _bound_from_text(path)
        assert imp.counts.get("copies_dropped", 0) == 0
        (note,) = [n for n in imp.notes if "padding copies" in n]
        assert f"up to {t['adjust_batch_copies']} of these {lines} lines" in note and "hook" in note
        # auto-detection reads the file as plain verl: every line kept, the bound in a note
        imp, b = _load(path)
        assert (
            imp.fmt == "verl" and b.num_trajectories == lines and imp.counts.get("copies_suspected", 0) == 0
        )
        assert any(f"up to {t['adjust_batch_copies']} of them" in n for n in imp.notes)


SHARED = ("e03bd50", "796ed31", "8ca3a46")


@pytest.mark.parametrize("commit", SHARED)
def test_verl_agent_rollout_data_dir_keeps_real_steps_that_repeat_another(commit):
    """verl-agent's own code (upstream e03bd50 and 796ed31, the fork 8ca3a46) with rollouts that
    share a state, an action and a score: such real steps are lines alike in every field, as
    the adjust_batch copies are, so none is dropped; the bound on the copies covers the true
    number (from the generator's row tags) and counts no more than the lines that repeat."""
    truth = _truth(f"verl_agent_shared/{commit}", "train_steps")
    assert truth and all(t["real_steps_repeating_another_real_step"] > 0 for t in truth.values())
    for step, t in truth.items():
        path = FIX / "verl_agent_shared" / commit / "rollout" / f"{step}.jsonl"
        assert t["lines"] == t["real_steps"] + t["adjust_batch_copies"] == len(path.read_text().splitlines())
        imp, b = _load(path, "verl-agent")
        assert b.num_trajectories == b.num_steps == t["lines"]  # every real step, and the copies
        assert t["distinct_lines"] < t["real_steps"]  # what dropping repeated lines would keep
        bound = imp.counts.get("copies_suspected", 0)
        assert bound == _bound_from_text(path)
        assert t["adjust_batch_copies"] <= bound
        assert bound <= t["adjust_batch_copies"] + t["real_steps_repeating_another_real_step"]
        assert any(
            f"up to {bound} of these {t['lines']} lines may be adjust_batch padding copies" in n
            for n in imp.notes
        )
        # every line carries its episode's score: success counts the lines of won episodes
        assert int(b.traj_success.sum()) == t["lines_of_won_episodes"]
        imp, b = _load(path)
        assert imp.fmt == "verl" and b.num_steps == t["lines"]


def _load(path, fmt="auto", **opts):
    (src,) = expand_sources([path], fmt)
    imp = import_source(src, **opts)
    return imp, build_batch(imp.raw)


def test_verl_agent_legacy_dump_drops_adjust_batch_copies_with_a_count():
    truth = _truth("verl_agent_real", "train_steps")
    for step, t in truth.items():
        imp, b = _load(VA / "legacy_hook" / f"crbc_step_{int(step):06d}.jsonl")
        n = t["duplicates_dropped_by_hook"]
        assert t["batch_rows_after_adjust_batch"] - t["rows_before_adjust_batch"] == n
        if n:
            assert any(f"dropped {n} exact duplicate row(s)" in x for x in imp.notes)
        assert imp.counts.get("copies_dropped", 0) == n and imp.counts.get("copies_suspected", 0) == 0
        assert any("truncation is unknown" in x for x in imp.notes)
        assert b.num_steps == t["steps"]


def test_verl_agent_conflicting_duplicate_names_both_lines(tmp_path):
    rows = [json.loads(x) for x in (VA / "legacy_hook" / "crbc_step_000001.jsonl").read_text().splitlines()]
    seen, dup = {}, None
    for i, r in enumerate(rows):
        k = (r["traj_uid"], r["step"])
        if k in seen:
            dup = (seen[k], i)
            break
        seen[k] = i
    assert dup is not None  # the fixture holds adjust_batch copies
    rows[dup[1]]["rewards"] = 123.0
    p = tmp_path / "crbc_step_000001.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(LoadError) as e:
        _load(p)
    msg = str(e.value)
    assert f"line {dup[1] + 1}" in msg and f"as line {dup[0] + 1}" in msg and "rewards" in msg


def test_verl_agent_shuffled_rows_without_step_are_an_error(tmp_path):
    rows = (VA / "crbc_dump" / "crbc_step_000002.jsonl").read_text().splitlines()
    p = tmp_path / "crbc_step_000002.jsonl"
    p.write_text(
        "".join(json.dumps({k: v for k, v in json.loads(x).items() if k != "step"}) + "\n" for x in rows)
    )
    with pytest.raises(LoadError, match="cannot be put back in order"):
        _load(p)


def test_verl_agent_rows_are_shuffled_and_step_orders_them():
    rows = [json.loads(x) for x in (VA / "crbc_dump" / "crbc_step_000001.jsonl").read_text().splitlines()]
    order = [(r["traj_uid"], r["step"]) for r in rows]
    assert order != sorted(order, key=lambda k: (k[0], k[1]))  # _balance_batch reordered them
    _, b = _load(VA / "crbc_dump" / "crbc_step_000001.jsonl")
    for t in range(b.num_trajectories):
        s = b.steps["step_idx"].to_numpy()[b.traj_offsets[t] : b.traj_offsets[t + 1]]
        assert s.tolist() == list(range(len(s)))


# -- the verl-agent hook (our code), on a DataProto-shaped batch -------------------------------
def _hook_batch(rows, with_step=True):
    import torch

    texts = [r["response"] for r in rows]
    nt = {
        k: np.array([r[k] for r in rows], dtype=object)
        for k in ("uid", "traj_uid", "anchor_obs", "rewards", "active_masks", "won", "data_source")
    }
    if with_step:
        nt["step"] = np.array([r["step"] for r in rows], dtype=np.int64)
        nt["dones"] = np.array([r["done"] for r in rows], dtype=object)
    resp = torch.tensor([[i, 0] for i in range(len(rows))])
    adv = torch.tensor([[1.0, 3.0]] * len(rows))
    return (
        SimpleNamespace(
            batch={"responses": resp, "advantages": adv, "response_mask": torch.tensor([[1, 1]] * len(rows))},
            non_tensor_batch=nt,
        ),
        SimpleNamespace(batch_decode=lambda ids, skip_special_tokens=True: [texts[int(r[0])] for r in ids]),
    )


def test_hook_dedupes_writes_step_and_done_and_refuses_conflicts(tmp_path, capsys):
    from crbc_viz.io.importers.verl_agent_hook import HookError, dump_crbc_steps

    rows = [json.loads(x) for x in (VA / "crbc_dump" / "crbc_step_000001.jsonl").read_text().splitlines()]
    padded = rows + [rows[3], rows[10]]  # what adjust_batch(mode="copy") appends
    batch, tok = _hook_batch(padded)
    info = dump_crbc_steps(batch, tok, 7, str(tmp_path / "run" / "crbc_dump"))
    assert info["rows"] == len(rows) and info["duplicates_dropped"] == 2
    back = [json.loads(x) for x in open(info["path"])]
    assert [(r["traj_uid"], r["step"], r["done"]) for r in back] == [
        (r["traj_uid"], r["step"], r["done"]) for r in rows
    ]
    assert {r["advantage"] for r in back} == {2.0} and {r["global_step"] for r in back} == {7}
    truth = _truth("verl_agent_real", "train_steps", "1")
    _ingest(capsys, tmp_path / "st", tmp_path / "run" / "crbc_dump")
    assert _info(capsys, tmp_path / "st", 7) == {k: truth[k] for k in KEYS}
    bad = [dict(r) for r in padded]
    bad[-1]["rewards"] = 99.0
    with pytest.raises(HookError, match=r"batch rows 10 and \d+ are both"):
        dump_crbc_steps(*_hook_batch(bad), 7, str(tmp_path / "x"))
    with pytest.raises(HookError, match="rollout-loop lines"):
        dump_crbc_steps(*_hook_batch(rows, with_step=False), 7, str(tmp_path / "y"))


def test_hook_doc_calls_the_hook_module():
    doc = (ROOT / "docs" / "verl_agent_hook.md").read_text()
    assert "from crbc_viz.io.importers.verl_agent_hook import dump_crbc_steps" in doc
    for line in (
        "batch.non_tensor_batch['step']",
        "batch.non_tensor_batch['dones']",
        "batch.non_tensor_batch['won']",
    ):
        assert line in doc


# -- TRL ------------------------------------------------------------------------------------------
TRL = FIX / "trl_real" / "trl_run" / "completions"


def test_trl_rewards_exclude_logged_extras_and_success_is_reward_won():
    imp, b = _load(TRL / "completions_00002.parquet")
    df = pd.read_parquet(TRL / "completions_00002.parquet")
    assert list(df.columns) == [
        "step",
        "prompt",
        "completion",
        "reward_won",
        "format_reward",
        "num_turns",
        "advantage",
    ]
    assert np.allclose(b.steps["reward"], df["reward_won"] + df["format_reward"])
    assert "num_turns" in b.steps.columns and "reward_num_turns" not in b.steps.columns
    assert b.traj_success.sum() == _truth("trl_real", "train_steps", "2")["successes"]
    assert any("success = reward_won" in n for n in imp.notes)
    assert any("not rewards (logged extras): num_turns" in n for n in imp.notes)
    # every row has a positive summed reward: reward > 0 would call all 16 a success
    assert (b.steps["reward"] > 0).all() and b.traj_success.sum() < 16


def test_trl_declared_columns_win(tmp_path, capsys):
    imp, b = _load(
        TRL / "completions_00002.parquet", reward_columns=["reward_won"], success_column="reward_won"
    )
    df = pd.read_parquet(TRL / "completions_00002.parquet")
    assert np.allclose(b.steps["reward"], df["reward_won"])
    with pytest.raises(LoadError, match="success column holds"):
        _load(TRL / "completions_00002.parquet", success_column="num_turns")
    with pytest.raises(LoadError, match="--reward-columns names a column"):
        _load(TRL / "completions_00002.parquet", reward_columns=["nope"])
    out = _ingest(
        capsys,
        tmp_path / "st",
        TRL,
        extra=("--reward-columns", "reward_won,format_reward", "--success-column", "reward_won"),
    )
    assert "[trl] (auto-detected)" in out.out
    assert (
        _info(capsys, tmp_path / "st", 3)["successes"] == _truth("trl_real", "train_steps", "3")["successes"]
    )


def test_trl_without_advantage_asks_for_reward_columns(tmp_path):
    df = pd.read_parquet(TRL / "completions_00001.parquet").drop(columns=["advantage"])
    p = tmp_path / "completions_00001.parquet"
    df.to_parquet(p)
    with pytest.raises(LoadError, match="--reward-columns"):
        _load(p)


# -- rLLM ----------------------------------------------------------------------------------------
def test_rllm_side_files_skipped_and_agent_flow_anchor_noted():
    srcs = expand_sources([FIX / "rllm_real" / "eval_run"])
    assert [s.fmt for s in srcs] == ["rllm"]
    assert not any(f.endswith("meta.json") for s in srcs for f in s.files)
    imp, b = _load(FIX / "rllm_real" / "eval_run")
    assert any("last user message of chat_completions" in n for n in imp.notes)
    assert b.steps["anchor_obs"].notna().all()
    srcs = expand_sources([FIX / "rllm_real" / "train_logs"])
    assert not any(f.endswith("batch_summary.json") for s in srcs for f in s.files)


def test_rllm_episode_written_twice(tmp_path):
    src = FIX / "rllm_real" / "train_logs" / "episodes" / "train_step_1_epoch_0"
    d = tmp_path / "episodes" / "train_step_1_epoch_0"
    shutil.copytree(src, d)
    first = sorted(d.glob("episode_*.json"))[0]
    (d / "zz_copy.json").write_text(first.read_text())
    imp, b = _load(tmp_path / "episodes")
    assert any("dropped" in n and "exact duplicate" in n for n in imp.notes)
    assert b.num_trajectories == _truth("rllm_real", "train_steps", "1")["trajectories"]
    ep = json.loads(first.read_text())
    ep["trajectories"][0]["steps"][0]["reward"] = 5.0
    (d / "zz_copy.json").write_text(json.dumps(ep))
    with pytest.raises(LoadError) as e:
        _load(tmp_path / "episodes")
    assert first.name in str(e.value) and "zz_copy.json" in str(e.value)


RLLM38 = FIX / "rllm_38dd" / "train_logs" / "episodes"


def test_rllm_38dd_numpy_text_is_read_as_numpy_wrote_it_and_other_text_is_refused(tmp_path):
    """rLLM 38dda579's EpisodeLogger dumps numpy values with default=str: is_correct "True" /
    "False" and trajectory reward "1"; exactly those spellings are read back, noted."""
    first = sorted((RLLM38 / "train_step_1_epoch_0").glob("episode_*.json"))[0]
    ep = json.loads(first.read_text())
    assert ep["is_correct"] in ("True", "False") and isinstance(ep["trajectories"][0]["reward"], str)
    imp, b = _load(RLLM38 / "train_step_1_epoch_0")
    assert any("numpy values written as text" in n for n in imp.notes)
    assert int(b.traj_success.sum()) == _truth("rllm_38dd", "train_steps", "1")["successes"]
    cases = [
        (("is_correct",), "false", "field 'is_correct'"),
        (("trajectories", 0, "reward"), "nan", "field 'trajectories[0].reward': expected a number"),
        (("trajectories", 0, "steps", 0, "reward"), "one", "field 'trajectories[0].steps[0].reward'"),
    ]
    for k, (keys, value, want) in enumerate(cases):
        d = tmp_path / str(k) / "train_step_1_epoch_0"
        shutil.copytree(RLLM38 / "train_step_1_epoch_0", d)
        bad = json.loads(first.read_text())
        holder = bad
        for key in keys[:-1]:
            holder = holder[key]
        holder[keys[-1]] = value
        (d / first.name).write_text(json.dumps(bad))
        with pytest.raises(LoadError) as e:
            _load(d)
        assert f"{first.name}:item 0: {want}" in str(e.value), str(e.value)


def test_rllm_step_done_that_is_not_a_flag_names_the_step(tmp_path):
    d = tmp_path / "episodes" / "train_step_1_epoch_0"
    shutil.copytree(FIX / "rllm_real" / "train_logs" / "episodes" / "train_step_1_epoch_0", d)
    first = sorted(d.glob("episode_*.json"))[0]
    ep = json.loads(first.read_text())
    ep["trajectories"][0]["steps"][0]["done"] = "yes"
    first.write_text(json.dumps(ep))
    with pytest.raises(LoadError) as e:
        _load(tmp_path / "episodes")
    assert f"{first.name}:item 0: field 'trajectories[0].steps[0].done': expected a bool" in str(e.value)


# -- ROLL ----------------------------------------------------------------------------------------
def test_roll_recipe_doc_is_the_code_that_made_the_fixture():
    doc = (ROOT / "docs" / "roll_recipe.md").read_text()
    block = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    truth = _truth("roll_real")
    assert hashlib.sha256(block.encode()).hexdigest() == truth["recipe_sha256"]
    assert truth["without_recipe_writes"] is False and truth["relative_path_writes"] is False


def test_roll_recipe_marks_a_max_steps_cut_as_not_done(monkeypatch):
    """ROLL's TrajEnvManager.step sets terminated = True at max_steps with truncated = True
    beside it; the recipe's done must be 0 then, 1 when the env ended the episode."""
    import sys
    import types

    doc = (ROOT / "docs" / "roll_recipe.md").read_text()
    block = re.search(r"```python\n(.*?)```", doc, re.S).group(1)

    class StepEnvManager:  # stand-in: formulate_rollouts returns the step rows of a batch
        def formulate_rollouts(self, cache):
            n = 3
            nt = {
                k: np.arange(n, dtype=object)
                for k in ("step", "state_hash", "step_scores", "episode_scores", "tags")
            }
            return SimpleNamespace(non_tensor_batch=nt, meta_info={}, __len__=None, n=n)

    mod = types.ModuleType("roll.pipeline.agentic.env_manager.step_env_manager")
    mod.StepEnvManager = StepEnvManager
    for name in ("roll", "roll.pipeline", "roll.pipeline.agentic", "roll.pipeline.agentic.env_manager"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    ns: dict = {}
    exec(compile(block, "roll_recipe.md", "exec"), ns)

    class Batch(SimpleNamespace):
        def __len__(self):
            return 3

    StepEnvManager.formulate_rollouts = lambda self, cache: Batch(
        non_tensor_batch={
            k: np.arange(3, dtype=object)
            for k in ("step", "state_hash", "step_scores", "episode_scores", "tags")
        },
        meta_info={},
    )
    m = ns["CrbcStepEnvManager"].__new__(ns["CrbcStepEnvManager"])
    m.episode_id, m.group_seed = 0, 1
    for terminated, truncated, done in ((True, True, 0), (True, False, 1), (False, False, 0)):
        cache = SimpleNamespace(tag="t", group_id=0, env_id=0, terminated=terminated, truncated=truncated)
        assert m.formulate_rollouts(cache).non_tensor_batch["crbc_done"][-1] == done, (terminated, truncated)


def test_roll_native_turns_and_anchors_come_from_messages():
    line = (FIX / "roll_native" / "rollout_dump" / "rollout_dump_data.step_1.jsonl").read_text()
    obj = json.loads(line)
    conv = json.loads(obj["messages"][0])[-1]
    imp, b = _load(FIX / "roll_native" / "rollout_dump" / "rollout_dump_data.step_1.jsonl")
    tid = json.loads(obj["trajectory_data"][0])["trajectory_id"]
    rows = imp.raw.records[imp.raw.records["traj_id"] == tid].sort_values("step_idx")
    asst = [k for k, m in enumerate(conv) if m["role"] == "assistant"]
    assert list(rows["response"]) == [conv[k]["content"] for k in asst]
    assert list(rows["anchor_obs"]) == [conv[k - 1]["content"] for k in asst]


def test_roll_native_bad_flag_names_the_row(tmp_path):
    obj = json.loads((FIX / "roll_native" / "rollout_dump" / "rollout_dump_data.step_1.jsonl").read_text())
    t = json.loads(obj["trajectory_data"][2])
    t["length_info"]["truncated"] = "False"
    obj["trajectory_data"][2] = json.dumps(t)
    p = tmp_path / "rollout_dump_data.step_1.jsonl"
    p.write_text(json.dumps(obj) + "\n")
    with pytest.raises(LoadError, match="length_info.truncated") as e:
        _load(p)
    assert "item 2" in str(e.value) or ":2" in str(e.value) or " 2" in str(e.value)


def test_roll_rows_without_step_are_an_error(tmp_path):
    obj = json.loads((FIX / "roll_real" / "rollout_dump" / "rollout_dump_data.step_1.jsonl").read_text())
    del obj["crbc_step"]
    p = tmp_path / "rollout_dump_data.step_1.jsonl"
    p.write_text(json.dumps(obj) + "\n")
    with pytest.raises(LoadError, match="cannot be ordered"):
        _load(p)


# -- ms-swift ------------------------------------------------------------------------------------
SWIFT = FIX / "swift_real" / "output" / "completions.jsonl"


def test_swift_lines_of_lists_with_string_steps():
    first = json.loads(SWIFT.read_text().splitlines()[0])
    assert first["step"][0] == "1" and isinstance(first["prompt"], list)
    imp, b = _load(SWIFT)
    assert sorted(set(b.steps["train_step"])) == [1, 2]
    # two 0/1 reward columns (Format, reward_won): success is the one named like a success
    assert any("success = reward_won" in n for n in imp.notes)
    assert any("not rewards (logged extras): num_turns" in n for n in imp.notes)
    want = sum(t["successes"] for t in _truth("swift_real", "train_steps").values())
    assert int(b.traj_success.sum()) == want


def test_swift_bad_step_names_line(tmp_path):
    lines = SWIFT.read_text().splitlines()
    obj = json.loads(lines[1])
    obj["step"][3] = "three"
    p = tmp_path / "completions.jsonl"
    p.write_text(lines[0] + "\n" + json.dumps(obj) + "\n")
    with pytest.raises(
        LoadError, match=r"completions.jsonl:line 2: field 'step': not a step number: 'three'"
    ):
        _load(p, "ms-swift")


SWIFT36 = FIX / "swift36_multiturn" / "output" / "completions.jsonl"


def _swift36_lines(convert):
    out = []
    for line in SWIFT36.read_text().splitlines():
        obj = json.loads(line)
        obj["prompt"] = [convert(p) for p in obj["prompt"]]
        out.append(json.dumps(obj))
    return "\n".join(out) + "\n"


def _chatml_to_llama3(text):
    text = re.sub(r"<\|im_start\|>(\w+)\n", r"<|start_header_id|>\1<|end_header_id|>\n\n", text)
    return "<|begin_of_text|>" + text.replace("<|im_end|>\n", "<|eot_id|>")


def test_swift36_multiturn_text_prompts_group_by_first_user_turn(tmp_path):
    truth = _truth("swift36_multiturn", "train_steps")
    first = json.loads(SWIFT36.read_text().splitlines()[0])
    assert len(set(first["prompt"])) > truth["1"]["groups"]  # the rollouts of a group differ in prompt
    imp, b = _load(SWIFT36)
    assert any("chat-templated text" in n and "hold earlier turns" in n for n in imp.notes), imp.notes
    assert b.num_groups == sum(t["groups"] for t in truth.values())
    p = tmp_path / "llama3" / "completions.jsonl"
    p.parent.mkdir()
    p.write_text(_swift36_lines(_chatml_to_llama3))
    imp, b = _load(p, "ms-swift")
    assert b.num_groups == sum(t["groups"] for t in truth.values())
    assert np.diff(b.group_traj_offsets).tolist() == [4] * b.num_groups
    p = tmp_path / "other" / "completions.jsonl"
    p.parent.mkdir()
    p.write_text(_swift36_lines(lambda t: t.replace("<|im_start|>", "[[").replace("<|im_end|>", "]]")))
    imp, b = _load(p, "ms-swift")
    assert any("no known chat template" in n and "splits each group" in n for n in imp.notes), imp.notes


def test_trl_two_groups_of_one_prompt_back_to_back_are_split(tmp_path):
    df = pd.read_parquet(TRL / "completions_00002.parquet")
    df.loc[4:7, "prompt"] = df.loc[0, "prompt"]  # group 2 samples group 1's prompt again
    p = tmp_path / "completions_00002.parquet"
    df.to_parquet(p)
    imp, b = _load(p)
    assert b.num_groups == 4 and np.diff(b.group_traj_offsets).tolist() == [4, 4, 4, 4]
    assert any("split into groups of 4" in n for n in imp.notes)


def test_rllm_without_termination_reason_or_done_is_not_called_truncated(tmp_path):
    d = tmp_path / "episodes"
    shutil.copytree(FIX / "rllm_real" / "eval_run" / "episodes", d)
    for f in d.glob("*.json"):
        ep = json.loads(f.read_text())
        ep["termination_reason"] = None
        f.write_text(json.dumps(ep))
    imp, b = _load(d)
    assert not b.traj_truncated.any()
    assert any("truncation unknown" in n for n in imp.notes)


# -- verifiers / SkyRL --------------------------------------------------------------------------
VF = FIX / "verifiers_031" / "outputs" / "evals" / "guess--scripted" / "0a1b2c3d" / "results.jsonl"


def _vf_rows():
    return [json.loads(x) for x in VF.read_text().splitlines()]


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_verifiers_turns_and_anchors_come_from_completion():
    imp, b = _load(VF)
    row = _vf_rows()[0]  # two guesses: "lower" after the first, "correct" after the second
    df = imp.raw.records
    first = df[df["traj_id"] == df["traj_id"].iat[0]]
    assert first["anchor_obs"].tolist() == [row["prompt"][-1]["content"], row["completion"][1]["content"]]
    assert first["response"].tolist() == [row["completion"][0]["content"], row["completion"][2]["content"]]
    assert "action" not in df  # verifiers logs no action: each turn is keyed by its transition
    assert first["reward"].tolist() == [0.0, row["reward"]]


def test_verifiers_single_turn_limit_is_the_end_and_is_truncated_cuts(tmp_path):
    base = _vf_rows()[1]  # one assistant turn
    rows = []
    for i, cut in enumerate([False, True, False]):
        r = dict(base, example_id=i, is_truncated=cut, stop_condition="max_turns_reached")
        r["completion"] = base["completion"][:1]
        rows.append(r)
    _imp, b = _load(_write(tmp_path / "r" / "results.jsonl", rows))
    assert b.num_trajectories == 3
    assert int(np.asarray(b.traj_truncated).sum()) == 1


def test_verifiers_bad_flag_or_reward_names_the_line(tmp_path):
    rows = _vf_rows()
    rows[2]["is_truncated"] = "False"
    with pytest.raises(LoadError, match=r"line 3.*is_truncated"):
        _load(_write(tmp_path / "a" / "results.jsonl", rows))
    rows = _vf_rows()
    rows[4]["reward"] = None
    with pytest.raises(LoadError, match=r"line 5.*reward"):
        _load(_write(tmp_path / "b" / "results.jsonl", rows))


SK = FIX / "skyrl_a956" / "export" / "dumped_evals" / "global_step_20_evals" / "gsm8k.jsonl"


def test_skyrl_per_token_scores_are_summed_and_step_from_folder(tmp_path):
    rows = [json.loads(x) for x in SK.read_text().splitlines()]
    rows[0]["score"] = [0.0, 0.25, 0.5]
    imp, b = _load(_write(tmp_path / "dumped_evals" / "global_step_7_evals" / "x.jsonl", rows))
    assert imp.raw.records["reward"].iat[0] == 0.75
    assert set(imp.raw.records["train_step"]) == {7}
    assert any("per-token" in n for n in imp.notes)


def test_skyrl_bad_stop_reason_or_score_names_the_line(tmp_path):
    rows = [json.loads(x) for x in SK.read_text().splitlines()]
    rows[1]["stop_reason"] = 1
    with pytest.raises(LoadError, match=r"line 2.*stop_reason"):
        _load(_write(tmp_path / "a" / "global_step_1_evals" / "x.jsonl", rows))
    rows = [json.loads(x) for x in SK.read_text().splitlines()]
    rows[3]["score"] = "True"
    with pytest.raises(LoadError, match=r"line 4.*score.*expected a number, got str 'True'"):
        _load(_write(tmp_path / "b" / "global_step_1_evals" / "x.jsonl", rows))
    # the text of a number is the number (the one rule of crbc_viz.io.flags.read_numbers)
    rows[3]["score"] = "1.0"
    imp, _ = _load(_write(tmp_path / "c" / "global_step_1_evals" / "x.jsonl", rows))
    assert imp.raw.records["reward"].iat[3] == 1.0
