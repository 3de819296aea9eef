"""Every estimator with a spec against an independent oracle written from ESTIMATORS.md.

Each oracle below restates its section's formulas literally, per group / trajectory /
step with plain Python loops and dicts over the generated trajectories themselves (not
over the project's graph, batch arrays or helpers). The one linear solve that a fixed
point needs is exact (Gauss–Jordan on `fractions.Fraction`). The oracles run on
generated groups that contain cycles, self-loops, a truncated trajectory without a
success field, a one-rollout group, all-success and all-failure groups and near-duplicate
texts for GiGPO's similarity mode, for every documented option value (each choice of
each enum-like parameter, both values of each flag, a few values of the numeric ones;
`test_every_option_value_is_covered` checks that against the registry), and are compared
with the numpy reference at 1e-9. The other backends are held to the numpy reference by
tests/backends/test_parity.py.

The regression tests at the end pin four estimator readings that were once wrong, with numbers
computed by hand from the spec (the arithmetic is written next to them).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import random
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz.data import RolloutBatch
from crbc_viz.estimators import get, names, param_infos, registry

TOL = 1e-9
INF = math.inf


# ================================================================ generated groups


@dataclasses.dataclass
class Traj:
    """One rollout as plain lists (one entry per step)."""

    obs: list
    act: list
    rew: list
    success: bool  # the truth: truncated => False
    logged_success: object  # True / False / None (field absent)
    truncated: bool = False
    ell: list = None  # TRACE gold log-probs
    ev: list = None  # AgentOPSD turn evidence
    judge: list = None  # ABC judge scores
    active: list = None  # TRCA active rubric ids per step
    edges: list = None  # IAPO: per step a list of {"to", "type"}
    err: list = None  # IAPO error flags
    ntok: list = None  # IAPO token lengths
    direct: list = None  # IAPO direct user inputs

    @property
    def ret(self) -> float:
        return float(sum(self.rew))


RUBRIC = [
    {"id": "E1", "category": "evidence"},
    {"id": "E2", "category": "evidence"},
    {"id": "X1", "category": "execution"},
    {"id": "I1", "category": "invalidity"},
]


def _signals(rng: random.Random, tr: Traj) -> Traj:
    n = len(tr.obs)
    tr.ell = [-round(rng.uniform(0.05, 5.0), 3) for _ in range(n)]
    tr.ev = [round(rng.gauss(0.0, 1.0), 3) for _ in range(n)]
    tr.judge = [round(rng.choice([0.0, 0.2, 1.0, 1.0, 1.4, 1.8, 2.0]), 1) for _ in range(n)]
    tr.active = [sorted(rng.sample(["E1", "E2", "X1", "I1"], rng.randint(0, 2))) for _ in range(n)]
    tr.err = [rng.random() < 0.3 for _ in range(n)]
    tr.ntok = [rng.randint(1, 40) for _ in range(n)]
    tr.direct = [rng.choice([0, 0, 1, 2]) for _ in range(n)]
    tr.edges = []
    for k in range(n):
        out = []
        for j in range(k + 1, n):
            if rng.random() < 0.4:
                out.append({"to": j, "type": "support"})
            if tr.err[k] and rng.random() < 0.4:
                out.append({"to": j, "type": "failed"})
        if out and rng.random() < 0.3:
            out.append(dict(out[0]))  # a duplicate edge counts once
        tr.edges.append(out)
    return tr


def _traj(rng, obs, act, success, *, truncated=False, logged=True, rew=None, win=10.0):
    n = len(obs)
    if rew is None:
        rew = [0.0] * n
        if success:
            rew[-1] = win
        for k in range(n):
            if rng.random() < 0.2:
                rew[k] -= 0.1  # verl-agent's invalid-action penalty
    logged_success = None if (truncated or not logged) else success
    return _signals(
        rng, Traj(list(obs), list(act), list(rew), success and not truncated, logged_success, truncated)
    )


def _random_group(rng, num_trajs, pool, actions, max_len):
    trajs = []
    for _ in range(num_trajs):
        n = rng.randint(1, max_len)
        obs = [pool[0]]
        for _ in range(n - 1):
            r = rng.random()
            obs.append(obs[-1] if r < 0.2 else pool[0] if r < 0.3 else rng.choice(pool))
        act = [rng.choice(actions) for _ in range(n)]
        success = rng.random() < 0.5
        tr = _traj(rng, obs, act, success)
        if not success and rng.random() < 0.4:
            tr.rew[-1] += 0.5  # a WebShop-style partial score: r_final > 0, no success
        trajs.append(tr)
    return trajs


def make_groups(seed: int = 13):
    rng = random.Random(seed)
    groups = []
    # §14.1's toy group (binary rewards).
    toy = [
        ("s0 s1 s2".split(), "a b c".split(), True),
        ("s0 s1 s3".split(), "a d e".split(), False),
        ("s0 s4 s1 s2".split(), "f g b h".split(), False),
        ("s0 s4 s4 s1 s2".split(), "f i g b c".split(), True),
    ]
    groups.append(
        ("toy", [_traj(rng, o, a, s, win=1.0, rew=[0.0] * (len(o) - 1) + [float(s)]) for o, a, s in toy])
    )
    # Random groups over a few anchors: cycles, self-loops, revisits, shared anchors.
    for g in range(4):
        pool = [f"room {k}" for k in range(rng.randint(3, 5))]
        groups.append(
            (f"rand{g}", _random_group(rng, rng.randint(3, 6), pool, ["north", "south", "take", "wait"], 6))
        )
    # Long trajectories that cycle through a few anchors many times.
    groups.append(("long", _random_group(rng, 8, [f"cell {k}" for k in range(6)], ["l", "r", "s"], 30)))
    # A truncated trajectory without a success field, with a positive reward sum (and a
    # positive last reward): it is a failure.
    trunc = _random_group(rng, 3, ["hall", "cellar", "attic"], ["go", "look"], 5)
    tr = _traj(
        rng,
        ["hall", "cellar", "cellar", "hall", "attic"],
        ["go", "look", "go", "go", "look"],
        False,
        truncated=True,
        rew=[0.0, 1.0, 0.0, 0.0, 0.5],
    )
    groups.append(("trunc", trunc + [tr]))
    # One rollout (a success with a self-loop and a cycle).
    groups.append(("one", [_traj(rng, ["a", "b", "b", "a", "c"], ["x", "y", "y", "z", "x"], True)]))
    # All success / all failure (different lengths, shared anchors).
    # (These two reuse rand0's group_id in another train step / run: separate groups.)
    groups.append(
        (
            "oracle/1/rand0",
            [
                _traj(rng, o, a, True)
                for o, a in [
                    (["p", "q"], ["u", "v"]),
                    (["p", "p", "q"], ["w", "u", "v"]),
                    (["p", "r", "q"], ["u", "u", "v"]),
                ]
            ],
        )
    )
    groups.append(
        (
            "runB/0/rand0",
            [
                _traj(rng, ["p", "q", "p"], ["u", "v", "u"], False),
                _traj(rng, ["p", "q"], ["w", "v"], False, logged=False),
                _traj(rng, ["p", "r", "r"], ["u", "w", "w"], False, truncated=True, rew=[0.0, 0.0, 0.0]),
            ],
        )
    )
    # Near-duplicate texts (similarity mode); "tide" before "diet" where ratio() is not
    # symmetric: ratio("diet", "tide") = 0.5, ratio("tide", "diet") = 0.25.
    kitchen = "You are in the kitchen. A fridge is here"
    sim_obs = [
        [kitchen + ".", "tide", kitchen + "!"],
        [kitchen + "!", "diet"],
        ["tide", kitchen + ".", "diet", "tide"],
        [kitchen + "?", "dirt"],
    ]
    groups.append(
        (
            "sim",
            [_traj(rng, o, [rng.choice(["open", "close"]) for _ in o], rng.random() < 0.5) for o in sim_obs],
        )
    )
    # A group where every judge score is equal (ABC's zero-variance pool).
    flat = _random_group(rng, 3, ["u1", "u2"], ["k", "l"], 4)
    for tr in flat:
        tr.judge = [1.0] * len(tr.obs)
    groups.append(("flatjudge", flat))
    return groups


def group_key(label: str):
    """(run_id, train_step, group_id) of a group label 'run/step/id' (or just 'id')."""
    if "/" in label:
        run, step, gid = label.split("/")
        return run, int(step), gid
    return "oracle", 0, label


def rows_of(groups, *, with_success_everywhere=False):
    """Canonical step rows (SCHEMA.md) of the groups."""
    rows = []
    for gname, trajs in groups:
        for i, tr in enumerate(trajs):
            n = len(tr.obs)
            for k in range(n):
                run, step, gid = group_key(gname)
                row = {
                    "run_id": run,
                    "train_step": step,
                    "group_id": gid,
                    "traj_id": f"t{i}",
                    "step_idx": k,
                    "reward": tr.rew[k],
                    "action": tr.act[k],
                    "anchor_obs": tr.obs[k],
                    "done": (k == n - 1) and not tr.truncated,
                    "gold_logprob": tr.ell[k],
                    "turn_evidence": tr.ev[k],
                    "judge_score": tr.judge[k],
                    "rubric_active": tr.active[k],
                    "rubric": RUBRIC,
                    "influence_edges": tr.edges[k],
                    "is_error": tr.err[k],
                    "num_tokens": tr.ntok[k],
                    "direct_inputs": tr.direct[k],
                }
                succ = tr.success if with_success_everywhere else tr.logged_success
                if succ is not None:
                    row["success"] = succ
                if with_success_everywhere:
                    row["episode_return"] = tr.ret
                rows.append(row)
    return rows


def batch_of(groups) -> RolloutBatch:
    """A `RolloutBatch` built directly (no loader): truth is each Traj's own fields."""
    rows = rows_of(groups)
    steps = pd.DataFrame(rows)
    steps["anchor_key"] = steps["anchor_obs"]
    steps["success"] = steps["success"].astype(object).where(steps["success"].notna(), None)
    hashes: dict[str, int] = {}
    step_hash = np.array(
        [hashes.setdefault(o, len(hashes) + 1) for o in steps["anchor_obs"]], dtype=np.uint64
    )
    trajs = [tr for _, ts in groups for tr in ts]
    lens = np.array([len(tr.obs) for tr in trajs], dtype=np.int64)
    traj_group = np.repeat(np.arange(len(groups)), [len(ts) for _, ts in groups]).astype(np.int64)
    return RolloutBatch(
        steps=steps,
        step_traj=np.repeat(np.arange(len(trajs)), lens),
        step_anchor_hash=step_hash,
        traj_offsets=np.r_[0, np.cumsum(lens)].astype(np.int64),
        traj_group=traj_group,
        traj_success=np.array([tr.success for tr in trajs], dtype=bool),
        traj_truncated=np.array([tr.truncated for tr in trajs], dtype=bool),
        traj_return=np.array([tr.ret for tr in trajs], dtype=np.float64),
        group_traj_offsets=np.r_[0, np.cumsum([len(ts) for _, ts in groups])].astype(np.int64),
        groups=pd.DataFrame(
            [dict(zip(("run_id", "train_step", "group_id"), group_key(g))) for g, _ in groups]
        ),
        source="<oracle>",
    )


GROUPS = make_groups()


@pytest.fixture(scope="module")
def graph():
    return build_graph(batch_of(GROUPS))


# ================================================================ plain-Python statistics


def mean(xs):
    return sum(xs) / len(xs)


def std(xs, ddof):
    if len(xs) - ddof <= 0:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def zscore_members(values: dict, ddof: int, eps: float, *, scale=True):
    """{member: z} of one pool; < 2 members or no spread → 0."""
    xs = list(values.values())
    if len(xs) < 2 or max(xs) == min(xs):
        return {k: 0.0 for k in values}
    m, s = mean(xs), std(xs, ddof)
    return {k: ((v - m) / (s + eps) if scale else v - m) for k, v in values.items()}


def suffix(xs, decay):
    """[Σ_{l≥t} decay^(l−t) · xs[l] for t]."""
    out, acc = [0.0] * len(xs), 0.0
    for t in range(len(xs) - 1, -1, -1):
        acc = xs[t] + decay * acc
        out[t] = acc
    return out


def outcome_of(tr: Traj, kind="success"):
    return float(tr.success) if kind == "success" else tr.ret


def episode_adv(trajs, *, norm="std", ddof=1, eps=1e-6, stats="trajectory", kind="success"):
    """§1 A^G per trajectory: verl's rules (one value → mean 0, std 1)."""
    rows = []
    for tr in trajs:
        rows += [outcome_of(tr, kind)] * (len(tr.obs) if stats == "cross_steps" else 1)
    if len(rows) == 1:
        m, s = 0.0, 1.0
    else:
        m, s = mean(rows), std(rows, ddof)
    return [
        (outcome_of(tr, kind) - m) if norm == "mean" else (outcome_of(tr, kind) - m) / (s + eps)
        for tr in trajs
    ]


def pooled_step_result(trajs, pool_of, R, a_s, a_e, w):
    """value = the step's pool mean of R, q_value = R, credit = A^S, advantage = A^E + w·A^S."""
    out = defaultdict(list)
    for i, tr in enumerate(trajs):
        for t in range(len(tr.obs)):
            out["value"].append(mean(list(pool_of(i, t).values())))
            out["q_value"].append(R[i, t])
            out["credit"].append(a_s[i, t])
            out["advantage"].append(a_e[i] + w * a_s[i, t])
    return out


def solve_exact(A, b):
    """x with A x = b by Gauss–Jordan on Fractions."""
    n = len(b)
    M = [row[:] + [b[i]] for i, row in enumerate(A)]
    for c in range(n):
        p = next(r for r in range(c, n) if M[r][c] != 0)
        M[c], M[p] = M[p], M[c]
        inv = 1 / M[c][c]
        M[c] = [v * inv for v in M[c]]
        for r in range(n):
            if r != c and M[r][c] != 0:
                f = M[r][c]
                M[r] = [a - f * bb for a, bb in zip(M[r], M[c])]
    return [M[i][n] for i in range(n)]


def transitions(trajs):
    """Per step (obs, action, successor) with successor '+' / '-' after the last step."""
    out = []
    for tr in trajs:
        n = len(tr.obs)
        out.append(
            [
                (tr.obs[k], tr.act[k], tr.obs[k + 1] if k + 1 < n else ("+" if tr.success else "-"))
                for k in range(n)
            ]
        )
    return out


def mean_backup_V(trajs, gamma):
    """V(s) = γ Σ_x [N(s,x)/N(s)] V(x), V(+) = 1, V(−) = 0, solved exactly."""
    visits, nxt = defaultdict(int), defaultdict(lambda: defaultdict(int))
    for tr in transitions(trajs):
        for s, _, x in tr:
            visits[s] += 1
            nxt[s][x] += 1
    states = list(visits)
    idx = {s: i for i, s in enumerate(states)}
    g = Fraction(gamma)
    A = [[Fraction(int(i == j)) for j in range(len(states))] for i in range(len(states))]
    b = [Fraction(0)] * len(states)
    for s in states:
        for x, c in nxt[s].items():
            w = g * Fraction(c, visits[s])
            if x == "+":
                b[idx[s]] += w
            elif x != "-":
                A[idx[s]][idx[x]] -= w
    V = dict(zip(states, (float(v) for v in solve_exact(A, b))))
    V["+"], V["-"] = 1.0, 0.0
    return V


# ================================================================ the oracles (§ by §)
# Each returns {"credit": [...], "advantage": [...], optional "value", "q_value"} per
# step in batch order (group by group, trajectory by trajectory).


def per_group(fn):
    def run(groups=None, **p):
        out = defaultdict(list)
        for _, trajs in GROUPS if groups is None else groups:
            for k, v in fn(trajs, **p).items():
                out[k] += v
        return out

    return run


@per_group
def o_grpo(trajs, norm, ddof, eps, stats, outcome):
    a = episode_adv(trajs, norm=norm, ddof=ddof, eps=eps, stats=stats, kind=outcome)
    adv = [a[i] for i, tr in enumerate(trajs) for _ in tr.obs]
    return {"credit": adv, "advantage": adv}


def _closure(trajs, beta, depth, sigma_min, w_group, w_step, min_actions):
    """§3.2–3.7: counts, exact closure (or depth-K backups of visit-local returns), A^S."""
    N_sax, N_sa, N_s = defaultdict(int), defaultdict(int), defaultdict(int)
    for tr in transitions(trajs):
        for s, a, x in tr:
            N_sax[s, a, x] += 1
            N_sa[s, a] += 1
            N_s[s] += 1
    states = list(N_s)
    pairs = list(N_sa)
    succ = defaultdict(list)
    for (s, a, x), c in N_sax.items():
        succ[s, a].append((x, c))

    def backup(V):  # (B V)(s,a) = β Σ_x P(x|s,a) V(x)
        return {
            (s, a): beta
            * sum(c / N_sa[s, a] * (1.0 if x == "+" else 0.0 if x == "-" else V[x]) for x, c in succ[s, a])
            for (s, a) in pairs
        }

    if depth == INF:
        idx = {s: i for i, s in enumerate(states)}
        bF = Fraction(beta)
        A = [[Fraction(int(i == j)) for j in range(len(states))] for i in range(len(states))]
        rhs = [Fraction(0)] * len(states)
        for (s, a, x), c in N_sax.items():
            w = Fraction(N_sa[s, a], N_s[s]) * Fraction(c, N_sa[s, a])  # μ(a|s) P(x|s,a)
            if x == "+":
                rhs[idx[s]] += bF * w
            elif x != "-":
                A[idx[s]][idx[x]] -= bF * w
        V = dict(zip(states, (float(v) for v in solve_exact(A, rhs))))
        Q = backup(V)
    else:
        G = defaultdict(list)  # G_{i,t} = β^(T−t+1) R (1-indexed t)
        Gs = defaultdict(list)
        for tr in trajs:
            T = len(tr.obs)
            for t in range(1, T + 1):
                g = beta ** (T - t + 1) * float(tr.success)
                G[tr.obs[t - 1], tr.act[t - 1]].append(g)
                Gs[tr.obs[t - 1]].append(g)
        Q = {p: mean(G[p]) for p in pairs}
        V = {s: mean(Gs[s]) for s in states}
        for _ in range(int(depth)):
            Q = backup(V)
            V = {s: sum(N_sa[s2, a] / N_s[s] * Q[s2, a] for (s2, a) in pairs if s2 == s) for s in states}
    adv_pair = {(s, a): Q[s, a] - V[s] for (s, a) in pairs}
    sigma = {
        s: math.sqrt(sum(N_sa[s2, a] / N_s[s] * adv_pair[s2, a] ** 2 for (s2, a) in pairs if s2 == s))
        for s in states
    }
    n_actions = {s: len({a for (s2, a) in pairs if s2 == s}) for s in states}
    cred = {
        (s, a): (adv_pair[s, a] / max(sigma[s], sigma_min) if n_actions[s] >= min_actions else 0.0)
        for (s, a) in pairs
    }
    a_g = episode_adv(trajs)
    out = defaultdict(list)
    for i, tr in enumerate(trajs):
        for s, a in zip(tr.obs, tr.act):
            out["value"].append(V[s])
            out["q_value"].append(Q[s, a])
            out["credit"].append(cred[s, a])
            out["advantage"].append(w_group * a_g[i] + w_step * cred[s, a])
    return out


o_crbc = per_group(_closure)


@per_group
def o_visit_local(trajs, beta, sigma_min, w_group, w_step, min_actions):
    return _closure(trajs, beta, 0, sigma_min, w_group, w_step, min_actions)


@per_group
def o_shortest_path(trajs, omega, r_succ, exponent, ddof, eps, w_graph, w_group):
    """§3a: d by relaxation to a fixed point; R^G = r_succ ω^(d(s′)+c); source z-score."""
    trs = transitions(trajs)
    out_edges = defaultdict(set)
    for tr in trs:
        for s, _, x in tr:
            out_edges[s].add(x)
    d = {s: INF for s in out_edges}
    d["+"] = 0
    changed = True
    while changed:
        changed = False
        for s, xs in out_edges.items():
            best = min(1 + d.get(x, INF) for x in xs)
            if best < d[s]:
                d[s], changed = best, True
    reached = any(v < INF for s, v in d.items() if s != "+")
    finite = [v for s, v in d.items() if s not in ("+",) and v < INF]
    unreach = (max(finite) if finite else 0) + 1
    dist = {s: (v if v < INF else unreach) for s, v in d.items()}
    dist["-"] = unreach
    reward, by_src = {}, defaultdict(dict)
    for i, tr in enumerate(trs):
        for t, (s, _, x) in enumerate(tr):
            reward[i, t] = r_succ * omega ** (dist[x] + (1 if exponent == "d+c" else 0))
            by_src[s][i, t] = reward[i, t]
    z = {}
    for s, members in by_src.items():
        z.update(zscore_members(members, ddof, eps))
    a_e = episode_adv(trajs)  # verl-agent's A^E: ddof 1, eps 1e-6
    out = defaultdict(list)
    for i, tr in enumerate(trs):
        for t, (s, _, x) in enumerate(tr):
            zz = z[i, t] if reached else 0.0
            out["q_value"].append(reward[i, t])
            out["credit"].append(zz)
            out["advantage"].append(w_graph * zz + w_group * a_e[i])
            if reached:
                out["value"].append(dist[s])
            else:
                out["value"].append(None)
    return out


def gigpo_clusters(trajs, similarity, thresh):
    """Step → anchor-group id: exact text, or verl-agent's greedy clustering over the
    steps in order, joining the first cluster whose first member ``rep`` has
    SequenceMatcher(None, obs, rep).ratio() >= thresh."""
    ids, reps = {}, []
    for i, tr in enumerate(trajs):
        for t, o in enumerate(tr.obs):
            if not similarity:
                ids[i, t] = o
                continue
            for c, rep in enumerate(reps):
                if difflib.SequenceMatcher(None, o, rep).ratio() >= thresh:
                    ids[i, t] = c
                    break
            else:
                reps.append(o)
                ids[i, t] = len(reps) - 1
    return ids


@per_group
def o_gigpo(
    trajs, gamma, omega, mode, episode_stats, eps, step_reward, outcome, similarity, similarity_thresh
):
    norm = "mean" if mode == "mean_norm" else "std"
    a_e = episode_adv(trajs, norm=norm, ddof=1, eps=eps, stats=episode_stats, kind=outcome)
    R = {}
    for i, tr in enumerate(trajs):
        r = list(tr.rew) if step_reward == "env" else [0.0] * (len(tr.obs) - 1) + [outcome_of(tr, outcome)]
        for t, v in enumerate(suffix(r, gamma)):
            R[i, t] = v
    ids = gigpo_clusters(trajs, similarity, similarity_thresh)
    members = defaultdict(dict)
    for k, c in ids.items():
        members[c][k] = R[k]
    a_s = {}
    for c, m in members.items():
        if len(m) == 1:
            a_s.update({k: 0.0 for k in m})
        else:
            a_s.update(zscore_members(m, 1, eps, scale=(mode == "mean_std_norm")))
    return pooled_step_result(trajs, lambda i, t: members[ids[i, t]], R, a_s, a_e, omega)


@per_group
def o_rtmc(trajs, gamma, n_prior, normalize, norm_eps, outcome):
    n, tot = defaultdict(int), defaultdict(float)
    for tr in trajs:
        seen = set()
        T = len(tr.obs)
        for t, (s, a) in enumerate(zip(tr.obs, tr.act)):
            if (s, a) in seen:
                continue
            seen.add((s, a))
            n[s, a] += 1
            tot[s, a] += gamma ** (T - 1 - t) * outcome_of(tr, outcome)
    v_prior = mean([outcome_of(tr, outcome) for tr in trajs])
    Q = {p: tot[p] / n[p] for p in n}
    n_s, s_s = defaultdict(int), defaultdict(float)
    for (s, a), c in n.items():
        n_s[s] += c
        s_s[s] += tot[s, a]
    Vp = {s: (n_s[s] * (s_s[s] / n_s[s]) + n_prior * v_prior) / (n_s[s] + n_prior) for s in n_s}
    A = [Q[s, a] - Vp[s] for tr in trajs for s, a in zip(tr.obs, tr.act)]
    adv = list(A)
    if normalize:
        sd = std(A, 0)
        if sd > norm_eps:
            adv = [x / sd for x in A]
    return {
        "value": [Vp[s] for tr in trajs for s in tr.obs],
        "q_value": [Q[s, a] for tr in trajs for s, a in zip(tr.obs, tr.act)],
        "credit": A,
        "advantage": adv,
    }


@per_group
def o_graft(trajs, gamma, gae_lambda, normalize, ddof, eps, singleton):
    """§4: V fixed point; TD(0); Graph GAE over raw edge instances k hops away; node z."""
    V = mean_backup_V(trajs, gamma)
    trs = transitions(trajs)
    td = {(i, t): gamma * V[x] - V[s] for i, tr in enumerate(trs) for t, (s, _, x) in enumerate(tr)}
    occ = defaultdict(list)  # raw edge instances by source
    for i, tr in enumerate(trs):
        for t, (s, _, x) in enumerate(tr):
            occ[s].append((i, t, x))
    gae = {}
    for i, tr in enumerate(trs):
        T = len(tr)
        for t, (s, _, x) in enumerate(tr):
            bonus, frontier = 0.0, ({x} if x not in ("+", "-") else set())
            for k in range(1, T - t):  # k = 1 .. T − t (1-indexed t)
                inst = [e for u in frontier for e in occ[u]]
                if inst:
                    bonus += (gamma * gae_lambda) ** k * mean([td[e[0], e[1]] for e in inst])
                frontier = {e[2] for e in inst if e[2] not in ("+", "-")}
            gae[i, t] = td[i, t] + bonus
    a_hat = {}
    if normalize:
        for s, inst in occ.items():
            keys = [(i, t) for i, t, _ in inst]
            if len(keys) == 1:
                a = gae[keys[0]]
                a_hat[keys[0]] = {"sign": a / (abs(a) + eps), "zero": 0.0, "raw": a}[singleton]
            else:
                vals = [gae[k] for k in keys]
                m, sd = mean(vals), std(vals, ddof)
                a_hat.update({k: (gae[k] - m) / (sd + eps) for k in keys})
    else:
        a_hat = gae
    keys = [(i, t) for i, tr in enumerate(trs) for t in range(len(tr))]
    return {
        "value": [V[s] for tr in trs for s, _, _ in tr],
        "q_value": [gamma * V[x] for tr in trs for _, _, x in tr],
        "credit": [a_hat[k] for k in keys],
        "advantage": [a_hat[k] for k in keys],
    }


@per_group
def o_gated_bepo(trajs, gamma, gae_lambda, rho, min_successors, bellman_norm, ddof, eps):
    V = mean_backup_V(trajs, gamma)
    trs = transitions(trajs)
    succs = defaultdict(set)
    for tr in trs:
        for s, _, x in tr:
            succs[s].add(x)
    a_b = {}
    for i, tr in enumerate(trs):
        delta = [gamma * V[x] - V[s] for s, _, x in tr]
        for t, v in enumerate(suffix(delta, gamma * gae_lambda)):
            a_b[i, t] = v
    if bellman_norm == "group_z":
        vals = list(a_b.values())
        if len(vals) < 2:
            a_norm = {k: 0.0 for k in a_b}
        else:
            m, sd = mean(vals), std(vals, ddof)
            a_norm = {k: (v - m) / (sd + eps) for k, v in a_b.items()}
    else:
        a_norm = a_b
    a_e = episode_adv(trajs, ddof=ddof, eps=eps)
    out = defaultdict(list)
    for i, tr in enumerate(trs):
        for t, (s, _, x) in enumerate(tr):
            gate = len(succs[s]) >= min_successors
            out["value"].append(V[s])
            out["q_value"].append(gamma * V[x])
            out["credit"].append(a_b[i, t])
            out["advantage"].append((1 - rho) * a_e[i] + rho * a_norm[i, t] if gate else a_e[i])
    return out


@per_group
def o_pgpo(trajs, eta, gamma, alpha, beta, eps, ddof, potential, step_reward):
    R, r_final = {}, []
    visits = defaultdict(list)
    for i, tr in enumerate(trajs):
        r = list(tr.rew) if step_reward == "env" else [0.0] * (len(tr.obs) - 1) + [float(tr.success)]
        r_final.append(r[-1])
        for t, v in enumerate(suffix(r, eta)):
            R[i, t] = v
            visits[tr.obs[t]].append((i, t))

    def phi(s, leave_out=None):
        ks = [k for k in visits[s] if k != leave_out]
        return mean([R[k] for k in ks]) if ks else 0.0

    delta = {}
    for i, tr in enumerate(trajs):
        T = len(tr.obs)
        for t in range(T):
            lo = (i, t) if potential == "loo" else None
            cur = phi(tr.obs[t], lo)
            nxt = gamma * r_final[i] if t == T - 1 else gamma * phi(tr.obs[t + 1], lo)
            delta[i, t] = nxt - cur
    a_s, a_phi = {}, {}
    for s, ks in visits.items():
        a_s.update(zscore_members({k: R[k] for k in ks}, ddof, eps))
        a_phi.update(zscore_members({k: delta[k] for k in ks}, ddof, eps))
    p_succ = sum(1 for v in r_final if v > 0) / len(trajs)  # Eq. 9: r_final > 0
    w = beta * (1 - p_succ) ** alpha
    keys = [(i, t) for i, tr in enumerate(trajs) for t in range(len(tr.obs))]
    adv = [a_s[k] + w * a_phi[k] for k in keys]
    return {"value": [phi(trajs[i].obs[t]) for i, t in keys], "credit": adv, "advantage": adv}


@per_group
def o_trace(trajs, w_out, w_turn, K, gamma, gap_eps, terminal_scale, terminal_discount, outcome_eps):
    Rs = [float(tr.success) for tr in trajs]
    m, sd = mean(Rs), std(Rs, 0)
    a_out = [0.0 if sd <= outcome_eps else (R - m) / sd for R in Rs]
    out = defaultdict(list)
    for i, tr in enumerate(trajs):
        d = [-l + gap_eps for l in tr.ell]
        V = [math.log(d[0] / dt) for dt in d]
        T = len(d) - 1  # transitions
        delta = [V[t + 1] - V[t] for t in range(T)]
        r = []
        for t in range(T):
            if K > 0:
                e = min(t + K - 1, T - 1)
                num = sum(gamma**j * delta[t + j] for j in range(e - t + 1))
                den = sum(gamma**j for j in range(e - t + 1))
                local, fill = num / den, e == T - 1
            else:
                local, fill = 0.0, t == T - 1
            if fill:
                local += terminal_scale * (gamma ** (T - t) if terminal_discount else 1.0) * a_out[i]
            r.append(local)
        out["value"] += V
        out["credit"] += r + [0.0]
        out["advantage"] += [w_out * a_out[i] + w_turn * x for x in r] + [w_out * a_out[i]]
    return out


@per_group
def o_agentopsd(trajs, gamma, b, lam, eps0, ddof, eps):
    a_seq = episode_adv(trajs)
    B0 = min(max(sum(tr.success for tr in trajs) / len(trajs), eps0), 1 - eps0)
    out = defaultdict(list)
    for i, tr in enumerate(trajs):
        c, B, q = 0.0, [], []
        prev = B0
        for e in tr.ev:
            c = gamma * c + e
            Bk = 1 / (1 + math.exp(-(math.log(B0 / (1 - B0)) + c)))
            sign = (a_seq[i] > 0) - (a_seq[i] < 0)
            q.append(sign * (Bk - prev))
            B.append(Bk)
            prev = Bk
        if len(q) - ddof >= 1:
            m, sd = mean(q), std(q, ddof)
            z = [(x - m) / (sd + eps) for x in q]
        else:
            z = [0.0] * len(q)
        w = [min(max(1 + b * zk, 1 - b), 1 + b) for zk in z]
        out["value"] += B
        out["credit"] += q
        out["advantage"] += [a_seq[i] * ((1 - lam) + lam * wk) for wk in w]
    return out


@per_group
def o_abc(trajs, gamma, pool, ddof, eps, w_outcome):
    pools = (
        [{(i, t): s for i, tr in enumerate(trajs) for t, s in enumerate(tr.judge)}]
        if pool == "group"
        else [{(i, t): s for t, s in enumerate(tr.judge)} for i, tr in enumerate(trajs)]
    )
    r_hat = {}
    for p in pools:
        r_hat.update(zscore_members(p, ddof, eps))
    a_e = episode_adv(trajs)
    out = defaultdict(list)
    for i, tr in enumerate(trajs):
        A = suffix([r_hat[i, t] for t in range(len(tr.obs))], gamma)
        out["credit"] += A
        out["advantage"] += [x + w_outcome * a_e[i] for x in A]
    return out


@per_group
def o_trca(trajs, lam, gamma, r_evidence, r_execution, r_invalidity, ddof, eps, w_step):
    cat = {it["id"]: it["category"] for it in RUBRIC}
    M = defaultdict(int)
    for c in cat.values():
        M[c] += 1
    mag = {"evidence": r_evidence, "execution": r_execution, "invalidity": r_invalidity}
    R = {}
    for i, tr in enumerate(trajs):
        covered, phi_prev, total = set(), 0.0, []
        for t, act in enumerate(tr.active):
            rF = sum((-abs(mag[cat[j]]) if cat[j] == "invalidity" else mag[cat[j]]) / M[cat[j]] for j in act)
            covered |= {j for j in act if cat[j] != "invalidity"}  # C_{t,j} = max_{u≤t} O
            phi_t = sum(mag[cat[j]] / M[cat[j]] for j in covered)
            rB = phi_t - phi_prev
            phi_prev = phi_t
            total.append(tr.rew[t] + (1 - lam) * rF + lam * rB)
        for t, v in enumerate(suffix(total, gamma)):
            R[i, t] = v
    by_ctx = defaultdict(dict)
    for i, tr in enumerate(trajs):
        for t, s in enumerate(tr.obs):
            by_ctx[s][i, t] = R[i, t]
    a_s = {}
    for m in by_ctx.values():
        a_s.update(zscore_members(m, ddof, eps))
    a_e = episode_adv(trajs)
    return pooled_step_result(trajs, lambda i, t: by_ctx[trajs[i].obs[t]], R, a_s, a_e, w_step)


@per_group
def o_iapo(trajs, beta_pos, clip, eps, ddof, adv_eps):
    a_tau = episode_adv(trajs, ddof=ddof, eps=adv_eps)
    out = defaultdict(list)
    for i, tr in enumerate(trajs):
        T = len(tr.obs)
        sup = {(k, e["to"]) for k in range(T) for e in tr.edges[k] if e["type"] == "support"}
        fail = {(k, e["to"]) for k in range(T) for e in tr.edges[k] if e["type"] == "failed"}
        L = tr.ntok
        Ltot = sum(L)
        d_pos = [sum(1 for (a, _) in sup if a == k) for k in range(T)]
        d_neg = [sum(1 for (a, _) in fail if a == k) for k in range(T)]
        d_in = [tr.direct[k] + sum(1 for (_, b) in sup if b == k) for k in range(T)]
        phi_p = [math.log(1 + d_pos[k] + d_in[k]) for k in range(T)]
        phi_n = [math.log(1 + int(tr.err[k]) * (1 + d_neg[k] + d_in[k])) for k in range(T)]

        def m_of(phi):
            bar = sum(L[k] * phi[k] for k in range(T)) / Ltot
            sig = math.sqrt(sum(L[k] * (phi[k] - bar) ** 2 for k in range(T)) / Ltot)
            ez = [math.exp(min(max((phi[k] - bar) / (sig + eps), -clip), clip)) for k in range(T)]
            norm = sum(L[k] * ez[k] for k in range(T)) / Ltot
            return [x / norm for x in ez]

        m_p, m_n = m_of(phi_p), m_of(phi_n)
        bar_n = sum(L[k] * phi_n[k] for k in range(T)) / Ltot
        num = [m_p[k] * math.exp(-beta_pos * (phi_n[k] - bar_n)) for k in range(T)]
        w_p = [Ltot * num[k] / sum(L[j] * num[j] for j in range(T)) for k in range(T)]
        w = [1.0] * T if a_tau[i] == 0 else (w_p if a_tau[i] > 0 else m_n)
        out["credit"] += w
        out["advantage"] += [a_tau[i] * x for x in w]
    return out


@per_group
def o_g2po(
    trajs, gamma, success_value, failure_value, invalid_penalty, episode_penalty, omega, mode, eps, outcome
):
    """§16 G2PO (no step of these groups logs is_action_valid: no penalty applies)."""
    scale = mode == "mean_std_norm"
    terms = defaultdict(list)
    for tr in trajs:
        T = len(tr.obs)
        for t, s in enumerate(tr.obs):
            terms[s].append(gamma ** (T - t) * outcome_of(tr, outcome))
    V = {s: mean(v) for s, v in terms.items()}
    V["+"], V["-"] = success_value, failure_value
    steps = [(i, t, s, x) for i, tr in enumerate(transitions(trajs)) for t, (s, _, x) in enumerate(tr)]
    at = defaultdict(dict)
    for i, t, s, x in steps:
        at[s][i, t] = V[x]
    a1 = {}
    for m in at.values():
        a1.update(zscore_members(m, 1, eps, scale=scale))
    a2 = zscore_members({(i, t): V[x] - V[s] for i, t, s, x in steps}, 1, eps, scale=scale)
    a_e = episode_adv(
        trajs, norm="std" if scale else "mean", ddof=1, eps=eps, stats="cross_steps", kind=outcome
    )
    out = defaultdict(list)
    for i, t, s, x in steps:
        c = a1[i, t] + a2[i, t]
        out["value"].append(V[s])
        out["q_value"].append(V[x])
        out["credit"].append(c)
        out["advantage"].append(a_e[i] + omega * c)
    return out


def _tfidf(texts, max_features):
    """sklearn TfidfVectorizer defaults, written out: {row: {term: weight}} or None."""
    import re

    counts = [defaultdict(int) for _ in texts]
    for c, text in zip(counts, texts):
        for tok in re.findall(r"(?u)\b\w\w+\b", text.lower()):
            c[tok] += 1
    vocab = sorted({t for c in counts for t in c})
    if not vocab:
        return None
    tfs = {t: sum(c.get(t, 0) for c in counts) for t in vocab}
    keep = set(sorted(vocab, key=lambda t: -tfs[t])[:max_features])  # stable: alphabetical ties
    n = len(texts)
    idf = {t: math.log((1 + n) / (1 + sum(1 for c in counts if c.get(t)))) + 1 for t in keep}
    rows = []
    for c in counts:
        v = {t: k * idf[t] for t, k in c.items() if t in keep}
        norm = math.sqrt(sum(x * x for x in v.values()))
        rows.append({t: x / norm for t, x in v.items()} if norm > 0 else {})
    return rows


def o_proxmo(groups=None, *, gamma, temperature, max_features, norm_eps, idf_scope, omega, psc, psc_alpha,
             psc_target_range, invalid_penalty, step_reward, outcome):  # fmt: skip
    """§16 ProxMO, every row against every row of its group (the authors' masked matrix)."""
    groups = GROUPS if groups is None else groups
    texts = [[o for tr in trajs for o in tr.obs] for _, trajs in groups]
    if idf_scope == "batch":
        vec_all = _tfidf([o for ts in texts for o in ts], max_features)
        vecs, k = [], 0
        for ts in texts:
            vecs.append(None if vec_all is None else vec_all[k : k + len(ts)])
            k += len(ts)
    else:
        vecs = [_tfidf(ts, max_features) for ts in texts]
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    beta = psc_target_range / (sig(1.0) - 0.5)
    out = defaultdict(list)
    for (_, trajs), vec in zip(groups, vecs):
        R = []
        for tr in trajs:
            r = (
                list(tr.rew)
                if step_reward == "env"
                else [0.0] * (len(tr.obs) - 1) + [outcome_of(tr, outcome)]
            )
            R += suffix(r, gamma)
        if vec is not None:
            vec = [
                {t: x / (math.sqrt(sum(y * y for y in v.values())) + norm_eps) for t, x in v.items()}
                for v in vec
            ]
        base = []
        for i in range(len(R)):
            if vec is None:
                base.append(0.0)
                continue
            logit = [
                sum(x * vec[j].get(t, 0.0) for t, x in vec[i].items()) / temperature for j in range(len(R))
            ]
            top = max(logit)
            e = [math.exp(z - top) for z in logit]
            base.append(sum(w * r for w, r in zip(e, R)) / sum(e))
        flat = vec is None or max(R) == min(R)
        a_s = [0.0 if flat else r - b for r, b in zip(R, base)]
        a_e = episode_adv(trajs, norm="mean", stats="cross_steps", kind=outcome)
        rows = [outcome_of(tr, outcome) for tr in trajs for _ in tr.obs]
        p = min(max(mean(rows) if len(rows) > 1 else 0.0, 0.0), 1.0)
        k = 0
        for i, tr in enumerate(trajs):
            Ri = outcome_of(tr, outcome)
            w = (
                1 + beta * (sig((1 - p) ** psc_alpha) - 0.5)
                if Ri > 0.5
                else 1 + beta * (sig(-(p**psc_alpha)) - 0.5)
            )
            for _ in tr.obs:
                out["value"].append(base[k])
                out["q_value"].append(R[k])
                out["credit"].append(a_s[k])
                out["advantage"].append(a_e[i] * (w if psc else 1.0) + omega * a_s[k])
                k += 1
    return out


ORACLES = {
    "grpo": o_grpo,
    "crbc": o_crbc,
    "visit_local": o_visit_local,
    "shortest_path": o_shortest_path,
    "gigpo": o_gigpo,
    "rtmc": o_rtmc,
    "graft": o_graft,
    "gated_bepo": o_gated_bepo,
    "pgpo": o_pgpo,
    "trace": o_trace,
    "agentopsd": o_agentopsd,
    "abc": o_abc,
    "trca": o_trca,
    "iapo": o_iapo,
    "g2po": o_g2po,
    "proxmo": o_proxmo,
}


# ================================================================ option grid

#: Values tried per parameter beyond the default (each varied alone from the defaults,
#: plus the COMBOS below). Enum choices and bools are filled in from the registry.
NUMERIC = {
    "grpo": {"eps": [0.1]},
    "crbc": {
        "beta": [0.5, 1.0],
        "depth": [0, 1, 3],
        "sigma_min": [0.5],
        "w_group": [0.0, 2.0],
        "w_step": [1.0],
        "min_actions": [1, 3],
    },
    "visit_local": {
        "beta": [0.5, 1.0],
        "sigma_min": [0.5],
        "w_group": [0.0],
        "w_step": [2.5],
        "min_actions": [1, 3],
    },
    "shortest_path": {
        "omega": [0.5, 0.8],
        "r_succ": [1.0],
        "ddof": [0],
        "eps": [0.1],
        "w_graph": [0.0, 2.0],
        "w_group": [0.0],
    },
    "gigpo": {"gamma": [1.0, 0.5], "omega": [0.0, 2.0], "eps": [0.1], "similarity_thresh": [0.4, 0.8]},
    "rtmc": {"gamma": [1.0, 0.5], "n_prior": [0.0, 5.0], "norm_eps": [0.5]},
    "graft": {"gamma": [0.9, 0.5], "gae_lambda": [0.0, 0.6], "ddof": [0], "eps": [0.1]},
    "gated_bepo": {
        "gamma": [0.9, 1.0],
        "gae_lambda": [0.0, 1.0],
        "rho": [0.0, 1.0],
        "min_successors": [1, 3],
        "ddof": [0],
        "eps": [0.1],
    },
    "pgpo": {
        "eta": [1.0, 0.5],
        "gamma": [0.95],
        "alpha": [0.0, 1.0],
        "beta": [0.5],
        "eps": [0.1],
        "ddof": [0],
    },
    "trace": {
        "w_out": [0.0, 2.0],
        "w_turn": [1.0],
        "K": [0, 1, 10],
        "gamma": [1.0, 0.5],
        "gap_eps": [0.5],
        "terminal_scale": [0.0, 1.0],
        "outcome_eps": [0.6],
    },
    "agentopsd": {
        "gamma": [1.0, 0.0],
        "b": [0.5],
        "lam": [0.0, 1.0],
        "eps0": [0.2],
        "ddof": [0],
        "eps": [0.1],
    },
    "abc": {"gamma": [0.0, 1.0], "ddof": [0], "eps": [0.1], "w_outcome": [1.0]},
    "trca": {
        "lam": [0.0, 1.0],
        "gamma": [1.0, 0.5],
        "r_evidence": [2.0],
        "r_execution": [0.5],
        "r_invalidity": [3.0],
        "ddof": [0],
        "eps": [0.1],
        "w_step": [0.0, 2.0],
    },
    "iapo": {"beta_pos": [0.0, 1.0], "clip": [0.125, 2.0], "eps": [0.1], "ddof": [0], "adv_eps": [0.1]},
    "g2po": {
        "gamma": [1.0, 0.5],
        "success_value": [1.0],
        "failure_value": [-1.0],
        "invalid_penalty": [0.5],
        "episode_penalty": [0.5],
        "omega": [0.0, 2.0],
        "eps": [0.1],
    },
    "proxmo": {
        "gamma": [1.0, 0.5],
        "temperature": [1.0, 0.02],
        "max_features": [3],
        "norm_eps": [0.0, 0.5],
        "omega": [0.0, 2.0],
        "psc_alpha": [1.0],
        "psc_target_range": [0.2],
        "invalid_penalty": [0.5],
    },
}
COMBOS = {
    "grpo": [
        dict(norm=n, ddof=d, stats=s, outcome=o)
        for n in ("std", "mean")
        for d in (0, 1)
        for s in ("trajectory", "cross_steps")
        for o in ("success", "return")
    ],
    "crbc": [dict(beta=1.0, depth=2), dict(beta=0.5, depth=INF, min_actions=1)],
    "gigpo": [
        dict(mode="mean_std_norm", episode_stats="trajectory", similarity=True, similarity_thresh=0.4),
        dict(
            mode="mean_std_norm",
            step_reward="outcome",
            outcome="return",
            similarity=True,
            similarity_thresh=0.8,
        ),
        dict(similarity=True, similarity_thresh=0.95, gamma=1.0),
    ],
    "graft": [
        dict(normalize=False, gae_lambda=1.0, gamma=0.9),
        dict(singleton="zero", ddof=0),
        dict(singleton="raw", gamma=0.5),
    ],
    "gated_bepo": [dict(bellman_norm="none", rho=1.0, min_successors=1)],
    "pgpo": [
        dict(potential="loo", step_reward="outcome", gamma=0.95),
        dict(potential="loo", ddof=0, alpha=1.0),
    ],
    "trace": [dict(K=0, terminal_discount=False), dict(K=1, terminal_discount=False, gamma=1.0)],
    "abc": [dict(pool="trajectory", ddof=0, w_outcome=1.0)],
}


def _cases():
    out = []
    for name in names():
        spec = get(name)
        if not spec.section:
            continue
        out.append((name, {}))
        for info in param_infos(spec.params_cls):
            values = list(NUMERIC.get(name, {}).get(info.name, []))
            if info.choices:
                values += [c for c in info.choices if c != info.default]
            if info.type is bool:
                values.append(not info.default)
            out += [(name, {info.name: v}) for v in values]
        out += [(name, c) for c in COMBOS.get(name, [])]
    return out


CASES = _cases()


def _full_params(name, overrides):
    spec = get(name)
    p = {i.name: i.default for i in param_infos(spec.params_cls)}
    p.update(overrides)
    return p


def _case_id(case):
    name, p = case
    return name + ("[" + ",".join(f"{k}={v}" for k, v in p.items()) + "]" if p else "[defaults]")


def _compare(res, expect, where):
    for field in ("credit", "advantage", "value", "q_value"):
        if field not in expect:
            continue
        want = np.array([np.nan if v is None else v for v in expect[field]], dtype=np.float64)
        got = getattr(res, field)
        mask = ~np.isnan(want)
        assert got.shape == want.shape, (where, field)
        np.testing.assert_allclose(got[mask], want[mask], rtol=TOL, atol=TOL, err_msg=f"{where}: {field}")


# ================================================================ the tests


def test_generated_groups_have_the_required_shapes(graph):
    b = graph.batch
    steps = b.steps
    last = b.traj_offsets[1:] - 1
    # A truncated trajectory with no success field and a positive reward sum: a failure.
    trunc = np.flatnonzero(b.traj_truncated)
    assert any(steps["success"].iat[last[t]] is None and b.traj_return[t] > 0 for t in trunc)
    assert not b.traj_success[trunc].any()
    # One-rollout, all-success and all-failure groups.
    per_group = np.bincount(b.traj_group)
    assert 1 in per_group
    rates = np.bincount(b.traj_group, weights=b.traj_success) / per_group
    assert {0.0, 1.0} <= set(rates[per_group > 1].tolist())
    # Self-loops and longer cycles.
    assert np.any(graph.step_next == graph.step_node)
    assert any(len(set(tr.obs)) < len(tr.obs) - 1 for _, ts in GROUPS for tr in ts)
    # Similarity texts whose ratio() is not symmetric.
    assert difflib.SequenceMatcher(None, "diet", "tide").ratio() == 0.5
    assert difflib.SequenceMatcher(None, "tide", "diet").ratio() == 0.25


def test_every_registered_estimator_has_an_oracle():
    assert {n for n in names() if get(n).section} == set(ORACLES)


def test_every_option_value_is_covered():
    """Each enum choice, both values of each flag, and ≥ 2 values of each numeric option."""
    seen = defaultdict(set)
    for name, over in CASES:
        for k, v in _full_params(name, over).items():
            seen[name, k].add(v)
    for name in ORACLES:
        for info in param_infos(get(name).params_cls):
            got = seen[name, info.name]
            if info.choices:
                assert set(info.choices) <= got, (name, info.name)
            elif info.type is bool:
                assert got == {True, False}, (name, info.name)
            else:
                assert len(got) >= 2, (name, info.name)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_numpy_reference_matches_oracle(graph, case):
    name, over = case
    p = _full_params(name, over)
    res = score(graph, name, backend="numpy", **p)
    _compare(res, ORACLES[name](**p), _case_id(case))


@pytest.mark.parametrize("name", list(ORACLES))
def test_through_the_loader_with_explicit_success(tmp_path, name):
    """The same groups written as JSONL with `success` and `episode_return` on every row
    (truncated rows say success=false) load into a batch the oracles agree with."""
    path = tmp_path / "groups.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows_of(GROUPS, with_success_everywhere=True)))
    g = build_graph(load_rollouts(path))
    assert g.batch.traj_truncated.sum() == sum(tr.truncated for _, ts in GROUPS for tr in ts)
    p = _full_params(name, {})
    _compare(score(g, name, backend="numpy", **p), ORACLES[name](**p), f"{name} via loader")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_other_seeds_default_options(seed):
    """Fresh draws of the random groups (same shapes), every estimator at its defaults."""
    groups = make_groups(seed)
    g = build_graph(batch_of(groups))
    for name, oracle in ORACLES.items():
        p = _full_params(name, {})
        _compare(score(g, name, backend="numpy", **p), oracle(groups, **p), f"{name} seed {seed}")


#: Ten short texts with ten pairs whose ratio() is not symmetric (e.g. ratio("dacdb",
#: "dbacbd") = 0.727 but ratio("dbacbd", "dacdb") = 0.364), plus "tide" / "diet".
_WORDS = [
    "dabdbc",
    "dacdab",
    "adacdb",
    "cdbcda",
    "dacdb",
    "bcacbd",
    "bdccba",
    "dbacbd",
    "dbcabb",
    "acbdcc",
    "tide",
    "diet",
]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    obs=st.lists(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=4), min_size=1, max_size=5),
    wins=st.lists(st.booleans(), min_size=5, max_size=5),
    thresh=st.sampled_from([0.3, 0.4, 0.45, 0.6, 0.7]),
    mode=st.sampled_from(["mean_norm", "mean_std_norm"]),
)
def test_gigpo_similarity_clusters_property(obs, wins, thresh, mode):
    """Short texts whose ratio() is often not symmetric, at thresholds between the two orders."""
    rng = random.Random(0)
    groups = [("h", [_traj(rng, o, ["x"] * len(o), w) for o, w in zip(obs, wins)])]
    p = _full_params("gigpo", {"similarity": True, "similarity_thresh": thresh, "mode": mode})
    _compare(
        score(build_graph(batch_of(groups)), "gigpo", backend="numpy", **p),
        o_gigpo(groups, **p),
        f"gigpo {obs} {thresh}",
    )


#: The options those regressions concern, per estimator (the parity tests' synthetic groups have
#: r_final > 0 exactly on successes and no similar texts, so they cannot see these). Every other
#: estimator with a twin is checked at its defaults.
TWIN_OPTIONS = {
    "shortest_path": [{}, {"ddof": 0, "eps": 0.1}],
    "pgpo": [{}, {"potential": "loo"}],
    "gigpo": [
        {},
        {"similarity": True, "similarity_thresh": 0.4},
        {"similarity": True, "similarity_thresh": 0.8, "mode": "mean_std_norm"},
    ],
}


def _twin_cases() -> list[tuple[str, dict, str]]:
    """``(name, options, backend)`` for every registered kernel but numpy's (`registry.kernels`);
    a torch kernel runs on ``torch`` (CPU) and ``torch:cuda``."""
    out = []
    for name, backend, _ in registry.kernels():
        if backend == "numpy":
            continue
        for over in TWIN_OPTIONS.get(name, [{}]):
            out += [(name, over, b) for b in ((backend, "torch:cuda") if backend == "torch" else (backend,))]
    return out


TWIN_CASES = _twin_cases()


def test_twin_options_name_estimators_with_twins():
    """An entry of `TWIN_OPTIONS` whose estimator has no twin would be silently unused."""
    twins = {name for name, _, _ in TWIN_CASES}
    assert twins and set(TWIN_OPTIONS) <= twins, sorted(set(TWIN_OPTIONS) - twins)


@pytest.mark.parametrize(
    "name,over,backend", TWIN_CASES, ids=[f"{_case_id((n, o))}-{b}" for n, o, b in TWIN_CASES]
)
def test_twins_match_oracle(graph, backend, name, over):
    backend, _, device = backend.partition(":")
    mod = pytest.importorskip(backend)
    if device == "cuda" and not mod.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    p = _full_params(name, over)
    kw = {"device": device or "cpu"} if backend == "torch" else {}
    _compare(score(graph, name, backend=backend, **kw, **p), ORACLES[name](**p), f"{name} {over} {backend}")


# ================================================================ regressions (hand-computed)


def _one_group(tmp_path, trajs, name="r.jsonl"):
    rows = []
    for tid, (obs, rew, success) in trajs.items():
        for k, o in enumerate(obs):
            rows.append(
                {
                    "group_id": "q",
                    "traj_id": tid,
                    "step_idx": k,
                    "anchor_obs": o,
                    "action": "act",
                    "reward": rew[k],
                    "done": k == len(obs) - 1,
                    "success": success,
                }
            )
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_rollouts(path)


def test_trace_one_rollout_outcome_term_is_zero(tmp_path):
    """§8.2: A_out = (R − mean)/pop_std and 0 when pop_std ≤ eps; no GRPO one-rollout rule.

    One rollout, success, ℓ = [−3, −2] (one transition + the answer row), defaults
    (ε = 0.1, K = 3, γ = 0.8, c = 2, w_out = 1, w_turn = 0.2):
        pop_std of {1} = 0 ≤ 1e-6  →  A_out = 0
        d = [3.1, 2.1];  V = [0, log(3.1/2.1)] = [0, 0.389465];  δ_0 = 0.389465
        r_0 = δ_0 (window = the one transition) + 2·0.8·A_out = 0.389465
        A_0 = 1·0 + 0.2·0.389465 = 0.077893;  the answer row gets w_out·A_out = 0
    (GRPO's mean 0 / std 1 rule would give A_out = 1 and A_0 = 1 + 0.2·(0.3895 + 1.6) = 1.3979.)
    """
    rows = [
        {
            "group_id": "q",
            "traj_id": "only",
            "step_idx": k,
            "reward": float(k == 1),
            "done": k == 1,
            "success": True,
            "anchor_obs": f"s{k}",
            "gold_logprob": v,
        }
        for k, v in enumerate([-3.0, -2.0])
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = score(load_rollouts(path), "trace", backend="numpy")
    assert r.advantage[0] == pytest.approx(0.0779, abs=5e-5)
    assert r.advantage[0] == pytest.approx(0.2 * math.log(3.1 / 2.1), abs=1e-12)
    assert r.advantage[1] == 0.0
    # Two rollouts, one success: pop_std = 0.5, A_out = ±1 (not ±1/(0.5 + eps)·0.5).
    rows2 = rows + [dict(r, traj_id="lose", success=False, reward=0.0) for r in rows]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows2))
    r2 = score(load_rollouts(path), "trace", backend="numpy")
    assert r2.advantage[1] == 1.0 and r2.advantage[3] == -1.0


def test_graphgpo_ddof_applies_to_the_source_zscore_only():
    """§3a with ddof = 0 on the §14.1 toy, τ1 step 0 (s0 −a→ s1):
        d(s1) = 2, d(s4) = 3; R^G = 10·0.1^(d+1): a → 0.01 (twice), f → 0.001 (twice)
        mean 0.0055, pop std 0.0045:  z = 0.0045/(0.0045 + 1e-6) = 0.999778
        A^E(τ1) = verl-agent's (sample std 0.57735, eps 1e-6): 0.5/0.577351 = 0.866024
        A = 0.999778 + 0.866024 = 1.865802
    (ddof = 0 also in A^E would give 0.999778 + 0.5/(0.5 + 1e-6) = 1.99978.)"""
    g = build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl"))
    r = score(g, "shortest_path", backend="numpy", ddof=0)
    t1 = np.flatnonzero(g.batch.steps["traj_id"].to_numpy() == "t1")[0]
    assert r.advantage[t1] == pytest.approx(1.86580, abs=1e-5)
    assert r.advantage[t1] == pytest.approx(0.0045 / 0.004501 + 0.5 / (math.sqrt(1 / 3) + 1e-6), abs=1e-9)


def test_gigpo_similarity_compares_obs_to_representative(tmp_path):
    """verl-agent's are_similar(obs, rep) = SequenceMatcher(None, obs, rep).ratio() ≥ thresh.
    "tide" comes first (the representative); "diet" is compared as ratio("diet", "tide") =
    0.5 ≥ 0.4, so they merge (ratio("tide", "diet") = 0.25 would keep them apart).
    Two one-step rollouts, R = 1 and 0, mean_norm, γ = 0.95: the merged group has mean 0.5,
    so A^S = +0.5 and −0.5; unmerged singletons would give 0."""
    b = _one_group(tmp_path, {"win": (["tide"], [1.0], True), "lose": (["diet"], [0.0], False)})
    r = score(b, "gigpo", backend="numpy", similarity=True, similarity_thresh=0.4)
    np.testing.assert_allclose(r.credit, [0.5, -0.5], atol=1e-12)
    r = score(b, "gigpo", backend="numpy", similarity=True, similarity_thresh=0.6)
    np.testing.assert_allclose(r.credit, [0.0, 0.0], atol=1e-12)


def test_pgpo_task_gate_counts_positive_final_rewards(tmp_path):
    """Eq. 9: p_succ = fraction of trajectories with r_final > 0, not the success flag.
    Three rollouts: a success (r_final = 10), a failure with a WebShop-style partial score
    (r_final = 0.5 > 0) and a failure with r_final = 0: p_succ = 2/3, w = (1 − 2/3)² = 1/9
    (the flag would give p_succ = 1/3 and w = 4/9)."""
    b = _one_group(
        tmp_path,
        {
            "a": (["s", "x"], [0.0, 10.0], True),
            "b": (["s", "y"], [0.0, 0.5], False),
            "c": (["s", "z"], [0.0, 0.0], False),
        },
    )
    r = score(b, "pgpo", backend="numpy")
    assert r.diagnostics["task_gate_mean"] == pytest.approx(1 / 9, abs=1e-12)
