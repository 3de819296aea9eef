"""ProxMO (ESTIMATORS.md §16) against the authors' code (GithubX-F/ProxMO-RL), a brute force
and its properties."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from authors_code import batch_rows, check_sources, float64_torch, load, verl_arrays

from crbc_viz import build_graph, load_rollouts
from crbc_viz.errors import EstimatorInputError
from crbc_viz.estimators.proxmo import proxmo, tfidf_vectors
from helpers import TOY

torch = pytest.importorskip("torch")


def _graph(tmp_path, rows, name="b.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return build_graph(load_rollouts(path))


@pytest.fixture(scope="module")
def authors():
    check_sources()
    pytest.importorskip(
        "sklearn", reason="the authors' step_soft_reward needs scikit-learn's TfidfVectorizer"
    )
    return load("proxmo-496efa7", "proxmo/core_proxmo.py", "authors_core_proxmo")


def run_authors(mod, graph, R, *, omega, psc_alpha, psc_target_range, penalty=0.1):
    """The trainer's call (mode 'soft_grouping', PSC on) on the graph's rows, with the
    trainer's β = target_range / (σ(1) − 0.5) and the penalty on token_level_rewards."""
    b = graph.batch
    uid, traj, obs, valid = verl_arrays(graph)
    score = b.traj_success[b.step_traj].astype(np.float64) - penalty * (~valid)
    with float64_torch(mod) as t:
        beta = (psc_target_range / (t.sigmoid(t.tensor(1.0)) - 0.5)).item()
        adv, _ = mod.compute_proxmo_outcome_advantage(
            token_level_rewards=t.tensor(score)[:, None],
            step_rewards=t.tensor(R),
            response_mask=t.ones(len(score), 1),
            anchor_obs=obs,
            index=uid,
            traj_index=traj,
            step_advantage_w=omega,
            mode="soft_grouping",
            enable_psc=True,
            psc_alpha=psc_alpha,
            psc_beta=beta,
        )
        soft = mod.step_soft_reward(t.tensor(R), t.ones(len(score), 1), obs, uid)
    return adv[:, 0].numpy(), soft[:, 0].numpy()


@pytest.mark.parametrize("seed", [7, 8])
@pytest.mark.parametrize("omega,alpha,target", [(1.0, 4.0, 0.05), (0.5, 5.0, 0.2)])
def test_equals_the_authors_code_on_a_batch(tmp_path, authors, seed, omega, alpha, target):
    """Several prompt groups: the authors fit one vectorizer on the batch (idf_scope='batch')."""
    g = _graph(tmp_path, batch_rows(seed))
    r = proxmo(g, idf_scope="batch", omega=omega, psc_alpha=alpha, psc_target_range=target)
    want, soft = run_authors(authors, g, r.q_value, omega=omega, psc_alpha=alpha, psc_target_range=target)
    np.testing.assert_allclose(r.credit, soft, rtol=0, atol=1e-9)
    np.testing.assert_allclose(r.advantage, want, rtol=0, atol=1e-9)
    # Fitted per group instead, the IDF differs from the batch's: so do the numbers.
    assert not np.allclose(proxmo(g, omega=omega).credit, soft, rtol=0, atol=1e-6)


def test_equals_the_authors_code_on_one_group(tmp_path, authors):
    """One prompt group: the default per-group fit is the authors' fit."""
    g = _graph(tmp_path, [r for r in batch_rows(8) if r["group_id"] == "g1"])
    r = proxmo(g)
    want, _ = run_authors(authors, g, r.q_value, omega=1.0, psc_alpha=4.0, psc_target_range=0.05)
    np.testing.assert_allclose(r.advantage, want, rtol=0, atol=1e-9)


def test_step_returns_equal_the_authors_float32_returns(tmp_path, authors):
    """compute_step_discounted_returns works in float32: agreement to float32 round-off."""
    from types import SimpleNamespace

    g = _graph(tmp_path, batch_rows(7))
    b = g.batch
    uid, traj, obs, valid = verl_arrays(g)
    batch = SimpleNamespace(
        non_tensor_batch={
            "rewards": b.steps["reward"].to_numpy(dtype=np.float64),
            "traj_uid": traj,
            "active_masks": np.ones(b.num_steps, dtype=bool),
        },
        batch={"input_ids": torch.zeros(1)},
    )
    want = authors.compute_step_discounted_returns(batch, 0.95).numpy() - 0.1 * (~valid)
    np.testing.assert_allclose(proxmo(g).q_value, want, rtol=1e-6, atol=1e-5)


def test_tfidf_equals_a_hand_count():
    """Two documents 'the cat sat', 'the cat' (one row each): idf(the) = idf(cat) = 1,
    idf(sat) = ln(3/2) + 1; rows L2-normalised."""
    v = tfidf_vectors(["The cat sat", "the cat"], np.array([1.0, 1.0]), 1024).toarray()
    i_sat = math.log(1.5) + 1
    row0 = np.array([1.0, i_sat, 1.0]) / math.sqrt(2 + i_sat**2)  # cat, sat, the
    np.testing.assert_allclose(v, [row0, [1 / math.sqrt(2), 0, 1 / math.sqrt(2)]], rtol=0, atol=1e-15)
    assert tfidf_vectors(["a", "!"], np.array([1.0, 1.0]), 1024) is None  # no 2-character term


def test_brute_force_soft_baseline_on_the_toy_group():
    """Every step against every step of the group, as the authors' masked matrix does."""
    g = build_graph(load_rollouts(TOY))
    r = proxmo(g, psc=False)
    texts = list(g.batch.steps["anchor_obs"].astype(str))
    vec = tfidf_vectors(texts, np.ones(len(texts)), 1024).toarray()
    vec = vec / (np.linalg.norm(vec, axis=1, keepdims=True) + 1e-8)
    w = np.exp(vec @ vec.T / 0.1)
    w /= w.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(r.value, w @ r.q_value, rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.credit, r.q_value - w @ r.q_value, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shared", [True, False])
def test_soft_baseline_in_blocks_equals_the_whole_softmax(monkeypatch, shared):
    """A group's soft baseline, computed a few rows at a time (`CELLS` made small) on the
    pairs that share a term, equals the softmax over the whole similarity matrix of its steps
    (each distinct text repeated by its count), where most pairs share a term and where few
    do (distinct ids with a sprinkle of common words: the sparse route)."""
    from crbc_viz.estimators import proxmo as mod

    rng = np.random.default_rng(3)
    pool = ["kitchen", "apple", "box", "push", "left"] if shared else [f"id{i}" for i in range(400)]
    docs = sorted(
        {
            " ".join(rng.choice(pool, size=int(rng.integers(0, 4))))
            + (" go north" if rng.random() < 0.1 else "")
            + f" x{i}"
            for i in range(300)
        }
    )
    count = rng.integers(1, 4, size=len(docs))
    doc = np.repeat(np.arange(len(docs)), count)
    R = rng.normal(size=doc.size)
    vec = tfidf_vectors(docs, count.astype(float), 64)
    dense = vec.toarray()[doc]
    w = np.exp(dense @ dense.T / 0.1)
    want = (w @ R) / w.sum(axis=1)
    monkeypatch.setattr(mod, "CELLS", 7 * len(docs))  # blocks of 7 rows
    got = mod._group_baseline(vec, R, doc, 0.1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_permuting_trajectories_changes_nothing(tmp_path):
    rows = batch_rows(9)
    by_traj = {}
    for r in rows:
        by_traj.setdefault((r["group_id"], r["traj_id"]), []).append(r)
    shuffled = [r for k in reversed(list(by_traj)) for r in by_traj[k]]
    key = lambda res: res.to_frame().sort_values(["group_id", "traj_id", "step_idx"])["advantage"].to_numpy()  # noqa: E731
    for scope in ("group", "batch"):
        a = proxmo(_graph(tmp_path, rows, "a.jsonl"), idf_scope=scope)
        b = proxmo(_graph(tmp_path, shuffled, "b.jsonl"), idf_scope=scope)
        np.testing.assert_allclose(key(a), key(b), rtol=0, atol=1e-12)


def test_all_success_episode_term_and_flat_returns_are_zero(tmp_path):
    rows = [dict(r, reward=0.0, success=False, done=r["done"]) for r in batch_rows(7)]
    g = _graph(tmp_path, [{k: v for k, v in r.items() if k != "is_action_valid"} for r in rows])
    r = proxmo(g, norm_eps=0.0)
    assert np.all(r.advantage == 0.0) and np.all(r.credit == 0.0)


def test_rejects_out_of_range_parameters():
    g = build_graph(load_rollouts(TOY))
    with pytest.raises(EstimatorInputError, match="'temperature' of 'proxmo': must be > 0"):
        proxmo(g, temperature=0.0)
    with pytest.raises(EstimatorInputError, match="'idf_scope' of 'proxmo'"):
        proxmo(g, idf_scope="run")


def test_tfidf_vocabulary_cut_equals_sklearn():
    """The max_features cut (ties included) and repeated rows, against TfidfVectorizer."""
    text = pytest.importorskip("sklearn.feature_extraction.text")
    docs = [
        "red apple red pear",
        "green pear",
        "blue sky over the sea",
        "red sky",
        "Apple pie, apple tart!",
        "x",
    ]
    mult = np.array([2, 1, 3, 1, 1, 2])
    rows = [d for d, k in zip(docs, mult) for _ in range(k)]
    for k in (1, 3, 5, 1024):
        want = text.TfidfVectorizer(max_features=k).fit_transform(rows).toarray()
        got = tfidf_vectors(docs, mult.astype(float), k).toarray()
        np.testing.assert_allclose(np.repeat(got, mult, axis=0), want, rtol=0, atol=1e-12, err_msg=str(k))
