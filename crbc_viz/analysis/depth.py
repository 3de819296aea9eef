"""The finite-depth CRBC family A^(K) = Q^(K) − V^(K), K = 0 … kmax, next to the closure A^∞,
the observed gap ‖A^∞ − A^(K)‖∞ and the guaranteed ceiling on that gap, 2β^K/(1−β)·‖TV⁰ − V⁰‖∞
(Corollary 3 of the CRBC paper: after K backups no (anchor, action) advantage is further from
the closure's than 2β^K/(1−β) times the largest change of any anchor's value in the first backup)
— one copy, used by the Compare page's depth section and the Learn page's lesson 4.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..estimators.crbc import CRBCParams, depth_bound
from ..estimators.crbc import crbc as crbc_fn
from ..graph import AnchorGraph

__all__ = ["depth_family", "depth_bound", "anchor_spread"]


def depth_family(
    graph: AnchorGraph,
    beta: float = CRBCParams.beta,
    kmax: int = 20,
    *,
    params: dict | None = None,
    member: Callable[[float], object] | None = None,
    bound0: float | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> dict:
    """The depth family on ``graph``.

    ``params``: the other CRBC parameters (``depth`` and ``beta`` are ignored there);
    ``member(K)``: the `CreditResult` of CRBC at depth K (K = ``math.inf``: the closure) — a
    caller may cache members this way; by default computed here. ``bound0``: the bound at K = 0
    if the caller already has it (the bound at K is ``bound0 · β^K``, so it is computed once).
    ``progress(fraction, text)`` is called as the work advances.

    Returns:
        ``depths [K+1]``; ``node_value [K+1, N]`` = V^(K); ``pair_adv [K+1, P]`` = A^(K);
        ``credit [K+1, P]`` = the pair credit at K; ``node_value_inf [N]``, ``pair_adv_inf [P]``,
        ``credit_inf [P]`` (the closure); ``err [K+1]`` = ‖A^∞ − A^(K)‖∞ over pairs (0 without
        pairs); ``bound [K+1]`` (∞ for β ≥ 1); ``beta``.
    """
    p = {k: v for k, v in (params or {}).items() if k not in ("depth", "beta")}
    run = member or (lambda depth: crbc_fn(graph, beta=beta, depth=depth, **p))
    say = progress or (lambda f, text: None)
    P = int(graph.pair_node.shape[0])

    def adv(r):
        return r.pair_q - r.node_value[graph.pair_node]

    say(0.0, "solving the closure (K = ∞) …")
    inf = run(math.inf)
    depths = list(range(kmax + 1))
    runs = []
    for k in depths:
        runs.append(run(k))
        say((k + 1) / (kmax + 2), f"backing up K = {k} of {kmax} …")
    A = np.stack([adv(r) for r in runs]) if P else np.zeros((kmax + 1, 0))
    A_inf = adv(inf)
    err = np.max(np.abs(A - A_inf[None, :]), axis=1) if P else np.zeros(kmax + 1)
    b0 = depth_bound(graph, beta, 0) if bound0 is None else bound0
    bound = np.array([b0 * beta**k if math.isfinite(b0) else math.inf for k in depths])
    credit = np.stack([r.pair_credit for r in runs]) if P else np.zeros((kmax + 1, 0))
    say(1.0, "done")
    return {
        "depths": depths,
        "node_value": np.stack([r.node_value for r in runs]),
        "pair_adv": A,
        "credit": credit,
        "node_value_inf": inf.node_value,
        "pair_adv_inf": A_inf,
        "credit_inf": inf.pair_credit,
        "err": err,
        "bound": bound,
        "beta": beta,
    }


def anchor_spread(graph: AnchorGraph, result) -> dict:
    """Eq. 13's pieces from a closure-family result: per pair μ(a|s) = N(s,a)/N(s) and
    A = Q − V, and per anchor σ(s) = sqrt(Σ_a μ(a|s)·A²) (the scale A^S divides by, before
    the σ_min floor)."""
    A = result.pair_q - result.node_value[graph.pair_node]
    mu = graph.pair_count / graph.node_visits[graph.pair_node]
    sigma = np.sqrt(np.bincount(graph.pair_node, weights=mu * A**2, minlength=graph.num_nodes))
    return {"mu": mu, "adv": A, "sigma": sigma}
