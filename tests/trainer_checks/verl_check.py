"""Run inside the trainer-test environment (.venv-trainers): verl's own registry and, with
--patched-verl, verl's own ``ray_trainer.compute_advantage`` (after the one-line patch) on a
verl-shaped batch built from canonical rollouts. Prints JSON: one [group_id, traj_id, step_idx,
advantage] per step, read back from the per-token advantages, plus what the registry holds.

Batch shape (verl, rows = whole trajectories): one row per rollout; its response holds, per env
step, some model tokens (mask 1) then some env/tool tokens (mask 0); the step's reward sits on
its last model token; rows are shuffled (as _balance_batch does). non_tensor_batch carries
uid, crbc_anchors, crbc_actions and crbc_success (what an agent loop puts in extra_fields).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rollouts")
    ap.add_argument("--patched-verl", default=None, help="folder holding a patched verl package")
    ap.add_argument("--param", action="append", default=[], help="crbc_params key=value")
    a = ap.parse_args()
    if a.patched_verl:
        sys.path.insert(0, a.patched_verl)
    assert "VERL_USE_EXTERNAL_MODULES" not in os.environ
    import numpy as np
    import torch
    import verl
    from verl.trainer.ppo import core_algos

    if a.patched_verl:
        assert verl.__file__.startswith(a.patched_verl), verl.__file__
    fn = core_algos.get_adv_estimator_fn("crbc")
    registry = sorted(
        n for n in core_algos.ADV_ESTIMATOR_REGISTRY if n == "crbc" or n.startswith("crbc_viz.")
    )

    rows = [json.loads(line) for line in open(a.rollouts, encoding="utf-8")]
    trajs: dict = {}
    for r in rows:
        trajs.setdefault((r["group_id"], r["traj_id"]), []).append(r)
    keys = list(trajs)
    rng = np.random.default_rng(7)
    order = rng.permutation(len(keys))
    keys = [keys[i] for i in order]
    layout = []  # per row: per step (first model token, last model token)
    L = 0
    for k in keys:
        steps = sorted(trajs[k], key=lambda r: r["step_idx"])
        pos, spans = 0, []
        for _ in steps:
            n_model, n_env = int(rng.integers(1, 4)), int(rng.integers(1, 3))
            spans.append((pos, pos + n_model - 1))
            pos += n_model + n_env
        layout.append(spans)
        L = max(L, pos + int(rng.integers(0, 3)))  # some right padding
    B = len(keys)
    mask = torch.zeros(B, L, dtype=torch.float32)
    tlr = torch.zeros(B, L, dtype=torch.float32)
    for b, (k, spans) in enumerate(zip(keys, layout)):
        steps = sorted(trajs[k], key=lambda r: r["step_idx"])
        for (lo, hi), r in zip(spans, steps):
            mask[b, lo : hi + 1] = 1
            tlr[b, hi] = r["reward"]

    def obj(values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out

    ordered = [sorted(trajs[k], key=lambda r: r["step_idx"]) for k in keys]
    non_tensors = {
        "uid": obj([k[0] for k in keys]),
        "crbc_anchors": obj([[r["anchor_obs"] for r in s] for s in ordered]),
        "crbc_actions": obj([[r["action"] for r in s] for s in ordered]),
        "crbc_success": np.array([bool(s[-1]["success"]) for s in ordered]),
    }
    params = dict(p.split("=", 1) for p in a.param)
    if a.patched_verl:
        from omegaconf import OmegaConf
        from verl import DataProto
        from verl.trainer.ppo.ray_trainer import compute_advantage

        data = DataProto.from_dict(
            tensors={"token_level_rewards": tlr, "response_mask": mask}, non_tensors=non_tensors
        )
        cfg = OmegaConf.create({"adv_estimator": "crbc", "crbc_params": params})
        adv = compute_advantage(data, adv_estimator="crbc", config=cfg).batch["advantages"]
    else:
        from verl.trainer.config import AlgoConfig

        adv, ret = fn(
            token_level_rewards=tlr,
            response_mask=mask,
            config=AlgoConfig(adv_estimator="crbc"),
            index=non_tensors["uid"],
            non_tensor_batch=non_tensors,
            **params,
        )
        assert ret is adv
    assert adv.shape == (B, L) and adv.dtype == torch.float32
    assert torch.all(adv[mask == 0] == 0), "advantage outside the response mask"
    out = []
    for b, (k, spans) in enumerate(zip(keys, layout)):
        for s, (lo, hi) in enumerate(spans):
            vals = adv[b, lo : hi + 1]
            assert torch.all(vals == vals[0]), "one value per step"
            out.append([k[0], k[1], s, float(vals[0])])
    print(
        json.dumps(
            {
                "registered": registry,
                "fn": f"{fn.__module__}.{fn.__qualname__}",
                "crbc_viz_estimator": getattr(fn, "crbc_viz_estimator", None),
                "verl": verl.__version__,
                "steps": out,
            }
        )
    )


if __name__ == "__main__":
    main()
