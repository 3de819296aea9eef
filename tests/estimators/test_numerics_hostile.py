"""Estimator numerics under hostile settings: ``eps = 0`` on groups with no spread, the numba
visit-local engine at β = 1, what ``score`` says it wrote, and the cost of GiGPO's similarity
mode on long anchor texts.

Expected numbers come from the spec (ESTIMATORS.md: zero spread gives 0 in §1, §2.3, §4.5/4.8,
§9.5 and §12.2), from hand arithmetic, or from difflib itself — never from the code under test.
"""

from __future__ import annotations

import difflib
import json
import math
import random
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from crbc_viz import load_rollouts, score
from crbc_viz.cli import main
from crbc_viz.errors import BackendUnavailable
from crbc_viz.estimators import param_infos, registry
from crbc_viz.ops.segments import segment_zscore
from helpers import ROOT, write_jsonl

SEARCH = ROOT / "sample_rollouts" / "search" / "search_signals.jsonl"


# ---------------------------------------------------------------- eps = 0


def _eps_params(spec) -> dict:
    """Every eps-like parameter of ``spec`` that may be 0, set to 0."""
    return {
        i.name: 0.0
        for i in param_infos(spec.params_cls)
        if i.name.endswith("eps") and i.low == 0 and not i.low_open
    }


#: Extra settings where eps enters a different formula (GiGPO divides only in mean_std_norm).
_MODES = {
    "grpo": [{"stats": "trajectory"}, {"stats": "cross_steps"}],
    "gigpo": [
        {"mode": "mean_std_norm", "episode_stats": "cross_steps"},
        {"mode": "mean_std_norm", "episode_stats": "trajectory"},
    ],
}
EPS_CASES = [
    pytest.param(spec.name, backend, extra, id=f"{spec.name}-{backend}-{i}")
    for spec in registry.specs()
    if _eps_params(spec)
    for backend in registry.backends(spec)
    for i, extra in enumerate(_MODES.get(spec.name, [{}]))
]
#: All-failure groups: every outcome, reward and value is 0 (§1 and §2.3 A = 0 on equal
#: outcomes; §4.8 GRAFT "all-failure group: everything is 0"; Gated-BEPO's V and A^E are 0;
#: §9.5 A_seq = 0 gives A = 0; §12.2 Â = 0 gives 0; GraphGPO, PGPO and RTMC have no success to
#: measure distances, potentials or returns from).
ZERO_ON_ALL_FAILURE = {
    "grpo",
    "gigpo",
    "graft",
    "gated_bepo",
    "agentopsd",
    "iapo",
    "shortest_path",
    "pgpo",
    "rtmc",
}
#: Every rollout of the group the same path to success: every statistic these take a spread of
#: has none (per anchor, per outgoing edge, per group), and no anchor has two successors.
ZERO_ON_IDENTICAL = {"grpo", "gigpo", "graft", "gated_bepo", "agentopsd", "iapo", "shortest_path", "pgpo"}


def _search_rows() -> list[dict]:
    return [json.loads(line) for line in SEARCH.read_text(encoding="utf-8").splitlines()]


def _with_outcome(rows: list[dict], success: bool) -> list[dict]:
    return [
        dict(
            r, success=success, reward=1.0 if (success and r["done"]) else 0.0, episode_return=float(success)
        )
        for r in rows
    ]


def _identical(rows: list[dict], copies: int = 3) -> list[dict]:
    """The first rollout of the sample (its signals; one anchor per step, no revisit),
    ``copies`` times, all successes, in one group."""
    first = [r for r in rows if r["group_id"] == rows[0]["group_id"] and r["traj_id"] == rows[0]["traj_id"]]
    first = [dict(r, anchor_obs=f"state {r['step_idx']}") for r in _with_outcome(first, True)]
    return [dict(r, traj_id=f"copy{c}") for c in range(copies) for r in first]


@pytest.fixture(scope="module")
def eps_batches(tmp_path_factory):
    d = tmp_path_factory.mktemp("eps")
    rows = _search_rows()
    return {
        "all_failure": load_rollouts(write_jsonl(d / "fail.jsonl", _with_outcome(rows, False))),
        "all_success": load_rollouts(write_jsonl(d / "succ.jsonl", _with_outcome(rows, True))),
        "identical": load_rollouts(write_jsonl(d / "same.jsonl", _identical(rows))),
    }


def _score(batch, name, backend, **params):
    try:
        return score(batch, name, backend=backend, device="cpu", **params)
    except BackendUnavailable as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("name, backend, extra", EPS_CASES)
def test_eps_zero_gives_finite_credit_and_zero_on_no_spread(eps_batches, name, backend, extra):
    """``eps = 0`` (the registry allows it) on all-failure / all-success groups gives no
    NaN or inf on any backend, and exactly 0 wherever the spec says zero spread gives 0."""
    params = {**_eps_params(registry.get(name)), **extra}
    for kind, batch in eps_batches.items():
        r = _score(batch, name, backend, **params)
        for field in ("credit", "advantage"):
            col = np.asarray(getattr(r, field), dtype=np.float64)
            assert np.isfinite(col).all(), (kind, field, col[~np.isfinite(col)][:5])
        zero = {"all_failure": ZERO_ON_ALL_FAILURE, "identical": ZERO_ON_IDENTICAL}.get(kind, ())
        if name in zero:
            assert np.all(r.advantage == 0.0), (kind, np.abs(r.advantage).max())


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_equal_float_returns_give_exactly_zero_at_eps_zero(tmp_path, backend):
    """Three rollouts with episode_return 0.1: the mean, 0.30000000000000004 / 3, is not 0.1,
    and (R − mean) / (std + 0) read that rounding as ±0.82 with eps = 0. §1: equal outcomes
    give 0."""
    rows = [
        dict(group_id="g", traj_id=f"t{i}", step_idx=0, anchor_obs="s", action="a", reward=0.1, done=True,
             success=False, episode_return=0.1)
        for i in range(3)
    ]  # fmt: skip
    b = load_rollouts(write_jsonl(tmp_path / "r.jsonl", rows))
    for stats in ("trajectory", "cross_steps"):
        r = _score(b, "grpo", backend, eps=0.0, outcome="return", stats=stats)
        assert np.all(r.advantage == 0.0), r.advantage
    r = _score(b, "gigpo", backend, eps=0.0, outcome="return", mode="mean_std_norm", step_reward="outcome")
    assert np.all(r.advantage == 0.0), r.advantage


def test_zscore_of_a_std_that_rounds_to_zero_is_finite():
    """1e-200 and 2e-200 differ, but their squared deviations underflow: std = 0, and
    x / (0 + eps) with eps = 0 was ±inf. A std of 0 is no spread: 0."""
    z, _, std, _ = segment_zscore(np.array([1e-200, 2e-200, 3.0, 5.0]), np.array([0, 0, 1, 1]), 2, eps=0.0)
    assert std[0] == 0.0
    assert z[0] == 0.0 and z[1] == 0.0
    # The other segment is untouched: ±(1 / √2) from (x − 4) / sd(3, 5) = ±1 / √2.
    assert z[2:] == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], abs=1e-15)


def test_iapo_constant_features_fall_back_to_uniform_weights_at_eps_zero(tmp_path):
    """§12.2 "uniform fallback (constant features give w ≡ 1)": with eps = 0 the feature
    z-score was 0/0. A success and a failure: Â = ±0.5 / sd(1, 0) = ±1/√2 (adv_eps = 0)."""
    rows = [
        dict(group_id="g", traj_id=t, step_idx=k, anchor_obs=f"s{k}", action="a", reward=0.0, done=k == 1,
             success=t == "win", influence_edges=[], is_error=False, num_tokens=10)
        for t in ("win", "lose")
        for k in range(2)
    ]  # fmt: skip
    b = load_rollouts(write_jsonl(tmp_path / "i.jsonl", rows))
    r = score(b, "iapo", backend="numpy", eps=0.0, adv_eps=0.0)
    assert np.all(r.credit == 1.0), r.credit
    win = b.steps["traj_id"].to_numpy() == "win"
    assert r.advantage[win] == pytest.approx([1 / math.sqrt(2)] * 2, abs=1e-15)
    assert r.advantage[~win] == pytest.approx([-1 / math.sqrt(2)] * 2, abs=1e-15)


# ---------------------------------------------------------------- numba visit-local


def _numba_or_skip():
    from crbc_viz.backends.numba import available

    if not available():
        pytest.skip("numba is not installed")


@pytest.fixture(scope="module")
def all_success_log(tmp_path_factory):
    """One all-success group with branching anchors, revisits and rollouts of 2 to 9 steps
    (anchor / action visit counts such as 3, 5, 7 and 10, whose reciprocals are inexact)."""
    rng = random.Random(3)
    rows = []
    for t in range(7):
        n = rng.randint(2, 9)
        rows += [
            dict(group_id="g", traj_id=f"t{t}", step_idx=k, anchor_obs=f"s{rng.randint(0, 3)}",
                 action=f"a{rng.randint(0, 2)}", reward=float(k == n - 1), done=k == n - 1, success=True)
            for k in range(n)
        ]  # fmt: skip
    return write_jsonl(tmp_path_factory.mktemp("vl") / "all_success.jsonl", rows)


@pytest.mark.parametrize("name, extra", [("visit_local", {}), ("crbc", {"depth": 0})])
def test_numba_visit_local_at_beta_one_matches_numpy(all_success_log, name, extra):
    """At β = 1 every visit-local return of an all-success group is 1, so V = Q = 1 and the
    credit is 0 (§3.7, K = 0). Adding 1/visits once per visit gave V = 0.9999999999999999,
    which σ_min = 1e-9 turned into ±1e-7 credit on numba only."""
    _numba_or_skip()
    b = load_rollouts(all_success_log)
    p = dict(beta=1.0, sigma_min=1e-9, **extra)
    ref = score(b, name, backend="numpy", **p)
    got = score(b, name, backend="numba", **p)
    assert np.all(got.value == 1.0) and np.all(got.q_value == 1.0), (got.value, got.q_value)
    for field in ("value", "q_value", "credit", "advantage"):
        np.testing.assert_allclose(
            getattr(got, field), getattr(ref, field), atol=1e-12, rtol=0, err_msg=field
        )
    assert np.all(got.credit == 0.0)


def test_cli_visit_local_credit_does_not_depend_on_the_backend(all_success_log, tmp_path):
    """The CLI's answer at β = 1 is the same whichever backend runs (``auto`` may pick either)."""
    _numba_or_skip()
    out = {}
    for backend in ("numpy", "numba"):
        path = tmp_path / f"{backend}.csv"
        args = ["score", str(all_success_log), "-e", "visit_local", "-p", "beta=1", "-p", "sigma_min=1e-9"]
        assert main([*args, "--backend", backend, "-o", str(path)]) == 0
        out[backend] = pd.read_csv(path)
    for col in ("value", "q_value", "credit", "advantage"):
        np.testing.assert_array_equal(out["numba"][col].to_numpy(), out["numpy"][col].to_numpy(), err_msg=col)
    assert (out["numba"]["credit"] == 0).all()


# ---------------------------------------------------------------- what score says


def test_score_counts_each_estimator_once(tmp_path, capsys, caplog):
    """``-e crbc -e crbc`` scores crbc once; the summary line says what was written."""
    from helpers import TOY

    out = tmp_path / "s.csv"
    args = ["-e", "crbc", "-e", "crbc", "-e", "grpo", "-e", "crbc"]
    assert main(["score", str(TOY), *args, "-o", str(out)]) == 0
    df = pd.read_csv(out)
    steps = 3 + 3 + 4 + 5  # the toy group's rollouts, ESTIMATORS.md §14.1
    assert len(df) == 2 * steps and list(dict.fromkeys(df["estimator"])) == ["crbc", "grpo"]
    said = capsys.readouterr().out
    assert f"wrote {2 * steps} rows ({steps} steps x 2 estimator(s))" in said, said
    assert any("named more than once" in r.getMessage() and "crbc" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- similarity cost


def test_similar_decides_as_difflib_ratio():
    """`similar` (bounded, early-stopping) decides ``ratio() >= thresh`` exactly as difflib
    does, on random texts: tiny and large alphabets, near-duplicates, lengths over difflib's
    200-character autojunk cut, empty texts."""
    from crbc_viz.estimators.gigpo import similar

    rng = random.Random(7)
    for _ in range(400):
        alphabet = [chr(97 + i) if i < 26 else chr(0x100 + i) for i in range(rng.choice([1, 2, 5, 26, 300]))]
        a = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 3, 40, 250])))
        if rng.random() < 0.5:
            b = list(a)
            for _ in range(rng.randint(0, 6)):
                if b:
                    b[rng.randrange(len(b))] = rng.choice(alphabet)
            b = "".join(b)
        else:
            b = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 5, 60, 260])))
        ratio = difflib.SequenceMatcher(None, a, b).ratio()
        for thresh in (0.05, 0.5, 0.8, 0.9, 0.95, 0.99, ratio):
            if 0 < thresh < 1:
                assert similar(a, b, thresh) == (ratio >= thresh), (a, b, thresh, ratio)


_SIMILARITY_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from crbc_viz import build_graph, load_rollouts
    from crbc_viz.errors import EstimatorInputError
    from crbc_viz.estimators.gigpo import similarity_clusters

    graph = build_graph(load_rollouts(sys.argv[1]))
    t = time.perf_counter()
    try:
        similarity_clusters(graph, 0.95)
        verdict = "computed"
    except EstimatorInputError as e:
        verdict = str(e)
    print(json.dumps({"seconds": time.perf_counter() - t, "verdict": verdict}))
    """
)


def _long_anchor_log(path, symbols: int, copies: int) -> str:
    """8 one-step rollouts whose anchors are shuffles of the same ``symbols × copies`` text:
    the character counts agree (no cheap bound can tell them apart), but the texts are far
    apart, and each character stays under difflib's popularity cut — its worst case."""
    rng = random.Random(0)
    base = [chr(0x100 + i) for i in range(symbols)] * copies
    rows = []
    for t in range(8):
        rng.shuffle(base)
        rows.append(dict(group_id="g", traj_id=f"t{t}", step_idx=0, anchor_obs="".join(base), action="a",
                         reward=0.0, done=True, success=t % 2 == 0))  # fmt: skip
    return str(write_jsonl(path, rows))


def _similarity_in_child(log: str, env: dict | None = None) -> dict:
    import os

    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SIMILARITY_CHILD, log],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        pytest.fail("similarity mode ran past 60 s: its work limit does not bound its real cost")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_similarity_on_eight_60k_anchors_finishes_fast(tmp_path):
    """8 anchors of 60,000 characters (one search over them walks 36M index entries)
    ran past 120 s under the work limit; now refused or computed well within 30 s, and a refusal
    names the setting that raises the limit."""
    res = _similarity_in_child(_long_anchor_log(tmp_path / "long.jsonl", symbols=100, copies=600))
    assert res["seconds"] < 30, res  # (ran past 120 s; 30 leaves room for a busy machine)
    assert res["verdict"] == "computed" or "CRBC_VIZ_MAX_SIMILARITY_WORK" in res["verdict"], res


def test_similarity_limit_counts_every_block_search(tmp_path):
    """Searches after the first are charged too: 8 anchors of 20,000 characters (each search
    over one walks about 1.3M entries) under a limit of 3M stop after a few searches, where
    counting characters (28 pairs × 40,000 = 1.1M) let all 28 slow comparisons run."""
    log = _long_anchor_log(tmp_path / "mid.jsonl", symbols=300, copies=67)
    res = _similarity_in_child(log, env={"CRBC_VIZ_MAX_SIMILARITY_WORK": "3000000"})
    assert res["seconds"] < 30, res  # (ran past 120 s; 30 leaves room for a busy machine)
    assert "3,000,000" in res["verdict"] and "group 'mid/0/g'" in res["verdict"], res
