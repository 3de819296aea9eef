"""Which source a log is, for `crbc_viz.store.ingest`: the key its manifest is filed under, and
the sources already in the store that hold its rollouts.

A source's identity is everything that gives its rows their meaning: its bytes (for a folder of
files, their names too), where it lies (trainers write the run and the train step in folder
names only: SkyRL's ``global_step_<N>_evals/``, a run's folder), its format, the import options
its importer takes, the ``--run-id`` override and the success threshold. Two logs with the same
bytes in two train steps' folders are two sources; the same file ingested again with the same
options is one source, skipped. ``--lenient`` is not part of it: a log that reads clean gives
the same rows with or without it.

The same bytes at another path (a copy, a moved dump folder) may hold the same rollouts or other
ones (another run or train step, read from its folders): `copy_of` decides once the copy is
read, from the runs and train steps of its rows, and the ingest skips a copy naming the source
it repeats.

Manifests written before identities (no ``identity`` field) are filed under the content digest
alone; `manifest_key` still finds such a manifest for its own path and content, and `twins`
lists it for a copy, so a store written then (the bundled ``sample_rollouts/training/store``)
opens as it is and re-ingesting its sources adds nothing. The store's format (`STORE_VERSION`)
is unchanged: readers list the manifests whatever they are filed under.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..errors import Problem

__all__ = ["IDENTITY", "Identity", "file_digest", "source_identity", "manifest_key", "twins", "copy_of"]

#: The identity scheme a manifest records (``identity``); absent: filed under its content digest.
IDENTITY = 2


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
    """The content digest, distinct per ``--run-id`` override (without one, the file's own)."""
    if run_id is None:
        return digest
    h = hashlib.blake2b(digest_size=16)
    h.update(digest.encode() + b"\0run_id\0" + str(run_id).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


@dataclass(frozen=True)
class Identity:
    """``key``: the manifest's name; ``content``: the digest of the bytes (and the ``--run-id``
    override), what a manifest was filed under before identities; ``meaning``: the digest of
    the format and options; ``path``: the absolute path of the source."""

    key: str
    content: str
    meaning: str
    path: str


def _taken_options(fmt: str, import_options: dict | None) -> dict:
    """The import options the format's importer takes (its ``OPTIONS``, as `read_source`
    passes them)."""
    from ..io.importers import takes

    try:
        taken = takes(fmt)
    except KeyError:  # a format no importer reads now
        taken = set()
    return {k: v for k, v in (import_options or {}).items() if v is not None and k in taken}


def source_identity(src, *, run_id, import_options, success_threshold) -> Identity:
    """The `Identity` of the `Source` ``src`` ingested with these options (its files are read)."""
    root = src.path if len(src.files) > 1 or src.files[0] != src.path else None
    content = _with_run_id(file_digest(src.files, root), run_id)
    what = {
        "format": src.fmt,
        "import_options": _taken_options(src.fmt, import_options),
        "success_threshold": float(success_threshold),
    }
    meaning = hashlib.blake2b(
        json.dumps(what, sort_keys=True, default=str).encode("utf-8", "surrogatepass"), digest_size=16
    ).hexdigest()
    path = os.path.abspath(src.path)
    h = hashlib.blake2b(digest_size=16)
    h.update(f"identity {IDENTITY}\0{content}\0{meaning}\0".encode() + path.encode("utf-8", "surrogatepass"))
    return Identity(h.hexdigest(), content, meaning, path)


def stamp(ident: Identity) -> dict:
    """The identity fields of a new source's manifest."""
    return {"identity": IDENTITY, "content": ident.content, "meaning": ident.meaning}


def _legacy(m: dict, ident: Identity, fmt: str) -> bool:
    """Whether ``m`` was filed under its content digest, before identities, for this content."""
    return "identity" not in m and m.get("digest") == ident.content and m.get("format") == fmt


def manifest_key(ident: Identity, fmt: str, manifests: dict[str, dict]) -> str:
    """The key the source is filed under: its identity's, or (a store written before
    identities) the content digest of a manifest of the same file, content and format."""
    if ident.key not in manifests:
        m = manifests.get(ident.content)
        if m is not None and _legacy(m, ident, fmt) and m.get("path") == ident.path:
            return ident.content
    return ident.key


def twins(ident: Identity, fmt: str, sources: dict[str, dict], exclude=()) -> list[dict]:
    """The complete visible sources of the same content, format and options as ``ident`` at
    another path (``exclude``: digests not to list)."""
    return [
        m
        for d, m in sources.items()
        if d not in exclude
        and m.get("complete")
        and m.get("path") != ident.path
        and (_legacy(m, ident, fmt) or (m.get("content"), m.get("meaning")) == (ident.content, ident.meaning))
    ]


def copy_of(batch, candidates: list[dict]) -> dict | None:
    """The source among ``candidates`` (same bytes and options, another path) whose runs and
    train steps include every one of ``batch``: the batch repeats its rollouts. None when each
    candidate's path gave its rows another run or train step (two train steps' folders)."""
    mine = {(str(r), int(t)) for r, t in zip(batch.groups["run_id"], batch.groups["train_step"])}
    for m in candidates:
        if mine <= {(str(p["run_id"]), int(p["train_step"])) for p in m.get("parts", [])}:
            return m
    return None


def existing_traj_overlap(store, batch, digest: str, path: str, exclude=()) -> list[Problem]:
    """Trajectories of ``batch`` some other visible source already holds (``exclude``: the
    versions this one replaces)."""
    import pandas as pd

    pairs = {(str(r), int(t)) for r, t in zip(batch.groups["run_id"], batch.groups["train_step"])}
    parts = [
        p
        for p in store.parts
        if (p.run_id, p.train_step) in pairs and p.source != digest and p.source not in exclude
    ]
    if not parts:
        return []
    first = batch.steps.iloc[batch.traj_offsets[:-1]]
    new = pd.DataFrame(
        {
            "run_id": first["run_id"].astype(str).to_numpy(),
            "train_step": first["train_step"].to_numpy(np.int64),
            "group_id": first["group_id"].astype(str).to_numpy(),
            "traj_id": first["traj_id"].astype(str).to_numpy(),
        }
    )
    frm, pre = store._scan(parts)
    store.con.register("__new_trajs", new)
    try:
        hit = store.con.execute(
            f"SELECT DISTINCT s.run_id, s.train_step, s.group_id, s.traj_id, s._source AS src FROM "
            f"{frm} s JOIN __new_trajs n USING (run_id, train_step, group_id, traj_id) "
            f"LIMIT 20",
            pre,
        ).df()
    finally:
        store.con.unregister("__new_trajs")
    by_src = {d[:16]: m for d, m in store.sources.items()}
    here = os.path.abspath(path)
    problems, told = [], set()
    for r in hit.itertuples():
        man = by_src.get(r.src, {})
        where = f"trajectory '{r.traj_id}' of group '{r.run_id}/{r.train_step}/{r.group_id}'"
        if not man.get("complete", True) and man.get("path") == here:
            # This very path, under another digest, interrupted: the file changed since.
            if r.src not in told:
                told.add(r.src)
                problems.append(Problem(path, None, None, _changed_since_interrupt(store, man, where)))
            continue
        interrupted = (
            ""
            if man.get("complete", True)
            else f"; that copy is an interrupted ingest: `crbc-viz drop-incomplete --store {store.root}` "
            f"removes it"
        )
        problems.append(
            Problem(
                path,
                None,
                "traj_id",
                f"{where} is already in the store (from {man.get('path', r.src)}); remove one "
                f"copy or give the files distinct run ids (--run-id){interrupted}",
            )
        )
    return problems


def _changed_since_interrupt(store, man: dict, where: str) -> str:
    """What happened when a file is ingested again after a kill -9 and a change: the store
    holds part of its earlier content, which can no longer be resumed."""
    done = sum(int(p["rows"]) for p in man.get("parts", []))
    return (
        f"this file changed after its ingest into {store.root} was interrupted (started "
        f"{man.get('started_at', '?')}; {done:,} of {int(man.get('rows', 0)):,} steps of its earlier "
        f"content committed, {where} among them, which the new content holds too); the partial "
        f"earlier content cannot be resumed: remove it with `crbc-viz drop-incomplete --store "
        f"{store.root}`, then ingest the file again"
    )


class _RepeatsSource(Exception):
    """Raised by the ingest before it writes a source that repeats ``source`` (a manifest)."""

    def __init__(self, source: dict):
        super().__init__(source.get("path"))
        self.source = source
