"""Step anchor keys of a validated, sorted step table (docs/schema.md, "Anchor identity"): a
precomputed ``anchor_key`` / ``state_hash``, else the hash of the canonical ``anchor_obs``
(under the anchor rule in force, `crbc_viz.io.anchor_rules`), else one key per trajectory step
(a step that merges with nothing). The table is Arrow (`crbc_viz.io.assemble.build_batch`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .._arrow import call, missing, numbers, take, texts
from ..errors import LoadError, Problem
from .anchor_rules import rule_hash64
from .anchors import anchor_hash64
from .coerce import values_of
from .fields import LINE_COLUMN as _LINE

__all__ = ["step_anchor_hashes"]


def step_anchor_hashes(table: dict, warnings: list, path: str, where: str = "line"):
    """(columns with ``anchor_key`` set, step hashes ``[S]``) of the validated columns (name ->
    numpy or Arrow array): a precomputed key, else the hash of the canonical ``anchor_obs``,
    else one hash per trajectory step. Hashes are computed once per distinct key or (string)
    observation and gathered, not once per step."""
    n = len(table[_LINE])
    names = list(table)
    obs_col = table.get("anchor_obs")
    if (
        obs_col is not None
        and "anchor_key" not in names
        and "state_hash" not in names
        and not isinstance(obs_col, np.ndarray)
        and (pa.types.is_string(obs_col.type) or pa.types.is_large_string(obs_col.type))
        and obs_col.null_count == 0
    ):
        # The usual case: every step has a string observation. Encoded in Arrow, one hash per
        # distinct string, the keys gathered as a string array (no per-step objects).
        enc = call(
            "dictionary_encode", obs_col.combine_chunks() if isinstance(obs_col, pa.ChunkedArray) else obs_col
        )
        codes = numbers(enc.indices).astype(np.int64)
        uh, ukeys = _string_hashes(enc.dictionary.to_pylist(), codes, np.arange(n), table, path, where)
        return _with_keys(table, take(texts(ukeys.tolist()), enc.indices)), uh[codes]
    hashes = np.zeros(n, dtype=np.uint64)
    keys = np.empty(n, dtype=object)
    given = _given_keys(table)
    keyed_mask = np.zeros(n, dtype=bool)
    if given is not None:
        keyed_mask = ~missing(given)
        at = np.flatnonzero(keyed_mask)
        if at.size:
            enc = call("dictionary_encode", take(given, at))
            codes = numbers(enc.indices).astype(np.int64)
            uniq = enc.dictionary.to_pylist()
            hashes[at] = np.fromiter((_key_to_hash(k) for k in uniq), np.uint64, len(uniq))[codes]
            keys[at] = np.array(uniq + [None], dtype=object)[:-1][codes]
    obs_mask = np.zeros(n, dtype=bool)
    if obs_col is not None:
        obs = values_of(obs_col)
        obs_mask = ~keyed_mask & ~_absent(obs)
        at = np.flatnonzero(obs_mask)
        if at.size:
            h, k = _obs_hashes(obs[at], at, table, path, where)
            hashes[at], keys[at] = h, k
    none_at = np.flatnonzero(~keyed_mask & ~obs_mask)
    if none_at.size:
        # No anchor: this step merges with nothing (a unique key per trajectory step).
        traj = values_of(table["traj_id"])[none_at]
        sidx = np.asarray(table["step_idx"])[none_at]
        h = np.fromiter(
            (anchor_hash64(["__no_anchor__", str(t), int(s)]) for t, s in zip(traj, sidx)),
            np.uint64,
            len(none_at),
        )
        hashes[none_at] = h
        keys[none_at] = [f"{x:016x}" for x in h.tolist()]
    keyed, unkeyed = int(keyed_mask.sum()), int(none_at.size)
    if unkeyed:
        warnings.append(
            f"{path}: {unkeyed} of {n} steps have no anchor_obs or anchor_key; "
            f"they are not merged with any other step"
        )
    if 0 < keyed < n and obs_col is not None and n - keyed - unkeyed > 0:
        warnings.append(
            f"{path}: {keyed} of {n} steps carry a precomputed anchor_key/state_hash "
            f"and {n - keyed - unkeyed} are keyed from anchor_obs; a precomputed key "
            f"merges only with equal keys (docs/schema.md, \"Anchor identity\")"
        )
    return _with_keys(table, keys), hashes


def _with_keys(table: dict, keys) -> dict:
    """The columns with ``anchor_key`` (replaced in place, or added last) set to ``keys``."""
    return {**table, "anchor_key": keys}


def _given_keys(table: dict):
    """The precomputed key of each step as an Arrow string array (``anchor_key``, else
    ``state_hash``; null where neither is given), or None without those columns. Both are id
    fields: validated, they hold text or nothing."""
    got = None
    for name in ("anchor_key", "state_hash"):
        if name in table:
            col = _text_array(table[name])
            got = col if got is None else call("coalesce", got, col)
    return got


def _text_array(col) -> pa.Array:
    if isinstance(col, np.ndarray):
        return pa.array(col.tolist(), type=pa.string())
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return col if pa.types.is_string(col.type) else pa.array(col.to_pylist(), type=pa.string())


def _absent(values: np.ndarray) -> np.ndarray:
    """Where an object array holds no value (None, or a float NaN)."""
    return np.fromiter(
        (v is None or (isinstance(v, float) and v != v) for v in values.tolist()), bool, len(values)
    )


def _factorize(values) -> tuple[np.ndarray, list]:
    """(codes, distinct values in order of first occurrence) of hashable values."""
    seen: dict = {}
    codes = np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int64, len(values))
    return codes, list(seen)


def _line(table: dict, row: int):
    return int(table[_LINE][row]) if _LINE in table else None


def _obs_hashes(values: np.ndarray, rows: np.ndarray, table: dict, path: str, where: str):
    """(hashes, keys) of the anchor observations ``values`` (rows ``rows`` of ``table``). All
    strings (the usual case): one hash per distinct string. Otherwise one per value, strings
    cached. The first row (in table order) whose value cannot be canonicalised is reported."""
    if all(isinstance(v, str) for v in values.tolist()):
        codes, uniq = _factorize(values.tolist())
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
            raise _cannot(table, int(rows[i]), exc, path, where) from None
        if ck is not None:
            cache[ck] = h
        out[i] = h
    return out, np.array([f"{x:016x}" for x in out.tolist()], dtype=object)


def _cannot(table: dict, row: int, exc: BaseException, path: str, where: str) -> LoadError:
    return LoadError(
        [
            Problem(
                path,
                _line(table, row),
                "anchor_obs",
                f"cannot canonicalise the anchor ({type(exc).__name__})",
                where,
            )
        ]
    )


def _string_hashes(
    uniq, codes: np.ndarray, rows: np.ndarray, table: dict, path: str, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, hex keys) of the distinct anchor strings ``uniq`` (in first-occurrence order;
    ``codes`` map the values at table rows ``rows`` to them)."""
    uh = np.zeros(len(uniq), dtype=np.uint64)
    for j, o in enumerate(uniq):
        try:
            uh[j] = rule_hash64(o)
        except (RecursionError, ValueError, TypeError, OverflowError) as exc:
            raise _cannot(table, int(rows[int(np.argmax(codes == j))]), exc, path, where) from None
    return uh, np.array([f"{x:016x}" for x in uh.tolist()], dtype=object)


def _key_to_hash(k: str) -> int:
    if len(k) == 16:
        try:
            return int(k, 16)
        except ValueError:
            pass
    return anchor_hash64("key:" + k)
