"""ProxMO — Proximity-based Multi-turn Optimization (ESTIMATORS.md §16)."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..graph import AnchorGraph
from ..ops.advantage import row_advantage
from ..ops.returns import discounted_returns, group_steps, step_rewards, trajectory_outcome
from ..ops.segments import no_spread
from ..ops.signals import action_invalid
from ..result import CreditResult
from .registry import EstimatorSpec, param, register

__all__ = ["ProxMOParams", "proxmo", "tfidf_vectors", "psc_weight", "step_texts", "similarity_pairs"]

#: scikit-learn's default ``token_pattern`` (the authors' ``TfidfVectorizer(max_features=1024)``).
TOKEN = re.compile(r"(?u)\b\w\w+\b")


@dataclass(frozen=True)
class ProxMOParams:
    gamma: float = param(
        0.95,
        "discount γ of the step return R_{i,t} = r_{i,t} + γ·R_{i,t+1} (algorithm.gamma)",
        low=0.0,
        high=1.0,
    )
    temperature: float = param(
        0.1, "softmax temperature τ of the cosine similarities (step_soft_reward's default)", low=0.0, high=100.0,
        low_open=True,
    )  # fmt: skip
    max_features: int = param(1024, "TF-IDF vocabulary size (the most frequent terms)", low=1, high=1_000_000)
    norm_eps: float = param(
        1e-8, "added to each TF-IDF vector's L2 norm before the cosine (the code's 1e-8)", low=0.0, high=1.0
    )
    idf_scope: str = param(
        "group",
        "corpus the TF-IDF vocabulary and IDF are fitted on: 'group' = the prompt group's "
        "steps; 'batch' = every step of the graph (the authors fit one vectorizer per training "
        "batch: equal to 'batch' when the graph is one training batch)",
        choices=("group", "batch"),
    )
    omega: float = param(1.0, "weight ω of the step advantage (step_advantage_w)", low=0.0, high=100.0)
    psc: bool = param(
        True, "apply the success-rate-aware episode weight PSC (enable_psc; on in the shipped scripts)"
    )
    psc_alpha: float = param(
        4.0, "PSC steepness α (4.0 in the shipped scripts; code default 5.0)", low=0.0, high=100.0
    )
    psc_target_range: float = param(
        0.05,
        "PSC target range: β = range / (σ(1) − 0.5) (0.05 in the shipped scripts; 0.2 in the config)",
        low=0.0,
        high=10.0,
    )
    invalid_penalty: float = param(
        0.1,
        "subtracted from an invalid step's episode score and step return (logged "
        "is_action_valid = false; invalid_action_penalty_coef)",
        low=0.0,
        high=100.0,
    )
    step_reward: str = param(
        "env",
        "rewards of the step return: 'env' = the logged per-step rewards; 'outcome' = R_i on the last step only",
        choices=("env", "outcome"),
    )
    outcome: str = param(
        "success",
        "R_i of the episode term: success indicator or the logged episode return",
        choices=("success", "return"),
    )


def step_texts(graph: AnchorGraph) -> np.ndarray:
    """The anchor text of every step ``[S]`` (``str`` of the logged ``anchor_obs``, as the
    code's ``str(o)``; the anchor key where none was logged)."""
    b = graph.batch
    keys = graph.node_anchor_key[graph.step_node]
    if not b.has_step_column("anchor_obs"):
        return np.array([str(k) for k in keys], dtype=object)
    obs = b.steps["anchor_obs"].to_numpy(dtype=object)
    return np.array(
        [
            str(k) if (o is None or (isinstance(o, float) and math.isnan(o))) else str(o)
            for o, k in zip(obs, keys)
        ],
        dtype=object,
    )


def similarity_pairs(graph: AnchorGraph) -> tuple[int, int, int]:
    """What ProxMO's soft baseline compares: ``(pairs, group, texts)`` with ``pairs`` = Σ over
    groups of (distinct step texts)², the similarity entries its softmax reads (every one where
    the texts share common words), and the group with the most distinct ``texts``. The cost of
    `proxmo` grows with ``pairs``: ~10⁸ take a few seconds on one core."""
    b = graph.batch
    if b.num_steps == 0:
        return 0, 0, 0
    order = np.argsort(b.step_group, kind="stable")
    texts = step_texts(graph)[order]
    bounds = np.searchsorted(b.step_group[order], np.arange(b.num_groups + 1))
    distinct = np.array([len(set(texts[lo:hi].tolist())) for lo, hi in zip(bounds[:-1], bounds[1:])])
    g = int(np.argmax(distinct))
    return int(np.dot(distinct, distinct)), g, int(distinct[g])


def tfidf_vectors(docs: list[str], weights: np.ndarray, max_features: int):
    """scikit-learn ``TfidfVectorizer(max_features=...)`` defaults on a corpus of distinct
    documents each standing for ``weights[d]`` identical rows: lower-case, tokens
    ``\\b\\w\\w+\\b``, raw counts, the ``max_features`` terms of highest corpus count (the
    vocabulary sorted alphabetically, then ``(-counts).argsort()``, as sklearn cuts it),
    idf = ln((1 + n) / (1 + df)) + 1 over the n rows, rows L2-normalised. A sparse CSR
    matrix ``[D, V]``, or None where the corpus has no term (sklearn raises "empty
    vocabulary" there)."""
    from scipy import sparse

    counts = [Counter(TOKEN.findall(d.lower())) for d in docs]
    vocab = sorted(set().union(*counts))
    if not vocab:
        return None
    col = {t: j for j, t in enumerate(vocab)}
    rows = np.repeat(np.arange(len(docs)), [len(c) for c in counts])
    cols = np.fromiter((col[t] for c in counts for t in c), dtype=np.int64, count=len(rows))
    vals = np.fromiter((k for c in counts for k in c.values()), dtype=np.float64, count=len(rows))
    X = sparse.csr_matrix((vals, (rows, cols)), shape=(len(docs), len(vocab)))
    w = np.asarray(weights, dtype=np.float64)
    if len(vocab) > max_features:
        tfs = X.T @ w
        X = X[:, np.sort((-tfs).argsort()[:max_features])]
    n = w.sum()
    df = (X > 0).T.astype(np.float64) @ w
    X = sparse.csr_matrix(X.multiply(np.log((1.0 + n) / (1.0 + df)) + 1.0))
    norm = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sparse.csr_matrix(sparse.diags(1.0 / np.where(norm > 0, norm, 1.0)) @ X)


#: Rows of a group's similarity matrix computed at once, at most; and the similarity entries
#: held at once (rows per block = this ÷ the group's distinct texts), which bounds the memory
#: of a group of many distinct texts (~100 MB however large the group).
BLOCK = 1024
CELLS = 1 << 23


def _group_baseline(vec, R: np.ndarray, doc: np.ndarray, tau: float) -> np.ndarray:
    """The soft baseline of one group's steps: its distinct texts ``doc`` (rows of ``vec``),
    each weighing its step count.

    Row i of the softmax is exp((s_ij − M_i)/τ) with M_i the row's largest similarity; every
    pair of texts that share no term has s_ij = 0 and so the same weight c_i = exp(−M_i/τ).
    Hence, exactly, Σ_j e_ij·x_j = Σ_{j shares a term} (e_ij − c_i)·x_j + c_i·Σ_j x_j: only the
    pairs that share a term are visited (the sparse product), the rest is one sum per row. Rows
    where most pairs share a term take the dense softmax, which is cheaper there."""
    from scipy import sparse

    d, local = np.unique(doc, return_inverse=True)
    m = np.bincount(local, minlength=len(d)).astype(np.float64)
    r_sum = np.bincount(local, weights=R, minlength=len(d))
    both = np.stack([r_sum, m], axis=1)
    total = both.sum(axis=0)
    sub = vec[d]
    subT = sparse.csc_matrix(sub.T)
    out = np.empty(len(d))
    rows_at_once = max(1, min(BLOCK, CELLS // max(len(d), 1)))
    for lo in range(0, len(d), rows_at_once):
        S = sparse.csr_matrix(sub[lo : lo + rows_at_once] @ subT)
        if 4 * S.nnz > S.shape[0] * S.shape[1]:  # most pairs share a term: dense rows are cheaper
            logits = S.toarray() / tau
            acc = np.exp(logits - logits.max(axis=1, keepdims=True)) @ both
        else:
            top = np.maximum(S.max(axis=1).toarray().ravel(), 0.0)  # M_i: the zeros count too
            row = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
            c = np.exp(-top / tau)
            shared = sparse.csr_matrix(
                (np.exp((S.data - top[row]) / tau) - c[row], S.indices, S.indptr), shape=S.shape
            )
            acc = shared @ both + c[:, None] * total
        out[lo : lo + rows_at_once] = acc[:, 0] / acc[:, 1]
    return out[local]


def psc_weight(score: np.ndarray, p_rate: np.ndarray, alpha: float, target_range: float) -> np.ndarray:
    """PSC: w = 1 + β·(σ((1 − p)^α) − ½) where the row's score > ½, else 1 + β·(σ(−p^α) − ½),
    with β = target_range / (σ(1) − ½) and p the group's mean score clipped to [0, 1]."""

    def sig(x):
        return 1.0 / (1.0 + np.exp(-x))

    beta = target_range / (sig(1.0) - 0.5)
    p = np.clip(p_rate, 0.0, 1.0)
    return np.where(
        score > 0.5, 1.0 + beta * (sig((1.0 - p) ** alpha) - 0.5), 1.0 + beta * (sig(-(p**alpha)) - 0.5)
    )


def _soft_baseline(graph: AnchorGraph, R: np.ndarray, p: ProxMOParams) -> np.ndarray:
    """Σ_j softmax_j(cos(s_i, s_j) / τ) · R_j over the group's steps ``[S]``, per group on
    its distinct texts (a step's weight is its text's, times the text's count); zeros where
    the corpus has no term (the code's fallback)."""
    b = graph.batch
    texts = step_texts(graph)
    sg = b.step_group
    base = np.zeros(b.num_steps)
    scopes = [np.arange(b.num_steps)] if p.idf_scope == "batch" else None
    order = np.argsort(sg, kind="stable")
    bounds = np.searchsorted(sg[order], np.arange(b.num_groups + 1))
    groups = [order[bounds[g] : bounds[g + 1]] for g in range(b.num_groups)]
    for scope in scopes or groups:
        docs, doc_of = np.unique(texts[scope], return_inverse=True)
        mult = np.bincount(doc_of, minlength=len(docs)).astype(np.float64)
        vec = tfidf_vectors(list(docs), mult, p.max_features)
        if vec is None:
            continue  # base stays 0 and so does A^S (set below)
        from scipy import sparse

        norm = np.sqrt(np.asarray(vec.multiply(vec).sum(axis=1)).ravel()) + p.norm_eps
        vec = sparse.csr_matrix(sparse.diags(1.0 / np.where(norm > 0, norm, 1.0)) @ vec)  # 0 stays 0
        doc_all = np.empty(b.num_steps, dtype=np.int64)
        doc_all[scope] = doc_of
        for rows in groups if scopes else [scope]:
            base[rows] = _group_baseline(vec, R[rows], doc_all[rows], p.temperature)
    return base


def _empty_corpus(graph: AnchorGraph, p: ProxMOParams) -> np.ndarray:
    """Steps whose TF-IDF corpus has no term ``[S]`` (the code returns A^S = 0 there)."""
    b = graph.batch
    has = np.array([bool(TOKEN.search(t.lower())) for t in step_texts(graph)])
    if p.idf_scope == "batch":
        return np.full(b.num_steps, not has.any())
    return ~(np.bincount(b.step_group, weights=has, minlength=b.num_groups) > 0)[b.step_group]


def _proxmo(graph: AnchorGraph, p: ProxMOParams) -> CreditResult:
    """ProxMO: GiGPO's step return against a soft, similarity-weighted baseline.

        R_{i,t}   = r_{i,t} + γ·R_{i,t+1} − c·invalid_{i,t}
        v_i       = tfidf(anchor text of step i) / (‖·‖ + 1e-8)     (one vectorizer, max 1,024 terms)
        w_{ij}    = softmax_j(v_i·v_j / τ)   over the steps j of i's prompt group
        A^S_i     = R_i − Σ_j w_{ij} R_j
        A^E_{i,t} = (R_i − c·invalid_{i,t} − mean_{group rows}) · PSC(R_i, p)
        A         = A^E + ω·A^S

    PSC(R, p) = 1 + β(σ((1−p)^α) − ½) for R > ½, else 1 + β(σ(−p^α) − ½), β = range/(σ(1) − ½),
    p = the group's mean score clipped to [0, 1].

    Paper: "ProxMO: Proximity-Based Multi-Turn Optimization for LLM Agent Training",
    arXiv 2602.19225; code GithubX-F/ProxMO-RL at 496efa7, ``proxmo/core_proxmo.py``
    (``step_soft_reward``, ``episode_norm_reward``, ``compute_psc_weights``), mode
    ``soft_grouping``.

    Args:
        graph: anchor graph; every step's own ``anchor_obs`` text is a TF-IDF document.
        p: the checked `ProxMOParams` (`proxmo` takes its fields as keywords).

    Returns:
        `CreditResult` ``[S]``: value = the soft baseline, q_value = R_{i,t}, credit = A^S,
        advantage = A^E + ω·A^S.

    Raises:
        EstimatorInputError: a parameter outside its bounds or choices (`ProxMOParams`).
        EstimatorInputError: a logged ``is_action_valid`` that is not a boolean.

    Notes:
        The code builds one batch × batch similarity matrix masked to the prompt group; this
        computes each group's own (on its distinct texts, weighted by their counts), the same
        numbers. A group whose step returns agree within round-off gets A^S = 0; a corpus
        with no term of two word characters gets A^S = 0 (the code's fallback). A one-row
        group has mean 0 (A^E = its score). Without a logged ``is_action_valid`` no penalty
        applies. The episode statistics weigh rollouts by length (cross-steps). PSC reads
        its score as 0 / 1 (the code's comment): with ``outcome='return'`` on 0 / 10 rewards p
        clips to 1, as it does in the code. The authors fit one TF-IDF vectorizer on the whole
        training batch, so a group's vectors depend on the other groups there
        (``idf_scope='batch'``); the default fits each group on its own steps.

    >>> from crbc_viz import load_rollouts, build_graph
    >>> g = build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl"))
    >>> r = proxmo(g)
    >>> [round(float(x), 4) for x in r.credit[:3]]
    [0.4732, 0.475, 0.3334]
    """
    b = graph.batch
    invalid = action_invalid(graph, "proxmo")
    r = step_rewards(graph, p.step_reward, p.outcome)
    R = discounted_returns(graph, r, p.gamma) - p.invalid_penalty * invalid
    base = _soft_baseline(graph, R, p)
    a_step = R - base
    mag = discounted_returns(graph, np.abs(r), p.gamma) + p.invalid_penalty * invalid
    flat = no_spread(R, b.step_group, b.num_groups, magnitude=mag, terms=group_steps(graph)[b.step_group])
    a_step = np.where(flat[b.step_group] | _empty_corpus(graph, p), 0.0, a_step)
    score = trajectory_outcome(graph, p.outcome)[b.step_traj] - p.invalid_penalty * invalid
    a_ep = row_advantage(graph, score, False, 0.0)
    if p.psc:
        sg = b.step_group
        cnt = np.bincount(sg, minlength=b.num_groups)
        mean = np.bincount(sg, weights=score, minlength=b.num_groups) / np.maximum(cnt, 1)
        a_ep = a_ep * psc_weight(score, np.where(cnt > 1, mean, 0.0)[sg], p.psc_alpha, p.psc_target_range)
    return CreditResult(
        "proxmo",
        p,
        graph,
        base,
        R,
        a_step,
        a_ep + p.omega * a_step,
        diagnostics={"invalid_steps": int(invalid.sum())},
    )


proxmo = register(
    EstimatorSpec(
        name="proxmo",
        title="ProxMO — Proximity-based Multi-turn Optimization",
        paper="ProxMO: Proximity-Based Multi-Turn Optimization for LLM Agent Training (arXiv 2602.19225)",
        equation="A^S_i = R_i − Σ_j softmax_j(cos(tfidf_i, tfidf_j)/τ)·R_j;  A = A^E·PSC + ω·A^S",
        section="§16",
        kernel=_proxmo,
        params_cls=ProxMOParams,
    )
)
