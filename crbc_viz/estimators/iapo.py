"""IAPO — Influence-Aware Policy Optimization (ESTIMATORS.md §12)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import EstimatorInputError
from ..graph import AnchorGraph
from ..ops.advantage import group_advantage
from ..ops.segments import roundoff_tol
from ..ops.signals import is_missing, require_columns, shown, step_location
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["IAPOParams", "iapo", "influence_weights"]

_SUPPORT = {"support", "input", "success_utilization"}
_FAILED = {"failed", "failed_utilization"}


@dataclass(frozen=True)
class IAPOParams:
    beta_pos: float = param(
        0.05, "β₊ of the positive-rollout penalty exp(−β₊·ψ⁻) on error features", low=0.0, high=10.0
    )
    clip: float = param(
        0.25, "clip c of the standardised features z ∈ [−c, c]", low=0.0, high=10.0, low_open=True
    )
    eps: float = param(1e-6, "added to the length-weighted std of the features", low=0.0, high=1.0)
    ddof: int = param(
        1, "std degrees of freedom of the base advantage Â_τ (unstated; verl's unbiased std)", low=0, high=1
    )
    adv_eps: float = param(1e-6, "added to the std of the base advantage Â_τ", low=0.0, high=1.0)


def _length_standardized_exp(phi: np.ndarray, L: np.ndarray, c: float, eps: float) -> np.ndarray:
    """m_i = exp(clip(z_i, −c, c)) / ((1/L)·Σ_j L_j·exp(clip(z_j, −c, c)))   (Eqs. 3–4)."""
    tot = L.sum()
    mean = np.dot(L, phi) / tot
    sigma = math.sqrt(np.dot(L, (phi - mean) ** 2) / tot)
    if sigma == 0 or phi.max() - phi.min() <= roundoff_tol(float(np.abs(phi).max()), len(phi)):
        return np.ones_like(phi)  # constant features: the uniform fallback w ≡ 1 (§12.2), eps = 0 too
    ez = np.exp(np.clip((phi - mean) / (sigma + eps), -c, c))
    return ez / (np.dot(L, ez) / tot)


def influence_weights(
    L,
    support_edges,
    failed_edges,
    is_error,
    direct_inputs,
    *,
    beta_pos: float = IAPOParams.beta_pos,
    clip: float = IAPOParams.clip,
    eps: float = IAPOParams.eps,
):
    """One rollout's features and weights.

    Args:
        L: token lengths ``[T]``; support_edges / failed_edges: sets of (i, j) with i < j
            (0-based action indices); is_error ``[T]``; direct_inputs ``[T]``.

    Returns:
        dict with ``phi_pos, phi_neg, m_pos, m_neg, w_pos, w_neg`` (each ``[T]``).
    """
    L = np.asarray(L, dtype=np.float64)
    T = len(L)
    d_pos = np.zeros(T)
    d_neg = np.zeros(T)
    d_in = np.asarray(direct_inputs, dtype=np.float64).copy()
    for i, j in support_edges:
        d_pos[i] += 1
        d_in[j] += 1
    for i, _ in failed_edges:
        d_neg[i] += 1
    e = np.asarray(is_error, dtype=np.float64)
    phi_pos = np.log1p(d_pos + d_in)  # Eq. 3
    phi_neg = np.log1p(e * (1.0 + d_neg + d_in))
    m_pos = _length_standardized_exp(phi_pos, L, clip, eps)  # Eq. 4
    m_neg = _length_standardized_exp(phi_neg, L, clip, eps)
    psi = phi_neg - np.dot(L, phi_neg) / L.sum()
    num = m_pos * np.exp(-beta_pos * psi)
    w_pos = L.sum() * num / np.dot(L, num)  # Eq. 5
    return {
        "phi_pos": phi_pos,
        "phi_neg": phi_neg,
        "m_pos": m_pos,
        "m_neg": m_neg,
        "w_pos": w_pos,
        "w_neg": m_neg,
    }  # Eq. 6: w⁻ = m⁻


def _read_rollout(graph: AnchorGraph, lo: int, hi: int, cols: dict):
    """Validated signals of the rollout on step rows [lo, hi)."""
    T = hi - lo
    L = np.empty(T)
    err = np.zeros(T, dtype=bool)
    direct = np.zeros(T)
    sup: set[tuple[int, int]] = set()
    fail: set[tuple[int, int]] = set()
    for k, s in enumerate(range(lo, hi)):
        n = cols["num_tokens"][s]
        if (
            is_missing(n)
            or isinstance(n, (bool, np.bool_))
            or not isinstance(n, (int, float, np.integer, np.floating))
            or not float(n).is_integer()
            or n < 1
        ):
            raise EstimatorInputError(
                f"iapo: field 'num_tokens' must be an integer >= 1, got {shown(n)} at {step_location(graph, s)}"
            )
        L[k] = float(n)
        v = cols["is_error"][s]
        if not isinstance(v, (bool, np.bool_)) and not (isinstance(v, (int, np.integer)) and v in (0, 1)):
            raise EstimatorInputError(
                f"iapo: field 'is_error' must be true/false, got {shown(v)} at {step_location(graph, s)}"
            )
        err[k] = bool(v)
        if cols["direct_inputs"] is not None:
            u = cols["direct_inputs"][s]
            if not is_missing(u):
                if (
                    isinstance(u, (bool, np.bool_))
                    or not isinstance(u, (int, float, np.integer, np.floating))
                    or not float(u).is_integer()
                    or u < 0
                ):
                    raise EstimatorInputError(
                        f"iapo: field 'direct_inputs' must be an integer >= 0, got {shown(u)} at {step_location(graph, s)}"
                    )
                direct[k] = float(u)
        edges = cols["influence_edges"][s]
        if is_missing(edges):
            edges = []
        if isinstance(edges, np.ndarray):
            edges = edges.tolist()
        if not isinstance(edges, (list, tuple)):
            raise EstimatorInputError(
                f"iapo: field 'influence_edges' must be a list, got {shown(edges)} at {step_location(graph, s)}"
            )
        for ed in edges:
            if not isinstance(ed, dict) or "to" not in ed or "type" not in ed:
                raise EstimatorInputError(
                    f"iapo: field 'influence_edges' items must be {{'to', 'type'}} "
                    f"objects, got {shown(ed)} at {step_location(graph, s)}"
                )
            to, typ = ed["to"], str(ed["type"]).strip().lower()
            if (
                isinstance(to, (bool, np.bool_))
                or not isinstance(to, (int, np.integer))
                or not k < int(to) < T
            ):
                raise EstimatorInputError(
                    f"iapo: field 'influence_edges' target {shown(to)} must be a later "
                    f"step_idx of the same rollout ({k + 1}..{T - 1}) at {step_location(graph, s)}"
                )
            if typ in _SUPPORT:
                sup.add((k, int(to)))
            elif typ in _FAILED:
                fail.add((k, int(to)))
            else:
                raise EstimatorInputError(
                    f"iapo: field 'influence_edges' type {shown(ed['type'])} must be "
                    f"'support' or 'failed' at {step_location(graph, s)}"
                )
    for i, _ in fail:
        if not err[i]:
            raise EstimatorInputError(
                f"iapo: field 'is_error' must be true at an action with a failed-use edge "
                f"(d⁻ > 0 implies e = 1), got {shown(cols['is_error'][lo + i])} at "
                f"{step_location(graph, lo + i)}"
            )
    return L, sup, fail, err, direct


def _iapo(graph: AnchorGraph, p: IAPOParams) -> CreditResult:
    """IAPO: route the rollout's advantage to its actions by their influence-graph features.

        Â_τ    = (R − μ_G) / (σ_G + eps)                                     (Eq. 2)
        d⁺_i = #{j : i →⁺ j},  d⁻_i = #{j : i →⁻ j},  d^in_i = u^dir_i + #{k : k →⁺ i}
        φ⁺_i = log(1 + d⁺_i + d^in_i);   φ⁻_i = log(1 + e_i·(1 + d⁻_i + d^in_i))  (Eq. 3)
        z_i  = (φ_i − φ̄)/(σ + eps) with L-weighted φ̄, σ;
        m_i  = exp(clip(z_i, −c, c)) / ((1/L)·Σ_j L_j·exp(clip(z_j, −c, c)))   (Eq. 4)
        w⁺_i = L·m⁺_i·exp(−β₊ψ⁻_i) / Σ_j L_j·m⁺_j·exp(−β₊ψ⁻_j),  ψ⁻ = φ⁻ − L-weighted mean (Eq. 5)
        w⁻_i = m⁻_i                                                            (Eq. 6)
        A_{i,l} = Â_τ · w_i   (w⁺ when Â_τ > 0, w⁻ when Â_τ < 0, 0 when Â_τ = 0)  (Eq. 7)

    Paper: Ren et al., "IAPO: Influence-Aware Policy Optimization for Credit Assignment in
    Multi-Turn Service Agents", arXiv 2608.24588, Eqs. 2–7 (main text; Eq. 4 printed with
    a doubled exp, a typo).

    Args:
        graph: anchor graph; steps ``[S]`` (the rollout's assistant actions) carry
            ``influence_edges`` (``[{"to": step_idx, "type": "support" | "failed"}]``; the
            paper's "input" / "success_utilization" / "failed_utilization" are accepted),
            ``is_error``, ``num_tokens`` and optionally ``direct_inputs``.
        p: the checked `IAPOParams` (`iapo` takes its fields as keywords).

    Returns:
        `CreditResult` ``[S]``: value = q_value = NaN, credit = w_i (the routing weight; 1
        where Â_τ = 0), advantage = Â_τ·w_i.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`IAPOParams`).
        MissingSignalError: ``influence_edges``, ``is_error`` or ``num_tokens`` is not logged.
        EstimatorInputError: a bad value, an edge to a non-later step, an unknown edge type, or a
            failed-use edge from an action without ``is_error`` (naming group / traj / step).

    Notes:
        Duplicate edges count once. A row without ``influence_edges`` has none; without
        ``direct_inputs``, 0. Guarantees: Σ_i L_i·w_i = L (mass conservation), the sign of
        Â_τ is kept (w > 0), constant features give w ≡ 1. The projected negative branch
        of the appendix was not available; w⁻ = m⁻ as in the main text.

    >>> w = influence_weights([10, 20, 10, 20], {(0, 1), (0, 3), (1, 3)}, {(2, 3)},
    ...                       [0, 0, 1, 0], [1, 0, 0, 0])
    >>> [round(float(x), 4) for x in w["w_pos"]]
    [1.0764, 1.0764, 0.618, 1.0764]
    """
    beta_pos, clip, eps, ddof, adv_eps = p.beta_pos, p.clip, p.eps, p.ddof, p.adv_eps
    require_columns(graph, "iapo", ["influence_edges", "is_error", "num_tokens"])
    b = graph.batch
    steps = b.steps
    cols = {f: steps[f].to_numpy(dtype=object) for f in ("influence_edges", "is_error", "num_tokens")}
    cols["direct_inputs"] = (
        steps["direct_inputs"].to_numpy(dtype=object) if "direct_inputs" in steps.columns else None
    )
    a_tau = group_advantage(graph, ddof=ddof, eps=adv_eps)  # Eq. 2
    credit = np.ones(b.num_steps)
    for i, (lo, hi) in enumerate(zip(b.traj_offsets[:-1], b.traj_offsets[1:])):
        L, sup, fail, err, direct = _read_rollout(graph, int(lo), int(hi), cols)
        if a_tau[i] == 0:
            continue
        w = influence_weights(L, sup, fail, err, direct, beta_pos=beta_pos, clip=clip, eps=eps)
        credit[lo:hi] = w["w_pos"] if a_tau[i] > 0 else w["w_neg"]
    adv = a_tau[b.step_traj] * credit  # Eq. 7
    nan = np.full(b.num_steps, np.nan)
    return CreditResult("iapo", p, graph, nan, nan.copy(), credit, adv)


iapo = register(
    EstimatorSpec(
        name="iapo",
        title="IAPO — Influence-Aware Policy Optimization",
        paper="Ren et al., IAPO: Influence-Aware Policy Optimization for Credit Assignment in "
        "Multi-Turn Service Agents (arXiv 2608.24588)",
        equation="φ⁺ = log(1 + d⁺ + d^in), φ⁻ = log(1 + e(1 + d⁻ + d^in));  m = L-normalised "
        "exp(clip z);  A_i = Â_τ·w_i  (Eqs. 2–7)",
        section="§12",
        kernel=_iapo,
        params_cls=IAPOParams,
        requires=("influence_edges", "is_error", "num_tokens"),
    )
)
