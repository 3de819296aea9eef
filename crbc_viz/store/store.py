"""A log store for whole training runs: canonical step rows as zstd Parquet, partitioned by
``run_id`` / ``train_step``, read through one embedded DuckDB connection.

Layout of a store folder::

    store.json                               marks the folder as a store (format, version)
    manifest/<digest>.json                   one per ingested source: its parts, keys, notes
    steps/run_id=<run>/train_step=<n>/<digest16>-<k>.parquet   hot columns (ids, reward,
                                             action, anchor key + 64-bit hash, outcome ...)
    text/run_id=<run>/train_step=<n>/<digest16>-<k>.parquet    observation / response, aligned
                                             row for row with the steps part (joined on demand)
    cache/                                   derived tables (trends), keyed by the manifest

Crash safety: every part is written to a temporary name and renamed into place; the source's
manifest file is rewritten (temp + rename) only after the part is in place. Readers list only
parts named by a manifest, so a crash leaves a readable store, and re-running the ingest
resumes the source where it stopped (part names are deterministic). A source whose content
digest is already complete in the store is skipped.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from ..data import GROUP_KEY, RolloutBatch
from ..errors import CrbcVizError
from ..io.errors import MAX_LISTED, LoadError, Problem
from ..io.write import atomic_path

__all__ = ["LogStore", "Part", "IngestReport", "ingest", "open_store", "StoreError",
           "incomplete_sources", "drop_incomplete",
           "TEXT_COLUMNS", "CRASH_ENV", "parse_group_label"]

log = logging.getLogger(__name__)

STORE_FILE = "store.json"
STORE_FORMAT = "crbc-viz-store"
STORE_VERSION = 1
TEXT_COLUMNS = ("observation", "response")
#: Test hook: ``os._exit`` after this many parts were committed by one ingest process.
CRASH_ENV = "CRBC_VIZ_INGEST_CRASH_AFTER_PARTS"
DEFAULT_PART_ROWS = 500_000
_JSON_SUFFIX = "__json"
# Columns the store adds; dropped from RolloutBatch.steps except the text join keys.
_INTERNAL_DROP = ("_anchor_hash", "_traj_return", "_truncated")
_CANONICAL_TYPES = {
    "run_id": "string", "train_step": "int64", "group_id": "string", "traj_id": "string",
    "step_idx": "int64", "reward": "float64", "action": "string", "anchor_key": "string",
    "done": "bool", "success": "bool", "episode_return": "float64", "is_action_valid": "bool",
    "env_name": "string", "split": "string",
}
_DROP_AT_INGEST = ("state_hash",)  # folded into anchor_key by build_batch


class StoreError(CrbcVizError, ValueError):
    """A store folder that is missing, not a store, or a query that names nothing in it."""


@dataclass(frozen=True)
class Part:
    """One committed part: its steps file, its text file (or None), and where it belongs."""

    path: str
    text: str | None
    source: str
    run_id: str
    train_step: int
    rows: int
    order: tuple


@dataclass
class IngestReport:
    """What an ingest did, per source: ``status`` is ``ingested``, ``resumed`` or ``skipped``."""

    sources: list[dict] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(s["rows"] for s in self.sources if s["status"] != "skipped")


# ---------------------------------------------------------------------------------------------
# Reading


def parse_group_label(label: str) -> list[tuple[str | None, int | None, str]]:
    """Candidate (run_id, train_step, group_id) readings of a group reference: a bare group id,
    or ``run/train_step/group_id`` as ``RolloutBatch.group_label`` writes it."""
    out: list[tuple[str | None, int | None, str]] = [(None, None, label)]
    parts = label.split("/")
    for i in range(1, len(parts) - 1):
        if parts[i].lstrip("-").isdigit():
            out.append(("/".join(parts[:i]), int(parts[i]), "/".join(parts[i + 1:])))
    return out


class LogStore:
    """An opened store (read side). Cheap to open: reads the manifests, not the data.

    Args:
        root: the store folder.
        create: make an empty store when the folder is missing or empty.

    Raises:
        StoreError: the folder is missing or not a store.
    """

    def __init__(self, root: str | os.PathLike, *, create: bool = False):
        self.root = Path(root)
        marker = self.root / STORE_FILE
        if not marker.exists():
            if not create:
                raise StoreError(f"{self.root}: not a crbc-viz store (no {STORE_FILE}); create one "
                                 f"with `crbc-viz ingest LOG --store {self.root}`")
            if self.root.exists() and any(p.name != ".lock" for p in self.root.iterdir()):
                raise StoreError(f"{self.root}: folder is not empty and not a crbc-viz store; "
                                 f"choose a new folder for the store")
            self.root.mkdir(parents=True, exist_ok=True)
            with atomic_path(marker) as tmp:
                Path(tmp).write_text(json.dumps({"format": STORE_FORMAT, "version": STORE_VERSION}))
        meta = _read_marker(marker)
        if meta.get("format") != STORE_FORMAT or meta.get("version") != STORE_VERSION:
            raise StoreError(f"{marker}: expected format {STORE_FORMAT!r} version {STORE_VERSION}, "
                             f"got {meta.get('format')!r} version {meta.get('version')}")
        self._con = None
        self.refresh()

    # -- manifest ------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the manifests (parts committed since opening become visible)."""
        self.sources: dict[str, dict] = {}
        mdir = self.root / "manifest"
        if mdir.is_dir():
            for f in sorted(mdir.glob("*.json")):
                try:
                    m = json.loads(f.read_text())
                except (OSError, ValueError, RecursionError) as exc:  # never half-written (atomic)
                    raise StoreError(f"{f}: unreadable manifest ({str(exc)[:200]}); restore it "
                                     f"or remove it and re-ingest its source") from None
                _check_manifest(self.root, f, m)
                self.sources[m["digest"]] = m
        parts = []
        for m in sorted(self.sources.values(), key=lambda m: (str(m.get("started_at", "")), m["digest"])):
            for k, p in enumerate(m.get("parts", [])):
                parts.append(Part(path=p["path"], text=p.get("text"), source=m["digest"],
                                  run_id=str(p["run_id"]), train_step=int(p["train_step"]),
                                  rows=int(p["rows"]), order=(str(m.get("started_at", "")), m["digest"], k)))
        self.parts: list[Part] = parts
        self._rank = {Path(p.path).stem: i for i, p in enumerate(parts)}

    @property
    def fingerprint(self) -> str:
        """Changes whenever a part is committed (the cache key of derived tables)."""
        h = hashlib.blake2b(digest_size=8)
        for p in self.parts:
            h.update(p.path.encode())
        return h.hexdigest()

    @property
    def num_steps(self) -> int:
        return sum(p.rows for p in self.parts)

    def _abs(self, rel: str) -> str:
        return str(self.root / rel)

    @property
    def con(self):
        """The store's DuckDB connection (in memory; the data stays in the Parquet files);
        a query failure (a corrupt or truncated part) is a `StoreError` naming the store."""
        if self._con is None:
            import duckdb
            self._con = _Connection(duckdb.connect(), self.root)
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- selection -----------------------------------------------------------------------------
    def select_parts(self, run: str | None = None, train_step: int | None = None) -> list[Part]:
        return [p for p in self.parts if (run is None or p.run_id == run)
                and (train_step is None or p.train_step == int(train_step))]

    # No SQL text ever comes from data: part paths travel as a bound list parameter (the ``?``
    # in `_FROM`, whose value is `_files`), values as parameters, and the only identifiers in any
    # statement are the constant column names written in this module. Field names from a log
    # are never pasted into SQL (issue 14: a field named as a DuckDB script was executed).
    _FROM = "read_parquet(?, union_by_name=true, hive_partitioning=false)"

    def _files(self, parts: list[Part]) -> list[str]:
        return [self._abs(p.path) for p in parts]

    def _columns(self, parts: list[Part]) -> list[str]:
        return [r[0] for r in self.con.execute(f"DESCRIBE SELECT * FROM {self._FROM}",
                                               [self._files(parts)]).fetchall()]

    @staticmethod
    def _where(group: tuple | None = None, env: str | None = None,
               run: str | None = None, train_step: int | None = None) -> tuple[str, list]:
        clauses, params = [], []
        if run is not None:
            clauses.append("run_id = ?")
            params.append(run)
        if train_step is not None:
            clauses.append("train_step = ?")
            params.append(int(train_step))
        if group is not None:
            r, t, g = group
            clauses.append("group_id = ?")
            params.append(g)
            if r is not None:
                clauses.append("run_id = ?")
                params.append(r)
            if t is not None:
                clauses.append("train_step = ?")
                params.append(int(t))
        if env is not None:
            clauses.append("env_name = ?")
            params.append(env)
        return " AND ".join(clauses) or "TRUE", params

    _SUCCESS = {"yes": "bool_or(coalesce(success, false))",
                "no": "NOT bool_or(coalesce(success, false))",
                "mixed": "bool_or(coalesce(success, false)) AND NOT bool_and(coalesce(success, false))"}

    def _select(self, select: str, parts: list[Part], *, group=None, env=None, success=None,
                run=None, train_step=None, tail: str = "") -> pd.DataFrame:
        """``SELECT <select> FROM <filtered steps> <tail>``; the group-level success filter keeps
        whole groups. ``select`` and ``tail`` are constant SQL written in this module."""
        where, params = self._where(group, env, run, train_step)
        src = f"(SELECT * FROM {self._FROM} WHERE {where})"
        params = [self._files(parts), *params]
        if success is not None:
            if success not in self._SUCCESS:
                raise ValueError(f"success filter must be one of {', '.join(self._SUCCESS)}, "
                                 f"got {success!r}")
            src = (f"(SELECT s.* FROM {src} s SEMI JOIN (SELECT run_id, train_step, group_id FROM "
                   f"{src} GROUP BY ALL HAVING {self._SUCCESS[success]}) k "
                   f"USING (run_id, train_step, group_id))")
            params = params + params
        return self.con.execute(f"SELECT {select} FROM {src} AS src {tail}", params).df()

    # -- listing -------------------------------------------------------------------------------
    def train_steps(self, run: str | None = None) -> pd.DataFrame:
        """``run_id``, ``train_step``, ``steps`` for every partition (from the manifest)."""
        rows = {}
        for p in self.select_parts(run):
            rows[(p.run_id, p.train_step)] = rows.get((p.run_id, p.train_step), 0) + p.rows
        return pd.DataFrame([{"run_id": r, "train_step": t, "steps": n} for (r, t), n in rows.items()],
                            columns=["run_id", "train_step", "steps"]).sort_values(
            ["run_id", "train_step"], ignore_index=True)

    def groups(self, *, run: str | None = None, train_step: int | None = None, env: str | None = None,
               success: str | None = None, group: str | None = None) -> pd.DataFrame:
        """One row per group: ids, ``env_name``, ``rollouts``, ``steps``, ``success_rate``."""
        parts = self.select_parts(run, train_step)
        cols = ["run_id", "train_step", "group_id", "env_name", "rollouts", "steps", "success_rate"]
        if not parts:
            return pd.DataFrame(columns=cols)
        have_env = "env_name" in self._columns(parts)
        frames = []
        if env is not None and not have_env:
            return pd.DataFrame(columns=cols)
        select = (f"run_id, train_step, group_id, "
                  f"{'any_value(env_name)' if have_env else 'NULL'} AS env_name, "
                  f"count(DISTINCT traj_id) AS rollouts, count(*) AS steps, "
                  f"count(DISTINCT traj_id) FILTER (WHERE success) / count(DISTINCT traj_id) AS success_rate")
        for cand in (parse_group_label(group) if group else [None]):
            frames.append(self._select(select, parts, group=cand, env=env, success=success, run=run,
                                       train_step=train_step,
                                       tail="GROUP BY run_id, train_step, group_id "
                                            "ORDER BY run_id, train_step, group_id"))
        out = pd.concat(frames, ignore_index=True).drop_duplicates(["run_id", "train_step", "group_id"])
        return out.reset_index(drop=True)[cols]

    def resolve_group(self, group: str, *, run: str | None = None,
                      train_step: int | None = None) -> tuple[str, int, str]:
        """The one group a reference names (a bare id, or ``run/train_step/group_id``).

        Raises:
            StoreError: no such group, or several (listing them).
        """
        found = self.groups(run=run, train_step=train_step, group=group)
        if found.empty:
            scope = "".join([f" run '{run}'" if run else "",
                             f" train_step {train_step}" if train_step is not None else ""])
            raise StoreError(f"{self.root}: no group '{group}'{scope} in the store")
        if len(found) > 1:
            labels = [f"{r.run_id}/{r.train_step}/{r.group_id}" for r in found.itertuples()]
            raise StoreError(f"group '{group}' is ambiguous ({len(labels)} matches: "
                             f"{', '.join(labels[:10])}{' ...' if len(labels) > 10 else ''}); "
                             f"give run/train_step/group_id or --run / --train-step")
        r = found.iloc[0]
        return str(r["run_id"]), int(r["train_step"]), str(r["group_id"])

    # -- loading -------------------------------------------------------------------------------
    def load_batch(self, *, run: str | None = None, train_step: int | None = None,
                   group: str | tuple | None = None, env: str | None = None,
                   success: str | None = None, anchor_obs: bool = True,
                   text: bool = False) -> RolloutBatch:
        """The selected steps as a validated `RolloutBatch` (no re-validation: the store holds
        validated rows with their anchor hashes).

        Args:
            run, train_step: partition filters (pruned from the manifest before any I/O).
            group: a group reference (see `resolve_group`) or a ``(run, train_step, group_id)``.
            env: keep groups of this ``env_name``.
            success: ``yes`` (groups with a success), ``no`` (without) or ``mixed`` (both).
            anchor_obs: load the raw anchors (display only; scoring does not need them).
            text: join ``observation`` / ``response`` from the text table.

        Raises:
            StoreError: nothing matches.
        """
        if isinstance(group, str):
            group = self.resolve_group(group, run=run, train_step=train_step)
        if group is not None:
            run, train_step = group[0], group[1]
        parts = self.select_parts(run, train_step)
        if not parts:
            raise StoreError(f"{self.root}: no steps for run={run!r} train_step={train_step!r} "
                             f"(runs: {', '.join(sorted({p.run_id for p in self.parts})) or 'none'})")
        cols = self._columns(parts)
        if env is not None and "env_name" not in cols:
            raise StoreError(f"{self.root}: no env_name recorded; cannot filter on env '{env}'")
        # Every column but the (constant) raw-anchor names: the log's own field names stay out of SQL.
        drop = [c for c in ("anchor_obs", "anchor_obs" + _JSON_SUFFIX) if not anchor_obs and c in cols]
        sel = f"* EXCLUDE ({', '.join(drop)})" if drop else "*"
        df = self._select(sel, parts, group=group, env=env, success=success, run=run,
                          train_step=train_step)
        if df.empty:
            raise StoreError(f"{self.root}: no steps match the filters")
        if text:
            df = self._join_text(df)
        return self._assemble(df)

    def _join_text(self, df: pd.DataFrame) -> pd.DataFrame:
        txt = self.text_for(df)
        if txt.empty:
            return df
        return df.merge(txt, on=["_part", "_row"], how="left")

    def text_for(self, steps: pd.DataFrame) -> pd.DataFrame:
        """``observation`` / ``response`` of the given steps (keyed by their ``_part``, ``_row``)."""
        by_stem = {Path(p.path).stem: p for p in self.parts}
        frames = []
        for stem, rows in steps.groupby("_part", sort=False)["_row"]:
            part = by_stem.get(stem)
            if part is None or part.text is None:
                continue
            lo, hi = int(rows.min()), int(rows.max())
            t = self.con.execute("SELECT * FROM read_parquet(?, hive_partitioning=false) "
                                 "WHERE _row BETWEEN ? AND ?", [self._abs(part.text), lo, hi]).df()
            t = t[t["_row"].isin(rows.to_numpy())]
            t.insert(0, "_part", stem)
            frames.append(t)
        if not frames:
            return pd.DataFrame(columns=["_part", "_row"])
        return _decode_json(pd.concat(frames, ignore_index=True))

    def _assemble(self, df: pd.DataFrame) -> RolloutBatch:
        df = _decode_json(df)
        rank = df["_part"].map(self._rank).to_numpy(np.int64)
        df = df.iloc[np.lexsort((df["_row"].to_numpy(np.int64), rank))].reset_index(drop=True)
        for c in ("run_id", "group_id", "traj_id"):
            df[c] = df[c].astype(object)
        df["train_step"] = df["train_step"].astype(np.int64)
        df["step_idx"] = df["step_idx"].astype(np.int64)
        g_codes, _ = pd.MultiIndex.from_arrays([df["run_id"], df["train_step"], df["group_id"]]).factorize()
        t_codes, _ = pd.MultiIndex.from_arrays([g_codes, df["traj_id"]]).factorize()
        step_idx = df["step_idx"].to_numpy()
        order = np.lexsort((step_idx, t_codes, g_codes))
        df = df.iloc[order].reset_index(drop=True)
        t_codes, _ = pd.factorize(t_codes[order])
        g_codes = g_codes[order]
        step_idx = step_idx[order]
        num_t = int(t_codes.max()) + 1
        traj_len = np.bincount(t_codes, minlength=num_t)
        traj_offsets = np.r_[0, np.cumsum(traj_len)].astype(np.int64)
        pos = np.arange(len(df)) - np.repeat(traj_offsets[:-1], traj_len)
        bad = np.flatnonzero(step_idx != pos)
        if bad.size:
            probs = []
            for t in np.unique(t_codes[bad])[:MAX_LISTED]:
                r = traj_offsets[t]
                probs.append(Problem(str(self.root), None, "step_idx",
                                     f"trajectory '{df['traj_id'].iat[r]}' of group "
                                     f"'{df['run_id'].iat[r]}/{df['train_step'].iat[r]}/{df['group_id'].iat[r]}' "
                                     f"has duplicate or missing steps in the store (ingested from "
                                     f"two sources?)", "row"))
            raise LoadError(probs, total=int(np.unique(t_codes[bad]).size))
        starts = traj_offsets[:-1]
        traj_group = g_codes[starts].astype(np.int64)
        group_traj_offsets = np.r_[0, np.cumsum(np.bincount(traj_group))].astype(np.int64)
        succ = df["success"].to_numpy()
        traj_success = np.array([bool(v) if v is not None and v == v else False
                                 for v in succ[starts]], dtype=bool)
        traj_truncated = df["_truncated"].fillna(False).to_numpy(bool)[starts]
        traj_return = df["_traj_return"].to_numpy(np.float64)[starts]
        # A writeable copy: Arrow-backed arrays are read-only, which numba types differently
        # (a second compile of the CRBC kernel).
        step_hash = np.array(df["_anchor_hash"].to_numpy(np.uint64), dtype=np.uint64, copy=True)
        groups = df.iloc[starts[group_traj_offsets[:-1]]][list(GROUP_KEY)].reset_index(drop=True)
        df["success"] = np.repeat(traj_success, traj_len)
        steps = df.drop(columns=list(_INTERNAL_DROP))
        return RolloutBatch(
            steps=steps, step_traj=np.repeat(np.arange(num_t), traj_len), step_anchor_hash=step_hash,
            traj_offsets=traj_offsets, traj_group=traj_group, traj_success=traj_success,
            traj_truncated=traj_truncated, traj_return=traj_return,
            group_traj_offsets=group_traj_offsets, groups=groups, source=str(self.root))

    # -- search --------------------------------------------------------------------------------
    def search_steps(self, text: str, limit: int = 50) -> pd.DataFrame:
        """Steps whose action or raw anchor contains ``text`` (case-insensitive)."""
        if not self.parts:
            return pd.DataFrame()
        cols = set(self._columns(self.parts))
        fields = [c for c in ("action", "anchor_obs", "anchor_obs" + _JSON_SUFFIX, "anchor_key") if c in cols]
        shown = [c for c in ("run_id", "train_step", "group_id", "traj_id", "step_idx", "action",
                             "anchor_key", "anchor_obs", "anchor_obs" + _JSON_SUFFIX, "reward", "success")
                 if c in cols]
        cond = " OR ".join(f'contains(lower("{c}"), lower(?))' for c in fields)
        df = self.con.execute(f"SELECT {', '.join(shown)} FROM {self._FROM} WHERE {cond} LIMIT ?",
                              [self._files(self.parts), *([text] * len(fields)), int(limit)]).df()
        return _decode_json(df)

    def find_trajectory(self, traj_id: str, *, text: bool = True) -> pd.DataFrame:
        """Every step of the trajectories with this ``traj_id`` (any run / step / group), in
        order, with the text columns joined."""
        if not self.parts:
            return pd.DataFrame()
        df = self.con.execute(f"SELECT * FROM {self._FROM} WHERE traj_id = ?",
                              [self._files(self.parts), str(traj_id)]).df()
        if df.empty:
            return df
        if text:
            df = self._join_text(df)
        df = _decode_json(df).sort_values(["run_id", "train_step", "group_id", "step_idx"],
                                          ignore_index=True)
        return df.drop(columns=[c for c in _INTERNAL_DROP if c in df.columns])

    def summary(self) -> dict:
        """Counts from the manifest (no data read): sources, runs, train steps, parts, steps."""
        ts = self.train_steps()
        return {
            "store": str(self.root), "sources": len(self.sources),
            "complete_sources": sum(1 for m in self.sources.values() if m.get("complete")),
            "runs": sorted(ts["run_id"].unique().tolist()),
            "train_steps": int(len(ts)), "parts": len(self.parts), "steps": self.num_steps,
            "formats": sorted({m.get("format", "?") for m in self.sources.values()}),
            **_sum_outcome_counts(self.sources.values()),
        }


_OUTCOME_COUNTS = ("trajectories", "truncated", "truncated_success")


def _outcome_counts(batch: RolloutBatch) -> dict:
    """Per-source counts kept in its manifest (docs/schema.md, "Success and truncation")."""
    from ..summary import truncation_known

    return {"trajectories": batch.num_trajectories, "truncated": int(batch.traj_truncated.sum()),
            "truncated_success": int((batch.traj_truncated & batch.traj_success).sum()),
            "done_logged": truncation_known(batch)}


def _sum_outcome_counts(manifests) -> dict:
    """Trajectory and truncation counts over the complete sources (None where one was ingested
    before they were recorded); ``truncation_known``: some source logs ``done``."""
    ms = [m for m in manifests if m.get("complete")]
    out: dict = {}
    for k in _OUTCOME_COUNTS:
        vals = [m.get(k) for m in ms]
        ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vals)
        out[k] = sum(vals) if ok else None
    flags = [m.get("done_logged") for m in ms]
    out["truncation_known"] = any(flags) if all(isinstance(v, bool) for v in flags) else None
    return out


def _read_marker(marker: Path) -> dict:
    """``store.json`` as a dict, or a `StoreError` naming it (garbage, not an object)."""
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise StoreError(f"{marker}: not a valid store marker ({str(exc)[:200]}); expected "
                         f'{{"format": "{STORE_FORMAT}", "version": {STORE_VERSION}}}') from None
    if not isinstance(meta, dict):
        raise StoreError(f"{marker}: not a valid store marker (expected a JSON object)")
    return meta


def _confined_part(root: Path, manifest: Path, rel, top: str) -> None:
    """A part path of a manifest must be a relative path under ``root/top`` that exists as a
    regular file (no ``..``, no absolute path, no symlink out of the store)."""
    bad = None
    if not isinstance(rel, str) or not rel:
        bad = "is not a path"
    elif os.path.isabs(rel) or rel.startswith(("/", "\\")) or ".." in Path(rel).parts \
            or Path(rel).parts[0] != top or "\x00" in rel:
        bad = f"is outside the store's {top}/ folder"
    else:
        full = (root / rel).resolve()
        if (root.resolve() / top) not in full.parents:
            bad = f"resolves outside the store's {top}/ folder"
        elif not full.is_file():
            bad = "is missing (deleted or never written)"
    if bad:
        raise StoreError(f"{manifest}: part {str(rel)[:300]!r} {bad}; the manifest is damaged or "
                         f"tampered with: restore the file, or remove this manifest and re-ingest "
                         f"its source")


def _check_manifest(root: Path, f: Path, m) -> None:
    """Refuse a manifest that is not what ingest writes, or that names files outside the store."""
    try:
        ok = isinstance(m, dict) and isinstance(m["digest"], str) and isinstance(m.get("parts", []), list)
        for p in m.get("parts", []) if ok else []:
            ok = ok and isinstance(p, dict) and isinstance(p["run_id"], (str, int)) \
                and not isinstance(p["train_step"], bool) and int(p["train_step"]) == p["train_step"] \
                and int(p["rows"]) >= 0
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise StoreError(f"{f}: damaged manifest (missing or mistyped digest/parts/run_id/"
                         f"train_step/rows); remove it and re-ingest its source")
    for p in m.get("parts", []):
        _confined_part(root, f, p["path"], "steps")
        if p.get("text") is not None:
            _confined_part(root, f, p["text"], "text")


class _Connection:
    """A DuckDB connection whose query errors (a corrupt, truncated or unreadable part) become
    a one-line `StoreError` instead of a DuckDB traceback."""

    def __init__(self, con, root: Path):
        self._raw, self._root = con, root

    def execute(self, *a, **k):
        import duckdb
        try:
            return self._raw.execute(*a, **k)
        except duckdb.Error as exc:
            msg = " ".join(str(exc).split("\nLINE ")[0].split())[:400]  # not the SQL text
            raise StoreError(f"{self._root}: cannot read the store's data ({type(exc).__name__}: "
                             f"{msg}); a part file may be corrupt: re-ingest its source") from None

    def __getattr__(self, name):
        return getattr(self._raw, name)


def open_store(root: str | os.PathLike) -> LogStore:
    return LogStore(root)


def _decode_json(df: pd.DataFrame) -> pd.DataFrame:
    for col in [c for c in df.columns if c.endswith(_JSON_SUFFIX)]:
        base = col[: -len(_JSON_SUFFIX)]
        vals = np.empty(len(df), dtype=object)  # filled one by one: equal-length lists stay lists
        vals[:] = [json.loads(v) if isinstance(v, str) else None for v in df[col]]
        if base in df.columns:
            cur = df[base].astype(object).to_numpy()
            vals = np.where(pd.isna(cur), vals, cur)
        df = df.drop(columns=[col])
        df[base] = vals
    return df


# ---------------------------------------------------------------------------------------------
# Writing


def file_digest(paths: Iterable[str], root: str | None = None) -> str:
    """BLAKE2b-128 over the bytes of ``paths`` (and their names relative to ``root``)."""
    h = hashlib.blake2b(digest_size=16)
    for p in paths:
        if root is not None:
            h.update(os.path.relpath(p, root).encode() + b"\0")
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def _with_run_id(digest: str, run_id: str | None) -> str:
    """The source digest, distinct per ``--run-id`` override: the same file ingested under
    another run id is another source (not skipped as already present); without an override
    the digest is the file's own, as before."""
    if run_id is None:
        return digest
    h = hashlib.blake2b(digest_size=16)
    h.update(digest.encode() + b"\0run_id\0" + str(run_id).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _arrow_column(name: str, values: pd.Series):
    """(column name, pyarrow array) for a steps column; non-scalar values go to ``<name>__json``."""
    import pyarrow as pa

    kind = _CANONICAL_TYPES.get(name)
    if kind is None:
        if values.dtype != object and not isinstance(values.dtype, pd.StringDtype):
            if isinstance(values.dtype, pd.CategoricalDtype):
                values = values.astype(object)
            else:
                return name, pa.array(values.to_numpy(), from_pandas=True)
        inferred = pd.api.types.infer_dtype(values, skipna=True)
        kind = {"string": "string", "boolean": "bool", "integer": "int64", "floating": "float64",
                "mixed-integer-float": "float64", "empty": None}.get(inferred, "json")
        if kind is None:
            return name, None
    if kind == "json":
        arr = [None if (v is None or (isinstance(v, float) and v != v)) else
               json.dumps(v.tolist() if isinstance(v, np.ndarray) else v, ensure_ascii=False, default=str)
               for v in values.to_numpy(dtype=object)]
        return name + _JSON_SUFFIX, pa.array(arr, type=pa.string())
    if kind == "string":
        obj = values.to_numpy(dtype=object)
        return name, pa.array(obj, type=pa.string(), from_pandas=True)
    typ = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}[kind]
    return name, pa.array(values.to_numpy(dtype=object), type=typ, from_pandas=True)


def _tables(batch: RolloutBatch, stem_of_row: np.ndarray, row_in_part: np.ndarray, source: str):
    """(hot table, text table or None) for the batch's steps in their final row order."""
    import pyarrow as pa

    steps = batch.steps
    hot, txt = {}, {}
    hot["_part"] = pa.array(stem_of_row, type=pa.string())
    hot["_row"] = pa.array(row_in_part, type=pa.int32())
    for c in steps.columns:
        if c in _DROP_AT_INGEST or c.startswith("_"):
            continue
        name, arr = _arrow_column(c, steps[c])
        if arr is None:
            continue
        (txt if c in TEXT_COLUMNS else hot)[name] = arr
    hot["_anchor_hash"] = pa.array(batch.step_anchor_hash, type=pa.uint64())
    hot["_traj_return"] = pa.array(np.repeat(batch.traj_return, batch.traj_len), type=pa.float64())
    hot["_truncated"] = pa.array(np.repeat(batch.traj_truncated, batch.traj_len), type=pa.bool_())
    hot["_source"] = pa.array(np.full(len(steps), source[:16], dtype=object), type=pa.string())
    text_table = None
    if txt:
        txt = {"_row": hot["_row"], **txt}
        text_table = pa.table(txt)
    return pa.table(hot), text_table


def _write_parquet(table, path: Path, *, text: bool) -> None:
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        if text:
            pq.write_table(table, tmp, compression="zstd", row_group_size=4096,
                           use_dictionary=["_row"], write_statistics=["_row"])
        else:
            pq.write_table(table, tmp, compression="zstd", row_group_size=65536)


def _write_json(path: Path, obj) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=1, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())


@contextlib.contextmanager
def _locked(root: Path):
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"{root}: another ingest is writing to this store") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _partition_dir(run_id: str, train_step: int) -> str:
    """The partition folder of a part. A long run id (a folder name is at most 255 bytes, and
    percent-encoding triples non-ASCII) keeps a readable head plus a hash of the whole id;
    readers take run ids from the manifest and the rows, never from this name."""
    q = urllib.parse.quote(str(run_id), safe='')
    if len(q) > 150:
        h = hashlib.blake2b(str(run_id).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        q = f"{q[:100]}~{h}"
    return f"run_id={q}/train_step={int(train_step)}"


def _plan_parts(batch: RolloutBatch, part_rows: int):
    """Row order (grouped by partition, batch order inside) and the part of every row: cut at
    group boundaries once a part holds ``part_rows`` rows."""
    g_run = batch.groups["run_id"].astype(str).to_numpy()
    g_step = batch.groups["train_step"].to_numpy(np.int64)
    pcode, puniq = pd.MultiIndex.from_arrays([g_run, g_step]).factorize()
    group_steps = np.bincount(batch.step_group, minlength=batch.num_groups)
    g_order = np.argsort(pcode, kind="stable")
    plan = []  # (partition (run, step), [groups])
    for code in range(len(puniq)):
        gs = g_order[pcode[g_order] == code]
        cur, n = [], 0
        for g in gs:
            if cur and n + group_steps[g] > part_rows:
                plan.append((puniq[code], cur))
                cur, n = [], 0
            cur.append(g)
            n += group_steps[g]
        if cur:
            plan.append((puniq[code], cur))
    return plan


def _crash_after() -> int | None:
    v = os.environ.get(CRASH_ENV)
    return int(v) if v else None


def _existing_traj_overlap(store: LogStore, batch: RolloutBatch, digest: str, path: str) -> list[Problem]:
    pairs = {(str(r), int(t)) for r, t in zip(batch.groups["run_id"], batch.groups["train_step"])}
    parts = [p for p in store.parts if (p.run_id, p.train_step) in pairs and p.source != digest]
    if not parts:
        return []
    first = batch.steps.iloc[batch.traj_offsets[:-1]]
    new = pd.DataFrame({"run_id": first["run_id"].astype(str).to_numpy(),
                        "train_step": first["train_step"].to_numpy(np.int64),
                        "group_id": first["group_id"].astype(str).to_numpy(),
                        "traj_id": first["traj_id"].astype(str).to_numpy()})
    store.con.register("__new_trajs", new)
    try:
        hit = store.con.execute(
            f"SELECT DISTINCT s.run_id, s.train_step, s.group_id, s.traj_id, s._source AS src FROM "
            f"{store._FROM} s JOIN __new_trajs n USING (run_id, train_step, group_id, traj_id) "
            f"LIMIT 20", [store._files(parts)]).df()
    finally:
        store.con.unregister("__new_trajs")
    by_src = {d[:16]: m.get("path", d) for d, m in store.sources.items()}
    return [Problem(path, None, "traj_id",
                    f"trajectory '{r.traj_id}' of group '{r.run_id}/{r.train_step}/{r.group_id}' is "
                    f"already in the store (from {by_src.get(r.src, r.src)}); remove one "
                    f"copy or give the files distinct run ids (--run-id)") for r in hit.itertuples()]


def incomplete_sources(store: LogStore) -> list[dict]:
    """Manifests of sources whose ingest did not finish (a crash, a kill -9): their committed
    parts are readable but the source is partial."""
    return [m for m in store.sources.values() if not m.get("complete")]


def drop_incomplete(root: str | os.PathLike) -> list[str]:
    """Remove every incomplete source from the store at ``root`` (its parts, then its manifest),
    under the ingest lock; returns the source paths dropped. Complete sources are untouched."""
    root = Path(root)
    LogStore(root)  # a store, or a StoreError
    dropped = []
    with _locked(root):
        store = LogStore(root)
        for m in incomplete_sources(store):
            for p in m.get("parts", []):
                for rel in (p.get("path"), p.get("text")):
                    if rel:
                        with contextlib.suppress(FileNotFoundError):
                            (root / rel).unlink()
            (root / "manifest" / f"{m['digest']}.json").unlink()
            dropped.append(str(m.get("path", m["digest"])))
        store.close()
    return dropped


def ingest(root: str | os.PathLike, paths, *, fmt: str = "auto", lenient: bool = False,
           success_threshold: float = 0.0, run_id: str | None = None,
           part_rows: int = DEFAULT_PART_ROWS,
           progress: Callable[[dict], None] | None = None,
           import_options: dict | None = None) -> IngestReport:
    """Normalise every log in ``paths`` into the store at ``root`` (created when missing).

    Args:
        paths: files or folders (see `crbc_viz.io.importers.expand_sources`).
        fmt: ``auto`` or a format name (``crbc_viz.io.importers.FORMATS``).
        lenient: skip bad rows (reported per source) instead of failing.
        success_threshold: see `crbc_viz.io.load_rollouts`.
        run_id: the run_id of every row (default: the log's own, else the importer's
            choice: the dump folder's run folder, else the file name).
        part_rows: the most rows per Parquet part (parts end at group boundaries).
        progress: called with a dict after each source (``path``, ``status``, ``rows``,
            ``bytes``) and each part (``part``, ``rows``).
        import_options: importer options (``reward_columns``, ``success_column``), see
            `crbc_viz.io.importers.import_source`.

    Returns:
        An `IngestReport`.

    Raises:
        LoadError: a source could not be read or validated (sources before it stay committed).
        StoreError: the folder is not a store, or another ingest holds its lock.
    """
    from ..io.importers import expand_sources

    root = Path(root)
    sources = expand_sources(paths, fmt)
    report = IngestReport()
    crash_after = _crash_after()
    committed = 0
    with _locked(root):
        store = LogStore(root, create=True)
        (root / "manifest").mkdir(exist_ok=True)
        for src in sources:
            nbytes = sum(os.path.getsize(f) for f in src.files)
            digest = _with_run_id(file_digest(src.files, src.path if len(src.files) > 1
                                              or src.files[0] != src.path else None), run_id)
            man = store.sources.get(digest)
            if man is not None and man.get("complete"):
                entry = {"path": src.path, "format": src.fmt, "status": "skipped", "rows": man["rows"],
                         "bytes": nbytes, "parts": len(man["parts"]), "notes": man.get("notes", []),
                         "warnings": []}
                report.sources.append(entry)
                if progress:
                    progress(entry)
                continue
            resumed = man is not None
            rows_of = man.get("part_rows", part_rows) if man else part_rows
            mpath = root / "manifest" / f"{digest}.json"
            had_manifest = mpath.exists()
            try:
                man, batch, imp, committed = _ingest_source(
                    root, store, src, digest, man, rows_of, run_id, import_options, lenient,
                    success_threshold, committed, crash_after, progress, stream=True)
            except _NotGroupContiguous:
                # Groups recur later in the file: chunks cannot be cut at group boundaries.
                _rollback(root, mpath, man, had_manifest)
                man = store.sources.get(digest)
                man, batch, imp, committed = _ingest_source(
                    root, store, src, digest, man, rows_of, run_id, import_options, lenient,
                    success_threshold, committed, crash_after, progress, stream=False)
            except LoadError:
                if _streams(src):
                    _rollback(root, mpath, store.sources.get(digest), had_manifest)
                raise
            man["complete"] = True
            _write_json(mpath, man)
            store.refresh()
            entry = {"path": src.path, "format": src.fmt, "status": "resumed" if resumed else "ingested",
                     "rows": man["rows"], "bytes": nbytes, "parts": len(man["parts"]),
                     "notes": list(imp.notes), "warnings": list(man["warnings"]),
                     "skipped": list(batch.skipped)}
            report.sources.append(entry)
            if progress:
                progress(entry)
        store.close()
    return report


#: Canonical JSONL sources at least this large are ingested in chunks of about
#: `STREAM_CHUNK_BYTES` cut at group boundaries, so peak memory does not grow with the file.
STREAM_MIN_BYTES = 96 << 20
STREAM_CHUNK_BYTES = 96 << 20


class _NotGroupContiguous(Exception):
    """A group's rows recur after another group's: the file must be read whole."""


def _streams(src) -> bool:
    """Whether ``src`` is ingested chunk by chunk (a large canonical JSONL file)."""
    from ..io.readers import detect_format

    if src.fmt != "canonical" or len(src.files) != 1 or os.path.getsize(src.files[0]) < STREAM_MIN_BYTES:
        return False
    try:
        return detect_format(src.files[0]) == "jsonl"
    except LoadError:
        return False


def _rollback(root: Path, mpath: Path, man: dict | None, had_manifest: bool) -> None:
    """Remove what an interrupted streamed source wrote in this run (its parts and, when it
    was new, its manifest), so a failed or restarted source leaves nothing behind."""
    try:
        cur = json.loads(mpath.read_text()) if mpath.exists() else None
    except (OSError, ValueError):
        cur = None
    keep = {p["path"] for p in (man or {}).get("parts", [])} if had_manifest else set()
    for p in (cur or {}).get("parts", []):
        if p["path"] in keep:
            continue
        for rel in (p.get("path"), p.get("text")):
            if rel:
                with contextlib.suppress(FileNotFoundError):
                    (root / rel).unlink()
    if not had_manifest:
        with contextlib.suppress(FileNotFoundError):
            mpath.unlink()
    elif man is not None:
        _write_json(mpath, man)


def _chunk_key(line: bytes):
    """(run_id, train_step, group_id) of one JSONL line, or None when it does not parse."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    return tuple(str(obj.get(k)) for k in GROUP_KEY)


def _stream_raw_chunks(src, tmp_dir: Path):
    """The source's rows as `RawTable` chunks of about `STREAM_CHUNK_BYTES`, each cut where
    the group key changes, read by the ordinary reader (every guard and message applies) and
    relabelled with the source's path and its own line numbers."""
    from ..io import _guards
    from ..io.readers import max_line_bytes, read_table

    path = src.files[0]
    limit = max_line_bytes()
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / "chunk.jsonl"
    first_line = 1
    with _guards.open_input(path) as fh:
        pending: list[bytes] = []
        size = 0
        last_key = None
        while True:
            raw = fh.readline(limit + 1)
            if raw and len(raw) > limit and not raw.endswith(b"\n"):
                raise _NotGroupContiguous()   # an over-long line: the whole-file reader reports it
            if raw and size >= STREAM_CHUNK_BYTES:
                key = _chunk_key(raw)
                if last_key is None:
                    last_key = _chunk_key(pending[-1])
                if key is None or key == last_key:
                    pending.append(raw)
                    size += len(raw)
                    if size > 4 * STREAM_CHUNK_BYTES:
                        raise _NotGroupContiguous()
                    continue
            if raw and size < STREAM_CHUNK_BYTES:
                pending.append(raw)
                size += len(raw)
                continue
            if pending:
                tmp.write_bytes(b"".join(pending))
                yield _relabel(read_table(str(tmp), "jsonl"), str(tmp), path, first_line - 1)
                first_line += len(pending)
            pending, size, last_key = ([raw], len(raw), None) if raw else ([], 0, None)
            if not raw:
                break
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()


def _relabel(raw, tmp: str, path: str, offset: int):
    """``raw`` read from a chunk file as if read from ``path``: lines shifted by ``offset``."""
    def fix(p: Problem) -> Problem:
        return Problem(path if p.path == tmp else p.path, None if p.line is None else p.line + offset,
                       p.field, p.message.replace(tmp, path), p.where)

    raw.path = path
    raw.line = raw.line + offset
    raw.problems = [fix(p) for p in raw.problems]
    raw.notes = [n.replace(tmp, path) for n in raw.notes]
    return raw


def _source_batches(root: Path, src, run_id, import_options, lenient, success_threshold, stream):
    """(batch, import) of the whole source, or of each streamed chunk in file order."""
    from ..io.importers import import_source
    from ..io.importers._common import Imported
    from ..io.schema import build_batch

    def batch_of(imp):
        if run_id is not None:
            imp.raw.records["run_id"] = run_id
        return build_batch(imp.raw, lenient=lenient, success_threshold=success_threshold), imp

    if not (stream and _streams(src)):
        yield batch_of(import_source(src, **(import_options or {})))
        return
    keys = {k: k for k in ("group_id", "traj_id", "step_idx")}
    seen: set = set()
    for raw in _stream_raw_chunks(src, root / ".ingest-tmp"):
        batch, imp = batch_of(Imported(raw, "canonical", keys))
        groups = set(batch.groups[list(GROUP_KEY)].astype(str).itertuples(index=False, name=None))
        if groups & seen:
            raise _NotGroupContiguous()
        seen |= groups
        yield batch, imp


def _ingest_source(root, store, src, digest, man, rows_of, run_id, import_options, lenient,
                   success_threshold, committed, crash_after, progress, *, stream):
    """Write one source's parts (chunk by chunk when it streams); returns the manifest, the
    last batch and import, and the running count of committed parts."""
    mpath = root / "manifest" / f"{digest}.json"
    done_paths = {p["path"] for p in man["parts"]} if man else set()
    k = 0
    first = True
    batch = imp = None
    for batch, imp in _source_batches(root, src, run_id, import_options, lenient, success_threshold, stream):
        overlap = _existing_traj_overlap(store, batch, digest, src.path)
        if overlap:
            raise LoadError(overlap)
        if first:
            man = man or {"digest": digest, "path": os.path.abspath(src.path), "format": src.fmt,
                          "source_keys": imp.source_keys, "notes": list(imp.notes),
                          "warnings": [], "skipped": 0, "rows": 0, "part_rows": rows_of, "parts": [],
                          "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
                          "complete": False}
            counts = None
            man["rows"], man["skipped"], man["warnings"] = 0, 0, []
        man["rows"] += batch.num_steps
        man["skipped"] += len(batch.skipped)
        man["warnings"] += [w for w in batch.warnings if w not in man["warnings"]]
        c = _outcome_counts(batch)
        counts = c if counts is None else {key: counts[key] + c[key] for key in c}
        man.update(counts)
        first = False
        _write_json(mpath, man)
        for (prun, pstep), gs in _plan_parts(batch, rows_of):
            stem = f"{digest[:16]}-{k:04d}"
            k += 1
            pdir = _partition_dir(prun, pstep)
            rel = f"steps/{pdir}/{stem}.parquet"
            if rel in done_paths:
                continue
            sub = batch.select_groups(gs) if len(gs) != batch.num_groups else batch
            n = sub.num_steps
            hot, txt = _tables(sub, np.full(n, stem, dtype=object), np.arange(n, dtype=np.int32), digest)
            trel = None
            if txt is not None:
                trel = f"text/{pdir}/{stem}.parquet"
                _write_parquet(txt, root / trel, text=True)
            _write_parquet(hot, root / rel, text=False)
            man["parts"].append({"path": rel, "text": trel, "run_id": str(prun),
                                 "train_step": int(pstep), "rows": n})
            _write_json(mpath, man)
            committed += 1
            if progress:
                progress({"part": rel, "rows": n})
            if crash_after is not None and committed >= crash_after:
                os._exit(17)  # test hook: simulate a crash right after a commit
    return man, batch, imp, committed
