"""RTMC — Rollout-Tree Monte Carlo step credit (ESTIMATORS.md §7)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import AnchorGraph
from ..ops.returns import group_steps, trajectory_outcome
from ..ops.segments import no_spread, segment_stats
from ..ops.xp import as_numpy, copy, namespace, seg_sum
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["RTMCParams", "rtmc", "first_visit_mask"]


@dataclass(frozen=True)
class RTMCParams:
    gamma: float = param(0.99, "per-turn discount γ of the first-visit return γ^(T−1−t)·R", low=0.0, high=1.0)
    n_prior: float = param(
        2.0,
        "prior pseudo-count of the smoothed state value V′ (paper Eq. 11 per the port; 0 = no smoothing)",
        low=0.0,
        high=1000.0,
    )
    normalize: bool = param(
        False,
        "divide every A in a group by the group's population std of A "
        "(no centering; only when the std > norm_eps and the A do not agree within round-off)",
    )
    norm_eps: float = param(1e-8, "minimum group std for the optional normalisation", low=0.0, high=1.0)
    outcome: str = param(
        "success", "R: the success indicator or the logged episode return", choices=("success", "return")
    )


def first_visit_mask(graph: AnchorGraph) -> np.ndarray:
    """True at the first occurrence of each (state, action) pair within its rollout ``[S]``."""
    b = graph.batch
    key = b.step_traj.astype(np.int64) * max(len(graph.pair_node), 1) + graph.step_pair
    _, first = np.unique(key, return_index=True)
    mask = np.zeros(b.num_steps, dtype=bool)
    mask[first] = True
    return mask


def _rtmc(graph: AnchorGraph, p: RTMCParams, *, to=as_numpy) -> CreditResult:
    """RTMC: first-visit Monte Carlo Q per (state, action), minus a prior-smoothed V.

        n(s,a) += 1;  sum(s,a) += γ^(T−1−t) · R     (first visit of (s,a) in each rollout, 0-indexed t)
        Q(s,a)  = sum(s,a) / n(s,a)
        V̂(s)    = Σ_a sum(s,a) / Σ_a n(s,a)
        V′(s)   = (n_s · V̂(s) + n_prior · v_prior) / (n_s + n_prior),  n_s = Σ_a n(s,a)  (Eq. 11)
        A(s,a)  = Q(s,a) − V′(s)

    v_prior is the group's mean outcome (its success rate).

    Paper: Wang, Zheng, Xu, "RTMC: Step-Level Credit Assignment via Rollout Trees",
    arXiv 2604.11037, Eq. 11 (read through a third-party port, [C3]).

    Args:
        graph: anchor graph; anchors are the state signatures and actions the action
            signatures ``[S]``.
        p: the checked `RTMCParams` (`rtmc` takes its fields as keywords).
        to: the converter of the graph's arrays (`crbc_viz.ops.xp`): numpy here, tensors on a
            device in the torch row, which runs this same function.

    Returns:
        `CreditResult` ``[S]``: value = V′(s_t), q_value = Q(s_t, a_t), credit = A,
        advantage = A (divided by the group's population std of A with ``normalize``; RTMC
        has no separate trajectory term); ``node_value [N]`` = V′, ``pair_q [P]``,
        ``pair_credit [P]``.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`RTMCParams`).

    Notes:
        Later visits of a pair within one rollout reuse its Q. A singleton state is pulled
        towards v_prior, so a lone action still gets credit (unlike GiGPO). The port's
        signature coarsening is a property of the anchors, not of this function.

    >>> from crbc_viz import load_rollouts, build_graph
    >>> r = rtmc(build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl")))
    >>> [round(float(x), 4) for x in r.credit[:3]]
    [-0.0001, 0.1633, 0.4]
    """
    gamma, n_prior, normalize, norm_eps, outcome = p.gamma, p.n_prior, p.normalize, p.norm_eps, p.outcome
    b = graph.batch
    P, N, G = len(graph.pair_node), graph.num_nodes, b.num_groups
    R = to(trajectory_outcome(graph, outcome))
    xp = namespace(R)
    traj, pair, pair_node = to(b.step_traj), to(graph.step_pair), to(graph.pair_node)
    steps_left = to(b.traj_len[b.step_traj] - 1 - b.step_pos)
    ret = gamma ** xp.astype(steps_left, xp.float64) * R[traj]
    first = to(first_visit_mask(graph))
    n_pair = seg_sum(xp.ones_like(ret[first]), pair[first], P)
    s_pair = seg_sum(ret[first], pair[first], P)
    q = s_pair / xp.clip(n_pair, min=1)
    n_s = seg_sum(n_pair, pair_node, N)
    s_s = seg_sum(s_pair, pair_node, N)
    tg = to(b.traj_group)
    v_prior = (seg_sum(R, tg, G) / xp.clip(seg_sum(xp.ones_like(R), tg, G), min=1))[to(graph.node_group)]
    v = (s_s + n_prior * v_prior) / xp.clip(n_s + n_prior, min=1e-300)  # Eq. 11
    pair_adv = q - v[pair_node]
    a = pair_adv[pair]
    adv = copy(a)
    node = to(graph.step_node)
    if normalize:
        sg = to(b.step_group)
        _, _, std = segment_stats(a, sg, G, ddof=0)  # population std, not centred
        # A group whose A agree within round-off (of the Q and V′ they subtract) has std 0.
        flat = no_spread(
            a, sg, G, magnitude=xp.abs(q[pair]) + xp.abs(v[node]), terms=to(group_steps(graph)[b.step_group])
        )
        ok = (std > norm_eps) & ~flat
        adv = xp.where(ok[sg], a / xp.where(ok, std, 1.0)[sg], a)
    single = xp.astype(n_s[node] < 2, xp.float64)
    return CreditResult(
        "rtmc",
        p,
        graph,
        v[node],
        q[pair],
        a,
        adv,
        node_value=v,
        pair_q=q,
        pair_credit=pair_adv,
        diagnostics={"singleton_state_fraction": float(xp.mean(single)) if b.num_steps else 0.0},
    )


rtmc = register(
    EstimatorSpec(
        name="rtmc",
        title="RTMC — Rollout-Tree Monte Carlo",
        paper="Wang, Zheng, Xu, RTMC: Step-Level Credit Assignment via Rollout Trees (arXiv 2604.11037)",
        equation="Q = first-visit mean of γ^(T−1−t)R;  V′ = (n_s V̂ + n_prior v_prior)/(n_s + n_prior);  "
        "A = Q − V′  (Eq. 11)",
        section="§7",
        kernel=_rtmc,
        params_cls=RTMCParams,
    )
)
