"""Trends across training: per training step, how outcomes, anchor sharing and step credit
evolve, with per-group rows for drill-down.

`step_trends` is pure (a `RolloutBatch` in, tables out); `store_trends` runs it over a store's
training steps one at a time (bounded memory) and caches the result in the store's ``cache/``
keyed by the manifest fingerprint and the parameters.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..data import RolloutBatch
from .agreement import group_spearman

__all__ = ["Trends", "step_trends", "store_trends", "TREND_COLUMNS", "GROUP_COLUMNS"]

log = logging.getLogger(__name__)

#: Columns of `Trends.steps` (one row per run and training step).
TREND_COLUMNS = (
    "run_id",
    "train_step",
    "groups",
    "trajectories",
    "steps",
    "success_rate",
    "shared_step_fraction",
    "nonzero_credit_fraction",
    "credit_abs_mean",
    "trainer_adv_abs_mean",
    "disagreement",
)
#: Columns of `Trends.groups` (one row per group).
GROUP_COLUMNS = (
    "run_id",
    "train_step",
    "group_id",
    "rollouts",
    "steps",
    "success_rate",
    "shared_step_fraction",
    "nonzero_credit_fraction",
    "credit_abs_mean",
    "trainer_adv_abs_mean",
    "disagreement",
)
_EPS = 1e-9


@dataclass(frozen=True)
class Trends:
    """``steps``: one row per (run, train_step) (`TREND_COLUMNS`); ``groups``: one row per group
    (`GROUP_COLUMNS`), the drill-down of each training step; ``estimators``: the pair compared."""

    steps: pd.DataFrame
    groups: pd.DataFrame
    estimators: tuple[str, str]

    def groups_of(self, train_step: int, run: str | None = None) -> pd.DataFrame:
        g = self.groups[self.groups["train_step"] == int(train_step)]
        if run is not None:
            g = g[g["run_id"] == run]
        return g.reset_index(drop=True)


def step_trends(
    batch: RolloutBatch, *, estimators: tuple[str, str] = ("crbc", "shortest_path"), backend: str = "auto"
) -> tuple[dict, pd.DataFrame]:
    """Metrics of one training step's batch.

    Per group: success rate (trajectories), shared-step fraction (steps whose anchor another
    rollout of the group also visits), the fraction of steps whose ``estimators[0]`` credit is
    non-zero (|c| > 1e-9) and their mean |c|, the mean |advantage| the trainer logged (the
    ``advantage`` field; NaN without it), and the disagreement ``1 - rho`` between the two estimators' step
    credits (Spearman's rho within the group; NaN where either credit is constant). The step
    row aggregates them: rates over all trajectories / steps, disagreement as the mean over
    groups where it is defined.

    Returns:
        (step row as a dict with `TREND_COLUMNS` minus run/train_step, group table).
    """
    from ..api import score
    from ..graph import build_graph

    graph = build_graph(batch)
    G = batch.num_groups
    sg = batch.step_group
    main = score(graph, estimators[0], backend=backend).credit
    other = score(graph, estimators[1], backend=backend if estimators[1] == estimators[0] else "auto").credit
    absc = np.abs(np.nan_to_num(main))
    nonzero = (absc > _EPS).astype(np.float64)
    if "advantage" in batch.steps:
        tadv = np.abs(pd.to_numeric(batch.steps["advantage"], errors="coerce").to_numpy(np.float64))
    else:
        tadv = np.full(batch.num_steps, np.nan)
    tok = np.isfinite(tadv)
    shared = graph.shared_step_mask().astype(np.float64)
    steps = np.bincount(sg, minlength=G)
    rollouts = np.diff(batch.group_traj_offsets)
    rho = group_spearman(sg, np.nan_to_num(main), np.nan_to_num(other), G)
    groups = pd.DataFrame(
        {
            "run_id": batch.groups["run_id"].to_numpy(),
            "train_step": batch.groups["train_step"].to_numpy(),
            "group_id": batch.groups["group_id"].to_numpy(),
            "rollouts": rollouts,
            "steps": steps,
            "success_rate": np.bincount(batch.traj_group, batch.traj_success, G) / np.maximum(rollouts, 1),
            "shared_step_fraction": np.bincount(sg, shared, G) / np.maximum(steps, 1),
            "nonzero_credit_fraction": np.bincount(sg, nonzero, G) / np.maximum(steps, 1),
            "credit_abs_mean": np.bincount(sg, absc, G) / np.maximum(steps, 1),
            "trainer_adv_abs_mean": _masked_mean(sg, tadv, tok, G),
            "disagreement": 1.0 - rho,
        }
    )
    S = max(batch.num_steps, 1)
    row = {
        "groups": G,
        "trajectories": batch.num_trajectories,
        "steps": batch.num_steps,
        "success_rate": float(batch.traj_success.mean()) if batch.num_trajectories else float("nan"),
        "shared_step_fraction": float(shared.sum() / S),
        "nonzero_credit_fraction": float(nonzero.sum() / S),
        "credit_abs_mean": float(absc.sum() / S),
        "trainer_adv_abs_mean": float(tadv[tok].mean()) if tok.any() else float("nan"),
        "disagreement": float(np.nanmean(1.0 - rho)) if np.isfinite(rho).any() else float("nan"),
    }
    return row, groups


def _masked_mean(group: np.ndarray, x: np.ndarray, ok: np.ndarray, G: int) -> np.ndarray:
    """Per-group mean of ``x`` over rows where ``ok`` (NaN for a group with none)."""
    n = np.bincount(group, ok.astype(np.float64), G)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.bincount(group, np.where(ok, x, 0.0), G) / n, np.nan)


#: `step_trends` results of the train steps this process computed, keyed by the partition's
#: part names and row counts (least recently used dropped beyond `STEP_MEMO_MAX`).
_STEP_MEMO: OrderedDict = OrderedDict()
STEP_MEMO_MAX = 4096


def store_trends(
    store,
    *,
    run: str | None = None,
    estimators: tuple[str, str] = ("crbc", "shortest_path"),
    backend: str = "auto",
    cache: bool = True,
    progress=None,
) -> Trends:
    """`step_trends` over every (run, train_step) of a `LogStore`, cached in ``cache/`` (a
    cache that cannot be written, as in a read-only store, is logged as a warning and skipped)."""
    from ..io.write import write_frame

    key = _cache_name("trends", store.fingerprint, run, *estimators, TREND_COLUMNS, GROUP_COLUMNS)
    cdir = store.root / "cache"
    spath, gpath = cdir / f"{key}.steps.parquet", cdir / f"{key}.groups.parquet"
    if cache and spath.exists() and gpath.exists():
        cached = _read_cached(spath, gpath)
        if cached is not None:
            return Trends(*cached, tuple(estimators))
    rows, groups = [], []
    parts = store.train_steps(run)
    for r in parts.itertuples():
        # A partition's parts are named by their source's content digest: the same names and
        # row counts are the same rows, so a store that grows (a followed run) computes only
        # its new or changed train steps again.
        memo = (
            str(r.run_id),
            int(r.train_step),
            tuple(sorted((p.path, p.rows) for p in store.select_parts(r.run_id, int(r.train_step)))),
            tuple(estimators),
            backend,
        )
        if memo in _STEP_MEMO:
            _STEP_MEMO.move_to_end(memo)
            row, g = _STEP_MEMO[memo]
        else:
            batch = store.load_batch(run=r.run_id, train_step=int(r.train_step), anchor_obs=False)
            row, g = step_trends(batch, estimators=estimators, backend=backend)
            del batch
            _STEP_MEMO[memo] = (row, g)
            while len(_STEP_MEMO) > STEP_MEMO_MAX:
                _STEP_MEMO.popitem(last=False)
        rows.append({"run_id": r.run_id, "train_step": int(r.train_step), **row})
        groups.append(g)
        if progress:
            progress(r.run_id, int(r.train_step))
    steps = pd.DataFrame(rows, columns=list(TREND_COLUMNS))
    gdf = pd.concat(groups, ignore_index=True) if groups else pd.DataFrame(columns=list(GROUP_COLUMNS))
    for c in ("run_id", "group_id"):
        gdf[c] = gdf[c].astype(str)
    steps["run_id"] = steps["run_id"].astype(str)
    if cache:
        try:
            for df, path in ((steps, spath), (gdf, gpath)):
                if getattr(path, "is_remote", False):  # a store on S3: one PUT per table
                    df.to_parquet(path.location, filesystem=path.filesystem, index=False, compression="zstd")
                else:
                    write_frame(df, path)
        except OSError as exc:  # a read-only store (or disk full): the result stands, uncached
            log.warning("trends not cached: cannot write to %s (%s)", cdir, exc)
    return Trends(steps, gdf, tuple(estimators))


def _cache_name(*parts) -> str:
    """A file name for a cache entry: the parts hashed (a run id like ``../x`` never becomes
    a path), with a readable prefix."""
    import hashlib

    h = hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    return f"{parts[0]}-{h}"


def _read_cached(spath, gpath):
    """The cached (steps, groups) tables, or None when a file is unreadable (a corrupt cache
    is recomputed and rewritten, never an error)."""
    try:
        if getattr(spath, "is_remote", False):  # a store on S3 (crbc_viz.store.s3.S3Path)
            return tuple(pd.read_parquet(p.location, filesystem=p.filesystem) for p in (spath, gpath))
        return pd.read_parquet(spath), pd.read_parquet(gpath)
    except Exception:  # pyarrow raises several types for a damaged file
        return None
