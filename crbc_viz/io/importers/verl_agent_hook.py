"""The verl-agent dump hook (docs/verl_agent_hook.md): one JSONL per training step with one row
per environment step of the trainer's batch, de-duplicated, with the turn index and the env's
``done`` flag, ready for ``crbc-viz ingest``.

Call it in ``RayPPOTrainer.fit()`` right after ``compute_advantage(...)``. By then
``adjust_batch(mode="copy")`` has appended copies of random rows to pad the batch to the
data-parallel divisor, and ``_balance_batch`` has reordered the rows; this hook drops the exact
copies (counted in the return value), refuses two *different* rows for one (trajectory, turn),
and writes ``step`` so the importer can put each trajectory back in order.

It needs the rollout loop to have put ``step``, ``dones`` and ``won`` on each step's batch
(three lines in ``vanilla_multi_turn_loop``, see the doc); without ``step`` it refuses to write
rather than leave rows that cannot be ordered. Only numpy (and `crbc_viz.errors`) is imported; ``batch`` is verl's
``DataProto`` (anything with ``.batch`` tensors and a ``.non_tensor_batch`` dict of arrays).
"""

from __future__ import annotations

import json
import os

import numpy as np

from ...errors import CrbcVizError

__all__ = ["dump_crbc_steps", "HookError", "KEYS"]

#: non_tensor_batch keys written when present (verl-agent's TrajectoryCollector names, plus the
#: three the rollout-loop patch adds: step, dones, won).
KEYS = (
    "uid",
    "traj_uid",
    "step",
    "dones",
    "anchor_obs",
    "rewards",
    "active_masks",
    "is_action_valid",
    "won",
    "episode_rewards",
    "episode_lengths",
    "data_source",
)


class HookError(CrbcVizError, ValueError):
    """The batch cannot be dumped faithfully (a missing key, or conflicting duplicates)."""


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if hasattr(v, "detach"):  # a torch tensor
        v = v.detach().cpu()
        return v.item() if v.ndim == 0 else v.tolist()
    return v


def dump_crbc_steps(batch, tokenizer, global_steps: int, out_dir: str) -> dict:
    """Write ``out_dir/crbc_step_<global_steps:06d>.jsonl``; rows keep the batch's order.

    Returns:
        ``{"path", "rows", "duplicates_dropped"}``.

    Raises:
        HookError: ``uid`` / ``traj_uid`` / ``step`` missing from ``non_tensor_batch`` (apply
            the rollout-loop patch), or two rows for one (traj_uid, step) that differ.
    """
    nt, b = batch.non_tensor_batch, batch.batch
    missing = [k for k in ("uid", "traj_uid", "step") if k not in nt]
    if missing:
        raise HookError(
            f"non_tensor_batch has no {', '.join(missing)}: add the rollout-loop lines "
            "of docs/verl_agent_hook.md (step, dones, won) before dumping"
        )
    responses = b["responses"]
    n = int(responses.shape[0])
    adv = [None] * n
    if "advantages" in b.keys():
        if "response_mask" in b.keys():
            mask = b["response_mask"]
        else:
            mask = b["attention_mask"][:, -responses.shape[1] :]
        mask = mask.to(b["advantages"].dtype)
        adv = ((b["advantages"] * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist()
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    keys = [k for k in KEYS if k in nt]
    seen: dict[tuple, tuple[int, str]] = {}
    lines: list[str] = []
    dropped = 0
    for i in range(n):
        row = {("done" if k == "dones" else k): _plain(nt[k][i]) for k in keys}
        row.update(global_step=int(global_steps), response=texts[i], advantage=adv[i])
        text = json.dumps(row, ensure_ascii=False, default=str)
        key = (str(row["traj_uid"]), int(row["step"]))
        if key in seen:
            first, first_text = seen[key]
            if first_text == text:
                dropped += 1
                continue
            raise HookError(
                f"batch rows {first} and {i} are both traj_uid={key[0]!r} step={key[1]} "
                "but differ; refusing to pick one"
            )
        seen[key] = (i, text)
        lines.append(text)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"crbc_step_{int(global_steps):06d}.jsonl")
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))
    os.replace(tmp, path)
    return {"path": path, "rows": len(lines), "duplicates_dropped": dropped}
