"""The read side of a log store: `LogStore` (manifests, DuckDB queries over the parts, batch
assembly), group references, incomplete sources."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .._arrow import array, call, cast, numbers, take, texts
from ..data import ArrowRows, RolloutBatch, batch_from_columns
from ..errors import MAX_LISTED, LoadError
from ..io.anchor_rules import active as active_rule
from ..io.anchor_rules import rekey
from ..io.arrow_rows import column_values, hold
from ..io.assemble import group_traj_codes, sort_rows
from ..io.write import atomic_path
from .layout import (
    _INTERNAL_DROP,
    _JSON_SUFFIX,
    STORE_FILE,
    STORE_FORMAT,
    STORE_VERSION,
    Part,
    StoreError,
    _check_manifest,
    _read_marker,
    _sum_outcome_counts,
    glob_literal,
)
from .manifests import _manifest_parts, _sum_import_counts, hidden_sources, incomplete_sources
from .rows import (
    StoreFrame,
    decode_json,
    flags,
    join_text,
    objects,
    page_frame,
    part_codes,
    read,
    row_numbers,
    split_steps,
)
from .s3 import LEASE_NAME, is_remote, store_root
from .scan import _Connection, _s3_dataset

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LogStore", "open_store", "parse_group_label", "incomplete_sources", "hidden_sources"]

#: A manifest read less than this after its mtime is parsed again on the next refresh.
_SAME_MTIME_NS = 2_000_000_000
#: Per store folder, the manifests this process parsed (`LogStore.refresh`'s cache: each keyed
#: by its file's name, size, mtime and inode); the oldest folder dropped beyond `MANIFESTS_MAX`.
_MANIFESTS: dict[str, dict] = {}
MANIFESTS_MAX = 16
#: Group references this process resolved (`LogStore.resolve_group`), by store folder, parts
#: and reference; the oldest dropped beyond `RESOLVED_MAX`.
_RESOLVED: dict[tuple, tuple[str, int, str]] = {}
_MEMO_LOCK = threading.Lock()
RESOLVED_MAX = 1024
#: Datasets of parts (a store on S3) one connection keeps registered.
VIEWS_MAX = 64


def parse_group_label(label: str) -> list[tuple[str | None, int | None, str]]:
    """Candidate (run_id, train_step, group_id) readings of a group reference: a bare group id,
    or ``run/train_step/group_id`` as ``RolloutBatch.group_label`` writes it."""
    out: list[tuple[str | None, int | None, str]] = [(None, None, label)]
    parts = label.split("/")
    for i in range(1, len(parts) - 1):
        if parts[i].lstrip("-").isdigit():
            out.append(("/".join(parts[:i]), int(parts[i]), "/".join(parts[i + 1 :])))
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
        self.root = store_root(root)  # a Path, or an S3Path for s3://BUCKET/PREFIX
        self._remote = is_remote(self.root)
        self._views: dict[tuple, str] = {}
        marker = self.root / STORE_FILE
        if not marker.exists():
            if not create:
                raise StoreError(
                    f"{self.root}: not a crbc-viz store (no {STORE_FILE}); create one "
                    f"with `crbc-viz ingest LOG --store {self.root}`"
                )
            writer = LEASE_NAME if self._remote else ".lock"
            if self.root.exists() and any(p.name != writer for p in self.root.iterdir()):
                raise StoreError(
                    f"{self.root}: folder is not empty and not a crbc-viz store; "
                    f"choose a new folder for the store"
                )
            self.root.mkdir(parents=True, exist_ok=True)
            if self._remote:  # one PUT: whole or absent
                marker.write_text(json.dumps({"format": STORE_FORMAT, "version": STORE_VERSION}))
            else:
                with atomic_path(marker) as tmp:
                    Path(tmp).write_text(json.dumps({"format": STORE_FORMAT, "version": STORE_VERSION}))
        meta = _read_marker(marker)
        if meta.get("format") != STORE_FORMAT or meta.get("version") != STORE_VERSION:
            raise StoreError(
                f"{marker}: expected format {STORE_FORMAT!r} version {STORE_VERSION}, "
                f"got {meta.get('format')!r} version {meta.get('version')}"
                + (
                    "; ingest its logs again into a new store (anchor keys changed: booleans "
                    "are no longer numbers)"
                    if meta.get("format") == STORE_FORMAT and meta.get("version") == 1
                    else ""
                )
            )
        self._con = None
        self.refresh()

    # -- manifest ------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the manifests (parts committed since opening become visible). A manifest file
        this object already read, unchanged since (name, size, mtime, inode), is not parsed again,
        so a long-lived store (the `crbc_viz.store.watch` follower) refreshes in one listing.

        ``manifests`` holds every manifest; ``sources`` and ``parts`` only the visible ones: a
        source replaced by a newer version of the same log (``replaces`` in that version's
        manifest, `crbc_viz.store.ingest` with ``replace=True``) is hidden once the newer
        version is complete, and the newer version is hidden while it is incomplete, so readers
        switch from one whole version to the other and never see both."""
        # Manifests this process already parsed for this folder, by any `LogStore` of it (a
        # page's rerun opens the store again: a listing, not a re-read).
        cache = getattr(self, "_mcache", None) or _MANIFESTS.get(str(self.root), {})
        fresh: dict = {}
        manifests: dict[str, dict] = {}
        own_parts: dict[str, tuple[Part, ...]] = {}
        mdir = self.root / "manifest"
        try:
            entries = sorted(
                (
                    e
                    for e in (mdir.scandir() if self._remote else os.scandir(mdir))
                    if e.name.endswith(".json")
                ),
                key=lambda e: e.name,
            )
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        if self._remote:
            self.root.forget_listing()  # the parts' keys are listed again (one listing per top folder)
        for e in entries:
            f = e.path  # a str: a Path per manifest would be most of a refresh's time (an S3Path on S3)
            try:
                st = e.stat()
                key = (e.name, st.st_size, st.st_mtime_ns, st.st_ino)
                if key in cache and cache[key][2]:
                    m, mparts, trusted = cache[key]
                else:
                    # Trusted next time only when it was read well after its last write (a
                    # rewrite within the file system's time granularity keeps the mtime). On S3
                    # never: the mtime is the server's clock, and a rewrite keeps the size.
                    trusted = not self._remote and time.time_ns() - st.st_mtime_ns > _SAME_MTIME_NS
                    if self._remote:
                        m = json.loads(f.read_text())
                    else:
                        with open(f, encoding="utf-8") as fh:
                            m = json.loads(fh.read())
                    try:
                        _check_manifest(self.root, f if self._remote else Path(f), m)
                    except StoreError:
                        if f.exists() if self._remote else os.path.exists(f):
                            raise
                        continue  # removed, then its parts, while this was read
                    mparts = _manifest_parts(m)
            except FileNotFoundError:
                continue  # removed since the listing (drop-incomplete, a replaced version)
            except StoreError:
                raise  # a part it names is refused: that message, whole (it names the manifest)
            except (OSError, ValueError, RecursionError) as exc:  # never half-written (atomic)
                raise StoreError(
                    f"{f}: unreadable manifest ({str(exc)[:200]}); restore it "
                    f"or remove it and re-ingest its source"
                ) from None
            fresh[key] = (m, mparts, trusted)
            manifests[m["digest"]] = m
            own_parts[m["digest"]] = mparts
        self._mcache = fresh
        with _MEMO_LOCK:
            _MANIFESTS[str(self.root)] = fresh
            while len(_MANIFESTS) > MANIFESTS_MAX:
                _MANIFESTS.pop(next(iter(_MANIFESTS)))
        self.manifests: dict[str, dict] = manifests
        self.hidden: set[str] = hidden_sources(manifests)
        self.sources: dict[str, dict] = {d: m for d, m in manifests.items() if d not in self.hidden}
        order = sorted(self.sources.values(), key=lambda m: (str(m.get("started_at", "")), m["digest"]))
        self.parts: list[Part] = [p for m in order for p in own_parts[m["digest"]]]
        self._ranks: dict | None = None

    @property
    def _rank(self) -> dict[str, int]:
        """Each visible part's place in `parts`, by its file's stem (the rows' ``_part``)."""
        if self._ranks is None:
            self._ranks = {os.path.basename(p.path).rsplit(".", 1)[0]: i for i, p in enumerate(self.parts)}
        return self._ranks

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
        """A part's path as DuckDB is given it: absolute (no ``~`` expansion) and matched
        literally (a glob character in the store's folder name is escaped)."""
        return glob_literal(os.path.abspath(self.root / rel))

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
            self._views.clear()  # registered with that connection

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- selection -----------------------------------------------------------------------------
    def select_parts(self, run: str | None = None, train_step: int | None = None) -> list[Part]:
        return [
            p
            for p in self.parts
            if (run is None or p.run_id == run) and (train_step is None or p.train_step == int(train_step))
        ]

    # No SQL text ever comes from data: part paths travel as a bound list parameter (the ``?``
    # in `_FROM`, whose value is `_files`), values as parameters, and the only identifiers in any
    # statement are the constant column names written in this module. Field names from a log
    # are never pasted into SQL: a field named as a DuckDB script would be executed.
    _FROM = "read_parquet(?, union_by_name=true, hive_partitioning=false)"

    def _files(self, parts: list[Part]) -> list[str]:
        return [self._abs(p.path) for p in parts]

    def _scan(self, parts: list[Part]) -> tuple[str, list]:
        """The FROM item over the steps files of ``parts`` and the parameters it binds first:
        `_FROM` with the files' paths (a folder), or the name of a pyarrow dataset of the
        objects registered with the connection (a store on S3: DuckDB reads no s3:// URL)."""
        if not self._remote:
            return self._FROM, [self._files(parts)]
        return self._view([p.path for p in parts]), []

    def _view(self, rels: list[str]) -> str:
        """The connection's name of a pyarrow dataset over the objects ``rels`` (keys below the
        store's prefix), their columns united by name as ``read_parquet(union_by_name=true)``
        unites them; one per list of objects (parts are written once), the oldest dropped
        beyond `VIEWS_MAX`."""
        key = tuple(rels)
        name = self._views.get(key)
        if name is None:
            try:
                dset = _s3_dataset(self.root, rels)
            except (OSError, ValueError) as exc:  # pyarrow's errors (ArrowInvalid: a ValueError)
                raise StoreError(
                    f"{self.root}: cannot read the store's data ({type(exc).__name__}: "
                    f"{' '.join(str(exc).split())[:300]}); a part may be corrupt: re-ingest its source"
                ) from None
            self._nviews = getattr(self, "_nviews", 0) + 1
            name = f"__s3_parts_{self._nviews}"
            self.con.register(name, dset)
            self._views[key] = name
            while len(self._views) > VIEWS_MAX:
                self.con.unregister(self._views.pop(next(iter(self._views))))
        return name

    def _columns(self, parts: list[Part]) -> list[str]:
        frm, pre = self._scan(parts)
        return [r[0] for r in self.con.execute(f"DESCRIBE SELECT * FROM {frm}", pre).fetchall()]

    @staticmethod
    def _where(
        group: tuple | None = None,
        env: str | None = None,
        run: str | None = None,
        train_step: int | None = None,
    ) -> tuple[str, list]:
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

    _SUCCESS = {
        "yes": "bool_or(coalesce(success, false))",
        "no": "NOT bool_or(coalesce(success, false))",
        "mixed": "bool_or(coalesce(success, false)) AND NOT bool_and(coalesce(success, false))",
    }

    def _select(
        self,
        select: str,
        parts: list[Part],
        *,
        group=None,
        env=None,
        success=None,
        run=None,
        train_step=None,
        tail: str = "",
        arrow: bool = False,
    ):
        """``SELECT <select> FROM <filtered steps> <tail>`` as a frame (a table a page shows)
        or, with ``arrow``, an Arrow table; the group-level success filter keeps whole groups.
        ``select`` and ``tail`` are constant SQL written in this module."""
        where, params = self._where(group, env, run, train_step)
        frm, pre = self._scan(parts)
        src = f"(SELECT * FROM {frm} WHERE {where})"
        params = [*pre, *params]
        if success is not None:
            if success not in self._SUCCESS:
                raise ValueError(f"success filter must be one of {', '.join(self._SUCCESS)}, got {success!r}")
            src = (
                f"(SELECT s.* FROM {src} s SEMI JOIN (SELECT run_id, train_step, group_id FROM "
                f"{src} GROUP BY ALL HAVING {self._SUCCESS[success]}) k "
                f"USING (run_id, train_step, group_id))"
            )
            params = params + params
        sql = f"SELECT {select} FROM {src} AS src {tail}"
        return read(self.con.arrow(sql, params)) if arrow else self.con.execute(sql, params).df()

    # -- listing -------------------------------------------------------------------------------
    def train_steps(self, run: str | None = None) -> pd.DataFrame:
        """``run_id``, ``train_step``, ``steps`` for every partition (from the manifest)."""
        import pandas as pd

        rows = {}
        for p in self.select_parts(run):
            rows[(p.run_id, p.train_step)] = rows.get((p.run_id, p.train_step), 0) + p.rows
        return pd.DataFrame(
            [{"run_id": r, "train_step": t, "steps": n} for (r, t), n in rows.items()],
            columns=["run_id", "train_step", "steps"],
        ).sort_values(["run_id", "train_step"], ignore_index=True)

    def groups(
        self,
        *,
        run: str | None = None,
        train_step: int | None = None,
        env: str | None = None,
        success: str | None = None,
        group: str | None = None,
    ) -> pd.DataFrame:
        """One row per group: ids, ``env_name``, ``rollouts``, ``steps``, ``success_rate``.

        ``group`` (a reference, see `parse_group_label`) reads only the partitions each of its
        readings can lie in: ``run/train_step/group_id`` the one partition, a bare id every
        partition (probed on ``group_id`` alone before the counts are taken)."""
        import pandas as pd

        cols = ["run_id", "train_step", "group_id", "env_name", "rollouts", "steps", "success_rate"]
        frames = []
        for cand in parse_group_label(group) if group else [None]:
            r, t = run, train_step
            if cand is not None:
                if (cand[0] is not None and run is not None and cand[0] != run) or (
                    cand[1] is not None and train_step is not None and cand[1] != int(train_step)
                ):
                    continue  # this reading lies outside the partition asked for
                r = cand[0] if cand[0] is not None else run
                t = cand[1] if cand[1] is not None else train_step
            parts = self.select_parts(r, t)
            if not parts or (cand is not None and cand[0] is None and not self._has_group(parts, cand[2])):
                continue
            have_env = "env_name" in self._columns(parts)
            if env is not None and not have_env:
                continue
            select = (
                f"run_id, train_step, group_id, "
                f"{'any_value(env_name)' if have_env else 'NULL'} AS env_name, "
                f"count(DISTINCT traj_id) AS rollouts, count(*) AS steps, "
                f"count(DISTINCT traj_id) FILTER (WHERE success) / count(DISTINCT traj_id) AS success_rate"
            )
            frames.append(
                self._select(
                    select,
                    parts,
                    group=cand,
                    env=env,
                    success=success,
                    run=r,
                    train_step=t,
                    tail="GROUP BY run_id, train_step, group_id ORDER BY run_id, train_step, group_id",
                )
            )
        if not frames:
            return pd.DataFrame(columns=cols)
        out = pd.concat(frames, ignore_index=True).drop_duplicates(["run_id", "train_step", "group_id"])
        return out.reset_index(drop=True)[cols]

    def _has_group(self, parts: list[Part], group_id: str) -> bool:
        """Whether a row of ``parts`` has this ``group_id`` (its column alone is read)."""
        frm, pre = self._scan(parts)
        hit = self.con.execute(f"SELECT 1 FROM {frm} WHERE group_id = ? LIMIT 1", [*pre, group_id]).fetchall()
        return bool(hit)

    def resolve_group(
        self, group: str, *, run: str | None = None, train_step: int | None = None
    ) -> tuple[str, int, str]:
        """The one group a reference names (a bare id, or ``run/train_step/group_id``).

        A reference resolved once is not read again while the store's parts stay the same
        (their paths and row counts: a part is written once, a new commit changes them).

        Raises:
            StoreError: no such group, or several (listing them).
        """
        key = (str(self.root), self.fingerprint, self.num_steps, group, run, train_step)
        with _MEMO_LOCK:
            hit = _RESOLVED.get(key)
        if hit is not None:
            return hit
        found = self.groups(run=run, train_step=train_step, group=group)
        if found.empty:
            scope = "".join(
                [
                    f" run '{run}'" if run else "",
                    f" train_step {train_step}" if train_step is not None else "",
                ]
            )
            raise StoreError(f"{self.root}: no group '{group}'{scope} in the store")
        if len(found) > 1:
            labels = [f"{r.run_id}/{r.train_step}/{r.group_id}" for r in found.itertuples()]
            raise StoreError(
                f"group '{group}' is ambiguous ({len(labels)} matches: "
                f"{', '.join(labels[:10])}{' ...' if len(labels) > 10 else ''}); "
                f"give run/train_step/group_id or --run / --train-step"
            )
        r = found.iloc[0]
        out = str(r["run_id"]), int(r["train_step"]), str(r["group_id"])
        with _MEMO_LOCK:
            _RESOLVED[key] = out
            while len(_RESOLVED) > RESOLVED_MAX:
                _RESOLVED.pop(next(iter(_RESOLVED)))
        return out

    # -- loading -------------------------------------------------------------------------------
    def load_batch(
        self,
        *,
        run: str | None = None,
        train_step: int | None = None,
        group: str | tuple | None = None,
        env: str | None = None,
        success: str | None = None,
        anchor_obs: bool = True,
        text: bool = False,
    ) -> RolloutBatch:
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
            raise StoreError(
                f"{self.root}: no steps for run={run!r} train_step={train_step!r} "
                f"(runs: {', '.join(sorted({p.run_id for p in self.parts})) or 'none'})"
            )
        cols = self._columns(parts)
        if env is not None and "env_name" not in cols:
            raise StoreError(f"{self.root}: no env_name recorded; cannot filter on env '{env}'")
        # Every column but the (constant) raw-anchor names: the log's own field names stay out of SQL.
        anchor_obs = anchor_obs or not active_rule().exact  # a rule re-keys from the raw anchors
        drop = [c for c in ("anchor_obs", "anchor_obs" + _JSON_SUFFIX) if not anchor_obs and c in cols]
        sel = f"* EXCLUDE ({', '.join(drop)})" if drop else "*"
        table = self._select(
            sel, parts, group=group, env=env, success=success, run=run, train_step=train_step, arrow=True
        )
        if table.num_rows == 0:
            raise StoreError(f"{self.root}: no steps match the filters")
        if text:
            table = join_text(table, self._text(table))
        return self._assemble(decode_json(table))

    def text_for(self, steps: pd.DataFrame) -> pd.DataFrame:
        """``observation`` / ``response`` of the given steps (keyed by their ``_part``, ``_row``)."""
        import pandas as pd

        keys = pa.table(
            {"_part": texts(steps["_part"].tolist()), "_row": array(steps["_row"].to_numpy(np.int64))}
        )
        text = self._text(keys)
        return pd.DataFrame(columns=["_part", "_row"]) if text.num_columns == 2 else page_frame(text)

    def _text(self, steps: pa.Table) -> pa.Table:
        """``observation`` / ``response`` of the given steps (keyed by their ``_part``, ``_row``),
        JSON-encoded values decoded; no rows where none of their parts has text."""
        by_stem = {Path(p.path).stem: p for p in self.parts}
        enc = call("dictionary_encode", steps.column("_part").combine_chunks())
        part, row = numbers(enc.indices), row_numbers(steps)
        tables = []
        for code, stem in enumerate(enc.dictionary.to_pylist()):
            found = by_stem.get(stem)
            if found is None or found.text is None:
                continue
            rows = row[part == code]
            if self._remote:
                frm, pre = self._view([found.text]), []
            else:
                frm, pre = "read_parquet(?, hive_partitioning=false)", [self._abs(found.text)]
            sql = f"SELECT * FROM {frm} WHERE _row BETWEEN ? AND ?"
            t = read(self.con.arrow(sql, [*pre, int(rows.min()), int(rows.max())]))
            t = t.filter(array(np.isin(row_numbers(t), rows)))
            tables.append(t.add_column(0, "_part", take(texts([stem]), np.zeros(t.num_rows, np.int64))))
        if not tables:
            return pa.table({"_part": texts([]), "_row": array(np.zeros(0, np.int64))})
        return decode_json(pa.concat_tables(tables, promote_options="permissive"))

    def _assemble(self, decoded: pa.Table) -> RolloutBatch:
        """The batch of the selected rows (JSON decoded), in store order: by part, by row in it,
        then group, trajectory and ``step_idx`` (a trajectory whose steps are not 0..n-1, ingested
        from two sources, is a `LoadError`)."""
        # ``decoded`` holds the values of its decoded columns until ``rows`` below holds them.
        table = take(decoded, np.lexsort((row_numbers(decoded), part_codes(decoded, self._rank))))
        step_idx = numbers(cast(table.column("step_idx"), pa.int64()))
        ids = {c: table.column(c) for c in ("run_id", "train_step", "group_id", "traj_id")}
        g, t = group_traj_codes(ids)
        order, lay = sort_rows(g, t, step_idx)
        table, step_idx = take(table, order), step_idx[order]
        starts = lay.traj_offsets[:-1]
        bad = np.unique(lay.step_traj[step_idx != np.arange(len(step_idx)) - np.repeat(starts, lay.traj_len)])
        if bad.size:
            raise LoadError(
                [split_steps(str(self.root), table, starts[t]) for t in bad[:MAX_LISTED]], total=int(bad.size)
            )
        # A writeable copy: Arrow-backed arrays are read-only, which numba types differently
        # (a second compile of the CRBC kernel).
        step_hash = np.array(numbers(table.column("_anchor_hash")), dtype=np.uint64, copy=True)
        names = table.column_names
        if not active_rule().exact and "anchor_obs" in names and "anchor_key" in names:
            # The store keeps exact keys; the rule in force re-keys from the raw anchors.
            step_hash, new_keys = rekey(
                column_values(table.column("anchor_obs")),
                column_values(table.column("anchor_key")),
                step_hash,
            )
            table = table.set_column(names.index("anchor_key"), "anchor_key", objects(new_keys))
        table = table.set_column(
            names.index("train_step"), "train_step", cast(table.column("train_step"), pa.int64())
        )
        table = table.set_column(names.index("step_idx"), "step_idx", array(step_idx))
        first = take(table.select(["success", "_truncated", "_traj_return"]), starts)
        rows = hold(table.drop_columns(list(_INTERNAL_DROP)))  # its decoded values live with it
        return batch_from_columns(
            ArrowRows(rows, StoreFrame(rows, object_ids=True)),
            layout=lay,
            step_anchor_hash=step_hash,
            traj_success=flags(first.column("success")),
            traj_truncated=flags(first.column("_truncated")),
            traj_return=numbers(cast(first.column("_traj_return"), pa.float64())).astype(np.float64),
            source=str(self.root),
        )

    # -- search --------------------------------------------------------------------------------
    def search_steps(self, text: str, limit: int = 50) -> pd.DataFrame:
        """Steps whose action or raw anchor contains ``text`` (case-insensitive)."""
        import pandas as pd

        if not self.parts:
            return pd.DataFrame()
        cols = set(self._columns(self.parts))
        fields = [c for c in ("action", "anchor_obs", "anchor_obs" + _JSON_SUFFIX, "anchor_key") if c in cols]
        shown = [
            c
            for c in (
                "run_id",
                "train_step",
                "group_id",
                "traj_id",
                "step_idx",
                "action",
                "anchor_key",
                "anchor_obs",
                "anchor_obs" + _JSON_SUFFIX,
                "reward",
                "success",
            )
            if c in cols
        ]
        cond = " OR ".join(f'contains(lower("{c}"), lower(?))' for c in fields)
        frm, pre = self._scan(self.parts)
        table = read(
            self.con.arrow(
                f"SELECT {', '.join(shown)} FROM {frm} WHERE {cond} LIMIT ?",
                [*pre, *([text] * len(fields)), int(limit)],
            )
        )
        return page_frame(decode_json(table))

    def find_trajectory(self, traj_id: str, *, text: bool = True) -> pd.DataFrame:
        """Every step of the trajectories with this ``traj_id`` (any run / step / group), in
        order, with the text columns joined."""
        import pandas as pd

        if not self.parts:
            return pd.DataFrame()
        frm, pre = self._scan(self.parts)
        table = read(self.con.arrow(f"SELECT * FROM {frm} WHERE traj_id = ?", [*pre, str(traj_id)]))
        if table.num_rows == 0:
            return page_frame(table)
        if text:
            table = join_text(table, self._text(table))
        df = page_frame(decode_json(table)).sort_values(
            ["run_id", "train_step", "group_id", "step_idx"], ignore_index=True
        )
        return df.drop(columns=[c for c in _INTERNAL_DROP if c in df.columns])

    def summary(self) -> dict:
        """Counts from the manifest (no data read): sources, runs, train steps, parts, steps."""
        ts = self.train_steps()
        return {
            "store": str(self.root),
            "sources": len(self.sources),
            "complete_sources": sum(1 for m in self.sources.values() if m.get("complete")),
            "incomplete_sources": len(incomplete_sources(self)),
            "runs": sorted(ts["run_id"].unique().tolist()),
            "train_steps": int(len(ts)),
            "parts": len(self.parts),
            "steps": self.num_steps,
            "formats": sorted({m.get("format", "?") for m in self.sources.values()}),
            **_sum_outcome_counts(self.sources.values()),
            **_sum_import_counts(self.sources.values()),
        }


def open_store(root: str | os.PathLike) -> LogStore:
    return LogStore(root)
