"""Re-score a whole store: every group of every train step, one train step at a time, on this
process (``engine="local"``) or on a Ray cluster (``engine="ray"``, Ray Data).

The unit of work is one partition of the store, ``(run_id, train_step)``: a group never crosses
a train step, so each unit is scored on its own and nothing is shuffled between workers. Both
engines run the same `score_unit` on the same unit and write the same file, so their outputs are
equal bit for bit (`tests/store/test_rescore.py`).

Output layout (partitioned like the store)::

    OUT/run_id=<run>/train_step=<n>/credit.parquet   the `CreditResult.to_arrow` rows of every
                                                    estimator that ran, estimators in the order named
    OUT/rescore.json                                what was scored: estimators, parameters, anchor
                                                    rule, every unit's rows and refusals; written last

Each partition file is written atomically (temporary name, then rename); ``rescore.json`` is
written after every unit finished, so a folder without it is an interrupted run. The output
folder must be new or empty: a run never mixes into an earlier one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StoreError
from .layout import _partition_dir

__all__ = ["ENGINES", "OUTPUT_FILE", "MANIFEST", "Unit", "RescoreReport", "units_of", "score_unit", "rescore"]

log = logging.getLogger(__name__)

ENGINES = ("local", "ray")
OUTPUT_FILE = "credit.parquet"
MANIFEST = "rescore.json"
FORMAT = "crbc-viz-rescore"


@dataclass(frozen=True)
class Unit:
    """One partition of the store: the groups of one train step of one run."""

    run_id: str
    train_step: int

    @property
    def folder(self) -> str:
        return _partition_dir(self.run_id, self.train_step)


@dataclass
class RescoreReport:
    """What a re-scoring wrote: per unit its rows and the estimators that refused its input."""

    out: str
    estimators: list[str]
    units: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(u["rows"] for u in self.units)

    @property
    def steps(self) -> int:
        return sum(u["steps"] for u in self.units)

    @property
    def unit_seconds(self) -> float:
        """The units' own time (load + score + write), summed over the units."""
        return sum(u.get("seconds", 0.0) for u in self.units)

    @property
    def refused(self) -> dict[str, list[str]]:
        """``{estimator: ["run/train_step", ...]}`` of every refusal."""
        out: dict[str, list[str]] = {}
        for u in self.units:
            for name in u["refused"]:
                out.setdefault(name, []).append(f"{u['run_id']}/{u['train_step']}")
        return out


def units_of(store, run: str | None = None) -> list[Unit]:
    """Every ``(run_id, train_step)`` of ``store`` (from its manifests), in order."""
    table = store.train_steps(run)
    return [Unit(str(r), int(t)) for r, t in zip(table["run_id"], table["train_step"])]


def score_unit(
    store_root: str,
    unit: Unit,
    names: list[str],
    params: dict,
    out: str,
    *,
    rule=None,
    backend: str = "auto",
) -> dict:
    """Score one unit with ``names`` and write ``out/<unit folder>/credit.parquet``; the time it
    took is in ``seconds``.

    ``rule`` is the anchor rule (`crbc_viz.io.anchor_rules`; None: exact). Runs in the caller's
    process or in a Ray worker: it opens the store itself and takes only picklable arguments.

    Returns:
        ``{"run_id", "train_step", "steps", "rows", "refused": {name: message}, "seconds"}``.
    """
    import pyarrow as pa

    from ..api import score_each
    from ..io.anchor_rules import EXACT, using
    from ..io.write import write_table
    from .query import open_store

    t0 = time.perf_counter()
    rule = EXACT if rule is None else rule
    with open_store(store_root) as store, using(rule):
        batch = store.load_batch(run=unit.run_id, train_step=unit.train_step, anchor_obs=False)
    results, refused = {}, {}
    for chosen, group in _by_backend(names, backend).items():
        r, f = score_each(batch, group, _params_of(group, params), device="cpu", backend=chosen)
        results.update(r)
        refused.update(f)
    results = {n: results[n] for n in names if n in results}
    refused = {n: refused[n] for n in names if n in refused}
    rows = 0
    if results:
        table = pa.concat_tables([r.to_arrow() for r in results.values()])
        target = Path(out) / unit.folder / OUTPUT_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        write_table(table, target)
        rows = table.num_rows
    return {
        "run_id": unit.run_id,
        "train_step": unit.train_step,
        "steps": int(batch.num_steps),
        "rows": rows,
        "refused": {n: str(e).splitlines()[0][:500] for n, e in refused.items()},
        "seconds": time.perf_counter() - t0,
    }


def _by_backend(names: list[str], backend: str) -> dict[str, list[str]]:
    """``{backend: [names]}``. ``auto`` is decided here, by the estimator alone (numba where it
    has a kernel and is installed, else numpy), never by what a process loaded before: a unit
    scores the same on the driver and on any worker, whatever it scored first (`api.score`'s
    ``auto`` also weighs what is loaded, which is right for one call and not for a whole run)."""
    if backend != "auto":
        return {backend: list(names)}
    from ..backends import numba as nb
    from ..estimators import registry

    out: dict[str, list[str]] = {}
    for n in names:
        b = "numba" if nb.available() and registry.kernel(n, "numba") is not None else "numpy"
        out.setdefault(b, []).append(n)
    return out


def _params_of(group: list[str], params: dict) -> dict:
    """``params`` for the estimators of ``group``: the shared ones they take, and their own."""
    import dataclasses

    from ..estimators import registry

    fields = set().union(*({f.name for f in dataclasses.fields(registry.get(n).params_cls)} for n in group))
    shared = {k: v for k, v in params.get("*", {}).items() if k in fields}
    return {**({"*": shared} if shared else {}), **{n: params[n] for n in group if n in params}}


def check_params(names: list[str], params: dict) -> None:
    """A shared parameter no estimator of ``names`` takes is an error before anything runs."""
    import dataclasses

    from ..errors import EstimatorInputError
    from ..estimators import registry

    fields = set().union(*({f.name for f in dataclasses.fields(registry.get(n).params_cls)} for n in names))
    unused = set(params.get("*", {})) - fields
    if unused:
        raise EstimatorInputError(f"unknown parameter(s) {', '.join(sorted(unused))} for {', '.join(names)}")


def _check_out(out: str) -> None:
    p = Path(out)
    if p.exists() and (not p.is_dir() or any(p.iterdir())):
        raise StoreError(
            f"{out}: the output of a whole-store re-scoring must be a new or empty folder "
            f"(it holds {'a file' if not p.is_dir() else 'files already'}); name another one"
        )


def rescore(
    store_root: str,
    names: list[str],
    params: dict,
    out: str,
    *,
    engine: str = "local",
    address: str | None = None,
    run: str | None = None,
    rule=None,
    backend: str = "auto",
    num_cpus: int | None = None,
) -> RescoreReport:
    """Re-score every group of every train step of the store at ``store_root`` into ``out``.

    Args:
        engine: ``"local"`` (this process, one unit after another) or ``"ray"`` (Ray Data: one
            task per unit on the cluster at ``address``, or a local Ray started here).
        address: a Ray cluster address (``ray://host:10001`` or ``auto``); None starts a local
            Ray with ``num_cpus`` CPUs (default: every core).
        run: only this run.

    Raises:
        StoreError: the store is empty, or ``out`` is not new or empty.
        MissingExtra: ``engine="ray"`` without Ray installed (``pip install 'crbc-viz[ray]'``).
    """
    from .query import open_store

    if engine not in ENGINES:
        raise StoreError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    _check_out(out)
    check_params(names, params)
    with open_store(store_root) as store:
        units = units_of(store, run)
    if not units:
        raise StoreError(f"{store_root}: no train steps to re-score{f' in run {run!r}' if run else ''}")
    t0 = time.perf_counter()
    args = (names, params, out)
    kw = {"rule": rule, "backend": backend}
    if engine == "local":
        done = [score_unit(store_root, u, *args, **kw) for u in units]
    else:
        done = _on_ray(store_root, units, args, kw, address=address, num_cpus=num_cpus)
    done.sort(key=lambda d: (d["run_id"], d["train_step"]))
    report = RescoreReport(out=out, estimators=list(names), units=done, seconds=time.perf_counter() - t0)
    _write_manifest(report, params, rule)
    return report


def _on_ray(store_root: str, units: list[Unit], args: tuple, kw: dict, *, address, num_cpus) -> list[dict]:
    """Each unit as one row of a Ray Dataset, scored by `score_unit` in ``map_batches`` (one row
    per batch: a unit is never split, nothing is shuffled)."""
    from .._extras import require

    ray = require("ray", "score --engine ray")
    started = False
    if not ray.is_initialized():
        init = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        if address:
            ray.init(address=address, **init)
        else:
            ray.init(num_cpus=num_cpus or os.cpu_count(), **init)
        started = True
    try:
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # no per-dataset INFO lines
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        items = [{"run_id": u.run_id, "train_step": u.train_step} for u in units]
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        scored = ds.map_batches(
            _ray_batch,
            batch_size=1,
            batch_format="pyarrow",
            fn_kwargs={"store_root": store_root, "args": args, "kw": kw},
        )
        rows = scored.take_all()
    finally:
        if started:
            ray.shutdown()
    return [{**r, "refused": json.loads(r["refused"])} for r in rows]


def _ray_batch(batch, *, store_root: str, args: tuple, kw: dict):
    """`map_batches` body: score the batch's units (one, with ``batch_size=1``)."""
    import pyarrow as pa

    done = [
        score_unit(store_root, Unit(str(r), int(t)), *args, **kw)
        for r, t in zip(batch.column("run_id").to_pylist(), batch.column("train_step").to_pylist())
    ]
    return pa.table(
        {
            "run_id": [d["run_id"] for d in done],
            "train_step": [d["train_step"] for d in done],
            "steps": [d["steps"] for d in done],
            "rows": [d["rows"] for d in done],
            "refused": [json.dumps(d["refused"], sort_keys=True) for d in done],
            "seconds": [d["seconds"] for d in done],
        }
    )


def _file_of(u: dict) -> str | None:
    """A unit's output file, relative to the output folder (None: every estimator refused it)."""
    return f"{Unit(u['run_id'], u['train_step']).folder}/{OUTPUT_FILE}" if u["rows"] else None


def _write_manifest(report: RescoreReport, params: dict, rule) -> None:
    from ..io.write import atomic_path

    meta = {
        "format": FORMAT,
        "version": 1,
        "estimators": report.estimators,
        "params": params,
        "anchor_rule": "exact" if rule is None else rule.describe(),
        # no timings: the folder is the same bytes on every engine and run
        "units": [
            {**{k: v for k, v in u.items() if k != "seconds"}, "file": _file_of(u)} for u in report.units
        ],
        "steps": report.steps,
        "rows": report.rows,
    }
    target = Path(report.out) / MANIFEST
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1, ensure_ascii=False, default=str)
            fh.flush()
            os.fsync(fh.fileno())
