"""Baselines measured beside our estimators, written the way users would otherwise write them.

- `crbc_dict_spsolve`: per-group Python dicts of counts and one
  ``scipy.sparse.linalg.spsolve`` per group (the straightforward CRBC implementation).
- `gigpo_loops`: GiGPO step advantages with per-step Python loops and dict grouping, as
  the public verl-agent ``core_gigpo.py`` does (exact-match anchors, mean_std_norm).
- `crbc_networkx_vi`: CRBC values by value iteration over a networkx DiGraph to 1e-12.

They take plain per-group lists, built once outside the timed region by `group_lists`.
They are also independent oracles in the tests: none shares code with `crbc_viz`.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

__all__ = ["group_lists", "crbc_dict_spsolve", "gigpo_loops", "crbc_networkx_vi"]


def group_lists(batch) -> list[list[tuple[list, list, bool]]]:
    """Per group, per trajectory: (anchor keys, actions, success) as Python lists."""
    steps = batch.steps
    anchors = batch.step_anchor_hash.tolist()
    actions = steps["action"].astype(str).tolist()
    out = []
    for g in range(batch.num_groups):
        trajs = []
        for t in range(batch.group_traj_offsets[g], batch.group_traj_offsets[g + 1]):
            lo, hi = batch.traj_offsets[t], batch.traj_offsets[t + 1]
            trajs.append((anchors[lo:hi], actions[lo:hi], bool(batch.traj_success[t])))
        out.append(trajs)
    return out


def _grpo(successes: list[bool], eps=1e-6) -> list[float]:
    r = [1.0 if s else 0.0 for s in successes]
    if len(r) == 1:
        return [r[0] / (1 + eps)]
    m = sum(r) / len(r)
    sd = math.sqrt(sum((x - m) ** 2 for x in r) / (len(r) - 1))
    return [(x - m) / (sd + eps) for x in r]


def crbc_dict_spsolve(groups, beta=0.98, sigma_min=0.1, w_group=1.0, w_step=5.0):
    """CRBC per group with dicts + scipy.sparse.linalg.spsolve; returns per-step advantages."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    out = []
    for trajs in groups:
        n_sax = defaultdict(float)
        n_sa = defaultdict(float)
        n_s = defaultdict(float)
        for anchors, actions, success in trajs:
            T = len(anchors)
            for t in range(T):
                s, a = anchors[t], actions[t]
                x = anchors[t + 1] if t + 1 < T else ("+" if success else "-")
                n_sax[(s, a, x)] += 1
                n_sa[(s, a)] += 1
                n_s[s] += 1
        index = {s: i for i, s in enumerate(n_s)}
        n = len(index)
        rows, cols, vals = [], [], []
        b = np.zeros(n)
        for (s, a, x), c in n_sax.items():
            i = index[s]
            w = c / n_s[s]
            if x == "+":
                b[i] += beta * w
            elif x != "-":
                rows.append(i)
                cols.append(index[x])
                vals.append(-beta * w)
        rows += list(range(n))
        cols += list(range(n))
        vals += [1.0] * n
        A = sp.csc_matrix((vals, (rows, cols)), shape=(n, n))
        V = np.atleast_1d(spla.spsolve(A, b))
        Q = defaultdict(float)
        for (s, a, x), c in n_sax.items():
            vx = 1.0 if x == "+" else 0.0 if x == "-" else V[index[x]]
            Q[(s, a)] += beta * c / n_sa[(s, a)] * vx
        var = defaultdict(float)
        n_act = defaultdict(int)
        for (s, a), c in n_sa.items():
            var[s] += c / n_s[s] * (Q[(s, a)] - V[index[s]]) ** 2
            n_act[s] += 1
        credit = {}
        for s, a in n_sa:
            if n_act[s] >= 2:
                credit[(s, a)] = (Q[(s, a)] - V[index[s]]) / max(math.sqrt(var[s]), sigma_min)
            else:
                credit[(s, a)] = 0.0
        ag = _grpo([tr[2] for tr in trajs])
        for k, (anchors, actions, _) in enumerate(trajs):
            out.extend(w_group * ag[k] + w_step * credit[(s, a)] for s, a in zip(anchors, actions))
    return np.asarray(out)


def gigpo_loops(groups, gamma=0.95, step_advantage_w=1.0, eps=1e-6):
    """GiGPO (mean_std_norm) the verl-agent way: per-step loops, dict grouping by anchor."""
    out = []
    for trajs in groups:
        ag = _grpo([tr[2] for tr in trajs], eps)
        returns = []
        for anchors, actions, success in trajs:
            T = len(anchors)
            rs = [0.0] * T
            run = 0.0
            for t in reversed(range(T)):
                r = (1.0 if success else 0.0) if t == T - 1 else 0.0
                run = r + gamma * run
                rs[t] = run
            returns.append(rs)
        buckets = defaultdict(list)
        for k, (anchors, _, _) in enumerate(trajs):
            for t, s in enumerate(anchors):
                buckets[s].append((k, t))
        step_adv = {}
        for s, members in buckets.items():
            vals = [returns[k][t] for k, t in members]
            if len(vals) == 1:
                step_adv[members[0]] = 0.0
                continue
            m = sum(vals) / len(vals)
            sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
            for (k, t), v in zip(members, vals):
                step_adv[(k, t)] = (v - m) / (sd + eps)
        for k, (anchors, _, _) in enumerate(trajs):
            out.extend(ag[k] + step_advantage_w * step_adv[(k, t)] for t in range(len(anchors)))
    return np.asarray(out)


def crbc_networkx_vi(groups, beta=0.98, tol=1e-12, max_iter=100_000):
    """CRBC node values V by value iteration on a networkx DiGraph; returns V per step."""
    import networkx as nx

    out = []
    for trajs in groups:
        G = nx.DiGraph()
        visits = defaultdict(float)
        for anchors, _, success in trajs:
            T = len(anchors)
            for t in range(T):
                s = anchors[t]
                x = anchors[t + 1] if t + 1 < T else ("+" if success else "-")
                visits[s] += 1
                w = G.get_edge_data(s, x, {"c": 0.0})["c"]
                G.add_edge(s, x, c=w + 1.0)
        V = {s: 0.0 for s in visits}
        V["+"], V["-"] = 1.0, 0.0
        for _ in range(max_iter):
            delta = 0.0
            for s in visits:
                new = beta * sum(d["c"] * V[x] for _, x, d in G.out_edges(s, data=True)) / visits[s]
                delta = max(delta, abs(new - V[s]))
                V[s] = new
            if delta < tol:
                break
        for anchors, _, _ in trajs:
            out.extend(V[s] for s in anchors)
    return np.asarray(out)
