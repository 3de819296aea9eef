"""Load the authors' advantage code (tests/fixtures/authors_code/) and a shared test batch.

The copies import ``verl`` for a type name only: a stand-in module is put in place while they
load. `float64_torch` runs their code in double precision: the default dtype, and (for the
one explicit ``dtype=torch.float32`` in ProxMO's ``step_soft_reward``) the module's own
``torch`` name seen through a view whose ``float32`` is ``float64``; nothing else changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import random
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "authors_code"


def git_blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_sources() -> None:
    """The copies are byte-identical to the upstream blobs SOURCES.json names."""
    for folder, entry in json.loads((ROOT / "SOURCES.json").read_text()).items():
        assert (ROOT / folder / "LICENSE").is_file(), folder
        for rel, ids in entry["files"].items():
            assert git_blob(ROOT / folder / rel) == ids["git_blob"], (folder, rel)


def load(folder: str, rel: str, name: str):
    """Import one copied file as module ``name`` with a stand-in ``verl``."""
    stub = types.ModuleType("verl")
    stub.DataProto = object
    saved = sys.modules.get("verl")
    sys.modules["verl"] = stub
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / folder / rel)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        if saved is None:
            del sys.modules["verl"]
        else:
            sys.modules["verl"] = saved
    return mod


class _Float64Torch:
    def __init__(self, torch):
        self._torch = torch
        self.float32 = torch.float64

    def __getattr__(self, name):
        return getattr(self._torch, name)


@contextlib.contextmanager
def float64_torch(mod):
    import torch

    old_default, old_name = torch.get_default_dtype(), mod.torch
    torch.set_default_dtype(torch.float64)
    mod.torch = _Float64Torch(torch)
    try:
        yield torch
    finally:
        mod.torch = old_name
        torch.set_default_dtype(old_default)


ROOMS = ["kitchen", "hallway", "bathroom", "bedroom", "garden"]
THINGS = ["apple", "mug", "knife", "towel", "lamp", "key"]


def _obs(rng: random.Random, k: int) -> str:
    room = ROOMS[k % len(ROOMS)]
    seen = ", ".join(f"a {THINGS[(k + j) % len(THINGS)]} {j + 1}" for j in range(1 + k % 3))
    return f"You are in the {room}. On the counter {k} you see {seen}."


def batch_rows(seed: int = 7, groups: int = 3, rollouts: int = 5, win: float = 10.0) -> list[dict]:
    """Canonical rows (SCHEMA.md) of ALFWorld-like groups: 10 on success, else 0; revisits,
    self-loops, invalid actions, a one-step rollout, truncation."""
    rng = random.Random(seed)
    rows = []
    for g in range(groups):
        pool = [_obs(rng, k + 2 * g) for k in range(4)]
        for t in range(rollouts):
            n = 1 if (g, t) == (0, 0) else rng.randint(2, 7)
            success = rng.random() < 0.5
            truncated = not success and rng.random() < 0.3
            walk = [pool[0]]
            for _ in range(n - 1):
                u = rng.random()
                walk.append(walk[-1] if u < 0.2 else rng.choice(pool))
            for k, obs in enumerate(walk):
                last = k == n - 1
                rows.append(
                    dict(
                        group_id=f"g{g}",
                        traj_id=f"t{t}",
                        step_idx=k,
                        anchor_obs=obs,
                        action=rng.choice(["go", "take", "open"]),
                        reward=win if (last and success) else 0.0,
                        done=last and not truncated,
                        success=success and last,
                        is_action_valid=rng.random() > 0.25,
                    )
                )
    return rows


def verl_arrays(graph):
    """The trainer's per-row arrays of the graph's batch, in its row order."""
    import numpy as np

    b = graph.batch
    steps = b.steps
    uid = np.array([f"uid-{g}" for g in b.step_group], dtype=object)
    traj = np.array([f"traj-{t}" for t in b.step_traj], dtype=object)
    obs = steps["anchor_obs"].to_numpy(dtype=object)
    valid = steps["is_action_valid"].to_numpy(dtype=bool)
    return uid, traj, obs, valid
