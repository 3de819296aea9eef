"""Cached pipeline steps, keyed by (file digest, group, estimator, parameters, backend).

Heavy objects (batches, graphs, results) are immutable and live in ``st.cache_resource``
(no pickling per rerun); small tables live in ``st.cache_data``. An estimator that cannot run
returns its message as a string instead of raising, so a page can show it in place of that
estimator's column (and the outcome is cached like a result).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from .. import build_graph, load_rollouts, score
from ..estimators import registry
from ..estimators.crbc import crbc as crbc_fn
from ..estimators.crbc import depth_bound
from ..summary import batch_summary, group_table
from ..views.compare import agreement_by_group
from .files import file_digest

__all__ = ["digest_of", "load_batch", "full_graph", "group_graph", "score_group", "score_full",
           "overview", "depth_sweep", "depth_refusal", "all_estimators", "params_key", "run_label",
           "DEPTH_MAX_PAIRS"]


def params_key(params: dict) -> tuple:
    """A hashable, order-free cache key for a parameter dict."""
    return tuple(sorted(params.items()))


def run_label(error: BaseException) -> str:
    """The message shown in place of an estimator that could not run."""
    if isinstance(error, registry.MissingSignalError):
        return str(error)
    return f"{type(error).__name__}: {error}"


@st.cache_data(max_entries=64, show_spinner=False)
def digest_of(path: str, mtime_ns: int, size: int) -> str:
    """SHA-256 of a file, recomputed only when its mtime or size changes."""
    return file_digest(path)


@st.cache_resource(max_entries=8, show_spinner=False)
def load_batch(digest: str, _path: str):
    return load_rollouts(_path)


@st.cache_resource(max_entries=8, show_spinner=False)
def full_graph(digest: str, _path: str):
    return build_graph(load_batch(digest, _path))


@st.cache_resource(max_entries=128, show_spinner=False)
def group_graph(digest: str, _path: str, group: int):
    """The one-group graph of group ``group`` (its nodes are group 0 of the result)."""
    return build_graph(load_batch(digest, _path).select_groups([group]))


def _score(graph, estimator: str, params: tuple, backend: str):
    try:
        return score(graph, estimator, backend=backend, **dict(params))
    except Exception as e:  # shown in place of the estimator's output, never as a traceback
        return run_label(e)


@st.cache_resource(max_entries=512, show_spinner=False)
def score_group(digest: str, _path: str, group: int, estimator: str, params: tuple,
                backend: str = "auto"):
    """`CreditResult` of ``estimator`` on the one-group graph, or the reason it could not run."""
    return _score(group_graph(digest, _path, group), estimator, params, backend)


@st.cache_resource(max_entries=64, show_spinner=False)
def score_full(digest: str, _path: str, estimator: str, params: tuple, backend: str = "auto"):
    """`CreditResult` of ``estimator`` on the whole batch, or the reason it could not run."""
    return _score(full_graph(digest, _path), estimator, params, backend)


@st.cache_data(max_entries=16, show_spinner=False)
def overview(digest: str, _path: str, a: str, a_params: tuple, b: str, b_params: tuple,
             backend: str = "auto") -> tuple[dict, pd.DataFrame]:
    """Batch summary and the group table with the disagreement 1 − Spearman(a, b) per group."""
    graph = full_graph(digest, _path)
    summary = batch_summary(graph)
    table = group_table(graph)
    table.insert(0, "group", graph.batch.group_labels())
    ra, rb = score_full(digest, _path, a, a_params, backend), score_full(digest, _path, b, b_params, backend)
    if isinstance(ra, str) or isinstance(rb, str):
        table["disagreement"] = np.nan
        table["sign_agreement"] = np.nan
    else:
        agr = agreement_by_group(graph.batch.step_group, ra.credit, rb.credit, graph.batch.num_groups)
        table["disagreement"] = agr["disagreement"].to_numpy()
        table["sign_agreement"] = agr["sign_agreement"].to_numpy()
    return summary, table


#: The depth family is refused above this many (anchor, action) pairs in one group: its
#: closure solve and 31 backups would not fit one page view.
DEPTH_MAX_PAIRS = 200_000


def depth_refusal(digest: str, _path: str, group: int) -> str | None:
    """Why the depth family is not computed for this group (None when it is)."""
    graph = group_graph(digest, _path, group)
    n = int(graph.pair_node.shape[0])
    if n > DEPTH_MAX_PAIRS:
        return (f"this group has {n:,} (anchor, action) pairs; the depth family is computed up to "
                f"{DEPTH_MAX_PAIRS:,} per page view (use `crbc-viz score --estimator crbc --param "
                f"depth=K` for one K)")
    return None


@st.cache_resource(max_entries=2048, show_spinner=False)
def _depth_member(digest: str, _path: str, group: int, crbc_params: tuple, depth: float):
    """One member A^(K) of the depth family (K = ∞: the closure solve)."""
    p = {k: v for k, v in dict(crbc_params).items() if k != "depth"}
    return crbc_fn(group_graph(digest, _path, group), **p, depth=depth)


def depth_sweep(digest: str, _path: str, group: int, crbc_params: tuple, kmax: int = 30,
                _progress=None) -> dict:
    """The finite-depth family on one group: A^(K)(s,a) = Q^(K) − V^(K) for K = 0..kmax, the
    closure A^∞, the observed gap ‖A^∞ − A^(K)‖∞ and the Corollary-3 bound.

    The closure is solved once; each finite K is a few sparse backups (no solve); the bound
    2β^K/(1−β)·‖TV⁰ − V⁰‖∞ is computed once for K = 0 and scaled by β^K. ``_progress(f, text)``
    is called as the work advances. Each member is cached, so a rerun only reassembles.
    """
    graph = group_graph(digest, _path, group)
    p = {k: v for k, v in dict(crbc_params).items() if k != "depth"}
    beta = float(p.get("beta", 0.98))
    say = _progress or (lambda f, text: None)

    def adv(r):
        return r.pair_q - r.node_value[graph.pair_node]

    say(0.0, "solving the closure (K = ∞) …")
    inf = _depth_member(digest, _path, group, crbc_params, math.inf)
    depths = list(range(kmax + 1))
    runs = []
    for k in depths:
        runs.append(_depth_member(digest, _path, group, crbc_params, k))
        say((k + 1) / (kmax + 2), f"backing up K = {k} of {kmax} …")
    A = np.stack([adv(r) for r in runs]) if graph.pair_node.size else np.zeros((kmax + 1, 0))
    A_inf = adv(inf)
    err = np.max(np.abs(A - A_inf[None, :]), axis=1) if A.shape[1] else np.zeros(kmax + 1)
    b0 = _bound0(digest, _path, group, beta)
    bound = np.array([b0 * beta ** k if math.isfinite(b0) else math.inf for k in depths])
    lo = int(graph.group_node_offsets[0])
    labels = [f"s{int(graph.pair_node[j]) - lo} · {graph.action_names[graph.pair_action[j]]}"
              for j in range(graph.pair_node.shape[0])]
    credit = np.stack([r.pair_credit for r in runs]) if graph.pair_node.size else A
    say(1.0, "done")
    return {"depths": depths, "A": A, "A_inf": A_inf, "err": err, "bound": bound, "labels": labels,
            "pair_count": graph.pair_count.copy(), "credit": credit, "credit_inf": inf.pair_credit,
            "pair_node": (graph.pair_node - lo).copy()}


@st.cache_data(max_entries=64, show_spinner=False)
def _bound0(digest: str, _path: str, group: int, beta: float) -> float:
    return depth_bound(group_graph(digest, _path, group), beta, 0)


@st.cache_data(max_entries=32, show_spinner=False)
def all_estimators(digest: str, _path: str, group: int, params: tuple, backend: str,
                   column: str = "credit") -> tuple[pd.DataFrame, dict]:
    """Every registered estimator on one group: (step frame with one column per estimator
    that ran, {estimator: reason} for those that could not). ``params``: ((name, params key),
    …) for every estimator."""
    from ..views.trajectories import step_frame

    graph = group_graph(digest, _path, group)
    results, failed = {}, {}
    for name, pk in params:
        r = score_group(digest, _path, group, name, pk, backend)
        if isinstance(r, str):
            failed[name] = r
        else:
            results[name] = r
    return step_frame(graph, results, group=0, column=column), failed


@st.cache_data(max_entries=64, show_spinner=False)
def graph_page(digest: str, _path: str, group: int, estimator: str, params: tuple, backend: str,
               highlight_traj: int | None, max_nodes: int, show_labels: bool | None,
               height_px: int, selected_node: int | None = None, focus: bool = False,
               params_text: str = "") -> tuple[str, int, int]:
    """(pyvis HTML, anchors drawn, anchors in the group) for the Graph page. ``focus``: only
    the highlighted rollout's anchors and their one-step neighbourhood, laid out by the
    rollout's steps (large groups)."""
    from ..views.graph_view import graph_html, neighbourhood, select_nodes, trajectory_path

    graph = group_graph(digest, _path, group)
    res = score_group(digest, _path, group, estimator, params, backend)
    res = None if isinstance(res, str) else res
    keep = list(trajectory_path(graph, highlight_traj)[1]) if highlight_traj is not None else []
    if selected_node is not None:
        keep.append(int(selected_node))
    if focus and keep:
        nodes = neighbourhood(graph, keep)
    else:
        nodes = select_nodes(graph, 0, max_nodes, keep=keep)
    page = graph_html(graph, res, group=0, highlight_traj=highlight_traj, nodes=nodes,
                      height_px=height_px, show_action_labels=show_labels, estimator=estimator,
                      selected_node=selected_node, params_text=params_text,
                      graph_key=f"{digest[:12]}:{group}",
                      by_step=bool(focus and highlight_traj is not None))
    return page, int(nodes.size), int(graph.num_nodes)
