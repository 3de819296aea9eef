"""TRCA — Transition-wise Rubric Credit Assignment (ESTIMATORS.md §11)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EstimatorInputError
from ..graph import AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.returns import discounted_returns, group_steps
from ..ops.segments import segment_zscore
from ..ops.signals import is_missing, require_columns, shown, step_location
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["TRCAParams", "trca", "rubric_rewards", "CATEGORIES"]

CATEGORIES = ("evidence", "execution", "invalidity")


@dataclass(frozen=True)
class TRCAParams:
    lam: float = param(
        0.8, "mix λ of r^TRCA = (1 − λ)·r^F + λ·r^B (λ = 1 drops ALFWorld 92.0 → 88.3)", low=0.0, high=1.0
    )
    gamma: float = param(0.95, "discount γ of the completion-aware return", low=0.0, high=1.0)
    r_evidence: float = param(
        1.0, "category magnitude r^c of Evidence items ([I]; not given)", low=0.0, high=100.0
    )
    r_execution: float = param(
        1.0, "category magnitude r^c of Execution items ([I]; not given)", low=0.0, high=100.0
    )
    r_invalidity: float = param(
        1.0, "category magnitude |r^c| of Invalidity items ([I]; not given)", low=0.0, high=100.0
    )
    ddof: int = param(
        1, "std degrees of freedom of the context-group z-score ([I]; not given)", low=0, high=1
    )
    eps: float = param(1e-6, "added to the std of the context-group z-score", low=0.0, high=1.0)
    w_step: float = param(1.0, "weight of A^S in A = A^E + w_step·A^S", low=0.0, high=100.0)


def _as_list(v, field, graph, s):
    if is_missing(v):
        return []
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise EstimatorInputError(
            f"trca: field '{field}' must be a list, got {shown(v)} at {step_location(graph, s)}"
        )
    return list(v)


def _group_rubrics(graph: AnchorGraph) -> list[dict[str, str]]:
    """Per group: rubric item id → category (lower-case), checked and consistent."""
    b = graph.batch
    col = b.steps["rubric"].to_numpy(dtype=object)
    out: list[dict[str, str] | None] = [None] * b.num_groups
    sg = b.step_group
    for s, v in enumerate(col):
        if is_missing(v):
            continue
        items = _as_list(v, "rubric", graph, s)
        rub: dict[str, str] = {}
        for it in items:
            if not isinstance(it, dict) or "id" not in it or "category" not in it:
                raise EstimatorInputError(
                    f"trca: field 'rubric' items must be {{'id', 'category'}} objects, "
                    f"got {shown(it)} at {step_location(graph, s)}"
                )
            cat = str(it["category"]).strip().lower()
            if cat not in CATEGORIES:
                raise EstimatorInputError(
                    f"trca: field 'rubric' item {shown(it['id'])} has category "
                    f"{shown(it['category'])}; expected one of {', '.join(CATEGORIES)} at "
                    f"{step_location(graph, s)}"
                )
            rub[str(it["id"])] = cat
        g = int(sg[s])
        if out[g] is None:
            out[g] = rub
        elif out[g] != rub:
            raise EstimatorInputError(
                f"trca: field 'rubric' differs between rows of one group at {step_location(graph, s)}"
            )
    for g, rub in enumerate(out):
        if rub is None:
            raise EstimatorInputError(
                f"trca: field 'rubric' is absent from every row of group "
                f"'{b.group_label(g)}' (it must be on at least one row)"
            )
    return out  # type: ignore[return-value]


def rubric_rewards(
    graph: AnchorGraph,
    *,
    lam: float = TRCAParams.lam,
    r_evidence: float = TRCAParams.r_evidence,
    r_execution: float = TRCAParams.r_execution,
    r_invalidity: float = TRCAParams.r_invalidity,
):
    """``(r^F [S], r^B [S], r^TRCA [S])`` from ``rubric`` and ``rubric_active``."""
    require_columns(graph, "trca", ["rubric_active", "rubric"])
    b = graph.batch
    rubrics = _group_rubrics(graph)
    mag = {"evidence": r_evidence, "execution": r_execution, "invalidity": -abs(r_invalidity)}
    item_w = []  # per group: id → signed r^c / M_c
    for rub in rubrics:
        M = {c: sum(1 for v in rub.values() if v == c) for c in CATEGORIES}
        item_w.append({j: mag[c] / M[c] for j, c in rub.items()})
    active = b.steps["rubric_active"].to_numpy(dtype=object)
    rF = np.zeros(b.num_steps)
    rB = np.zeros(b.num_steps)
    for t, (lo, hi) in enumerate(zip(b.traj_offsets[:-1], b.traj_offsets[1:])):
        g = int(b.traj_group[t])
        rub, w = rubrics[g], item_w[g]
        covered: set[str] = set()
        for s in range(lo, hi):
            ids = {str(j) for j in _as_list(active[s], "rubric_active", graph, s)}
            unknown = sorted(ids - rub.keys())
            if unknown:
                raise EstimatorInputError(
                    f"trca: field 'rubric_active' names item(s) {shown(unknown)} that are not "
                    f"in the group's rubric at {step_location(graph, s)}"
                )
            rF[s] = sum(w[j] for j in ids)  # r^F
            new = {j for j in ids if rub[j] != "invalidity"} - covered
            rB[s] = sum(w[j] for j in new)  # r^B = Φ_t − Φ_{t−1}: first coverage
            covered |= new
    return rF, rB, (1.0 - lam) * rF + lam * rB


def _trca(graph: AnchorGraph, p: TRCAParams) -> CreditResult:
    """TRCA: rule-activated rubric rewards with first-coverage shaping, z-scored per context.

        q_{t,j}  = +r^c/M_c (Evidence, Execution active), −|r^c|/M_c (Invalidity active), else 0
        r^F_t    = Σ_j q_{t,j}
        Φ_t      = Σ_{c∈{Ev,Ex}} (r^c/M_c) · Σ_j max_{u≤t} O_{u,j},   Φ_{−1} = 0
        r^B_t    = Φ_t − Φ_{t−1}                      (pays only for first coverage)
        r^TRCA_t = (1 − λ)·r^F_t + λ·r^B_t
        R_{i,t}  = Σ_{k≥t} γ^(k−t) · (r_{i,k} + r^TRCA_{i,k})
        A^S      = z-score of R_{i,t} in its comparable-context group (< 2 members or no
                   spread → 0);   A = A^E + A^S

    Paper: Zhang et al., "TRCA: Transition-wise Rubric Credit Assignment for Long-horizon
    LLM Agents", arXiv 2608.16156 (read through a note with equations, [S]).

    Args:
        graph: anchor graph; steps ``[S]`` carry ``rubric_active`` (a list of item ids) and
            at least one row per group carries ``rubric`` (``[{"id", "category"}]``).
        p: the checked `TRCAParams` (`trca` takes its fields as keywords).

    Returns:
        `CreditResult` ``[S]``: value = the context group's mean of R, q_value = R_{i,t},
        credit = A^S, advantage = A^E + w_step·A^S; diagnostics ``mean_rubric_reward``.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`TRCAParams`).
        MissingSignalError: no ``rubric_active`` or no ``rubric`` column.
        EstimatorInputError: a malformed rubric, an unknown category, rubrics that differ within a
            group, or an active id not in the rubric (naming group / traj / step).

    Notes:
        The comparable-context key is the step's anchor. A row without ``rubric_active``
        has no active item. r is the logged per-step environment reward; A^E is GRPO's
        group advantage on the success indicator.

    >>> from crbc_viz import load_rollouts, build_graph
    >>> g = build_graph(load_rollouts("sample_rollouts/search/search_signals.jsonl"))
    >>> r = trca(g)
    >>> bool(np.all(r.advantage == r.credit + group_advantage(g)[g.batch.step_traj]))
    True
    """
    lam, gamma, r_evidence, r_execution, r_invalidity, ddof, eps, w_step = (
        p.lam,
        p.gamma,
        p.r_evidence,
        p.r_execution,
        p.r_invalidity,
        p.ddof,
        p.eps,
        p.w_step,
    )
    _, _, r_trca = rubric_rewards(
        graph, lam=lam, r_evidence=r_evidence, r_execution=r_execution, r_invalidity=r_invalidity
    )
    b = graph.batch
    env = b.steps["reward"].to_numpy(dtype=np.float64)
    R = discounted_returns(graph, env + r_trca, gamma)
    a_s, mean, _, _ = segment_zscore(
        R,
        graph.step_node,
        graph.num_nodes,
        ddof=ddof,
        eps=eps,
        magnitude=discounted_returns(graph, np.abs(env) + np.abs(r_trca), gamma),  # R's round-off
        terms=group_steps(graph)[b.step_group],
    )
    a_e = group_advantage(graph)[b.step_traj]
    return CreditResult(
        "trca",
        p,
        graph,
        mean[graph.step_node],
        R,
        a_s,
        a_e + w_step * a_s,
        node_value=mean,
        diagnostics={"mean_rubric_reward": float(np.mean(r_trca)) if len(R) else 0.0},
    )


trca = register(
    EstimatorSpec(
        name="trca",
        title="TRCA — Transition-wise Rubric Credit Assignment",
        paper="Zhang et al., TRCA: Transition-wise Rubric Credit Assignment for Long-horizon LLM Agents "
        "(arXiv 2608.16156)",
        equation="r^TRCA = (1−λ)r^F + λ(Φ_t − Φ_{t−1});  R_t = Σγ^(k−t)(r_k + r^TRCA_k);  "
        "A = A^E + z_ctx(R_t)",
        section="§11",
        kernel=_trca,
        params_cls=TRCAParams,
        requires=("rubric_active", "rubric"),
    )
)
