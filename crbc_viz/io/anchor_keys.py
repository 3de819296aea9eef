"""Step anchor keys of a validated, sorted step table (docs/schema.md, "Anchor identity"): a
precomputed ``anchor_key`` / ``state_hash``, else the hash of the canonical ``anchor_obs``
(under the anchor rule in force, `crbc_viz.io.anchor_rules`), else one key per trajectory step (a step that merges with nothing)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import LoadError, Problem
from .anchor_rules import rule_hash64
from .anchors import anchor_hash64
from .fields import LINE_COLUMN as _LINE

__all__ = ["step_anchor_hashes"]


def step_anchor_hashes(table: pd.DataFrame, warnings: list, path: str, where: str = "line"):
    """(table with ``anchor_key`` set, step hashes ``[S]``): a precomputed key, else the hash of
    the canonical ``anchor_obs``, else one hash per trajectory step. Hashes are computed once
    per distinct key or (string) observation and gathered, not once per step."""
    n = len(table)
    obs_col = table["anchor_obs"] if "anchor_obs" in table else None
    if (
        obs_col is not None
        and "anchor_key" not in table
        and "state_hash" not in table
        and isinstance(obs_col.dtype, pd.StringDtype)
        and not obs_col.isna().any()
    ):
        # The usual case: every step has a string observation. Factorised in Arrow, one hash
        # per distinct string, the keys gathered as a string array (no per-step objects).
        codes, uniq = pd.factorize(obs_col)
        uh, ukeys = _string_hashes(uniq.to_numpy(dtype=object), codes, np.arange(n), table, path, where)
        return table.assign(anchor_key=pd.array(ukeys, dtype=obs_col.dtype).take(codes)), uh[codes]
    hashes = np.zeros(n, dtype=np.uint64)
    keys = np.empty(n, dtype=object)
    given = None
    for col in ("anchor_key", "state_hash"):
        if col in table:
            given = (
                table[col].to_numpy(dtype=object)
                if given is None
                else np.where(pd.isna(given), table[col].to_numpy(dtype=object), given)
            )
    keyed_mask = ~pd.isna(given) if given is not None else np.zeros(n, dtype=bool)
    at = np.flatnonzero(keyed_mask)
    if at.size:
        codes, uniq = pd.factorize(given[at])
        hashes[at] = np.fromiter((_key_to_hash(k) for k in uniq), np.uint64, len(uniq))[codes]
        keys[at] = given[at]
    obs_mask = np.zeros(n, dtype=bool)
    if "anchor_obs" in table:
        obs = table["anchor_obs"].to_numpy(dtype=object)
        obs_mask = ~keyed_mask & ~pd.isna(obs)
        at = np.flatnonzero(obs_mask)
        if at.size:
            h, k = _obs_hashes(obs[at], at, table, path, where)
            hashes[at], keys[at] = h, k
    none_at = np.flatnonzero(~keyed_mask & ~obs_mask)
    if none_at.size:
        # No anchor: this step merges with nothing (a unique key per trajectory step).
        traj = table["traj_id"].to_numpy(dtype=object)[none_at]
        sidx = table["step_idx"].to_numpy()[none_at]
        h = np.fromiter(
            (anchor_hash64(["__no_anchor__", str(t), int(s)]) for t, s in zip(traj, sidx)),
            np.uint64,
            len(none_at),
        )
        hashes[none_at] = h
        keys[none_at] = [f"{x:016x}" for x in h.tolist()]
    keyed, missing = int(keyed_mask.sum()), int(none_at.size)
    if missing:
        warnings.append(
            f"{path}: {missing} of {n} steps have no anchor_obs or anchor_key; "
            f"they are not merged with any other step"
        )
    if 0 < keyed < n and "anchor_obs" in table and n - keyed - missing > 0:
        warnings.append(
            f"{path}: {keyed} of {n} steps carry a precomputed anchor_key/state_hash "
            f"and {n - keyed - missing} are keyed from anchor_obs; a precomputed key "
            f"merges only with equal keys (docs/schema.md, \"Anchor identity\")"
        )
    table = table.assign(anchor_key=keys)
    return table, hashes


def _obs_hashes(values: np.ndarray, rows: np.ndarray, table: pd.DataFrame, path: str, where: str):
    """(hashes, keys) of the anchor observations ``values`` (rows ``rows`` of ``table``). All
    strings (the usual case): one hash per distinct string. Otherwise one per value, strings
    cached. The first row (in table order) whose value cannot be canonicalised is reported."""
    from pandas.api.types import infer_dtype

    def fail(i, exc):
        line = int(table[_LINE].iat[int(rows[i])]) if _LINE in table else None
        return LoadError(
            [
                Problem(
                    path, line, "anchor_obs", f"cannot canonicalise the anchor ({type(exc).__name__})", where
                )
            ]
        )

    if infer_dtype(values, skipna=False) == "string":
        codes, uniq = pd.factorize(values)
        uh, ukeys = _string_hashes(uniq, codes, rows, table, path, where)
        return uh[codes], ukeys[codes]
    out = np.zeros(len(values), dtype=np.uint64)
    cache: dict = {}
    for i, o in enumerate(values):
        ck = o if isinstance(o, str) else None
        if ck is not None and ck in cache:
            out[i] = cache[ck]
            continue
        try:
            h = rule_hash64(o)
        except (RecursionError, ValueError, TypeError, OverflowError) as exc:
            raise fail(i, exc) from None
        if ck is not None:
            cache[ck] = h
        out[i] = h
    return out, np.array([f"{x:016x}" for x in out.tolist()], dtype=object)


def _string_hashes(
    uniq, codes: np.ndarray, rows: np.ndarray, table: pd.DataFrame, path: str, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, hex keys) of the distinct anchor strings ``uniq`` (in first-occurrence order;
    ``codes`` map the values at table rows ``rows`` to them)."""
    uh = np.zeros(len(uniq), dtype=np.uint64)
    for j, o in enumerate(uniq):
        try:
            uh[j] = rule_hash64(o)
        except (RecursionError, ValueError, TypeError, OverflowError) as exc:
            i = int(rows[int(np.argmax(codes == j))])
            line = int(table[_LINE].iat[i]) if _LINE in table else None
            raise LoadError(
                [
                    Problem(
                        path,
                        line,
                        "anchor_obs",
                        f"cannot canonicalise the anchor ({type(exc).__name__})",
                        where,
                    )
                ]
            ) from None
    return uh, np.array([f"{x:016x}" for x in uh.tolist()], dtype=object)


def _key_to_hash(k: str) -> int:
    if len(k) == 16:
        try:
            return int(k, 16)
        except ValueError:
            pass
    return anchor_hash64("key:" + k)
