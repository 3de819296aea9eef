"""GiGPO — Group-in-Group Policy Optimization (ESTIMATORS.md §2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EstimatorInputError
from ..graph import AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.returns import discounted_returns, group_steps, step_rewards
from ..ops.segments import segment_zscore
from ..ops.xp import as_numpy, namespace
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["GiGPOParams", "gigpo", "similar", "similarity_clusters", "step_groups", "episode_advantage"]


@dataclass(frozen=True)
class GiGPOParams:
    gamma: float = param(
        0.95,
        "discount γ of the step return R_{i,t} = r_{i,t} + γ·R_{i,t+1} "
        "(verl-agent default 1.0; the shipped ALFWorld/Sokoban scripts and the "
        "paper use 0.95)",
        low=0.0,
        high=1.0,
    )
    omega: float = param(1.0, "weight ω of the step advantage A^S in A = A^E + ω·A^S", low=0.0, high=100.0)
    mode: str = param(
        "mean_norm",
        "F_norm of both levels: 'mean_norm' = 1 (config default), "
        "'mean_std_norm' = std + eps (the shipped ALFWorld/Sokoban scripts)",
        choices=("mean_norm", "mean_std_norm"),
    )
    episode_stats: str = param(
        "cross_steps",
        "statistics of A^E: 'cross_steps' = verl-agent's "
        "compute_mean_std_cross_steps (rollouts weigh by length, code "
        "default); 'trajectory' = one value per rollout",
        choices=("cross_steps", "trajectory"),
    )
    eps: float = param(1e-6, "added to the std in mean_std_norm", low=0.0, high=1.0)
    step_reward: str = param(
        "env",
        "rewards of the step return: 'env' = the logged per-step "
        "rewards (verl-agent); 'outcome' = R_i on the last step only",
        choices=("env", "outcome"),
    )
    outcome: str = param(
        "success",
        "R_i of the episode advantage: success indicator or the logged episode return",
        choices=("success", "return"),
    )
    similarity: bool = param(
        False,
        "group steps by text similarity of the anchors instead of "
        "exact keys (config enable_similarity, default off)",
    )
    similarity_thresh: float = param(
        0.95,
        "difflib ratio a step needs with a cluster's first member to join it; strictly in (0,1)",
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
    )


#: Work allowed to similarity mode per call (``$CRBC_VIZ_MAX_SIMILARITY_WORK``), in elementary
#: steps of difflib's matcher, each charged before it runs: a text's length when its characters
#: are counted; per pair, the characters the two counts share, then (only where that bound can
#: reach the threshold) both lengths for the matcher's index plus, for every block search, the
#: index entries it may walk — quadratic in a text's length at worst, and pairwise over a group.
MAX_SIMILARITY_WORK = 10_000_000  # at worst (one long block search) about 3 to 5 s of one core
ENV_SIMILARITY_WORK = "CRBC_VIZ_MAX_SIMILARITY_WORK"


def similarity_budget() -> int:
    """`MAX_SIMILARITY_WORK`, or ``$CRBC_VIZ_MAX_SIMILARITY_WORK`` when set (a positive number)."""
    import math
    import os

    raw = os.environ.get(ENV_SIMILARITY_WORK, "").strip()
    try:
        v = float(raw) if raw else float(MAX_SIMILARITY_WORK)
    except ValueError:
        v = float("nan")
    if not (v > 0 and math.isfinite(v)):
        raise EstimatorInputError(f"${ENV_SIMILARITY_WORK}: expected a finite number > 0, got {raw[:40]!r}")
    return int(v)


class _Work:
    """Similarity work charged before it is done; past the budget it refuses, naming the group."""

    def __init__(self, budget: int, graph: AnchorGraph):
        self.budget, self.spent, self.group, self.graph = budget, 0, 0, graph

    def charge(self, steps: int) -> None:
        self.spent += steps
        if self.spent > self.budget:
            raise EstimatorInputError(
                f"GiGPO similarity mode: comparing anchor texts pairwise (difflib's matcher: "
                f"quadratic in a group's anchors, and worse than linear in a text's length) "
                f"passed the work limit of {self.budget:,} matcher steps in group "
                f"'{self.graph.batch.group_label(self.group)}'; use exact anchors "
                f"(similarity=false), or set ${ENV_SIMILARITY_WORK} to raise the limit"
            )


def similar(a: str, b: str, thresh: float, counts_a=None, counts_b=None, work: _Work | None = None) -> bool:
    """``difflib.SequenceMatcher(None, a, b).ratio() >= thresh``, exactly, at a cost charged
    to ``work`` before each step.

    ratio = 2·M / (|a| + |b|) with M the characters of the matching blocks that
    ``get_matching_blocks`` finds by splitting around each ``find_longest_match``. M never
    exceeds the characters the two texts share (``quick_ratio``'s count), so a pair whose
    shared count cannot reach ``thresh`` is decided from the two character counts alone; the
    others run difflib's own block search (the same calls in the same regions, so the same
    M), stopping as soon as the blocks found reach ``thresh`` or the regions left cannot.
    ``counts_a`` / ``counts_b``: the `collections.Counter` of each text, when cached.
    """
    import difflib
    from collections import Counter
    from itertools import accumulate

    charge = work.charge if work is not None else (lambda steps: None)
    la, lb = len(a), len(b)
    if la + lb == 0:
        return 1.0 >= thresh  # difflib's ratio of two empty texts
    ca = Counter(a) if counts_a is None else counts_a
    cb = Counter(b) if counts_b is None else counts_b
    small, big = (ca, cb) if len(ca) <= len(cb) else (cb, ca)
    charge(len(small) + 1)
    shared = sum(min(n, big.get(c, 0)) for c, n in small.items())
    if 2.0 * shared / (la + lb) < thresh:
        return False
    charge(la + lb)  # the matcher's index of b, and the walk-length prefix over a
    sm = difflib.SequenceMatcher(None, a, b)
    occ = {c: len(js) for c, js in sm.b2j.items()}
    # Entries find_longest_match may walk for a[:i] (one per position, plus b's occurrences).
    walk = [0, *accumulate(occ.get(c, 0) + 1 for c in a)]
    matched, possible = 0, min(la, lb)
    queue = [(0, la, 0, lb)]
    while queue:
        alo, ahi, blo, bhi = queue.pop()
        possible -= min(ahi - alo, bhi - blo)
        charge(walk[ahi] - walk[alo] + 1)
        i, j, k = sm.find_longest_match(alo, ahi, blo, bhi)
        if k:
            matched += k
            possible += k
            if 2.0 * matched / (la + lb) >= thresh:
                return True
            if alo < i and blo < j:
                queue.append((alo, i, blo, j))
                possible += min(i - alo, j - blo)
            if i + k < ahi and j + k < bhi:
                queue.append((i + k, ahi, j + k, bhi))
                possible += min(ahi - i - k, bhi - j - k)
        if 2.0 * possible / (la + lb) < thresh:
            return False
    return 2.0 * matched / (la + lb) >= thresh


def similarity_clusters(graph: AnchorGraph, thresh: float) -> np.ndarray:
    """GiGPO's similarity mode: a cluster id per anchor node ``[N]``.

    Within each group, nodes in first-occurrence order join the **first** cluster whose
    representative (its first member) has ``difflib.SequenceMatcher(None, obs, rep).ratio()
    ≥ thresh`` (verl-agent's ``are_similar(obs, rep)``; the order matters, ``ratio()`` is not
    symmetric); otherwise they open a new cluster. Representatives never change. Nodes
    stand for their steps: a repeated text meets the same earlier representatives, so it
    lands where its first occurrence did. Ids are global and in first-occurrence order.

    The comparisons go through `similar` (the same decisions as ``ratio()``), whose work is
    counted against `similarity_budget`: past it, `EstimatorInputError` before the work is done.
    """
    from collections import Counter

    if not 0.0 < thresh < 1.0:
        raise EstimatorInputError(f"similarity_thresh must lie strictly in (0, 1), got {thresh}")
    texts = [str(o) for o in graph.node_anchor_obs]
    out = np.empty(graph.num_nodes, dtype=np.int64)
    next_id = 0
    work = _Work(similarity_budget(), graph)
    for g in range(graph.num_groups):
        work.group = g
        reps: list[tuple[int, str, Counter]] = []
        for n in range(int(graph.group_node_offsets[g]), int(graph.group_node_offsets[g + 1])):
            work.charge(len(texts[n]) + 1)
            counts = Counter(texts[n])
            for cid, rep, rep_counts in reps:
                # verl-agent's are_similar(obs, rep): ratio() is not symmetric.
                if similar(texts[n], rep, thresh, counts, rep_counts, work):
                    out[n] = cid
                    break
            else:
                reps.append((next_id, texts[n], counts))
                out[n] = next_id
                next_id += 1
    return out


def step_groups(graph: AnchorGraph, similarity: bool, thresh: float) -> tuple[np.ndarray, int]:
    """Anchor-state group of every step ``[S]`` and the number of groups."""
    if not similarity:
        return graph.step_node, graph.num_nodes
    node_cluster = similarity_clusters(graph, thresh)
    num = int(node_cluster.max()) + 1 if node_cluster.size else 0
    return node_cluster[graph.step_node], num


def episode_advantage(graph: AnchorGraph, mode: str, stats: str, eps: float, outcome: str) -> np.ndarray:
    """A^E per trajectory ``[T]`` through `group_advantage` in GiGPO's mode."""
    if mode not in ("mean_norm", "mean_std_norm"):
        raise EstimatorInputError(f"mode must be 'mean_norm' or 'mean_std_norm', got {mode!r}")
    return group_advantage(
        graph, norm="mean" if mode == "mean_norm" else "std", ddof=1, eps=eps, stats=stats, outcome=outcome
    )


# ---------------------------------------------------------------- the estimator


def _gigpo(graph: AnchorGraph, p: GiGPOParams, *, to=as_numpy) -> CreditResult:
    """GiGPO: episode advantage plus the z-scored discounted return within anchor-state groups.

        A^E_i     = (R_i − mean) / F_norm                       (Eq. 3; stats as §1)
        R_{i,t}   = r_{i,t} + γ · R_{i,t+1}                      (Eq. 5)
        G^S(s̃)    = {(i,t) : s_{i,t} = s̃}  within the episode group (Eq. 6)
        A^S_{i,t} = (R_{i,t} − mean_{G^S}) / F_norm_{G^S}        (Eq. 7; singleton → 0)
        A_{i,t}   = A^E_i + ω · A^S_{i,t}                        (Eq. 8)

    F_norm = 1 in ``mean_norm`` and std + eps (unbiased std) in ``mean_std_norm``; the same
    mode applies to both levels.

    Paper: Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training",
    arXiv 2505.10978, Eqs. 3 and 5–8; verl-agent ``gigpo/core_gigpo.py``.

    Args:
        graph: anchor graph; steps ``[S]`` are grouped by anchor node (or similarity cluster).
        p: the checked `GiGPOParams` (`gigpo` takes its fields as keywords).
        to: the converter of the graph's arrays (`crbc_viz.ops.xp`): numpy here, tensors on a
            device in the torch row, which runs this same function.

    Returns:
        `CreditResult` ``[S]``: value = mean of R over the step's anchor group (the baseline),
        q_value = R_{i,t}, credit = A^S, advantage = A^E + ω·A^S; ``node_value [N]`` = the
        per-anchor mean return (exact mode).

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`GiGPOParams`).
        EstimatorInputError: unknown mode, or a similarity threshold outside (0, 1).

    Notes:
        Every visit is a member of its anchor group (no first-visit rule), so self-loops
        and revisits count repeatedly. A singleton group gets A^S = 0 in both modes.
        Truncated episodes are failures (R = 0). The invalid-action penalty of verl-agent
        (0.1 on that row only) is not applied: the outcome here is the success indicator
        unless ``outcome='return'``.

    >>> from crbc_viz import load_rollouts, build_graph
    >>> g = build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl"))
    >>> r = gigpo(g, mode="mean_std_norm", episode_stats="trajectory")
    >>> [round(float(x), 4) for x in r.advantage[:3]]
    [1.8183, 1.732, 1.4434]
    """
    b = graph.batch
    # A^E is O(trajectories): computed in numpy, then moved.
    a_ep = to(episode_advantage(graph, p.mode, p.episode_stats, p.eps, p.outcome)[b.step_traj])
    r = to(step_rewards(graph, p.step_reward, p.outcome))
    xp = namespace(r)
    R = discounted_returns(graph, r, p.gamma)  # Eq. 5
    seg_np, num = step_groups(graph, p.similarity, p.similarity_thresh)  # Eq. 6
    seg = to(seg_np)
    a_step, mean, _, cnt = segment_zscore(
        R,
        seg,
        num,
        ddof=1,
        eps=p.eps,  # Eq. 7
        scale=(p.mode == "mean_std_norm"),
        magnitude=discounted_returns(graph, xp.abs(r), p.gamma),  # R's round-off: Σγ^k·|r|
        terms=to(group_steps(graph)[b.step_group]),
    )
    node_value = None if p.similarity else mean
    single = xp.astype(cnt[seg] < 2, xp.float64)
    return CreditResult(
        "gigpo",
        p,
        graph,
        mean[seg],
        R,
        a_step,
        a_ep + p.omega * a_step,  # Eq. 8
        node_value=node_value,
        diagnostics={
            "singleton_fraction": float(xp.mean(single)) if len(seg_np) else 0.0,
            "num_step_groups": int(xp.sum(cnt > 0)),
        },
    )


gigpo = register(
    EstimatorSpec(
        name="gigpo",
        title="GiGPO — Group-in-Group Policy Optimization",
        paper="Feng et al., Group-in-Group Policy Optimization for LLM Agent Training (arXiv 2505.10978)",
        equation="R_t = r_t + γR_{t+1};  A^S = (R_t − mean_{G^S})/F_norm;  A = A^E + ω·A^S  (Eqs. 3, 5–8)",
        section="§2",
        kernel=_gigpo,
        params_cls=GiGPOParams,
    )
)
