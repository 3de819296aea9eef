"""Cached pipeline steps, keyed by (file digest, group, estimator, parameters, backend).

Heavy objects (batches, graphs, results) are immutable and live in ``st.cache_resource``
(no pickling per rerun); small tables live in ``st.cache_data``. An estimator that cannot run
returns its message as a string instead of raising, so a page can show it in place of that
estimator's column (and the outcome is cached like a result).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from ..analysis.agreement import agreement_by_group
from ..analysis.depth import depth_bound, depth_family
from ..analysis.matching import group_matching, matching_summary
from ..analysis.summary import batch_summary, group_table
from ..analysis.trends import store_trends as _store_trends
from ..api import REFUSALS, load_engine, score
from ..errors import CrbcVizError
from ..estimators.crbc import CRBCParams
from ..estimators.crbc import crbc as crbc_fn
from ..graph import build_graph
from ..views.anchor_rules import preview as _rule_preview
from ..views.anchor_rules import rule_of, split_digest
from . import sandbox, sources
from .files import file_digest

__all__ = [
    "engine_loading",
    "digest_of",
    "source_digest",
    "load_batch",
    "store_trends",
    "full_graph",
    "group_graph",
    "score_group",
    "score_full",
    "overview",
    "matching",
    "group_matching_row",
    "depth_sweep",
    "depth_refusal",
    "all_estimators",
    "params_key",
    "run_label",
    "DEPTH_MAX_PAIRS",
    "PROXMO_MAX_PAIRS",
    "work_refusal",
    "verification",
    "anchor_preview",
]


def params_key(params: dict) -> tuple:
    """A hashable, order-free cache key for a parameter dict."""
    return tuple(sorted(params.items()))


def run_label(error: BaseException) -> str:
    """The message shown in place of an estimator that could not run: a refusal of its input
    (`crbc_viz.api.REFUSALS`: the field and the group / traj / step) as its own message."""
    if isinstance(error, REFUSALS):
        return str(error)
    return f"{type(error).__name__}: {error}"


@st.cache_data(max_entries=64, show_spinner=False)
def digest_of(path: str, mtime_ns: int, size: int) -> str:
    """SHA-256 of a file, recomputed only when its mtime or size changes."""
    return file_digest(path)


def source_digest(src: sources.Source) -> str:
    """The content key of a source: a file's (or folder's) SHA-256, recomputed only when its
    stamp changes, with `sources.Source.read_tag` (how its bytes are read); or a store group's
    label with the store's fingerprint."""
    if src.is_store:
        return f"{src.key}@{src.stamp[0]}"
    return f"{digest_of(src.file or src.key, *src.stamp)}-{src.read_tag}"


@st.cache_resource(show_spinner=False)
def engine_loading():
    """The server scores again and again: it loads the compiled engine once per process, in a
    background thread (`crbc_viz.api.load_engine`, ~0.4 s from numba's cache), so ``auto`` runs
    it from then on without the first page waiting for it."""
    import threading

    t = threading.Thread(target=load_engine, name="crbc-viz-engine-load", daemon=True)
    t.start()
    return t


@st.cache_resource(max_entries=8, show_spinner=False)
def _load_outcome(digest: str, _path: str):
    """The batch of a source, or the error that refused it: a refusal is cached like a batch,
    so a file that crashes, exhausts or outlasts its reader is read once, not on every rerun."""
    try:
        return sandbox.open_batch(_path)
    except CrbcVizError as e:
        return e


def load_batch(digest: str, _path: str):
    """The batch of a `sources.Source.key` (a file path or a store group), read once per
    content digest; uploads and server paths in a limited child process (`sandbox`). A digest
    that names an anchor rule (`crbc_viz.views.anchor_rules.ruled_digest`: the Graph page's
    anchor panel) gives the source's batch keyed by that rule.

    Raises:
        CrbcVizError: the file's `LoadError` (a `ParseAbortedError` when its reader died or ran
            out of memory or time), or a store's `StoreError`.
    """
    if split_digest(digest)[1] is not None:
        return _ruled_batch(digest, _path)
    outcome = _load_outcome(digest, _path)
    if isinstance(outcome, CrbcVizError):
        raise outcome.with_traceback(None)
    return outcome


@st.cache_resource(max_entries=8, show_spinner=False)
def _ruled_batch(digest: str, _path: str):
    """The batch of a `crbc_viz.views.anchor_rules.ruled_digest`: the source's batch re-keyed
    by the rule (`crbc_viz.anchor_merge.apply_rule`, as the command line keys it)."""
    from ..anchor_merge import apply_rule

    base, spec = split_digest(digest)
    return apply_rule(load_batch(base, _path), rule_of(spec))


@st.cache_data(max_entries=32, show_spinner=False)
def anchor_preview(digest: str, _path: str, spec_json: str) -> dict:
    """The anchor panel's preview of a rule (`crbc_viz.views.anchor_rules.preview`: the
    numbers of ``crbc-viz info --anchor-rule``) on the source's whole batch, or
    ``{"error": one line}`` for a rule that cannot be applied."""
    import json

    try:
        return _rule_preview(load_batch(digest, _path), json.loads(spec_json))
    except CrbcVizError as e:
        return {"error": str(e)}


@st.cache_data(show_spinner="Computing trends over the store …", max_entries=8)
def store_trends(store_dir: str, fingerprint: str, run: str | None = None):
    """``(steps, groups)`` trend tables of a log store (see `crbc_viz.analysis.trends`)."""
    tr = _store_trends(sources.LogStore(store_dir), run=run)
    return tr.steps, tr.groups


@st.cache_resource(max_entries=8, show_spinner=False)
def full_graph(digest: str, _path: str):
    return build_graph(load_batch(digest, _path))


@st.cache_resource(max_entries=128, show_spinner=False)
def group_graph(digest: str, _path: str, group: int):
    """The one-group graph of group ``group`` (its nodes are group 0 of the result)."""
    return build_graph(load_batch(digest, _path).select_groups([group]))


#: ProxMO is computed in a page view up to this many text pairs (``$CRBC_VIZ_PROXMO_MAX_PAIRS``):
#: its softmax compares every two distinct step texts of a group (`similarity_pairs`), so a
#: group of 10,000 texts that share words takes ~3 s, one of 100,000 minutes.
PROXMO_MAX_PAIRS = 100_000_000
ENV_PROXMO_MAX_PAIRS = "CRBC_VIZ_PROXMO_MAX_PAIRS"


def work_refusal(graph, estimator: str) -> str | None:
    """Why ``estimator`` is not run on ``graph`` in a page view (None when it is): ProxMO past
    `PROXMO_MAX_PAIRS` text pairs; the shared server would spend minutes on one request."""
    if estimator != "proxmo":
        return None
    from ..estimators.proxmo import similarity_pairs
    from ..io._guards import count_setting

    limit = count_setting(ENV_PROXMO_MAX_PAIRS, PROXMO_MAX_PAIRS)
    pairs, g, texts = similarity_pairs(graph)
    if pairs <= limit:
        return None
    return (
        f"ProxMO compares every two distinct step texts of a group: {pairs:,} pairs here (group "
        f"'{graph.batch.group_label(g)}' has {texts:,} distinct texts); a page view computes up "
        f"to {limit:,} (crbc-viz score --estimator proxmo computes it; or raise ${ENV_PROXMO_MAX_PAIRS})"
    )


def _score(graph, estimator: str, params: tuple, backend: str):
    try:
        refused = work_refusal(graph, estimator)
        if refused is not None:
            return refused
        return score(graph, estimator, backend=backend, **dict(params))
    except Exception as e:  # shown in place of the estimator's output, never as a traceback
        return run_label(e)


@st.cache_resource(max_entries=512, show_spinner=False)
def score_group(digest: str, _path: str, group: int, estimator: str, params: tuple, backend: str = "auto"):
    """`CreditResult` of ``estimator`` on the one-group graph, or the reason it could not run."""
    return _score(group_graph(digest, _path, group), estimator, params, backend)


@st.cache_resource(max_entries=64, show_spinner=False)
def score_full(digest: str, _path: str, estimator: str, params: tuple, backend: str = "auto"):
    """`CreditResult` of ``estimator`` on the whole batch, or the reason it could not run."""
    return _score(full_graph(digest, _path), estimator, params, backend)


@st.cache_data(max_entries=16, show_spinner=False)
def overview(
    digest: str, _path: str, a: str, a_params: tuple, b: str, b_params: tuple, backend: str = "auto"
) -> tuple[dict, pd.DataFrame]:
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


@st.cache_resource(max_entries=8, show_spinner=False)
def verification(digest: str, _path: str):
    """The trainer's logged advantage against its estimator recomputed on the same rollouts
    (`crbc_viz.analysis.verify`), as ``(Verification, what it reproduces)``; None when the data
    carries no logged advantage; the reason as a string when it cannot be recomputed (no known
    convention for the format, or the estimator refuses the input)."""
    from ..analysis.verify import CONVENTIONS, NoAdvantageError, compare, default_plan, logged_advantage

    batch = load_batch(digest, _path)
    try:
        logged_advantage(batch)
    except NoAdvantageError:
        return None
    how = sandbox.read_as(batch)
    fmt = how.fmt if how is not None else "canonical"
    try:
        name, params, what = default_plan(fmt, batch)
        v = compare(batch, name, params)
    except CrbcVizError as e:
        return run_label(e)
    c = CONVENTIONS.get(fmt)
    if c is not None and c.caveat and c.estimator == name:
        v.notes.append(c.caveat)
    return v, what


@st.cache_data(max_entries=16, show_spinner=False)
def matching(digest: str, _path: str) -> tuple[dict, pd.DataFrame]:
    """The file's matching diagnostics (`crbc_viz.analysis.matching.matching_summary`, with the
    importer's per-file counts) and one row per group (`group_matching`)."""
    graph = full_graph(digest, _path)
    how = sandbox.read_as(graph.batch)
    counts = dict(getattr(how, "counts", ()) or ())
    return matching_summary(graph, counts), group_matching(graph)


def group_matching_row(digest: str, _path: str, group: int) -> dict:
    """Group ``group``'s row of `matching` (counts, ``reason``, ``sentence``), with the
    importer's per-file counts."""
    summary, table = matching(digest, _path)
    row = table.iloc[int(group)].to_dict()
    for k in ("reason", "sentence"):  # None, never a NaN a frame may have put there
        row[k] = row[k] if isinstance(row[k], str) else None
    for k in ("copies_dropped", "copies_suspected"):
        if k in summary:
            row[k] = summary[k]
    return row


#: The depth family is refused above this many (anchor, action) pairs in one group: its
#: closure solve and 31 backups would not fit one page view.
DEPTH_MAX_PAIRS = 200_000


def depth_refusal(digest: str, _path: str, group: int) -> str | None:
    """Why the depth family is not computed for this group (None when it is)."""
    graph = group_graph(digest, _path, group)
    n = int(graph.pair_node.shape[0])
    if n > DEPTH_MAX_PAIRS:
        return (
            f"this group has {n:,} (anchor, action) pairs; the depth family is computed up to "
            f"{DEPTH_MAX_PAIRS:,} per page view (use `crbc-viz score --estimator crbc --param "
            f"depth=K` for one K)"
        )
    return None


@st.cache_resource(max_entries=2048, show_spinner=False)
def _depth_member(digest: str, _path: str, group: int, crbc_params: tuple, depth: float):
    """One member A^(K) of the depth family (K = ∞: the closure solve)."""
    p = {k: v for k, v in dict(crbc_params).items() if k != "depth"}
    return crbc_fn(group_graph(digest, _path, group), **p, depth=depth)


def depth_sweep(
    digest: str, _path: str, group: int, crbc_params: tuple, kmax: int = 30, _progress=None
) -> dict:
    """`crbc_viz.analysis.depth.depth_family` on one group (K = 0..kmax and ∞, the observed gap
    and the bound on its gap to the closure, 2β^K/(1−β)·‖TV⁰ − V⁰‖∞), with each member and the K = 0 bound cached, so a rerun only
    reassembles; plus the pairs' labels, counts and group-local nodes for the Compare page.
    ``_progress(f, text)`` is called as the work advances."""
    graph = group_graph(digest, _path, group)
    beta = float(dict(crbc_params).get("beta", CRBCParams.beta))
    fam = depth_family(
        graph,
        beta,
        kmax,
        member=lambda k: _depth_member(digest, _path, group, crbc_params, k),
        bound0=_bound0(digest, _path, group, beta),
        progress=_progress,
    )
    lo = int(graph.group_node_offsets[0])
    labels = [
        f"s{int(graph.pair_node[j]) - lo} · {graph.action_names[graph.pair_action[j]]}"
        for j in range(graph.pair_node.shape[0])
    ]
    return {
        **fam,
        "labels": labels,
        "pair_count": graph.pair_count.copy(),
        "pair_node": (graph.pair_node - lo).copy(),
    }


@st.cache_data(max_entries=64, show_spinner=False)
def _bound0(digest: str, _path: str, group: int, beta: float) -> float:
    return depth_bound(group_graph(digest, _path, group), beta, 0)


@st.cache_data(max_entries=32, show_spinner=False)
def all_estimators(
    digest: str, _path: str, group: int, params: tuple, backend: str, column: str = "credit"
) -> tuple[pd.DataFrame, dict]:
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


@st.cache_resource(max_entries=64, show_spinner=False)
def edge_why(
    digest: str, _path: str, group: int, estimator: str, params: tuple, backend: str, edge_id: str
) -> str | None:
    """The Graph page's "Why this number" panel of the clicked edge ``edge_id`` on the group's
    ``estimator`` result (`crbc_viz.views.why.edge_explanation`), built once per edge, not on
    every rerun while the panel stays open."""
    from ..views.why import edge_explanation

    graph = group_graph(digest, _path, group)
    return edge_explanation(graph, score_group(digest, _path, group, estimator, params, backend), edge_id)


@st.cache_data(max_entries=64, show_spinner=False)
def graph_page(
    digest: str,
    _path: str,
    group: int,
    estimator: str,
    params: tuple,
    backend: str,
    *,
    highlight_traj: int | None,
    max_nodes: int,
    show_labels: bool | None,
    height_px: int,
    selected_node: int | None = None,
    focus: bool = False,
    params_text: str = "",
    opened: tuple = (),
    min_label_px: float,
    mark_opened: bool = False,
    fit_canvas: bool = False,
) -> tuple[str, int, int, str]:
    """(pyvis HTML, anchors drawn, anchors in the group, what the summary leaves out) for the
    Graph page. ``focus``: only the highlighted rollout's anchors and their one-step
    neighbourhood, laid out by the rollout's steps (large groups); otherwise a group above
    ``max_nodes`` anchors is summarised (`crbc_viz.views.layout.summarise`), with the clusters
    in ``opened`` (their first depths, in click order) drawn further, the last click's anchors
    ringed with ``mark_opened``. ``min_label_px``: the smallest label on screen at the first
    fit; ``fit_canvas``: the canvas takes the drawing's shape (both:
    `crbc_viz.views.graph_view.graph_drawing`)."""
    from ..views.graph_values import trajectory_path
    from ..views.graph_view import graph_drawing
    from ..views.layout import neighbourhood

    graph = group_graph(digest, _path, group)
    res = score_group(digest, _path, group, estimator, params, backend)
    res = None if isinstance(res, str) else res
    keep = list(trajectory_path(graph, highlight_traj)[1]) if highlight_traj is not None else []
    if selected_node is not None:
        keep.append(int(selected_node))
    common = {
        "group": 0,
        "highlight_traj": highlight_traj,
        "height_px": height_px,
        "show_action_labels": show_labels,
        "estimator": estimator,
        "selected_node": selected_node,
        "params_text": params_text,
        "graph_key": f"{digest[:12]}:{group}",
        "min_label_px": min_label_px,
        "why_on_click": True,  # the page adds the clicked edge's panel (views.why.edge_explanation)
        "fit_canvas": fit_canvas,
    }
    if focus and keep:
        drawing = graph_drawing(
            graph, res, nodes=neighbourhood(graph, keep), by_step=highlight_traj is not None, **common
        )
    else:
        drawing = graph_drawing(
            graph,
            res,
            max_nodes=max_nodes,
            keep=keep,
            opened=tuple(opened),
            mark_opened=mark_opened,
            **common,
        )
    return drawing.html, len(drawing.summary.anchors), int(graph.num_nodes), drawing.note


# ---------------------------------------------------------------- the Learn page's steps
#: A Learn-page graph is keyed by ``(dataset, rare-route sizes, flipped ids, dropped ids)``.
LEARN_GRAPH_HEIGHT = 520
#: The depth slider of lesson 4 runs K = 0 … LEARN_KMAX, then ∞.
LEARN_KMAX = 20


@st.cache_data(max_entries=32, show_spinner=False)
def learn_rows(dataset: str, rr: tuple = ()) -> list[dict]:
    """The rows of a teaching data set: ``toy``, ``sokoban``, ``rare_route`` (sizes ``rr``) or
    ``group``: a group of a loaded log, ``rr`` = (content digest, source key, group index)."""
    from .. import teaching as T

    if dataset == "group":
        digest, path, group = rr
        return T.group_rows(load_batch(digest, path), int(group))
    if dataset == "toy":
        return T.read_rows(T.TOY_PATH)
    if dataset == "sokoban":
        return T.sokoban_rows()
    if dataset == "rare_route":
        return T.rare_route_rows(*rr)
    raise ValueError(f"unknown teaching data set {dataset!r}")


def learn_viewed_group(file_ref: str | None, group_label: str | None) -> dict | None:
    """The group a link's ``file`` and ``group`` name (the default sample and its first group
    when absent), for the Learn page's "this group": ``{"rr": (digest, source key, group
    index), "label", "name"}`` (``name``: the link's reference, which the code blocks load;
    never a server path the page does not show), or None when it does not load."""
    from .files import default_sample

    ref = file_ref or default_sample()
    if not ref:
        return None
    try:
        src = sources.resolve(ref)
        digest = source_digest(src)
        batch = load_batch(digest, src.key)
    except (ValueError, OSError, CrbcVizError):
        return None
    labels = batch.group_labels()
    label = group_label or (labels[0] if labels else None)
    if label not in labels:
        return None
    return {"rr": (digest, src.key, labels.index(label)), "label": label, "name": ref}


@st.cache_data(max_entries=64, show_spinner=False)
def learn_edited_rows(key: tuple) -> list[dict]:
    """The rows of ``key`` = (data set, sizes, flips, drops[, added rollouts]) with its outcome
    flips, dropped rollouts and added rollouts (`teaching.added_rollout`) applied."""
    from .. import teaching as T

    dataset, rr, flip, drop, *add = key
    return T.apply_edits(learn_rows(dataset, rr), flip=flip, drop=drop, add=add[0] if add else ())


@st.cache_resource(max_entries=64, show_spinner=False)
def learn_graph(key: tuple):
    from .. import teaching as T

    return build_graph(T.batch_from_rows(learn_edited_rows(key)))


@st.cache_resource(max_entries=512, show_spinner=False)
def learn_result(key: tuple, name: str, params: tuple = ()):
    return score(learn_graph(key), name, backend="numpy", **dict(params))


@st.cache_data(max_entries=64, show_spinner=False)
def learn_changes(key: tuple, beta: float, gamma: float | None) -> list[dict]:
    """Every registered estimator's step credit on ``key``'s edited group at discounts ``beta`` /
    ``gamma`` against the group as logged at each one's default discount: per estimator
    ``{"name", "label", "discount", "change"}`` (`views.learn_changes.largest_change`, None
    when nothing moved) or ``{"name", "label", "missing"}`` (it needs fields the group lacks)."""
    from ..estimators import registry
    from ..views import learn_changes as LC

    base = (*key[:2], (), (), ())
    g0, g1 = learn_graph(base), learn_graph(key)
    out = []
    for name in registry.names():
        row = {"name": name, "label": LC.estimator_label(name)}
        try:
            before = LC.credit_by_step(g0, learn_result(base, name))
            after = learn_result(key, name, LC.discount_params(name, beta, gamma))
        except CrbcVizError as e:  # an estimator that needs logged fields this group lacks
            out.append(row | {"missing": str(e)})
            continue
        row["discount"] = LC.discount_text(name, beta, gamma)
        row["change"] = LC.largest_change(before, LC.credit_by_step(g1, after))
        out.append(row)
    return out


@st.cache_data(max_entries=64, show_spinner=False)
def learn_family(key: tuple, beta: float) -> dict:
    """The depth family K = 0 … `LEARN_KMAX` and ∞ of ``key``'s graph (each member the cached
    `learn_result` of crbc at that depth)."""
    return depth_family(
        learn_graph(key),
        beta,
        LEARN_KMAX,
        member=lambda k: learn_result(key, "crbc", (("beta", beta), ("depth", float(k)))),
    )


@st.cache_data(max_entries=64, show_spinner=False)
def learn_graph_page(
    key: tuple, name: str, params: tuple, highlight: int | None, filename: str, label: str
) -> str:
    """The pyvis page of ``key``'s graph coloured by ``name``, its PNG / SVG export named ``filename``."""
    from ..views.graph_view import graph_html
    from ..views.learn import with_png_button

    page = graph_html(
        learn_graph(key),
        learn_result(key, name, params),
        highlight_traj=highlight,
        height_px=LEARN_GRAPH_HEIGHT,
        estimator=label,
    )
    return with_png_button(page, filename)
