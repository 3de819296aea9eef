"""The adapters' host-side assembly spread over threads (crbc_viz.integrations._threads): the
token passes and the string factorisation cut into chunks of rows give what one pass gives, bit
for bit. Chunk sizes are forced odd (1, 3, 7 rows) so that a chunk boundary that dropped or
repeated a row, token or value would show.

Expected values come from plain Python loops over the rows (first-occurrence dictionaries, run
starts, sums in token order) and from `pandas.factorize` on the whole column; the adapters'
threaded outputs are compared with their one-thread outputs.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import torch

from crbc_viz.integrations import _threads
from crbc_viz.integrations._tokens import Turns, masked, masked_row_sum

CHUNKS = [(3, 1), (4, 3), (2, 7), (3, None)]


@pytest.mark.parametrize(
    "n,per_item,chunk", [(0, 1, 3), (1, 5, 3), (10, 1, 3), (97, 16, 7), (70000, 1, None)]
)
def test_spans_cover_every_item_once(n, per_item, chunk):
    with _threads.using(threads=4, chunk=chunk):
        spans = _threads.spans(n, per_item)
    covered = [i for lo, hi in spans for i in range(lo, hi)]
    assert covered == list(range(n))
    assert spans and all(lo < hi for lo, hi in spans if n)


def _first_occurrence(values):
    seen, codes = {}, []
    for v in values:
        if v is None:
            codes.append(-1)
        else:
            codes.append(seen.setdefault(v, len(seen)))
    return np.array(codes), list(seen)


@pytest.mark.parametrize("threads,chunk", CHUNKS)
@pytest.mark.parametrize("with_missing", [False, True])
def test_factorize_in_chunks_equals_one_pass(threads, chunk, with_missing, monkeypatch):
    monkeypatch.setattr(_threads, "_few_distinct", lambda values, n: True)  # always merge chunks
    rng = np.random.default_rng(threads * 10 + (chunk or 0))
    # Equal strings as distinct objects, so merging across chunks compares text, not identity.
    values = np.array([("s" + str(k) + "x")[:-1] for k in rng.integers(0, 23, 301)], dtype=object)
    if with_missing:
        values[rng.integers(0, 301, 9)] = None
    want_codes, want_uniques = _first_occurrence(values)
    with _threads.using(threads=threads, chunk=chunk):
        codes, uniques = _threads.factorize(values)
    assert codes.tolist() == want_codes.tolist()
    assert list(uniques) == want_uniques
    pd_codes, pd_uniques = pd.factorize(values)
    assert codes.tolist() == pd_codes.tolist() and list(uniques) == list(pd_uniques)


def _mask(rng, B, L):
    m = (rng.random((B, L)) < 0.6).astype(np.float32)
    m[rng.integers(0, B, 2)] = 0.0  # rows without a step
    return m


def _runs(mask):
    """Per row, the (start, end) token spans of its steps, by a loop: a step starts on the first
    token of each run of ones and runs to the next start (tokens before the first: in it)."""
    out = []
    for row in mask:
        starts = [j for j in range(len(row)) if row[j] != 0 and (j == 0 or row[j - 1] == 0)]
        if starts:
            starts[0] = 0
        out.append(list(zip(starts, starts[1:] + [len(row)])))
    return out


@pytest.mark.parametrize("threads,chunk", CHUNKS)
@pytest.mark.parametrize("dense", [False, True])
def test_token_passes_in_chunks_equal_a_row_loop(threads, chunk, dense):
    rng = np.random.default_rng(7)
    B, L = 29, 13
    mask = _mask(rng, B, L)
    rewards = rng.normal(size=(B, L)).astype(np.float32)
    if not dense:
        rewards[rng.random((B, L)) < 0.95] = 0.0
    runs = _runs(mask)
    with _threads.using(threads=threads, chunk=chunk):
        turns = Turns.of(torch.from_numpy(mask))
        sums = turns.sums(torch.from_numpy(rewards))
        values = np.arange(1, turns.num_steps + 1, dtype=np.float64) * 0.1
        spread = turns.spread(torch.from_numpy(values), torch.from_numpy(mask), torch.float32).numpy()
        row_sum = masked_row_sum(torch.from_numpy(rewards), torch.from_numpy(mask)).numpy()
        per_row = masked(torch.arange(B, dtype=torch.float64)[:, None], torch.from_numpy(mask)).numpy()
    assert turns.n_steps.tolist() == [len(r) for r in runs]
    want_sums, want_spread, k = [], np.zeros((B, L), np.float32), 0
    for r, row_runs in enumerate(runs):
        for a, b in row_runs:
            total = 0.0
            for j in range(a, b):  # in token order, as the passes add them
                total += float(rewards[r, j])
            want_sums.append(total)
            want_spread[r, a:b] = np.float32(values[k]) * mask[r, a:b]
            k += 1
    np.testing.assert_allclose(sums, want_sums, rtol=1e-12, atol=1e-12)
    assert spread.tobytes() == want_spread.tobytes()
    np.testing.assert_allclose(row_sum, (rewards.astype(np.float64) * mask).sum(-1), rtol=1e-12, atol=1e-12)
    assert per_row.tobytes() == (np.arange(B, dtype=np.float32)[:, None] * mask).tobytes()
    with _threads.using(threads=1):  # one thread: the same bits
        one = Turns.of(torch.from_numpy(mask))
        assert one.sums(torch.from_numpy(rewards)).tobytes() == sums.tobytes()
        one_row_sum = masked_row_sum(torch.from_numpy(rewards), torch.from_numpy(mask)).numpy()
        assert one_row_sum.tobytes() == row_sum.tobytes()


def _workload(rng, groups=3, rollouts=4):
    """Trajectories of 1-5 steps over 6 states; per trajectory its anchors, actions, outcome."""
    trajs = []
    for g in range(groups):
        for _ in range(rollouts):
            n = int(rng.integers(1, 6))
            anchors = [f"state {int(s)}" for s in rng.integers(0, 6, n)]
            actions = [f"move {int(a)}" for a in rng.integers(0, 3, n)]
            trajs.append((f"uid-{g}", anchors, actions, bool(rng.random() < 0.5)))
    return trajs


def _verl_inputs(trajs, per_step=4):
    T, Lmax = len(trajs), per_step * max(len(t[1]) for t in trajs)
    mask, tlr = torch.zeros(T, Lmax), torch.zeros(T, Lmax)
    for r, (_, anchors, _, ok) in enumerate(trajs):
        for k in range(len(anchors)):
            mask[r, per_step * k : per_step * k + per_step // 2] = 1.0
        tlr[r, per_step * (len(anchors) - 1)] = float(ok)
    uid = np.array([t[0] for t in trajs], dtype=object)
    anchors, actions = np.empty(T, dtype=object), np.empty(T, dtype=object)
    anchors[:] = [list(t[1]) for t in trajs]
    actions[:] = [list(t[2]) for t in trajs]
    return tlr, mask, uid, anchors, actions


def _adapter_outputs(trajs):
    from crbc_viz.integrations import verl, verl_agent
    from crbc_viz.integrations.trl import completion_advantages

    tlr, mask, uid, anchors, actions = _verl_inputs(trajs)
    out = {
        "verl": verl.compute_advantage(
            tlr, mask, uid, non_tensor_batch={"uid": uid, "crbc_anchors": anchors}
        )[0]
    }
    local = [{"anchors": a, "actions": x, "starts": None} for a, x in zip(anchors, actions)]
    rewards = torch.tensor([[float(t[3])] for t in trajs])
    out["TRL"] = completion_advantages(
        (mask.sum(-1, keepdim=True) > 0).float().expand_as(mask).contiguous(),
        mask,
        local,
        rewards,
        torch.ones(1),
        num_generations=4,
    )
    # verl-agent: one row per step, shuffled, with copies.
    rows = [
        (t[0], f"t{i}", k, a, x, t[3])
        for i, t in enumerate(trajs)
        for k, (a, x) in enumerate(zip(t[1], t[2]))
    ]
    order = np.random.default_rng(3).permutation(np.r_[np.arange(len(rows)), [0, 5, 5]])
    col = lambda j, dtype=object: np.array([rows[i][j] for i in order], dtype=dtype)  # noqa: E731
    B = len(order)
    out["verl-agent"] = verl_agent.compute_advantage(
        token_level_rewards=torch.as_tensor(col(5, np.float32))[:, None].repeat(1, 3),
        response_mask=torch.ones(B, 3),
        anchor_obs=col(3),
        index=col(0),
        traj_index=col(1),
        step_index=col(2, np.int64),
        actions=col(4),
    )[0]
    return {k: v.numpy() for k, v in out.items()}


@pytest.mark.parametrize("threads,chunk", CHUNKS)
def test_adapters_threaded_equal_one_thread(threads, chunk):
    trajs = _workload(np.random.default_rng(11))
    with _threads.using(threads=1):
        want = _adapter_outputs(trajs)
    with _threads.using(threads=threads, chunk=chunk):
        got = _adapter_outputs(trajs)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert got[name].tobytes() == want[name].tobytes(), name
    assert np.abs(want["verl"]).max() > 0  # the credit is not all zero: a comparison that can fail


def test_factorize_of_mixed_values_in_chunks_equals_one_pass(monkeypatch):
    """Numbers and text mixed (``1 == 1.0 == True`` hash alike, ``"1"`` does not): what one
    pass of `pandas.factorize` gives, whichever chunk a value first appears in."""
    values = np.array(["a", 1, "1", None, True, 1.0, "a", 2, float("nan"), "b", 1, "1"] * 5, dtype=object)
    monkeypatch.setattr(_threads, "_few_distinct", lambda values, n: True)
    want_codes, want_uniques = pd.factorize(values)
    with _threads.using(threads=3, chunk=5):
        codes, uniques = _threads.factorize(values)
    assert codes.tolist() == want_codes.tolist()
    assert [(type(u), u) for u in uniques] == [(type(u), u) for u in want_uniques]


def test_many_distinct_values_are_factorised_in_one_pass(monkeypatch):
    """Trajectory ids (each on a few rows): every chunk would hold most of them, so the column
    is not cut; few distinct values (anchors, actions) are."""
    merged = []
    monkeypatch.setattr(
        _threads, "run", lambda fn, chunks: merged.append(len(chunks)) or [fn(*c) for c in chunks]
    )
    ids = np.array([f"t{i // 4}" for i in range(200_000)], dtype=object)
    anchors = np.array([f"s{i % 40}" for i in range(200_000)], dtype=object)
    with _threads.using(threads=4):
        _threads.factorize(ids)
        assert merged == []
        codes, uniques = _threads.factorize(anchors)
    assert merged == [4, 4] and codes.tolist() == pd.factorize(anchors)[0].tolist()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_gets_a_pool_of_its_own():
    """A trainer that forks after scoring: the child's passes run on threads it has (the
    parent's pool object is copied into the child without its threads; using it would hang)."""
    import signal

    from crbc_viz.integrations import _threads

    with _threads.using(threads=2, chunk=3):
        assert _threads.run(lambda lo, hi: hi - lo, _threads.spans(10)) == [3, 3, 3, 1]
        pid = os.fork()
        if pid == 0:  # the child: stopped by the alarm if the pool hangs
            ok = False
            try:
                signal.alarm(20)
                ok = _threads.run(lambda lo, hi: hi - lo, _threads.spans(10)) == [3, 3, 3, 1]
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
