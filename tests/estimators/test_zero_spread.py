"""Zero spread within round-off gives 0, on every backend (ESTIMATORS.md: zero spread gives 0;
docs/estimators.md, "Zero spread"; the rule is `crbc_viz.ops.segments.roundoff_tol`).

At γ = β = 1 an all-success group has V ≡ 1 at every anchor, Q ≡ 1 for every action and every
discounted return equal to the final reward: each spread an estimator divides by is 0 in exact
arithmetic, so every credit is 0 (§3.9: A^G = 0 on equal outcomes; V constant gives A = Q − V = 0
and TD = γV′ − V = 0). In floating point the closure solve leaves ~1e-16 of round-off, and a
z-score at eps = 0 (or A / σ_min with σ_min = 1e-9) turned it into credits of order 1 (GRAFT:
±2.9, different on each backend) or ±2e-7 (CRBC). All-failure groups have V ≡ 0 exactly. The
expected numbers are these exact-arithmetic zeros, or hand computations for the genuine spreads
that must be kept.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import random

import numpy as np
import pytest

import crbc_viz
from crbc_viz import load_rollouts, score
from crbc_viz.estimators import param_infos, registry
from crbc_viz.ops.segments import F64_EPS, SPREAD_ULPS, no_spread, roundoff_tol
from crbc_viz.synthetic import random_mdp_batch
from helpers import write_jsonl

HAVE = {
    "numba": importlib.util.find_spec("numba") is not None,
    "torch": importlib.util.find_spec("torch") is not None,
}

#: Constant logged signals, so that the signal-based estimators run too (no evidence, no
#: influence edges, no active rubric item, a neutral judge score, a constant log-probability).
SIGNALS = dict(
    turn_evidence=0.0,
    influence_edges=[],
    is_error=False,
    num_tokens=10,
    rubric=[{"id": "e1", "category": "evidence"}],
    rubric_active=[],
    judge_score=1.0,
    gold_logprob=-1.0,
)


def _rows(walks: list[list[tuple[str, str]]], success: bool, group: str = "g") -> list[dict]:
    rows = []
    for t, walk in enumerate(walks):
        n = len(walk)
        rows += [
            dict(group_id=group, traj_id=f"t{t}", step_idx=k, anchor_obs=s, action=a,
                 reward=float(success and k == n - 1), done=k == n - 1, success=success, **SIGNALS)
            for k, (s, a) in enumerate(walk)
        ]  # fmt: skip
    return rows


def _random_walks(seed: int) -> list[list[tuple[str, str]]]:
    """7 rollouts of 2 to 9 steps over 4 anchors and 3 actions: revisits and branching, with
    visit counts (3, 5, 7 ...) whose reciprocals are inexact."""
    rng = random.Random(seed)
    return [
        [(f"s{rng.randint(0, 3)}", f"a{rng.randint(0, 2)}") for _ in range(rng.randint(2, 9))]
        for _ in range(7)
    ]


def _chain_walks(seed: int, length: int = 50) -> list[list[tuple[str, str]]]:
    """5 walks along a 50-anchor chain (forward 0.8, stay 0.1, back 0.1; 3 actions), each ending
    at the chain's end: 50+ steps with self-loops and back-steps."""
    rng = random.Random(seed)
    walks = []
    for _ in range(5):
        pos, walk = 0, []
        while pos < length:
            u = rng.random()
            walk.append((f"c{pos}", f"a{rng.randint(0, 2)}"))
            pos = pos + 1 if u < 0.8 else (pos if u < 0.9 else max(pos - 1, 0))
        walks.append(walk)
    return walks


@pytest.fixture(scope="module")
def flat_logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("flat")
    return {
        "all_success": write_jsonl(d / "succ.jsonl", _rows(_random_walks(3), True)),
        "all_failure": write_jsonl(d / "fail.jsonl", _rows(_random_walks(3), False)),
        "long_chain": write_jsonl(d / "chain.jsonl", _rows(_chain_walks(5), True)),
        "long_chain_fail": write_jsonl(d / "chainf.jsonl", _rows(_chain_walks(6), False)),
    }


def _hostile(spec) -> dict:
    """Every eps-like parameter at 0, every σ floor at 1e-9 and every discount at 1."""
    out = {}
    for i in param_infos(spec.params_cls):
        if i.name.endswith("eps") and i.low == 0 and not i.low_open:
            out[i.name] = 0.0
        elif i.name == "sigma_min":
            out[i.name] = 1e-9
        elif i.name in ("gamma", "beta", "eta") and i.high == 1.0:
            out[i.name] = 1.0
    return out


#: Settings where a spread enters a different formula.
EXTRA = {
    "gigpo": [{"mode": "mean_std_norm"}, {"mode": "mean_std_norm", "episode_stats": "trajectory"}],
    "rtmc": [{}, {"normalize": True}],
    "crbc": [{}, {"depth": 0}, {"depth": 3}],
    "graft": [{}, {"singleton": "raw"}],
}
#: shortest_path's graph reward r·ω^(d+1) has a genuine spread on an all-success group (shorter
#: routes get more: §3a); it is computed without round-off, so it is checked on all-failure only.
#: G2PO's SUCCESS boundary scores 10 while a node's score is a mean of γ^(T−t)·R (§16): the
#: next-node scores and score gains of an all-success group have a genuine spread.
GENUINE_ON_SUCCESS = {"shortest_path", "g2po"}
#: Credit columns that are not divided by a spread (raw A^B, raw first-visit A): round-off
#: stays round-off there; their advantage is still 0.
RAW_CREDIT = {"gated_bepo"}

CASES = [
    pytest.param(spec.name, backend, i, id=f"{spec.name}-{backend}-{i}")
    for spec in registry.specs()
    for backend in registry.backends(spec)
    for i in range(len(EXTRA.get(spec.name, [{}])))
]


@pytest.mark.parametrize("name, backend, variant", CASES)
def test_round_off_spread_gives_exactly_zero(flat_logs, name, backend, variant):
    if backend != "numpy" and not HAVE.get(backend, True):
        pytest.skip(f"{backend} is not installed")
    params = {**_hostile(registry.get(name)), **EXTRA.get(name, [{}])[variant]}
    for kind, path in flat_logs.items():
        if kind in ("all_success", "long_chain") and name in GENUINE_ON_SUCCESS:
            continue
        r = score(load_rollouts(path), name, backend=backend, device="cpu", **params)
        adv, credit = np.asarray(r.advantage), np.asarray(r.credit)
        assert np.all(adv == 0.0), (kind, params, np.abs(adv).max())
        if name in RAW_CREDIT:
            assert np.abs(credit).max() <= 1e-12, (kind, np.abs(credit).max())
        elif name in ("iapo",):
            assert np.all(credit == 1.0), (kind, credit)  # Â = 0: the routing weight is 1
        else:
            assert np.all(credit == 0.0), (kind, params, np.abs(credit).max())


def test_graft_and_crbc_at_one_are_zero_on_every_backend(flat_logs):
    """The reported cases: GRAFT γ = 1, eps = 0 (credits up to ±2.9, backends disagreeing by as
    much) and CRBC β = 1, σ_min = 1e-9 (±2e-7), on an all-success and a 50-step chain group."""
    backends = ["numpy"] + [b for b in ("numba", "torch") if HAVE[b]]
    for kind in ("all_success", "long_chain"):
        b = load_rollouts(flat_logs[kind])
        for be in backends:
            g = score(b, "graft", backend=be, device="cpu", gamma=1.0, eps=0.0)
            c = score(b, "crbc", backend=be, device="cpu", beta=1.0, sigma_min=1e-9)
            assert np.all(g.credit == 0.0), (kind, be, np.abs(g.credit).max())
            assert np.all(c.credit == 0.0), (kind, be, np.abs(c.credit).max())


# ---------------------------------------------------------------- backends agree


def _sweep_batch(seed: int):
    """Random groups (cycles, self-loops, truncation), every other one turned all-success:
    genuine spreads and round-off ones in the same batch."""
    b = random_mdp_batch(num_groups=8, rollouts=8, max_steps=40, num_states=10, p_self=0.3, seed=seed)
    success = b.traj_success.copy()
    success[(b.traj_group % 2) == 0] = True
    return dataclasses.replace(b, traj_success=success)


SWEEP = [
    pytest.param(name, backend, id=f"{name}-{backend}")
    for name, backend, _ in registry.kernels()
    if backend != "numpy" and not registry.get(name).requires
]


@pytest.mark.parametrize("name, backend", SWEEP)
def test_backends_agree_on_round_off_sweep(name, backend):
    """numba and torch (CPU) agree with numpy to 1e-9 at eps = 0, σ_min = 1e-9 and discount 1
    on seeded random batches (they disagreed by O(1) where the spread was round-off)."""
    if not HAVE.get(backend, True):
        pytest.skip(f"{backend} is not installed")
    params = _hostile(registry.get(name))
    for seed in range(4):
        graph = crbc_viz.build_graph(_sweep_batch(seed))
        for extra in EXTRA.get(name, [{}]):
            ref = score(graph, name, backend="numpy", **params, **extra)
            got = score(graph, name, backend=backend, device="cpu", **params, **extra)
            for col in ("value", "q_value", "credit", "advantage"):
                np.testing.assert_allclose(
                    getattr(got, col), getattr(ref, col), atol=1e-9, rtol=0, equal_nan=True,
                    err_msg=f"{name}[{backend}] seed {seed} {extra} {col}",
                )  # fmt: skip


# ---------------------------------------------------------------- genuine small spreads


def test_the_rule_and_its_constants():
    """One rule: max − min ≤ SPREAD_ULPS · eps · terms · magnitude."""
    assert SPREAD_ULPS * F64_EPS < 1e-14
    seg = np.array([0, 0, 1, 1, 2, 2, 3])
    x = np.array([1.0, 1.0 + 2e-16, 1e-6, 2e-6, 3.0, 3.0, 5.0])
    # 1 ulp apart: none; 1e-6 apart at 1e-6: a spread; equal; one value; an empty segment.
    assert no_spread(x, seg, 5).tolist() == [True, False, True, True, False]
    # Round-off relative to what the values came from: 1e-16 apart, from values of size 1.
    assert no_spread(np.array([1e-16, -1e-16]), np.zeros(2, int), 1, magnitude=np.ones(2))[0]
    assert not no_spread(np.array([1e-16, -1e-16]), np.zeros(2, int), 1)[0]
    assert roundoff_tol(np.inf, 3) == 0.0


def _grpo_log(tmp_path, returns):
    rows = [
        dict(group_id="g", traj_id=f"t{i}", step_idx=0, anchor_obs="s", action="a", reward=float(R),
             done=True, success=False, episode_return=float(R))
        for i, R in enumerate(returns)
    ]  # fmt: skip
    return load_rollouts(write_jsonl(tmp_path / "r.jsonl", rows))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_genuine_tiny_spreads_are_kept(tmp_path, backend):
    """Returns 1e-6 apart at magnitude 1e-6, and 1e-6 apart at magnitude 1, are real spreads:
    (R − mean) / sd with eps = 0 gives ±√3/2 for (1, 2, 1, 2)·1e-6 (sd = √(1/3)·1e-6) and
    ±1/√2 for (1, 1 + 1e-6) (sd = 1e-6/√2)."""
    if not HAVE.get(backend, True):
        pytest.skip(f"{backend} is not installed")
    r = score(_grpo_log(tmp_path, [1e-6, 2e-6, 1e-6, 2e-6]), "grpo", backend=backend, device="cpu",
              eps=0.0, outcome="return")  # fmt: skip
    assert r.advantage == pytest.approx([-math.sqrt(3) / 2, math.sqrt(3) / 2] * 2, rel=1e-9)
    r = score(_grpo_log(tmp_path, [1.0, 1.000001]), "grpo", backend=backend, device="cpu",
              eps=0.0, outcome="return")  # fmt: skip
    assert r.advantage == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], rel=1e-6)
    r = score(_grpo_log(tmp_path, [1e-6, 2e-6, 1e-6, 2e-6]), "gigpo", backend=backend, device="cpu",
              eps=0.0, mode="mean_std_norm", step_reward="env", outcome="return", gamma=1.0)  # fmt: skip
    # One anchor, one step per rollout: A^S = A^E = ±√3/2 (trajectory and cross-steps agree).
    assert r.credit == pytest.approx([-math.sqrt(3) / 2, math.sqrt(3) / 2] * 2, rel=1e-9)


def test_crbc_keeps_a_genuine_q_spread_of_1e_9(tmp_path):
    """β = 1 − 1e-9: at s0 action a reaches SUCCESS (Q = β), action b goes through s1 first
    (Q = β²). Q differs by β(1 − β) ≈ 1e-9, far above round-off: μ = ½ each, A = ±β(1 − β)/2
    = ±σ, so with σ_min = 1e-12 the credits are ±1 on every backend."""
    rows = [
        dict(group_id="g", traj_id="t0", step_idx=0, anchor_obs="s0", action="a", reward=1.0, done=True,
             success=True),
        dict(group_id="g", traj_id="t1", step_idx=0, anchor_obs="s0", action="b", reward=0.0, done=False,
             success=True),
        dict(group_id="g", traj_id="t1", step_idx=1, anchor_obs="s1", action="c", reward=1.0, done=True,
             success=True),
    ]  # fmt: skip
    b = load_rollouts(write_jsonl(tmp_path / "q.jsonl", rows))
    for backend in ["numpy"] + [x for x in ("numba", "torch") if HAVE[x]]:
        r = score(b, "crbc", backend=backend, device="cpu", beta=1 - 1e-9, sigma_min=1e-12)
        assert r.credit == pytest.approx([1.0, -1.0, 0.0], abs=1e-5), (backend, r.credit)


def test_agentopsd_zero_evidence_keeps_the_sequence_advantage(tmp_path):
    """No evidence (e ≡ 0): B_k = σ(logit B_0) for every k, so q_k = 0 up to the round trip
    σ(logit 3/8) − 3/8 = −5.6e-17, which z-scored gave weights 1 ± b. §9.5: A = A_seq."""
    walks = [[(f"s{k}", "a") for k in range(4)] for _ in range(8)]
    rows = []
    for t, walk in enumerate(walks):
        rows += _rows([walk], t < 3, group="g")
        rows[-4:] = [dict(r, traj_id=f"t{t}") for r in rows[-4:]]
    b = load_rollouts(write_jsonl(tmp_path / "e.jsonl", rows))
    r = score(b, "agentopsd", eps=0.0)
    a_seq = crbc_viz.ops.group_advantage(crbc_viz.build_graph(b))[b.step_traj]
    np.testing.assert_array_equal(r.advantage, a_seq)
