"""The compiled engine's closure solve (row-by-row elimination inside each row's band of
nonzeros, anchors in reverse first-occurrence order) against a brute-force dense solve:
``numpy.linalg.solve`` of (I − P)V = r on the empirical process of each group, counted here
from the raw steps with dicts. The groups are random walks on graphs built with strongly
connected components of chosen sizes in a DAG of components, with self-loops: one group whose
anchors all lie in one component, one pure DAG, one with components of several sizes, and one
of over 64 anchors (`solve_band`; the others take `solve_masked`). Then the two solvers on the
same matrices: the same bits."""

from collections import defaultdict

import numpy as np
import pytest

pytest.importorskip("numba")

from scipy.sparse import coo_matrix  # noqa: E402
from scipy.sparse.csgraph import connected_components  # noqa: E402

from crbc_viz.backends.numba.crbc import crbc_step_credit  # noqa: E402


def _design(rng, sizes, self_loops: bool):
    """Successor lists of a graph whose components have ``sizes``, in order: a cycle inside each
    component plus one random chord, a self-loop on some anchors, and edges only forward to
    later components (so the components are exactly ``sizes``)."""
    start = np.concatenate([[0], np.cumsum(sizes)])
    n = int(start[-1])
    succ = [[] for _ in range(n)]
    for b, size in enumerate(sizes):
        members = list(range(start[b], start[b + 1]))
        for i, u in enumerate(members):
            if size > 1:
                succ[u].append(members[(i + 1) % size])
                succ[u].append(members[rng.integers(size)])
            if self_loops and rng.random() < 0.4:
                succ[u].append(u)
            if b + 1 < len(sizes):
                succ[u] += list(rng.integers(start[b + 1], n, size=2))
    return [sorted(set(s)) for s in succ]


def _walks(rng, succ, num_traj: int, max_len: int):
    """Trajectories ``(anchors, actions, success)``: start anywhere, follow a random successor,
    end with probability 0.08 per step (or with no successor, or at ``max_len``)."""
    trajs = []
    for _ in range(num_traj):
        u = int(rng.integers(len(succ)))
        anchors, actions = [u], []
        while True:
            if not succ[u] or rng.random() < 0.08 or len(anchors) == max_len:
                actions.append(len(succ[u]))  # the terminal action
                break
            k = int(rng.integers(len(succ[u])))
            actions.append(k)
            u = succ[u][k]
            anchors.append(u)
        trajs.append((anchors, actions, bool(rng.random() < 0.6)))
    return trajs


def _brute_force_values(trajs, beta):
    """V per anchor of (I − P)V = r, P(s, s′) = β N(s→s′)/N(s), r(s) = β N(s→SUCCESS)/N(s)."""
    n_s, n_sx = defaultdict(float), defaultdict(float)
    for anchors, _, success in trajs:
        for t, s in enumerate(anchors):
            x = anchors[t + 1] if t + 1 < len(anchors) else ("+" if success else "-")
            n_s[s] += 1
            n_sx[s, x] += 1
    index = {s: i for i, s in enumerate(sorted(n_s))}
    P, r = np.zeros((len(index), len(index))), np.zeros(len(index))
    for (s, x), c in n_sx.items():
        if x == "+":
            r[index[s]] += beta * c / n_s[s]
        elif x != "-":
            P[index[s], index[x]] += beta * c / n_s[s]
    V = np.linalg.solve(np.eye(len(index)) - P, r)
    return {s: V[i] for s, i in index.items()}, P


def _component_sizes(P):
    rows, cols = np.nonzero(P)
    m = coo_matrix((np.ones(rows.size), (rows, cols)), shape=P.shape)
    _, label = connected_components(m, directed=True, connection="strong")
    return sorted(np.bincount(label).tolist(), reverse=True)


GROUPS = {  # name: (component sizes, self-loops)
    "one component": ([40], True),
    "pure DAG": ([1] * 30, False),
    "components of several sizes": ([1, 7, 1, 3, 1, 12, 2, 1, 5, 1], True),
    "single anchors and self-loops": ([1] * 12 + [4], True),
    "over 64 anchors (the band solve)": ([80], True),
}


def _arrays(groups, anchor_id=lambda g, a: a):
    """The engine's step arrays of ``groups`` (lists of `_walks` trajectories), anchor ``a`` of
    group ``g`` hashed as ``anchor_id(g, a)``."""
    hashes, actions, traj_off, group_off, success = [], [], [0], [0], []
    for g, trajs in enumerate(groups):
        for anchors, acts, ok in trajs:
            hashes += [anchor_id(g, a) for a in anchors]
            actions += acts
            traj_off.append(len(hashes))
            success.append(ok)
        group_off.append(len(success))
    return (
        np.array(hashes, np.uint64),
        np.array(actions, np.int64),
        np.array(traj_off),
        np.array(group_off),
        np.array(success),
    )


def _batch(seed):
    rng = np.random.default_rng(seed)
    groups = [_walks(rng, _design(rng, sizes, loops), 60, 80) for sizes, loops in GROUPS.values()]
    return groups, _arrays(groups, lambda g, a: 1000 * (g + 1) + a)


@pytest.mark.parametrize("beta", [0.98, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closure_values_match_a_brute_force_dense_solve(seed, beta):
    groups, arrays = _batch(seed)
    value = crbc_step_credit(*arrays, beta=beta)["value"]
    lo = 0
    for (name, (sizes, loops)), trajs in zip(GROUPS.items(), groups):
        V, P = _brute_force_values(trajs, beta)
        comps = _component_sizes(P)
        if name == "one component":
            assert comps == [len(V)], "the group must be one strongly connected component"
        elif name == "pure DAG":
            assert max(comps) == 1 and not np.diag(P).any()
        elif name.startswith("over 64"):
            assert len(V) > 64, "the group must take the band solve"
        else:
            assert max(comps) > 2 and comps.count(1) > 1 and np.diag(P).any()
        want = np.array([V[a] for anchors, _, _ in trajs for a in anchors])
        got = value[lo : lo + want.size]
        lo += want.size
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=f"{name}, seed {seed}, beta {beta}")
    assert lo == value.size


def _m_matrix(rng, n, per_row):
    """(I − βP, b) of a random substochastic P with ``per_row`` successors per row, and each
    row's band and nonzero columns as `closure_matrix` leaves them."""
    A, b = np.eye(n), np.zeros(n)
    for i in range(n):
        cols = rng.choice(n, size=per_row, replace=False)
        w = rng.random(per_row + 1)
        w /= w.sum()
        A[i, cols] -= 0.98 * w[:-1]
        b[i] = rng.random()
    nz = A != 0
    first = np.argmax(nz, axis=1).astype(np.int64)
    last = (n - 1 - np.argmax(nz[:, ::-1], axis=1)).astype(np.int64)
    mask = np.array([sum(1 << int(j) for j in np.flatnonzero(row)) for row in nz], np.uint64)
    return A, b, first, last, mask


@pytest.mark.parametrize("n, per_row", [(1, 1), (5, 2), (34, 4), (63, 3), (64, 5), (64, 40)])
def test_masked_and_band_solves_give_the_same_bits(n, per_row):
    from crbc_viz.backends.numba.crbc import solve_band, solve_masked

    A, b, first, last, mask = _m_matrix(np.random.default_rng(n * per_row), n, per_row)
    want = np.linalg.solve(A, b)
    V_band, V_mask = np.zeros(n), np.zeros(n)
    solve_band(A.copy(), b.copy(), first.copy(), last.copy(), V_band)
    solve_masked(A.copy(), b.copy(), mask.copy(), V_mask)
    np.testing.assert_allclose(V_mask, want, rtol=0, atol=1e-12)
    assert np.array_equal(V_mask, V_band)


def _brute_force_q(trajs, V, beta):
    """Q per (anchor, action): β · mean over the pair's steps of V(next), V(SUCCESS) = 1,
    V(FAILURE) = 0."""
    total, count = defaultdict(float), defaultdict(int)
    for anchors, actions, success in trajs:
        for t, (s, a) in enumerate(zip(anchors, actions)):
            nxt = V[anchors[t + 1]] if t + 1 < len(anchors) else float(success)
            total[s, a] += nxt
            count[s, a] += 1
    return {k: beta * total[k] / count[k] for k in total}


@pytest.mark.parametrize("threads", [1, 2])
def test_many_groups_sharing_anchor_hashes_are_merged_apart(threads):
    """Groups are run many to a thread, each run reusing one scratch whose hash tables are not
    cleared between groups: 48 groups of every design above, large and small interleaved (one
    of over `SCRATCH_MAX_STEPS` steps among them), that all use the same anchor hashes
    (0, 1, 2, ...) and action ids. Each group's V and Q must be
    its own brute-force solve's: an anchor merged with an earlier group's would not be."""
    import numba

    from crbc_viz.backends.numba.scratch import SCRATCH_MAX_STEPS

    rng = np.random.default_rng(7)
    designs = list(GROUPS.values()) + [([1, 2], True), ([3], False)]  # and two tiny ones
    groups = []
    for i in range(48):
        sizes, loops = (
            designs[int(rng.integers(len(designs)))] if i else GROUPS["over 64 anchors (the band solve)"]
        )
        groups.append(_walks(rng, _design(rng, sizes, loops), int(rng.integers(1, 40)), 80))
    # a group of few anchors but over `SCRATCH_MAX_STEPS` steps (it skips the scratch)
    groups[20] = _walks(rng, _design(rng, [2, 3], True), 8000, 80)
    assert sum(len(anchors) for anchors, _, _ in groups[20]) > SCRATCH_MAX_STEPS
    arrays = _arrays(groups)  # every group numbers its anchors 0, 1, 2, ...
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        out = crbc_step_credit(*arrays, beta=0.98)
    finally:
        numba.set_num_threads(before)
    lo = 0
    for g, trajs in enumerate(groups):
        V, _ = _brute_force_values(trajs, 0.98)
        Q = _brute_force_q(trajs, V, 0.98)
        steps = [(s, a) for anchors, acts, _ in trajs for s, a in zip(anchors, acts)]
        got_v, got_q = out["value"][lo : lo + len(steps)], out["q_value"][lo : lo + len(steps)]
        lo += len(steps)
        np.testing.assert_allclose(
            got_v, [V[s] for s, _ in steps], rtol=0, atol=1e-12, err_msg=f"V, group {g}"
        )
        np.testing.assert_allclose(got_q, [Q[k] for k in steps], rtol=0, atol=1e-12, err_msg=f"Q, group {g}")
    assert lo == arrays[0].size
    assert out["num_nodes"] == sum(len({s for anchors, _, _ in trajs for s in anchors}) for trajs in groups)


def test_a_group_longer_than_the_scratch_is_refused_untouched():
    """`scratch_group` runs a group only in a scratch made for at least its steps (numba checks no
    bounds, so a longer group would write past the scratch's arrays): one step short, it
    refuses, writing nothing; made to fit, it writes the brute-force solve's V."""
    from crbc_viz.backends.numba.crbc import KernelParams, Outputs, Steps
    from crbc_viz.backends.numba.scratch import scratch, scratch_group
    from crbc_viz.ops.checks import check_step_arrays
    from crbc_viz.ops.segments import F64_EPS, SPREAD_ULPS

    rng = np.random.default_rng(3)
    trajs = _walks(rng, _design(rng, [3, 2], True), 30, 80)
    arrays = _arrays([trajs])
    S = arrays[0].size
    steps = Steps(*check_step_arrays(*arrays, caller="test"))
    params = KernelParams(0.98, True, 0, 0.0, 0.0, 1.0, 2, 1024, SPREAD_ULPS * F64_EPS)
    out = Outputs(
        *(np.full(S, np.nan) for _ in range(4)), np.zeros(1, np.int8), np.zeros(1), np.zeros((1, 2), np.int64)
    )
    assert not scratch_group(0, steps, params, out, scratch(S - 1))
    assert np.isnan(np.stack(out[:4])).all() and not out.node_stats.any()
    assert scratch_group(0, steps, params, out, scratch(S))
    V, _ = _brute_force_values(trajs, 0.98)
    np.testing.assert_allclose(
        out.value, [V[s] for anchors, _, _ in trajs for s in anchors], rtol=0, atol=1e-12
    )
