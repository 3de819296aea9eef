"""Every device branch of the trainer adapters, run on the CPU: `crbc_viz.integrations._scoring.
_on_device` is the one place the adapters' branch is chosen and `crbc_viz.backends.torch.fused.
on_cuda` the fused row's device test; replacing both makes CPU tensors take the code a GPU runs
(``crbc`` fused on the device, the batched torch twin of every other estimator and of ``crbc``
at a finite depth, and the torch halves of the token helpers). The cases are
parametrised over the branches present: ``host`` (the CPU path), ``cpu`` (the device branch on
CPU tensors) and, on a machine with one, ``cuda``.

Expected values come from ``crbc-viz score`` run as a separate process on the same rollouts
written as canonical rows (the file path), or from plain Python loops over the tokens; never
from the adapters' own steps.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_integrations import SOKOBAN, cli_scores, expected, per_row, rows_of, verl_agent_batch

from crbc_viz.backends.torch import FLOAT32_ATOL, fused
from crbc_viz.integrations import _core, _scoring
from helpers import write_jsonl

BRANCHES = ["host", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=BRANCHES)
def branch(request, monkeypatch):
    """The device the adapter is given; ``cpu`` forces the device branch on CPU tensors."""
    if request.param == "cpu":
        monkeypatch.setattr(_scoring, "_on_device", lambda dev: True)
        monkeypatch.setattr(fused, "on_cuda", lambda device: True)  # the fused row's device test
    return "cpu" if request.param == "host" else request.param


@pytest.fixture(scope="module")
def sokoban(tmp_path_factory):
    """The Sokoban rows and the CLI's scores of them (crbc, gigpo, grpo; crbc at depth 2)."""
    tmp = tmp_path_factory.mktemp("cli")
    rows = rows_of(SOKOBAN)
    df = cli_scores(SOKOBAN, ["crbc", "gigpo", "grpo"], tmp)
    depth = write_jsonl(tmp / "depth2.jsonl", rows)
    df2 = cli_scores(depth, ["crbc"], tmp, "crbc.depth=2")
    return rows, df, df2


def test_on_device_is_the_cuda_test():
    assert _core._on_device(torch.device("cuda", 0)) and not _core._on_device(torch.device("cpu"))


@pytest.mark.parametrize(
    "estimator,params,which",
    [
        ("crbc", {}, "df"),  # fused on the device
        ("gigpo", {}, "df"),  # a torch twin
        ("grpo", {}, "df"),
        ("crbc", {"depth": 2}, "df2"),  # crbc at a finite depth: its torch twin, not the fused path
    ],
)
def test_verl_agent_branches_equal_the_cli(sokoban, branch, estimator, params, which):
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows, df, df2 = sokoban
    idx, tlr, mask, col = verl_agent_batch(rows, seed=7)
    adv, _ = compute_advantage(
        tlr.to(branch),
        mask.to(branch),
        col("anchor_obs"),
        col("group_id"),
        col("traj_id"),
        col("step_idx", np.int64),
        actions=col("action"),
        success=col("success", bool),
        estimator=estimator,
        **params,
    )
    assert adv.device.type == branch and adv.dtype == torch.float64
    want = expected(df if which == "df" else df2, rows, idx, estimator)
    np.testing.assert_allclose(per_row(adv.cpu(), mask), want, atol=1e-9, rtol=0)


def test_roll_branches_equal_the_cli(sokoban, branch):
    from types import SimpleNamespace

    from crbc_viz.integrations.roll import response_level_advantages

    rows, df, _ = sokoban
    idx, _, mask, col = verl_agent_batch(rows, seed=8)
    batch = SimpleNamespace(
        batch={"response_mask": mask.to(branch)},
        non_tensor_batch={
            "traj_group_id": col("group_id"),
            "traj_id": col("traj_id"),
            "step": col("step_idx", np.int64),
            "state_hash": col("anchor_obs"),
            "step_scores": col("reward", np.float64),
            "success": col("success", bool),
            "action": col("action"),
        },
    )
    got = response_level_advantages(batch)
    assert got.device.type == branch and got.dtype == torch.float32
    np.testing.assert_allclose(got.cpu().numpy(), expected(df, rows, idx), atol=FLOAT32_ATOL, rtol=0)


def _trajectory_rows(rows, model=3, env=2):
    """One row per (group, trajectory), as verl and TRL hold them: each step ``model`` model
    tokens (mask 1, the step's reward on its last one) then ``env`` environment tokens."""
    trajs: dict = {}
    for r in rows:
        trajs.setdefault((r["group_id"], r["traj_id"]), []).append(r)
    keys = list(trajs)
    steps = [sorted(trajs[k], key=lambda r: r["step_idx"]) for k in keys]
    per = model + env
    L = per * max(len(s) for s in steps)
    mask = torch.zeros(len(keys), L, dtype=torch.float64)
    tlr = torch.zeros(len(keys), L, dtype=torch.float64)
    for i, ss in enumerate(steps):
        for k, r in enumerate(ss):
            mask[i, k * per : k * per + model] = 1.0
            tlr[i, k * per + model - 1] = r["reward"]

    def obj(values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out

    return keys, steps, tlr, mask, obj


def test_verl_branches_equal_the_cli(sokoban, branch):
    from crbc_viz.integrations.verl import compute_advantage

    rows, df, _ = sokoban
    keys, steps, tlr, mask, obj = _trajectory_rows(rows)
    uid = obj([g for g, _ in keys])
    nt = {
        "uid": uid,
        "crbc_anchors": obj([[r["anchor_obs"] for r in ss] for ss in steps]),
        "crbc_actions": obj([[r["action"] for r in ss] for ss in steps]),
        "crbc_success": np.array([ss[-1]["success"] for ss in steps]),
    }
    adv, _ = compute_advantage(tlr.to(branch), mask.to(branch), uid, non_tensor_batch=nt)
    assert adv.device.type == branch and adv.dtype == torch.float64
    d = df[df["estimator"] == "crbc"].set_index(["group_id", "traj_id", "step_idx"])["advantage"]
    want = torch.zeros_like(tlr)
    for i, ((g, t), ss) in enumerate(zip(keys, steps)):
        for k, r in enumerate(ss):
            want[i, k * 5 : k * 5 + 3] = d[(g, t, r["step_idx"])]
    np.testing.assert_allclose(adv.cpu().numpy(), want.numpy(), atol=1e-9, rtol=0)
    assert np.abs(want.numpy()).max() > 1.0


def test_trl_branches_equal_the_cli(sokoban, tmp_path, branch):
    """TRL: a completion's reward (one reward function) on its last step, success its reward
    > 0 (so the CLI is given no success column); every completion token, tool results
    included, carries its step's credit as float32."""
    from crbc_viz.integrations.trl import completion_advantages

    rows, _, _ = sokoban
    keys, steps, _, tool_mask, _ = _trajectory_rows(rows)
    canon = [
        {k: r[k] for k in ("group_id", "traj_id", "step_idx", "anchor_obs", "action")}
        | {"reward": r["episode_return"] if k == len(ss) - 1 else 0.0}
        for ss in steps
        for k, r in enumerate(ss)
    ]
    df = cli_scores(write_jsonl(tmp_path / "trl.jsonl", canon), ["crbc"], tmp_path)
    d = df.set_index(["group_id", "traj_id", "step_idx"])["advantage"]
    lens = torch.tensor([len(ss) for ss in steps])
    completion_mask = (torch.arange(tool_mask.shape[1])[None, :] < 5 * lens[:, None]).float()
    local = [
        {"anchors": [r["anchor_obs"] for r in ss], "actions": [r["action"] for r in ss], "starts": None}
        for ss in steps
    ]
    rewards = torch.tensor([[ss[-1]["episode_return"]] for ss in steps])
    adv = completion_advantages(
        completion_mask.to(branch),
        tool_mask.float().to(branch),
        local,
        rewards,
        torch.ones(1),
        num_generations=8,
    )
    assert adv.device.type == branch and adv.dtype == torch.float32
    want = np.zeros(tuple(adv.shape))
    for i, ((g, t), ss) in enumerate(zip(keys, steps)):
        for k, r in enumerate(ss):
            want[i, k * 5 : k * 5 + 5] = d[(g, t, r["step_idx"])]
    np.testing.assert_allclose(adv.cpu().numpy(), want, atol=FLOAT32_ATOL, rtol=0)


def test_an_estimator_without_a_torch_twin_takes_the_numpy_reference(branch):
    """``trace`` has no torch twin: the device branch runs its numpy reference, which names the
    signal these rows lack, as the host branch does."""
    from crbc_viz.errors import MissingSignalError

    steps = _core.canonical_steps(
        np.array(["g"] * 4, dtype=object),
        np.array(["a", "a", "b", "b"], dtype=object),
        np.array([0, 1, 0, 1]),
        np.array(["s0", "s1", "s0", "s2"], dtype=object),
        np.array([0.0, 1.0, 0.0, 0.0]),
    )
    with pytest.raises(MissingSignalError, match="gold_logprob"):
        _core.score_steps(steps, "trace", device=branch)


# ---- the token helpers: host (numpy) and device (torch) halves against plain loops ----------


def _loop_turns(mask, starts=None):
    """Per row, the token ranges of its steps, by a loop over the tokens."""
    B, L = mask.shape
    out = []
    for r in range(B):
        if starts is not None:
            begins = list(starts[r])
        else:
            begins = [j for j in range(L) if mask[r, j] != 0 and (j == 0 or mask[r, j - 1] == 0)]
        ends = begins[1:] + [L]
        if begins:
            begins[0] = 0  # tokens before the first step belong to it
        out.append(list(zip(begins, ends)))
    return out


@pytest.mark.parametrize("given_starts", [False, True])
@pytest.mark.parametrize("density", [1.0, 0.05])  # a reward on every token / on a few (sparse sums)
def test_turns_sums_and_spread_equal_token_loops(branch, given_starts, density):
    rng = np.random.default_rng(3)
    B, L = 7, 13
    mask = (rng.random((B, L)) < 0.5).astype(np.float32)
    mask[2] = 0.0  # a row without a step
    rewards = rng.normal(size=(B, L)) * (rng.random((B, L)) < density)
    starts = None
    if given_starts:
        starts = [
            sorted(rng.choice(L, size=int(rng.integers(0, 4)), replace=False).tolist()) for _ in range(B)
        ]
    turns = _core.Turns.of(torch.tensor(mask, device=branch), starts)
    ranges = _loop_turns(mask, starts)
    assert turns.n_steps.tolist() == [len(r) for r in ranges]
    want_sums = [rewards[r, a:b].sum() for r in range(B) for a, b in ranges[r]]
    got = turns.sums(torch.tensor(rewards, device=branch))
    np.testing.assert_allclose(got, want_sums, atol=1e-12, rtol=0)
    values = rng.normal(size=len(want_sums))
    want = np.zeros((B, L))
    k = 0
    for r in range(B):
        for a, b in ranges[r]:
            want[r, a:b] = values[k] * mask[r, a:b]
            k += 1
    spread = turns.spread(torch.tensor(values), torch.tensor(mask, device=branch), torch.float64)
    assert spread.device.type == branch
    np.testing.assert_allclose(spread.cpu().numpy(), want, atol=0, rtol=0)
    tok_step, n_steps = _core.token_steps(torch.tensor(mask, device=branch), starts)
    assert n_steps.tolist() == turns.n_steps.tolist()
    for r in range(B):
        for k, (a, b) in enumerate(ranges[r]):
            assert tok_step[r, a:b].tolist() == [k] * (b - a)


@pytest.mark.parametrize(
    "mask,rewards,match",
    [
        (torch.full((2, 3), 0.5), torch.zeros(2, 3), r"response_mask: row 0 holds 0\.5"),
        (
            torch.tensor([[1.0, 0, 1], [1, float("nan"), 0]]),
            torch.zeros(2, 3),
            r"response_mask: row 1 holds nan",
        ),
        (
            torch.ones(2, 3),
            torch.tensor([[0.0, 0, 0], [0, float("inf"), 0]]),
            r"token_level_rewards: row 1 holds",
        ),
    ],
)
def test_token_checks_on_every_branch(branch, mask, rewards, match):
    with pytest.raises(_core.IntegrationInputError, match=match):
        _core.token_tensors(rewards.to(branch), mask.to(branch))


def test_masked_row_sum_and_masked_on_every_branch(branch):
    rng = np.random.default_rng(4)
    mask = (rng.random((5, 6)) < 0.5).astype(np.float32)
    rewards = rng.normal(size=(5, 6)).astype(np.float32)
    got = _core.masked_row_sum(torch.tensor(rewards, device=branch), torch.tensor(mask, device=branch))
    want = [sum(float(rewards[r, j]) for j in range(6) if mask[r, j]) for r in range(5)]
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.cpu().numpy(), want, atol=1e-12, rtol=0)
    values = torch.tensor(rng.normal(size=(5, 1)))
    out = _core.masked(values, torch.tensor(mask, device=branch), torch.float32)
    assert out.dtype == torch.float32 and out.device.type == branch
    np.testing.assert_array_equal(out.cpu().numpy(), values.numpy().astype(np.float32) * mask)
