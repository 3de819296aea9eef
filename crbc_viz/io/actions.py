"""The actions of steps whose log names none: identified by their transition (SCHEMA.md,
Conventions, revised 2026-12-05).

A step without an ``action`` (the field absent, or null on that row) takes as its action the
transition it made: the next step's anchor, or SUCCESS / FAILURE after its trajectory's last
step (truncation is failure, as for the graph's boundaries). Two such steps at one anchor then
share an action exactly when they led to the same next state: exact in deterministic
environments (Sokoban); distinct actions with one effect merge, which a state-based credit
cannot tell apart anyway.

Decisions:

- Per step: in a trajectory where some steps log an action and others do not, only the missing
  ones are inferred. An empty string is a logged action (the text ``""``), not a missing one.
- The namespaces cannot collide: actions are numbered from (logged?, text), so a logged action
  whose text is ``->SUCCESS`` is never the inferred ``->SUCCESS``. The inferred ones are named
  ``->`` + the 16 hex digits of the next step's anchor hash (``anchor_key`` as the loader
  computes it), ``->SUCCESS`` and ``->FAILURE`` (`inferred_name`); the name is a label only.
- The rule is applied where a batch of whole trajectories is numbered (`crbc_viz.graph.action_ids`,
  which the graph, the compiled kernels and the trainer adapters all use), never per file
  chunk or per stored part: a batch always holds whole trajectories, so the next step and the
  outcome are known exactly whatever path (loader, importer, store, adapter) built it. The
  batch's ``action`` column keeps what the log said (null where it said nothing), so the
  count of inferred steps is the count of nulls (`missing_actions`), which ``crbc-viz info``
  (``actions_inferred``), the Data page and the Graph page show
  (`crbc_viz.analysis.matching`). It is not a load warning: most canonical logs of
  deterministic environments name no action, and the rule is the documented reading of them.

This module is the one place the rule is written.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "SUCCESS_ACTION",
    "FAILURE_ACTION",
    "inferred_name",
    "transition_codes",
    "step_action_codes",
    "transition_actions",
    "missing_actions",
]

#: Names of the inferred actions that end a trajectory (labels only: see the module's notes).
SUCCESS_ACTION = "->SUCCESS"
FAILURE_ACTION = "->FAILURE"


def inferred_name(next_hash: int) -> str:
    """The name of the inferred action that leads to the anchor with hash ``next_hash``."""
    return f"->{int(next_hash):016x}"


def transition_codes(step_anchor_hash, traj_offsets, traj_success) -> tuple[np.ndarray, np.ndarray]:
    """Every step's transition as an action: ``(codes [S], names [K])`` for steps stored
    trajectory by trajectory (the `RolloutBatch` order). A step's code is its next step's anchor
    (one code per distinct anchor hash), or SUCCESS / FAILURE after its trajectory's last step;
    codes are numbered in order of first occurrence and ``names`` holds the used ones
    (`inferred_name`, `SUCCESS_ACTION`, `FAILURE_ACTION`).

    Args:
        step_anchor_hash: ``[S]`` uint64 anchor hash of each step.
        traj_offsets: ``[T + 1]`` step offsets of each trajectory.
        traj_success: ``[T]`` the trajectory's outcome (truncated = failure).
    """
    h = np.asarray(step_anchor_hash, dtype=np.uint64).reshape(-1)
    off = np.asarray(traj_offsets, dtype=np.int64).reshape(-1)
    ok = np.asarray(traj_success, dtype=bool).reshape(-1)
    S = len(h)
    distinct, hash_code = _hash_codes(h)
    code = np.empty(S, np.int64)
    code[:-1] = hash_code[1:]
    nonempty = off[1:] > off[:-1]
    last = off[1:][nonempty] - 1
    code[last] = len(distinct) + (~ok[nonempty]).astype(np.int64)
    code, used = first_seen(code, len(distinct) + 2)
    K = len(distinct)
    names = np.array(
        [
            inferred_name(distinct[u]) if u < K else (SUCCESS_ACTION if u == K else FAILURE_ACTION)
            for u in used
        ],
        dtype=object,
    )
    return code, names


def _hash_codes(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct hashes, code of each step's hash into them): one hash-table pass (Arrow's
    dictionary encoding), no sort; the codes are renumbered in first-seen order by the caller."""
    from .._arrow import array, call, numbers

    if len(h) == 0:
        return h, np.zeros(0, np.int64)
    enc = call("dictionary_encode", array(h))
    return numbers(enc.dictionary), numbers(enc.indices).astype(np.int64)


def step_action_codes(
    logged: np.ndarray, logged_names, step_anchor_hash, traj_offsets, traj_success
) -> tuple[np.ndarray, np.ndarray]:
    """Every step's action id: the logged action where there is one, else its transition
    (`transition_codes`), in one numbering: ``(codes [S], names [A])``, ids in order of first
    occurrence over the steps; a logged and an inferred action never share an id, whatever
    their names.

    Args:
        logged: ``[S]`` code of each step's logged action into ``logged_names``, -1 where the
            step logs none.
        logged_names: ``[K]`` the logged actions' names.
        step_anchor_hash, traj_offsets, traj_success: as `transition_codes`.
    """
    logged = np.asarray(logged, dtype=np.int64).reshape(-1)
    names = np.asarray(list(logged_names), dtype=object)
    missing = logged < 0
    if not missing.any():
        code, used = first_seen(logged, len(names))
        return code, names[used]
    trans, trans_names = transition_codes(step_anchor_hash, traj_offsets, traj_success)
    combined = np.where(missing, len(names) + trans, logged)
    code, used = first_seen(combined, len(names) + len(trans_names))
    return code, np.concatenate([names, trans_names])[used]


def transition_actions(traj_key, step, hashes, success) -> np.ndarray:
    """`transition_codes` for rows in any order: the inferred action's name of each row
    (object array ``[n]``). ``traj_key``, ``step``, ``hashes`` (uint64 anchor hash) and
    ``success`` (the row's trajectory's outcome) are per row, one row per step."""
    traj_key = np.asarray(traj_key).reshape(-1)
    order = np.lexsort((np.asarray(step).reshape(-1), traj_key))
    tk = traj_key[order]
    starts = np.flatnonzero(np.r_[True, tk[1:] != tk[:-1]]) if len(tk) else np.zeros(0, np.int64)
    offsets = np.r_[starts, len(tk)].astype(np.int64)
    ok = np.asarray(success, dtype=bool).reshape(-1)[order][starts]
    code, names = transition_codes(np.asarray(hashes, dtype=np.uint64)[order], offsets, ok)
    out = np.empty(len(order), dtype=object)
    out[order] = names[code]
    return out


def missing_actions(batch) -> np.ndarray:
    """``[S]`` whether each step of ``batch`` (a `RolloutBatch`) logs no action (the column
    absent, or null on its row): the steps whose action is inferred."""
    S = batch.num_steps
    if not batch.has_step_column("action"):
        return np.ones(S, dtype=bool)
    col = batch.plain_column("action")
    if col is not None:
        from .._arrow import missing

        if col.null_count == 0:
            return np.zeros(S, dtype=bool)
        return missing(col)
    import pandas as pd

    return pd.isna(batch.steps["action"]).to_numpy(dtype=bool)


def first_seen(codes: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """``(renumbered [n], used [K'])``: codes ``0..K-1`` renumbered in order of first occurrence
    (the numbering the loader gives, `crbc_viz.graph.action_ids`; the adapters number anchors
    with it too) and the old code of each new one (codes that do not occur are dropped)."""
    n = len(codes)
    at = np.full(K, n, np.int64)
    np.minimum.at(at, codes, np.arange(n, dtype=np.int64))
    used = np.flatnonzero(at < n)
    used = used[np.argsort(at[used], kind="stable")]
    renumber = np.zeros(K, np.int64)
    renumber[used] = np.arange(len(used), dtype=np.int64)
    return renumber[codes], used
