"""The Learn page's "Try it" panel: flip a rollout's outcome, drop a rollout, add a rollout
through a chosen anchor, change the discounts β and γ — then every estimator's credit update,
with the step that changed most named. Edits apply to an in-memory copy of the group; the file
is untouched."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from .. import teaching as T
from ..views import learn_changes as LC
from . import pipeline, view
from .learn_widgets import table
from .text import md

__all__ = ["BETA", "BETAS", "GAMMAS", "beta_control", "gamma_control", "edits_of", "try_it"]

BETA = 0.98
#: The discounts β offered (β = 1 has no bound: lesson 4's bound needs β < 1).
BETAS = [0.8, 0.9, 0.95, 0.98, 0.99]
#: The discounts γ offered; "default" leaves each estimator its own.
GAMMAS = ["default", 0.8, 0.9, 0.95, 0.98, 0.99, 1.0]
_OUTCOMES = {"S": "SUCCESS", "F": "FAILURE"}


def beta_control(container=st) -> float:
    """The discount β of CRBC and visit-local (in the link as ``beta``)."""
    b = container.select_slider(
        "discount $\\beta$ (CRBC, visit-local)",
        BETAS,
        key=view.field("beta", BETA, decode=float, options=BETAS, allowed=", ".join(map(str, BETAS))),
        help="the discount of CRBC's and visit-local's returns: a success t steps before the "
        "end of a rollout counts βᵗ at that step (lessons 3 and 4 write it out)",
    )
    view.record("beta")
    return float(b)


def _decode_gamma(s: str):
    return "default" if s == "default" else float(s)


def gamma_control(container=st) -> float | None:
    """The discount γ of the other estimators that discount (GiGPO, RTMC, GRAFT, …); None:
    each one's default (in the link as ``gamma``)."""
    g = container.select_slider(
        "discount $\\gamma$ (GiGPO, RTMC, GRAFT, …)",
        GAMMAS,
        key=view.field(
            "gamma", "default", decode=_decode_gamma, options=GAMMAS, allowed="default, 0.8 … 1.0"
        ),
        help="the discount of the estimators that call it γ; “default”: each one's own",
    )
    view.record("gamma")
    return None if g == "default" else float(g)


# ---------------------------------------------------------------- the edit controls
def _held(dataset: str) -> str:
    """The session key of the flips of rollouts that are dropped now."""
    return f"_learn_flip_held_{dataset}"


def _keys(dataset: str) -> tuple[str, str, str]:
    return f"learn_flip_{dataset}", f"learn_drop_{dataset}", f"learn_add_{dataset}"


def _valid_add(ids: list[str]):
    def ok(specs) -> bool:
        try:
            return all(T.parse_add(s)[0] in ids for s in specs)
        except ValueError:
            return False

    return ok


def _prepare(dataset: str, ids: list[str]) -> tuple[str, str, str]:
    """Ready the flip, drop and add controls' state (from the link, or kept); their keys.
    Rollouts that no longer exist are forgotten; a dropped rollout is not flipped; the last
    rollout is never dropped."""
    fk, dk, ak = _keys(dataset)
    split = lambda s: [t for t in s.split(",") if t]  # noqa: E731
    for name, k in (("flip", fk), ("drop", dk)):
        view.field(
            name,
            [],
            key=k,
            decode=split,
            options=lambda ts: set(ts) <= set(ids),
            allowed="this group's rollout ids, comma-separated",
        )
    view.field("add", [], key=ak, decode=split, options=_valid_add(ids), allowed="<rollout>@<step>:S or :F")
    ss = st.session_state
    for k in (fk, dk):
        ss[k] = [t for t in ss.get(k, []) if t in ids]
    ss[dk] = ss[dk][: len(ids) - 1]
    # A dropped rollout leaves the flip list (it has no outcome to flip) but keeps its flip in
    # mind: its drop chip says the outcome it had, and it is flipped again once put back.
    held = {t for t in ss.get(_held(dataset), []) if t in ids} | {t for t in ss[fk] if t in ss[dk]}
    back = [t for t in sorted(held) if t not in ss[dk] and t not in ss[fk]]
    ss[fk] = [t for t in ss[fk] if t not in ss[dk]] + back
    ss[_held(dataset)] = sorted(t for t in held if t in ss[dk])
    ss[ak] = [s for s in ss.get(ak, []) if _valid_add(ids)([s])]
    return fk, dk, ak


def edits_of(dataset: str, rows: list[dict]) -> tuple[tuple, tuple, tuple]:
    """(flips, drops, added rollouts) as they stand, read before the panel is drawn (lesson 4
    draws it under the graph)."""
    fk, dk, ak = _prepare(dataset, T.traj_ids(rows))
    ss = st.session_state
    return tuple(sorted(ss[fk])), tuple(sorted(ss[dk])), tuple(T.parse_add(s) for s in ss[ak])


def _reset(dataset: str) -> None:
    for k in (*_keys(dataset), _held(dataset)):
        st.session_state[k] = []


def _add(dataset: str) -> None:
    """The Add button: append the chosen anchor's rollout with the chosen outcome."""
    ak = _keys(dataset)[2]
    where = st.session_state.get(f"learn_add_at_{dataset}")
    end = st.session_state.get(f"learn_add_end_{dataset}") or "S"
    if where:
        spec = f"{where}:{end}"
        if spec not in st.session_state.get(ak, []):
            st.session_state[ak] = [*st.session_state.get(ak, []), spec]


def _anchor_entries(dataset: str, rr: tuple) -> dict[str, str]:
    """{"<rollout>@<step>": label} per anchor of the group as logged: where the first rollout
    that reaches it does so (`teaching.ADD_RULE`)."""
    g = pipeline.learn_graph((dataset, rr, (), (), ()))
    steps = g.batch.steps
    ids = steps["traj_id"].astype(str).to_numpy()
    idx = steps["step_idx"].to_numpy()
    out, seen = {}, set()
    for s in range(g.batch.num_steps):
        n = int(g.step_node[s])
        if n not in seen:
            seen.add(n)
            out[f"{ids[s]}@{int(idx[s])}"] = f"{T.node_short_name(g, n)} · via {ids[s]}, step {int(idx[s])}"
    return out


def _add_label(spec: str, ids: list[str], adds: list[str]) -> str:
    src, step, ok = T.parse_add(spec)
    return f"new{adds.index(spec) + 1}: {src} up to step {step}, then {'SUCCESS' if ok else 'FAILURE'}"


def _edit_controls(dataset: str, rows: list[dict], rr: tuple) -> tuple[tuple, tuple, tuple]:
    ids = T.traj_ids(rows)
    outcome = {str(r["traj_id"]): bool(r["success"]) for r in rows}
    fk, dk, ak = _prepare(dataset, ids)
    ss = st.session_state
    c1, c2, c3 = st.columns([4, 4, 1.5], vertical_alignment="bottom")
    flip = c1.multiselect(
        "Flip the outcome of",
        [t for t in ids if t not in ss[dk]],  # a dropped rollout has no outcome to flip
        key=fk,
        format_func=lambda t: f"{t} ({'success → failure' if outcome[t] else 'failure → success'})",
        help="success ↔ failure on an in-memory copy; the file is untouched",
    )
    flipped = set(flip) | set(ss.get(_held(dataset), []))
    now = {t: outcome[t] != (t in flipped) for t in ids}  # the outcome after the flips
    full = len(ss[dk]) >= len(ids) - 1  # one rollout left: it cannot be dropped
    drop = c2.multiselect(
        "Drop rollouts",
        list(ss[dk]) if full else ids,
        key=dk,
        format_func=lambda t: f"{t} ({'success' if now[t] else 'failure'})",
        help="remove them from the group (in memory); the last rollout is never offered",
    )
    c3.button("Reset", key=f"learn_reset_{dataset}", on_click=_reset, args=(dataset,), width="stretch")
    anchors = _anchor_entries(dataset, rr)
    a1, a2, a3 = st.columns([4, 2.5, 1.5], vertical_alignment="bottom")
    a1.selectbox(
        "Add a rollout through anchor",
        list(anchors),
        key=f"learn_add_at_{dataset}",
        format_func=anchors.get,
        help=T.ADD_RULE,
    )
    a2.segmented_control(
        "ending in", list(_OUTCOMES), format_func=_OUTCOMES.get, key=f"learn_add_end_{dataset}", default="S"
    )
    a3.button("Add", key=f"learn_add_btn_{dataset}", on_click=_add, args=(dataset,), width="stretch")
    if ss[ak]:
        adds = list(ss[ak])
        st.multiselect(
            "Added rollouts (remove one with its ×)",
            adds,
            key=ak,
            format_func=lambda s: _add_label(s, ids, adds),
        )
    st.caption(f"**Adding a rollout.** {T.ADD_RULE}")
    for name, k in (("flip", fk), ("drop", dk), ("add", ak)):
        view.record(name, encode=",".join, key=k)
    return tuple(sorted(flip)), tuple(sorted(drop)), tuple(T.parse_add(s) for s in ss[ak])


# ---------------------------------------------------------------- the panel
def try_it(
    lesson, dataset: str, rows: list[dict], rr: tuple, *, beta: float | None = None, note: str = ""
) -> tuple[tuple, float, float | None]:
    """The lesson's "Try it" box: its text, the edit controls, the discounts (β here unless the
    lesson draws its own: ``beta`` given), ``note`` (what β and γ do in this lesson) and what
    changed. Returns ((flips, drops, added), β, γ)."""
    with st.container(border=True):
        st.markdown(f"**Try it.** {lesson.try_it}")
        edits = _edit_controls(dataset, rows, rr)
        d1, d2 = st.columns(2, vertical_alignment="bottom")
        if beta is None:
            beta = beta_control(d1)
            d1 = d2
        gamma = gamma_control(d1)
        st.caption(
            "β is the discount of CRBC and visit-local; γ that of GiGPO, RTMC, GRAFT, "
            "Gated-BEPO, PGPO, G2PO and ProxMO (each keeps its own default until you set one); "
            "GRPO and shortest path ignore both. " + note
        )
        what_changed((dataset, rr, *edits), beta, gamma)
        return edits, beta, gamma


def what_changed(key: tuple, beta: float, gamma: float | None) -> None:
    """After an edit or a new discount: the step whose credit moved most, over every
    estimator, then each estimator's own largest change (against the group as logged, at
    each one's default discount)."""
    if not any(key[2:]) and beta == BETA and gamma is None:
        return
    rows = pipeline.learn_changes(key, beta, gamma)
    ran = [r for r in rows if "missing" not in r]
    st.markdown(f"**{md(LC.change_line({r['label']: r['change'] for r in ran}))}**")
    df = pd.DataFrame(
        {
            "estimator": [r["label"] for r in ran],
            "discount": [r["discount"] for r in ran],
            "largest change": [LC.step_name(r["change"][0]) if r["change"] else "nothing moved" for r in ran],
            "before": [f"{r['change'][1]:+.2f}" if r["change"] else "" for r in ran],
            "after": [f"{r['change'][2]:+.2f}" if r["change"] else "" for r in ran],
        }
    )
    with st.expander("Every estimator's largest change (step credit, before → after)"):
        table(df, "learn_changes_table")
        missing = [r["label"] for r in rows if "missing" in r]
        if missing:
            st.caption(f"Not on this group: {', '.join(missing)} (they need logged fields it lacks).")
        st.caption(
            "Before: the group as logged, each estimator at its default discount. Steps are "
            "named by rollout and step index as logged; an added rollout's own steps have no "
            "before."
        )
