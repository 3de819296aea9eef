"""Cost per training step of each trainer adapter (crbc_viz.integrations), against the trainer's
own GiGPO where it can be imported.

    python -m bench.integrations_bench [--sizes 8k,256k] [--device cpu|cuda] [--repeats N]
        [--gigpo-src DIR --gigpo-python PY] [--write]

Workloads: random-MDP batches (`crbc_viz.synthetic`, 8 rollouts per group, up to 50 steps,
40 states, seed 1): ``8k`` = 28 groups (8,170 steps), ``256k`` = 848 groups (~256k steps).
Each adapter gets the batch the way its trainer holds it, built outside the timed region:

- verl-agent / ROLL: one row per step, 3 % of rows appended as copies (adjust_batch / ROLL's
  "copy" mode), rows shuffled; verl-agent rows carry 16 response tokens ([B, 16] tensors);
- verl and TRL: one row per trajectory, each step one model token and one env token;
- rLLM: TrajectoryGroup / Trajectory / Step objects (attribute names of rllm/types.py).

A figure is the median wall time of ``--repeats`` runs after one warm-up (the numba kernels are
compiled and cached by then), for the whole adapter call: de-duplication, ordering, anchor
hashing, batch assembly, the estimator, and the broadcast back to rows/tokens.

The baseline is verl-agent's ``gigpo.core_gigpo.compute_gigpo_outcome_advantage`` (mode
mean_norm, exact anchors) on the same verl-agent batch, run in a separate interpreter that can
import verl (``--gigpo-python``, e.g. .venv-trainers/bin/python) from a fetched checkout
(``--gigpo-src``: the folder holding ``gigpo/core_gigpo.py``; never part of this project). Its
``step_rewards`` input (discounted step returns) is prepared outside its timed region too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent
SIZES = {"8k": 28, "256k": 848}
L_TOKENS = 16
BEGIN, END = "<!-- integrations-bench:begin -->", "<!-- integrations-bench:end -->"


def workload(size: str, seed: int = 1):
    from crbc_viz.synthetic import random_mdp_batch

    b = random_mdp_batch(
        num_groups=SIZES[size], rollouts=8, max_steps=50, num_states=40, p_fail=0.01, seed=seed
    )
    s = b.steps
    rows = {
        k: s[k].to_numpy()
        for k in ("group_id", "traj_id", "step_idx", "reward", "action", "anchor_obs", "success")
    }
    rows["traj_key"] = (s["group_id"].astype(str) + "/" + s["traj_id"].astype(str)).to_numpy()
    return b, rows


def step_rows(rows, rng):
    """verl-agent / ROLL rows: copies appended, shuffled."""
    n = len(rows["step_idx"])
    idx = np.r_[np.arange(n), rng.integers(0, n, max(1, int(0.03 * n)))]
    rng.shuffle(idx)
    return idx


def verl_agent_inputs(rows, idx, device):
    import torch

    B = len(idx)
    n_tok = np.random.default_rng(0).integers(1, L_TOKENS + 1, B)
    mask = (torch.arange(L_TOKENS)[None, :] < torch.as_tensor(n_tok)[:, None]).float()
    tlr = torch.zeros(B, L_TOKENS)
    # verl-agent's EpisodeRewardManager: the episode reward on every step's last token.
    tlr[torch.arange(B), torch.as_tensor(n_tok - 1)] = torch.as_tensor(
        rows["success"][idx].astype(np.float32)
    )

    def obj(a):
        out = np.empty(len(a), dtype=object)
        out[:] = list(a)
        return out

    return dict(
        token_level_rewards=tlr.to(device),
        response_mask=mask.to(device),
        anchor_obs=obj(rows["anchor_obs"][idx]),
        index=obj(rows["group_id"][idx]),
        traj_index=obj(rows["traj_key"][idx]),
        step_index=rows["step_idx"][idx].astype(np.int64),
        actions=obj(rows["action"][idx]),
    )


def trajectory_inputs(batch, device):
    """verl / TRL: one row per trajectory; step k = model token 2k, env token 2k+1."""
    import torch

    T = batch.num_trajectories
    lens = batch.traj_len
    Lmax = int(2 * lens.max())
    pos = torch.arange(Lmax)[None, :]
    mask = ((pos % 2 == 0) & (pos < 2 * torch.as_tensor(lens)[:, None])).float()
    tlr = torch.zeros(T, Lmax)
    tlr[torch.arange(T), torch.as_tensor(2 * lens - 2)] = torch.as_tensor(
        batch.traj_success.astype(np.float32)
    )
    s = batch.steps
    anchors, actions = np.empty(T, dtype=object), np.empty(T, dtype=object)
    obs, act = s["anchor_obs"].to_numpy(), s["action"].to_numpy()
    off = batch.traj_offsets
    anchors[:] = [list(obs[off[t] : off[t + 1]]) for t in range(T)]
    actions[:] = [list(act[off[t] : off[t + 1]]) for t in range(T)]
    uid = np.empty(T, dtype=object)
    uid[:] = list(batch.groups["group_id"].to_numpy()[batch.traj_group])
    return tlr.to(device), mask.to(device), uid, anchors, actions


def rllm_groups(batch):
    s = batch.steps
    obs, act, rew = s["anchor_obs"].to_numpy(), s["action"].to_numpy(), s["reward"].to_numpy()
    off, gto = batch.traj_offsets, batch.group_traj_offsets
    groups = []
    for g in range(batch.num_groups):
        trajs = []
        for t in range(gto[g], gto[g + 1]):
            steps = [
                SimpleNamespace(
                    observation=obs[i], input=None, action=act[i], reward=float(rew[i]), advantage=None
                )
                for i in range(off[t], off[t + 1])
            ]
            trajs.append(SimpleNamespace(uid=str(t), reward=float(batch.traj_success[t]), steps=steps))
        groups.append(SimpleNamespace(group_id=f"g{g}:agent", trajectories=trajs))
    return groups


def timed(fn, repeats):
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def sync(device):
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def run_adapters(size, device, repeats):
    import torch

    from crbc_viz.integrations import rllm, roll, verl, verl_agent
    from crbc_viz.integrations._core import token_steps, trajectory_credit

    batch, rows = workload(size)
    rng = np.random.default_rng(0)
    idx = step_rows(rows, rng)
    va = verl_agent_inputs(rows, idx, device)
    nt_roll = SimpleNamespace(
        batch={"response_mask": va["response_mask"]},
        non_tensor_batch={
            "traj_group_id": va["index"],
            "traj_id": va["traj_index"],
            "step": va["step_index"],
            "state_hash": va["anchor_obs"],
            "step_scores": rows["reward"][idx].astype(np.float64),
            "success": rows["success"][idx].astype(bool),
        },
    )
    tlr, mask, uid, anchors, actions = trajectory_inputs(batch, device)
    nt_verl = {"uid": uid, "crbc_anchors": anchors, "crbc_actions": actions}
    groups = rllm_groups(batch)
    res = {"steps": batch.num_steps, "rows": len(idx), "trajectories": batch.num_trajectories}

    def case(name, fn):
        def call():
            fn()
            sync(device)

        res[name] = timed(call, repeats)

    case("verl-agent crbc", lambda: verl_agent.compute_advantage(**va))
    case("verl-agent gigpo (ours)", lambda: verl_agent.compute_advantage(**va, estimator="gigpo"))
    case("ROLL crbc", lambda: roll.response_level_advantages(nt_roll, device=device))
    case("verl crbc", lambda: verl.compute_advantage(tlr, mask, uid, None, non_tensor_batch=nt_verl))

    def trl_core():  # what CreditGRPOTrainer adds after TRL's scoring (one process)
        N = len(anchors)
        counts = torch.as_tensor([len(a) for a in anchors])
        K = int(counts.max())
        r = torch.zeros(N, K, dtype=torch.float64)
        r[torch.arange(N), counts - 1] = torch.as_tensor(batch.traj_success, dtype=torch.float64)
        grid = trajectory_credit(
            [i // 8 for i in range(N)],
            r,
            torch.arange(K).expand(N, K),
            counts,
            anchors,
            actions=actions,
            device=device,
            names=("anchors", "actions"),
        )
        tok_step, _ = token_steps(mask)
        torch.gather(grid, 1, tok_step.clamp(max=K - 1).to(grid.device))

    case("TRL crbc", trl_core)
    if str(device) == "cpu":
        case("rLLM crbc", lambda: rllm.assign_step_advantages(groups))
    return res, rows, idx, va


def run_gigpo(va, rows, idx, src, python, repeats):
    """verl-agent's own GiGPO on the same batch, in an interpreter that imports verl."""
    with tempfile.TemporaryDirectory() as d:
        np.savez(
            Path(d) / "in.npz",
            tlr=va["token_level_rewards"].cpu().numpy(),
            mask=va["response_mask"].cpu().numpy(),
            anchor=va["anchor_obs"].astype(str),
            index=va["index"].astype(str),
            traj=va["traj_index"].astype(str),
            step_rewards=rows["reward"][idx].astype(np.float32),
        )
        code = f"""
import sys, time, statistics, json, numpy as np, torch
sys.path.insert(0, {str(src)!r})
import contextlib, io
from gigpo.core_gigpo import compute_gigpo_outcome_advantage as f
z = np.load({str(Path(d) / 'in.npz')!r})
obj = lambda a: np.array(list(a), dtype=object)
args = dict(token_level_rewards=torch.as_tensor(z['tlr']), step_rewards=torch.as_tensor(z['step_rewards']),
            response_mask=torch.as_tensor(z['mask']), anchor_obs=obj(z['anchor']), index=obj(z['index']),
            traj_index=obj(z['traj']), mode='mean_norm')
def run():
    a = dict(args); a['token_level_rewards'] = args['token_level_rewards'].clone()
    with contextlib.redirect_stdout(io.StringIO()):
        f(**a)
run(); ts = []
for _ in range({repeats}):
    t = time.perf_counter(); run(); ts.append(time.perf_counter() - t)
print(json.dumps(statistics.median(ts)))
"""
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=3600, cwd=d)
        if p.returncode != 0:
            print(p.stderr[-2000:], file=sys.stderr)
            return None
        return json.loads(p.stdout.strip().splitlines()[-1])


def table(results, device):
    names = []
    for _, r in results:
        names += [k for k in r if k not in ("steps", "rows", "trajectories") and k not in names]
    head = (
        "| adapter | "
        + " | ".join(f"{s} ({r['steps']:,} steps, {r['rows']:,} rows)" for s, r in results)
        + " |"
    )
    lines = [head, "| --- |" + " --- |" * len(results)]
    for n in names:
        cells = []
        for _, r in results:
            v = r.get(n)
            cells.append("—" if v is None else f"{v * 1e3:,.1f} ms")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8k,256k")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gigpo-src", default=os.environ.get("CRBC_VIZ_GIGPO_SRC"))
    ap.add_argument("--gigpo-python", default=os.environ.get("CRBC_VIZ_TRAINERS_PYTHON"))
    ap.add_argument("--write", action="store_true", help="replace the block in bench/RESULTS.md")
    a = ap.parse_args(argv)
    results = []
    for size in a.sizes.split(","):
        reps = a.repeats if size != "256k" else max(1, min(a.repeats, 3))
        res, rows, idx, va = run_adapters(size, a.device, reps)
        if a.gigpo_src and a.gigpo_python:
            res["verl-agent GiGPO (theirs)"] = run_gigpo(va, rows, idx, a.gigpo_src, a.gigpo_python, reps)
        results.append((size, res))
        print(
            size,
            json.dumps({k: (round(v * 1e3, 2) if isinstance(v, float) else v) for k, v in res.items()}),
            flush=True,
        )
    md = table(results, a.device)
    machine = f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}"
    block = (
        f"{BEGIN}\nMachine: {machine}; device {a.device}. Command: `python -m bench.integrations_bench "
        f"--sizes {a.sizes} --device {a.device} --repeats {a.repeats}"
        f"{' --gigpo-src <verl-agent checkout> --gigpo-python .venv-trainers/bin/python' if a.gigpo_src else ''}"
        f" --write`; median of the repeats (256k: at most 3) after one warm-up.\n\n{md}\n{END}"
    )
    print(md)
    out = os.environ.get("OUT")
    if out:
        Path(out, f"integrations_{a.device}.md").write_text(block + "\n")
    if a.write:
        path = HERE / "RESULTS.md"
        text = path.read_text(encoding="utf-8")
        if BEGIN in text:
            text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
