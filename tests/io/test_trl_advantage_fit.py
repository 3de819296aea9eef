"""TRL / ms-swift: whether the logged advantage is a non-negative multiple of the group-centred
reward in every group (`crbc_viz.io.importers.trl._matches`, which picks the reward columns).
The oracle is the rule as written, group by group with a mask over every row; the code reads
each group once from a sorted order (linear in the rows)."""

from __future__ import annotations

import numpy as np
import pytest

from crbc_viz.io.importers.trl import _matches


def _oracle(reward, adv, groups) -> bool:
    """The rule in plain Python: rows gathered per group (groups in number order), each group's
    advantage a non-negative multiple k of its centred reward, to 1% of its largest advantage
    (at least 0.01); a group of equal rewards needs advantages within that of 0."""
    rows: dict[int, list[tuple[float, float]]] = {}
    for r, a, g in zip(reward.tolist(), adv.tolist(), groups.tolist()):
        rows.setdefault(g, []).append((r, a))
    for g in sorted(rows):
        rs, advs = [r for r, _ in rows[g]], [a for _, a in rows[g]]
        mean = sum(rs) / len(rs)
        centred = [r - mean for r in rs]
        tol = 0.01 * max([1.0, *(abs(a) for a in advs)])
        if max(abs(c) for c in centred) < 1e-9:
            if any(abs(a) > tol for a in advs):
                return False
            continue
        k = sum(a * c for a, c in zip(advs, centred)) / sum(c * c for c in centred)
        if k < 0 or any(abs(a - k * c) > tol for a, c in zip(advs, centred)):
            return False
    return True


def _case(rng: np.random.Generator):
    n_groups = int(rng.integers(1, 12))
    sizes = rng.integers(1, 6, n_groups)
    groups = np.repeat(np.arange(n_groups), sizes)
    if rng.random() < 0.5:  # groups interleaved in the file, numbered in any order
        groups = rng.permutation(n_groups)[groups]
        rng.shuffle(groups)
    reward = (
        rng.choice([0.0, 1.0, 0.5, -1.0], len(groups)) if rng.random() < 0.7 else rng.normal(size=len(groups))
    )
    means = {g: reward[groups == g].mean() for g in np.unique(groups)}
    centred = reward - np.array([means[g] for g in groups])
    k = rng.choice([0.0, 1.0, 2.5, -1.0])
    adv = k * centred
    kind = rng.random()
    if kind < 0.3:
        adv = adv + rng.normal(scale=rng.choice([1e-4, 1e-2, 0.5]), size=len(adv))
    elif kind < 0.4:
        adv[rng.integers(len(adv))] = np.nan
    return reward, adv, groups.astype(np.int64)


def test_the_fit_is_the_rule_group_by_group():
    rng = np.random.default_rng(7)
    seen = set()
    for _ in range(600):
        reward, adv, groups = _case(rng)
        with np.errstate(all="ignore"):
            want = _oracle(reward, adv, groups)
            got = _matches(reward, adv, groups)
        assert got == want, (reward, adv, groups)
        seen.add(want)
    assert seen == {True, False}  # both answers were exercised


@pytest.mark.parametrize("first_bad", [0, 5, 9])
def test_one_bad_group_anywhere_fails_the_fit(first_bad):
    groups = np.repeat(np.arange(10), 4)[::-1].copy()
    reward = np.tile([0.0, 1.0, 1.0, 0.0], 10)
    adv = reward - 0.5
    adv[groups == first_bad] *= -1  # a negative multiple in one group
    assert _oracle(reward, adv, groups) is False
    assert _matches(reward, adv, groups) is False
