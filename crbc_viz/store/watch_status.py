"""What the app reads of a followed store without opening it: the watcher's status file
(`read_status`, written by `crbc_viz.store.watch.Watcher`) and one listing of the manifests
(`store_state`). No streamlit here."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from pathlib import Path

#: Seconds between two heartbeats while idle (a ``-v`` line, and the status file's time).
HEARTBEAT_S = 30.0
#: The watcher's status in the store folder (JSON; read by the app, never by queries).
STATUS_FILE = "watch.json"
#: Largest status file the app reads (a bigger one is refused, not parsed).
STATUS_MAX_BYTES = 1 << 16


def read_status(root: str | os.PathLike) -> dict | None:
    """The watcher status of the store at ``root`` (`STATUS_FILE`), None when there is none.

    The values are checked: a file that is too big, not JSON or holds mistyped fields gives
    ``{"error": <why>}``, never a guess. ``alive``: the watcher has not stopped and reported
    within three heartbeats."""
    path = Path(root) / STATUS_FILE
    try:
        with open(path, "rb") as fh:
            raw = fh.read(STATUS_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"error": f"{path}: cannot be read ({exc.strerror or exc})"}
    if len(raw) > STATUS_MAX_BYTES:
        return {"error": f"{path}: larger than {STATUS_MAX_BYTES} bytes; not a watcher status"}
    try:
        st = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return {"error": f"{path}: not JSON ({str(exc)[:100]})"}
    kinds = {
        "updated_at": str,
        "heartbeat_s": (int, float),
        "pending": int,
        "pending_paths": list,
        "ingested": int,
        "replaced": int,
        "present": int,
        "failed": int,
    }
    bad = (
        [k for k, t in kinds.items() if not isinstance(st.get(k), t) or isinstance(st.get(k), bool)]
        if isinstance(st, dict)
        else ["(not an object)"]
    )
    if not bad:
        try:
            updated = _dt.datetime.fromisoformat(st["updated_at"])
            if updated.tzinfo is None:
                raise ValueError("no time zone")
        except ValueError:
            bad = ["updated_at"]
    if bad or not all(isinstance(p, str) for p in st["pending_paths"]) or st["pending"] < 0:
        return {"error": f"{path}: not a watcher status (field(s) {', '.join(bad) or 'pending'} mistyped)"}
    age = (_dt.datetime.now(_dt.UTC) - updated).total_seconds()
    hb = float(st["heartbeat_s"]) if math.isfinite(float(st["heartbeat_s"])) else HEARTBEAT_S
    out = {k: st[k] for k in kinds}
    out["writing"] = st.get("writing") if isinstance(st.get("writing"), str) else None
    out["stopped"] = "stopped_at" in st
    out["age_s"] = age
    out["alive"] = not out["stopped"] and age <= 3 * hb + 5
    return out


def store_state(root: str | os.PathLike, *, status: bool = True) -> dict:
    """What a page following the store at ``root`` needs, from one listing of its manifests
    (none is read or followed through a link): ``signature`` (changes whenever a manifest is
    written, added or removed), ``changed_at`` (POSIX time of the newest manifest write, None
    for none), ``manifests`` (their count) and ``watch`` (`read_status`; None without
    ``status``)."""
    from .s3 import is_s3_url, store_root

    h = hashlib.blake2b(digest_size=8)
    newest, n = None, 0
    remote = is_s3_url(root)
    mdir = store_root(root) / "manifest"
    try:
        entries = sorted(mdir.scandir() if remote else os.scandir(mdir), key=lambda e: e.name)
    except FileNotFoundError:
        entries = []
    for e in entries:
        if not e.name.endswith(".json"):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        n += 1
        h.update(f"{e.name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
        newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
    return {
        "signature": h.hexdigest(),
        "changed_at": newest,
        "manifests": n,
        "watch": read_status(root) if status and not remote else None,
    }
