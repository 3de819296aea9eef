"""Scored advantages back to the trainer: one row per step keyed the way the trainer keys it."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

__all__ = ["export_scores"]


def _trainer_keys(store, steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """Trainer key columns (``uid``, ``traj_uid``, ``step`` ...) from each source's mapping."""
    src = steps["_source"].astype(str).to_numpy() if "_source" in steps else np.full(len(steps), "")
    out: dict[str, np.ndarray] = {}
    for digest, man in store.sources.items():
        mask = src == digest[:16]
        if not mask.any():
            continue
        for key, col in (man.get("source_keys") or {}).items():
            if col not in steps:
                continue
            arr = out.setdefault(key, np.full(len(steps), None, dtype=object))
            arr[mask] = steps[col].to_numpy(dtype=object)[mask]
    return out


def export_scores(
    store,
    estimator: str,
    out: str | os.PathLike,
    *,
    run: str | None = None,
    train_step: int | None = None,
    backend: str = "auto",
    params: dict | None = None,
    progress=None,
) -> pd.DataFrame:
    """Score every (run, train_step) of ``store`` with ``estimator`` and write the per-step
    result (`crbc_viz.result.OUTPUT_COLUMNS`) plus the trainer's own keys (columns named as
    the trainer names them, captured at import) and its ``advantage`` as
    ``trainer_advantage`` when it was logged. Written atomically (Parquet / CSV / JSONL by
    extension); returns the table."""
    from ..api import score
    from ..io.write import check_output, write_frame

    # never over the store's own parts, before any scoring (a store on S3 holds no local file)
    check_output(out, [] if getattr(store.root, "is_remote", False) else [store.root])
    frames = []
    for r in store.train_steps(run).itertuples():
        if train_step is not None and int(r.train_step) != int(train_step):
            continue
        batch = store.load_batch(run=r.run_id, train_step=int(r.train_step), anchor_obs=False)
        res = score(batch, estimator, backend=backend, **(params or {}))
        frame = res.to_frame()
        steps = batch.steps
        for key, vals in _trainer_keys(store, steps).items():
            if key in frame.columns:
                if key in steps and np.array_equal(frame[key].to_numpy(dtype=object), vals):
                    continue
                key = f"trainer_{key}"
            frame[key] = vals
        if "advantage" in steps:
            frame["trainer_advantage"] = pd.to_numeric(steps["advantage"], errors="coerce").to_numpy()
        frames.append(frame)
        if progress:
            progress(r.run_id, int(r.train_step))
    if not frames:
        from ..errors import StoreError

        what = (
            "no log has been ingested into it yet"
            if store.train_steps().empty
            else (f"no group matches run={run!r} train_step={train_step!r}")
        )
        raise StoreError(f"{store.root}: nothing to export: {what}")
    table = pd.concat(frames, ignore_index=True)
    write_frame(table, out)
    return table
